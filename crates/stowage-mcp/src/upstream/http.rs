//! Upstream over Streamable HTTP: every outgoing message is a POST to the server's URL; the
//! answer is a JSON body, an SSE stream of messages, or 202 for notifications and responses.
//!
//! Incoming messages from every POST (and from the optional GET stream, opened after the
//! handshake for server-initiated notifications) are funnelled into one bounded inbound
//! channel, each tagged with the stream it came on ([`Origin`]): a message on a request's
//! stream belongs to that request, which is how the gateway knows whose call a sampling
//! request or a log line is part of. A transport failure on a request becomes a JSON-RPC
//! error response for that request id, so callers get a clear error at once rather than a
//! timeout. Bodies and SSE events obey `max_message_bytes` as stdio lines do: an oversized
//! one is dropped while it streams in (never held whole) and fails its request.
//!
//! When the connection is dropped, its session is ended with `DELETE` (best effort), so a
//! client's own upstream session does not linger on the server.
//!
//! Streams are resumed (SEP-1699): a server may close a request's SSE stream before the
//! answer (polling) after giving its events ids; the client then waits the server's `retry`
//! and reconnects with `GET` + `Last-Event-ID`, as often as the stream keeps ending without
//! the answer, up to [`MAX_RESUMES`] times in a row without progress. A stream that ends
//! without ids and without the answer fails the request at once. The standalone GET stream
//! is reopened the same way.
//!
//! Only events of the default type (`message`) carry messages; events of another `event:`
//! type are skipped, as the reference SDKs' clients do. [`super::sse`] shares this file's
//! client set-up and parser.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Inbound, LINK_CAPACITY, Link, Origin, TransportError};
use crate::jsonrpc::{Message, code};

/// Reconnections in a row that brought no new event before a stream is given up.
pub(crate) const MAX_RESUMES: u32 = 5;
/// How long the first request after the handshake waits for the standalone stream to open.
const STREAM_OPEN_WAIT: Duration = Duration::from_secs(5);
/// Reconnection delay when the server names none.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// How an SSE stream ended.
#[derive(Debug, Default)]
struct StreamEnd {
    /// The answer to the request the stream was opened for went by.
    answered: bool,
    /// The last event id seen on it (or on the stream it resumed).
    last_id: Option<String>,
    retry: Option<Duration>,
    /// Whether this stretch of the stream carried any event.
    progressed: bool,
    /// An event over the size limit was dropped.
    too_long: bool,
}

/// Per-connection HTTP state the handshake fills in.
#[derive(Debug, Default)]
pub(crate) struct HttpMeta {
    pub session_id: Mutex<Option<String>>,
    pub protocol_version: Mutex<Option<String>>,
}

struct Client {
    http: reqwest::Client,
    url: String,
    headers: HeaderMap,
    meta: Arc<HttpMeta>,
    inbound: mpsc::Sender<Inbound>,
    name: String,
    max_bytes: usize,
}

