//! Upstream sessions for many clients of one gateway over HTTP, in front of a stdio server
//! that keeps state per session (`stowage-session-fixture`, shaped like a browser automation
//! server): what one client changes is never seen by another, what changes nothing is served
//! by one pristine process, every process is counted against the cap and reaped, and the cap
//! refuses at once.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MemSink, eventually, fast_config, shaper};
use serde_json::{Value, json};
use stowage_mcp::Gateway;
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};

const BOTH: &str = "application/json, text/event-stream";

/// The session fixture as upstream `web`, optionally slow to start.
fn session_fixture(start_delay_ms: Option<u64>) -> UpstreamSpec {
    let mut env = std::collections::BTreeMap::new();
    if let Some(ms) = start_delay_ms {
        env.insert("STOWAGE_FIXTURE_START_DELAY_MS".to_owned(), ms.to_string());
    }
    let command = stowage_testkit::session_fixture_bin().display().to_string();
    UpstreamSpec::new("web", TransportSpec::Stdio { command, args: vec![], env, cwd: None, inherit_env: false }, Duration::from_secs(20))
}

/// A gateway over HTTP in `per_client` mode (the default of `stowage serve`) in front of
/// `spec`; returns it and its `/mcp` URL.
async fn gateway(spec: UpstreamSpec, config: GatewayConfig) -> (Arc<Gateway>, String) {
    let gw = common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), config, stowage_mcp::SessionMode::PerClient).await;
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    (gw, format!("http://{addr}/mcp"))
}

fn rpc(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// Posts in session `sid` and returns the last message (the response).
async fn post(url: &str, sid: &str, body: String) -> Value {
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", BOTH)
        .header("mcp-session-id", sid)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    let msgs: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d.trim_start()).unwrap())
        .collect();
    if msgs.is_empty() { serde_json::from_str(&text).unwrap() } else { msgs.last().unwrap().clone() }
}

/// Opens a session declaring `capabilities`; returns its id.
async fn initialize(url: &str, capabilities: Value) -> String {
    let init = rpc(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "0"}}),
    );
    let resp =
        reqwest::Client::new().post(url).header("content-type", "application/json").header("accept", BOTH).body(init).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let sid = resp.headers().get("mcp-session-id").unwrap().to_str().unwrap().to_owned();
    drop(resp.text().await);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", BOTH)
        .header("mcp-session-id", &sid)
        .body(note)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    sid
}

async fn delete(url: &str, sid: &str) {
    let r = reqwest::Client::new().delete(url).header("mcp-session-id", sid).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

/// Calls `tool` and returns its text.
async fn call(url: &str, sid: &str, tool: &str, args: Value) -> String {
    let msg = post(url, sid, rpc(7, "tools/call", json!({"name": tool, "arguments": args}))).await;
    msg["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{tool}: {msg}")).to_owned()
}

/// The process that answered, and what it said of its page and log level.
fn seen(text: &str) -> (String, String, String) {
    let words: Vec<&str> = text.split_whitespace().collect();
    let at = |k: &str| words.iter().position(|w| *w == k).and_then(|i| words.get(i + 1)).unwrap_or_else(|| panic!("{text}")).to_string();
    (at("pid"), at("page"), at("level"))
}

/// The `stowage-session-fixture` processes this test process started and that still run.
fn fixture_processes() -> usize {
    fixture_pids().len()
}

/// The pids of [`fixture_processes`], sorted.
fn fixture_pids() -> Vec<String> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // A zombie is reaped already as far as the gateway is concerned.
            if stat.split_whitespace().nth(2) == Some("Z") {
                continue;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let exe = cmdline.split(|b| *b == 0).next().unwrap_or_default();
            if String::from_utf8_lossy(exe).ends_with("stowage-session-fixture") {
                out.push(pid.to_owned());
            }
        }
    }
    out.sort();
    out
}

