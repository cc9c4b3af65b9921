//! Start-up with upstreams that are not there yet: the gateway answers at once, and an
//! upstream that comes up later is announced to clients already connected
//! (`notifications/tools/list_changed`), whose next `tools/list` has its tools.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MemSink, RpcClient, fast_config, fixture_spec, shaper};
use serde_json::{Value, json};
use stowage_mcp::config::{TransportSpec, UpstreamSpec};
use stowage_mcp::{Gateway, SessionMode};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A gateway that does not wait for its upstreams (unlike `common::start_gateway`).
fn start_without_waiting(specs: Vec<UpstreamSpec>) -> Arc<Gateway> {
    stowage_mcp::metrics::install();
    Gateway::builder(fast_config(), specs, shaper(Arc::new(MemSink::default()))).start()
}

fn connect(gw: &Arc<Gateway>) -> RpcClient {
    let (client_end, gw_end) = tokio::io::duplex(1 << 20);
    let (gr, gw_w) = tokio::io::split(gw_end);
    tokio::spawn(stowage_mcp::serve_stdio(gw.clone(), gr, gw_w));
    let (cr, cw) = tokio::io::split(client_end);
    RpcClient::connect(cr, cw, None)
}

fn tool_names(list: &Value) -> Vec<String> {
    list["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn an_upstream_that_starts_listening_later_is_announced_with_list_changed() {
    let port = free_port();
    let late = UpstreamSpec::new(
        "late",
        TransportSpec::Http { url: format!("http://127.0.0.1:{port}/mcp"), headers: Default::default(), ca_file: None },
        Duration::from_secs(30),
    );
    let gw = start_without_waiting(vec![fixture_spec("local", None, Duration::from_secs(30)), late]);
    let client = connect(&gw);
    let started = Instant::now();
    client.initialize("2025-06-18", json!({})).await;
    let before = tool_names(&client.request("tools/list", json!({})).await);
    assert!(started.elapsed() < Duration::from_secs(4), "the refused upstream held the client up for {:?}", started.elapsed());
    assert!(before.iter().any(|n| n == "local_echo"), "{before:?}");
    // Down and never listed: one stand-in says so, and a call to it answers at once with why.
    let late: Vec<&String> = before.iter().filter(|n| n.starts_with("late_")).collect();
    assert_eq!(late, ["late_unavailable"], "{before:?}");
    let down = client.call("late_unavailable", json!({})).await;
    let message = down["error"]["message"].as_str().unwrap_or_else(|| panic!("{down}"));
    assert!(message.contains("upstream late is unavailable") && message.contains("Connection refused"), "{down}");
    let down = client.call("late_echo", json!({"message": "x"})).await;
    assert!(down.get("error").is_some() || down["result"]["isError"] == true, "a tool of an upstream not listed yet is refused: {down}");
    client.notifications.lock().unwrap().clear();

    // Now the port starts listening: a real Streamable HTTP server (another gateway in front
    // of the fixture) on it.
    let server = common::start_gateway(
        vec![fixture_spec("inner", None, Duration::from_secs(30))],
        shaper(Arc::new(MemSink::default())),
        fast_config(),
        SessionMode::Shared,
    )
    .await;
    stowage_mcp::run::spawn_http(server, &format!("127.0.0.1:{port}")).await.unwrap();

    let announced =
        common::eventually(15, || client.notifications.lock().unwrap().iter().any(|n| n["method"] == "notifications/tools/list_changed"))
            .await;
    assert!(announced, "no list_changed once the upstream came up: {:?}", client.notifications.lock().unwrap());
    let after = tool_names(&client.request("tools/list", json!({})).await);
    assert!(after.iter().any(|n| n == "late_echo") && after.iter().any(|n| n == "local_echo"), "{after:?}");
    assert!(!after.iter().any(|n| n == "late_unavailable"), "the stand-in is gone once it is up: {after:?}");
    let r = client.call("late_echo", json!({"message": "hello late"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "hello late", "{r}");
}

#[tokio::test]
async fn a_dead_upstream_does_not_hold_initialize_or_tools_list() {
    let refused = UpstreamSpec::new(
        "refused",
        TransportSpec::Http { url: format!("http://127.0.0.1:{}/mcp", free_port()), headers: Default::default(), ca_file: None },
        Duration::from_secs(30),
    );
    let missing = UpstreamSpec::new("missing", TransportSpec::stdio("/nonexistent/mcp-server", vec![]), Duration::from_secs(30));
    let gw = start_without_waiting(vec![fixture_spec("local", None, Duration::from_secs(30)), refused, missing]);
    // Once the live upstream is listed, nothing is worth waiting for: the dead ones must not
    // make the client wait (not even the start-up grace).
    assert!(common::eventually(10, || gw.upstreams[0].listed.load(std::sync::atomic::Ordering::SeqCst)).await);
    let client = connect(&gw);
    let started = Instant::now();
    let init = client.initialize("2025-06-18", json!({})).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    let tools = tool_names(&client.request("tools/list", json!({})).await);
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1500), "dead upstreams held initialize + tools/list for {took:?}");
    assert!(tools.iter().any(|n| n == "local_echo"), "{tools:?}");
    // A call routed to a dead upstream still fails at once, naming it and why.
    let unready = gw.unready_upstreams();
    assert!(unready.iter().any(|(n, why)| n == "refused" && !why.is_empty()), "{unready:?}");
    assert!(unready.iter().any(|(n, why)| n == "missing" && why.contains("/nonexistent/mcp-server")), "{unready:?}");
}

#[tokio::test]
async fn a_tools_list_that_times_out_is_asked_again_and_clients_hear_of_it() {
    // The fixture leaves its first tools/list unanswered; the request times out after 1 s.
    let mut spec = fixture_spec("fx", None, Duration::from_secs(1));
    if let TransportSpec::Stdio { env, .. } = &mut spec.transport {
        env.insert("STOWAGE_FIXTURE_IGNORE_FIRST_TOOLS_LIST".into(), "1".into());
    }
    let gw = start_without_waiting(vec![spec]);
    let client = connect(&gw);
    client.initialize("2025-06-18", json!({})).await;
    let started = Instant::now();
    let mut names = Vec::new();
    while started.elapsed() < Duration::from_secs(15) {
        names = tool_names(&client.request("tools/list", json!({})).await);
        if names.iter().any(|n| n == "echo") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(names.iter().any(|n| n == "echo"), "the failed tools/list was never asked again: {names:?}");
    // Clients already connected are told, as for an upstream that came up late.
    let heard =
        common::eventually(5, || client.notifications.lock().unwrap().iter().any(|n| n["method"] == "notifications/tools/list_changed"))
            .await;
    assert!(heard, "no list_changed after the retry: {:?}", client.notifications.lock().unwrap());
    gw.shutdown();
}

/// An upstream whose first `tools/list` is refused (the Python SDK answers a request that
/// comes before its initialization finished with an error) is still starting, not listed with
/// no tools: a client that lists at once waits for the retry and gets its tools in its first
/// answer, which is all Codex ever reads.
#[tokio::test]
async fn a_refused_first_tools_list_is_not_an_empty_one() {
    let mut spec = fixture_spec("fx", None, Duration::from_secs(5));
    if let TransportSpec::Stdio { env, .. } = &mut spec.transport {
        env.insert("STOWAGE_FIXTURE_REFUSE_FIRST_TOOLS_LIST".into(), "1".into());
    }
    let gw = start_without_waiting(vec![spec]);
    let client = connect(&gw);
    client.initialize("2025-06-18", json!({})).await;
    let names = tool_names(&client.request("tools/list", json!({})).await);
    assert!(names.iter().any(|n| n == "echo"), "the first answer lacks the upstream's tools: {names:?}");
    gw.shutdown();
}
