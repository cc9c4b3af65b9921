//! The Streamable HTTP downstream: sessions, SSE and JSON answers, the stateless revision,
//! DNS-rebinding protection, metrics, and that a client hanging up cancels the upstream call.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{MemSink, eventually, fast_config, fixture_spec, read_log, rewriter};
use futures::StreamExt;
use serde_json::{Value, json};
use stowage_mcp::Gateway;

async fn start(log: Option<&std::path::Path>) -> (Arc<Gateway>, String) {
    stowage_mcp::metrics::install();
    let config = fast_config();
    let rw = rewriter(Arc::new(MemSink::default()), &config);
    let gw = Gateway::start(config, vec![fixture_spec("fx", log, Duration::from_secs(20))], rw, None);
    assert_eq!(gw.wait_ready(Duration::from_secs(20)).await, 1);
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    (gw, format!("http://{addr}/mcp"))
}

fn rpc(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// Posts and returns (status, session id, messages): SSE events or the JSON body.
async fn post(url: &str, sid: Option<&str>, accept: &str, body: String) -> (u16, Option<String>, Vec<Value>) {
    let mut req = reqwest::Client::new().post(url).header("content-type", "application/json").header("accept", accept).body(body);
    if let Some(s) = sid {
        req = req.header("mcp-session-id", s);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let sid = resp.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
    let sse = resp.headers().get("content-type").is_some_and(|c| c.to_str().unwrap().starts_with("text/event-stream"));
    let text = resp.text().await.unwrap();
    let msgs = if sse {
        text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect()
    } else if text.is_empty() {
        vec![]
    } else {
        vec![serde_json::from_str(&text).unwrap()]
    };
    (status, sid, msgs)
}

const BOTH: &str = "application/json, text/event-stream";

async fn initialize(url: &str) -> String {
    let init = rpc(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}));
    let (status, sid, msgs) = post(url, None, BOTH, init).await;
    assert_eq!(status, 200);
    assert_eq!(msgs.last().unwrap()["result"]["protocolVersion"], "2025-11-25");
    let sid = sid.expect("initialize returns a session id");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert_eq!(post(url, Some(&sid), BOTH, note).await.0, 202);
    sid
}

#[tokio::test]
async fn sessions_sse_and_json_answers() {
    let (_gw, url) = start(None).await;
    let sid = initialize(&url).await;
    let (status, _, msgs) = post(&url, Some(&sid), BOTH, rpc(2, "tools/call", json!({"name": "slow", "arguments": {"ms": 50}, "_meta": {"progressToken": 9}}))).await;
    assert_eq!(status, 200);
    // Progress first, on the request's own stream, then the response.
    assert_eq!(msgs.len(), 6, "{msgs:?}");
    assert_eq!(msgs[0]["params"]["progressToken"], 9);
    assert_eq!(msgs[5]["id"], 2);
    assert_eq!(msgs[5]["result"]["content"][0]["text"], "slept 50 ms");
    let (_, _, msgs) = post(&url, Some(&sid), "application/json", rpc(3, "tools/call", json!({"name": "echo", "arguments": {"message": "j"}}))).await;
    assert_eq!(msgs[0]["result"]["content"][0]["text"], "j");
    // An unknown session is 404, so the client knows to initialize again.
    assert_eq!(post(&url, Some("nope"), BOTH, rpc(4, "tools/list", json!({}))).await.0, 404);
    let metrics = reqwest::get(url.replace("/mcp", "/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("stowage_tool_calls_total"), "{metrics}");
}

#[tokio::test]
async fn stateless_revision_without_a_session() {
    let (_gw, url) = start(None).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let (status, sid, msgs) = post(&url, None, BOTH, rpc(1, "server/discover", json!({"_meta": meta}))).await;
    assert_eq!(status, 200);
    assert!(sid.is_none());
    let r = &msgs[0]["result"];
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert!(r["capabilities"]["tools"].is_object());
    let (_, _, msgs) = post(&url, None, BOTH, rpc(2, "tools/call", json!({"name": "echo", "arguments": {"message": "s"}, "_meta": meta}))).await;
    assert_eq!(msgs[0]["result"]["content"][0]["text"], "s");
    // An older revision in the envelope is refused with the versions we speak.
    let old = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}});
    let (_, _, msgs) = post(&url, None, BOTH, rpc(3, "server/discover", old)).await;
    assert_eq!(msgs[0]["error"]["code"], -32022);
}

#[tokio::test]
async fn dns_rebinding_is_refused() {
    let (_gw, url) = start(None).await;
    let client = reqwest::Client::new();
    let body = rpc(1, "tools/list", json!({}));
    let r = client.post(&url).header("host", "evil.example:8787").body(body.clone()).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = client.post(&url).header("origin", "http://evil.example").body(body.clone()).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = client
        .post(&url)
        .header("origin", "http://localhost:6274")
        .header("content-type", "application/json")
        .header("accept", BOTH)
        .body(rpc(1, "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "loopback origins are allowed");
}

#[tokio::test]
async fn a_client_that_hangs_up_cancels_the_upstream_call() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fx.log");
    let (gw, url) = start(Some(&log)).await;
    let sid = initialize(&url).await;
    let resp = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", BOTH)
        .header("mcp-session-id", &sid)
        .body(rpc(2, "tools/call", json!({"name": "hang", "arguments": {}})))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut body = resp.bytes_stream();
    assert!(eventually(5, || read_log(&log).contains("tools/call hang")).await);
    // Read nothing more and hang up.
    let _ = tokio::time::timeout(Duration::from_millis(50), body.next()).await;
    drop(body);
    assert!(eventually(5, || read_log(&log).contains("notifications/cancelled")).await, "upstream was not told: {}", read_log(&log));
    gw.shutdown();
}
