//! Upstreams over the legacy HTTP+SSE transport (2024-11-05, `"type": "sse"`), against a real
//! server: FastMCP 4.1.2 (`tests/peers/sse_server.py`, run with the peers' Python), driven
//! through the gateway by stdio clients. Lists, calls, an offloaded result, progress and logs
//! reaching the right client, per-client sessions, the server dying and coming back, the
//! stream closing mid-call and an oversized event. Servers that misbehave in ways FastMCP
//! will not (no endpoint event, an endpoint on another origin) are small axum servers.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{MemSink, RpcClient, fast_config, shaper};
use serde_json::{Value, json};
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::{Gateway, SessionMode};

const PYTHON: &str = "venv/bin/python";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The FastMCP server on `port`, killed when dropped.
struct PySse {
    child: tokio::process::Child,
}

impl PySse {
    async fn start(python: &std::path::Path, port: u16) -> PySse {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/sse_server.py");
        let child = tokio::process::Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(Instant::now() < deadline, "the FastMCP SSE server did not start on port {port}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        PySse { child }
    }

    async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

fn sse_spec(name: &str, url: String, timeout: Duration) -> UpstreamSpec {
    UpstreamSpec::new(name, TransportSpec::Sse { url, headers: Default::default(), ca_file: None }, timeout)
}

async fn gateway(port: u16, mode: SessionMode, config: GatewayConfig) -> Arc<Gateway> {
    let spec = sse_spec("sse", format!("http://127.0.0.1:{port}/sse"), Duration::from_secs(30));
    common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), config, mode).await
}

/// A stdio client of `gw`, initialized.
async fn client(gw: &Arc<Gateway>) -> RpcClient {
    common::Client::connect(gw.clone(), None, json!({})).await.rpc
}

