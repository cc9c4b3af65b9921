//! Measuring an answer as a host's model sees it: the whole answer's bytes and characters,
//! the text the host shows (content, structuredContent or both), its lines and o200k tokens,
//! and the images with their token cost (⌈w/28⌉ × ⌈h/28⌉ each, as Claude models count them).
//!
//! A value the answer carries twice (a text block repeating `structuredContent`, see
//! [`stowage_transform::twins`]) counts once: a host that shows both shows the model the same
//! value twice, and what a budget limits is how much there is to read.

use base64::Engine as _;
use serde_json::Value;
use stowage_transform::tokens::{ESTIMATE_BYTES_PER_TOKEN, TokensConfig};

use crate::hosts::{HostProfile, Sees};

/// One measurement of an answer against a profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Measure {
    /// Bytes of the whole answer's JSON.
    pub result_bytes: usize,
    /// Characters of the answer's JSON a model can observe as text: all of it but `_meta`
    /// (records for hosts and apps) and images' data, a repeated value counted once. What the observation limit,
    /// `transform.clamp.max_observation_chars`, holds.
    pub result_chars: usize,
    /// Bytes of the text the model reads: what a profile's `max_text_bytes` holds.
    pub text_bytes: usize,
    /// Lines of that text (0 when there is none): what `max_text_lines` holds.
    pub text_lines: usize,
    /// o200k tokens of the text the model reads.
    pub text_tokens: u64,
    /// Whether `text_tokens` is an estimate (the text was not counted: either within a budget
    /// whatever its count, or too long to count cheaply).
    pub tokens_estimated: bool,
    /// Image blocks the model sees (inline images and previews).
    pub images: usize,
    /// What those images cost the model, ⌈w/28⌉ × ⌈h/28⌉ tokens each.
    pub image_tokens: u64,
}

impl Measure {
    /// Everything the model reads, in o200k tokens: text and images.
    pub(crate) fn tokens(&self) -> u64 {
        self.text_tokens + self.image_tokens
    }
}

/// How exactly tokens are wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tokens {
    /// Only to compare with this budget: text whose bytes are within it is not counted (a
    /// token is at least one byte).
    Against(Option<u64>),
    /// For the figures an answer reports: counted when the text is at most the counting
    /// limit, estimated above it.
    Figures,
}

/// The tokens an image of `w`×`h` pixels costs on a Claude model.
pub fn image_tokens(w: u32, h: u32) -> u64 {
    u64::from(w.div_ceil(28)) * u64::from(h.div_ceil(28))
}

/// Which parts of an answer a host shows its model (see [`crate::hosts::Sees`] and the
/// profile's error rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The text blocks of `content`.
    pub text: bool,
    /// Images, resource links and embedded resources.
    pub media: bool,
    /// `structuredContent`, as JSON.
    pub structured: bool,
    /// The whole answer as JSON, `_meta` included (an error, for some hosts).
    pub whole: bool,
}

/// What `profile`'s host shows its model of `result`, as measured for each host.
pub(crate) fn shown(result: &Value, profile: &HostProfile) -> Shown {
    let has_structured = result.get("structuredContent").is_some_and(|s| !s.is_null());
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    if is_error && profile.errors_as_json {
        return Shown { text: false, media: false, structured: false, whole: true };
    }
    if is_error && profile.sees == Sees::StructuredAndMedia {
        // Claude Code: an error's text blocks (and link lines) only.
        return Shown { text: true, media: false, structured: false, whole: false };
    }
    match (profile.sees, has_structured) {
        (_, false) | (Sees::Content, true) => Shown { text: true, media: true, structured: false, whole: false },
        (Sees::Both, true) => Shown { text: true, media: true, structured: true, whole: false },
        (Sees::Structured, true) => Shown { text: false, media: false, structured: true, whole: false },
        (Sees::StructuredAndMedia, true) => Shown { text: false, media: true, structured: true, whole: false },
    }
}

