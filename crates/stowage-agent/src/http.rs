//! `POST /agent/runs`: one run per request, answered as `text/event-stream` with the run's
//! events (`chunk`, `answer_reset`, `step`, `artifact_chunk`, then `done` or `error`), and a
//! comment line (`: heartbeat`) every 15 s, so proxies and clients keep a stream open through a
//! long tool call.
//! `DELETE /agent/runs/{id}` cancels a run (the id is in the `stowage-agent-run` response
//! header and the `done` event's `run.trace_id`): it ends at once with a partial payload. While
//! the model fails its check, both answer 503 with the model's error (the rest of the gateway
//! serves on).
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
use stowage_core::ErrorCode;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Path;
use axum::extract::{Extension, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use stowage_http::{Authenticator, BrowserGuard, Identity, guard_json_api, require_auth};
use stowage_mcp::Caller;
use tokio::sync::mpsc;

use crate::events::AgentEvent;
use crate::planner::{Planner, RunRequest};

/// The response header naming the run's agent session.
pub(crate) const SESSION_HEADER: &str = "stowage-agent-session";
/// The response header naming the run (what `DELETE /agent/runs/{id}` takes).
pub const RUN_HEADER: &str = "stowage-agent-run";
/// How often an open run stream gets a comment line.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(15);
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
    router_with_heartbeat(planner, auth, guard, HEARTBEAT)
}

/// [`router`] with another heartbeat interval (tests).
pub fn router_with_heartbeat(
    planner: PlannerSlot,
    auth: Option<Arc<Authenticator>>,
    guard: Arc<BrowserGuard>,
    heartbeat: std::time::Duration,
) -> Router {
    let state = RouteState { planner, heartbeat };
    let mut runs = Router::new().route("/agent/runs", post(run)).with_state(state.clone());
    // A DELETE has no body to be JSON; it cannot be sent cross-site without a CORS preflight
    // this route never grants, and the Host and Origin lists still apply.
    let mut cancels = Router::new().route("/agent/runs/{id}", delete(cancel)).with_state(state);
    if let Some(auth) = auth {
        runs = runs.route_layer(middleware::from_fn_with_state(auth.clone(), require_auth));
        cancels = cancels.route_layer(middleware::from_fn_with_state(auth, require_auth));
    }
    let runs = runs.route_layer(middleware::from_fn_with_state(guard.clone(), guard_json_api));
    let cancels = cancels.route_layer(middleware::from_fn_with_state(guard, guard_browser));
    runs.merge(cancels)
}

/// The Host and Origin checks of [`guard_json_api`], for a request without a body.
async fn guard_browser(State(guard): State<Arc<BrowserGuard>>, req: axum::extract::Request, next: middleware::Next) -> Response {
    if let Some(why) = guard.refuse(&req) {
        return error(StatusCode::FORBIDDEN, "forbidden", why);
    }
    next.run(req).await
}

#[derive(Clone)]
struct RouteState {
    planner: PlannerSlot,
    heartbeat: std::time::Duration,
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": {"code": code, "message": message.into()}}))).into_response()
}

fn caller_of(identity: Option<Extension<Identity>>) -> Caller {
    identity.map_or_else(Caller::local, |Extension(i)| Caller { tenant: i.tenant_id, user: i.user_id })
}

/// The planner, when it is configured and its model answers.
async fn ready(slot: &PlannerSlot) -> Result<Arc<Planner>, Response> {
    let Some(planner) = slot.get().cloned() else {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "agent_unavailable",
            "the agent is not configured: set [agent] base_url and model",
        ));
    };
    if let Err(e) = planner.ensure_model().await {
        return Err(error(StatusCode::SERVICE_UNAVAILABLE, e.code(), format!("the agent's model is not available: {e}")));
    }
    Ok(planner)
}

async fn cancel(State(state): State<RouteState>, identity: Option<Extension<Identity>>, Path(id): Path<String>) -> Response {
    let Some(planner) = state.planner.get().cloned() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "agent_unavailable", "the agent is not configured: set [agent] base_url and model");
    };
    if planner.cancel(&caller_of(identity), &id) {
        (StatusCode::ACCEPTED, axum::Json(json!({"cancelled": id}))).into_response()
    } else {
        // Another caller's run answers exactly like one that does not exist (or has ended).
        error(StatusCode::NOT_FOUND, "unknown_run", format!("no run {id} of yours is in progress"))
    }
}

async fn run(State(state): State<RouteState>, identity: Option<Extension<Identity>>, body: Bytes) -> Response {
    let planner = match ready(&state.planner).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let body: RunBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                ErrorCode::BadRequest.as_str(),
                format!("the body must be {{\"query\": \"…\", \"session\": \"…\"?}}: {e}"),
            );
        }
    };
    if body.query.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, ErrorCode::BadRequest.as_str(), "the query is empty: send {\"query\": \"your question\"}");
    }
    let caller = caller_of(identity);
    let session = match planner.resolve_session(&caller, body.session) {
        Ok(s) => s,
        // Another caller's session answers exactly like an unknown one.
        Err(e) => return error(StatusCode::NOT_FOUND, e.code(), e.to_string()),
    };
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let run_id = Planner::new_run_id();
    let req = RunRequest { query: body.query, caller, session: Some(session.clone()), run_id: Some(run_id.clone()) };
    tokio::spawn(async move {
        // One request, one failure: a panic in the run ends this stream with an error event,
        // not a silent end of stream.
        let events = tx.clone();
        if tokio::spawn(async move { planner.run(req, tx).await }).await.is_err() {
            let error = "the run failed unexpectedly; see the server log".to_owned();
            let _ = events.send(AgentEvent::Error { error, code: "internal_error".into(), trace_id: String::new() }).await;
        }
    });
    let events = tokio_stream::wrappers::ReceiverStream::new(rx).map(|e| Bytes::from(e.to_sse()));
    // Heartbeats while the run is on; the stream ends with the run's last event.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + state.heartbeat, state.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let beats = tokio_stream::wrappers::IntervalStream::new(tick).map(|_| Bytes::from_static(b": heartbeat\n\n"));
    let stream = futures::stream::select(events.map(Some).chain(futures::stream::once(async { None::<Bytes> })), beats.map(Some))
        .take_while(|b: &Option<Bytes>| std::future::ready(b.is_some()))
        .map(|b| Ok::<_, std::convert::Infallible>(b.unwrap_or_default()));
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&session) {
        h.insert(SESSION_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_str(&run_id) {
        h.insert(RUN_HEADER, v);
    }
    resp
}
