//! The whole rewrite (the production pipeline, then the contract and the output-schema check)
//! on results whose tool declares an outputSchema that a typed prefix alone cannot satisfy:
//! what the check repairs, what becomes an error result, and what it leaves to the upstream.

use crate::common;

use std::sync::Arc;

use common::{MemSink, assert_matches_output_schema, shaper};
use serde_json::{Value, json};
use stowage_core::ArtifactScope;
use stowage_mcp::output_schema::OutputSchema;
use stowage_mcp::shape::CallContext;

async fn rewrite(schema: &Value, result: Value) -> Value {
    rewrite_into(Arc::new(MemSink::default()), schema, result).await
}

async fn rewrite_into(sink: Arc<MemSink>, schema: &Value, result: Value) -> Value {
    let ctx = CallContext {
        tool: "t".into(),
        upstream: "up".into(),
        scope: ArtifactScope::session("s"),
        output_schema: Some(Arc::new(OutputSchema::compile(schema.clone()))),
    };
    common::shape(&shaper(sink), &ctx, &result).await
}

/// Text far over any inline budget (numbers tokenize densely).
fn long_text() -> String {
    (0..20_000).map(|i| i.to_string()).collect::<Vec<_>>().join(" ")
}

fn with_twin(sc: Value) -> Value {
    json!({"content": [{"type": "text", "text": sc.to_string()}], "structuredContent": sc})
}

#[tokio::test]
async fn a_stub_longer_than_maxlength_is_repaired() {
    let schema = json!({"type": "object", "properties": {"log": {"type": "string", "maxLength": 100}, "ok": {"type": "boolean"}},
        "required": ["log", "ok"]});
    let v = rewrite(&schema, with_twin(json!({"log": long_text(), "ok": true}))).await;
    assert_matches_output_schema(&schema, &v);
    assert_eq!(v["structuredContent"]["log"], "", "the smallest string the schema accepts");
    assert_eq!(v["structuredContent"]["ok"], true);
    assert_eq!(v["_meta"]["io.stowage/transform"]["outputSchema"], "repaired");
    // The artifact is still there for the model: its line and link.
    let text = v["content"].to_string();
    assert!(text.contains("artifact://t_") && text.contains("resource_link"), "{text}");
}

#[tokio::test]
async fn a_result_that_cannot_be_kept_valid_becomes_an_error_that_lists_its_artifacts() {
    // The array must contain a 7, which only a later row has: no prefix, no smallest instance.
    let schema = json!({"type": "object", "properties": {"rows": {"type": "array", "contains": {"const": 7}}}, "required": ["rows"]});
    let rows: Vec<Value> = (0..20_000).map(|i| json!(if i == 19_999 { 7 } else { 1 })).collect();
    let v = rewrite(&schema, with_twin(json!({"rows": rows}))).await;
    assert_eq!(v["isError"], true, "{v}");
    assert!(v.get("structuredContent").is_none());
    assert!(v["content"][0]["text"].as_str().unwrap().starts_with("output_schema_mismatch: "));
    assert!(v["content"].as_array().unwrap().iter().any(|b| b["type"] == "resource_link"), "the artifact stays listed: {v}");
    assert_eq!(v["_meta"]["io.stowage/transform"]["outputSchema"], "error");
    assert!(v.to_string().len() < 8_000);
}

#[tokio::test]
async fn an_upstreams_own_mismatch_is_relayed_as_it_came() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}, "log": {"type": "string"}}});
    let v = rewrite(&schema, with_twin(json!({"n": "not a number", "log": long_text()}))).await;
    assert_eq!(v["structuredContent"]["n"], "not a number");
    assert!(v["structuredContent"]["log"].as_str().unwrap().contains("artifact://"));
    assert_eq!(v["_meta"]["io.stowage/transform"]["outputSchema"], "upstream_invalid");
}