fn text(r: &Value) -> String {
    r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// The error text of a failed call, whether a JSON-RPC error or an `isError` result.
fn error_text(r: &Value) -> String {
    match r.get("error") {
        Some(e) => e["message"].as_str().unwrap_or_default().to_owned(),
        None if r["result"]["isError"] == true => text(r),
        None => panic!("the call did not fail: {r}"),
    }
}

#[tokio::test]
async fn fastmcp_over_sse_lists_calls_offloads_and_streams_progress_and_logs() {
    let Some(python) = common::require_peer(PYTHON) else { return };
    let port = free_port();
    let server = PySse::start(&python, port).await;
    let gw = gateway(port, SessionMode::Shared, fast_config()).await;
    let c = client(&gw).await;

    let tools = c.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for t in ["echo", "snapshot", "work", "sleep", "whoami"] {
        assert!(names.contains(&t), "{t} missing: {names:?}");
    }
    assert_eq!(text(&c.call("echo", json!({"message": "over sse"})).await), "over sse");

    // A 20 KB PNG: offloaded, the client gets a link and no base64.
    let snap = c.call("snapshot", json!({})).await;
    let s = snap.to_string();
    assert!(!s.contains("iVBORw0KGgo"), "base64 PNG reached the client: {s}");
    let content = snap["result"]["content"].as_array().unwrap();
    assert!(content.iter().any(|b| b["type"] == "resource_link" && b["mimeType"] == "image/png"), "{s}");

    // Progress (by the client's token) and logs come back to the caller, before its answer.
    let r = c
        .request("tools/call", json!({"name": "work", "arguments": {"tag": "solo", "steps": 3}, "_meta": {"progressToken": "tok-solo"}}))
        .await;
    assert_eq!(text(&r), "solo done", "{r}");
    let notes = c.notifications.lock().unwrap().clone();
    let progress: Vec<&Value> = notes.iter().filter(|n| n["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 3, "{notes:?}");
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == "tok-solo"), "{progress:?}");
    let logs: Vec<String> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .map(|n| n["params"]["data"].as_str().map(str::to_owned).unwrap_or_else(|| n["params"]["data"].to_string()))
        .collect();
    assert!(logs.iter().filter(|l| l.contains("solo log")).count() == 3, "{logs:?}");
    gw.shutdown();
    server.kill().await;
}

#[tokio::test]
async fn per_client_mode_opens_one_sse_session_per_client_and_keeps_their_notifications_apart() {
    let Some(python) = common::require_peer(PYTHON) else { return };
    let port = free_port();
    let server = PySse::start(&python, port).await;

    let gw = gateway(port, SessionMode::PerClient, fast_config()).await;
    let (a, b) = (client(&gw).await, client(&gw).await);
    let (ida, idb) = (text(&a.call("whoami", json!({})).await), text(&b.call("whoami", json!({})).await));
    assert!(!ida.is_empty() && !idb.is_empty());
    assert_ne!(ida, idb, "two clients, two SSE sessions on the server");
    assert_eq!(ida, text(&a.call("whoami", json!({})).await), "a client keeps its session");
    assert_eq!(gw.upstreams[0].client_sessions(), 2);

    // Both call at once; each hears its own progress and logs only.
    let params = |tag: &str| json!({"name": "work", "arguments": {"tag": tag, "steps": 4}, "_meta": {"progressToken": tag}});
    let (ra, rb) = tokio::join!(a.request("tools/call", params("alpha")), b.request("tools/call", params("beta")));
    assert_eq!((text(&ra), text(&rb)), ("alpha done".to_owned(), "beta done".to_owned()));
    for (c, mine, theirs) in [(&a, "alpha", "beta"), (&b, "beta", "alpha")] {
        let notes = c.notifications.lock().unwrap().clone();
        let all = serde_json::to_string(&notes).unwrap();
        assert!(!all.contains(theirs), "{mine}'s client heard {theirs}'s notifications: {all}");
        let progress = notes.iter().filter(|n| n["method"] == "notifications/progress" && n["params"]["progressToken"] == mine).count();
        let logs =
            notes.iter().filter(|n| n["method"] == "notifications/message" && n.to_string().contains(&format!("{mine} log"))).count();
        assert_eq!((progress, logs), (4, 4), "{mine}: {all}");
    }
    gw.shutdown();

    // Shared mode: one SSE session for everyone.
    let gw = gateway(port, SessionMode::Shared, fast_config()).await;
    let (a, b) = (client(&gw).await, client(&gw).await);
    assert_eq!(text(&a.call("whoami", json!({})).await), text(&b.call("whoami", json!({})).await));
    gw.shutdown();
    server.kill().await;
}

#[tokio::test]
async fn an_sse_upstream_that_dies_fails_calls_at_once_and_is_used_again_when_it_comes_back() {
    let Some(python) = common::require_peer(PYTHON) else { return };
    let port = free_port();
    let server = PySse::start(&python, port).await;
    let gw = gateway(port, SessionMode::Shared, fast_config()).await;
    let c = client(&gw).await;
    assert_eq!(text(&c.call("echo", json!({"message": "before"})).await), "before");

    server.kill().await;
    assert!(common::eventually(10, || !gw.unready_upstreams().is_empty()).await, "the dead server was not noticed");
    let started = Instant::now();
    let down = c.call("echo", json!({"message": "while down"})).await;
    let e = error_text(&down);
    assert!(e.contains("upstream sse"), "the error names the upstream: {e}");
    assert!(started.elapsed() < Duration::from_secs(2), "a down upstream answers at once, took {:?}", started.elapsed());

    let server = PySse::start(&python, port).await;
    let back = common::eventually(30, || gw.unready_upstreams().is_empty()).await;
    assert!(back, "the gateway did not reconnect: {:?}", gw.unready_upstreams());
    assert_eq!(text(&c.call("echo", json!({"message": "after"})).await), "after");
    gw.shutdown();
    server.kill().await;
}

#[tokio::test]
async fn the_sse_stream_closing_mid_call_fails_the_call_naming_the_upstream() {
    let Some(python) = common::require_peer(PYTHON) else { return };
    let port = free_port();
    let server = PySse::start(&python, port).await;
    let gw = gateway(port, SessionMode::Shared, fast_config()).await;
    let c = client(&gw).await;
    let call = c.request("tools/call", json!({"name": "sleep", "arguments": {"seconds": 60}}));
    let kill = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        server.kill().await;
    };
    let started = Instant::now();
    let (r, ()) = tokio::join!(call, kill);
    let e = error_text(&r);
    assert!(e.contains("upstream sse") && e.contains("SSE stream") && e.contains("during the call"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10), "the call waited for its timeout: {:?}", started.elapsed());
    gw.shutdown();
}

#[tokio::test]
async fn an_oversized_sse_event_fails_its_call_and_the_stream_carries_on() {
    let Some(python) = common::require_peer(PYTHON) else { return };
    let port = free_port();
    let server = PySse::start(&python, port).await;
    let gw = gateway(port, SessionMode::Shared, GatewayConfig { max_message_bytes: 200_000, ..fast_config() }).await;
    let c = client(&gw).await;
    let r = c.call("big_text", json!({"size": 500_000})).await;
    let e = error_text(&r);
    assert!(e.contains("upstream sse") && e.contains("200000 byte limit") && e.contains("gateway.max_message_bytes"), "{e}");
    // Under the limit, the same tool answers, on the same stream.
    assert_eq!(text(&c.call("big_text", json!({"size": 1_000})).await).len(), 1_000);
    assert_eq!(text(&c.call("echo", json!({"message": "still up"})).await), "still up");
    assert!(gw.unready_upstreams().is_empty());
    gw.shutdown();
    server.kill().await;
}

/// An SSE server that sends `first` and then keeps the stream open; counts POSTs it gets.
async fn misbehaving_sse_server(first: impl Fn(u16) -> String + Send + Sync + 'static) -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let posts = Arc::new(AtomicUsize::new(0));
    let counted = posts.clone();
    let body = first(port);
    let app = axum::Router::new()
        .route(
            "/sse",
            axum::routing::get(move || {
                let body = body.clone();
                async move {
                    let chunks =
                        futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(body))]).chain(futures::stream::pending());
                    axum::response::Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(axum::body::Body::from_stream(chunks))
                        .unwrap()
                }
            }),
        )
        .route(
            "/messages",
            axum::routing::post(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { axum::http::StatusCode::ACCEPTED }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, posts)
}

