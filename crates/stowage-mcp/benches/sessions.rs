//! What a `per_client` upstream session costs, against `shared`, in one run: for a stdio
//! server of our own (`stowage-fixture`) and for server-everything (Node), 20 clients connect
//! one after another over Streamable HTTP, each on its own kept-alive connection, and make
//! their first call (`echo`): the time from `initialize` to that call's answer, and the
//! memory the gateway's process tree (the gateway and every upstream child) gained per
//! client. Then the 20 clients make `BENCH_CALLS` (default 100) small calls each, round
//! robin: the latency per call.
//!
//! Then, with server-everything, clients all at once (`BENCH_AT_ONCE`, default `12,50`): each
//! of N clients connects at the same moment, on its own connection, and makes one tool call
//! (`echo`, which server-everything marks read-only, and for 12 clients also
//! `toggle-subscriber-updates`, which changes the session's state); its time from `initialize`
//! to that answer, and the peak memory of the gateway's process tree above what it held ready,
//! sampled every 20 ms. Each mode against `shared`, in the same run.
//!
//! Reproduce, on a quiet machine: `cargo bench -p stowage-mcp --bench sessions` (needs the
//! peers for server-everything: `scripts/gateway-peers.sh`; `STOWAGE_PEERS_DIR`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::shape::{Pipelines, Shaper};
use stowage_mcp::{Gateway, SessionMode};

#[path = "support/peak.rs"]
mod peak;
use peak::Peak;

const CLIENTS: usize = 20;

/// One MCP client over Streamable HTTP on its own kept-alive connection.
struct Client {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    next: u64,
}

impl Client {
    fn new(url: &str) -> Client {
        // One connection per client, kept alive, as an SDK client keeps it.
        let http = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
        Client { http, url: url.to_owned(), session: None, next: 1 }
    }

    async fn post(&mut self, body: Value) -> Option<Value> {
        let mut req = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        let resp = req.send().await.unwrap();
        if let Some(s) = resp.headers().get("mcp-session-id") {
            self.session = Some(s.to_str().unwrap().to_owned());
        }
        let text = resp.text().await.unwrap();
        // A notification has no answer.
        body.get("id")?;
        // A JSON body, or an SSE stream whose last data line is the answer.
        let json = text.lines().filter_map(|l| l.strip_prefix("data:")).rfind(|d| !d.trim().is_empty()).unwrap_or(&text);
        Some(serde_json::from_str(json.trim()).unwrap())
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let answer = self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await.unwrap();
        assert!(answer.get("result").is_some(), "{method}: {answer}");
        answer
    }

    async fn initialize(&mut self) {
        let params = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}});
        self.request("initialize", params).await;
        self.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    }

    async fn echo(&mut self) {
        self.call("echo", json!({"message": "hi"})).await;
    }

    async fn call(&mut self, tool: &str, arguments: Value) {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments})).await;
        assert!(answer["result"]["isError"] != true, "{tool}: {answer}");
    }
}

/// Resident memory of `pid` and all its descendants, in KiB.
fn tree_rss_kb(pid: u32) -> u64 {
    let mut total = 0;
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
        total +=
            status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0u64);
        for task in std::fs::read_dir(format!("/proc/{p}/task")).into_iter().flatten().flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            todo.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    total
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Figures {
    first_call: Vec<Duration>,
    rss_per_client_kb: f64,
    calls: Vec<Duration>,
}

async fn run(spec: UpstreamSpec, mode: SessionMode, calls: usize) -> Figures {
    let sink = stowage_transform::testing::MemorySink::new();
    let pipeline =
        stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), stowage_mcp::shape::with_dimensions(sink));
    let shaper = Shaper::new(Pipelines::new(Arc::new(pipeline)));
    let gw = Gateway::builder(GatewayConfig::default(), vec![spec], shaper).session_mode(mode).start();
    assert_eq!(gw.wait_ready(Duration::from_secs(60)).await, 1);
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    let url = format!("http://{addr}/mcp");
    // Warm up: one client, then its memory is the baseline.
    let mut warm = Client::new(&url);
    warm.initialize().await;
    warm.echo().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = tree_rss_kb(std::process::id());
    let mut clients = Vec::new();
    let mut first_call = Vec::new();
    for _ in 0..CLIENTS {
        let mut c = Client::new(&url);
        let t = Instant::now();
        c.initialize().await;
        c.echo().await;
        first_call.push(t.elapsed());
        clients.push(c);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = tree_rss_kb(std::process::id());
    let mut times = Vec::with_capacity(CLIENTS * calls);
    for _ in 0..calls {
        for c in &mut clients {
            let t = Instant::now();
            c.echo().await;
            times.push(t.elapsed());
        }
    }
    gw.shutdown();
    drop(clients);
    // Let the children exit before the next run measures.
    tokio::time::sleep(Duration::from_millis(500)).await;
    first_call.sort();
    times.sort();
    Figures { first_call, rss_per_client_kb: (after as f64 - before as f64) / CLIENTS as f64, calls: times }
}

