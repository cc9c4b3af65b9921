//! `artifact_read` pages of a 2 MB CSV (BENCHMARKS.md, "One shaper"): the time of one page, sized to the host,
//! from the client sending the call to it having the answer, through the gateway's stdio
//! transport in process, an fs store in a temporary directory, and the Rust test fixture as
//! the upstream that produced the CSV (its `echo` of 2 MB of CSV text, offloaded). For each
//! profile (an unknown client, `claude-code`, `codex`), a CSV of its own, read as a model
//! reads: from the start and from the middle, `BENCH_RUNS` pages in turn (default 30), each
//! once, the next at `nextOffset`; and the last 2,000 characters, a short page, `BENCH_RUNS`
//! times. Target: at most 5 ms a page. Prints the median and the slowest page.
//!
//! Reproduce, on a quiet machine: `cargo bench -p stowage-mcp --bench reader`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stowage_mcp::Gateway;
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::shape::{Pipelines, Shaper};
use stowage_store::{ArtifactStore, FsStore};
use stowage_testkit::RpcClient;

/// A 2 MB CSV of orders (numbers tokenize densely, the worst case for a token budget).
fn csv(seed: u64) -> String {
    let mut out = String::from("order_id,region,units,unit_price,total\n");
    let mut i = seed * 1_000_003;
    while out.len() < 2 << 20 {
        let units = (i * 37) % 500;
        let price = ((i * 7919) % 10000) as f64 / 100.0;
        out.push_str(&format!(
            "{},{},{units},{price:.2},{:.2}\n",
            100_000_000 + i,
            ["north", "south", "east", "west"][i as usize % 4],
            units as f64 * price
        ));
        i += 1;
    }
    out
}

async fn client(gw: &Arc<Gateway>, name: &str) -> RpcClient {
    let (client_end, gw_end) = tokio::io::duplex(1 << 20);
    let (gr, gwr) = tokio::io::split(gw_end);
    tokio::spawn(stowage_mcp::serve_stdio(gw.clone(), gr, gwr));
    let (cr, cw) = tokio::io::split(client_end);
    let rpc = RpcClient::connect(cr, cw, None);
    rpc.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": name, "version": "1"}}))
        .await;
    rpc.notify("notifications/initialized", json!({}));
    rpc
}

async fn timed(c: &RpcClient, args: Value) -> (Duration, Value) {
    let t = Instant::now();
    let r = c.request_within(Duration::from_secs(60), "tools/call", json!({"name": "artifact_read", "arguments": args})).await;
    let elapsed = t.elapsed();
    assert!(r.get("error").is_none() && r["result"]["isError"] != true, "{}", &r.to_string()[..r.to_string().len().min(2000)]);
    (elapsed, r)
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ArtifactStore> = Arc::new(FsStore::builder(dir.path()).open().unwrap());
    let sink = stowage_store::into_sink(store.clone());
    let pipeline =
        stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), stowage_mcp::shape::with_dimensions(sink));
    let command = stowage_testkit::fixture_bin().display().to_string();
    let spec = UpstreamSpec::new(
        "fx",
        TransportSpec::Stdio { command, args: vec![], env: Default::default(), cwd: None, inherit_env: false },
        Duration::from_secs(120),
    );
    let gw = Gateway::builder(GatewayConfig::default(), vec![spec], Shaper::new(Pipelines::new(Arc::new(pipeline)))).store(store).start();
    assert_eq!(gw.wait_ready(Duration::from_secs(60)).await, 1);

    for (n, profile) in ["bench", "claude-code", "codex"].into_iter().enumerate() {
        // A CSV of its own per profile: pages one profile read would otherwise be known to the
        // next (token counts are remembered per chunk of text, whoever read it).
        let text = csv(n as u64);
        let c = client(&gw, profile).await;
        let r = c.request_within(Duration::from_secs(60), "tools/call", json!({"name": "echo", "arguments": {"message": text}})).await;
        let line = r["result"]["content"][0]["text"].as_str().unwrap_or_default();
        let id = line
            .split_whitespace()
            .find(|w| w.starts_with("artifact://"))
            .unwrap_or_else(|| panic!("the CSV was not offloaded: {line:.300}"))
            .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_owned();
        if n == 0 {
            println!(
                "artifact_read on a {} byte CSV, {runs} pages read in turn from each position (target ≤ 5 ms a page); median, max",
                text.len()
            );
        }
        let end = text.len() - 2000;
        timed(&c, json!({"id": id, "offset": end})).await; // warm: the blob is in the page cache
        let mut row = Vec::new();
        for (label, from) in [("start", Some(0)), ("middle", Some(text.len() / 2)), ("end", None)] {
            let mut times: Vec<Duration> = Vec::with_capacity(runs);
            let (mut offset, mut bytes) = (from.unwrap_or(end), 0);
            for _ in 0..runs {
                let (t, page) = timed(&c, json!({"id": id, "offset": offset})).await;
                times.push(t);
                bytes = page.to_string().len();
                // The reading loop: each page once, the next where this one stopped (the end
                // is one short page, read again).
                if from.is_some() {
                    offset = page["result"]["structuredContent"]["nextOffset"].as_u64().expect("a next page") as usize;
                }
            }
            times.sort();
            row.push(format!(
                "{label} {:.2} ms, {:.2} ms ({bytes} B answer)",
                times[runs / 2].as_secs_f64() * 1e3,
                times[runs - 1].as_secs_f64() * 1e3
            ));
        }
        println!("  {profile:<12} {}", row.join("; "));
    }
    gw.shutdown();
}
