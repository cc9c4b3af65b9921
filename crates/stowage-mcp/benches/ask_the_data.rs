//! Asking the data (docs/results.md, "Asking the data"): the time of one reader call from the client
//! sending it to it having the answer, through the gateway's stdio transport in process, with a
//! memory store and the Rust test fixture as the upstream. `artifact_query` with a jq program
//! over a 10 MB JSON artifact and over a 30,000-row CSV, and `artifact_describe` of the 10 MB
//! JSON, and `artifact_collect` of the fixture's 30-page `list_tickets`. Targets: ≤ 300 ms
//! median each (collect: ≤ 2 s), with memory ≤ 4× the artifact. `BENCH_RUNS` calls each
//! (default 10); prints the median, the slowest, and the most heap the case held live above
//! what was live before it (the allocator counts; sampled every millisecond). Built with the
//! allocator the `stowage` binary ships with (mimalloc).
//!
//! Reproduce, on a quiet machine: `cargo bench -p stowage-mcp --bench ask_the_data`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stowage_core::{ArtifactScope, PutOptions};
use stowage_mcp::Gateway;
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::shape::{Pipelines, Shaper};
use stowage_store::{ArtifactStore, MemoryStore};
use stowage_testkit::RpcClient;

#[path = "support/peak.rs"]
mod peak;
use peak::Peak;

/// The allocator the `stowage` binary ships with, so the figures are the binary's, counted
/// (`cap`): the heap a call needs is its peak of live bytes above what was live before it.
#[global_allocator]
static GLOBAL: cap::Cap<mimalloc::MiMalloc> = cap::Cap::new(mimalloc::MiMalloc, usize::MAX);

/// About 10 MB of nested orders.
fn orders_json() -> String {
    let mut orders = Vec::new();
    let mut i = 0u64;
    let mut len = 0;
    while len < 10 << 20 {
        let region = ["north", "south", "east", "west"][i as usize % 4];
        let status = ["paid", "shipped", "refunded"][i as usize % 3];
        let o = json!({
            "id": format!("O-{i}"), "region": region, "status": status, "total": (i * 7919) % 100_000 / 100,
            "lines": (0..3).map(|k| json!({"sku": format!("S{}", (i + k) % 500), "qty": (i + k) % 7 + 1})).collect::<Vec<_>>(),
        });
        len += o.to_string().len() + 1;
        orders.push(o);
        i += 1;
    }
    json!({"orders": orders, "generated": "2026-11-29"}).to_string()
}

fn rows_csv() -> String {
    let mut out = String::from("id,region,units,amount\n");
    for i in 0..30_000u64 {
        out.push_str(&format!(
            "{i},{},{},{}.{:02}\n",
            ["north", "south", "east"][i as usize % 3],
            (i * 37) % 500,
            (i * 7919) % 1000,
            i % 100
        ));
    }
    out
}

async fn client(gw: &Arc<Gateway>) -> RpcClient {
    let (client_end, gw_end) = tokio::io::duplex(1 << 20);
    let (gr, gwr) = tokio::io::split(gw_end);
    tokio::spawn(stowage_mcp::serve_stdio(gw.clone(), gr, gwr));
    let (cr, cw) = tokio::io::split(client_end);
    let rpc = RpcClient::connect(cr, cw, None);
    rpc.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "claude-code", "version": "2"}}),
    )
    .await;
    rpc.notify("notifications/initialized", json!({}));
    rpc
}

async fn timed(c: &RpcClient, tool: &str, args: &Value, runs: usize) -> (Duration, Duration, usize) {
    let mut times = Vec::with_capacity(runs);
    let mut bytes = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let r = c.request_within(Duration::from_secs(120), "tools/call", json!({"name": tool, "arguments": args})).await;
        times.push(t.elapsed());
        let s = r.to_string();
        assert!(r.get("error").is_none() && r["result"]["isError"] != true, "{}", &s[..s.len().min(2000)]);
        bytes = s.len();
    }
    times.sort();
    (times[runs / 2], times[runs - 1], bytes)
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new(Default::default()));
    let sink = stowage_store::into_sink(store.clone());
    let pipeline =
        stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), stowage_mcp::shape::with_dimensions(sink));
    let command = stowage_testkit::fixture_bin().display().to_string();
    let spec = UpstreamSpec::new(
        "fx",
        TransportSpec::Stdio { command, args: vec![], env: Default::default(), cwd: None, inherit_env: false },
        Duration::from_secs(120),
    );
    let gw = Gateway::builder(GatewayConfig::default(), vec![spec], Shaper::new(Pipelines::new(Arc::new(pipeline))))
        .store(store.clone())
        .start();
    assert_eq!(gw.wait_ready(Duration::from_secs(60)).await, 1);
    let c = client(&gw).await;
    let scope = ArtifactScope { user_id: Some(stowage_mcp::LOCAL_USER.into()), ..Default::default() };
    let put = |body: String, mime: &'static str| {
        let (store, scope) = (store.clone(), scope.clone());
        async move { store.put_bytes(bytes::Bytes::from(body), PutOptions::scoped(scope).mime(mime)).await.unwrap().id.to_string() }
    };
    let json_doc = orders_json();
    let csv = rows_csv();
    println!(
        "ask the data through the gateway (claude-code profile), {runs} calls each; median, max (answer bytes); most heap live above the start"
    );
    let (json_len, csv_len) = (json_doc.len(), csv.len());
    let json_id = put(json_doc, "application/json").await;
    let csv_id = put(csv, "text/csv").await;
    for (label, tool, args) in [
        (
            format!("jq over {json_len} B JSON: refunded count and total per region"),
            "artifact_query",
            json!({"id": json_id, "jq": ".orders | map(select(.status == \"refunded\")) | group_by(.region) | map({region: .[0].region, n: length, total: (map(.total) | add)})"}),
        ),
        (
            format!("jq over {csv_len} B CSV (30,000 rows): filtered count and top row"),
            "artifact_query",
            json!({"id": csv_id, "jq": "map(select(.region == \"north\" and .units > 250)) | {n: length, top: max_by(.amount)}"}),
        ),
        (format!("describe {json_len} B JSON"), "artifact_describe", json!({"id": json_id})),
        (
            "collect list_tickets: 30 pages, 600 items".to_owned(),
            "artifact_collect",
            json!({"tool": "list_tickets", "arguments": {"status": "any"}}),
        ),
    ] {
        // Let the previous case's trees be freed first (they go after the answer).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = GLOBAL.allocated() as u64;
        let peak = Peak::start(Duration::from_millis(1), || GLOBAL.allocated() as u64);
        let (median, max, bytes) = timed(&c, tool, &args, runs).await;
        let peak = peak.stop().saturating_sub(before);
        println!(
            "  {label:<70} {:>8.1} ms, {:>8.1} ms ({bytes} B); heap +{:.1} MiB",
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3,
            peak as f64 / (1 << 20) as f64
        );
    }
    gw.shutdown();
}