/// Builds a link to `url`, trusting the certificates in `ca_file` besides the built-in roots.
/// Nothing is sent until the first message.
pub(crate) fn connect(
    name: &str,
    url: &str,
    headers: &BTreeMap<String, String>,
    ca_file: Option<&std::path::Path>,
    max_bytes: usize,
) -> Result<Link, TransportError> {
    let (http, map) = client(headers, ca_file)?;
    let (in_tx, in_rx) = mpsc::channel(LINK_CAPACITY);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(LINK_CAPACITY);
    let meta = Arc::new(HttpMeta::default());
    let client =
        Arc::new(Client { http, url: url.to_owned(), headers: map, meta: meta.clone(), inbound: in_tx, name: name.to_owned(), max_bytes });
    let c = client.clone();
    tokio::spawn(async move {
        let mut get_opened = false;
        while let Some(line) = out_rx.recv().await {
            // Only the envelope is read; the params are skipped, not built.
            let head: Head<'_> = serde_json::from_slice(&line).unwrap_or_default();
            let request_id = head.method.is_some().then(|| head.id.and_then(|id| id.get().parse::<u64>().ok())).flatten();
            let is_initialized = head.method.as_deref() == Some("notifications/initialized");
            if let Some(id) = request_id {
                // Requests run concurrently: a long tool call must not hold up the next one.
                let c = c.clone();
                let method = head.method.as_deref().unwrap_or_default().to_owned();
                tokio::spawn(async move { c.post(line, Some((id, method))).await });
            } else {
                // Notifications and responses keep their order (initialized before the first
                // request that depends on it).
                c.post(line, None).await;
            }
            if is_initialized && !get_opened {
                // The standalone stream is open (or refused) before the first request goes
                // out: a server that asks for sampling or elicitation on it as soon as a call
                // starts must find it there, or its request is lost and the call hangs.
                get_opened = true;
                let (opened, is_open) = tokio::sync::oneshot::channel();
                let c = c.clone();
                tokio::spawn(async move { c.listen(opened).await });
                let _ = tokio::time::timeout(STREAM_OPEN_WAIT, is_open).await;
            }
        }
    });
    let guard = EndSession(client);
    Ok(Link { tx: out_tx, rx: in_rx, guard: Some(Box::new(guard)), http: Some(meta) })
}

/// Whether an HTTP upstream answers, for `check-config`: an `initialize` POST (the SSE
/// transport: a GET of its stream) within `timeout`, with the entry's headers and TLS roots.
/// `Ok` with what it said; `Err` with why it cannot be reached or refused. A session the probe
/// opened is ended again with `DELETE`.
pub(crate) async fn probe(
    url: &str,
    headers: &BTreeMap<String, String>,
    ca_file: Option<&std::path::Path>,
    sse: bool,
    timeout: Duration,
) -> Result<String, TransportError> {
    let (http, map) = client(headers, ca_file)?;
    let request = if sse { format!("GET {url}") } else { "initialize".to_owned() };
    let req = if sse {
        http.get(url).headers(map.clone()).header(ACCEPT, "text/event-stream")
    } else {
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": super::UPSTREAM_PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "stowage-check-config", "version": env!("CARGO_PKG_VERSION")}}});
        http.post(url)
            .headers(map.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(init.to_string())
    };
    let resp = match tokio::time::timeout(timeout, req.send()).await {
        Err(_) => return Err(TransportError::NoAnswer { request, secs: timeout.as_secs_f64() }),
        Ok(Err(e)) => return Err(TransportError::Unreachable(send_error(&e))),
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    if let Some(sid) = resp.headers().get("mcp-session-id").cloned() {
        let _ = tokio::time::timeout(timeout, http.delete(url).headers(map).header("mcp-session-id", sid).send()).await;
    }
    match status.as_u16() {
        200..=299 => Ok(format!("answers (HTTP {})", status.as_u16())),
        401 | 403 => Err(TransportError::Refused { request, status }),
        _ => Err(TransportError::Status { request, status, sse_hint: sse && super::transport_error::sse_get_looks_streamable(status) }),
    }
}

/// The HTTP client and headers both HTTP transports use ([`super::sse`] too): rustls with the
/// built-in roots plus the certificates in `ca_file`, and the configured headers, validated.
pub(super) fn client(
    headers: &BTreeMap<String, String>,
    ca_file: Option<&std::path::Path>,
) -> Result<(reqwest::Client, HeaderMap), TransportError> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        let bad = |e: &dyn std::fmt::Display| TransportError::Header { name: k.clone(), reason: e.to_string() };
        let v = HeaderValue::from_str(v).map_err(|e| bad(&e))?;
        let k = HeaderName::from_bytes(k.as_bytes()).map_err(|e| bad(&e))?;
        map.insert(k, v);
    }
    let mut builder = reqwest::Client::builder().use_rustls_tls();
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|source| TransportError::CaFile { path: path.to_owned(), source })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| TransportError::CaNotPem { path: path.to_owned(), reason: error_chain(&e) })?;
        if certs.is_empty() {
            return Err(TransportError::CaEmpty { path: path.to_owned() });
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    let http = builder.build().map_err(|e| TransportError::Client(error_chain(&e)))?;
    Ok((http, map))
}

