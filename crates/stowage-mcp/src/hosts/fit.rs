//! Fitting a rewritten result to its host's profile, after the pipeline and the contract.
//!
//! In order, each step only when the profile asks for it:
//! 1. `resource_link` blocks become text lines for hosts that cannot take them;
//! 2. for hosts that read only `structuredContent`, the references, summaries and notes the
//!    gateway wrote in `content` are put in `structuredContent` too (where the tool's
//!    `outputSchema` allows a key of ours), and a `structuredContent` the contract made only
//!    to hold `assets` goes back to `_meta` (else such a host would see nothing but it);
//! 3. the image budget: previews from the last go first, then inline images are offloaded;
//! 4. bytes, lines and tokens (and an `isError` result's own limit): the largest inline part
//!    the host sees is offloaded in turn, until the result fits. Text keeps a head and a tail
//!    with one line that names its `artifact://` reference and `artifact_read`.
//!
//! References and hints are never cut: what the gateway wrote about an artifact is not a
//! candidate. A value that cannot be stored is cut with a note saying so (never sent whole:
//! the host would cut or reject it anyway, and the reference would go with it).

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json};
use stowage_core::{ArtifactRef, cut_at_char, human_size};

use super::measure::{Measure, measure, structured_only};
use super::{HostProfile, Sees};
use crate::rewrite::{ASSETS_META_KEY, CallContext, Offloader, schema_accepts_key, set_meta};

/// `_meta` key on an image block that is a preview of an offloaded image (its artifact URI).
pub const PREVIEW_META_KEY: &str = "io.stowage/preview";
/// The key of `structuredContent` that carries the gateway's lines for structured-only hosts.
pub const STRUCTURED_NOTES_KEY: &str = "stowage";
/// Parts smaller than this are never worth offloading: the note that replaces them is about
/// as long.
const MIN_CANDIDATE_BYTES: usize = 600;
/// The most offloads one result gets before fitting stops (a result of thousands of small
/// parts is the clamp's business, not ours).
const MAX_STEPS: usize = 32;

/// What fitting did.
#[derive(Debug, Default, Clone)]
pub struct FitReport {
    pub changed: bool,
    /// Artifacts stored to make the result fit.
    pub stored: Vec<ArtifactRef>,
    /// Whether the result still does not fit (nothing left that may be moved).
    pub over: bool,
    pub before: Measure,
    pub after: Measure,
}

/// The budgets of one result under a profile.
#[derive(Debug, Clone, Copy)]
struct Budget {
    result_bytes: usize,
    text_bytes: usize,
    text_lines: usize,
    tokens: u64,
}

impl Budget {
    fn of(profile: &HostProfile, is_error: bool) -> Budget {
        let error = if is_error { profile.max_error_chars } else { None };
        let text = match (profile.max_text_bytes, error) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Budget {
            result_bytes: profile.max_result_bytes.unwrap_or(usize::MAX),
            text_bytes: text.unwrap_or(usize::MAX),
            text_lines: profile.max_text_lines.unwrap_or(usize::MAX),
            tokens: profile.max_tokens.unwrap_or(u64::MAX),
        }
    }

    fn token_budget(&self) -> Option<u64> {
        (self.tokens != u64::MAX).then_some(self.tokens)
    }

    fn fits(&self, m: &Measure) -> bool {
        m.result_bytes <= self.result_bytes
            && m.text_bytes <= self.text_bytes
            && m.text_lines <= self.text_lines
            && m.tokens() <= self.tokens
    }

    /// How many bytes of visible text must go, at least, for `m` to fit (tokens counted as
    /// their bytes share).
    fn excess_text(&self, m: &Measure) -> usize {
        let by_bytes = m.text_bytes.saturating_sub(self.text_bytes);
        let by_tokens = if m.tokens() > self.tokens {
            let per_token = m.text_bytes as f64 / m.text_tokens.max(1) as f64;
            ((m.tokens() - self.tokens) as f64 * per_token).ceil() as usize
        } else {
            0
        };
        let by_result = m.result_bytes.saturating_sub(self.result_bytes);
        by_bytes.max(by_tokens).max(by_result)
    }
}

