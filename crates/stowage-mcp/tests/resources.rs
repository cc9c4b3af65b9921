//! `resources/read` and `prompts/get` through the gateway's pipeline, against the stdio
//! fixture: blob resources and long text become artifacts with a line, a reference and a link;
//! small text and tiny blobs stay as they are; a blob that is not base64 and a store that
//! cannot take the bytes are errors, never a pass-through.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use common::{Client, MemSink, fast_config, fixture_spec};
use serde_json::{Value, json};
use stowage_core::ArtifactRef;

const T: Duration = Duration::from_secs(20);

/// Links as `stowage serve` mints them, minus the signature.
struct TestLinks;
impl stowage_mcp::shape::LinkMinter for TestLinks {
    fn link(&self, r: &ArtifactRef) -> Option<(String, String)> {
        Some((format!("https://stowage.test/artifacts/{}?token=t", r.id), "2026-11-23T18:00:00Z".into()))
    }
}

async fn client(sink: Arc<MemSink>) -> Client {
    let mut rw = common::shaper(sink);
    rw = rw.with_links(Arc::new(TestLinks));
    Client::start_with_shaper(vec![fixture_spec("fx", None, T)], rw, fast_config()).await
}

fn read_result(r: &Value) -> &Value {
    assert!(r.get("error").is_none(), "{r}");
    &r["result"]
}

#[tokio::test]
async fn a_blob_resource_reaches_the_client_as_a_line_a_reference_and_a_link() {
    let sink = Arc::new(MemSink::default());
    let c = client(sink.clone()).await;
    let r = c.request("resources/read", json!({"uri": "fx://docs/report.pdf"})).await;
    let result = read_result(&r);
    assert!(r.to_string().len() < 2048, "{} bytes: {r}", r.to_string().len());
    let entry = &result["contents"][0];
    assert_eq!(entry["uri"], "fx://docs/report.pdf", "the entry keeps its uri: {entry}");
    assert!(entry.get("blob").is_none(), "{entry}");
    assert_eq!(entry["mimeType"], "text/plain");
    let text = entry["text"].as_str().unwrap();
    let artifact = &entry["_meta"]["io.stowage/artifact"];
    let id = artifact["id"].as_str().unwrap();
    assert!(text.contains(&format!("artifact://{id}")) || text.contains(id), "{text}");
    assert!(text.contains("download: https://stowage.test/artifacts/"), "{text}");
    assert!(text.contains("artifact_read"), "{text}");
    assert_eq!(artifact["mimeType"], "application/pdf");
    assert!(artifact["size"].as_u64().unwrap() > 150_000, "{artifact}");
    // The result's _meta lists the asset, as a tool result's does.
    assert_eq!(result["_meta"]["io.stowage/assets"][0]["id"], id);
    // The stored bytes are the PDF itself.
    let items = sink.items.lock().unwrap();
    let (bytes, opts) = items.values().next().expect("one artifact");
    assert!(bytes.starts_with(b"%PDF-"));
    assert_eq!(opts.mime_type.as_deref(), Some("application/pdf"));
}

#[tokio::test]
async fn a_host_without_signed_links_reads_a_blob_resource_by_reference_only() {
    // `[[hosts]] name = "default", signed_links = false`: this host's tool results carry no
    // signed link, and neither may its resource reads (a link token in a model's context is a
    // credential in a log).
    let shaper = common::shaper(Arc::new(MemSink::default())).with_links(Arc::new(TestLinks));
    let config = stowage_mcp::hosts::HostsConfig {
        adapt: true,
        profiles: vec![stowage_mcp::hosts::HostOverride { name: "default".into(), signed_links: Some(false), ..Default::default() }],
    };
    let hosts = Arc::new(stowage_mcp::hosts::Hosts::new(&config, &Default::default()).unwrap());
    let b = common::builder(vec![fixture_spec("fx", None, T)], shaper, fast_config(), stowage_mcp::SessionMode::Shared);
    let gw = common::started(b.hosts(hosts)).await;
    let c = Client::connect(gw, None, json!({})).await;
    for _ in 0..2 {
        // The second read may come from the cache: it is answered for the host all the same.
        let r = c.request("resources/read", json!({"uri": "fx://docs/report.pdf"})).await;
        let result = read_result(&r);
        let entry = &result["contents"][0];
        let text = entry["text"].as_str().unwrap();
        let id = entry["_meta"]["io.stowage/artifact"]["id"].as_str().unwrap();
        assert!(text.contains(&format!("artifact://{id}")), "{text}");
        assert!(!r.to_string().contains("token="), "a signed link reached a host that takes none: {r}");
        assert!(!text.contains("download:"), "{text}");
    }
}

