//! `resources/read` and `prompts/get` through the gateway's pipeline, against the stdio
//! fixture: blob resources and long text become artifacts with a line, a reference and a link;
//! small text and tiny blobs stay as they are; a blob that is not base64 and a store that
//! cannot take the bytes are errors, never a pass-through.

mod common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use common::{Client, MemSink, fast_config, fixture_spec};
use serde_json::{Value, json};
use stowage_core::ArtifactRef;

const T: Duration = Duration::from_secs(20);

/// Links as `stowage serve` mints them, minus the signature.
struct TestLinks;
impl stowage_mcp::rewrite::LinkMinter for TestLinks {
    fn link(&self, r: &ArtifactRef) -> Option<(String, String)> {
        Some((format!("https://stowage.test/artifacts/{}?token=t", r.id), "2026-11-23T18:00:00Z".into()))
    }
}

async fn client(sink: Arc<MemSink>) -> Client {
    let mut rw = common::rewriter(sink);
    rw.links = Some(Arc::new(TestLinks));
    Client::start_with_rewriter(vec![fixture_spec("fx", None, T)], rw, fast_config()).await
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

    let full = Arc::new(MemSink { fail: true, ..Default::default() });
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