/// Whether the host shows the model no text block of this answer, only its
/// `structuredContent` (and perhaps media): the answer's text is then cut, if at all, where
/// the model reads it.
pub fn structured_only(result: &Value, profile: &HostProfile) -> bool {
    let s = shown(result, profile);
    s.structured && !s.text
}

/// The text a host's model reads from `result`; `twinned`: the answer repeats its
/// `structuredContent` in a text block, which is then read once (in `content`).
pub fn visible_text(result: &Value, profile: &HostProfile, twinned: bool) -> String {
    let shown = shown(result, profile);
    if shown.whole {
        return result.to_string();
    }
    let mut out = String::new();
    let structured = result.get("structuredContent").filter(|s| !s.is_null());
    let show_structured = shown.structured && !(twinned && shown.text);
    if let Some(blocks) = result.get("content").and_then(Value::as_array) {
        for b in blocks {
            match b.get("type").and_then(Value::as_str) {
                Some("text") if shown.text => push(&mut out, b.get("text").and_then(Value::as_str).unwrap_or("")),
                Some("resource_link") if shown.text || shown.media => push(&mut out, &b.to_string()),
                Some("resource") if shown.media => {
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

/// The sizes of the images `profile`'s model sees in `result` (none where the host drops
/// them: beside `structuredContent` for Codex, in an error for Claude Code).
pub(crate) fn shown_image_sizes(result: &Value, profile: &HostProfile) -> Vec<(u32, u32)> {
    if shown(result, profile).media { image_sizes(result) } else { Vec::new() }
}

/// What `profile`'s model reads of `result`, for people to look at (the playground): the text,
/// a value carried twice once, and how many images beside it.
pub fn model_view(result: &Value, profile: &HostProfile) -> Value {
    let twinned = result.get("structuredContent").is_some() && !stowage_transform::twins::find(result).is_empty();
    let text = visible_text(result, profile, twinned);
    serde_json::json!({"text": text, "images": shown_image_sizes(result, profile).len(), "tokens": stowage_transform::tokens::count_exact(&text)})
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

/// Measures `result` for `profile`. `twins` are the repeated values [`stowage_transform::twins::find`]
/// found in it (found once by the caller: finding them parses JSON text).
pub(crate) fn measure(result: &Value, profile: &HostProfile, twins: &[stowage_transform::twins::Twin], tokens: Tokens) -> Measure {
    let json = serde_json::to_string(result).unwrap_or_default();
    // `,"_meta":{…}` is not observed, nor an image's data: the model sees the image (its
    // tokens are the image budget's), not its base64.
    let meta_chars = result.get("_meta").map_or(0, |m| serde_json::to_string(m).map_or(0, |t| t.chars().count()) + "\"_meta\":,".len());
    let image_chars: usize = result
        .get("content")
        .and_then(Value::as_array)
        .map(|b| {
            b.iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("image"))
                .filter_map(|b| b.get("data")?.as_str())
                .map(str::len)
                .sum()
        })
        .unwrap_or(0);
    let result_chars =
        json.chars().count().saturating_sub(meta_chars + image_chars + stowage_transform::twins::duplicate_chars(result, twins));
    let text = visible_text(result, profile, !twins.is_empty());
    let sizes = shown_image_sizes(result, profile);
    let image_tokens: u64 = sizes.iter().map(|&(w, h)| image_tokens(w, h)).sum();
    let estimate = (text.len() as u64).div_ceil(ESTIMATE_BYTES_PER_TOKEN);
    let (text_tokens, tokens_estimated) = match tokens {
        Tokens::Against(Some(b)) if text.len() as u64 + image_tokens > b => (stowage_transform::tokens::count_exact(&text), false),
        // Within budget whatever the count: bytes bound tokens from above.
        Tokens::Against(_) => (estimate, true),
        Tokens::Figures if text.len() <= TokensConfig::default().exact_max_bytes => (stowage_transform::tokens::count_exact(&text), false),
        Tokens::Figures => (estimate, true),
    };
    Measure {
        result_bytes: json.len(),
        result_chars,
        text_bytes: text.len(),
        text_lines: if text.is_empty() { 0 } else { text.lines().count() },
        text_tokens,
        tokens_estimated,
        images: sizes.len(),
        image_tokens,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use stowage_transform::twins;

    use super::*;
    use crate::hosts::builtin;

    fn profile(name: &str) -> HostProfile {
        builtin().into_iter().find(|p| p.name == name).unwrap()
    }

    #[test]
    fn each_host_reads_what_it_was_measured_to_show() {
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
        let r = json!({"content": [{"type": "text", "text": "the long text"}, {"type": "image", "data": png, "mimeType": "image/png"}],
            "structuredContent": {"a": 1}, "_meta": {"io.stowage/assets": [{"uri": "http://x/a?token=t"}]}});
        let (codex, code, default) = (profile("codex"), profile("claude-code"), HostProfile::default_profile());
        assert_eq!(visible_text(&r, &codex, false), "{\"a\":1}");
        assert!(shown_image_sizes(&r, &codex).is_empty(), "Codex drops images beside structuredContent");
        assert_eq!(visible_text(&r, &code, false), "{\"a\":1}", "Claude Code drops the text beside structuredContent");
        assert_eq!(shown_image_sizes(&r, &code).len(), 1, "and keeps the image");
        assert_eq!(visible_text(&r, &default, false), "the long text\n{\"a\":1}");
        let plain = json!({"content": [{"type": "text", "text": "only text"}]});
        assert_eq!(visible_text(&plain, &codex, false), "only text");
        // Errors: Claude Code reads the text only; Qwen Code and Gemini CLI read it all, _meta too.
        let mut err = r.clone();
        err["isError"] = json!(true);
        assert_eq!(visible_text(&err, &code, false), "the long text");
        assert!(shown_image_sizes(&err, &code).is_empty());
        let qwen = profile("qwen-code");
        assert!(visible_text(&err, &qwen, false).contains("token=t"), "the whole error, _meta included");
    }

    #[test]
    fn a_value_carried_twice_counts_once() {
        let text = "word ".repeat(5_000);
        let r = json!({"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}});
        let t = twins::find(&r);
        let m = measure(&r, &HostProfile::default_profile(), &t, Tokens::Figures);
        assert_eq!(m.text_bytes, text.len(), "the structured copy is not read twice");
        assert!(m.result_chars < 2 * text.len() && m.result_chars > text.len(), "{}", m.result_chars);
        assert!(!m.tokens_estimated && m.text_tokens > 4_000 && m.text_tokens < 5_200, "{}", m.text_tokens);
    }

    #[test]
    fn images_cost_tokens_by_their_size() {
        assert_eq!(image_tokens(1600, 1200), 58 * 43);
        assert_eq!(image_tokens(768, 576), 28 * 21);
        // A real 1×1 PNG.
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
        let r = json!({"content": [{"type": "image", "data": png, "mimeType": "image/png"}, {"type": "text", "text": "x"}]});
        let m = measure(&r, &profile("claude-code"), &[], Tokens::Against(Some(10_000)));
        assert_eq!((m.images, m.image_tokens, m.text_bytes), (1, 1, 1));
    }

    #[test]
    fn text_is_only_tokenized_when_its_bytes_could_pass_the_budget() {
        let r = json!({"content": [{"type": "text", "text": "word ".repeat(1000)}]});
        let p = profile("claude-code");
        let cheap = measure(&r, &p, &[], Tokens::Against(Some(10_000)));
        assert_eq!((cheap.text_tokens, cheap.tokens_estimated), (1250, true), "an estimate: within the budget either way");
        let counted = measure(&r, &p, &[], Tokens::Against(Some(100)));
        assert!(counted.text_tokens > 900 && counted.text_tokens <= 1001, "{}", counted.text_tokens);
        assert_eq!(counted.text_lines, 1);
    }
}
