//! Step 3, the host: what the caller's host does with an answer decides where references go.
//!
//! Each step only when the profile asks for it:
//! 1. `resource_link` blocks become text for hosts that cannot take them: a signed link joins
//!    the line that names its artifact (`… Download: <url>`), so its URL is still written once;
//!    another link becomes a line of its own;
//! 2. for hosts that drop text beside `structuredContent` (Codex, Claude Code, VS Code), the
//!    lines the gateway wrote in `content` go into `structuredContent.stowage` too (where the
//!    tool's `outputSchema` allows a key of ours);
//! 3. for hosts whose model is not told a result was an error (Codex), an error answer opens
//!    with a line that says so ([`FAILED_LINE`]);
//! 4. previews of offloaded images, then the image budget: previews from the last go first,
//!    then inline images are offloaded (see [`super::preview`]).
//!
//! Budgets (bytes, lines, tokens) are the last step's business ([`super::fit`]), after the
//! gateway's own additions.

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json};
use stowage_core::{ArtifactRef, human_size};
use stowage_transform::Pipeline;

use super::contract::assets_of;
use super::measure::{image_sizes, image_tokens};
use super::offload::{CallContext, store};
use super::schema::schema_accepts_key;
use crate::hosts::HostProfile;

/// `_meta` key on an image block that is a preview of an offloaded image (its artifact URI).
pub const PREVIEW_META_KEY: &str = "io.stowage/preview";
/// The key of `structuredContent` that carries the gateway's lines for structured-only hosts.
pub const STRUCTURED_NOTES_KEY: &str = "stowage";
/// The most images one answer's image budget moves out before it stops.
const MAX_IMAGE_STEPS: usize = 64;

/// Whether `text` is something the gateway wrote about an artifact (a reference line, a
/// stand-in, a note): never moved or cut.
pub(crate) fn is_reference(text: &str) -> bool {
    text.contains("artifact://") && text.len() < 8 * 1024 || text.starts_with("[withheld")
}

/// Replaces `resource_link` blocks with text, for hosts that cannot take them (see the module
/// docs). Whether anything changed.
pub(crate) fn links_as_text(result: &mut Value) -> bool {
    let signed = assets_of(result);
    let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) else { return false };
    let mut changed = false;
    let mut out: Vec<Value> = Vec::with_capacity(blocks.len());
    for b in blocks.drain(..) {
        if b.get("type").and_then(Value::as_str) != Some("resource_link") {
            out.push(b);
            continue;
        }
        changed = true;
        let uri = b.get("uri").and_then(Value::as_str).unwrap_or("");
        let permanent = signed.iter().find(|(url, _)| url == uri).map(|(_, p)| p.as_str());
        if let Some(line) = out
            .last_mut()
            .and_then(|p| p.get_mut("text"))
            .filter(|t| t.as_str().is_some_and(|t| !uri.is_empty() && (t.contains(uri) || permanent.is_some_and(|p| t.contains(p)))))
        {
            // The line before names this artifact: a signed URL joins it, an artifact:// one
            // is there already.
            let text = line.as_str().unwrap_or_default();
            if !text.contains(uri) {
                *line = json!(format!("{text} Download: {uri}"));
            }
            continue;
        }
        let name = b.get("title").or_else(|| b.get("name")).and_then(Value::as_str).unwrap_or("resource");
        let mut line = format!("Resource: {name} <{uri}>");
        if let Some(m) = b.get("mimeType").and_then(Value::as_str) {
            line.push_str(&format!(" [{m}]"));
        }
        if let Some(d) = b.get("description").and_then(Value::as_str) {
            line.push_str(&format!(": {d}"));
        }
        out.push(json!({"type": "text", "text": line}));
    }
    *blocks = out;
    changed
}

