//! The Streamable HTTP downstream at `/mcp`, and `/metrics`.
//!
//! - `POST /mcp` carries one JSON-RPC message. `initialize` creates a session and returns its
//!   `Mcp-Session-Id`; later requests name it. A request is answered with an SSE stream
//!   (progress, logging and sampling requests first, then the response) when the client
//!   accepts `text/event-stream`, else with a JSON body. Notifications and responses get 202.
//!   A request without a session that is not `initialize` is served statelessly (the
//!   2026-07-28 revision), as a one-request session of the caller. A body over
//!   `max_request_bytes` is refused with a JSON-RPC error naming the limit, and at most
//!   [`MAX_IN_FLIGHT`] requests of one session run at once.
//! - `GET /mcp` opens the session's standalone stream for messages not tied to a request, or,
//!   with `Last-Event-ID`, resumes any of the session's streams ([`super::streams`]).
//! - `DELETE /mcp` ends the session.
//!
//! A session's SSE streams are resumable: a client whose stream drops mid-request reconnects
//! and gets the rest, and only a client that stays away past the resume window has its
//! request cancelled upstream (an upstream request in flight, `Outstanding`, cancels when dropped). A stream delivered whole
//! keeps nothing, and replay is bounded over all sessions (`resume_max_total_bytes`).
//!
//! A request the client cancels (`notifications/cancelled`) gets no response, as the
//! specification says, and its stream is left open, quiet but for keep-alives, until the
//! client lets go of it or its session ends: what the reference servers do. A stream that
//! ended without an answer after its priming event would make a client resume it (the
//! TypeScript SDK tries twice, gets a 400 each time and logs both). At most
//! [`MAX_IN_FLIGHT`] cancelled streams are held open per session; past that one simply ends.
//!
//! Sessions cannot lock an identity out: one idle past `session_idle_timeout_secs` is ended by
//! a sweeper, and at `max_sessions_per_identity` a new `initialize` ends the identity's least
//! recently used idle session (clients that never send `DELETE` abandon sessions all the
//! time). A client whose session ended gets 404, which the specification tells it to answer
//! with a new `initialize`. Only when every one of the identity's sessions is busy is the new
//! one refused.
//!
//! DNS-rebinding protection: the `Host` header must be a loopback name or in
//! `allowed_hosts`, and an `Origin`, when present, must be loopback or in `allowed_origins`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Extension, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::stream;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use stowage_http::{Authenticator, BrowserGuard, Identity, require_auth};

use crate::gateway::Gateway;
use crate::jsonrpc::{Incoming, Kind, Message, code, refuse_batch};
use crate::outbox::Outbox;
use crate::session::{Caller, Session, SessionKind};

/// Requests of one session handled at once; more get an error at once.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

use super::streams::{Attached, ReplayBudget, ResumeSettings, StreamHub, event_id};

const SESSION_HEADER: &str = "mcp-session-id";
const LAST_EVENT_ID: &str = "last-event-id";
/// The first revision whose clients expect the empty priming event (SEP-1699); older ones
/// may choke on an event without JSON.
const PRIMING_SINCE: &str = "2025-11-25";

struct HttpSession {
    session: Arc<Session>,
    hub: Arc<StreamHub>,
    /// The standalone stream's number in `hub`, once the client has opened it with a `GET`:
    /// until then nothing queues for a client that does not listen.
    standalone: Mutex<Option<u64>>,
    last_seen: Mutex<Instant>,
    permits: Arc<Semaphore>,
    /// Streams of cancelled requests held open (see the module's documentation).
    cancelled: Arc<Semaphore>,
}

impl HttpSession {
    fn touch(&self) {
        *self.last_seen.lock() = Instant::now();
    }

    fn end(&self, gw: &Gateway) {
        gw.close_session(&self.session);
        self.hub.close();
    }

    /// Nothing in flight either way and no stream attached: ending it loses nothing.
    fn idle(&self) -> bool {
        !self.hub.busy() && !self.session.busy()
    }
}

type Sessions = Arc<Mutex<HashMap<String, Arc<HttpSession>>>>;

#[derive(Clone)]
struct AppState {
    gw: Arc<Gateway>,
    sessions: Sessions,
    browser: Arc<BrowserGuard>,
    resume: ResumeSettings,
    /// Replay bytes over every session's streams.
    budget: Arc<ReplayBudget>,
    retry: Duration,
}

