//! Image previews: an offloaded image keeps a downscaled copy beside its reference, so a vision
//! model still sees it, within the host's image budget (fewer or smaller previews when
//! needed, never the original). A preview is always smaller, in bytes, than the image it
//! stands for, and all of an answer's previews together take at most half of a host's byte
//! limit (Claude Desktop's 1 MB), counted as sent.
//!
//! The preview is made from the stored original (read back as the call's owner) on the CPU
//! pool: decoding a large image is tens of milliseconds of CPU, and the decoder refuses
//! decompression bombs before it allocates (`stowage_media::ImageLimits`).

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Value, json};
use stowage_core::{ArtifactId, ArtifactScope};
use stowage_store::{Access, ArtifactStore};
use stowage_transform::ImagePreviewConfig;
use stowage_transform::TransformReport;

use super::host::PREVIEW_META_KEY;
use super::measure::image_sizes;
use crate::hosts::HostProfile;

/// The smallest preview worth sending: below this edge the model sees little.
const MIN_EDGE: u32 = 112;
/// The smallest byte budget a preview is worth making in: below it, even a thumbnail is
/// blurred past use.
const MIN_PREVIEW_BYTES: usize = 2 * 1024;
/// Images larger than this are not previewed (their decode alone would hold a pool thread too
/// long); artifact_read still fits them on request.
const MAX_SOURCE_BYTES: u64 = 64 * 1024 * 1024;

/// The longest edge each of `n` previews may have under `profile` and `config`.
pub(super) fn preview_edge(n: usize, profile: &HostProfile, config: &ImagePreviewConfig) -> u32 {
    let mut edge = config.max_edge.min(profile.max_image_edge.unwrap_or(u32::MAX));
    if let Some(budget) = profile.max_image_tokens
        && n > 0
    {
        // ⌈e/28⌉² tokens for a square preview: the largest multiple of 28 whose square fits
        // each preview's share.
        let share = budget / n as u64;
        let tiles = (share as f64).sqrt().floor() as u32;
        edge = edge.min(tiles * 28);
    }
    edge
}

/// Adds a preview after each offloaded image's link (or line) in `result`, as far as the
/// profile's image budget goes. Returns how many were added.
pub(super) async fn add_previews(
    result: &mut Value,
    report: &TransformReport,
    profile: &HostProfile,
    config: &ImagePreviewConfig,
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
) -> usize {
    if !config.enabled || !profile.image_preview {
        return 0;
    }
    let mut seen = std::collections::HashSet::new();
    let images: Vec<_> = report
        .artifacts
        .iter()
        .filter(|a| !a.artifact.is_truncated() && a.artifact.size_bytes <= MAX_SOURCE_BYTES)
        .filter(|a| a.artifact.mime_type.as_deref().is_some_and(|m| m.starts_with("image/") && !m.contains("svg")))
        .filter(|a| seen.insert(a.artifact.id.to_string()))
        .collect();
    let existing = image_sizes(result).len();
    let room = profile.max_images.unwrap_or(usize::MAX).saturating_sub(existing);
    let n = images.len().min(room);
    if n == 0 {
        return 0;
    }
    let edge = preview_edge(n, profile, config);
    if edge < MIN_EDGE {
        return 0;
    }
    let access = Access::owner_of(scope);
    let mut added = 0;
    // What previews may add to the answer, as sent (base64): half a host's byte limit, so the
    // previews never crowd out the answer they illustrate.
    let mut room_bytes = profile.max_result_bytes.map_or(usize::MAX, |m| m / 2);
    for (i, a) in images.into_iter().take(n).enumerate() {
        let uri = a.artifact.uri.clone();
        let id: ArtifactId = a.artifact.id.clone();
        // Each preview gets its share of what is left, and is smaller than its original: a
        // preview that costs more than the image it stands for is no preview.
        let share = (room_bytes / (n - i)).saturating_mul(3) / 4;
        let max_bytes = config.max_bytes.min(share).min((a.artifact.size_bytes as usize).saturating_sub(1));
        if max_bytes < MIN_PREVIEW_BYTES {
            tracing::debug!(target: "stowage::hosts", artifact = %uri, max_bytes, "no preview: no room for one smaller than the original");
            continue;
        }
        let bytes = match store.get(&access, &id).await {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(target: "stowage::hosts", artifact = %uri, error = %e, "no preview: the original cannot be read back");
                continue;
            }
        };
        let opts = stowage_media::PreviewOptions { max_edge: edge, max_bytes };
        let made = crate::cpu_pool::run(move || stowage_media::preview(&bytes, &opts, &stowage_media::ImageLimits::default())).await;
        let p = match made {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(target: "stowage::hosts", artifact = %uri, error = %e, "no preview");
                continue;
            }
        };
        let block = json!({
            "type": "image",
            "data": base64::engine::general_purpose::STANDARD.encode(&p.bytes),
            "mimeType": p.mime_type,
            "_meta": {PREVIEW_META_KEY: uri, "io.stowage/previewSize": {"width": p.width, "height": p.height}},
        });
        if insert_after_reference(result, &uri, block) {
            added += 1;
            room_bytes = room_bytes.saturating_sub(p.bytes.len().div_ceil(3) * 4);
        }
    }
    added
}