/// For hosts that drop text beside `structuredContent`: see the module docs (step 2).
pub(crate) fn structured_visibility(result: &mut Value, ctx: &CallContext) -> bool {
    let schema = ctx.output_schema.as_deref().map(crate::output_schema::OutputSchema::schema);
    let lines: Vec<Value> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                // The gateway's own lines, not the tool's JSON text (its twin of
                // structuredContent already carries the stubs in place).
                .filter(|t| !t.trim_start().starts_with(['{', '[']))
                .filter(|t| is_reference(t) || t.starts_with("Only part of") || t.starts_with("Download links were left out"))
                .map(|t| json!(t))
                .collect()
        })
        .unwrap_or_default();
    if lines.is_empty() {
        return false;
    }
    let allowed = schema.is_none_or(|s| schema_accepts_key(s, STRUCTURED_NOTES_KEY));
    match result.get_mut("structuredContent") {
        Some(Value::Object(sc)) if allowed && !sc.contains_key(STRUCTURED_NOTES_KEY) => {
            sc.insert(STRUCTURED_NOTES_KEY.into(), Value::Array(lines));
            true
        }
        _ => {
            tracing::debug!(target: "stowage::hosts", tool = %ctx.tool,
                "the tool's outputSchema leaves no room for the gateway's lines in structuredContent; this host may not see them");
            false
        }
    }
}

/// The first line of an error answer for a host that shows an error exactly like a success
/// (Codex CLI): without it, its model reads a failure as the tool's result.
pub(crate) const FAILED_LINE: &str = "Error: this tool call failed (isError); what follows is the error, not a result.";

/// Opens an `isError` answer with [`FAILED_LINE`], for hosts whose model is not told a result
/// was an error. Whether anything changed.
pub(crate) fn say_it_failed(result: &mut Value) -> bool {
    if result.get("isError").and_then(Value::as_bool) != Some(true) {
        return false;
    }
    let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) else { return false };
    if blocks.first().and_then(|b| b.get("text")).and_then(Value::as_str) == Some(FAILED_LINE) {
        return false;
    }
    blocks.insert(0, json!({"type": "text", "text": FAILED_LINE}));
    true
}

/// The image budget (count and tokens): previews from the last go first, then the largest
/// inline images are offloaded. Whether anything changed.
pub(crate) async fn fit_images(
    result: &mut Value,
    profile: &HostProfile,
    pipeline: &Pipeline,
    ctx: &CallContext,
    stored: &mut Vec<ArtifactRef>,
) -> bool {
    let max_images = profile.max_images.unwrap_or(usize::MAX);
    let max_tokens = profile.max_image_tokens.unwrap_or(u64::MAX);
    let mut changed = false;
    for _ in 0..MAX_IMAGE_STEPS {
        let sizes = image_sizes(result);
        let tokens: u64 = sizes.iter().map(|&(w, h)| image_tokens(w, h)).sum();
        if sizes.len() <= max_images && tokens <= max_tokens {
            break;
        }
        let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) else { break };
        let is_image = |b: &Value| b.get("type").and_then(Value::as_str) == Some("image");
        if let Some(k) = blocks.iter().rposition(|b| is_image(b) && preview_of(b).is_some()) {
            blocks.remove(k);
            changed = true;
            continue;
        }
        let Some(k) = blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| is_image(b))
            .max_by_key(|(_, b)| b.get("data").and_then(Value::as_str).map_or(0, str::len))
            .map(|(k, _)| k)
        else {
            break;
        };
        let block = blocks[k].clone();
        let line = offload_image(&block, pipeline, ctx, stored).await;
        if let Some(b) = result.get_mut("content").and_then(Value::as_array_mut).and_then(|b| b.get_mut(k)) {
            *b = json!({"type": "text", "text": line});
        }
        changed = true;
    }
    changed
}

/// The artifact an image block previews, when it is one of the gateway's previews.
pub(crate) fn preview_of(block: &Value) -> Option<&str> {
    block.get("_meta")?.get(PREVIEW_META_KEY)?.as_str()
}

