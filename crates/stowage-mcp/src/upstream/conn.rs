//! One live connection to an upstream: requests out with the gateway's own ids, replies
//! matched back, and everything the upstream initiates handed on with where it came from.
//!
//! Request ids towards an upstream are the gateway's own (a counter per connection), so
//! requests from many clients never clash; the gateway keeps the mapping back to each
//! client's id. Every connection has a process-unique [`Conn::id`] and a [`ConnRole`]: the
//! upstream's control connection (catalog, shared-mode calls), one client's own upstream
//! session, or a pristine session that serves what cannot change session state. Both, and the
//! [`Origin`] of each inbound message, decide which client hears what the upstream says (the
//! gateway routes them; see `Uplink`).
//!
//! Closing a connection ([`Conn::close`]) lets go of its transport at once: a stdio child's
//! process group is killed then (not when the last reference goes), an HTTP session is ended
//! with `DELETE`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::http::HttpMeta;
use crate::jsonrpc::{Kind, Message, Raw, code};
use crate::session::Session;

/// Messages queued towards one upstream, and from it towards the gateway, before the sender
/// waits: a stalled upstream or a slow gateway costs bounded memory.
pub(crate) const LINK_CAPACITY: usize = 64;

/// Which stream of the upstream a message arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A transport without streams (stdio, in-process): the message itself must say whose it is.
    Pipe,
    /// The SSE stream of the gateway's request with this id (Streamable HTTP): the message
    /// belongs to that request.
    Request(u64),
    /// The standalone GET stream (Streamable HTTP): not tied to any request.
    Standalone,
}

/// What a transport delivers.
#[derive(Debug)]
pub(crate) enum Inbound {
    Line(Vec<u8>, Origin),
    /// A message over `max_message_bytes`, dropped; `head` is its start, to find its id.
    TooLong {
        head: Vec<u8>,
        limit: usize,
    },
    Closed(String),
}

/// A live transport: lines out, lines in, and whatever must stay alive with it.
pub(crate) struct Link {
    pub tx: mpsc::Sender<Vec<u8>>,
    pub rx: mpsc::Receiver<Inbound>,
    pub guard: Option<Box<dyn std::any::Any + Send + Sync>>,
    pub http: Option<Arc<HttpMeta>>,
}

/// What a connection is for.
#[derive(Debug, Clone)]
pub enum ConnRole {
    /// The upstream's supervised connection: lists, subscriptions for listen streams, and every
    /// call in shared mode.
    Control,
    /// One client's own upstream session (`session_mode = "per_client"`). `session` is unset
    /// for a connection several sessions share (a stateless (2026-07-28) user's, or the
    /// planner's sessions of one owner), which has no stream of its own.
    Client { key: String, session: Option<Weak<Session>> },
    /// A pristine session (`per_client` stdio upstreams): it only ever serves requests that
    /// cannot change what the session answers later (lists, reads, tools the server marks
    /// `readOnlyHint`), for the connections of one identity that declare nothing the server
    /// could ask back (see `upstream::sessions`). Nobody owns its session-level messages.
    Pool { key: String },
}

/// Why a call to an upstream failed. Messages are what a client sees in its error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The upstream is down (its supervisor is retrying) or did not come up in time.
    #[error("upstream {name} is unavailable: {reason}")]
    Unavailable {
        /// The upstream's configured name.
        name: String,
        /// Why it is down, as its health last said.
        reason: String,
    },
    /// The connection ended while the call waited for its answer.
    #[error("upstream {name} {reason} during the call")]
    Closed {
        /// The upstream's configured name.
        name: String,
        /// What happened, worded to follow the name (`closed`).
        reason: String,
    },
    /// A connection started for this call (a client's own session) failed to come up.
    #[error("upstream {name} {reason} during start-up")]
    StartupFailed {
        /// The upstream's configured name.
        name: String,
        /// The connect or handshake error, worded to follow the name.
        reason: String,
    },
    /// No answer within the request timeout (`gateway.request_timeout_secs` or the call's own).
    #[error("upstream {name} did not answer {method} within {secs:.1}s")]
    Timeout {
        /// The upstream's configured name.
        name: String,
        /// The JSON-RPC method that went unanswered.
        method: String,
        /// The timeout that passed, in seconds.
        secs: f64,
    },
    /// The upstream sent something that is not JSON-RPC.
    #[error("upstream {name} sent malformed json-rpc: {detail}")]
    Malformed {
        /// The upstream's configured name.
        name: String,
        /// What the parser said.
        detail: String,
    },
    /// One message was over `gateway.max_message_bytes`; the connection is dropped rather
    /// than buffering without bound.
    #[error("upstream {name} sent a message over the {limit} byte limit (gateway.max_message_bytes)")]
    TooLarge {
        /// The upstream's configured name.
        name: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// `per_client` mode: the upstream already has as many client sessions as allowed (open
    /// or starting), none of them idle.
    #[error(
        "upstream {name} already has {cap} client sessions open, none of them idle (gateway.max_upstream_sessions = {cap}); try again when one ends"
    )]
    Busy {
        /// The upstream's configured name.
        name: String,
        /// `gateway.max_upstream_sessions`.
        cap: usize,
    },
}