/// Puts `block` right after the link (or else the line) that refers to artifact `uri`: a
/// link's URL is signed, so the asset that maps the URL to `uri` finds it.
fn insert_after_reference(result: &mut Value, uri: &str, block: Value) -> bool {
    let mut urls = vec![uri.to_owned()];
    urls.extend(super::contract::assets_of(result).into_iter().filter(|(_, p)| p == uri).map(|(u, _)| u));
    let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) else { return false };
    let refers = |b: &Value| {
        let link = b.get("type").and_then(Value::as_str) == Some("resource_link")
            && b.get("uri").and_then(Value::as_str).is_some_and(|u| urls.iter().any(|x| x == u));
        let line = b.get("text").and_then(Value::as_str).is_some_and(|t| t.contains(uri));
        (link, line)
    };
    let at = blocks.iter().rposition(|b| refers(b).0).or_else(|| blocks.iter().rposition(|b| refers(b).1));
    match at {
        Some(k) => {
            blocks.insert(k + 1, block);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::builtin;

    #[test]
    fn previews_shrink_to_share_the_image_token_budget() {
        let config = ImagePreviewConfig::default();
        let code = builtin().into_iter().find(|p| p.name == "claude-code").unwrap();
        assert_eq!(preview_edge(1, &code, &config), 768);
        // Six previews in 6,000 tokens: 1,000 each (31×31 tiles), so 768 px still fits; eight
        // get 750 each, 27×27 tiles.
        assert_eq!(preview_edge(6, &code, &config), 768);
        assert_eq!(preview_edge(8, &code, &config), 27 * 28);
        assert!(crate::shape::measure::image_tokens(27 * 28, 27 * 28) * 8 <= 6_000);
        let mut tight = code.clone();
        tight.max_image_tokens = Some(60);
        assert!(preview_edge(6, &tight, &config) < MIN_EDGE, "too small to be worth sending");
    }

    #[test]
    fn a_preview_goes_right_after_its_link() {
        let mut r = json!({"content": [
            {"type": "text", "text": "PNG stored as artifact://a_1 Download: http://x/a?t=1"},
            {"type": "resource_link", "uri": "http://x/a?t=1", "name": "a.png"},
            {"type": "text", "text": "tail"},
        ], "_meta": {"io.stowage/assets": [{"uri": "http://x/a?t=1", "artifactUri": "artifact://a_1"}]}});
        assert!(insert_after_reference(&mut r, "artifact://a_1", json!({"type": "image"})));
        assert_eq!(r["content"][2]["type"], "image");
        assert_eq!(r["content"][3]["text"], "tail");
        assert!(!insert_after_reference(&mut r, "artifact://other", json!({"type": "image"})));
    }
}