/// Why a request could not be sent, with the fix when it is a certificate problem.
pub(super) fn send_error(e: &reqwest::Error) -> String {
    let mut e = error_chain(e);
    if e.contains("certificate") {
        e.push_str(" (for a private CA or a self-signed server, set tls_ca_file)");
    }
    e
}

/// A whole (non-SSE) body, refused as soon as it passes `max_bytes` rather than after it has
/// all been buffered.
pub(super) async fn read_body(resp: reqwest::Response, max_bytes: usize) -> Result<Vec<u8>, String> {
    if resp.content_length().is_some_and(|n| n > max_bytes as u64) {
        return Err(format!("the body is over the {max_bytes} byte limit (gateway.max_message_bytes)"));
    }
    let mut body = Vec::with_capacity(resp.content_length().unwrap_or(0) as usize);
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| error_chain(&e))?;
        if body.len() + chunk.len() > max_bytes {
            return Err(format!("the body is over the {max_bytes} byte limit (gateway.max_message_bytes)"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The envelope of an outgoing message: enough to tell a request (whose id the gateway chose,
/// always a number) from a notification or a response.
#[derive(Default, serde::Deserialize)]
pub(super) struct Head<'a> {
    #[serde(borrow)]
    pub id: Option<&'a serde_json::value::RawValue>,
    pub method: Option<std::borrow::Cow<'a, str>>,
}

/// Ends the upstream session (`DELETE` with its id) when the connection is dropped.
struct EndSession(Arc<Client>);

impl Drop for EndSession {
    fn drop(&mut self) {
        let Some(sid) = self.0.meta.session_id.lock().clone() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let req = self.0.http.delete(&self.0.url).headers(self.0.headers.clone()).header("mcp-session-id", sid);
        rt.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), req.send()).await;
        });
    }
}

