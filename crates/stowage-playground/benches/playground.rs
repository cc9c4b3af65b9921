//! The artifacts tab's server time (BENCHMARKS.md, "Playground"): one page of `GET /api/artifacts` over a user's
//! 10,000 artifacts in an fs store, served by the playground's router in process (no socket,
//! so what is measured is the handler: the store's listing, the descriptions and a fresh
//! signed link per item). Target: ≤ 100 ms a page.
//!
//! Measured beside the store's own `list` of the same page in the same run (the floor), for:
//! the first page, a page 9,950 artifacts in, a page of one session's artifacts, and a page
//! filtered by kind (one artifact in ten is a PDF). Also prints the page's first-load size
//! (its HTML, CSS and scripts, without the lazily loaded ECharts; target ≤ 300 KB).
//!
//! Medians of `BENCH_RUNS` runs (default 50). Reproduce: `cargo bench -p stowage-playground`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use stowage_core::{ArtifactScope, PutOptions};
use stowage_links::{KeyRing, LinkSigner, LinksConfig};
use stowage_mcp::Gateway;
use stowage_mcp::shape::{Pipelines, Shaper};
use stowage_playground::{GatewaySlot, PlaygroundOptions};
use stowage_store::{ArtifactStore, FsStore, ListQuery, RetentionConfig};
use tower::ServiceExt;

const ARTIFACTS: usize = 10_000;
const PAGE: usize = 50;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let retention = RetentionConfig { max_session_bytes: 1 << 30, max_user_bytes: 1 << 30, ..Default::default() };
    let store: Arc<dyn ArtifactStore> = Arc::new(FsStore::builder(dir.path()).retention(retention).open().unwrap());
    let scope = |session: usize| ArtifactScope {
        tenant_id: None,
        user_id: Some(stowage_mcp::LOCAL_USER.to_owned()),
        session_id: Some(format!("s{session}")),
        trace_id: None,
    };
    let started = Instant::now();
    for i in 0..ARTIFACTS {
        let mime = if i % 10 == 0 { "application/pdf" } else { "image/png" };
        let opts = PutOptions::scoped(scope(i / 100)).mime(mime);
        store.put_bytes(format!("artifact {i}").into_bytes().into(), opts).await.unwrap();
    }
    eprintln!("stored {ARTIFACTS} artifacts in {:.1} s", started.elapsed().as_secs_f64());

    let sink = stowage_store::into_sink(store.clone());
    let pipeline = stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), sink);
    let shaper = Shaper::new(Pipelines::new(Arc::new(pipeline)));
    let gw = Gateway::builder(Default::default(), vec![], shaper).start();
    let links_config = LinksConfig::default();
    let signer = Arc::new(LinkSigner::new(KeyRing::new([("k1", vec![7u8; 32])]).unwrap(), &links_config));
    let links = stowage_http::HttpState::new(store.clone(), signer).link_service();
    let slot = GatewaySlot::default();
    let _ = slot.set(gw.clone());
    let app = stowage_playground::router(PlaygroundOptions {
        gateway: slot,
        store: Some(store.clone()),
        links: Some(links),
        agent_model: None,
        store_label: "fs".into(),
        auth: None,
        guard: Arc::new(stowage_http::BrowserGuard::new("127.0.0.1:8787", &[], &[])),
        links_origin: None,
    });

    // A cursor 9,950 artifacts in, as the page would hold after paging.
    let owner = Some(scope(0).owner());
    let deep = store.list(ListQuery { owner: owner.clone(), limit: ARTIFACTS - PAGE, ..Default::default() }).await.unwrap().next.unwrap();
    let cases: [(&str, String, ListQuery); 4] = [
        ("first page", String::new(), ListQuery { owner: owner.clone(), limit: PAGE, ..Default::default() }),
        (
            "page 9,950 in",
            format!("&cursor={deep}"),
            ListQuery { owner: owner.clone(), limit: PAGE, cursor: Some(deep.clone()), ..Default::default() },
        ),
        (
            "one session's",
            "&session=s42".into(),
            ListQuery { owner: owner.clone(), limit: PAGE, session_id: Some("s42".into()), ..Default::default() },
        ),
        // The floor for a kind filter is the store listing ten times as many (one in ten match).
        ("kind=pdf", "&kind=pdf".into(), ListQuery { owner: owner.clone(), limit: PAGE * 10, ..Default::default() }),
    ];
    println!("| page of {PAGE} (10,000 artifacts) | store list (floor) | GET /api/artifacts | ratio |");
    println!("|---|---|---|---|");
    for (name, params, query) in cases {
        let mut floor = Vec::new();
        let mut api = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let page = store.list(query.clone()).await.unwrap();
            floor.push(t.elapsed());
            assert!(!page.items.is_empty());
            let req =
                Request::get(format!("/api/artifacts?limit={PAGE}{params}")).header("host", "127.0.0.1:8787").body(Body::empty()).unwrap();
            let t = Instant::now();
            let resp = app.clone().oneshot(req).await.unwrap();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
            api.push(t.elapsed());
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["items"].as_array().map(Vec::len), Some(PAGE), "{name}: {v}");
        }
        let (f, a) = (median(floor), median(api));
        println!("| {name} | {} | {} | {:.2}× |", ms(f), ms(a), a.as_secs_f64() / f.as_secs_f64());
    }
    let first_load: usize = stowage_playground::ASSETS.iter().filter(|a| !a.path.contains("vendor")).map(|a| a.bytes.len()).sum();
    let echarts: usize = stowage_playground::ASSETS.iter().filter(|a| a.path.contains("vendor")).map(|a| a.bytes.len()).sum();
    println!(
        "\nfirst load (HTML, CSS, scripts; uncompressed): {:.1} KB; ECharts, loaded with the first chart: {:.1} KB",
        first_load as f64 / 1024.0,
        echarts as f64 / 1024.0
    );
    gw.shutdown();
}
