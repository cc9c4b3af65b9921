//! Upstream over Streamable HTTP: every outgoing message is a POST to the server's URL; the
//! answer is a JSON body, an SSE stream of messages, or 202 for notifications and responses.
//!
//! Incoming messages from every POST (and from the optional GET stream, opened after the
//! handshake for server-initiated notifications) are funnelled into one inbound channel, so
//! the rest of the gateway sees an HTTP upstream exactly like a stdio one. A transport failure
//! on a request becomes a JSON-RPC error response for that request id, so callers get a clear
//! error at once rather than a timeout.
//!
//! Streams are resumed (SEP-1699): a server may close a request's SSE stream before the
//! answer (polling) after giving its events ids; the client then waits the server's `retry`
//! and reconnects with `GET` + `Last-Event-ID`, as often as the stream keeps ending without
//! the answer, up to [`MAX_RESUMES`] times in a row without progress. A stream that ends
//! without ids and without the answer fails the request at once. The standalone GET stream
//! is reopened the same way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Inbound, Link};
use crate::jsonrpc::{Message, code};

/// Reconnections in a row that brought no new event before a stream is given up.
pub const MAX_RESUMES: u32 = 5;
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
}

/// Per-connection HTTP state the handshake fills in.
#[derive(Debug, Default)]
pub struct HttpMeta {
    pub session_id: Mutex<Option<String>>,
    pub protocol_version: Mutex<Option<String>>,
}

struct Client {
    http: reqwest::Client,
    url: String,
    headers: HeaderMap,
    meta: Arc<HttpMeta>,
    inbound: mpsc::UnboundedSender<Inbound>,
    name: String,
}

/// Builds a link to `url`, trusting the certificates in `ca_file` besides the built-in roots.
/// Nothing is sent until the first message.
pub fn connect(name: &str, url: &str, headers: &BTreeMap<String, String>, ca_file: Option<&std::path::Path>) -> Result<Link, String> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        let k = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k:?}: {e}"))?;
        let v = HeaderValue::from_str(v).map_err(|e| format!("header {k}: {e}"))?;
        map.insert(k, v);
    }
    let mut builder = reqwest::Client::builder().use_rustls_tls();
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| format!("cannot read tls_ca_file {}: {e}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("tls_ca_file {} is not PEM certificates: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("tls_ca_file {} holds no certificate", path.display()));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    let http = builder.build().map_err(|e| e.to_string())?;
    let (in_tx, in_rx) = mpsc::unbounded_channel();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let meta = Arc::new(HttpMeta::default());
    let client = Arc::new(Client { http, url: url.to_owned(), headers: map, meta: meta.clone(), inbound: in_tx, name: name.to_owned() });
    let c = client.clone();
    tokio::spawn(async move {
        let mut get_opened = false;
        while let Some(line) = out_rx.recv().await {
            let msg: Value = serde_json::from_slice(&line).unwrap_or(Value::Null);
            let is_request = msg.get("method").is_some() && msg.get("id").is_some();
            let is_initialized = msg.get("method").and_then(Value::as_str) == Some("notifications/initialized");
            if is_request {
                // Requests run concurrently: a long tool call must not hold up the next one.
                let c = c.clone();
                tokio::spawn(async move { c.post(line, msg.get("id").cloned()).await });
            } else {
                // Notifications and responses keep their order (initialized before the first
                // request that depends on it).
                c.post(line, None).await;
            }
            if is_initialized && !get_opened {
                get_opened = true;
                let c = c.clone();
                tokio::spawn(async move { c.listen().await });
            }
        }
    });
    Ok(Link { tx: out_tx, rx: in_rx, guard: None, http: Some(meta) })
}

