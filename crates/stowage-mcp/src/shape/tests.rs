//! The shaper's order and its one measurement, on a real pipeline over an in-memory sink.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Value, json};
use stowage_core::ArtifactScope;
use stowage_transform::testing::MemorySink;
use stowage_transform::{Pipeline, TransformConfig};

use super::*;
use crate::hosts::builtin;

fn shaper(sink: Arc<MemorySink>) -> Shaper {
    Shaper::new(Pipelines::new(Arc::new(Pipeline::new(TransformConfig::default(), sink))))
}

fn ctx() -> CallContext {
    CallContext { tool: "report".into(), upstream: "u".into(), scope: ArtifactScope::session("s"), output_schema: None }
}

fn profile(name: &str) -> HostProfile {
    builtin().into_iter().find(|p| p.name == name).unwrap_or_else(HostProfile::default_profile)
}

fn job<'a>(ctx: &'a CallContext, host: &'a HostProfile) -> Job<'a> {
    Job { ctx, host }
}

/// What a host's model reads of `v`, counted the way the figures say they count it.
fn visible_tokens(v: &Value, host: &HostProfile) -> u64 {
    let t = twins::find(v);
    stowage_transform::tokens::count_exact(&measure::visible_text(v, host, !t.is_empty()))
}

#[tokio::test]
async fn figures_are_those_of_the_answer_as_sent() {
    let pdf = base64::engine::general_purpose::STANDARD.encode(stowage_demo_like_pdf());
    let raw = json!({"content": [{"type": "text", "text": "Here is the report."}, {"type": "text", "text": json!({"name": "Q3", "data": pdf}).to_string()}]})
        .to_string();
    let c = ctx();
    for host in ["default", "claude-code", "codex", "sdk"] {
        let h = profile(host);
        let shaped = shaper(MemorySink::new()).shape(job(&c, &h), raw.clone()).await;
        let sent = serde_json::to_string(&shaped.value).unwrap();
        assert_eq!(shaped.figures.bytes_out as usize, sent.len(), "{host}: bytesOut is the answer's own size, _meta included");
        assert_eq!(shaped.value["_meta"][TRANSFORM_META_KEY]["bytesOut"], json!(sent.len()), "{host}");
        assert_eq!(shaped.figures.tokens_out, visible_tokens(&shaped.value, &h), "{host}: tokensOut is what the model reads");
        assert_eq!(shaped.value["_meta"][TRANSFORM_META_KEY]["tokensOut"], json!(shaped.figures.tokens_out));
        assert!(shaped.figures.tokens_in > shaped.figures.tokens_out * 10, "{host}: {:?}", shaped.figures);
        assert_eq!(shaped.figures.artifacts, 1);
        assert!(!sent.contains(&pdf[..200]), "{host}: no base64 left");
    }
}

#[tokio::test]
async fn a_pass_through_answer_is_left_as_it_came_and_measured_once() {
    let raw = r#"{"content":[{"type":"text","text":"hello"}],"isError":false}"#.to_owned();
    let (c, h) = (ctx(), HostProfile::default_profile());
    let shaped = shaper(MemorySink::new()).shape(job(&c, &h), raw.clone()).await;
    let mut without_stats = shaped.value.clone();
    without_stats.as_object_mut().unwrap().remove("_meta");
    assert_eq!(without_stats, serde_json::from_str::<Value>(&raw).unwrap());
    assert_eq!(shaped.figures.tokens_in, shaped.figures.tokens_out);
    assert_eq!(shaped.figures.tokens_out, 1);
}

#[tokio::test]
async fn what_the_gateway_adds_is_within_the_final_limit() {
    let (c, h) = (ctx(), HostProfile::default_profile());
    let s = shaper(MemorySink::new());
    let mut draft = s.prepare(job(&c, &h), json!({"content": [{"type": "text", "text": "ok"}]}).to_string()).await;
    // An auto-read resource of 80 KB: over the 50,000-character observation limit.
    let long = "resource line\n".repeat(6_000);
    draft.value_mut()["content"].as_array_mut().unwrap().push(json!({"type": "resource", "resource": {"uri": "r://x", "text": long}}));
    let shaped = s.finish(job(&c, &h), draft).await;
    assert!(shaped.figures.measure.result_chars <= 50_000, "{:?}", shaped.figures);
    assert!(shaped.figures.fitted);
    let text = shaped.value["content"][1]["resource"]["text"].as_str().unwrap();
    assert!(text.starts_with("resource line") && text.contains("artifact_read"), "head, tail and the reference: {text}");
}