/// How many of the gateway's previews an answer carries (what `_meta` reports: the number
/// actually sent).
pub(crate) fn previews_in(result: &Value) -> usize {
    result.get("content").and_then(Value::as_array).map_or(0, |b| b.iter().filter(|b| preview_of(b).is_some()).count())
}

/// Stores an inline image block's bytes; the line that stands for it.
pub(crate) async fn offload_image(block: &Value, pipeline: &Pipeline, ctx: &CallContext, stored: &mut Vec<ArtifactRef>) -> String {
    let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("image/png").to_owned();
    if let Some(uri) = preview_of(block) {
        return format!("(a preview of {uri} was left out to fit this host's image budget; artifact_read on it returns the image)");
    }
    let data = block.get("data").and_then(Value::as_str).unwrap_or("");
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
        return format!("[withheld: an image ({mime}) whose base64 does not decode, left out to fit this host's limit]");
    };
    let size = bytes.len() as u64;
    match store(pipeline, ctx, Bytes::from(bytes), &mime).await {
        Ok(r) => {
            let line = format!(
                "{mime} image ({}) stored as {} to fit this host's limit; artifact_read returns it fitted, or a region of it",
                human_size(size),
                r.uri
            );
            stored.push(r);
            line
        }
        Err(e) => {
            tracing::warn!(target: "stowage::hosts", tool = %ctx.tool, error = %e, "cannot store an image moved out to fit the host");
            // The model reads the code only: the store's own message may name server paths.
            format!(
                "[withheld: an image ({mime}, {}) left out to fit this host's limit; it could not be stored ({})]",
                human_size(size),
                e.code
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::shape::contract::ASSETS_META_KEY;

    fn ctx() -> CallContext {
        CallContext { tool: "logs".into(), upstream: "u".into(), scope: stowage_core::ArtifactScope::session("s"), output_schema: None }
    }

    #[test]
    fn a_signed_link_joins_its_line_and_other_links_become_lines() {
        let mut r = json!({"content": [
            {"type": "text", "text": "PNG image stored as artifact://a_1 (link expires 09:00 UTC)"},
            {"type": "resource_link", "uri": "http://x/a?t=1", "name": "a.png"},
            {"type": "resource_link", "uri": "file:///docs/readme.md", "name": "readme.md", "mimeType": "text/markdown", "description": "The readme"},
        ], "_meta": {ASSETS_META_KEY: [{"uri": "http://x/a?t=1", "artifactUri": "artifact://a_1"}]}});
        assert!(links_as_text(&mut r));
        let blocks = r["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 2, "{r}");
        assert_eq!(blocks[0]["text"], "PNG image stored as artifact://a_1 (link expires 09:00 UTC) Download: http://x/a?t=1");
        assert_eq!(blocks[1]["text"], "Resource: readme.md <file:///docs/readme.md> [text/markdown]: The readme");
        assert!(blocks.iter().all(|b| b["type"] == "text"));
    }

    #[test]
    fn structured_hosts_get_the_gateway_lines_in_structured_content() {
        let mut r = json!({"content": [{"type": "text", "text": "{\"pdf\": \"PDF (2 MB) stored as artifact://r_1\"}"}, {"type": "text", "text": "PDF (2 MB) stored as artifact://r_1"}],
            "structuredContent": {"title": "Q3"}});
        let c = ctx();
        assert!(structured_visibility(&mut r, &c));
        assert_eq!(r["structuredContent"]["stowage"], json!(["PDF (2 MB) stored as artifact://r_1"]));
        // A closed schema: nothing added, nothing broken.
        let mut closed = ctx();
        closed.output_schema = Some(Arc::new(crate::output_schema::OutputSchema::compile(
            json!({"type": "object", "properties": {"title": {"type": "string"}}, "additionalProperties": false}),
        )));
        let mut r2 = json!({"content": [{"type": "text", "text": "PDF stored as artifact://r_1"}], "structuredContent": {"title": "Q3"}});
        assert!(!structured_visibility(&mut r2, &closed));
        assert_eq!(r2["structuredContent"], json!({"title": "Q3"}));
    }
}
