//! Blob chaining's cost (BENCHMARKS.md, "Blob chaining"), through a real gateway in front of `stowage-chain-fixture`
//! children, a memory store and the signed-link routes on a loopback port:
//!
//! 1. `url` mode on a 100 MB artifact: the gateway's time per call beyond the tool's own
//!    transfer (a call whose argument is the `artifact://` URI, against the same call with a
//!    plain string of the link's length; the tool downloads nothing) — target ≤ 5 ms;
//! 2. the tool's download of it through the signed link (reqwest, streamed to the end) —
//!    target ≥ 1 GB/s on loopback;
//! 3. `base64` mode on a 10 MB artifact: `upload_file` given the `artifact://` URI, against the
//!    same call given the base64 inline by the client — target ≤ 30 ms added;
//! 4. the same 10 MB with no configuration: `n_upload_file`, which has no rule, its
//!    `content_base64` detected from the schema, given the URI, against the client sending the
//!    base64 to the same tool — target ≤ 30 ms added.
//!
//! Medians of `BENCH_RUNS` runs (default 15). Reproduce, on a quiet machine:
//! `cargo bench -p stowage-mcp --bench chaining`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use stowage_core::{ArtifactScope, PutOptions};
use stowage_links::{KeyRing, LinkSigner, LinksConfig};
use stowage_mcp::chaining::InputMode;
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::shape::{Pipelines, Shaper};
use stowage_mcp::{CallOptions, Caller, Gateway, SessionKind};
use stowage_store::{ArtifactStore, MemoryStore, RetentionConfig};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn spec(name: &str) -> UpstreamSpec {
    let command = stowage_testkit::chain_fixture_bin().display().to_string();
    UpstreamSpec::new(
        name,
        TransportSpec::Stdio { command, args: vec![], env: Default::default(), cwd: None, inherit_env: false },
        Duration::from_secs(60),
    )
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let retention =
        RetentionConfig { max_artifact_bytes: 200 << 20, max_session_bytes: 1 << 30, max_user_bytes: 1 << 31, ..Default::default() };
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new(retention));
    let links = LinksConfig { public_url: base.clone(), ..LinksConfig::default() };
    let signer = Arc::new(LinkSigner::new(KeyRing::new([("k1", vec![7u8; 32])]).unwrap(), &links));
    let state = stowage_http::HttpState::new(store.clone(), signer);
    let service = state.link_service();
    tokio::spawn(async move { axum::serve(listener, stowage_http::routes(state)).await });

    let mut config = GatewayConfig::default();
    config.chaining.inputs.insert("u_echo".into(), InputMode::Url.into());
    config.chaining.inputs.insert("b_upload_file".into(), InputMode::Base64.into());
    config.chaining.max_materialize_bytes = 32 << 20;
    let sink = Arc::new(stowage_testkit::MemSink::default());
    let pipeline =
        stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), stowage_mcp::shape::with_dimensions(sink));
    let shaper = Shaper::new(Pipelines::new(Arc::new(pipeline)));
    let gw = Gateway::builder(config, vec![spec("u"), spec("b"), spec("n")], shaper)
        .links(stowage_http::Links::new(service))
        .store(store.clone())
        .start();
    assert_eq!(gw.wait_ready(Duration::from_secs(30)).await, 3);
    let session = gw.open_session(SessionKind::InProcess, Caller::local(), None);
    while !gw.list_tools(&session).iter().any(|t| t["name"] == "n_upload_file") {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let scope = ArtifactScope { user_id: Some("local".into()), ..Default::default() };
    let call = |name: &'static str, args: Value| {
        let (gw, session) = (gw.clone(), session.clone());
        async move {
            let t = Instant::now();
            let r = gw.call_tool(&session, name, args, CallOptions::default()).await.unwrap().result;
            assert!(r.get("isError").is_none(), "{r}");
            (t.elapsed(), r)
        }
    };

    // 1 and 2: 100 MB through url mode.
    let big: Vec<u8> = (0..100_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let a = store.put_bytes(big.into(), PutOptions::scoped(scope.clone()).mime("application/octet-stream")).await.unwrap();
    let (_, r) = call("u_echo", json!({"message": a.id.uri()})).await;
    let link = r["content"][0]["text"].as_str().unwrap().to_owned();
    let plain = "x".repeat(link.len());
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        with.push(call("u_echo", json!({"message": a.id.uri()})).await.0);
        without.push(call("n_echo", json!({"message": plain})).await.0);
    }
    let (w, wo) = (median(with), median(without));
    let added = w.saturating_sub(wo);
    println!("url mode, 100 MB: call {w:?}, same call without chaining {wo:?}, added {added:?} (target ≤ 5 ms)");
    let client = reqwest::Client::new();
    let mut rates = Vec::new();
    for _ in 0..runs.min(5) {
        let t = Instant::now();
        let mut resp = client.get(&link).send().await.unwrap();
        let mut n = 0usize;
        while let Some(chunk) = resp.chunk().await.unwrap() {
            n += chunk.len();
        }
        assert_eq!(n, 100_000_000);
        rates.push(n as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    rates.sort_by(f64::total_cmp);
    println!("signed-link download, 100 MB: {:.2} GB/s median (target ≥ 1 GB/s)", rates[rates.len() / 2]);

    // 3: 10 MB through base64 mode.
    let ten: Vec<u8> = (0..10_000_000u32).map(|i| (i.wrapping_mul(40_503) >> 7) as u8).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&ten);
    let t = store.put_bytes(ten.into(), PutOptions::scoped(scope).mime("application/octet-stream")).await.unwrap();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        with.push(call("b_upload_file", json!({"content_base64": t.id.uri()})).await.0);
        without.push(call("n_upload_file", json!({"content_base64": b64})).await.0);
    }
    let (w, wo) = (median(with), median(without));
    println!(
        "base64 mode, 10 MB: call {w:?}, the client sending the base64 itself {wo:?}, added {:?} (target ≤ 30 ms)",
        w.saturating_sub(wo)
    );

    // 4: the same 10 MB into an input detected from the schema (no rule for n_upload_file).
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (d, r) = call("n_upload_file", json!({"content_base64": t.id.uri()})).await;
        assert_eq!(r["_meta"]["io.stowage/inputs"][0]["form"], "base64", "{r}");
        with.push(d);
        without.push(call("n_upload_file", json!({"content_base64": b64})).await.0);
    }
    let (w, wo) = (median(with), median(without));
    println!(
        "detected base64 input, 10 MB: call {w:?}, the client sending the base64 itself {wo:?}, added {:?} (target ≤ 30 ms)",
        w.saturating_sub(wo)
    );
    gw.shutdown();
}