#[tokio::test]
async fn fastmcp_text_sent_twice_stays_readable_and_counts_once() {
    // A FastMCP `-> str` tool: 30 KB of prose in content and again as structuredContent.result.
    let text = "The quarterly report shows steady growth across every region we track. ".repeat(450);
    assert!(text.len() > 30_000);
    let schema =
        json!({"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"], "x-fastmcp-wrap-result": true});
    let mut c = ctx();
    c.output_schema = Some(Arc::new(crate::output_schema::OutputSchema::compile(schema)));
    let raw = json!({"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}, "isError": false}).to_string();
    let h = HostProfile::default_profile();
    let shaped = shaper(MemorySink::new()).shape(job(&c, &h), raw).await;
    assert_eq!(shaped.value["content"][0]["text"], text.as_str(), "readable where the model reads it");
    assert_eq!(shaped.value["structuredContent"]["result"], text.as_str());
    assert_eq!(shaped.figures.artifacts, 0);
    assert!(shaped.figures.tokens_out < 8_000, "{:?}", shaped.figures);
}

#[tokio::test]
async fn a_long_error_keeps_its_head_and_its_exception() {
    let mut trace = String::from("Traceback (most recent call last):\n");
    for i in 0..700 {
        trace.push_str(&format!("  File \"/srv/app/module_{i}.py\", line {}, in handler_{i}\n    result = step_{i}(payload)\n", i * 7));
    }
    trace.push_str("ValueError: the invoice total does not match its lines");
    assert!(trace.len() > 39_000);
    let raw = json!({"content": [{"type": "text", "text": trace}], "isError": true}).to_string();
    let c = ctx();
    for host in ["default", "claude-code"] {
        let h = profile(host);
        let shaped = shaper(MemorySink::new()).shape(job(&c, &h), raw.clone()).await;
        let t = shaped.value["content"][0]["text"].as_str().unwrap();
        assert!(t.starts_with("Traceback (most recent call last):"), "{host}");
        assert!(t.ends_with("ValueError: the invoice total does not match its lines"), "{host}: the exception stays: {t}");
        assert!(t.contains("artifact://") && t.contains("artifact_read"), "{host}: the whole is named");
        assert!(t.len() > 2_000, "{host}: more than a glimpse ({})", t.len());
        if let Some(limit) = h.max_error_chars {
            assert!(t.chars().count() <= limit, "{host}: {} > {limit}", t.chars().count());
        }
        assert_eq!(shaped.value["isError"], true);
    }
}

/// The shaper owns the shape, not the transport: it imports nothing from the upstream,
/// downstream, session or routing code (nor the gateway that uses it).
#[test]
fn the_shaper_depends_on_no_transport_session_or_routing_code() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/shape");
    let forbidden = [
        "crate::upstream",
        "crate::downstream",
        "crate::session",
        "crate::attribution",
        "crate::catalog",
        "crate::gateway",
        "crate::Gateway",
        "crate::Session",
        "crate::Caller",
        "super::super",
    ];
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for f in forbidden {
                // A whole path segment (`crate::Gateway`, not `crate::GatewayConfig`).
                let uses =
                    text.match_indices(f).any(|(at, _)| !text[at + f.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'));
                assert!(!uses, "{} uses {f}: the shaper must not know how answers travel", path.display());
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "found {checked} files");
}

/// A small valid PDF, big enough to be offloaded (the demo server's sample is made the same
/// way: text objects in a page).
fn stowage_demo_like_pdf() -> Vec<u8> {
    let mut pdf = b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n".to_vec();
    pdf.extend(std::iter::repeat_n(b'x', 8_000));
    pdf.extend_from_slice(b"\n%%EOF\n");
    pdf
}