impl CallError {
    /// The JSON-RPC error code a client gets: a timeout's own, else "upstream unavailable".
    pub(crate) fn code(&self) -> i64 {
        match self {
            CallError::Timeout { .. } => code::REQUEST_TIMEOUT,
            _ => code::UPSTREAM_UNAVAILABLE,
        }
    }
}

type Reply = oneshot::Sender<Result<Message, CallError>>;

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// One live connection to an upstream.
pub struct Conn {
    /// Unique among this process's connections.
    pub id: u64,
    /// The upstream's index in the gateway.
    pub upstream: usize,
    pub name: String,
    pub role: ConnRole,
    tx: mpsc::Sender<Vec<u8>>,
    pending: Mutex<HashMap<u64, Reply>>,
    next_id: AtomicU64,
    pub(crate) closed: CancellationToken,
    /// Set when the upstream speaks only the stateless revision: stamped into every request.
    stateless_meta: Mutex<Option<Value>>,
    pub(crate) http: Option<Arc<HttpMeta>>,
    last_used: Mutex<Instant>,
    /// Why the connection ended, set by its reader before it marks it closed.
    end_reason: Mutex<Option<String>>,
    /// What keeps the transport alive (a child's process group, an HTTP session): dropped when
    /// the connection closes, which ends it.
    guard: Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("id", &self.id).field("name", &self.name).field("role", &self.role).finish_non_exhaustive()
    }
}

impl Conn {
    pub(crate) fn new(upstream: usize, name: &str, role: ConnRole, link: Link) -> (Arc<Conn>, mpsc::Receiver<Inbound>) {
        let conn = Arc::new(Conn {
            id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            upstream,
            name: name.to_owned(),
            role,
            tx: link.tx,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: CancellationToken::new(),
            stateless_meta: Mutex::new(None),
            http: link.http,
            last_used: Mutex::new(Instant::now()),
            end_reason: Mutex::new(None),
            guard: Mutex::new(link.guard),
        });
        (conn, link.rx)
    }

