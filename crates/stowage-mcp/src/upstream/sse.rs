//! Upstream over the 2024-11-05 HTTP+SSE transport, which many deployed servers still speak:
//! a `GET` of the configured URL opens one SSE stream; its first `endpoint` event names the
//! URL (relative or absolute) that client messages are POSTed to; every server message,
//! replies included, arrives on that one stream.
//!
//! What the Streamable HTTP transport ([`super::http`]) has is shared, not copied: the HTTP
//! client with the configured headers and TLS roots, the SSE parser and its size limit
//! (`gateway.max_message_bytes`: an oversized event is dropped as it streams in and fails
//! the request it answers). Since one stream carries everything, messages are tagged
//! [`Origin::Pipe`], as on stdio: what a message is part of is read from the message itself.
//!
//! The endpoint must be on the stream's own origin (scheme, host and port): a server that
//! names another one is refused at start-up, so the gateway never sends its requests, and
//! the headers it was configured with, to a host nobody configured. A connection (a control
//! connection, or one client's own in `per_client` mode) is one SSE stream, hence one
//! session on the server; dropping it closes the stream, which ends that session there.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use tokio::sync::mpsc;

use super::http::{Head, SseEvent, SseParser, client, error_chain, read_body, send_error};
use super::{Inbound, LINK_CAPACITY, Link, Origin, TransportError};
use crate::jsonrpc::{Message, code};

