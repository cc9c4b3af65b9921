//! Serving the HTTP routes with timeouts: a client that sends its headers too slowly, stalls
//! in the middle of a request body, or holds an idle keep-alive connection open is cut off,
//! so slow or abandoned connections cannot pile up (`axum::serve` has no such limits).
//!
//! HTTP/1 and HTTP/2 on one port (hyper's auto builder), with a graceful shutdown that lets
//! requests in flight finish for a few seconds.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::Service;

/// How long connections may take or sit idle.
#[derive(Debug, Clone, Copy)]
pub struct HttpTimeouts {
    /// From the first byte of a request (or an idle keep-alive connection) to its last header.
    pub headers: Duration,
    /// Between two chunks of a request body.
    pub body: Duration,
    /// HTTP/2: how long an unanswered keep-alive ping may go before the connection is closed.
    pub idle: Duration,
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
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let mut app = app.clone();
            async move { Ok::<_, Infallible>(app.call(req.map(axum::body::Body::new)).await.unwrap_or_else(|e| match e {})) }
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