/// The `/mcp` and `/metrics` routes. `listen_host` joins the Host allow-list.
pub fn router(gw: Arc<Gateway>, listen: &str) -> Router {
    router_with_auth(gw, listen, None)
}

/// [`router`], with `/mcp` and `/metrics` behind bearer authentication when `auth` is set.
/// The caller's identity (tenant, user) joins each session's artifact scope, and a session
/// can only be used by the identity that opened it.
pub fn router_with_auth(gw: Arc<Gateway>, listen: &str, auth: Option<Arc<Authenticator>>) -> Router {
    let browser = Arc::new(BrowserGuard::new(listen, &gw.config.allowed_hosts, &gw.config.allowed_origins));
    let metrics_on = gw.config.metrics;
    let max_body = gw.config.max_request_bytes;
    let resume =
        ResumeSettings { window: Duration::from_millis(gw.config.resume_window_ms), max_buffer_bytes: gw.config.replay_buffer_bytes };
    let retry = Duration::from_millis(gw.config.sse_retry_ms);
    let sessions: Sessions = Arc::default();
    if gw.config.session_idle_timeout_secs > 0
        && let Ok(rt) = tokio::runtime::Handle::try_current()
    {
        rt.spawn(sweep(Arc::downgrade(&gw), Arc::downgrade(&sessions), Duration::from_secs(gw.config.session_idle_timeout_secs)));
    }
    let budget = ReplayBudget::new(gw.config.resume_max_total_bytes);
    let state = AppState { gw, sessions, browser, resume, budget, retry };
    let mut r = Router::new().route("/mcp", post(post_mcp).get(get_mcp).delete(delete_mcp));
    if metrics_on {
        r = r.route("/metrics", get(|| async { crate::metrics::render() }));
    }
    if let Some(auth) = auth {
        r = r.layer(middleware::from_fn_with_state(auth, require_auth));
    }
    r.layer(DefaultBodyLimit::max(max_body)).layer(middleware::from_fn_with_state(state.clone(), guard_origin)).with_state(state)
}

/// Host/Origin allow-list (DNS-rebinding protection).
async fn guard_origin(State(st): State<AppState>, req: Request, next: Next) -> Response {
    match st.browser.refuse(&req) {
        Some(why) => forbidden(&why),
        None => next.run(req).await,
    }
}

fn forbidden(message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code::INVALID_REQUEST, "message": message}});
    (StatusCode::FORBIDDEN, axum::Json(body)).into_response()
}

fn accepts_sse(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()).is_some_and(|a| a.contains("text/event-stream"))
}

