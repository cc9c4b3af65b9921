//! `GET /api/events`: the page's live stream (SSE), and the gateway session it lives in.
//!
//! Opening the stream opens a gateway session for the page (its `ready` event names it); the
//! page passes that id to its calls, reads and subscriptions, so its artifacts are filed
//! under it and its resource updates come back here. The stream carries:
//! - `gateway`: the gateway's events ([`stowage_mcp::events::GatewayEvent`]) about this
//!   caller's own calls, and every upstream going up or down;
//! - `notification`: what the gateway sends the page's session (resource updates, list
//!   changes);
//! - `lagged`: how many events a page that fell behind missed (the bus is bounded and never
//!   waits for a slow reader).
//!
//! The session ends with the stream: closing the page unsubscribes what it subscribed.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use stowage_http::{ApiError, Identity};
use stowage_mcp::events::GatewayEvent;
use stowage_mcp::{Caller, Outbox, SessionKind};
use tokio::sync::{broadcast, mpsc};

use crate::api::{Api, caller};

/// Frames waiting for a slow page; beyond it, events are dropped (the bus tells it how many).
const FRAME_QUEUE: usize = 64;
/// A comment line this often keeps proxies from closing an idle stream and notices a page
/// that went away.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One SSE frame: `event:` and a one-line JSON `data:`.
fn frame(event: &str, data: &impl serde::Serialize) -> Bytes {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "null".into());
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// Whether `caller` may see `event`: its own calls, and the upstreams' state.
fn visible(event: &GatewayEvent, caller: &Caller) -> bool {
    let owner = match event {
        // What an upstream's tools take is catalog-wide, like its state: no caller's data.
        GatewayEvent::UpstreamUp { .. } | GatewayEvent::UpstreamDown { .. } | GatewayEvent::InputsDetected { .. } => return true,
        GatewayEvent::ToolCallStarted { owner, .. }
        | GatewayEvent::ToolCallFinished { owner, .. }
        | GatewayEvent::Offloaded { owner, .. }
        | GatewayEvent::FinalFit { owner, .. }
        | GatewayEvent::StoreFailed { owner, .. }
        | GatewayEvent::InputsFilled { owner, .. } => owner,
    };
    owner.tenant == caller.tenant && owner.user == caller.user
}

pub(crate) async fn stream(State(api): State<Api>, identity: Option<Extension<Identity>>) -> Result<Response, ApiError> {
    let gw = api.gateway()?;
    let (outbox, mut notes) = Outbox::channel();
    let session = gw.open_session(SessionKind::InProcess, caller(identity), Some(outbox));
    // The caller as the session has it: an anonymous caller is the local user.
    let me = Caller { tenant: session.scope.tenant_id.clone(), user: session.scope.user_id.clone() };
    api.pages.add(session.clone(), me.clone());
    let mut bus = gw.events().subscribe();
    let (tx, rx) = mpsc::channel::<Bytes>(FRAME_QUEUE);
    tokio::spawn(async move {
        let send = |b: Bytes| {
            let tx = tx.clone();
            async move { tx.send(b).await.is_ok() }
        };
        let mut alive = send(frame("ready", &json!({"session": session.id}))).await;
        let mut tick = tokio::time::interval(KEEP_ALIVE);
        tick.tick().await;
        while alive {
            alive = tokio::select! {
                e = bus.recv() => match e {
                    Ok(e) if visible(&e, &me) => send(frame("gateway", &*e)).await,
                    Ok(_) => true,
                    Err(broadcast::error::RecvError::Lagged(n)) => send(frame("lagged", &json!({"missed": n}))).await,
                    Err(broadcast::error::RecvError::Closed) => false,
                },
                line = notes.recv() => match line {
                    Some(line) => match serde_json::from_slice::<Value>(&line) {
                        Ok(m) if m.get("method").is_some() => {
                            send(frame("notification", &json!({"method": m["method"], "params": m.get("params")}))).await
                        }
                        _ => true,
                    },
                    None => false,
                },
                _ = tick.tick() => send(Bytes::from_static(b": keep-alive\n\n")).await,
                () = tx.closed() => false,
            };
        }
        api.pages.remove(&session.id);
        gw.close_session(&session);
    });
    let frames = futures::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(rx), Ok::<_, std::convert::Infallible>);
    let body = Body::from_stream(frames);
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_mcp::events::EventOwner;

    #[test]
    fn a_caller_sees_its_own_calls_and_every_upstream() {
        let me = Caller { tenant: Some("t".into()), user: Some("u".into()) };
        let owner = |user: &str| EventOwner { tenant: Some("t".into()), user: Some(user.into()), session: None, trace: None };
        let started = |user: &str| GatewayEvent::ToolCallStarted { call: 1, owner: owner(user), tool: "x".into(), upstream: "fx".into() };
        assert!(visible(&started("u"), &me));
        assert!(!visible(&started("v"), &me));
        assert!(visible(&GatewayEvent::UpstreamUp { upstream: "fx".into() }, &me));
        let filled = |user: &str| GatewayEvent::InputsFilled { call: 2, owner: owner(user), tool: "x".into(), inputs: Vec::new() };
        assert!(visible(&filled("u"), &me));
        assert!(!visible(&filled("v"), &me), "what another user's call filled in is theirs");
        assert!(visible(&GatewayEvent::InputsDetected { upstream: "fx".into(), tools: Vec::new() }, &me));
        assert_eq!(&frame("ready", &json!({"session": "s"}))[..], b"event: ready\ndata: {\"session\":\"s\"}\n\n");
    }
}
