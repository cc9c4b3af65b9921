//! Serving the HTTP routes with timeouts: a client that sends its headers too slowly, stalls
//! in the middle of a request body, or holds an idle keep-alive connection open is cut off,
//! so slow or abandoned connections cannot pile up (`axum::serve` has no such limits).
//!
//! HTTP/1 and HTTP/2 on one port (hyper's auto builder), with a graceful shutdown that lets
//! requests in flight finish for a few seconds.
//!
//! Every accepted socket gets `TCP_NODELAY`. Without it, the last small write of a response
//! (an SSE frame, the chunked body's terminator) waits for the ACK of the previous one, and a
//! client that delays its ACKs (Linux: up to 40 ms) stalls every call on a kept-alive
//! connection: Node's `fetch` (so the TypeScript SDK and every host built on it) and `curl`
//! saw 40 ms per call where a fresh connection took under 1 ms.
//!
//! A request is refused with 400 before any route sees it when its `Host` is ambiguous
//! (RFC 9112 §3.2): more than one `Host` header, none on an HTTP/1.1 request, or a `Host` that
//! disagrees with the authority of the request target (HTTP/2's `:authority`, or an
//! absolute-form target). The Host allow-list ([`crate::BrowserGuard`]) reads one host, so it
//! must be the only one.
//!
//! It lives beside the routes it serves: the gateway's `/mcp` and the store's link server
//! (download and upload routes, no MCP at all) are served by this one listener.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::http::{Request, Version, header};
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::Service;

/// How long connections may take or sit idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpTimeouts {
    /// From the first byte of a request (or an idle keep-alive connection) to its last header.
    pub headers: Duration,
    /// Between two chunks of a request body.
    pub body: Duration,
    /// HTTP/2: how long an unanswered keep-alive ping may go before the connection is closed.
    pub idle: Duration,
}

impl HttpTimeouts {
    /// Timeouts from whole seconds (each at least 1), as configurations give them.
    pub fn from_secs(headers: u64, body: u64, idle: u64) -> HttpTimeouts {
        let secs = |s: u64| Duration::from_secs(s.max(1));
        HttpTimeouts { headers: secs(headers), body: secs(body), idle: secs(idle) }
    }
}

/// How long requests in flight may finish after shutdown is asked for.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, app: Router, timeouts: HttpTimeouts, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(timeouts.body));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(timeouts.headers).keep_alive(true);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(timeouts.idle / 2).keep_alive_timeout(timeouts.idle);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(target: "stowage::http", "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(target: "stowage::http", "cannot set TCP_NODELAY: {e}");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let mut app = app.clone();
            async move {
                if let Some(why) = ambiguous_host(&req) {
                    return Ok::<_, Infallible>(crate::ApiError::bad_request(why).into_response());
                }
                Ok::<_, Infallible>(app.call(req.map(axum::body::Body::new)).await.unwrap_or_else(|e| match e {}))
            }
        });
        let connection = graceful.watch(builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned());
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(target: "stowage::http", "connection ended: {e}");
            }
        });
    }
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
    Ok(())
}

/// Why the request's host is ambiguous (one line for the 400), if it is.
fn ambiguous_host<B>(req: &Request<B>) -> Option<String> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Some("the request has more than one Host header; send exactly one".to_owned());
    }
    let authority = req.uri().authority().map(|a| a.as_str());
    match (host, authority) {
        (None, None) if req.version() == Version::HTTP_11 => Some("an HTTP/1.1 request needs a Host header".to_owned()),
        (Some(h), Some(a)) if !h.as_bytes().eq_ignore_ascii_case(a.as_bytes()) => Some(format!(
            "the Host header {:?} disagrees with the request's authority {a:?}; send one host",
            String::from_utf8_lossy(h.as_bytes())
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: Version, uri: &str, hosts: &[&str]) -> Request<()> {
        let mut b = Request::builder().version(version).uri(uri);
        for h in hosts {
            b = b.header(header::HOST, *h);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn one_host_passes_and_ambiguous_ones_are_named() {
        assert_eq!(ambiguous_host(&req(Version::HTTP_11, "/mcp", &["127.0.0.1:8787"])), None);
        assert_eq!(ambiguous_host(&req(Version::HTTP_10, "/mcp", &[])), None, "HTTP/1.0 may omit Host");
        // HTTP/2: the authority alone, or a Host that says the same.
        assert_eq!(ambiguous_host(&req(Version::HTTP_2, "http://127.0.0.1:8787/mcp", &[])), None);
        assert_eq!(ambiguous_host(&req(Version::HTTP_2, "http://LOCALHOST:1/mcp", &["localhost:1"])), None);
        let two = ambiguous_host(&req(Version::HTTP_11, "/mcp", &["127.0.0.1", "evil.example"])).unwrap();
        assert!(two.contains("more than one Host"), "{two}");
        assert!(ambiguous_host(&req(Version::HTTP_11, "/mcp", &[])).unwrap().contains("needs a Host"));
        let split = ambiguous_host(&req(Version::HTTP_2, "http://127.0.0.1:8787/mcp", &["evil.example"])).unwrap();
        assert!(split.contains("\"evil.example\"") && split.contains("127.0.0.1:8787"), "{split}");
    }
}