/// The size net's values may stay when the store refuses them (they are not binaries): under a
/// schema that is the typed prefix, still valid, and one line says the rest is missing.
#[tokio::test]
async fn a_store_that_refuses_leaves_a_valid_prefix_and_says_so() {
    let schema = json!({"type": "object", "properties": {"result": {"type": "array"}}, "required": ["result"]});
    let rows: Vec<Value> = (0..2000).map(|i| json!({"id": i, "name": format!("row {i}")})).collect();
    let sink = Arc::new(MemSink { fail: true.into(), ..Default::default() });
    let v = rewrite_into(sink, &schema, with_twin(json!({"result": rows}))).await;
    assert_matches_output_schema(&schema, &v);
    assert!(v["structuredContent"]["result"].as_array().is_some_and(|r| !r.is_empty() && r.len() < 2000));
    let lines: Vec<&str> = v["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
    assert!(lines.iter().any(|l| l.starts_with("Only part of /structuredContent/result is shown: cannot store")), "{lines:?}");
    assert!(!v.to_string().contains("/nonexistent"), "the store's message names a server path: {v}");
}

/// Links as `stowage serve` mints them: about 250 characters each.
struct LongLinks;
impl stowage_mcp::shape::LinkMinter for LongLinks {
    fn link(&self, r: &stowage_core::ArtifactRef) -> Option<(String, String)> {
        Some((format!("http://127.0.0.1:8787/artifacts/{}?token=v1.k6edea574.{}", r.id, "t".repeat(190)), "2026-11-23T21:00:00Z".into()))
    }
}

/// The production rewrite with `clamp` settings and signed links.
async fn rewrite_clamped(max_observation_chars: usize, auto_artifact_threshold: usize, result: Value) -> Value {
    let mut config = stowage_transform::TransformConfig::default();
    config.clamp.max_observation_chars = max_observation_chars;
    config.clamp.auto_artifact_threshold = auto_artifact_threshold;
    let sink = stowage_mcp::shape::with_dimensions(Arc::new(MemSink::default()));
    let pipeline = Arc::new(stowage_transform::Pipeline::new(config, sink));
    let rw = stowage_mcp::shape::Shaper::new(stowage_mcp::shape::Pipelines::new(pipeline)).with_links(Arc::new(LongLinks));
    let ctx = CallContext { tool: "t".into(), upstream: "up".into(), scope: ArtifactScope::session("s"), output_schema: None };
    common::shape(&rw, &ctx, &result).await
}

#[tokio::test]
async fn the_clamps_limit_holds_for_the_result_finally_sent() {
    // The case penguiflow's own tests found: 1,601 characters against a limit of 1,000.
    let r = rewrite_clamped(1000, 100, json!({"content": [{"type": "text", "text": json!({"data": "x".repeat(2000)}).to_string()}]})).await;
    // What a model observes is all but `_meta` (the records there are for hosts and apps).
    let observed = |r: &Value| {
        let mut o = r.clone();
        o.as_object_mut().unwrap().remove("_meta");
        o.to_string()
    };
    let sent = observed(&r);
    assert!(sent.chars().count() <= 1000, "{} characters: {sent}", sent.chars().count());
    let asset = r["_meta"]["io.stowage/assets"][0]["artifactUri"].as_str().unwrap();
    assert!(r["content"].to_string().contains(asset), "the reference survives in the content: {sent}");
    assert!(sent.contains("artifact://"), "the model still reads the reference: {sent}");
    assert_eq!(r["_meta"]["io.stowage/transform"]["fitted"], true, "{}", r["_meta"]);

    // 60 different images at the default limit: every one stays named.
    use base64::Engine;
    let blocks: Vec<Value> = (0..60)
        .map(|i| json!({"type": "image", "data": base64::engine::general_purpose::STANDARD.encode(stowage_demo::samples::png(30 + i, 30)), "mimeType": "image/png"}))
        .collect();
    let r = rewrite_clamped(50_000, 20_000, json!({"content": blocks})).await;
    let sent = observed(&r);
    assert!(sent.chars().count() <= 50_000, "{} characters", sent.chars().count());
    let named = sent.matches("artifact://").count();
    assert!(named >= 60, "{named} references for 60 images");
    // References are cheap now: sixty fit without folding, each signed URL written once.
    assert_eq!(sent.matches("?token=").count(), 60, "one link each");
}