impl Client {
    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut req =
            self.http.request(method, &self.url).headers(self.headers.clone()).header(ACCEPT, "application/json, text/event-stream");
        if let Some(sid) = self.meta.session_id.lock().unwrap().clone() {
            req = req.header("mcp-session-id", sid);
        }
        if let Some(v) = self.meta.protocol_version.lock().unwrap().clone() {
            req = req.header("mcp-protocol-version", v);
        }
        req
    }

    /// Sends one message; for a request, whatever goes wrong becomes its error response.
    async fn post(&self, body: Vec<u8>, request_id: Option<Value>) {
        let result = self.request(reqwest::Method::POST).header(CONTENT_TYPE, "application/json").body(body).send().await;
        let fail = |message: String| {
            if let Some(id) = request_id.clone() {
                let m = Message::error(id, code::UPSTREAM_UNAVAILABLE, message);
                let _ = self.inbound.send(Inbound::Line(m.to_line()));
            } else {
                tracing::warn!(target: "stowage::upstream", upstream = %self.name, "{message}");
            }
        };
        let resp = match result {
            Ok(r) => r,
            Err(e) => {
                let mut e = error_chain(&e);
                if e.contains("certificate") {
                    e.push_str(" (for a private CA or a self-signed server, set tls_ca_file)");
                }
                fail(format!("upstream {} unreachable: {e}", self.name));
                if request_id.is_some() {
                    let _ = self.inbound.send(Inbound::Closed(format!("unreachable: {e}")));
                }
                return;
            }
        };
        if let Some(sid) = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            *self.meta.session_id.lock().unwrap() = Some(sid.to_owned());
        }
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND && self.meta.session_id.lock().unwrap().is_some() {
            // The server forgot our session (it restarted): reconnecting re-initializes.
            fail(format!("upstream {} lost the session (HTTP 404)", self.name));
            let _ = self.inbound.send(Inbound::Closed("lost the session".into()));
            return;
        }
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            // Some servers answer a JSON-RPC error with a 4xx status: pass the error through.
            if request_id.is_some() && serde_json::from_str::<Value>(&text).is_ok_and(|v| v.get("error").is_some()) {
                let _ = self.inbound.send(Inbound::Line(text.into_bytes()));
            } else {
                let snippet: String = text.chars().take(200).collect();
                fail(format!("upstream {} answered HTTP {status}: {snippet}", self.name));
            }
            return;
        }
        if status == reqwest::StatusCode::ACCEPTED || request_id.is_none() && resp.content_length() == Some(0) {
            return;
        }
        let content_type = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
        if content_type.starts_with("text/event-stream") {
            let answer_of = request_id.as_ref().and_then(Value::as_u64);
            let end = self.follow(resp, answer_of, StreamEnd::default()).await;
            if request_id.is_some() && !end.answered {
                fail(format!("upstream {} closed its stream before answering", self.name));
            }
        } else {
            match resp.bytes().await {
                Ok(body) if body.iter().all(u8::is_ascii_whitespace) => {}
                Ok(body) => {
                    let _ = self.inbound.send(Inbound::Line(body.to_vec()));
                }
                Err(e) => fail(format!("upstream {} body: {}", self.name, error_chain(&e))),
            }
        }
    }

    /// The optional GET stream for messages not tied to a request; 405 means "not offered".
    /// Reopened (resuming from its last event id) whenever the server ends it, until the
    /// connection goes away.
    async fn listen(&self) {
        let mut end = StreamEnd::default();
        let mut failures = 0;
        while !self.inbound.is_closed() && failures < MAX_RESUMES {
            let mut req = self.request(reqwest::Method::GET);
            if let Some(id) = &end.last_id {
                req = req.header("last-event-id", id);
            }
            let Ok(resp) = req.send().await else { return };
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
        while answer_of.is_some() && !end.answered && end.last_id.is_some() && stalled < MAX_RESUMES {
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

    async fn read_sse(&self, resp: reqwest::Response, answer_of: Option<u64>, before: StreamEnd) -> StreamEnd {
        let mut parser = SseParser::default();
        let mut end = StreamEnd { answered: before.answered, last_id: before.last_id, retry: before.retry, progressed: false };
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else { break };
            for data in parser.feed(&chunk) {
                end.progressed = true;
                if answer_of.is_some_and(|id| answers(&data, id)) {
                    end.answered = true;
                }
                if self.inbound.send(Inbound::Line(data)).is_err() {
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

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// Incremental Server-Sent Events parser yielding each event's joined `data:` lines. Events
/// without data (keep-alives, the priming event) carry no message and yield nothing; their
/// `id` and `retry` still count.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    /// The last `id:` seen (the id to resume after).
    pub last_id: Option<String>,
    /// The last `retry:` hint.
    pub retry: Option<Duration>,
}

impl SseParser {
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for &b in chunk {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            if self.line.is_empty() {
                if self.has_data && !self.data.iter().all(u8::is_ascii_whitespace) {
                    out.push(std::mem::take(&mut self.data));
                }
                self.data.clear();
                self.has_data = false;
            } else if let Some(rest) = self.line.strip_prefix(b"data:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(rest);
                self.has_data = true;
            } else if let Some(rest) = self.line.strip_prefix(b"id:") {
                let id = String::from_utf8_lossy(rest.strip_prefix(b" ").unwrap_or(rest)).into_owned();
                // An id containing NUL is ignored, as the SSE standard says.
                if !id.contains('\0') {
                    self.last_id = Some(id);
                }
            } else if let Some(rest) = self.line.strip_prefix(b"retry:")
                && let Ok(ms) = std::str::from_utf8(rest).unwrap_or("").trim().parse::<u64>()
            {
                self.retry = Some(Duration::from_millis(ms));
            }
            self.line.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{SseParser, answers};
    use std::time::Duration;

    #[test]
    fn sse_events_split_across_chunks() {
        let mut p = SseParser::default();
        let mut got = p.feed(b"event: message\r\nid: 1\r\ndata: {\"a\":");
        got.extend(p.feed(b"1}\r\n\r\n: keepalive\n\ndata: x\ndata: y\n\n"));
        assert_eq!(got, vec![b"{\"a\":1}".to_vec(), b"x\ny".to_vec()]);
        assert_eq!(p.last_id.as_deref(), Some("1"));
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
            proptest::prop_assert!(expected.iter().all(|d| !d.iter().all(u8::is_ascii_whitespace)));
        }
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