/// Two clients on one gateway, each as if it had connected directly: both start on the
/// pristine process while they only look; the first `navigate` gives a client its own
/// process, whose page and log level the other never sees; a client that declares roots
/// has its own process from its first request; ending a session stops its process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_see_their_own_upstream_state_and_share_only_what_changes_nothing() {
    let (gw, url) = gateway(session_fixture(None), fast_config()).await;
    let (a, b) = (initialize(&url, json!({})).await, initialize(&url, json!({})).await);

    let (pristine_a, page, level) = seen(&call(&url, &a, "snapshot", json!({})).await);
    assert_eq!((page.as_str(), level.as_str()), ("about:blank", "unset"));
    let (pristine_b, _, _) = seen(&call(&url, &b, "snapshot", json!({})).await);
    assert_eq!(pristine_a, pristine_b, "a read-only tool of clients that changed nothing is served by one pristine process");

    // A changes its page: from then on it has a process of its own.
    let (own_a, page, _) = seen(&call(&url, &a, "navigate", json!({"url": "https://a.example/"})).await);
    assert_eq!(page, "https://a.example/");
    assert_ne!(own_a, pristine_a, "a request that changes state never reaches the pristine process");
    let set = post(&url, &a, rpc(8, "logging/setLevel", json!({"level": "debug"}))).await;
    assert!(set["result"].is_object(), "{set}");
    assert_eq!(seen(&call(&url, &a, "snapshot", json!({})).await), (own_a.clone(), "https://a.example/".into(), "debug".into()));

    // B still sees a fresh session.
    assert_eq!(seen(&call(&url, &b, "snapshot", json!({})).await), (pristine_a.clone(), "about:blank".into(), "unset".into()));
    let (own_b, page, level) = seen(&call(&url, &b, "navigate", json!({"url": "https://b.example/"})).await);
    assert_ne!(own_b, own_a);
    assert_ne!(own_b, pristine_a);
    assert_eq!((page.as_str(), level.as_str()), ("https://b.example/", "unset"), "A's log level is A's alone");
    assert_eq!(seen(&call(&url, &a, "snapshot", json!({})).await).1, "https://a.example/", "B's page is B's alone");

    // A resource read is served where the client's state is.
    let read = post(&url, &a, rpc(9, "resources/read", json!({"uri": "browser://page"}))).await;
    assert!(read["result"]["contents"][0]["text"].as_str().unwrap().contains("https://a.example/"), "{read}");

    // A client that the server could ask for its roots never uses the pristine process.
    let c = initialize(&url, json!({"roots": {"listChanged": true}})).await;
    let (own_c, page, _) = seen(&call(&url, &c, "snapshot", json!({})).await);
    assert!(own_c != pristine_a && own_c != own_a && own_c != own_b, "{own_c}");
    assert_eq!(page, "about:blank");

    // control + pristine + A + B + C, and at most one spare.
    let running = fixture_processes();
    assert!((5..=6).contains(&running), "{running} processes");
    for sid in [&a, &b, &c] {
        delete(&url, sid).await;
    }
    assert!(eventually(5, || fixture_processes() <= running - 3).await, "ended sessions stop their processes: {}", fixture_processes());
    assert!(gw.upstreams[0].sessions_held() <= 2, "the pristine session and a spare: {}", gw.upstreams[0].sessions_held());
    gw.shutdown();
}

/// `isolated` gives every client its own process from its first request on, the read-only
/// ones included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_mode_never_shares_a_process() {
    let mut spec = session_fixture(None);
    spec.session_mode = Some(stowage_mcp::SessionMode::Isolated);
    let (gw, url) = gateway(spec, fast_config()).await;
    let (a, b) = (initialize(&url, json!({})).await, initialize(&url, json!({})).await);
    let (pa, _, _) = seen(&call(&url, &a, "snapshot", json!({})).await);
    let (pb, _, _) = seen(&call(&url, &b, "snapshot", json!({})).await);
    assert_ne!(pa, pb);
    let (pa2, page, _) = seen(&call(&url, &a, "navigate", json!({"url": "https://a.example/"})).await);
    assert_eq!((pa2.as_str(), page.as_str()), (pa.as_str(), "https://a.example/"));
    gw.shutdown();
}