fn json_rpc_error(status: StatusCode, c: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": c, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// Who an authenticated caller is; without authentication, the one local user.
fn caller(identity: Option<&Identity>) -> Caller {
    identity.map_or_else(Caller::local, |i| Caller { tenant: i.tenant_id.clone(), user: i.user_id.clone() })
}

/// Whether `session` belongs to the caller: same tenant and user as the identity that opened it.
fn owns(session: &Session, identity: Option<&Identity>) -> bool {
    let c = caller(identity);
    session.scope.tenant_id == c.tenant && session.scope.user_id == c.user
}

async fn post_mcp(
    State(st): State<AppState>,
    identity: Option<Extension<Identity>>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let identity = identity.map(|Extension(i)| i);
    let msg = match one_message(&st, body) {
        Ok(m) => m,
        Err(answer) => return *answer,
    };
    let sid = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let is_initialize = msg.method.as_deref() == Some("initialize");
    let (session, http, new_sid) = match (&sid, is_initialize) {
        // Another identity's session id gets the same answer as an unknown one.
        (Some(id), false) => match st.sessions.lock().get(id) {
            Some(s) if owns(&s.session, identity.as_ref()) => {
                s.touch();
                (s.session.clone(), Some(s.clone()), None)
            }
            _ => return json_rpc_error(StatusCode::NOT_FOUND, code::INVALID_REQUEST, "unknown or expired session"),
        },
        (_, true) => match open_http_session(&st, caller(identity.as_ref())) {
            Ok(hs) => (hs.session.clone(), Some(hs.clone()), Some(hs.session.id.clone())),
            Err(refused) => return *refused,
        },
        // Stateless (2026-07-28): a session for this request alone.
        (None, false) => (st.gw.open_session(SessionKind::Stateless, caller(identity.as_ref()), None), None, None),
    };
    if msg.kind() != Kind::Request {
        let (outbox, _rx) = Outbox::channel();
        let resp = st.gw.handle(&session, msg, &outbox).await;
        if http.is_none() {
            st.gw.close_session(&session);
        }
        return match resp {
            Some(resp) => ([(header::CONTENT_TYPE, "application/json")], resp.to_line()).into_response(),
            None => StatusCode::ACCEPTED.into_response(),
        };
    }
    let permit = match http.as_ref().map(|hs| hs.permits.clone().try_acquire_owned()) {
        Some(Err(_)) => {
            let id = msg.id.clone().unwrap_or(Value::Null);
            let e = Message::error(
                id,
                code::INTERNAL_ERROR,
                format!("this session already has {MAX_IN_FLIGHT} requests in flight; wait for one to finish"),
            );
            return (StatusCode::TOO_MANY_REQUESTS, [(header::CONTENT_TYPE, "application/json")], e.to_line()).into_response();
        }
        Some(Ok(p)) => Some(p),
        None => None,
    };
    let (tx, rx) = Outbox::channel();
    let gw = st.gw.clone();
    let priming = speaks_at_least(&session, PRIMING_SINCE);
    let stateless = http.is_none();
    let hold_cancelled = http.as_ref().map(|hs| hs.cancelled.clone()).filter(|_| accepts_sse(&headers));
    let task = tokio::spawn(async move {
        let resp = gw.handle(&session, msg, &tx).await;
        drop(permit);
        match resp {
            Some(r) => crate::session::deliver_or_log(&tx, r.to_line(), "a response").await,
            // Cancelled by the client: no response, and the stream stays open (holding `tx`)
            // until the client lets go of it (the pump then aborts this task after the resume
            // window) or the session ends.
            None => {
                if let Some(held) = hold_cancelled.and_then(|h| h.try_acquire_owned().ok()) {
                    session.closed().await;
                    drop(held);
                }
            }
        }
        if stateless {
            gw.close_session(&session);
        }
    });
    let mut response = reply(&st, &headers, http.as_deref(), rx, task, priming).await;
    if let Some(id) = new_sid
        && let Ok(v) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
}

/// The one JSON-RPC message a POST carries, or the answer to a body that is too large, not
/// JSON, or a batch (refused, as the current revision has no batches).
fn one_message(st: &AppState, body: Result<Bytes, axum::extract::rejection::BytesRejection>) -> Result<Message, Box<Response>> {
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let limit = st.gw.config.max_request_bytes;
            return Err(Box::new(json_rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                code::INVALID_REQUEST,
                &format!("request body over the {limit} byte limit (gateway.max_request_bytes)"),
            )));
        }
        Err(e) => return Err(Box::new(json_rpc_error(e.status(), code::INVALID_REQUEST, &e.body_text()))),
    };
    match Incoming::parse(&body) {
        Ok(Incoming::One(m)) => Ok(m),
        Ok(Incoming::Batch(items)) => Err(Box::new(match refuse_batch(&items) {
            Some(answers) => ([(header::CONTENT_TYPE, "application/json")], answers).into_response(),
            None => StatusCode::ACCEPTED.into_response(),
        })),
        Err(e) => Err(Box::new(json_rpc_error(StatusCode::BAD_REQUEST, code::PARSE_ERROR, &format!("parse error: {e}")))),
    }
}

/// A new HTTP session for `who` (on `initialize`), made room for within the identity's cap;
/// the refusal to send when every one of theirs is busy.
fn open_http_session(st: &AppState, who: Caller) -> Result<Arc<HttpSession>, Box<Response>> {
    if let Some(refused) = make_room(st, &who) {
        return Err(Box::new(refused));
    }
    let session = st.gw.open_session(SessionKind::Http, who, None);
    let hs = Arc::new(HttpSession {
        session: session.clone(),
        hub: Arc::new(StreamHub::new(st.resume, st.budget.clone())),
        standalone: Mutex::new(None),
        last_seen: Mutex::new(Instant::now()),
        permits: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        cancelled: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
    });
    // A client that stopped talking, with nothing open and nothing in flight, has most
    // likely gone without `DELETE` (health checks, CLIs): it no longer takes a shared
    // upstream's session-level messages from the clients still there.
    let absent_after = Duration::from_secs(st.gw.config.absent_after_secs);
    let weak = Arc::downgrade(&hs);
    session.set_presence(move || weak.upgrade().is_some_and(|hs| !hs.idle() || hs.last_seen.lock().elapsed() < absent_after));
    st.sessions.lock().insert(session.id.clone(), hs.clone());
    Ok(hs)
}