#[tokio::test]
async fn long_text_becomes_an_artifact_and_short_text_and_tiny_blobs_stay() {
    let sink = Arc::new(MemSink::default());
    let c = client(sink.clone()).await;
    let log = c.request("resources/read", json!({"uri": "fx://docs/log.txt"})).await;
    let entry = &read_result(&log)["contents"][0];
    assert_eq!(entry["uri"], "fx://docs/log.txt");
    assert!(entry["text"].as_str().unwrap().len() < 600, "{entry}");
    assert_eq!(entry["_meta"]["io.stowage/artifact"]["original"], "text");
    let stored: Vec<_> = sink.items.lock().unwrap().values().map(|(b, _)| b.clone()).collect();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].len(), 17_000, "the whole log, as UTF-8");
    assert!(stored[0].starts_with(b"2026-11-23T10:00:00Z request 0"));

    let note = c.request("resources/read", json!({"uri": "fx://docs/note.txt"})).await;
    assert_eq!(read_result(&note)["contents"][0]["text"], "the quarter closed on Friday");
    assert!(read_result(&note).get("_meta").is_none(), "{note}");
    let dot = c.request("resources/read", json!({"uri": "fx://docs/dot.png"})).await;
    let blob = read_result(&dot)["contents"][0]["blob"].as_str().expect("a tiny blob stays inline");
    assert!(base64::engine::general_purpose::STANDARD.decode(blob).unwrap().starts_with(b"\x89PNG"));
    assert_eq!(sink.items.lock().unwrap().len(), 1, "nothing more was stored");
}