/// At the cap with every session busy, a new client's request fails at once with an error
/// naming the cap; once one is idle, it makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_with_every_session_busy_a_new_client_is_refused_at_once_naming_it() {
    let config = GatewayConfig { max_upstream_sessions: 2, spare_upstream_processes: 0, ..fast_config() };
    let (gw, url) = gateway(session_fixture(None), config).await;
    let roots = json!({"roots": {}});
    let (a, b, c) = (initialize(&url, roots.clone()).await, initialize(&url, roots.clone()).await, initialize(&url, roots).await);
    let slow = |sid: String| {
        let url = url.clone();
        tokio::spawn(async move { call(&url, &sid, "read_slowly", json!({"ms": 3000})).await })
    };
    let (ta, tb) = (slow(a), slow(b));
    assert!(eventually(10, || gw.upstreams[0].client_sessions() == 2).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let refused = post(&url, &c, rpc(7, "tools/call", json!({"name": "snapshot", "arguments": {}}))).await;
    assert!(started.elapsed() < Duration::from_secs(2), "refused at once, not after a timeout: {:?}", started.elapsed());
    let text = refused["result"]["content"][0]["text"].as_str().or(refused["error"]["message"].as_str()).unwrap_or_default().to_owned();
    assert!(text.contains("max_upstream_sessions = 2"), "{refused}");
    assert!(refused["result"]["isError"] == true || refused["error"].is_object(), "{refused}");
    ta.await.unwrap();
    tb.await.unwrap();
    // Now both are idle: the least recently used one makes room.
    assert!(seen(&call(&url, &c, "snapshot", json!({})).await).1 == "about:blank");
    assert!(gw.upstreams[0].sessions_held() <= 2);
    assert!(fixture_processes() <= 3, "{} processes", fixture_processes());
    gw.shutdown();
}

/// A client that ends its session while its upstream process is still starting leaves no
/// process behind, however often it happens; and the cap counts processes from the moment
/// they start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_while_its_process_starts_leaves_no_process_behind() {
    let config = GatewayConfig { max_upstream_sessions: 4, spare_upstream_processes: 0, ..fast_config() };
    let (gw, url) = gateway(session_fixture(Some(1500)), config).await;
    let base = fixture_processes();
    assert_eq!(base, 1, "the gateway's own session");
    for _ in 0..12 {
        let sid = initialize(&url, json!({})).await;
        let (u, s) = (url.clone(), sid.clone());
        let pending = tokio::spawn(async move {
            let _ = reqwest::Client::new()
                .post(&u)
                .header("content-type", "application/json")
                .header("accept", BOTH)
                .header("mcp-session-id", &s)
                .body(rpc(7, "tools/call", json!({"name": "navigate", "arguments": {"url": "x"}})))
                .send()
                .await;
        });
        assert!(eventually(5, || gw.upstreams[0].sessions_held() == 1).await, "a starting session counts against the cap");
        delete(&url, &sid).await;
        assert_eq!(gw.upstreams[0].sessions_held(), 0);
        pending.abort();
    }
    assert!(eventually(5, || fixture_processes() == base).await, "{} processes left", fixture_processes());
    gw.shutdown();
}

/// A client that leaves without `DELETE` frees its upstream process within the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_without_delete_frees_its_process_within_the_idle_timeout() {
    let config = GatewayConfig { upstream_session_idle_secs: 3, spare_upstream_processes: 0, ..fast_config() };
    let (gw, url) = gateway(session_fixture(None), config).await;
    let a = initialize(&url, json!({})).await;
    call(&url, &a, "navigate", json!({"url": "https://a.example/"})).await;
    assert_eq!(fixture_processes(), 2);
    assert!(eventually(6, || fixture_processes() == 1).await, "{} processes", fixture_processes());
    assert_eq!(gw.upstreams[0].sessions_held(), 0);
    gw.shutdown();
}

