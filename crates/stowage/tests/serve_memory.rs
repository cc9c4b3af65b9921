//! The gateway's memory must not grow with the call rate. Every finished request's SSE stream
//! used to stay replayable for the resume window (30 s) at about 14 KB each, so a busy gateway
//! climbed to a gigabyte. A stream delivered whole is now forgotten at once.
//!
//! `stowage serve` in front of the stdio fixture, two clients on kept-alive connections with
//! SSE answers: the server's resident memory after 20,000 calls stays within [`BOUND_MB`] of
//! what it was after the first 1,000. Measured here (debug build): +0.4 MB; with delivered
//! streams kept for the window as before, +51 MB, and more the faster the calls come.

use crate::load;

use load::{Mcp, Serve, http_client, rss_mb};
use serde_json::json;

/// What 19,000 more calls may add: allocator slack and metrics, never a per-call cost.
const BOUND_MB: f64 = 24.0;

async fn calls(clients: &mut [Mcp], tool: &str, n: usize) {
    let per_client = n / clients.len();
    let runs = clients.iter_mut().map(|c| async move {
        for i in 0..per_client {
            let r = c.call(tool, json!({"message": format!("call {i}")})).await.unwrap();
            assert_eq!(r["content"][0]["text"], format!("call {i}"));
        }
    });
    futures::future::join_all(runs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_after_20000_calls_stays_near_memory_after_1000() {
    let fixture = stowage_testkit::fixture_bin();
    let serve = Serve::start(&format!("[gateway.servers.fx]\ncommand = {:?}\n", fixture.to_str().unwrap())).await;
    let http = http_client();
    let mut clients =
        vec![Mcp::connect(&http, &serve.url, json!({})).await.unwrap(), Mcp::connect(&http, &serve.url, json!({})).await.unwrap()];
    let tool = clients[0].tool_named("echo").await;
    calls(&mut clients, &tool, 1_000).await;
    let after_1k = rss_mb(serve.pid);
    calls(&mut clients, &tool, 19_000).await;
    let after_20k = rss_mb(serve.pid);
    assert!(
        after_20k <= after_1k + BOUND_MB,
        "RSS {after_1k:.1} MB after 1,000 calls, {after_20k:.1} MB after 20,000 (allowed: +{BOUND_MB} MB)"
    );
}