/// The HTTP answer to a request whose handling `task` runs: an SSE stream of what it sends
/// (resumable within a session), or, for a client that takes JSON only, its final message.
async fn reply(
    st: &AppState,
    headers: &HeaderMap,
    http: Option<&HttpSession>,
    rx: crate::outbox::OutboxRx,
    task: tokio::task::JoinHandle<()>,
    priming: bool,
) -> Response {
    if accepts_sse(headers) {
        return match http {
            // A session's request stream is resumable; the request outlives a dropped
            // connection for the resume window.
            Some(hs) => {
                let (number, attached) = hs.hub.open(rx, priming, Some(task.abort_handle()));
                sse_response(Some(number), attached, st.retry)
            }
            // Without a session there is nothing to resume against: a stateless request's
            // stream carries no ids, and hanging up cancels it at once.
            None => {
                let settings = ResumeSettings { window: Duration::ZERO, max_buffer_bytes: 0 };
                let hub = Arc::new(StreamHub::new(settings, st.budget.clone()));
                let (_, attached) = hub.open(rx, false, Some(task.abort_handle()));
                sse_response(None, attached, st.retry)
            }
        };
    }
    // JSON mode: only the final response is delivered; earlier messages are dropped.
    let guard = AbortOnDrop(task);
    let mut rx = rx;
    let mut last = None;
    while let Some(line) = rx.recv().await {
        last = Some(line);
    }
    drop(guard);
    match last {
        Some(line) => ([(header::CONTENT_TYPE, "application/json")], line).into_response(),
        None => StatusCode::ACCEPTED.into_response(),
    }
}

/// Makes room for one more session of `who`: at the cap, their least recently used idle
/// session is ended (its client gets 404 on its next request and initializes again). The
/// refusal, when every session is busy, is the answer to send instead.
fn make_room(st: &AppState, who: &Caller) -> Option<Response> {
    let cap = st.gw.config.max_sessions_per_identity;
    let victim = {
        let mut sessions = st.sessions.lock();
        let theirs: Vec<&Arc<HttpSession>> =
            sessions.values().filter(|hs| hs.session.scope.tenant_id == who.tenant && hs.session.scope.user_id == who.user).collect();
        if theirs.len() < cap {
            return None;
        }
        let open = theirs.len();
        let lru = theirs.into_iter().filter(|hs| hs.idle()).min_by_key(|hs| *hs.last_seen.lock()).map(|hs| hs.session.id.clone());
        let Some(id) = lru else {
            let message = format!(
                "this identity already has {open} sessions open, all busy (gateway.max_sessions_per_identity = {cap}); end one with DELETE /mcp or wait for one to finish"
            );
            return Some(json_rpc_error(StatusCode::TOO_MANY_REQUESTS, code::INVALID_REQUEST, &message));
        };
        sessions.remove(&id)
    };
    if let Some(hs) = victim {
        metrics::counter!("stowage_sessions_evicted_total").increment(1);
        tracing::debug!(target: "stowage::http", session = %hs.session.id, "session ended for a new one of the same identity (max_sessions_per_identity = {cap})");
        hs.end(&st.gw);
    }
    None
}

/// Whether the session negotiated `version` or a later revision (dates compare as strings).
fn speaks_at_least(session: &Session, version: &str) -> bool {
    session.protocol.lock().as_deref().is_some_and(|p| p >= version)
}

/// An SSE response over `attached`. Frames get ids `{stream}-{seq}` when the stream is
/// resumable; the empty frame is the priming event (an id, the retry hint and an empty
/// `data:` line). Written by hand rather than with axum's `Sse`, which omits an empty data
/// field and so cannot express the priming event.
fn sse_response(number: Option<u64>, attached: Attached, retry: Duration) -> Response {
    const KEEP_ALIVE: Duration = Duration::from_secs(15);
    let frames = stream::unfold(attached, move |mut rx: Attached| async move {
        let chunk = match tokio::time::timeout(KEEP_ALIVE, rx.recv()).await {
            Err(_) => Bytes::from_static(b":\n\n"),
            Ok(None) => return None,
            Ok(Some((seq, data))) => sse_frame(number.map(|n| event_id(n, seq)).as_deref(), &data, retry),
        };
        Some((Ok::<_, Infallible>(chunk), rx))
    });
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], axum::body::Body::from_stream(frames))
        .into_response()
}