/// Fits `result` to `profile`: see the module docs. `offloader` stores what is moved out.
pub async fn fit(result: &mut Value, profile: &HostProfile, offloader: &dyn Offloader, ctx: &CallContext) -> FitReport {
    let mut report = FitReport::default();
    if !profile.adapts() {
        return report;
    }
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let budget = Budget::of(profile, is_error);
    report.before = measure(result, profile, budget.token_budget());
    if !profile.resource_links {
        report.changed |= links_as_text(result);
    }
    if profile.sees == Sees::Structured {
        report.changed |= structured_visibility(result, ctx);
    }
    report.changed |= fit_images(result, profile, offloader, ctx, &mut report.stored).await;

    // Measured again only if the steps above changed something.
    let mut m = if report.changed { measure(result, profile, budget.token_budget()) } else { report.before.clone() };
    let mut offloaded: Vec<Moved> = Vec::new();
    let mut steps = 0;
    while !budget.fits(&m) && steps < MAX_STEPS {
        steps += 1;
        let Some(c) = largest_candidate(result, profile, m.result_bytes > budget.result_bytes) else { break };
        let excess = budget.excess_text(&m);
        let lines_over = m.text_lines.saturating_sub(budget.text_lines);
        match c.kind {
            Kind::Text => {
                let text = result.pointer(&c.pointer).and_then(Value::as_str).unwrap_or("").to_owned();
                let stored = store(offloader, ctx, Bytes::from(text.clone().into_bytes()), "text/plain").await;
                if let Ok(r) = &stored {
                    report.stored.push(r.clone());
                }
                let keep = text.len().saturating_sub(excess + NOTE_ROOM);
                let keep_lines = text.lines().count().saturating_sub(lines_over + 2);
                let replaced = head_and_tail(&text, keep, keep_lines, &stored, &profile.name);
                // The same text elsewhere (FastMCP's JSON-text twin of structuredContent) is
                // the same artifact and gets the same stand-in.
                for p in same_text_pointers(result, &text) {
                    if let Some(slot) = result.pointer_mut(&p) {
                        *slot = json!(replaced);
                    }
                }
                offloaded.push(Moved { text, stored });
            }
            Kind::Image => {
                let block = result.pointer(&c.pointer).cloned().unwrap_or(Value::Null);
                let line = offload_image(&block, offloader, ctx, &mut report.stored).await;
                if let Some(slot) = result.pointer_mut(&c.pointer) {
                    *slot = json!({"type": "text", "text": line});
                }
            }
        }
        report.changed = true;
        m = measure(result, profile, budget.token_budget());
    }
    // Still over with nothing left to move: the stand-ins lose their head and tail, keeping
    // only the line that names each reference.
    if !budget.fits(&m) && !offloaded.is_empty() {
        for moved in &offloaded {
            let bare = head_and_tail(&moved.text, 0, 0, &moved.stored, &profile.name);
            for p in same_text_pointers_of_standin(result, &moved.stored) {
                if let Some(slot) = result.pointer_mut(&p) {
                    *slot = json!(bare);
                }
            }
        }
        m = measure(result, profile, budget.token_budget());
    }
    report.over = !budget.fits(&m);
    if report.over {
        tracing::debug!(target: "stowage::hosts", host = %profile.name, tool = %ctx.tool, bytes = m.result_bytes, text_bytes = m.text_bytes,
            tokens = m.tokens(), "the result is still over the host's budget: what is left is references and the tool's small parts");
    }
    report.after = m;
    report
}

/// A text moved out of the result, and where it went.
struct Moved {
    text: String,
    stored: Result<ArtifactRef, String>,
}

/// Room for the note in a text's stand-in.
const NOTE_ROOM: usize = 260;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Image,
}

struct Candidate {
    pointer: String,
    kind: Kind,
}

/// Whether `text` is something the gateway wrote about an artifact (a reference line, a
/// stand-in, a note): never moved or cut.
fn is_reference(text: &str) -> bool {
    text.contains("artifact://") && text.len() < 8 * 1024 || text.starts_with("[withheld")
}

/// The largest inline part the host sees (all parts, when the whole result is over its byte
/// limit).
fn largest_candidate(result: &Value, profile: &HostProfile, all: bool) -> Option<Candidate> {
    let mut best: Option<(usize, Candidate)> = None;
    let mut consider = |size: usize, pointer: String, kind: Kind| {
        if size >= MIN_CANDIDATE_BYTES && best.as_ref().is_none_or(|(s, _)| size > *s) {
            best = Some((size, Candidate { pointer, kind }));
        }
    };
    let structured_only = structured_only(result, profile);
    if (all || !structured_only)
        && let Some(blocks) = result.get("content").and_then(Value::as_array)
    {
        for (i, b) in blocks.iter().enumerate() {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                    if !is_reference(t) {
                        consider(t.len(), format!("/content/{i}/text"), Kind::Text);
                    }
                }
                Some("resource") => {
                    if let Some(t) = b.pointer("/resource/text").and_then(Value::as_str).filter(|t| !is_reference(t)) {
                        consider(t.len(), format!("/content/{i}/resource/text"), Kind::Text);
                    }
                }
                Some("image") => {
                    let n = b.get("data").and_then(Value::as_str).map_or(0, str::len);
                    consider(n, format!("/content/{i}"), Kind::Image);
                }
                _ => {}
            }
        }
    }
    if (all || profile.sees != Sees::Content)
        && let Some(s) = result.get("structuredContent")
    {
        let mut strings = Vec::new();
        string_leaves(s, "/structuredContent".to_owned(), &mut strings);
        for (p, len) in strings {
            consider(len, p, Kind::Text);
        }
    }
    best.map(|(_, c)| c)
}

