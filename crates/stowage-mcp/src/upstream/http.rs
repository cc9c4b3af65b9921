//! Upstream over Streamable HTTP: every outgoing message is a POST to the server's URL; the
//! answer is a JSON body, an SSE stream of messages, or 202 for notifications and responses.
//!
//! Incoming messages from every POST (and from the optional GET stream, opened after the
//! handshake for server-initiated notifications) are funnelled into one inbound channel, so
//! the rest of the gateway sees an HTTP upstream exactly like a stdio one. A transport failure
//! on a request becomes a JSON-RPC error response for that request id, so callers get a clear
//! error at once rather than a timeout.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Inbound, Link};
use crate::jsonrpc::{Message, code};

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

/// Builds a link to `url`. Nothing is sent until the first message.
pub fn connect(name: &str, url: &str, headers: &BTreeMap<String, String>) -> Result<Link, String> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        let k = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k:?}: {e}"))?;
        let v = HeaderValue::from_str(v).map_err(|e| format!("header {k}: {e}"))?;
        map.insert(k, v);
    }
    if url.starts_with("https://") {
        return Err("https upstreams are not supported yet by this build (no TLS backend); use http:// on a trusted network".into());
    }
    let http = reqwest::Client::builder().build().map_err(|e| e.to_string())?;
    let (in_tx, in_rx) = mpsc::unbounded_channel();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let meta = Arc::new(HttpMeta::default());
    let client = Arc::new(Client {
        http,
        url: url.to_owned(),
        headers: map,
        meta: meta.clone(),
        inbound: in_tx,
        name: name.to_owned(),
    });
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
        let mut req = self
            .http
            .request(method, &self.url)
            .headers(self.headers.clone())
            .header(ACCEPT, "application/json, text/event-stream");
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
                let e = error_chain(&e);
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
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if content_type.starts_with("text/event-stream") {
            self.read_sse(resp).await;
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
    async fn listen(&self) {
        let Ok(resp) = self.request(reqwest::Method::GET).send().await else { return };
        if resp.status().is_success() {
            self.read_sse(resp).await;
        }
    }

    async fn read_sse(&self, resp: reqwest::Response) {
        let mut parser = SseParser::default();
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else { return };
            for data in parser.feed(&chunk) {
                if self.inbound.send(Inbound::Line(data)).is_err() {
                    return;
                }
            }
        }
    }
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

/// Incremental Server-Sent Events parser yielding each event's joined `data:` lines.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
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
                if self.has_data {
                    out.push(std::mem::take(&mut self.data));
                    self.has_data = false;
                }
            } else if let Some(rest) = self.line.strip_prefix(b"data:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(rest);
                self.has_data = true;
            }
            self.line.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::SseParser;

    #[test]
    fn sse_events_split_across_chunks() {
        let mut p = SseParser::default();
        let mut got = p.feed(b"event: message\r\nid: 1\r\ndata: {\"a\":");
        got.extend(p.feed(b"1}\r\n\r\n: keepalive\n\ndata: x\ndata: y\n\n"));
        assert_eq!(got, vec![b"{\"a\":1}".to_vec(), b"x\ny".to_vec()]);
    }
}
