//! Upstream MCP servers: one supervised connection each, shared by every downstream session.
//!
//! An [`Upstream`] owns a supervisor task that connects ([`stdio`], [`http`] or the in-process
//! demo), performs the MCP handshake as a client, publishes the live [`Conn`], and when the
//! connection dies reconnects with exponential backoff. Calls made while it is down wait for
//! the next connection until their timeout.
//!
//! Request ids towards an upstream are the gateway's own (a counter per connection), so
//! requests from many downstream sessions never clash; the gateway keeps the mapping back to
//! each client's id. Messages the upstream initiates (notifications, sampling/elicitation/roots
//! requests) are handed to the gateway as [`UpstreamEvent`]s.

pub mod http;
pub mod stdio;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{TransportSpec, UpstreamSpec};
use crate::jsonrpc::{Kind, Message, code};
use crate::routes::CallRoutes;

/// Protocol version the gateway asks upstreams for first.
pub const UPSTREAM_PROTOCOL: &str = "2025-11-25";
/// The stateless revision, used when an upstream has no `initialize`.
pub const STATELESS_PROTOCOL: &str = "2026-07-28";

/// What a transport delivers.
#[derive(Debug)]
pub enum Inbound {
    Line(Vec<u8>),
    Closed(String),
}

/// A live transport: lines out, lines in, and whatever must stay alive with it.
pub struct Link {
    pub tx: mpsc::UnboundedSender<Vec<u8>>,
    pub rx: mpsc::UnboundedReceiver<Inbound>,
    pub guard: Option<Box<dyn std::any::Any + Send + Sync>>,
    pub http: Option<Arc<http::HttpMeta>>,
}

/// Something the upstream initiated, for the gateway to route.
#[derive(Debug)]
pub enum UpstreamEvent {
    /// A notification or a request from upstream `index`.
    Message { index: usize, conn: Arc<Conn>, msg: Message },
    /// The upstream (re)connected and finished its handshake.
    Ready { index: usize },
    /// The connection died; the supervisor will retry.
    Down { index: usize, reason: String },
}

/// Why a call to an upstream failed. Messages are what a client sees in its error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("upstream {name} is unavailable: {reason}")]
    Unavailable { name: String, reason: String },
    #[error("upstream {name} {reason} during the call")]
    Closed { name: String, reason: String },
    #[error("upstream {name} did not answer {method} within {secs:.1}s")]
    Timeout { name: String, method: String, secs: f64 },
    #[error("upstream {name} sent malformed json-rpc: {detail}")]
    Malformed { name: String, detail: String },
}

impl CallError {
    pub fn code(&self) -> i64 {
        match self {
            CallError::Timeout { .. } => code::REQUEST_TIMEOUT,
            _ => code::UPSTREAM_UNAVAILABLE,
        }
    }
}

type Reply = oneshot::Sender<Result<Message, CallError>>;