/// A spare process is started as soon as the gateway's own session is up; a new client's
/// session takes it and only performs its handshake (no cold start: this fixture reads
/// nothing for 3 s after it starts), and another spare starts behind it. A spare nobody takes
/// is stopped after `upstream_session_idle_secs`, as idle sessions are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_takes_a_warm_spare_and_another_starts_behind_it() {
    let config = GatewayConfig { spare_upstream_processes: 1, upstream_session_idle_secs: 6, ..fast_config() };
    let (gw, url) = gateway(session_fixture(Some(3000)), config).await;
    assert!(eventually(5, || fixture_processes() == 2).await, "the gateway's own process and a spare: {:?}", fixture_pids());
    let before = fixture_pids();
    assert_eq!(gw.upstreams[0].client_sessions(), 0);
    tokio::time::sleep(Duration::from_millis(3100)).await; // the spare is past its slow start
    // A client that declares roots has a session of its own from its first request.
    let a = initialize(&url, json!({"roots": {}})).await;
    let started = Instant::now();
    let (pid, page, _) = seen(&call(&url, &a, "snapshot", json!({})).await);
    let took = started.elapsed();
    assert!(before.contains(&pid), "the session did not run in the spare ({pid} is not one of {before:?})");
    assert_eq!(page, "about:blank");
    assert!(took < Duration::from_secs(2), "the first call took {took:?}: a cold start, not a handshake on a warm spare");
    assert!(eventually(5, || fixture_processes() == 3).await, "no new spare behind the taken one: {:?}", fixture_pids());
    let spare: Vec<String> = fixture_pids().into_iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(spare.len(), 1, "{before:?} then {:?}", fixture_pids());
    assert_eq!(gw.upstreams[0].client_sessions(), 1);
    // The client leaves; its process stops at once, and the unused spare within the idle time.
    delete(&url, &a).await;
    assert!(eventually(5, || !fixture_pids().contains(&pid)).await, "{pid} outlived its session");
    assert!(fixture_pids().contains(&spare[0]), "the spare stopped with the session");
    assert!(eventually(10, || fixture_processes() == 1).await, "the unused spare was never stopped: {:?}", fixture_pids());
    assert_eq!(gw.upstreams[0].sessions_held(), 0);
    gw.shutdown();
}

/// The SSE events' data read from `body` until `until` holds for one, the stream ends or
/// `wait` passes.
async fn events_until(
    body: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    wait: Duration,
    until: impl Fn(&str) -> bool,
) -> Vec<String> {
    use futures::StreamExt;
    let deadline = tokio::time::Instant::now() + wait;
    let (mut out, mut buf) = (Vec::new(), String::new());
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, body.next()).await {
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            if data.is_empty() {
                continue; // the priming event, a keep-alive
            }
            let stop = until(&data);
            out.push(data);
            if stop {
                return out;
            }
        }
    }
    out
}

/// A 2026-07-28 client has no session: it hears of a resource's changes on its
/// `subscriptions/listen` stream. With per-client upstream sessions the subscription is made
/// in that client's own upstream session, where its (stateless) calls run too: its own
/// `navigate` puts `resources/updated` on the stream, tagged with the listen request's id,
/// and another client's `navigate` in its own session puts nothing there. (Made on the
/// gateway's own session, the subscription once brought no update at all.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_clients_listen_stream_hears_the_updates_of_its_own_upstream_session_alone() {
    let (gw, url) = gateway(session_fixture(None), fast_config()).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let stateless = |body: String| {
        reqwest::Client::new().post(&url).header("content-type", "application/json").header("accept", BOTH).body(body).send()
    };
    let listen = rpc(30, "subscriptions/listen", json!({"notifications": {"resourceSubscriptions": ["browser://page"]}, "_meta": meta}));
    let resp = stateless(listen).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = resp.bytes_stream();
    let ack = events_until(&mut stream, Duration::from_secs(10), |d| d.contains("acknowledged")).await;
    let ack: Value = serde_json::from_str(ack.last().unwrap()).unwrap();
    assert_eq!(ack["params"]["notifications"]["resourceSubscriptions"], json!(["browser://page"]), "{ack}");

    // Another client changes the page in its own session: not this stream's business.
    let other = initialize(&url, json!({})).await;
    call(&url, &other, "navigate", json!({"url": "https://other.example/"})).await;
    let quiet = events_until(&mut stream, Duration::from_millis(800), |_| false).await;
    assert!(quiet.is_empty(), "another client's update reached the stream: {quiet:?}");

    // The listening client navigates (statelessly, as itself): its update arrives.
    let navigate = rpc(31, "tools/call", json!({"name": "navigate", "arguments": {"url": "https://mine.example/"}, "_meta": meta}));
    let answer = stateless(navigate).await.unwrap().text().await.unwrap();
    assert!(answer.contains("page https://mine.example/"), "{answer}");
    let heard = events_until(&mut stream, Duration::from_secs(5), |d| d.contains("resources/updated")).await;
    let update: Value = serde_json::from_str(heard.last().unwrap_or_else(|| panic!("no update on the listen stream"))).unwrap();
    assert_eq!(update["method"], "notifications/resources/updated", "{heard:?}");
    assert_eq!(update["params"]["uri"], "browser://page", "{update}");
    assert_eq!(update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 30, "{update}");
    gw.shutdown();
}

