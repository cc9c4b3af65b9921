//! Measuring a result as a host's model sees it: the whole result's bytes, the text the host
//! shows (content, structuredContent or both), its lines and o200k tokens, and the images with
//! their token cost (⌈w/28⌉ × ⌈h/28⌉ each, as Claude models count them).

use base64::Engine as _;
use serde_json::Value;

use super::{HostProfile, Sees};

/// One measurement of a result against a profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Measure {
    pub result_bytes: usize,
    pub text_bytes: usize,
    pub text_lines: usize,
    /// o200k tokens of the text (counted only when the bytes alone could pass the budget:
    /// a token is at least one byte, so fewer bytes than the budget are within it).
    pub text_tokens: u64,
    pub images: usize,
    pub image_tokens: u64,
}

impl Measure {
    pub fn tokens(&self) -> u64 {
        self.text_tokens + self.image_tokens
    }
}

/// The tokens an image of `w`×`h` pixels costs on a Claude model.
pub fn image_tokens(w: u32, h: u32) -> u64 {
    u64::from(w.div_ceil(28)) * u64::from(h.div_ceil(28))
}

/// Whether the host shows the model `structuredContent` alone for this result.
pub fn structured_only(result: &Value, profile: &HostProfile) -> bool {
    profile.sees == Sees::Structured && result.get("structuredContent").is_some_and(|s| !s.is_null())
}

/// The text a host's model reads from `result`.
pub fn visible_text(result: &Value, profile: &HostProfile) -> String {
    let mut out = String::new();
    let structured = result.get("structuredContent").filter(|s| !s.is_null());
    let show_structured = structured.is_some() && profile.sees != Sees::Content;
    let show_content = !(profile.sees == Sees::Structured && structured.is_some());
    if show_content && let Some(blocks) = result.get("content").and_then(Value::as_array) {
        for b in blocks {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => push(&mut out, b.get("text").and_then(Value::as_str).unwrap_or("")),
                Some("resource_link") => push(&mut out, &b.to_string()),
                Some("resource") => {
                    let r = &b["resource"];
                    match (r.get("text").and_then(Value::as_str), r.get("blob").and_then(Value::as_str)) {
                        (Some(t), _) => push(&mut out, t),
                        (None, Some(blob)) => push(&mut out, blob),
                        _ => push(&mut out, &r.to_string()),
                    }
                }
                _ => {}
            }
        }
    }
    if show_structured && let Some(s) = structured {
        push(&mut out, &s.to_string());
    }
    out
}

fn push(out: &mut String, s: &str) {
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(s);
}

/// The width and height of each image block's image, in order (unreadable ones count as a
/// 1568 px square: the most a Claude model takes without resizing).
pub fn image_sizes(result: &Value) -> Vec<(u32, u32)> {
    let Some(blocks) = result.get("content").and_then(Value::as_array) else { return Vec::new() };
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("image"))
        .map(|b| b.get("data").and_then(Value::as_str).and_then(dimensions).unwrap_or((1568, 1568)))
        .collect()
}

/// An image's size from its base64 data: the header first, the whole image if the header is
/// further in (a JPEG with a large EXIF block).
fn dimensions(data: &str) -> Option<(u32, u32)> {
    let engine = base64::engine::general_purpose::STANDARD;
    let head = &data[..data.len().min(4096) / 4 * 4];
    let size = |bytes: &[u8]| imagesize::blob_size(bytes).ok().map(|s| (s.width as u32, s.height as u32));
    engine.decode(head).ok().as_deref().and_then(size).or_else(|| engine.decode(data).ok().as_deref().and_then(size))
}

/// Measures `result` for `profile`; `token_budget` is the budget tokens are compared with
/// (text is only tokenized when its bytes exceed it).
pub fn measure(result: &Value, profile: &HostProfile, token_budget: Option<u64>) -> Measure {
    let result_bytes = serde_json::to_string(result).map_or(0, |s| s.len());
    let text = visible_text(result, profile);
    let sizes = image_sizes(result);
    let image_tokens: u64 = sizes.iter().map(|&(w, h)| image_tokens(w, h)).sum();
    let text_tokens = match token_budget {
        Some(b) if text.len() as u64 + image_tokens > b => stowage_transform::tokens::count_exact(&text),
        // Within budget whatever the count: bytes bound tokens from above.
        _ => (text.len() as u64).div_ceil(4),
    };
    Measure {
        result_bytes,
        text_bytes: text.len(),
        text_lines: if text.is_empty() { 0 } else { text.lines().count() },
        text_tokens,
        images: sizes.len(),
        image_tokens,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::hosts::builtin;

    fn profile(name: &str) -> HostProfile {
        builtin().into_iter().find(|p| p.name == name).unwrap()
    }

    #[test]
    fn structured_hosts_read_only_structured_content_when_there_is_one() {
        let r = json!({"content": [{"type": "text", "text": "the long text"}], "structuredContent": {"a": 1}});
        let codex = profile("codex");
        assert_eq!(visible_text(&r, &codex), "{\"a\":1}");
        assert_eq!(visible_text(&r, &profile("claude-code")), "the long text\n{\"a\":1}");
        let plain = json!({"content": [{"type": "text", "text": "only text"}]});
        assert_eq!(visible_text(&plain, &codex), "only text");
    }

    #[test]
    fn images_cost_tokens_by_their_size() {
        assert_eq!(image_tokens(1600, 1200), 58 * 43);
        assert_eq!(image_tokens(768, 576), 28 * 21);
        // A real 1×1 PNG.
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
        let r = json!({"content": [{"type": "image", "data": png, "mimeType": "image/png"}, {"type": "text", "text": "x"}]});
        let m = measure(&r, &profile("claude-code"), Some(10_000));
        assert_eq!((m.images, m.image_tokens, m.text_bytes), (1, 1, 1));
    }

    #[test]
    fn text_is_only_tokenized_when_its_bytes_could_pass_the_budget() {
        let r = json!({"content": [{"type": "text", "text": "word ".repeat(1000)}]});
        let p = profile("claude-code");
        let cheap = measure(&r, &p, Some(10_000));
        assert_eq!(cheap.text_tokens, 1250, "an estimate: within the budget either way");
        let counted = measure(&r, &p, Some(100));
        assert!(counted.text_tokens > 900 && counted.text_tokens <= 1001, "{}", counted.text_tokens);
        assert_eq!(counted.text_lines, 1);
    }
}