/// `n` clients connect at once and each makes one call of `tool`: each one's time from
/// `initialize` to the answer, sorted, and the tree's peak memory above what it held ready.
async fn at_once(transport: &TransportSpec, mode: SessionMode, n: usize, tool: &'static str, arguments: Value) -> (Vec<Duration>, u64) {
    let spec = UpstreamSpec::new("up", transport.clone(), Duration::from_secs(120));
    let sink = stowage_transform::testing::MemorySink::new();
    let pipeline =
        stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), stowage_mcp::shape::with_dimensions(sink));
    let shaper = Shaper::new(Pipelines::new(Arc::new(pipeline)));
    let mut config = GatewayConfig::default();
    config.max_upstream_sessions = config.max_upstream_sessions.max(n + 4);
    let gw = Gateway::builder(config, vec![spec], shaper).session_mode(mode).start();
    assert_eq!(gw.wait_ready(Duration::from_secs(60)).await, 1);
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    let url = format!("http://{addr}/mcp");
    // Ready: the upstream (and its spare processes) started and settled.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = tree_rss_kb(std::process::id());
    // The tree's peak, sampled every 20 ms.
    let peak = Peak::start(Duration::from_millis(20), || tree_rss_kb(std::process::id()));
    let start = tokio::sync::Barrier::new(n);
    let start = Arc::new(start);
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (url, start, arguments) = (url.clone(), start.clone(), arguments.clone());
            tokio::spawn(async move {
                let mut c = Client::new(&url);
                start.wait().await;
                let t = Instant::now();
                c.initialize().await;
                c.call(tool, arguments).await;
                (t.elapsed(), c)
            })
        })
        .collect();
    let mut times = Vec::with_capacity(n);
    let mut clients = Vec::with_capacity(n);
    for t in tasks {
        let (d, c) = t.await.unwrap();
        times.push(d);
        clients.push(c);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let peak = peak.stop();
    gw.shutdown();
    drop(clients);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    times.sort();
    (times, peak.saturating_sub(before))
}

#[tokio::main]
async fn main() {
    let calls: usize = std::env::var("BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let fixture = stowage_testkit::fixture_bin().display().to_string();
    let mut upstreams = vec![("stowage-fixture (Rust, stdio)", TransportSpec::stdio(fixture, vec![]))];
    let everything = stowage_testkit::peers_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if everything.exists() {
        upstreams.push((
            "server-everything (Node, stdio)",
            TransportSpec::stdio("node", vec![everything.display().to_string(), "stdio".into()]),
        ));
    } else {
        eprintln!("server-everything is not installed (scripts/gateway-peers.sh): measuring the fixture only");
    }
    let at_once_counts: Vec<usize> =
        std::env::var("BENCH_AT_ONCE").unwrap_or_else(|_| "12,50".into()).split(',').filter_map(|n| n.trim().parse().ok()).collect();
    if let Some((_, everything)) = upstreams.get(1).filter(|_| !at_once_counts.is_empty()) {
        println!("server-everything: N clients at once, one call each; first result p50 / max, peak memory of the tree above ready");
        for &n in &at_once_counts {
            let mut cases = vec![("echo", json!({"message": "hi"}))];
            if n <= 12 {
                cases.push(("toggle-subscriber-updates", json!({})));
            }
            for (tool, arguments) in cases {
                for mode in [SessionMode::PerClient, SessionMode::Shared] {
                    let (times, peak_kb) = at_once(everything, mode, n, tool, arguments.clone()).await;
                    println!(
                        "  {n:>3} clients, {tool:<26} {:<10} first result p50 {:>8.1} ms  max {:>8.1} ms | peak +{:>7.1} MiB",
                        format!("{mode:?}"),
                        ms(percentile(&times, 0.5)),
                        ms(times[times.len() - 1]),
                        peak_kb as f64 / 1024.0
                    );
                }
            }
        }
    }
    println!("{CLIENTS} clients over Streamable HTTP, each on its own kept-alive connection; {calls} echo calls each, round robin");
    for (label, transport) in upstreams {
        println!("{label}");
        for mode in [SessionMode::PerClient, SessionMode::Shared] {
            let spec = UpstreamSpec::new("up", transport.clone(), Duration::from_secs(60));
            let f = run(spec, mode, calls).await;
            println!(
                "  {:<10} first call p50 {:>7.2} ms  max {:>7.2} ms | memory per client {:>8.0} KiB | small calls p50 {:.3} ms  p99 {:.3} ms",
                format!("{mode:?}"),
                ms(percentile(&f.first_call, 0.5)),
                ms(f.first_call[f.first_call.len() - 1]),
                f.rss_per_client_kb,
                ms(percentile(&f.calls, 0.5)),
                ms(percentile(&f.calls, 0.99)),
            );
        }
    }
}