/// One live connection to an upstream.
pub struct Conn {
    pub name: String,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    pending: Mutex<HashMap<u64, Reply>>,
    next_id: AtomicU64,
    closed: CancellationToken,
    /// Set when the upstream speaks only the stateless revision: stamped into every request.
    stateless_meta: Mutex<Option<Value>>,
    http: Option<Arc<http::HttpMeta>>,
    _guard: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Conn {
    /// Sends a message that needs no reply (a notification, or a response to the upstream).
    pub fn send(&self, msg: &Message) {
        let _ = self.tx.send(msg.to_line());
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Whether this upstream speaks only the stateless (2026-07-28) revision, whose
    /// interactive results may be `input_required`.
    pub fn is_stateless(&self) -> bool {
        self.stateless_meta.lock().unwrap().is_some()
    }

    /// Sends a request and returns the handle to await its reply.
    pub fn start(self: &Arc<Self>, method: &str, params: Option<Box<RawValue>>) -> Outstanding {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let params = match (params, self.stateless_meta.lock().unwrap().as_ref()) {
            (p, Some(meta)) => Some(stamp_meta(p, meta)),
            (p, None) => p,
        };
        let msg = Message { jsonrpc: "2.0", id: Some(json!(id)), method: Some(method.to_owned()), params, ..Default::default() };
        let _ = self.tx.send(msg.to_line());
        Outstanding { id, method: method.to_owned(), rx: Some(rx), conn: self.clone() }
    }

    fn fail_all(&self, err: CallError) {
        let pending: Vec<_> = self.pending.lock().unwrap().drain().collect();
        for (_, reply) in pending {
            let _ = reply.send(Err(err.clone()));
        }
    }
}

/// Adds the stateless `_meta` envelope keys to a request's params.
fn stamp_meta(params: Option<Box<RawValue>>, meta: &Value) -> Box<RawValue> {
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
        if self.rx.take().is_some() && self.conn.pending.lock().unwrap().remove(&self.id).is_some() {
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

/// A supervised upstream server.
pub struct Upstream {
    pub index: usize,
    pub spec: UpstreamSpec,
    conn: watch::Sender<Option<Arc<Conn>>>,
    /// The upstream's initialize (or server/discover) result.
    info: Mutex<Option<Value>>,
    last_error: Arc<Mutex<String>>,
    env: UpstreamEnv,
    /// For a stateless upstream: the resources to hear about and the running listen request.
    listen: Mutex<ListenState>,
}

#[derive(Default)]
struct ListenState {
    uris: std::collections::BTreeSet<String>,
    task: Option<tokio::task::AbortHandle>,
}

/// What every upstream of one gateway shares.
#[derive(Clone)]
pub struct UpstreamEnv {
    /// Where upstream-initiated messages and connection changes go.
    pub events: mpsc::UnboundedSender<UpstreamEvent>,
    /// In-call notifications are delivered through this directly, in order with responses.
    pub routes: Arc<CallRoutes>,
    pub shutdown: CancellationToken,
    pub max_message_bytes: usize,
    /// (first delay, longest delay) between restarts.
    pub backoff: (Duration, Duration),
    pub demo: Option<DemoFactory>,
}

/// The pipe ends of an in-process server: (what it writes, what it reads).
pub type DemoPipes = (Box<dyn tokio::io::AsyncRead + Send + Unpin>, Box<dyn tokio::io::AsyncWrite + Send + Unpin>);

/// How the demo server is started in-process, once per connection.
pub type DemoFactory = Arc<dyn Fn() -> DemoPipes + Send + Sync>;

impl Upstream {
    pub fn new(index: usize, spec: UpstreamSpec, env: UpstreamEnv) -> Arc<Self> {
        let (conn, _) = watch::channel(None);
        Arc::new(Upstream {
            index,
            spec,
            conn,
            info: Mutex::new(None),
            last_error: Arc::new(Mutex::new("not connected yet".into())),
            env,
            listen: Mutex::new(ListenState::default()),
        })
    }

    /// Whether the live connection speaks only the stateless revision.
    pub fn is_stateless(&self) -> bool {
        self.current().is_some_and(|c| c.is_stateless())
    }

    /// Adds or drops `uri` from what a stateless upstream's listen stream asks for, and
    /// reopens the stream (2026-07-28 has no `resources/subscribe`).
    pub fn set_resource_subscription(&self, uri: &str, on: bool) {
        let changed = {
            let mut l = self.listen.lock().unwrap();
            if on { l.uris.insert(uri.to_owned()) } else { l.uris.remove(uri) }
        };
        if changed && let Some(conn) = self.current().filter(|c| c.is_stateless()) {
            self.start_listen(&conn);
        }
    }

    /// (Re)opens the `subscriptions/listen` request through which a stateless upstream sends
    /// list changes and resource updates; they reach the gateway like any notification. The
    /// previous request is dropped, which cancels it upstream.
    fn start_listen(&self, conn: &Arc<Conn>) {
        let caps = self.info().and_then(|i| i.get("capabilities").cloned()).unwrap_or(Value::Null);
        let flag = |p: &str| caps.pointer(p).and_then(Value::as_bool) == Some(true);
        let mut l = self.listen.lock().unwrap();
        let mut filter = serde_json::Map::new();
        for (key, ptr) in [
            ("toolsListChanged", "/tools/listChanged"),
            ("promptsListChanged", "/prompts/listChanged"),
            ("resourcesListChanged", "/resources/listChanged"),
        ] {
            if flag(ptr) {
                filter.insert(key.into(), json!(true));
            }
        }
        if flag("/resources/subscribe") && !l.uris.is_empty() {
            filter.insert("resourceSubscriptions".into(), json!(l.uris.iter().collect::<Vec<_>>()));
        }
        if let Some(old) = l.task.take() {
            old.abort();
        }
        if filter.is_empty() {
            return;
        }
        let out = conn.start("subscriptions/listen", Some(crate::jsonrpc::to_raw(&json!({"notifications": filter}))));
        let name = self.spec.name.clone();
        let task = tokio::spawn(async move {
            // Open for as long as the server keeps it; its end (or an error) is only logged.
            if let Err(e) = out.wait(Duration::from_secs(365 * 24 * 3600)).await {
                tracing::debug!(target: "stowage::upstream", upstream = %name, "listen stream ended: {e}");
            }
        });
        l.task = Some(task.abort_handle());
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The upstream's initialize result, once connected.
    pub fn info(&self) -> Option<Value> {
        self.info.lock().unwrap().clone()
    }

    pub fn capability(&self, key: &str) -> bool {
        self.info().and_then(|i| i.get("capabilities").and_then(|c| c.get(key)).cloned()).is_some()
    }

    pub fn current(&self) -> Option<Arc<Conn>> {
        self.conn.borrow().clone().filter(|c| !c.is_closed())
    }

    /// The live connection, waiting up to `timeout` for one.
    pub async fn connection(&self, timeout: Duration) -> Result<Arc<Conn>, CallError> {
        let mut rx = self.conn.subscribe();
        let wait = rx.wait_for(|c| c.as_ref().is_some_and(|c| !c.is_closed()));
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(c)) => Ok(c.clone().expect("checked above")),
            _ => Err(CallError::Unavailable { name: self.spec.name.clone(), reason: self.last_error.lock().unwrap().clone() }),
        }
    }

    /// Sends a request and waits for its reply.
    pub async fn request(&self, method: &str, params: Option<&Value>, timeout: Duration) -> Result<Message, CallError> {
        let deadline = Instant::now() + timeout;
        let conn = self.connection(timeout).await?;
        let out = conn.start(method, params.map(crate::jsonrpc::to_raw));
        out.wait(deadline.saturating_duration_since(Instant::now())).await
    }

    /// Runs the supervisor until shutdown.
    pub async fn supervise(self: Arc<Self>) {
        let (initial, max) = self.env.backoff;
        let mut backoff = initial;
        loop {
            if self.env.shutdown.is_cancelled() {
                break;
            }
            let started = Instant::now();
            match self.connect().await {
                Ok(conn) => {
                    tracing::info!(target: "stowage::upstream", upstream = %self.spec.name, "connected");
                    self.conn.send_replace(Some(conn.clone()));
                    let _ = self.env.events.send(UpstreamEvent::Ready { index: self.index });
                    tokio::select! {
                        _ = conn.closed.cancelled() => {}
                        _ = self.env.shutdown.cancelled() => {
                            self.conn.send_replace(None);
                            break;
                        }
                    }
                    self.conn.send_replace(None);
                    let reason = self.last_error.lock().unwrap().clone();
                    tracing::warn!(target: "stowage::upstream", upstream = %self.spec.name, "connection lost: {reason}; reconnecting");
                    let _ = self.env.events.send(UpstreamEvent::Down { index: self.index, reason });
                    if started.elapsed() > Duration::from_secs(30) {
                        backoff = initial;
                    }
                }
                Err(e) => {
                    *self.last_error.lock().unwrap() = e.clone();
                    tracing::warn!(target: "stowage::upstream", upstream = %self.spec.name, "cannot start: {e}; retrying in {backoff:?}");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.env.shutdown.cancelled() => break,
            }
            backoff = (backoff * 2).min(max);
        }
    }

    fn open_link(&self) -> Result<Link, String> {
        match &self.spec.transport {
            TransportSpec::Stdio { command, args, env, cwd } => {
                stdio::spawn(&self.spec.name, command, args, env, cwd.as_ref(), self.env.max_message_bytes)
                    .map_err(|e| format!("cannot run {command}: {e}"))
            }
            TransportSpec::Http { url, headers, ca_file } => http::connect(&self.spec.name, url, headers, ca_file.as_deref()),
            TransportSpec::Demo => {
                let factory = self.env.demo.as_ref().ok_or("no demo server in this build")?;
                let (from_server, to_server) = factory();
                let (in_tx, in_rx) = mpsc::unbounded_channel();
                Ok(stdio::pipe_link(from_server, to_server, in_tx, in_rx, self.env.max_message_bytes, None))
            }
        }
    }

    /// Opens a transport, starts its reader and performs the handshake.
    async fn connect(&self) -> Result<Arc<Conn>, String> {
        let link = self.open_link()?;
        let conn = Arc::new(Conn {
            name: self.spec.name.clone(),
            tx: link.tx,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: CancellationToken::new(),
            stateless_meta: Mutex::new(None),
            http: link.http,
            _guard: link.guard,
        });
        tokio::spawn(read_loop(
            self.index,
            conn.clone(),
            link.rx,
            self.env.events.clone(),
            self.env.routes.clone(),
            self.last_error.clone(),
        ));
        let timeout = self.spec.request_timeout.min(Duration::from_secs(60));
        let init = json!({
            "protocolVersion": UPSTREAM_PROTOCOL,
            "capabilities": client_capabilities(),
            "clientInfo": {"name": "stowage", "title": "Stowage gateway", "version": env!("CARGO_PKG_VERSION")},
        });
        let reply = conn.start("initialize", Some(crate::jsonrpc::to_raw(&init))).wait(timeout).await.map_err(|e| e.to_string())?;
        let info = if reply.error_code() == Some(code::METHOD_NOT_FOUND) {
            // A stateless-only server: discover it and stamp every request from now on.
            let meta = json!({
                "io.modelcontextprotocol/protocolVersion": STATELESS_PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": client_capabilities(),
                "io.modelcontextprotocol/clientInfo": {"name": "stowage", "version": env!("CARGO_PKG_VERSION")},
            });
            *conn.stateless_meta.lock().unwrap() = Some(meta);
            if let Some(h) = &conn.http {
                *h.protocol_version.lock().unwrap() = Some(STATELESS_PROTOCOL.into());
            }
            let reply = conn.start("server/discover", None).wait(timeout).await.map_err(|e| e.to_string())?;
            result_value(&reply).map_err(|e| format!("server/discover failed: {e}"))?
        } else {
            let info = result_value(&reply).map_err(|e| format!("initialize failed: {e}"))?;
            if let (Some(h), Some(v)) = (&conn.http, info.get("protocolVersion").and_then(Value::as_str)) {
                *h.protocol_version.lock().unwrap() = Some(v.to_owned());
            }
            conn.send(&Message::notification("notifications/initialized", None));
            info
        };
        *self.info.lock().unwrap() = Some(info);
        if conn.is_stateless() {
            self.start_listen(&conn);
        }
        Ok(conn)
    }

    /// Kills the current connection (the supervisor will not restart after shutdown).
    pub fn close(&self) {
        if let Some(c) = self.conn.send_replace(None) {
            c.closed.cancel();
        }
    }
}

/// Capabilities the gateway declares to upstreams: everything a client may offer, since the
/// real client behind it may support any of them (requests it cannot serve get an error).
fn client_capabilities() -> Value {
    json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}})
}

/// The `result` of a reply, or its error as a string.
pub fn result_value(reply: &Message) -> Result<Value, String> {
    if let Some(e) = &reply.error {
        return Err(e.get().to_owned());
    }
    reply.result.as_ref().map(|r| serde_json::from_str(r.get()).map_err(|e| e.to_string())).unwrap_or_else(|| Ok(json!({})))
}

async fn read_loop(
    index: usize,
    conn: Arc<Conn>,
    mut rx: mpsc::UnboundedReceiver<Inbound>,
    events: mpsc::UnboundedSender<UpstreamEvent>,
    routes: Arc<CallRoutes>,
    last_error: Arc<Mutex<String>>,
) {
    let name = conn.name.clone();
    let reason = loop {
        let item = tokio::select! {
            item = rx.recv() => item,
            _ = conn.closed.cancelled() => break "was closed by the gateway".to_owned(),
        };
        let line = match item {
            Some(Inbound::Line(line)) => line,
            Some(Inbound::Closed(reason)) => break reason,
            None => break "closed".to_owned(),
        };
        // The line is given up: a big result keeps its memory (no second 50 MB copy).
        let msg = match Message::parse_owned(line) {
            Ok(m) => m,
            Err((line, e)) => {
                handle_malformed(&conn, &line, &e.to_string());
                continue;
            }
        };
        match msg.kind() {
            Kind::Response => {
                let id = msg.id.as_ref().and_then(Value::as_u64);
                let reply = id.and_then(|id| conn.pending.lock().unwrap().remove(&id));
                match reply {
                    Some(reply) => {
                        let _ = reply.send(Ok(msg));
                    }
                    None => {
                        tracing::debug!(target: "stowage::upstream", upstream = %name, "reply to an unknown or cancelled request {:?}", msg.id)
                    }
                }
            }
            Kind::Notification if routes.deliver(index, &msg) => {}
            Kind::Request | Kind::Notification => {
                let _ = events.send(UpstreamEvent::Message { index, conn: conn.clone(), msg });
            }
            // Rare: the message as re-serialised is enough to find its id and show its start.
            Kind::Invalid => handle_malformed(&conn, &msg.to_line(), "neither a request, a notification nor a response"),
        }
    };
    *last_error.lock().unwrap() = reason.clone();
    conn.fail_all(CallError::Closed { name: name.clone(), reason: reason.clone() });
    conn.closed.cancel();
}

/// A line that is not a valid message. Output that is not JSON at all is usually a server
/// logging to stdout by mistake, so it is logged and skipped. JSON-looking output that does not
/// parse fails the call it names (its `"id"` is found by a scan), so the client gets a clear
/// error instead of a timeout.
fn handle_malformed(conn: &Conn, line: &[u8], detail: &str) {
    let preview: String = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
    let id = scan_id(line);
    let reply = id.and_then(|id| conn.pending.lock().unwrap().remove(&id));
    match reply {
        Some(reply) => {
            tracing::warn!(target: "stowage::upstream", upstream = %conn.name, "malformed json-rpc: {detail}: {preview}");
            let _ = reply.send(Err(CallError::Malformed { name: conn.name.clone(), detail: detail.to_owned() }));
        }
        None => tracing::warn!(target: "stowage::upstream", upstream = %conn.name, "ignored output that is not json-rpc: {preview}"),
    }
}

/// Finds `"id":<number>` near the start of a broken message.
fn scan_id(line: &[u8]) -> Option<u64> {
    let head = &line[..line.len().min(4096)];
    let text = String::from_utf8_lossy(head);
    let at = text.find("\"id\"")?;
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
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
