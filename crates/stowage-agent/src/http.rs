//! `POST /agent/runs`: one run per request, answered as `text/event-stream` with the seed's
//! Appendix B events (`chunk`, `step`, `artifact_chunk`, then `done` or `error`).
//!
//! The body is `{"query": "…", "session": "…"?}`. The route sits behind the same
//! authentication as `/mcp` (the binary passes the same [`Authenticator`]); the run belongs to
//! the caller's tenant and user, in the agent session named in the `stowage-agent-session`
//! response header (pass it back as `session` to continue after `requires_followup`). A
//! client that goes away does not stop the run: its artifacts are stored whole either way.
//!
//! A run calls tools, so a web page must not be able to start one from a user's browser: the
//! route sits behind [`stowage_http::guard_json_api`] with `/mcp`'s Host and Origin lists (a
//! JSON body, whose cross-site sending needs a CORS preflight this route never grants; a
//! loopback or allowed `Origin` and `Host`, which also defeats DNS rebinding).

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use stowage_http::{Authenticator, BrowserGuard, Identity, guard_json_api, require_auth};
use stowage_mcp::Caller;
use tokio::sync::mpsc;

use crate::events::AgentEvent;
use crate::planner::{Planner, RunRequest};

/// The response header naming the run's agent session.
pub const SESSION_HEADER: &str = "stowage-agent-session";
/// Events waiting for a slow client; beyond it the run waits (the queue is bounded).
const EVENT_QUEUE: usize = 256;

/// The planner, set once the gateway it runs on exists (the routes are built before).
pub type PlannerSlot = Arc<OnceLock<Arc<Planner>>>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunBody {
    query: String,
    #[serde(default)]
    session: Option<String>,
}

/// The `/agent/runs` route over `planner`, behind `auth` when given, for browsers that
/// `guard` lets in (the gateway's Host and Origin lists).
pub fn router(planner: PlannerSlot, auth: Option<Arc<Authenticator>>, guard: Arc<BrowserGuard>) -> Router {
    let mut r = Router::new().route("/agent/runs", post(run)).with_state(planner);
    if let Some(auth) = auth {
        r = r.route_layer(middleware::from_fn_with_state(auth, require_auth));
    }
    r.route_layer(middleware::from_fn_with_state(guard, guard_json_api))
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": {"code": code, "message": message.into()}}))).into_response()
}

async fn run(State(slot): State<PlannerSlot>, identity: Option<Extension<Identity>>, body: Bytes) -> Response {
    let Some(planner) = slot.get().cloned() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "agent_unavailable", "the agent is not configured: set [agent] base_url and model");
    };
    let body: RunBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the body must be {{\"query\": \"…\", \"session\": \"…\"?}}: {e}"),
            );
        }
    };
    if body.query.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "bad_request", "the query is empty: send {\"query\": \"your question\"}");
    }
    let caller = identity.map_or_else(Caller::local, |Extension(i)| Caller { tenant: i.tenant_id, user: i.user_id });
    let session = match planner.resolve_session(&caller, body.session) {
        Ok(s) => s,
        // Another caller's session answers exactly like an unknown one.
        Err(e) => return error(StatusCode::NOT_FOUND, e.code(), e.to_string()),
    };
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let req = RunRequest { query: body.query, caller, session: Some(session.clone()) };
    tokio::spawn(async move {
        // One request, one failure: a panic in the run ends this stream with an error event,
        // not a silent end of stream.
        let events = tx.clone();
        if tokio::spawn(async move { planner.run(req, tx).await }).await.is_err() {
            let error = "the run failed unexpectedly; see the server log".to_owned();
            let _ = events.send(AgentEvent::Error { error, code: "internal_error".into(), trace_id: String::new() }).await;
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|e| Ok::<_, std::convert::Infallible>(Bytes::from(e.to_sse())));
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&session) {
        h.insert(SESSION_HEADER, v);
    }
    resp
}