    /// Sends a message that needs no reply (a notification, or a response to the upstream).
    /// Never waits: an upstream that stopped reading loses it (counted).
    pub fn send(&self, msg: &Message) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(msg.to_line()) {
            metrics::counter!("stowage_messages_dropped_total", "reason" => "stalled_upstream").increment(1);
            tracing::warn!(target: "stowage::upstream", upstream = %self.name, "dropped a message: the upstream is not reading its input");
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Why the connection ended, once it has.
    pub fn end_reason(&self) -> Option<String> {
        self.end_reason.lock().clone()
    }

    /// Closes the connection: what waits for a reply fails, and the transport is let go of at
    /// once (a stdio child's process group killed, an HTTP session ended).
    pub fn close(&self) {
        self.closed.cancel();
        drop(self.guard.lock().take());
    }

    /// Whether a request to the upstream is still waiting for its reply.
    pub fn busy(&self) -> bool {
        !self.pending.lock().is_empty()
    }

    pub(crate) fn idle_for(&self) -> Duration {
        self.last_used.lock().elapsed()
    }

    /// Whether this upstream speaks only the stateless (2026-07-28) revision, whose
    /// interactive results may be `input_required`.
    pub fn is_stateless(&self) -> bool {
        self.stateless_meta.lock().is_some()
    }

    pub(crate) fn set_stateless(&self, meta: Value) {
        *self.stateless_meta.lock() = Some(meta);
    }

    /// Sends a request and returns the handle to await its reply. Waits while the upstream's
    /// input queue is full.
    pub async fn start(self: &Arc<Self>, method: &str, params: Option<Raw>) -> Result<Outstanding, CallError> {
        *self.last_used.lock() = Instant::now();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        let meta = self.stateless_meta.lock().clone();
        let params = match meta {
            Some(meta) => Some(stamp_meta(params, &meta)),
            None => params,
        };
        let msg = Message { jsonrpc: "2.0", id: Some(json!(id)), method: Some(method.to_owned()), params, ..Default::default() };
        let out = Outstanding { id, method: method.to_owned(), rx: Some(rx), conn: self.clone() };
        if self.tx.send(msg.to_line()).await.is_err() {
            self.pending.lock().remove(&id);
            return Err(CallError::Closed { name: self.name.clone(), reason: "closed".into() });
        }
        Ok(out)
    }

    fn fail_all(&self, err: CallError) {
        let pending: Vec<_> = self.pending.lock().drain().collect();
        for (_, reply) in pending {
            let _ = reply.send(Err(err.clone()));
        }
    }

    fn fail(&self, id: u64, err: CallError) -> bool {
        match self.pending.lock().remove(&id) {
            Some(reply) => reply.send(Err(err)).is_ok(),
            None => false,
        }
    }
}

/// Adds the stateless `_meta` envelope keys to a request's params.
fn stamp_meta(params: Option<Raw>, meta: &Value) -> Raw {
    let mut p: Value = params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or_else(|| json!({}));
    if let (Some(obj), Some(meta)) = (p.as_object_mut(), meta.as_object()) {
        let m = obj.entry("_meta").or_insert_with(|| json!({}));
        if let Some(m) = m.as_object_mut() {
            for (k, v) in meta {
                m.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    crate::jsonrpc::to_raw(&p)
}

/// A request in flight to an upstream. Dropping it before the reply arrives cancels the
/// request upstream (`notifications/cancelled`), so a client that goes away never leaves a
/// call running behind it.
pub struct Outstanding {
    pub id: u64,
    method: String,
    rx: Option<oneshot::Receiver<Result<Message, CallError>>>,
    conn: Arc<Conn>,
}

impl Outstanding {
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// Waits for the reply; on timeout the request is cancelled upstream.
    pub async fn wait(mut self, timeout: Duration) -> Result<Message, CallError> {
        let rx = self.rx.as_mut().expect("waited once");
        let out = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(CallError::Closed { name: self.conn.name.clone(), reason: "closed".into() }),
            Err(_) => Err(CallError::Timeout { name: self.conn.name.clone(), method: self.method.clone(), secs: timeout.as_secs_f64() }),
        };
        if !matches!(out, Err(CallError::Timeout { .. })) {
            self.rx = None;
        }
        out
    }

    /// Cancels the request upstream with `reason`.
    pub fn cancel(mut self, reason: &str) {
        self.cancel_inner(reason);
    }

    fn cancel_inner(&mut self, reason: &str) {
        if self.rx.take().is_some() && self.conn.pending.lock().remove(&self.id).is_some() {
            let note = Message::notification("notifications/cancelled", Some(&json!({"requestId": self.id, "reason": reason})));
            self.conn.send(&note);
        }
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.cancel_inner("the client went away");
    }
}

/// Something an upstream initiated, for the gateway to route.
#[derive(Debug)]
pub struct Initiated {
    pub conn: Arc<Conn>,
    pub msg: Message,
    pub origin: Origin,
}

/// Reads `rx` until the connection ends: replies to their callers, in-call notifications
/// straight to their clients (in order with the replies), everything else to `initiated`.
/// Records why the connection ended before marking it closed.
pub(crate) async fn read_loop(
    conn: Arc<Conn>,
    mut rx: mpsc::Receiver<Inbound>,
    initiated: mpsc::Sender<Initiated>,
    uplink: Arc<dyn super::Uplink>,
) {
    let reason = loop {
        let item = tokio::select! {
            item = rx.recv() => item,
            _ = conn.closed.cancelled() => break "was closed by the gateway".to_owned(),
        };
        let (line, origin) = match item {
            Some(Inbound::Line(line, origin)) => (line, origin),
            Some(Inbound::TooLong { head, limit }) => {
                let err = CallError::TooLarge { name: conn.name.clone(), limit };
                tracing::warn!(target: "stowage::upstream", upstream = %conn.name, "{err}");
                if let Some(id) = scan_id(&head) {
                    conn.fail(id, err);
                }
                continue;
            }
            Some(Inbound::Closed(reason)) => break reason,
            None => break "closed".to_owned(),
        };
        // The line is given up: a big result keeps its memory (no second 50 MB copy). Parsing
        // a big line takes tens of milliseconds of CPU: it runs on the CPU pool, so the
        // runtime's workers keep serving small calls meanwhile (the reader waits, which keeps
        // this upstream's messages in order).
        let parsed = if line.len() >= crate::jsonrpc::IN_PLACE_FROM {
            crate::cpu_pool::run(move || Message::parse_owned(line)).await
        } else {
            Message::parse_owned(line)
        };
        let msg = match parsed {
            Ok(m) => m,
            Err((line, e)) => {
                handle_malformed(&conn, &line, &e.to_string());
                continue;
            }
        };
        match msg.kind() {
            Kind::Response => {
                let id = msg.id.as_ref().and_then(Value::as_u64);
                let reply = id.and_then(|id| conn.pending.lock().remove(&id));
                match reply {
                    Some(reply) => {
                        // Idle counts from the last reply as well as the last request: a
                        // session whose one request took long is not idle the moment it ends.
                        *conn.last_used.lock() = Instant::now();
                        let _ = reply.send(Ok(msg));
                    }
                    None => {
                        tracing::debug!(target: "stowage::upstream", upstream = %conn.name, "reply to an unknown or cancelled request {:?}", msg.id)
                    }
                }
            }
            // In-call progress and logs go straight to their client (in order with the reply).
            Kind::Notification if matches!(msg.method.as_deref(), Some("notifications/progress" | "notifications/message")) => {
                uplink.in_call(&conn, origin, msg).await;
            }
            Kind::Request | Kind::Notification => {
                if initiated.send(Initiated { conn: conn.clone(), msg, origin }).await.is_err() {
                    break "was closed by the gateway".to_owned();
                }
            }
            // Rare: the message as re-serialised is enough to find its id and show its start.
            Kind::Invalid => handle_malformed(&conn, &msg.to_line(), "neither a request, a notification nor a response"),
        }
    };
    *conn.end_reason.lock() = Some(reason.clone());
    conn.fail_all(CallError::Closed { name: conn.name.clone(), reason });
    conn.close();
}

/// A line that is not a valid message. Output that is not JSON at all is usually a server
/// logging to stdout by mistake, so it is logged and skipped. JSON-looking output that does not
/// parse fails the call it names (its `"id"` is found by a scan), so the client gets a clear
/// error instead of a timeout.
fn handle_malformed(conn: &Conn, line: &[u8], detail: &str) {
    let preview: String = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
    match scan_id(line) {
        Some(id) if conn.fail(id, CallError::Malformed { name: conn.name.clone(), detail: detail.to_owned() }) => {
            tracing::warn!(target: "stowage::upstream", upstream = %conn.name, "malformed json-rpc: {detail}: {preview}");
        }
        _ => tracing::warn!(target: "stowage::upstream", upstream = %conn.name, "ignored output that is not json-rpc: {preview}"),
    }
}

/// Finds `"id":<number>` near the start of a broken message.
fn scan_id(line: &[u8]) -> Option<u64> {
    let head = &line[..line.len().min(crate::framing::HEAD_BYTES)];
    let text = String::from_utf8_lossy(head);
    let at = text.find("\"id\"")?;
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The `result` of a reply, or its error as a string.
pub(crate) fn result_value(reply: &Message) -> Result<Value, String> {
    if let Some(e) = &reply.error {
        return Err(e.get().to_owned());
    }
    reply.result.as_ref().map(|r| serde_json::from_str(r.get()).map_err(|e| e.to_string())).unwrap_or_else(|| Ok(json!({})))
}

#[cfg(test)]
mod tests {
    use super::scan_id;

    #[test]
    fn ids_are_found_in_broken_messages() {
        assert_eq!(scan_id(br#"{"jsonrpc":"2.0","id": 42,"result":{"content":[{"#), Some(42));
        assert_eq!(scan_id(br#"{"jsonrpc":"2.0","result":"#), None);
    }
}