use futures::StreamExt;

async fn start_reason(spec: UpstreamSpec) -> String {
    let gw = Gateway::builder(fast_config(), vec![spec], shaper(Arc::new(MemSink::default()))).start();
    let failed = common::eventually(15, || gw.unready_upstreams().first().is_some_and(|(_, why)| why != "still starting")).await;
    assert!(failed, "the upstream neither started nor failed");
    let reason = gw.unready_upstreams()[0].1.clone();
    gw.shutdown();
    reason
}

#[tokio::test]
async fn a_server_that_sends_no_endpoint_event_is_reported_at_start_up() {
    let (port, posts) = misbehaving_sse_server(|_| ": keep-alive\n\ndata: {\"not\":\"an endpoint\"}\n\n".into()).await;
    let reason = start_reason(sse_spec("quiet", format!("http://127.0.0.1:{port}/sse"), Duration::from_secs(2))).await;
    assert!(reason.contains("sent no endpoint event within 2.0s"), "{reason}");
    assert!(reason.contains("drop \"type\": \"sse\""), "the reason says how to fix a wrong type: {reason}");
    assert_eq!(posts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused_and_nothing_is_posted_there() {
    // `localhost` reaches the same server, but it is another origin than 127.0.0.1: the
    // gateway must not post there (nor anywhere the stream's URL did not name).
    let (port, posts) = misbehaving_sse_server(|port| format!("event: endpoint\ndata: http://localhost:{port}/messages\n\n")).await;
    let reason = start_reason(sse_spec("elsewhere", format!("http://127.0.0.1:{port}/sse"), Duration::from_secs(5))).await;
    assert!(reason.contains("another origin") && reason.contains(&format!("http://localhost:{port}")), "{reason}");
    assert_eq!(posts.load(Ordering::SeqCst), 0, "a message was posted to the other origin");
}

#[tokio::test]
async fn a_streamable_http_url_configured_as_sse_says_how_to_fix_it() {
    let inner = common::start_gateway(
        vec![common::fixture_spec("fx", None, Duration::from_secs(30))],
        shaper(Arc::new(MemSink::default())),
        fast_config(),
        SessionMode::Shared,
    )
    .await;
    let addr = stowage_mcp::run::spawn_http(inner, "127.0.0.1:0").await.unwrap();
    let reason = start_reason(sse_spec("wrong", format!("http://{addr}/mcp"), Duration::from_secs(5))).await;
    assert!(reason.contains("drop \"type\": \"sse\""), "{reason}");
}

/// The official Python client, over HTTP, through the gateway to FastMCP on SSE.
#[tokio::test]
async fn the_python_client_through_the_gateway_to_fastmcp_over_sse() {
    let Some(python) = common::require_peer(PYTHON) else { return };
    let port = free_port();
    let server = PySse::start(&python, port).await;
    let gw = gateway(port, SessionMode::Shared, fast_config()).await;
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/drive_sse_upstream.py");
    let out = tokio::process::Command::new(&python).arg(script).arg(format!("http://{addr}/mcp")).output().await.unwrap();
    assert!(out.status.success(), "python client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tools: Vec<&str> = o["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(["echo", "snapshot", "work", "whoami"].iter().all(|t| tools.contains(t)), "{tools:?}");
    assert_eq!(o["echo"], "python over sse");
    let snap = o["snapshot"].to_string();
    assert!(!snap.contains("iVBORw0KGgo"), "base64 reached the Python client: {snap}");
    assert!(o["snapshot"].as_array().unwrap().iter().any(|b| b["type"] == "resource_link" && b["mimeType"] == "image/png"), "{snap}");
    assert_eq!(o["work"], "py done");
    assert_eq!(o["progress"].as_array().unwrap().len(), 3, "{o}");
    assert!(o["logs"].as_array().unwrap().iter().filter(|l| l.as_str().unwrap_or("").contains("py log")).count() == 3, "{o}");
    gw.shutdown();
    server.kill().await;
}

/// The TypeScript and Python SDKs' Streamable HTTP servers answer a GET without a session id
/// with 400 ("Bad Request: No valid session ID provided"), not 404 or 405: that is the answer
/// most `"type": "sse"` mistakes meet, so it gets the fix too.
#[tokio::test]
async fn a_streamable_http_server_answering_400_to_the_sse_get_says_how_to_fix_it() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::get(|| async {
            (
                axum::http::StatusCode::BAD_REQUEST,
                r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#,
            )
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let reason = start_reason(sse_spec("sdk", format!("http://127.0.0.1:{port}/mcp"), Duration::from_secs(5))).await;
    assert!(reason.contains("400") && reason.contains("drop \"type\": \"sse\""), "{reason}");
}