/// Pointers and lengths of the long strings under `v` that are not the gateway's own.
fn string_leaves(v: &Value, at: String, out: &mut Vec<(String, usize)>) {
    match v {
        Value::String(s) if s.len() >= MIN_CANDIDATE_BYTES && !is_reference(s) => out.push((at, s.len())),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                string_leaves(x, format!("{at}/{i}"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                string_leaves(x, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        _ => {}
    }
}

/// Every pointer in `result` (content texts and structuredContent strings) holding `text`.
fn same_text_pointers(result: &Value, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    find_strings(result, String::new(), &mut |p, s| {
        if s == text {
            out.push(p);
        }
    });
    out
}

/// Every pointer holding a stand-in of `stored` (for making it bare).
fn same_text_pointers_of_standin(result: &Value, stored: &Result<ArtifactRef, String>) -> Vec<String> {
    let marker = match stored {
        Ok(r) => format!("The whole text is {}", r.uri),
        Err(_) => "could not be stored".to_owned(),
    };
    let mut out = Vec::new();
    find_strings(result, String::new(), &mut |p, s| {
        if s.contains(&marker) {
            out.push(p);
        }
    });
    out
}

fn find_strings(v: &Value, at: String, f: &mut dyn FnMut(String, &str)) {
    match v {
        Value::String(s) => f(at, s),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                find_strings(x, format!("{at}/{i}"), f);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                if k == "_meta" {
                    continue;
                }
                find_strings(x, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), f);
            }
        }
        _ => {}
    }
}

async fn store(offloader: &dyn Offloader, ctx: &CallContext, data: Bytes, mime: &str) -> Result<ArtifactRef, String> {
    offloader.store(ctx, data, mime).await.map_err(|e| {
        tracing::warn!(target: "stowage::hosts", tool = %ctx.tool, error = %e, "cannot store a part moved out to fit the host");
        // The model reads the code only: the store's own message may name server paths.
        e.code.to_owned()
    })
}

/// A text's stand-in: at most `keep` bytes and `keep_lines` lines of it (two thirds from the
/// head, the rest from the tail) around one line that names the reference.
fn head_and_tail(text: &str, keep: usize, keep_lines: usize, stored: &Result<ArtifactRef, String>, host: &str) -> String {
    let head_bytes = keep * 2 / 3;
    let tail_bytes = keep - head_bytes;
    let head_lines = keep_lines * 2 / 3;
    let tail_lines = keep_lines - head_lines;
    let mut head = cut_at_char(text, head_bytes);
    if let Some((k, _)) = head.match_indices('\n').nth(head_lines.saturating_sub(1)).filter(|_| head_lines > 0) {
        head = &head[..k];
    } else if head_lines == 0 {
        head = "";
    }
    let mut tail = tail_of(&text[head.len()..], tail_bytes);
    let tail_line_starts: Vec<usize> = tail.match_indices('\n').map(|(k, _)| k + 1).collect();
    if tail_lines == 0 {
        tail = "";
    } else if tail_line_starts.len() >= tail_lines {
        tail = &tail[tail_line_starts[tail_line_starts.len() - tail_lines]..];
    }
    let omitted = text.chars().count() - head.chars().count() - tail.chars().count();
    let note = match stored {
        Ok(r) => format!(
            "[… {omitted} of {} characters left out to fit {host}'s limit. The whole text is {} ({}): artifact_read reads any part of it (offset, length, grep).]",
            text.chars().count(),
            r.uri,
            human_size(r.size_bytes)
        ),
        Err(code) => format!("[… {omitted} characters cut to fit {host}'s limit; they could not be stored ({code}).]"),
    };
    let mut out = String::with_capacity(head.len() + note.len() + tail.len() + 2);
    if !head.is_empty() {
        out.push_str(head);
        out.push('\n');
    }
    out.push_str(&note);
    if !tail.is_empty() {
        out.push('\n');
        out.push_str(tail);
    }
    out
}