/// Opens session `sid`'s standalone stream (`GET`), where a 2025 client hears of changes.
async fn standalone(url: &str, sid: &str) -> impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin {
    let resp = reqwest::Client::new().get(url).header("accept", "text/event-stream").header("mcp-session-id", sid).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.bytes_stream()
}

/// A 2025 client's `resources/subscribe` is made in its own upstream session, as it would be
/// connected directly: its own `navigate` brings `resources/updated` to its standalone
/// stream; another client's `navigate` brings nothing to either (that client never
/// subscribed, and its page is not the subscriber's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_resource_subscription_lives_in_its_own_upstream_session() {
    let (gw, url) = gateway(session_fixture(None), fast_config()).await;
    let (a, b) = (initialize(&url, json!({})).await, initialize(&url, json!({})).await);
    let (mut a_stream, mut b_stream) = (standalone(&url, &a).await, standalone(&url, &b).await);
    let sub = post(&url, &a, rpc(5, "resources/subscribe", json!({"uri": "browser://page"}))).await;
    assert!(sub["result"].is_object(), "{sub}");

    call(&url, &b, "navigate", json!({"url": "https://b.example/"})).await;
    let quiet = events_until(&mut a_stream, Duration::from_millis(800), |_| false).await;
    assert!(!quiet.iter().any(|d| d.contains("resources/updated")), "B's navigation reached A: {quiet:?}");

    let (_, page, _) = seen(&call(&url, &a, "navigate", json!({"url": "https://a.example/"})).await);
    assert_eq!(page, "https://a.example/");
    let heard = events_until(&mut a_stream, Duration::from_secs(5), |d| d.contains("resources/updated")).await;
    let update: Value = serde_json::from_str(heard.last().unwrap_or_else(|| panic!("A heard nothing"))).unwrap();
    assert_eq!(
        (update["method"].as_str(), update["params"]["uri"].as_str()),
        (Some("notifications/resources/updated"), Some("browser://page"))
    );
    let b_heard = events_until(&mut b_stream, Duration::from_millis(800), |_| false).await;
    assert!(!b_heard.iter().any(|d| d.contains("resources/updated")), "A's update reached B, which never subscribed: {b_heard:?}");
    gw.shutdown();
}

/// The tool names `tools/list` gives session `sid`.
async fn tool_names(url: &str, sid: &str) -> Vec<String> {
    let list = post(url, sid, rpc(11, "tools/list", json!({}))).await;
    let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("{list}"));
    tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

/// Any session-scoped first request promotes a client off the pristine process, not only a
/// tool that may change state: a first `logging/setLevel` gives it its own process holding
/// that level, while the other client stays on the pristine one. A tool list its own session
/// changed (`add_tool`) is its alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_set_level_promotes_a_client_and_its_sessions_tool_list_is_its_own() {
    let (gw, url) = gateway(session_fixture(None), fast_config()).await;
    let (a, b) = (initialize(&url, json!({})).await, initialize(&url, json!({})).await);
    let (pristine, _, _) = seen(&call(&url, &b, "snapshot", json!({})).await);

    let set = post(&url, &a, rpc(8, "logging/setLevel", json!({"level": "warning"}))).await;
    assert!(set["result"].is_object(), "{set}");
    let (own_a, page, level) = seen(&call(&url, &a, "snapshot", json!({})).await);
    assert_ne!(own_a, pristine, "a client that set its log level still shares the pristine process");
    assert_eq!((page.as_str(), level.as_str()), ("about:blank", "warning"));
    assert_eq!(seen(&call(&url, &b, "snapshot", json!({})).await), (pristine.clone(), "about:blank".into(), "unset".into()));

    assert!(!tool_names(&url, &a).await.iter().any(|n| n.ends_with("extra")));
    call(&url, &a, "add_tool", json!({})).await;
    // The list is fetched again on the session's `list_changed`, which may come just after.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut a_tools = tool_names(&url, &a).await;
    while !a_tools.iter().any(|n| n.ends_with("extra")) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        a_tools = tool_names(&url, &a).await;
    }
    let b_tools = tool_names(&url, &b).await;
    assert!(a_tools.iter().any(|n| n.ends_with("extra")), "A's own session added a tool A does not see: {a_tools:?}");
    assert!(!b_tools.iter().any(|n| n.ends_with("extra")), "A's session's tool reached B: {b_tools:?}");
    gw.shutdown();
}