impl Client {
    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut req =
            self.http.request(method, &self.url).headers(self.headers.clone()).header(ACCEPT, "application/json, text/event-stream");
        if let Some(sid) = self.meta.session_id.lock().clone() {
            req = req.header("mcp-session-id", sid);
        }
        if let Some(v) = self.meta.protocol_version.lock().clone() {
            req = req.header("mcp-protocol-version", v);
        }
        req
    }

    /// Hands a message to the gateway; false once the connection is gone.
    async fn deliver(&self, item: Inbound) -> bool {
        self.inbound.send(item).await.is_ok()
    }

    /// Sends one message; for a request (`request`: its id and method), whatever goes wrong
    /// becomes its error response at once: a refusal (401, 403) or another status with a body
    /// that is not the JSON-RPC answer to it, and a successful status whose body is not that
    /// answer either, each named with the status and the start of the body.
    async fn post(&self, body: Vec<u8>, request: Option<(u64, String)>) {
        let request_id = request.as_ref().map(|(id, _)| *id);
        let method = request.as_ref().map_or("", |(_, m)| m.as_str());
        let result = self.request(reqwest::Method::POST).header(CONTENT_TYPE, "application/json").body(body).send().await;
        let origin = request_id.map_or(Origin::Standalone, Origin::Request);
        let fail = |message: String| async move {
            if let Some(id) = request_id {
                let m = Message::error(id.into(), code::UPSTREAM_UNAVAILABLE, message);
                self.deliver(Inbound::Line(m.to_line(), origin)).await;
            } else {
                tracing::warn!(target: "stowage::upstream", upstream = %self.name, "{message}");
            }
        };
        let resp = match result {
            Ok(r) => r,
            Err(e) => {
                let e = send_error(&e);
                fail(format!("upstream {} unreachable: {e}", self.name)).await;
                if request_id.is_some() {
                    self.deliver(Inbound::Closed(format!("unreachable: {e}"))).await;
                }
                return;
            }
        };
        if let Some(sid) = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            *self.meta.session_id.lock() = Some(sid.to_owned());
        }
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND && self.meta.session_id.lock().is_some() {
            // The server forgot our session (it restarted): reconnecting re-initializes.
            fail(format!("upstream {} lost the session (HTTP 404)", self.name)).await;
            self.deliver(Inbound::Closed("lost the session".into())).await;
            return;
        }
        if !status.is_success() {
            let text = match self.body(resp).await {
                Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                Err(e) => e,
            };
            // Some servers answer a JSON-RPC error with a 4xx status: pass the error through,
            // when it is one (an error response to this very request). Anything else (an
            // OAuth `{"error":"invalid_token"}`, an HTML page) fails the request at once.
            if let Some(id) = request_id
                && is_error_response(text.as_bytes(), id)
            {
                self.deliver(Inbound::Line(text.into_bytes(), origin)).await;
            } else {
                let hint = if matches!(status.as_u16(), 401 | 403) { " (check its headers or bearer_token_env)" } else { "" };
                fail(format!("upstream {} answered {method} with HTTP {status}{hint}: {}", self.name, snippet(&text))).await;
            }
            return;
        }
        if status == reqwest::StatusCode::ACCEPTED || request_id.is_none() && resp.content_length() == Some(0) {
            return;
        }
        let content_type = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
        if content_type.starts_with("text/event-stream") {
            let end = self.follow(resp, request_id, StreamEnd::default()).await;
            if request_id.is_some() && !end.answered {
                let why = if end.too_long { "sent an event over the size limit" } else { "closed its stream before answering" };
                fail(format!("upstream {} {why}", self.name)).await;
            }
        } else {
            match self.body(resp).await {
                Ok(body) if body.iter().all(u8::is_ascii_whitespace) => {
                    if request_id.is_some() {
                        fail(format!("upstream {} answered {method} with HTTP {status} and an empty body", self.name)).await;
                    }
                }
                Ok(body) => match request_id {
                    // A request's JSON body is its answer and nothing else: one that is not
                    // would leave the request waiting for its timeout.
                    Some(id) if !is_response(&body, id) => {
                        let text = String::from_utf8_lossy(&body);
                        let kind = if content_type.is_empty() { "no content type".to_owned() } else { content_type.clone() };
                        fail(format!(
                            "upstream {} answered {method} with HTTP {status} ({kind}) but not with a JSON-RPC response to it: {}",
                            self.name,
                            snippet(&text)
                        ))
                        .await;
                    }
                    _ => {
                        self.deliver(Inbound::Line(body, origin)).await;
                    }
                },
                Err(e) => fail(format!("upstream {} body: {e}", self.name)).await,
            }
        }
    }

    /// A whole (non-SSE) body, within `max_message_bytes`.
    async fn body(&self, resp: reqwest::Response) -> Result<Vec<u8>, String> {
        read_body(resp, self.max_bytes).await
    }

    /// The optional GET stream for messages not tied to a request; 405 means "not offered".
    /// Reopened (resuming from its last event id) whenever the server ends it, until the
    /// connection goes away.
    /// `opened` is told once the server has answered the first GET (its headers, whatever the
    /// status).
    async fn listen(&self, opened: tokio::sync::oneshot::Sender<()>) {
        let mut opened = Some(opened);
        let mut end = StreamEnd::default();
        let mut failures = 0;
        while !self.inbound.is_closed() && failures < MAX_RESUMES {
            let mut req = self.request(reqwest::Method::GET);
            if let Some(id) = &end.last_id {
                req = req.header("last-event-id", id);
            }
            let sent = req.send().await;
            if let Some(o) = opened.take() {
                let _ = o.send(());
            }
            let Ok(resp) = sent else { return };
            if !resp.status().is_success() {
                return;
            }
            end = self.read_sse(resp, None, end).await;
            failures = if end.progressed { 0 } else { failures + 1 };
            tokio::time::sleep(end.retry.unwrap_or(DEFAULT_RETRY).min(Duration::from_secs(30))).await;
        }
    }

    /// Reads a request's stream to its end, resuming it while it ends before the answer.
    async fn follow(&self, resp: reqwest::Response, answer_of: Option<u64>, start: StreamEnd) -> StreamEnd {
        let mut end = self.read_sse(resp, answer_of, start).await;
        let mut stalled = 0;
        while answer_of.is_some() && !end.answered && !end.too_long && end.last_id.is_some() && stalled < MAX_RESUMES {
            tokio::time::sleep(end.retry.unwrap_or(DEFAULT_RETRY).min(Duration::from_secs(30))).await;
            let last = end.last_id.clone().unwrap_or_default();
            let resp = match self.request(reqwest::Method::GET).header("last-event-id", &last).send().await {
                Ok(r) if r.status().is_success() => r,
                Ok(r) => {
                    tracing::warn!(target: "stowage::upstream", upstream = %self.name, "cannot resume stream after event {last}: HTTP {}", r.status());
                    break;
                }
                Err(e) => {
                    tracing::warn!(target: "stowage::upstream", upstream = %self.name, "cannot resume stream after event {last}: {}", error_chain(&e));
                    break;
                }
            };
            end = self.read_sse(resp, answer_of, end).await;
            stalled = if end.progressed { 0 } else { stalled + 1 };
        }
        end
    }

    /// Reads one stretch of an SSE stream. Messages on a request's stream carry that request
    /// as their origin; on the standalone stream, none.
    async fn read_sse(&self, resp: reqwest::Response, answer_of: Option<u64>, before: StreamEnd) -> StreamEnd {
        let origin = answer_of.map_or(Origin::Standalone, Origin::Request);
        let mut parser = SseParser::new(self.max_bytes);
        let mut end = StreamEnd { progressed: false, ..before };
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else { break };
            for event in parser.feed(&chunk) {
                end.progressed = true;
                let item = match event {
                    SseEvent::Data(data) => {
                        if answer_of.is_some_and(|id| answers(&data, id)) {
                            end.answered = true;
                        }
                        Inbound::Line(data, origin)
                    }
                    SseEvent::TooLong { head } => {
                        end.too_long = true;
                        Inbound::TooLong { head, limit: self.max_bytes }
                    }
                    SseEvent::Named { event, .. } => {
                        tracing::debug!(target: "stowage::upstream", upstream = %self.name, "skipped an SSE event of type {event:?}");
                        continue;
                    }
                };
                if !self.deliver(item).await {
                    return end;
                }
            }
            if parser.last_id.is_some() {
                end.last_id.clone_from(&parser.last_id);
            }
            end.retry = parser.retry.or(end.retry);
        }
        end
    }
}