fn sse_frame(id: Option<&str>, data: &[u8], retry: Duration) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + 48);
    if let Some(id) = id {
        out.extend_from_slice(format!("id: {id}\n").as_bytes());
    }
    if data.is_empty() {
        out.extend_from_slice(format!("retry: {}\ndata: \n\n", retry.as_millis()).as_bytes());
        return out.into();
    }
    out.extend_from_slice(b"event: message\n");
    // JSON from an upstream may be pretty-printed: every line needs its own `data:` field.
    for line in data.split(|&b| b == b'\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.push(b'\n');
    }
    out.push(b'\n');
    out.into()
}

/// Ends sessions idle longer than `idle`, until the router is gone.
async fn sweep(gw: Weak<Gateway>, sessions: Weak<Mutex<HashMap<String, Arc<HttpSession>>>>, idle: Duration) {
    let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(60));
    loop {
        tokio::time::sleep(every).await;
        let (Some(sessions), Some(gw)) = (sessions.upgrade(), gw.upgrade()) else { return };
        let expired: Vec<Arc<HttpSession>> = {
            let mut map = sessions.lock();
            let ids: Vec<String> =
                map.iter().filter(|(_, hs)| hs.last_seen.lock().elapsed() > idle && hs.idle()).map(|(id, _)| id.clone()).collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        metrics::counter!("stowage_sessions_expired_total").increment(expired.len() as u64);
        for hs in expired {
            tracing::debug!(target: "stowage::http", session = %hs.session.id, "session expired after {idle:?} idle");
            hs.end(&gw);
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn get_mcp(State(st): State<AppState>, identity: Option<Extension<Identity>>, headers: HeaderMap) -> Response {
    let identity = identity.map(|Extension(i)| i);
    let Some(sid) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    };
    let hs = st.sessions.lock().get(sid).cloned().filter(|hs| owns(&hs.session, identity.as_ref()));
    let Some(hs) = hs else {
        return json_rpc_error(StatusCode::NOT_FOUND, code::INVALID_REQUEST, "unknown or expired session");
    };
    hs.touch();
    if let Some(last) = headers.get(LAST_EVENT_ID).and_then(|v| v.to_str().ok()) {
        return match hs.hub.resume(last) {
            Ok((number, attached)) => {
                metrics::counter!("stowage_stream_resumes_total").increment(1);
                sse_response(Some(number), attached, st.retry)
            }
            Err(e) => json_rpc_error(StatusCode::BAD_REQUEST, code::INVALID_REQUEST, &e.to_string()),
        };
    }
    // The first GET opens the standalone stream; a later one replaces the earlier connection
    // (which may be half dead) and gets what arrived while nobody was attached.
    let priming = speaks_at_least(&hs.session, PRIMING_SINCE);
    let mut standalone = hs.standalone.lock();
    let number = match *standalone {
        Some(n) => n,
        None => {
            let (outbox, rx) = Outbox::channel();
            let (n, attached) = hs.hub.open(rx, priming, None);
            hs.session.set_notify(Some(outbox));
            *standalone = Some(n);
            return sse_response(Some(n), attached, st.retry);
        }
    };
    drop(standalone);
    match hs.hub.reattach(number, priming) {
        Some(attached) => sse_response(Some(number), attached, st.retry),
        None => json_rpc_error(StatusCode::NOT_FOUND, code::INVALID_REQUEST, "unknown or expired session"),
    }
}

async fn delete_mcp(State(st): State<AppState>, identity: Option<Extension<Identity>>, headers: HeaderMap) -> Response {
    let identity = identity.map(|Extension(i)| i);
    let Some(sid) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let removed = {
        let mut sessions = st.sessions.lock();
        let mine = sessions.get(sid).is_some_and(|hs| owns(&hs.session, identity.as_ref()));
        mine.then(|| sessions.remove(sid)).flatten()
    };
    match removed {
        Some(hs) => {
            hs.end(&st.gw);
            StatusCode::OK.into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_frames_are_well_formed() {
        let retry = Duration::from_millis(1500);
        assert_eq!(&sse_frame(Some("3-0"), b"", retry)[..], b"id: 3-0\nretry: 1500\ndata: \n\n");
        assert_eq!(&sse_frame(None, b"{\"a\":\r\n1}", retry)[..], b"event: message\ndata: {\"a\":\ndata: 1}\n\n");
    }
}