/// The last `n` bytes of `s` or fewer, starting at a character boundary.
fn tail_of(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Replaces `resource_link` blocks with text lines, for hosts that cannot take them. A link
/// whose URI the line before already names goes without a trace.
fn links_as_text(result: &mut Value) -> bool {
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
        let named = out.last().and_then(|p| p.get("text")).and_then(Value::as_str).is_some_and(|t| !uri.is_empty() && t.contains(uri));
        if named {
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

/// For hosts that show the model only `structuredContent`: see the module docs (step 2).
fn structured_visibility(result: &mut Value, ctx: &CallContext) -> bool {
    let schema = ctx.output_schema.as_deref().map(crate::output_schema::OutputSchema::schema);
    // A structuredContent the contract made only for `assets` (the tool sent none, and has no
    // schema): such a host would see the assets and lose the tool's text.
    let contract_made = schema.is_none()
        && result.get("structuredContent").and_then(Value::as_object).is_some_and(|o| {
            o.len() == 1 && o.get("assets").and_then(Value::as_array).is_some_and(|a| a.iter().all(|x| x.get("artifactUri").is_some()))
        });
    if contract_made {
        let assets =
            result.as_object_mut().and_then(|o| o.remove("structuredContent")).and_then(|mut s| s.get_mut("assets").map(Value::take));
        if let Some(a) = assets {
            set_meta(result, ASSETS_META_KEY, a);
        }
        return true;
    }
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

/// The image budget (count and tokens): previews from the last go first, then the largest
/// inline images are offloaded.
async fn fit_images(
    result: &mut Value,
    profile: &HostProfile,
    offloader: &dyn Offloader,
    ctx: &CallContext,
    stored: &mut Vec<ArtifactRef>,
) -> bool {
    let max_images = profile.max_images.unwrap_or(usize::MAX);
    let max_tokens = profile.max_image_tokens.unwrap_or(u64::MAX);
    let mut changed = false;
    for _ in 0..MAX_STEPS {
        let sizes = super::measure::image_sizes(result);
        let tokens: u64 = sizes.iter().map(|&(w, h)| super::measure::image_tokens(w, h)).sum();
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
        let line = offload_image(&block, offloader, ctx, stored).await;
        if let Some(b) = result.get_mut("content").and_then(Value::as_array_mut).and_then(|b| b.get_mut(k)) {
            *b = json!({"type": "text", "text": line});
        }
        changed = true;
    }
    changed
}

/// The artifact an image block previews, when it is one of the gateway's previews.
fn preview_of(block: &Value) -> Option<&str> {
    block.get("_meta")?.get(PREVIEW_META_KEY)?.as_str()
}

/// Stores an inline image block's bytes; the line that stands for it.
async fn offload_image(block: &Value, offloader: &dyn Offloader, ctx: &CallContext, stored: &mut Vec<ArtifactRef>) -> String {
    let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("image/png").to_owned();
    if let Some(uri) = preview_of(block) {
        return format!("(a preview of {uri} was left out to fit this host's image budget; artifact_read on it returns the image)");
    }
    let data = block.get("data").and_then(Value::as_str).unwrap_or("");
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
        return format!("[withheld: an image ({mime}) whose base64 does not decode, left out to fit this host's limit]");
    };
    let size = bytes.len() as u64;
    match store(offloader, ctx, Bytes::from(bytes), &mime).await {
        Ok(r) => {
            let line = format!(
                "{mime} image ({}) stored as {} to fit this host's limit; artifact_read returns it fitted, or a region of it",
                human_size(size),
                r.uri
            );
            stored.push(r);
            line
        }
        Err(code) => format!(
            "[withheld: an image ({mime}, {}) left out to fit this host's limit; it could not be stored ({code})]",
            human_size(size)
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::hosts::builtin;
    use crate::rewrite::{OffloadError, Offloaded};

    /// Keeps what it is given in memory, like a store; or, failing, refuses it like a full
    /// disk would.
    #[derive(Default)]
    struct Keep(Arc<stowage_transform::testing::MemorySink>, bool);

    #[async_trait::async_trait]
    impl Offloader for Keep {
        async fn offload(&self, _: &CallContext, _: String) -> Result<Offloaded, OffloadError> {
            unreachable!("fitting stores parts, it does not offload results")
        }
        async fn store(&self, ctx: &CallContext, data: Bytes, mime: &str) -> Result<ArtifactRef, OffloadError> {
            if self.1 {
                return Err(OffloadError { code: "artifact_storage_failed", message: "disk full at /var/secret/path".into() });
            }
            use stowage_core::ArtifactSink as _;
            let opts = stowage_core::PutOptions::scoped(ctx.scope.clone()).mime(mime);
            Ok(self.0.put_bytes(data, opts).await.expect("memory takes it"))
        }
    }

    fn ctx() -> CallContext {
        CallContext { tool: "logs".into(), upstream: "u".into(), scope: stowage_core::ArtifactScope::session("s"), output_schema: None }
    }

    fn profile(name: &str) -> HostProfile {
        builtin().into_iter().find(|p| p.name == name).unwrap()
    }

    fn log(lines: usize) -> String {
        (0..lines)
            .map(|i| format!("2026-11-23T10:{:02}:{:02}Z INFO worker {i} handled request {i} in 12ms", i / 60 % 60, i % 60))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test]
    async fn a_long_log_fits_codex_with_head_tail_and_a_reference() {
        let text = log(250); // ~17 KB
        assert!(text.len() > 16_000);
        let mut r = json!({"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}});
        let keep = Keep::default();
        let p = profile("codex");
        let rep = fit(&mut r, &p, &keep, &ctx()).await;
        assert!(rep.changed && !rep.over, "{rep:?}");
        assert!(rep.after.text_bytes <= 10_000 && rep.after.text_lines <= 250, "{:?}", rep.after);
        let s = r["structuredContent"]["result"].as_str().unwrap();
        assert!(s.starts_with("2026-11-23T10:00:00Z INFO worker 0"), "the head stays");
        assert!(s.ends_with("handled request 249 in 12ms"), "the tail stays");
        assert!(s.contains("artifact://") && s.contains("artifact_read"), "{s}");
        // The twin in content is the same artifact and the same stand-in; stored once.
        assert_eq!(r["content"][0]["text"], r["structuredContent"]["result"]);
        let kept = keep.0.items();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept.values().next().unwrap().1, Bytes::from(text.into_bytes()), "the stored text is the original");
    }

    #[tokio::test]
    async fn claude_code_error_text_fits_its_error_limit_and_the_default_profile_is_untouched() {
        let text = "Traceback: ".to_owned() + &"frame in module x\n".repeat(2000);
        let mut r = json!({"content": [{"type": "text", "text": text}], "isError": true});
        let keep = Keep::default();
        let before = r.clone();
        let rep = fit(&mut r, &HostProfile::default_profile(), &keep, &ctx()).await;
        assert!(!rep.changed);
        assert_eq!(r, before);
        let rep = fit(&mut r, &profile("claude-code"), &keep, &ctx()).await;
        assert!(rep.after.text_bytes <= 10_000, "{:?}", rep.after);
        assert_eq!(r["isError"], true);
        assert!(r["content"][0]["text"].as_str().unwrap().starts_with("Traceback: frame"));
    }

    #[tokio::test]
    async fn a_store_failure_cuts_with_a_note_and_names_no_path() {
        let text = log(400);
        let mut r = json!({"content": [{"type": "text", "text": text}]});
        let full = Keep(Default::default(), true);
        let rep = fit(&mut r, &profile("codex"), &full, &ctx()).await;
        assert!(!rep.over);
        let t = r["content"][0]["text"].as_str().unwrap();
        assert!(t.contains("could not be stored (artifact_storage_failed)"), "{t}");
        assert!(!t.contains("/var/secret"), "{t}");
    }

    #[test]
    fn links_become_lines_for_hosts_that_cannot_take_them() {
        let mut r = json!({"content": [
            {"type": "text", "text": "PNG image stored as artifact://a_1 Download: http://x/a?t=1"},
            {"type": "resource_link", "uri": "http://x/a?t=1", "name": "a.png"},
            {"type": "resource_link", "uri": "file:///docs/readme.md", "name": "readme.md", "mimeType": "text/markdown", "description": "The readme"},
        ]});
        assert!(links_as_text(&mut r));
        let blocks = r["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 2, "the link the line names goes; the other becomes a line: {r}");
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
        // The contract's own structuredContent (only assets) goes back to _meta.
        let mut r3 =
            json!({"content": [{"type": "text", "text": "x"}], "structuredContent": {"assets": [{"artifactUri": "artifact://a"}]}});
        assert!(structured_visibility(&mut r3, &c));
        assert!(r3.get("structuredContent").is_none());
        assert_eq!(r3["_meta"][ASSETS_META_KEY][0]["artifactUri"], "artifact://a");
    }
}
