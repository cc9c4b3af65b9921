//! Small calls on kept-alive connections with the TypeScript SDK's client (Node's fetch, as
//! Claude Code, VS Code, Cursor and the Inspector use it), through the gateway and straight to
//! the same server-everything over Streamable HTTP, interleaved call by call in one run
//! (`tests/peers/keepalive_sdk.mjs`): the gateway's added latency at p50 and p99. Target: at
//! most +0.3 ms at p50 (BENCHMARKS.md, "Under load"; before `TCP_NODELAY` every call waited ~40 ms for the
//! client's delayed ACK).
//!
//! Needs the peers (`scripts/gateway-peers.sh`; `STOWAGE_PEERS_DIR`). Reproduce, on a quiet
//! machine: `cargo bench -p stowage-mcp --bench keepalive` (`BENCH_CALLS`, default 2000).

use std::sync::Arc;
use std::time::Duration;

use stowage_mcp::Gateway;
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::shape::{Pipelines, Shaper};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::main]
async fn main() {
    let peers = stowage_testkit::peers_dir();
    let everything = peers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(everything.exists(), "server-everything is not installed in {}: run scripts/gateway-peers.sh", peers.display());
    let calls: usize = std::env::var("BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);

    let port = free_port();
    let mut server = tokio::process::Command::new("node")
        .arg(&everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let direct = format!("http://127.0.0.1:{port}/mcp");

    let sink = stowage_transform::testing::MemorySink::new();
    let pipeline =
        stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), stowage_mcp::shape::with_dimensions(sink));
    let shaper = Shaper::new(Pipelines::new(Arc::new(pipeline)));
    let upstream = TransportSpec::Http { url: direct.clone(), headers: Default::default(), ca_file: None };
    let spec = UpstreamSpec::new("everything", upstream, Duration::from_secs(60));
    let gw = Gateway::builder(GatewayConfig::default(), vec![spec], shaper).start();
    assert_eq!(gw.wait_ready(Duration::from_secs(60)).await, 1);
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    let through = format!("http://{addr}/mcp");

    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/keepalive_sdk.mjs");
    let out = tokio::process::Command::new("node")
        .arg(script)
        .arg(&peers)
        .arg(calls.to_string())
        .arg(format!("direct={direct}"))
        .arg(format!("gateway={through}"))
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let times: std::collections::HashMap<String, Vec<f64>> = serde_json::from_slice(&out.stdout).unwrap();
    let sorted = |label: &str| {
        let mut t = times[label].clone();
        t.sort_by(f64::total_cmp);
        t
    };
    let (d, g) = (sorted("direct"), sorted("gateway"));
    println!("kept-alive small calls, TypeScript SDK client (Node fetch), {calls} interleaved calls each");
    for (label, t) in [("direct", &d), ("through stowage", &g)] {
        println!(
            "  {label:<16} p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
            percentile(t, 0.5),
            percentile(t, 0.9),
            percentile(t, 0.99),
            t[t.len() - 1]
        );
    }
    println!(
        "  added by stowage: p50 +{:.3} ms, p99 +{:.3} ms (target: p50 at most +0.3 ms)",
        percentile(&g, 0.5) - percentile(&d, 0.5),
        percentile(&g, 0.99) - percentile(&d, 0.99)
    );
    gw.shutdown();
    let _ = server.kill().await;
}
