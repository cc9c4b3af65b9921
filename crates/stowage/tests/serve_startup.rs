//! `stowage serve --stdio` answers a host at once even when some upstreams are dead (a refused
//! port, a missing command) or hang in their handshake: it used to wait up to 10 s for every
//! upstream before reading stdin, long enough for hosts to give up on it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use stowage_testkit::RpcClient;

#[tokio::test]
async fn stdio_serve_answers_initialize_and_tools_list_promptly_with_dead_and_hanging_upstreams() {
    let dir = tempfile::tempdir().unwrap();
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = format!(
        r#"
[gateway.servers.local]
command = "{fixture}"

[gateway.servers.refused]
url = "http://127.0.0.1:{refused}/mcp"

[gateway.servers.missing]
command = "/nonexistent/mcp-server"

[gateway.servers.hanging]
command = "sleep"
args = ["600"]
"#,
        fixture = stowage_testkit::fixture_bin().display()
    );
    std::fs::write(dir.path().join("stowage.toml"), config).unwrap();
    let started = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["--config", dir.path().join("stowage.toml").to_str().unwrap(), "--store", dir.path().join("store").to_str().unwrap()])
        .args(["serve", "--stdio", "--no-links"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let rpc = RpcClient::connect(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None);
    let init = rpc
        .request_within(
            Duration::from_secs(15),
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    rpc.notify("notifications/initialized", json!({}));
    let tools = rpc.request_within(Duration::from_secs(9), "tools/list", json!({})).await;
    let took = started.elapsed();
    // The hanging upstream is alive, so it may be a slow one: it costs at most the start-up
    // wait of a client no profile names (8 s, under the 10 s that Codex, the least patient
    // host known, waits), never more, and the dead ones cost nothing.
    let bound = Duration::from_millis(stowage_mcp::hosts::DEFAULT_STARTUP_WAIT_MS);
    assert!(took >= bound - Duration::from_millis(500) && took < bound + Duration::from_secs(2), "initialize + tools/list took {took:?}");
    let names: Vec<&str> = tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"local_echo"), "{names:?}");
    // A call to the live upstream works; the dead ones are each one stand-in (never listed,
    // no catalog kept), answered at once; the hanging one is not listed yet.
    let r = rpc.call("local_echo", json!({"message": "still here"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "still here", "{r}");
    let dead: Vec<&str> = names.iter().copied().filter(|n| n.starts_with("refused_") || n.starts_with("missing_")).collect();
    assert_eq!(dead, ["missing_unavailable", "refused_unavailable"], "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("hanging_")), "{names:?}");
    for (tool, why) in [("missing_unavailable", "/nonexistent/mcp-server"), ("refused_unavailable", "127.0.0.1")] {
        let r = rpc.call(tool, json!({})).await;
        let message = r["error"]["message"].as_str().unwrap_or_else(|| panic!("{tool}: {r}"));
        assert!(message.contains("is unavailable") && message.contains(why), "{tool}: {r}");
    }
    let _ = child.kill().await;
}