#[tokio::test]
async fn the_text_limit_is_configurable() {
    let sink = Arc::new(MemSink::default());
    let mut config = fast_config();
    config.resources.inline_text_if_under_chars = 20_000;
    let c = Client::start(vec![fixture_spec("fx", None, T)], sink.clone(), config, None).await;
    let log = c.request("resources/read", json!({"uri": "fx://docs/log.txt"})).await;
    assert_eq!(read_result(&log)["contents"][0]["text"].as_str().unwrap().len(), 17_000);
    assert!(sink.items.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_blob_that_is_not_base64_a_full_store_and_a_missing_resource_are_clear_errors() {
    let c = client(Arc::new(MemSink::default())).await;
    let r = c.request("resources/read", json!({"uri": "fx://docs/broken.bin"})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_else(|| panic!("an error: {r}"));
    assert!(msg.contains("fx://docs/broken.bin") && msg.contains("not base64"), "{msg}");
    assert!(!r.to_string().contains("%% not base64"), "the bad blob is not relayed: {r}");
    let r = c.request("resources/read", json!({"uri": "fx://docs/nothing"})).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");

    let full = Arc::new(MemSink { fail: true.into(), ..Default::default() });
    let c = client(full).await;
    let r = c.request("resources/read", json!({"uri": "fx://docs/report.pdf"})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_else(|| panic!("an error: {r}"));
    assert!(msg.starts_with("artifact_storage_failed: ") && msg.contains("not relayed inline"), "{msg}");
    assert!(!msg.contains("/nonexistent"), "no server path reaches the client: {msg}");
    assert!(r.to_string().len() < 1024, "no base64 in the error: {r}");
}

#[tokio::test]
async fn a_prompt_with_an_image_reaches_the_client_as_a_reference() {
    let sink = Arc::new(MemSink::default());
    let c = client(sink.clone()).await;
    let list = c.request("prompts/list", json!({})).await;
    assert!(list.to_string().contains("chart_prompt"), "{list}");
    let r = c.request("prompts/get", json!({"name": "chart_prompt"})).await;
    let result = read_result(&r);
    assert!(r.to_string().len() < 2048, "{} bytes: {r}", r.to_string().len());
    assert_eq!(result["messages"][0]["content"]["text"], "What does this chart say?");
    let image = &result["messages"][1]["content"];
    assert_eq!(image["type"], "resource_link", "{image}");
    assert_eq!(result["_meta"]["io.stowage/assets"][0]["mimeType"], "image/png");
    assert!(result["_meta"]["io.stowage/assets"][0]["uri"].as_str().unwrap().starts_with("https://stowage.test/"));
    assert_eq!(sink.items.lock().unwrap().len(), 1);
}

/// A gateway whose pipeline stores into a real (memory) store, with signed links: what
/// `stowage serve` runs.
async fn with_store() -> (Client, Arc<dyn stowage_store::ArtifactStore>) {
    let store: Arc<dyn stowage_store::ArtifactStore> = Arc::new(stowage_store::MemoryStore::new(stowage_store::RetentionConfig::default()));
    let rw = common::shaper(stowage_store::into_sink(store.clone()));
    let links = stowage_links::LinksConfig { public_url: "http://127.0.0.1:9".into(), ..Default::default() };
    let signer = Arc::new(stowage_links::LinkSigner::new(stowage_links::KeyRing::new([("k1", vec![7u8; 32])]).unwrap(), &links));
    let service = stowage_http::HttpState::new(store.clone(), signer).link_service();
    let b = common::builder(vec![fixture_spec("fx", None, T)], rw, fast_config(), stowage_mcp::SessionMode::Shared);
    let gateway = common::started(b.links(stowage_http::Links::new(service)).store(store.clone())).await;
    (Client::connect(gateway, None, json!({})).await, store)
}

fn scope_of(user: &str) -> stowage_core::ArtifactScope {
    stowage_core::ArtifactScope { user_id: Some(user.into()), ..Default::default() }
}

#[tokio::test]
async fn the_callers_artifacts_are_resources_small_ones_inline_large_ones_as_links() {
    let (c, store) = with_store().await;
    // One artifact from a read the gateway offloaded, one small text put by hand, and one of
    // another user's that must stay invisible.
    let pdf = c.request("resources/read", json!({"uri": "fx://docs/report.pdf"})).await;
    let pdf_uri = pdf["result"]["contents"][0]["_meta"]["io.stowage/artifact"]["artifact"].as_str().unwrap().to_owned();
    let note = store
        .put_bytes(bytes::Bytes::from_static(b"remember the milk"), stowage_core::PutOptions::scoped(scope_of("local")).mime("text/plain"))
        .await
        .unwrap();
    let theirs = store
        .put_bytes(bytes::Bytes::from_static(b"not yours"), stowage_core::PutOptions::scoped(scope_of("someone-else")).mime("text/plain"))
        .await
        .unwrap();

    let list = c.request("resources/list", json!({})).await;
    let uris: Vec<&str> = list["result"]["resources"].as_array().unwrap().iter().filter_map(|r| r["uri"].as_str()).collect();
    assert!(uris.contains(&pdf_uri.as_str()) && uris.contains(&note.uri.as_str()), "{uris:?}");
    assert!(uris.contains(&"fx://docs/report.pdf"), "the upstream's resources are still there: {uris:?}");
    assert!(!uris.contains(&theirs.uri.as_str()), "another user's artifact is listed: {uris:?}");
    let templates = c.request("resources/templates/list", json!({})).await;
    assert!(templates.to_string().contains("artifact://{id}"), "{templates}");

    // Small: the bytes themselves. Large: a line and a fresh link, unless asked explicitly.
    let small = c.request("resources/read", json!({"uri": note.uri})).await;
    assert_eq!(small["result"]["contents"][0]["text"], "remember the milk", "{small}");
    let large = c.request("resources/read", json!({"uri": pdf_uri})).await;
    let entry = &large["result"]["contents"][0];
    assert!(entry.get("blob").is_none(), "{large}");
    let text = entry["text"].as_str().unwrap();
    assert!(text.contains("too large to read inline") && text.contains("download: http://127.0.0.1:9/artifacts/"), "{text}");
    let asked = c.request("resources/read", json!({"uri": pdf_uri, "_meta": {"io.stowage/inline": true}})).await;
    let blob = asked["result"]["contents"][0]["blob"].as_str().expect("the bytes, when asked");
    assert!(base64::engine::general_purpose::STANDARD.decode(blob).unwrap().starts_with(b"%PDF-"));

    // Another user's id and a made-up one get the same answer.
    let other = c.request("resources/read", json!({"uri": theirs.uri})).await;
    let made_up = c.request("resources/read", json!({"uri": "artifact://nothing_0123456789abcdef"})).await;
    assert_eq!(other["error"]["code"], -32002, "{other}");
    assert_eq!(made_up["error"]["code"], -32002, "{made_up}");
    assert!(!other.to_string().contains("someone-else"), "{other}");

    // Hosts that never show resources get the same list as a tool.
    let tools = c.request("tools/list", json!({})).await;
    assert!(tools.to_string().contains("\"artifact_list\""), "{tools}");
    let listed = c.call("artifact_list", json!({})).await;
    let artifacts = listed["result"]["structuredContent"]["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 2, "{listed}");
    assert!(!listed.to_string().contains(theirs.id.as_str()), "{listed}");
}

#[tokio::test]
async fn the_artifact_list_pages_with_a_cursor_and_a_foreign_cursor_is_refused() {
    let (c, store) = with_store().await;
    for i in 0..(stowage_mcp::ARTIFACTS_PER_PAGE + 5) {
        let body = format!("note {i}");
        store.put_bytes(bytes::Bytes::from(body), stowage_core::PutOptions::scoped(scope_of("local")).mime("text/plain")).await.unwrap();
    }
    let first = c.request("resources/list", json!({})).await;
    let cursor = first["result"]["nextCursor"].as_str().expect("a second page").to_owned();
    let second = c.request("resources/list", json!({"cursor": cursor})).await;
    let n = |v: &Value| {
        v["result"]["resources"].as_array().unwrap().iter().filter(|r| r["uri"].as_str().unwrap().starts_with("artifact://")).count()
    };
    assert_eq!(n(&first) + n(&second), stowage_mcp::ARTIFACTS_PER_PAGE + 5);
    assert!(second["result"].get("nextCursor").is_none(), "{second}");
    let bad = c.request("resources/list", json!({"cursor": "upstream-7"})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

#[tokio::test]
async fn hosts_without_resources_get_generated_tools_that_read_through_the_pipeline() {
    let sink = Arc::new(MemSink::default());
    let c = client(sink.clone()).await;
    let tools = c.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for want in ["fx_resources_list", "fx_resources_read", "fx_resources_templates_list"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let list = c.call("fx_resources_list", json!({})).await;
    assert!(
        list["result"]["content"][0]["text"].as_str().unwrap().contains("fx://docs/report.pdf — report.pdf (application/pdf)"),
        "{list}"
    );
    assert_eq!(list["result"]["structuredContent"]["resources"].as_array().unwrap().len(), 5);

    let pdf = c.call("fx_resources_read", json!({"uri": "fx://docs/report.pdf"})).await;
    assert!(pdf.to_string().len() < 2048, "{} bytes: {pdf}", pdf.to_string().len());
    let text = pdf["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("artifact://") && text.contains("download: https://stowage.test/"), "{text}");
    assert_eq!(pdf["result"]["_meta"]["io.stowage/assets"][0]["mimeType"], "application/pdf");
    let dot = c.call("fx_resources_read", json!({"uri": "fx://docs/dot.png"})).await;
    assert_eq!(dot["result"]["content"][0]["type"], "image", "{dot}");

    let missing = c.call("fx_resources_read", json!({})).await;
    assert_eq!(missing["result"]["isError"], true);
    assert!(
        missing["result"]["content"][0]["text"].as_str().unwrap().starts_with("bad_request: fx_resources_read needs \"uri\""),
        "{missing}"
    );
    let unknown = c.call("fx_resources_read", json!({"uri": "fx://docs/nothing"})).await;
    assert!(unknown["result"]["content"][0]["text"].as_str().unwrap().starts_with("resource_not_found: "), "{unknown}");
    let broken = c.call("fx_resources_read", json!({"uri": "fx://docs/broken.bin"})).await;
    assert_eq!(broken["result"]["isError"], true, "{broken}");
    assert!(!broken.to_string().contains("%% not base64"), "{broken}");
}

#[tokio::test]
async fn generated_tools_can_be_turned_off_and_an_upstream_without_resources_gets_none() {
    let mut config = fast_config();
    config.resources.generated_tools = false;
    let c = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), config, None).await;
    let tools = c.request("tools/list", json!({})).await;
    assert!(!tools.to_string().contains("resources_read"), "{tools}");
    let r = c.call("fx_resources_read", json!({"uri": "fx://docs/note.txt"})).await;
    assert!(r.get("error").is_some() || r["result"]["isError"] == true, "{r}");

    // The chain fixture declares tools only.
    let command = stowage_testkit::chain_fixture_bin().display().to_string();
    let transport =
        stowage_mcp::config::TransportSpec::Stdio { command, args: vec![], env: Default::default(), cwd: None, inherit_env: false };
    let ch = stowage_mcp::config::UpstreamSpec::new("ch", transport, T);
    let c = Client::start(vec![ch], Arc::new(MemSink::default()), fast_config(), None).await;
    let tools = c.request("tools/list", json!({})).await;
    assert!(!tools.to_string().contains("ch_resources"), "{tools}");
    let r = c.request("resources/read", json!({"uri": "fx://docs/note.txt"})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_else(|| panic!("an error: {r}"));
    assert!(msg.contains("upstream ch, which serves no resources"), "{msg}");
}

#[tokio::test]
async fn reads_are_cached_with_fresh_links_and_an_update_invalidates_them_before_it_is_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fx.log");
    let sink = Arc::new(MemSink::default());
    let mut rw = common::shaper(sink.clone());
    rw = rw.with_links(Arc::new(TestLinks));
    let c = Client::start_with_shaper(vec![fixture_spec("fx", Some(&log), T)], rw, fast_config()).await;
    let reads = || common::read_log(&log).lines().filter(|l| l.contains("resources/read")).count();

    let first = c.request("resources/read", json!({"uri": "fx://docs/report.pdf"})).await;
    let second = c.request("resources/read", json!({"uri": "fx://docs/report.pdf"})).await;
    assert_eq!(reads(), 1, "the second read came from the cache");
    assert_eq!(second["result"]["_meta"]["io.stowage/transform"]["cached"], true, "{second}");
    assert_eq!(first["result"]["contents"][0]["_meta"], second["result"]["contents"][0]["_meta"], "the same artifact, with a link");
    assert_eq!(sink.items.lock().unwrap().len(), 1, "stored once");

    // Subscribed, the client hears of an update; by then the cached read is gone, so the read
    // it makes on hearing of it returns the new content.
    c.request("resources/subscribe", json!({"uri": "fx://docs/note.txt"})).await;
    let note = c.request("resources/read", json!({"uri": "fx://docs/note.txt"})).await;
    assert_eq!(note["result"]["contents"][0]["text"], "the quarter closed on Friday");
    let again = c.request("resources/read", json!({"uri": "fx://docs/note.txt"})).await;
    assert_eq!(again["result"]["_meta"]["io.stowage/transform"]["cached"], true, "{again}");
    let before = reads();
    let edited = c.call("edit_note", json!({"text": "the quarter closes on Monday"})).await;
    assert_eq!(edited["result"]["content"][0]["text"], "edited", "{edited}");
    let heard = || c.notifications.lock().unwrap().iter().any(|n| n["method"] == "notifications/resources/updated");
    assert!(common::eventually(5, heard).await, "no update reached the client");
    let fresh = c.request("resources/read", json!({"uri": "fx://docs/note.txt"})).await;
    assert_eq!(fresh["result"]["contents"][0]["text"], "the quarter closes on Monday", "{fresh}");
    assert_eq!(reads(), before + 1);
}

#[tokio::test]
async fn a_resource_read_without_a_ttl_is_read_through_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fx.log");
    let c = Client::start(vec![fixture_spec("fx", Some(&log), T)], Arc::new(MemSink::default()), fast_config(), None).await;
    for _ in 0..2 {
        let r = c.request("resources/read", json!({"uri": "fx://docs/log.txt"})).await;
        assert!(r["result"]["_meta"]["io.stowage/transform"].get("cached").is_none(), "{r}");
    }
    let reads = common::read_log(&log).lines().filter(|l| l.contains("resources/read")).count();
    assert_eq!(reads, 2, "a read that states no lifetime is never answered from the cache");
}

#[tokio::test]
async fn a_zero_ttl_turns_the_cache_off() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fx.log");
    let mut config = fast_config();
    config.resources.cache_ttl_secs = 0;
    let c = Client::start(vec![fixture_spec("fx", Some(&log), T)], Arc::new(MemSink::default()), config, None).await;
    for _ in 0..2 {
        c.request("resources/read", json!({"uri": "fx://docs/note.txt"})).await;
    }
    assert_eq!(common::read_log(&log).lines().filter(|l| l.contains("resources/read")).count(), 2);
}

#[tokio::test]
async fn the_upstream_subscription_ends_when_the_last_subscribed_session_does() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fx.log");
    let a = Client::start(vec![fixture_spec("fx", Some(&log), T)], Arc::new(MemSink::default()), fast_config(), None).await;
    let b = Client::connect(a.gateway.clone(), None, json!({})).await;
    let unsubscribes = || common::read_log(&log).lines().filter(|l| l.contains("resources/unsubscribe")).count();
    a.request("resources/subscribe", json!({"uri": "fx://docs/note.txt"})).await;
    b.request("resources/subscribe", json!({"uri": "fx://docs/note.txt"})).await;
    let gateway = a.gateway.clone();
    drop(b);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(unsubscribes(), 0, "a still wants the updates");
    drop(a);
    assert!(common::eventually(5, || unsubscribes() == 1).await, "the last session's end did not unsubscribe the upstream");
    gateway.shutdown();
}

#[tokio::test]
async fn lists_page_across_upstreams_and_a_uri_two_upstreams_list_is_rewritten_reversibly() {
    let dir = tempfile::tempdir().unwrap();
    let b_log = dir.path().join("b.log");
    let mut config = fast_config();
    config.resources.list_page_size = 4;
    let specs = vec![fixture_spec("a", None, T), fixture_spec("b", Some(&b_log), T)];
    let c = Client::start(specs, Arc::new(MemSink::default()), config, None).await;

    // Both fixtures list the same five URIs: b's come back rewritten, and the pages cover all ten.
    let (mut uris, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
        let r = c.request("resources/list", params).await;
        let items = r["result"]["resources"].as_array().unwrap_or_else(|| panic!("{r}"));
        assert!(items.len() <= 4, "{r}");
        uris.extend(items.iter().map(|i| i["uri"].as_str().unwrap().to_owned()));
        pages += 1;
        match r["result"]["nextCursor"].as_str() {
            Some(n) => cursor = Some(n.to_owned()),
            None => break,
        }
    }
    assert_eq!((uris.len(), pages), (10, 3), "{uris:?}");
    let note_b = "stowage-upstream://b/fx%3A%2F%2Fdocs%2Fnote.txt";
    assert!(uris.contains(&"fx://docs/note.txt".to_owned()) && uris.contains(&note_b.to_owned()), "{uris:?}");
    let bad = c.request("resources/list", json!({"cursor": "not-ours"})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");

    // The rewritten URI reads from b, under the URI the client asked for.
    let read = c.request("resources/read", json!({"uri": note_b})).await;
    assert_eq!(read["result"]["contents"][0]["uri"], note_b, "{read}");
    assert_eq!(common::read_log(&b_log).lines().filter(|l| l.contains("resources/read")).count(), 1);
    // b's update of its note is announced under the rewritten URI.
    c.request("resources/subscribe", json!({"uri": note_b})).await;
    c.call("b_edit_note", json!({"text": "b's note changed"})).await;
    let heard =
        || c.notifications.lock().unwrap().iter().any(|n| n["method"] == "notifications/resources/updated" && n["params"]["uri"] == note_b);
    assert!(common::eventually(5, heard).await, "{:?}", c.notifications.lock().unwrap());
    let fresh = c.request("resources/read", json!({"uri": note_b})).await;
    assert_eq!(fresh["result"]["contents"][0]["text"], "b's note changed", "{fresh}");
}

#[tokio::test]
async fn small_resource_links_are_read_for_the_model_when_asked_and_a_failed_read_keeps_the_link() {
    let lazy = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), fast_config(), None).await;
    let r = lazy.call("get_links", json!({})).await;
    let kinds: Vec<&str> = r["result"]["content"].as_array().unwrap().iter().filter_map(|b| b["type"].as_str()).collect();
    assert_eq!(kinds, ["text", "resource_link", "resource_link", "resource_link"], "links stay lazy by default: {r}");

    let mut config = fast_config();
    config.resources.auto_read_if_size_under_bytes = 1024;
    let c = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), config, None).await;
    let r = c.call("get_links", json!({})).await;
    let content = r["result"]["content"].as_array().unwrap();
    assert_eq!(content[1]["type"], "resource", "{r}");
    assert_eq!(content[1]["resource"]["text"], "the quarter closed on Friday");
    assert_eq!(content[2]["type"], "resource_link", "over the limit: {r}");
    assert_eq!(content[3]["type"], "resource_link", "{r}");
    let why = content[3]["_meta"]["io.stowage/fetch_error"].as_str().expect("a fetch_error note");
    assert!(why.contains("fx://docs/gone.txt"), "{why}");
    assert!(r["result"].get("isError").is_none(), "a failed auto-read never fails the call: {r}");
}

#[tokio::test]
async fn an_upstream_that_does_not_answer_a_read_times_out_clearly() {
    let c = Client::start(vec![fixture_spec("fx", None, Duration::from_secs(1))], Arc::new(MemSink::default()), fast_config(), None).await;
    let started = std::time::Instant::now();
    let r = c.request("resources/read", json!({"uri": "fx://docs/hang.bin"})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_else(|| panic!("an error: {r}"));
    assert_eq!(msg, "upstream fx did not answer resources/read within 1.0s", "{r}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The gateway carries on.
    let note = c.request("resources/read", json!({"uri": "fx://docs/note.txt"})).await;
    assert_eq!(note["result"]["contents"][0]["text"], "the quarter closed on Friday");
}

#[tokio::test]
async fn a_subscriber_to_an_artifact_hears_when_it_expires() {
    let (c, store) = with_store().await;
    let opts = stowage_core::PutOptions {
        ttl: Some(Duration::from_secs(1)),
        ..stowage_core::PutOptions::scoped(scope_of("local")).mime("text/plain")
    };
    let short = store.put_bytes(bytes::Bytes::from_static(b"soon gone"), opts).await.unwrap();
    let sub = c.request("resources/subscribe", json!({"uri": short.uri})).await;
    assert!(sub.get("error").is_none(), "{sub}");
    let heard = || {
        c.notifications
            .lock()
            .unwrap()
            .iter()
            .any(|n| n["method"] == "notifications/resources/updated" && n["params"]["uri"] == short.uri.as_str())
    };
    assert!(common::eventually(5, heard).await, "{:?}", c.notifications.lock().unwrap());
    let gone = c.request("resources/read", json!({"uri": short.uri})).await;
    assert_eq!(gone["error"]["code"], -32002, "{gone}");
}

/// `store.backend = "noop"` keeps nothing: the model reads that, and gets no link, no
/// `artifact://` and no asset for bytes that were never kept (links to them would answer 404).
#[tokio::test]
async fn with_the_noop_store_nothing_names_or_links_an_artifact() {
    let sink = stowage_store::into_sink(Arc::new(stowage_store::NoOpStore::new()));
    let mut rw = common::shaper(sink);
    rw = rw.with_links(Arc::new(TestLinks));
    let c = Client::start_with_shaper(vec![fixture_spec("fx", None, T)], rw, fast_config()).await;
    for r in [c.call("get_image", json!({})).await, c.call("get_view_pdf", json!({})).await] {
        let text = r.to_string();
        assert!(text.contains("was not kept: no artifact store is configured"), "{text}");
        for absent in ["artifact://", "resource_link", "https://stowage.test/", "\"assets\"", "iVBORw0KGgo", "JVBERi"] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
    }
    let read = c.request("resources/read", json!({"uri": "fx://docs/report.pdf"})).await;
    let entry = &read["result"]["contents"][0];
    assert!(entry["text"].as_str().unwrap().contains("was not kept"), "{read}");
    assert_eq!(entry["mimeType"], "text/plain");
    assert!(!read.to_string().contains("artifact://") && !read.to_string().contains("stowage.test"), "{read}");
}