/// The longest a POST of one message may take: the server only acknowledges it (the answer
/// comes on the stream), so a slow POST means a stuck server, and the next message waits.
const POST_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens the SSE stream at `url` and waits (up to `wait`) for its `endpoint` event, then
/// returns a link that POSTs messages there and reads replies from the stream.
pub(crate) async fn connect(
    name: &str,
    url: &str,
    headers: &BTreeMap<String, String>,
    ca_file: Option<&std::path::Path>,
    max_bytes: usize,
    wait: Duration,
) -> Result<Link, TransportError> {
    let (http, headers) = client(headers, ca_file)?;
    let sse_url = reqwest::Url::parse(url).map_err(|e| TransportError::Url { url: url.to_owned(), reason: e.to_string() })?;
    let secs = wait.as_secs_f64();
    let get = http.get(sse_url.clone()).headers(headers.clone()).header(ACCEPT, "text/event-stream").send();
    let resp = match tokio::time::timeout(wait, get).await {
        Err(_) => return Err(TransportError::NoAnswer { request: format!("GET {url}"), secs }),
        Ok(Err(e)) => return Err(TransportError::Unreachable(send_error(&e))),
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    if !status.is_success() {
        let request = format!("GET {url}");
        return Err(if matches!(status.as_u16(), 401 | 403) {
            TransportError::Refused { request, status }
        } else {
            TransportError::Status { request, status, sse_hint: super::transport_error::sse_get_looks_streamable(status) }
        });
    }
    let content_type = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    if !content_type.starts_with("text/event-stream") {
        return Err(TransportError::NotSse { request: format!("GET {url}"), content_type });
    }
    let mut stream = resp.bytes_stream().boxed();
    let mut parser = SseParser::new(max_bytes);
    // Events after the endpoint in the same chunk are kept for the reader.
    let mut early = Vec::new();
    let find = async {
        loop {
            match stream.next().await {
                Some(Ok(chunk)) => {
                    let mut endpoint = None;
                    for event in parser.feed(&chunk) {
                        match event {
                            SseEvent::Named { event, data } if event == "endpoint" && endpoint.is_none() => endpoint = Some(data),
                            SseEvent::TooLong { .. } if endpoint.is_none() => {
                                return Err(TransportError::EventTooLong { max_bytes });
                            }
                            other => early.push(other),
                        }
                    }
                    if let Some(e) = endpoint {
                        return Ok(e);
                    }
                }
                Some(Err(e)) => return Err(TransportError::StreamFailed(error_chain(&e))),
                None => return Err(TransportError::StreamClosed),
            }
        }
    };
    let endpoint = match tokio::time::timeout(wait, find).await {
        Ok(r) => r?,
        Err(_) => return Err(TransportError::NoEndpoint { url: url.to_owned(), secs }),
    };
    let post_url = endpoint_url(&sse_url, &endpoint)?;
    tracing::debug!(target: "stowage::upstream", upstream = %name, "SSE endpoint {post_url}");

    let (in_tx, in_rx) = mpsc::channel(LINK_CAPACITY);
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(LINK_CAPACITY);
    let reader = tokio::spawn(read_stream(stream, parser, early, in_tx.clone(), max_bytes));
    let poster = Poster { http, url: post_url, headers, inbound: in_tx, name: name.to_owned(), max_bytes };
    tokio::spawn(poster.run(out_rx));
    Ok(Link { tx: out_tx, rx: in_rx, guard: Some(Box::new(CloseStream(reader.abort_handle()))), http: None })
}

/// The POST URL an `endpoint` event names, resolved against the stream's URL and refused
/// when it is on another origin.
fn endpoint_url(sse_url: &reqwest::Url, data: &[u8]) -> Result<reqwest::Url, TransportError> {
    let text = String::from_utf8_lossy(data);
    let text = text.trim();
    let url = sse_url.join(text).map_err(|e| TransportError::EndpointNotUrl { text: text.to_owned(), reason: e.to_string() })?;
    if url.origin() != sse_url.origin() {
        return Err(TransportError::EndpointOrigin {
            endpoint: url.origin().ascii_serialization(),
            stream: sse_url.origin().ascii_serialization(),
        });
    }
    Ok(url)
}

/// Closes the SSE stream (and so the server's session) when the connection is dropped.
struct CloseStream(tokio::task::AbortHandle);

impl Drop for CloseStream {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads the stream until it ends or the connection lets go of it: every message, reply or
/// not, goes to the gateway as if read from a pipe.
async fn read_stream(
    mut stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    mut parser: SseParser,
    early: Vec<SseEvent>,
    inbound: mpsc::Sender<Inbound>,
    max_bytes: usize,
) {
    let deliver = |event: SseEvent| match event {
        SseEvent::Data(data) => Some(Inbound::Line(data, Origin::Pipe)),
        SseEvent::TooLong { head } => Some(Inbound::TooLong { head, limit: max_bytes }),
        // A repeated `endpoint`, or an event type of some extension: nothing to relay.
        SseEvent::Named { .. } => None,
    };
    for item in early.into_iter().filter_map(deliver) {
        if inbound.send(item).await.is_err() {
            return;
        }
    }
    let reason = loop {
        let chunk = tokio::select! {
            c = stream.next() => c,
            // The connection was closed and its reader is gone: stop reading now, not at the
            // next event (which may never come).
            _ = inbound.closed() => return,
        };
        match chunk {
            Some(Ok(chunk)) => {
                for item in parser.feed(&chunk).into_iter().filter_map(deliver) {
                    if inbound.send(item).await.is_err() {
                        return;
                    }
                }
            }
            Some(Err(e)) => break format!("closed its SSE stream ({})", error_chain(&e)),
            None => break "closed its SSE stream".to_owned(),
        }
    };
    let _ = inbound.send(Inbound::Closed(reason)).await;
}

/// Sends the gateway's messages to the endpoint, one at a time and in order (the server
/// acknowledges each at once; `notifications/initialized` must precede what follows it).
struct Poster {
    http: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    inbound: mpsc::Sender<Inbound>,
    name: String,
    max_bytes: usize,
}

impl Poster {
    async fn run(self, mut out: mpsc::Receiver<Vec<u8>>) {
        while let Some(line) = out.recv().await {
            let head: Head<'_> = serde_json::from_slice(&line).unwrap_or_default();
            let request_id = head.method.is_some().then(|| head.id.and_then(|id| id.get().parse::<u64>().ok())).flatten();
            if let Err((why, lost)) = self.post(line).await {
                self.fail(request_id, why).await;
                if lost {
                    let _ = self.inbound.send(Inbound::Closed("lost its session (HTTP 404 on POST)".into())).await;
                }
            }
        }
    }

    /// POSTs one message; on failure, why, and whether the server forgot the session.
    async fn post(&self, body: Vec<u8>) -> Result<(), (String, bool)> {
        let req = self.http.post(self.url.clone()).headers(self.headers.clone()).header(CONTENT_TYPE, "application/json").body(body);
        let resp = match tokio::time::timeout(POST_TIMEOUT, req.send()).await {
            Err(_) => return Err((format!("did not accept a message within {}s", POST_TIMEOUT.as_secs()), false)),
            Ok(Err(e)) => return Err((format!("unreachable: {}", send_error(&e)), false)),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let text =
            read_body(resp, self.max_bytes.min(64 << 10)).await.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        let snippet: String = text.chars().take(200).collect();
        Err((format!("answered HTTP {status} to a message: {snippet}"), status == reqwest::StatusCode::NOT_FOUND))
    }

    /// A request the server did not take fails at once with an error response; a failed
    /// notification or response is only logged.
    async fn fail(&self, request_id: Option<u64>, why: String) {
        let message = format!("upstream {} {why}", self.name);
        match request_id {
            Some(id) => {
                let m = Message::error(id.into(), code::UPSTREAM_UNAVAILABLE, message);
                let _ = self.inbound.send(Inbound::Line(m.to_line(), Origin::Pipe)).await;
            }
            None => tracing::warn!(target: "stowage::upstream", upstream = %self.name, "{message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{TransportError, endpoint_url};

    #[test]
    fn endpoints_resolve_against_the_stream_and_stay_on_its_origin() {
        let sse = reqwest::Url::parse("http://127.0.0.1:8000/sse").unwrap();
        assert_eq!(endpoint_url(&sse, b"/messages/?session_id=ab").unwrap().as_str(), "http://127.0.0.1:8000/messages/?session_id=ab");
        assert_eq!(endpoint_url(&sse, b"messages?s=1\n").unwrap().as_str(), "http://127.0.0.1:8000/messages?s=1");
        assert_eq!(endpoint_url(&sse, b"http://127.0.0.1:8000/m").unwrap().as_str(), "http://127.0.0.1:8000/m");
        for other in [&b"http://evil.example/m"[..], b"http://127.0.0.1:8001/m", b"https://127.0.0.1:8000/m", b"//evil.example/m"] {
            let e = endpoint_url(&sse, other).unwrap_err();
            assert!(matches!(&e, TransportError::EndpointOrigin { stream, .. } if stream == "http://127.0.0.1:8000"), "{e:?}");
            assert!(e.to_string().contains("another origin"), "{e}");
        }
    }
}
