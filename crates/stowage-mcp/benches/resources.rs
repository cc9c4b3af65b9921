//! MCP resources through the gateway (BENCHMARKS.md, "MCP resources"), against `stowage-fixture` children on stdio
//! and an fs store in a temporary directory, a client on the gateway's stdio transport:
//!
//! 1. a cached read of a 10 MB blob resource against the uncached read of it through the same
//!    kind of gateway (one with the cache off, its fixture's blob already made) — target ≥ 20×;
//! 2. `resources/list` of 1,000 resources across three upstreams — target ≤ 50 ms;
//! 3. a 50 MB blob resource read reaching the client as a reference, end to end — target
//!    ≤ 0.5 s — and the process's peak RSS after it (gateway, client and bench together;
//!    target < 200 MB for the gateway).
//!
//! Medians of `BENCH_RUNS` runs (default 15; 5 for the 50 MB read). Reproduce, on a quiet
//! machine: `cargo bench -p stowage-mcp --bench resources`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stowage_mcp::Gateway;
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::shape::{Pipelines, Shaper};
use stowage_store::{ArtifactStore, FsStore, RetentionConfig};
use stowage_testkit::RpcClient;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn spec(name: &str, many: usize) -> UpstreamSpec {
    let command = stowage_testkit::fixture_bin().display().to_string();
    let mut env = std::collections::BTreeMap::new();
    env.insert("STOWAGE_FIXTURE_RESOURCES".to_owned(), many.to_string());
    UpstreamSpec::new(name, TransportSpec::Stdio { command, args: vec![], env, cwd: None, inherit_env: false }, Duration::from_secs(120))
}

/// Peak resident set of this process so far, in MB.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0.0);
    kb / 1024.0
}

async fn gateway(config: GatewayConfig, specs: Vec<UpstreamSpec>, store: Arc<dyn ArtifactStore>) -> (Arc<Gateway>, RpcClient) {
    let sink = stowage_store::into_sink(store.clone());
    let pipeline =
        stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), stowage_mcp::shape::with_dimensions(sink));
    let shaper = Shaper::new(Pipelines::new(Arc::new(pipeline)));
    let n = specs.len();
    let gw = Gateway::builder(config, specs, shaper).store(store).start();
    assert_eq!(gw.wait_ready(Duration::from_secs(60)).await, n);
    let (client_end, gw_end) = tokio::io::duplex(1 << 20);
    let (gr, gwr) = tokio::io::split(gw_end);
    tokio::spawn(stowage_mcp::serve_stdio(gw.clone(), gr, gwr));
    let (cr, cw) = tokio::io::split(client_end);
    let rpc = RpcClient::connect(cr, cw, None);
    rpc.initialize("2025-06-18", json!({})).await;
    (gw, rpc)
}

async fn timed(c: &RpcClient, method: &str, params: Value) -> (Duration, Value) {
    let t = Instant::now();
    let r = c.request_within(Duration::from_secs(120), method, params).await;
    assert!(r.get("error").is_none(), "{}", &r.to_string()[..r.to_string().len().min(2000)]);
    (t.elapsed(), r)
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    let dir = tempfile::tempdir().unwrap();
    let retention =
        RetentionConfig { max_artifact_bytes: 200 << 20, max_session_bytes: 4 << 30, max_user_bytes: 8 << 30, ..Default::default() };
    let store: Arc<dyn ArtifactStore> = Arc::new(FsStore::builder(dir.path()).retention(retention).open().unwrap());

    // 1. Cached against uncached, 10 MB.
    let ten = json!({"uri": "fx://blob/10000000"});
    let mut off = GatewayConfig::default();
    off.resources.cache_ttl_secs = 0;
    let (gw_off, c_off) = gateway(off, vec![spec("fx", 0)], store.clone()).await;
    let (gw_on, c_on) = gateway(GatewayConfig::default(), vec![spec("fx", 0)], store.clone()).await;
    timed(&c_off, "resources/read", ten.clone()).await; // the fixture makes its blob once
    timed(&c_on, "resources/read", ten.clone()).await; // ...and this one fills the cache
    let (mut uncached, mut cached) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        uncached.push(timed(&c_off, "resources/read", ten.clone()).await.0);
        let (t, r) = timed(&c_on, "resources/read", ten.clone()).await;
        assert_eq!(r["result"]["_meta"]["io.stowage/transform"]["cached"], true);
        cached.push(t);
    }
    let (u, c) = (median(uncached), median(cached));
    println!("10 MB blob read: uncached {u:?}, cached {c:?}, {:.0}x (target ≥ 20x)", u.as_secs_f64() / c.as_secs_f64());
    gw_on.shutdown();

    // 3. 50 MB, end to end, on the gateway without a cache (its fixture's blob made first).
    let fifty = json!({"uri": "fx://blob/50000000"});
    timed(&c_off, "resources/read", fifty.clone()).await;
    let rss_before = peak_rss_mb();
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..runs.min(5) {
        let (t, r) = timed(&c_off, "resources/read", fifty.clone()).await;
        size = r.to_string().len();
        times.push(t);
    }
    println!(
        "50 MB blob read as a reference: {:?} median, answer {size} bytes (target ≤ 0.5 s); peak RSS {:.0} MB (before the timed reads {rss_before:.0} MB)",
        median(times),
        peak_rss_mb()
    );
    gw_off.shutdown();

    // 2. Listing 1,000 resources across three upstreams.
    let (gw, c) = gateway(GatewayConfig::default(), vec![spec("a", 333), spec("b", 333), spec("c", 334)], store.clone()).await;
    let mut times = Vec::new();
    let mut count = 0;
    for _ in 0..runs {
        let (t, r) = timed(&c, "resources/list", json!({})).await;
        count = r["result"]["resources"].as_array().map_or(0, Vec::len);
        times.push(t);
    }
    println!("resources/list, three upstreams: {count} resources in {:?} median (target ≤ 50 ms)", median(times));
    gw.shutdown();
}