/// The start of a body for an error message: one line, at most 200 characters.
fn snippet(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        return "(empty body)".to_owned();
    }
    stowage_core::cut_at_char(&one_line, 200).to_owned()
}

/// Whether `body` is a JSON-RPC response to our request `id` (or a batch, which is read as
/// it comes): the cheap look at either end first, a parse only when that finds nothing.
fn is_response(body: &[u8], id: u64) -> bool {
    let start = body.iter().find(|b| !b.is_ascii_whitespace());
    if start == Some(&b'[') || answers(body, id) {
        return true;
    }
    serde_json::from_slice::<Value>(body).is_ok_and(|v| v.get("id").and_then(Value::as_u64) == Some(id) && v.get("method").is_none())
}

/// Whether `body` is a JSON-RPC error response to our request `id`.
fn is_error_response(body: &[u8], id: u64) -> bool {
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|v| v.get("id").and_then(Value::as_u64) == Some(id) && v.get("error").is_some_and(Value::is_object))
}

/// Whether SSE `data` is the response to our request `id`. The id is looked for near either
/// end of the message only (servers put it first or last; a 50 MB result is not scanned),
/// and a message naming a method is a request or notification, not an answer.
fn answers(data: &[u8], id: u64) -> bool {
    const EDGE: usize = 96;
    let head = &data[..data.len().min(EDGE)];
    let tail = &data[data.len().saturating_sub(EDGE)..];
    if memfind(head, b"\"method\"") {
        return false;
    }
    let want = id.to_string();
    [head, tail].iter().any(|part| {
        let mut rest = *part;
        while let Some(at) = find(rest, b"\"id\"") {
            let after = &rest[at + 4..];
            let value = after.iter().position(|b| !b" \t\r\n:".contains(b)).map(|i| &after[i..]).unwrap_or(&[]);
            if value.starts_with(want.as_bytes()) && !value.get(want.len()).is_some_and(u8::is_ascii_digit) {
                return true;
            }
            rest = after;
        }
        false
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn memfind(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// One parsed SSE event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SseEvent {
    /// The joined `data:` lines of an event of the default type, `message` (what carries
    /// JSON-RPC messages on both HTTP transports).
    Data(Vec<u8>),
    /// An event with another `event:` type: the legacy transport's `endpoint`; anything else
    /// is skipped by both transports, as the reference SDKs do.
    Named { event: String, data: Vec<u8> },
    /// An event whose data passed the size limit; `head` is its start (to find its id).
    TooLong { head: Vec<u8> },
}

/// Incremental Server-Sent Events parser. Lines are found with `memchr` and handled as
/// slices, so a 50 MB event costs a few large copies, not a step per byte. Events without
/// data (keep-alives, the priming event) carry no message and yield nothing; their `id` and
/// `retry` still count. An event whose data passes `max_bytes` is dropped as it streams in
/// (only its head is kept), so a hostile server cannot make the gateway hold it.
#[derive(Debug)]
pub(crate) struct SseParser {
    /// An incomplete line carried over from the previous chunk.
    partial: Vec<u8>,
    /// The incomplete line passed the size limit: the rest of it is skipped.
    skipping: bool,
    data: Vec<u8>,
    has_data: bool,
    /// The current event's `event:` type, when one other than `message` was given.
    event: Option<String>,
    /// The current event's data passed `max_bytes`: its head, and the rest is skipped.
    overflow: Option<Vec<u8>>,
    max_bytes: usize,
    /// The last `id:` seen (the id to resume after).
    pub last_id: Option<String>,
    /// The last `retry:` hint.
    pub retry: Option<Duration>,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new(usize::MAX)
    }
}

impl SseParser {
    pub(crate) fn new(max_bytes: usize) -> Self {
        SseParser {
            partial: Vec::new(),
            skipping: false,
            data: Vec::new(),
            has_data: false,
            event: None,
            overflow: None,
            max_bytes,
            last_id: None,
            retry: None,
        }
    }

    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(nl) = memchr::memchr(b'\n', rest) {
            let (line, after) = rest.split_at(nl);
            rest = &after[1..];
            if std::mem::take(&mut self.skipping) {
                self.partial.clear();
            } else if self.partial.is_empty() {
                self.line(line, &mut out);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.line(&whole, &mut out);
            }
        }
        // An incomplete line is never held past the limit: a data line over it drops its
        // event (keeping the head), any other line is garbage and is skipped.
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > self.max_bytes.saturating_add(16) {
                if let Some(data) = self.partial.strip_prefix(b"data:") {
                    let data = data.strip_prefix(b" ").unwrap_or(data);
                    let head = data[..data.len().min(crate::framing::HEAD_BYTES)].to_vec();
                    self.overflow.get_or_insert(head);
                }
                self.partial.clear();
                self.skipping = true;
            }
        }
        out
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if let Some(head) = self.overflow.take() {
                out.push(SseEvent::TooLong { head });
            } else if self.has_data && !self.data.iter().all(u8::is_ascii_whitespace) {
                let data = std::mem::take(&mut self.data);
                out.push(match self.event.take() {
                    Some(event) => SseEvent::Named { event, data },
                    None => SseEvent::Data(data),
                });
            }
            self.data.clear();
            self.has_data = false;
            self.event = None;
        } else if let Some(rest) = line.strip_prefix(b"data:") {
            if self.overflow.is_some() {
                return;
            }
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            if self.data.len() + rest.len() + 1 > self.max_bytes {
                let mut head = std::mem::take(&mut self.data);
                head.extend_from_slice(&rest[..rest.len().min(crate::framing::HEAD_BYTES)]);
                head.truncate(crate::framing::HEAD_BYTES);
                self.overflow = Some(head);
                return;
            }
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(rest);
            self.has_data = true;
        } else if let Some(rest) = line.strip_prefix(b"event:") {
            let event = String::from_utf8_lossy(rest.strip_prefix(b" ").unwrap_or(rest)).into_owned();
            self.event = (event != "message").then_some(event);
        } else if let Some(rest) = line.strip_prefix(b"id:") {
            let id = String::from_utf8_lossy(rest.strip_prefix(b" ").unwrap_or(rest)).into_owned();
            // An id containing NUL is ignored, as the SSE standard says.
            if !id.contains('\0') {
                self.last_id = Some(id);
            }
        } else if let Some(rest) = line.strip_prefix(b"retry:")
            && let Ok(ms) = std::str::from_utf8(rest).unwrap_or("").trim().parse::<u64>()
        {
            self.retry = Some(Duration::from_millis(ms));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SseEvent, SseParser, answers};
    use std::time::Duration;

    #[test]
    fn sse_events_split_across_chunks() {
        let mut p = SseParser::default();
        let mut got = p.feed(b"event: message\r\nid: 1\r\ndata: {\"a\":");
        got.extend(p.feed(b"1}\r\n\r\n: keepalive\n\ndata: x\ndata: y\n\n"));
        assert_eq!(got, vec![SseEvent::Data(b"{\"a\":1}".to_vec()), SseEvent::Data(b"x\ny".to_vec())]);
        assert_eq!(p.last_id.as_deref(), Some("1"));
    }

    #[test]
    fn event_types_other_than_message_are_told_apart() {
        let mut p = SseParser::default();
        let got = p.feed(b"event: endpoint\ndata: /messages/?session_id=1\n\nevent: message\ndata: {}\n\ndata: x\n\n");
        assert_eq!(
            got,
            vec![
                SseEvent::Named { event: "endpoint".into(), data: b"/messages/?session_id=1".to_vec() },
                SseEvent::Data(b"{}".to_vec()),
                SseEvent::Data(b"x".to_vec()),
            ]
        );
    }

    #[test]
    fn an_event_over_the_limit_is_dropped_as_it_streams_and_the_next_one_reads() {
        let big = "x".repeat(5000);
        for chunk in [7usize, 100, 100_000] {
            let mut p = SseParser::new(1000);
            let wire = format!("id: 1\ndata: {{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":\"{big}\"}}\n\ndata: ok\n\n");
            let mut got = Vec::new();
            for part in wire.as_bytes().chunks(chunk) {
                got.extend(p.feed(part));
                assert!(p.partial.len() <= 1016 && p.data.len() <= 1000, "never holds more than the limit");
            }
            assert_eq!(got.len(), 2, "chunks of {chunk}");
            let SseEvent::TooLong { head } = &got[0] else { panic!("{:?}", got[0]) };
            assert!(head.starts_with(b"{\"jsonrpc\":\"2.0\",\"id\":4"), "the head names the request");
            assert_eq!(got[1], SseEvent::Data(b"ok".to_vec()));
        }
    }

    #[test]
    fn the_priming_event_yields_no_message_but_its_id_and_retry_count() {
        let mut p = SseParser::default();
        assert!(p.feed(b"id: 7-0\nretry: 2500\ndata: \n\n").is_empty());
        assert_eq!(p.last_id.as_deref(), Some("7-0"));
        assert_eq!(p.retry, Some(Duration::from_millis(2500)));
    }

    proptest::proptest! {
        /// However the network splits a stream into chunks, the same messages, id and retry
        /// come out as when it arrives whole.
        #[test]
        fn chunking_never_changes_what_is_parsed(
            events in proptest::collection::vec(("[a-z0-9-]{0,6}", "[ -~]{0,40}", proptest::option::of(0u64..10_000)), 0..8),
            cuts in proptest::collection::vec(0usize..400, 0..12),
            crlf: bool,
        ) {
            let nl = if crlf { "\r\n" } else { "\n" };
            let mut wire = String::new();
            for (id, data, retry) in &events {
                if !id.is_empty() {
                    wire.push_str(&format!("id: {id}{nl}"));
                }
                if let Some(r) = retry {
                    wire.push_str(&format!("retry: {r}{nl}"));
                }
                wire.push_str(&format!("data: {data}{nl}{nl}"));
            }
            let bytes = wire.as_bytes();
            let mut whole = SseParser::default();
            let expected = whole.feed(bytes);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut split = SseParser::default();
            let mut got = Vec::new();
            let mut at = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                got.extend(split.feed(&bytes[at..c]));
                at = c;
            }
            proptest::prop_assert_eq!(&got, &expected);
            proptest::prop_assert_eq!(split.last_id, whole.last_id);
            proptest::prop_assert_eq!(split.retry, whole.retry);
            // Data that is only whitespace is a priming/keep-alive event, never a message.
            proptest::prop_assert!(expected.iter().all(|e| matches!(e, SseEvent::Data(d) if !d.iter().all(u8::is_ascii_whitespace))));
        }
    }

    #[test]
    fn only_the_answer_to_the_request_counts_as_one() {
        use super::{is_error_response, is_response, snippet};
        assert!(is_response(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#, 3));
        let middle = format!(r#"{{"jsonrpc":"2.0","result":{{"x":"{}"}},"id":3,"_meta":{{"y":"{}"}}}}"#, "a".repeat(200), "b".repeat(200));
        assert!(is_response(middle.as_bytes(), 3), "found by parsing when neither end has it");
        assert!(!is_response(b"<html>bad gateway</html>", 3));
        assert!(!is_response(br#"{"error":"invalid_token"}"#, 3));
        assert!(!is_response(br#"{"jsonrpc":"2.0","id":4,"result":{}}"#, 3));
        assert!(is_error_response(br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"no"}}"#, 3));
        assert!(!is_error_response(br#"{"error":"invalid_token","error_description":"expired"}"#, 3));
        assert!(!is_error_response(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}"#, 3));
        assert_eq!(snippet("  <html>\n  <body>oops</body>\n</html>"), "<html> <body>oops</body> </html>");
        assert_eq!(snippet(""), "(empty body)");
        assert_eq!(snippet(&"x".repeat(500)).len(), 200);
    }

    #[test]
    fn answers_are_recognised_by_id_at_either_end() {
        assert!(answers(br#"{"jsonrpc":"2.0","id":12,"result":{}}"#, 12));
        assert!(answers(br#"{"result":{"content":[]},"jsonrpc":"2.0","id": 12}"#, 12));
        assert!(!answers(br#"{"jsonrpc":"2.0","id":123,"result":{}}"#, 12));
        // A request from the server with a colliding id is not our answer.
        assert!(!answers(br#"{"jsonrpc":"2.0","id":12,"method":"sampling/createMessage"}"#, 12));
        let big = format!(r#"{{"result":{{"x":"{}"}},"jsonrpc":"2.0","id":5}}"#, "a".repeat(10_000));
        assert!(answers(big.as_bytes(), 5));
    }
}
