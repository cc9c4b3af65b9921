//! Step 5, the final limit: the answer as it will be sent, the gateway's own lines, links,
//! injections and auto-read resources included, is brought within one budget: the host's
//! (bytes, lines, tokens with images counted, an error's characters) and the observation limit
//! (`transform.clamp.max_observation_chars`), a value carried twice counted once.
//!
//! In order, stopping as soon as the answer fits:
//! 1. the largest part the budget counts is moved to the store, in turn: a text keeps its head
//!    and its tail around one line that names its `artifact://` reference and `artifact_read`
//!    (a text carried twice gets the same stand-in in both places); an image becomes a line;
//! 2. links from the last back are left out (their lines still name every artifact, and one
//!    line says `artifact_url` gives a link);
//! 3. lines from the last back give way to one line naming their `artifact://` URIs;
//! 4. the stand-ins lose their head and tail;
//! 5. the whole answer is stored and one line with a link stands for it: an answer made of
//!    thousands of small parts, where no single part is worth moving.
//!
//! References are never cut: what the gateway wrote about an artifact is not a candidate in
//! steps 1 and 4, and steps 2 and 3 keep every `artifact://` URI named. A value that cannot be
//! stored is cut with a note saying so (never sent whole: the host would cut or reject it, and
//! the reference would go with it), naming the store's code only, never its message (which may
//! name server paths).

use bytes::Bytes;
use serde_json::{Value, json};
use stowage_core::{ArtifactRef, human_size};
use stowage_transform::Pipeline;
use stowage_transform::twins::Twin;

use super::host::{is_reference, offload_image};
use super::measure::{Measure, Tokens, measure, structured_only};
use super::offload::{CallContext, store};
use crate::hosts::HostProfile;

/// Parts smaller than this are never worth offloading: the note that replaces them is about
/// as long.
const MIN_CANDIDATE_BYTES: usize = 600;
/// The most parts one answer moves out before fitting goes on to its references.
const MAX_STEPS: usize = 32;
/// Room for the note in a text's stand-in.
const NOTE_ROOM: usize = 260;

/// The budget an answer is fitted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    pub result_bytes: usize,
    /// The observation limit, in characters of the whole answer.
    pub result_chars: usize,
    pub text_bytes: usize,
    pub text_lines: usize,
    pub tokens: u64,
}

impl Budget {
    /// `profile`'s budget (its error limit for an `isError` answer) within the observation
    /// limit `chars`.
    pub(crate) fn of(profile: &HostProfile, is_error: bool, chars: Option<usize>) -> Budget {
        let error = if is_error { profile.max_error_chars } else { None };
        let text = match (profile.max_text_bytes, error) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Budget {
            result_bytes: profile.max_result_bytes.unwrap_or(usize::MAX),
            result_chars: chars.unwrap_or(usize::MAX),
            text_bytes: text.unwrap_or(usize::MAX),
            text_lines: profile.max_text_lines.unwrap_or(usize::MAX),
            tokens: profile.max_tokens.unwrap_or(u64::MAX),
        }
    }

    pub(crate) fn token_budget(&self) -> Option<u64> {
        (self.tokens != u64::MAX).then_some(self.tokens)
    }

    pub(crate) fn fits(&self, m: &Measure) -> bool {
        m.result_bytes <= self.result_bytes
            && m.result_chars <= self.result_chars
            && m.text_bytes <= self.text_bytes
            && m.text_lines <= self.text_lines
            && m.tokens() <= self.tokens
    }

    /// Whether the whole answer (not only what the model reads) is over: every part is then a
    /// candidate.
    fn whole_over(&self, m: &Measure) -> bool {
        m.result_bytes > self.result_bytes || m.result_chars > self.result_chars
    }

    /// How many bytes of visible text must go, at least, for `m` to fit (tokens counted as
    /// their bytes' share).
    fn excess(&self, m: &Measure) -> usize {
        let by_bytes = m.text_bytes.saturating_sub(self.text_bytes);
        let by_tokens = if m.tokens() > self.tokens {
            let per_token = m.text_bytes as f64 / m.text_tokens.max(1) as f64;
            ((m.tokens() - self.tokens) as f64 * per_token).ceil() as usize
        } else {
            0
        };
        let by_result = m.result_bytes.saturating_sub(self.result_bytes).max(m.result_chars.saturating_sub(self.result_chars));
        by_bytes.max(by_tokens).max(by_result)
    }
}

/// What fitting did.
#[derive(Debug, Default, Clone)]
pub(crate) struct FitReport {
    pub changed: bool,
    /// Artifacts stored to make the answer fit.
    pub stored: Vec<ArtifactRef>,
    /// The answer is still over (nothing left that may be moved).
    pub over: bool,
    /// The answer was stored whole (step 5).
    pub stored_whole: bool,
    pub before: Measure,
    /// The last measurement, of the answer as it now is.
    pub after: Measure,
}

/// Fits `result` to `budget`: see the module docs. `twins` are the values it carries twice.
pub(crate) async fn fit(
    result: &mut Value,
    profile: &HostProfile,
    budget: Budget,
    twins: &[Twin],
    pipeline: &Pipeline,
    ctx: &CallContext,
) -> FitReport {
    // Exact figures first: an answer that fits (most do) is measured this once.
    let mut report = FitReport { before: measure(result, profile, twins, Tokens::Figures), ..Default::default() };
    let tokens = Tokens::Against(budget.token_budget());
    let mut m = report.before.clone();
    let mut moved: Vec<Moved> = Vec::new();
    let mut steps = 0;
    while !budget.fits(&m) && steps < MAX_STEPS {
        steps += 1;
        let Some(c) = largest_candidate(result, profile, twins, budget.whole_over(&m)) else { break };
        let excess = budget.excess(&m);
        let lines_over = m.text_lines.saturating_sub(budget.text_lines);
        match c.kind {
            Kind::Text => {
                let text = result.pointer(&c.pointer).and_then(Value::as_str).unwrap_or("").to_owned();
                let stored = store_text(pipeline, ctx, &text).await;
                if let Ok(r) = &stored {
                    report.stored.push(r.clone());
                }
                let keep = text.len().saturating_sub(excess + NOTE_ROOM);
                let keep_lines = text.lines().count().saturating_sub(lines_over + 2);
                let replaced = stand_in(&text, keep, keep_lines, &stored, &profile.name);
                // The same text elsewhere (FastMCP's twin) is the same artifact and gets the
                // same stand-in.
                for p in pointers_holding(result, |s| s == text) {
                    if let Some(slot) = result.pointer_mut(&p) {
                        *slot = json!(replaced);
                    }
                }
                moved.push(Moved { text, stored });
            }
            Kind::Image => {
                let block = result.pointer(&c.pointer).cloned().unwrap_or(Value::Null);
                let line = offload_image(&block, pipeline, ctx, &mut report.stored).await;
                if let Some(slot) = result.pointer_mut(&c.pointer) {
                    *slot = json!({"type": "text", "text": line});
                }
            }
        }
        sync_json_twins(result, twins);
        report.changed = true;
        m = measure(result, profile, twins, tokens);
    }
    if !budget.fits(&m) && fold_references(result, &budget, profile, twins, tokens) {
        report.changed = true;
        m = measure(result, profile, twins, tokens);
    }
    // Still over with nothing left to move: the stand-ins lose their head and tail, keeping
    // only the line that names each reference.
    if !budget.fits(&m) && !moved.is_empty() {
        for mv in &moved {
            let bare = stand_in(&mv.text, 0, 0, &mv.stored, &profile.name);
            let marker = match &mv.stored {
                Ok(r) => format!("The whole text is {}", r.uri),
                Err(_) => "could not be stored".to_owned(),
            };
            for p in pointers_holding(result, |s| s.contains(&marker)) {
                if let Some(slot) = result.pointer_mut(&p) {
                    *slot = json!(bare);
                }
            }
        }
        sync_json_twins(result, twins);
        m = measure(result, profile, twins, tokens);
    }
    if !budget.fits(&m) && budget.whole_over(&m) && store_whole(result, pipeline, ctx, &mut report).await {
        m = measure(result, profile, &[], tokens);
    }
    if report.changed {
        // Measured again, exactly, after the last change: these are the answer's figures.
        m = measure(result, profile, if report.stored_whole { &[] } else { twins }, Tokens::Figures);
    }
    report.over = !budget.fits(&m);
    if report.over {
        tracing::debug!(target: "stowage::hosts", host = %profile.name, tool = %ctx.tool, bytes = m.result_bytes, text_bytes = m.text_bytes,
            tokens = m.tokens(), "the answer is still over its budget: what is left is references and the tool's small parts");
    }
    report.after = m;
    report
}

/// A text moved out of the answer, and where it went.
struct Moved {
    text: String,
    stored: Result<ArtifactRef, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Image,
}

struct Candidate {
    pointer: String,
    kind: Kind,
}

/// The largest part the budget counts (every part, when the whole answer is over its byte or
/// character limit). A JSON text that repeats structuredContent is not one: its value is, in
/// structuredContent, and the text follows it ([`sync_json_twins`]).
fn largest_candidate(result: &Value, profile: &HostProfile, twins: &[Twin], all: bool) -> Option<Candidate> {
    let mut best: Option<(usize, Candidate)> = None;
    let mut consider = |size: usize, pointer: String, kind: Kind| {
        if size >= MIN_CANDIDATE_BYTES && best.as_ref().is_none_or(|(s, _)| size > *s) {
            best = Some((size, Candidate { pointer, kind }));
        }
    };
    let structured_only = structured_only(result, profile);
    let json_twin = |i: usize| twins.iter().any(|t| t.block == i && !t.string);
    if (all || !structured_only)
        && let Some(blocks) = result.get("content").and_then(Value::as_array)
    {
        for (i, b) in blocks.iter().enumerate() {
            match b.get("type").and_then(Value::as_str) {
                Some("text") if !json_twin(i) => {
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
    let sees_structured = super::measure::shown(result, profile).structured || twins.iter().any(|t| !t.string);
    if (all || sees_structured)
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
                string_leaves(x, format!("{at}/{}", escape(k)), out);
            }
        }
        _ => {}
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Every pointer in `result` (outside `_meta`) holding a string `matches` accepts.
fn pointers_holding(result: &Value, matches: impl Fn(&str) -> bool) -> Vec<String> {
    fn walk(v: &Value, at: String, matches: &dyn Fn(&str) -> bool, out: &mut Vec<String>) {
        match v {
            Value::String(s) if matches(s) => out.push(at),
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, format!("{at}/{i}"), matches, out);
                }
            }
            Value::Object(o) => {
                for (k, x) in o.iter().filter(|(k, _)| *k != "_meta") {
                    walk(x, format!("{at}/{}", escape(k)), matches, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(result, String::new(), &matches, &mut out);
    out
}

/// Writes each JSON text that repeats structuredContent again from what it now holds: the two
/// copies stay one value.
pub(crate) fn sync_json_twins(result: &mut Value, twins: &[Twin]) {
    for t in twins.iter().filter(|t| !t.string) {
        let Some(text) = result.pointer(t.source).map(|v| serde_json::to_string(v).expect("a Value always serialises")) else { continue };
        if let Some(slot) = result.pointer_mut(&t.text_pointer()) {
            *slot = Value::String(text);
        }
    }
}

async fn store_text(pipeline: &Pipeline, ctx: &CallContext, text: &str) -> Result<ArtifactRef, String> {
    store(pipeline, ctx, Bytes::from(text.to_owned().into_bytes()), "text/plain; charset=utf-8").await.map_err(|e| {
        tracing::warn!(target: "stowage::hosts", tool = %ctx.tool, error = %e, "cannot store a part moved out to fit the budget");
        e.code.to_owned()
    })
}

/// A text's stand-in: at most `keep` bytes and `keep_lines` lines of it (two thirds from the
/// head, the rest from the tail) around one line that names the reference.
fn stand_in(text: &str, keep: usize, keep_lines: usize, stored: &Result<ArtifactRef, String>, host: &str) -> String {
    let head_bytes = keep * 2 / 3;
    let (mut head, mut tail) = stowage_core::head_and_tail(text, head_bytes, keep - head_bytes);
    if head.len() == text.len() {
        // Within the bytes; the lines decide.
        tail = "";
    }
    let head_lines = keep_lines * 2 / 3;
    let tail_lines = keep_lines - head_lines;
    head = match head.match_indices('\n').nth(head_lines.saturating_sub(1)) {
        _ if head_lines == 0 => "",
        Some((k, _)) => &head[..k],
        None => head,
    };
    let starts: Vec<usize> = tail.match_indices('\n').map(|(k, _)| k + 1).collect();
    if tail_lines == 0 {
        tail = "";
    } else if starts.len() >= tail_lines {
        tail = &tail[starts[starts.len() - tail_lines]..];
    }
    let total = text.chars().count();
    let omitted = total - head.chars().count() - tail.chars().count();
    let note = match stored {
        Ok(r) => format!(
            "[… {omitted} of {total} characters left out to fit {host}'s limit. The whole text is {} ({}): artifact_read reads any part of it (offset, length, grep).]",
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

/// Steps 2 and 3 of the module docs. Whether anything changed.
fn fold_references(result: &mut Value, budget: &Budget, profile: &HostProfile, twins: &[Twin], tokens: Tokens) -> bool {
    let permanent: Vec<(String, String)> = super::contract::assets_of(result);
    if permanent.is_empty() {
        return false;
    }
    let over = |r: &Value| !budget.fits(&measure(r, profile, twins, tokens));
    let mut changed = false;
    // 2. Links from the last back.
    let mut dropped = false;
    while over(result) {
        let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) else { break };
        let Some(k) = blocks.iter().rposition(|b| {
            b["type"] == "resource_link" && b["uri"].as_str().is_some_and(|u| permanent.iter().any(|(url, p)| url == u || p == u))
        }) else {
            break;
        };
        blocks.remove(k);
        if !dropped {
            blocks.push(json!({"type": "text", "text": LINKS_LEFT_OUT}));
            dropped = true;
        }
        changed = true;
    }
    // 3. Lines from the last back give way to one line of their artifact:// URIs.
    let uris: Vec<&String> = permanent.iter().map(|(_, p)| p).collect();
    let mut folded: Vec<String> = Vec::new();
    while over(result) {
        let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) else { break };
        if !folded.is_empty() {
            blocks.pop(); // the previous closing line
        }
        let names = |b: &Value| -> Option<String> {
            let t = b["text"].as_str().filter(|t| b["type"] == "text" && !t.contains('\n') && *t != LINKS_LEFT_OUT)?;
            uris.iter().find(|u| t.contains(u.as_str())).map(|u| (*u).clone())
        };
        let Some((k, uri)) = blocks.iter().enumerate().rev().find_map(|(k, b)| names(b).map(|u| (k, u))) else {
            if !folded.is_empty() {
                blocks.push(folded_line(&folded));
            }
            break;
        };
        blocks.remove(k);
        folded.insert(0, uri);
        blocks.push(folded_line(&folded));
        changed = true;
    }
    changed
}

/// Said once when links were left out.
pub(crate) const LINKS_LEFT_OUT: &str =
    "Download links were left out to keep this result within its size limit; artifact_url gives one for any artifact:// reference here.";

/// The one line that names folded artifacts.
fn folded_line(folded: &[String]) -> Value {
    json!({"type": "text", "text": format!(
        "{} more artifact{}, named here only to keep this result within its size limit: {}; artifact_read, artifact_query and artifact_url take any of them",
        folded.len(),
        if folded.len() == 1 { "" } else { "s" },
        folded.join(", ")
    )})
}

/// Step 5: the whole answer goes to the store as JSON and one line with a link stands for it
/// (`isError`, the `_meta` assets and, under an output schema, the typed structuredContent
/// stay). Whether it was stored.
async fn store_whole(result: &mut Value, pipeline: &Pipeline, ctx: &CallContext, report: &mut FitReport) -> bool {
    let mut whole = result.clone();
    if let Some(m) = whole.get_mut("_meta").and_then(Value::as_object_mut) {
        m.retain(|k, _| !k.starts_with("io.stowage/"));
    }
    let text = serde_json::to_string(&whole).expect("a Value always serialises");
    let chars = text.chars().count();
    let r = match store(pipeline, ctx, Bytes::from(text.into_bytes()), "application/json").await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(target: "stowage::hosts", tool = %ctx.tool, error = %e, "cannot store an answer over its limit whole");
            return false;
        }
    };
    let line = format!(
        "Tool result of {chars} characters ({}) stored whole as {}: too many parts to show within this answer's limit. artifact_query selects parts of it (JMESPath on the result: content[*].text), artifact_read reads it as text.",
        human_size(r.size_bytes),
        r.uri
    );
    let mut out = serde_json::Map::new();
    out.insert("content".into(), json!([{"type": "text", "text": line}, stowage_transform::stub::resource_link_block(&r)]));
    if let Some(obj) = result.as_object_mut() {
        for key in ["isError", "_meta"] {
            if let Some(v) = obj.remove(key) {
                out.insert(key.into(), v);
            }
        }
        if ctx.output_schema.is_some()
            && let Some(sc) = obj.remove("structuredContent")
        {
            out.insert("structuredContent".into(), sc);
        }
    }
    *result = Value::Object(out);
    report.stored.push(r);
    report.stored_whole = true;
    report.changed = true;
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use stowage_transform::testing::MemorySink;
    use stowage_transform::{TransformConfig, twins};

    use super::*;
    use crate::hosts::builtin;

    fn ctx() -> CallContext {
        CallContext { tool: "logs".into(), upstream: "u".into(), scope: stowage_core::ArtifactScope::session("s"), output_schema: None }
    }

    fn profile(name: &str) -> HostProfile {
        builtin().into_iter().find(|p| p.name == name).unwrap()
    }

    fn pipeline(sink: Arc<dyn stowage_core::ArtifactSink>) -> Pipeline {
        Pipeline::new(TransformConfig::default(), sink)
    }

    fn log(lines: usize) -> String {
        (0..lines)
            .map(|i| format!("2026-11-23T10:{:02}:{:02}Z INFO worker {i} handled request {i} in 12ms", i / 60 % 60, i % 60))
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn fit_for(r: &mut Value, p: &HostProfile, sink: Arc<dyn stowage_core::ArtifactSink>) -> FitReport {
        let t = twins::find(r);
        let is_error = r.get("isError") == Some(&json!(true));
        fit(r, p, Budget::of(p, is_error, Some(50_000)), &t, &pipeline(sink), &ctx()).await
    }

    #[tokio::test]
    async fn a_long_log_fits_codex_with_head_tail_and_a_reference() {
        let text = log(250); // ~17 KB
        assert!(text.len() > 16_000);
        let mut r = json!({"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}});
        let sink = MemorySink::new();
        let rep = fit_for(&mut r, &profile("codex"), sink.clone()).await;
        assert!(rep.changed && !rep.over, "{rep:?}");
        assert!(rep.after.text_bytes <= 10_000 && rep.after.text_lines <= 250, "{:?}", rep.after);
        let s = r["structuredContent"]["result"].as_str().unwrap();
        assert!(s.starts_with("2026-11-23T10:00:00Z INFO worker 0"), "the head stays");
        assert!(s.ends_with("handled request 249 in 12ms"), "the tail stays");
        assert!(s.contains("artifact://") && s.contains("artifact_read"), "{s}");
        // The twin in content is the same artifact and the same stand-in; stored once.
        assert_eq!(r["content"][0]["text"], r["structuredContent"]["result"]);
        let kept = sink.items();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept.values().next().unwrap().1, Bytes::from(text.into_bytes()), "the stored text is the original");
    }

    #[tokio::test]
    async fn a_text_carried_twice_is_measured_once() {
        // 30 KB of prose twice is 60 KB of JSON: within the 50,000-character limit once counted.
        let text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(520);
        let mut r = json!({"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}});
        let before = r.clone();
        let rep = fit_for(&mut r, &HostProfile::default_profile(), MemorySink::new()).await;
        assert!(!rep.changed, "{:?}", rep.after);
        assert_eq!(r, before);
    }

    #[tokio::test]
    async fn claude_code_error_text_fits_its_error_limit() {
        let text = "Traceback: ".to_owned() + &"frame in module x\n".repeat(2000) + "ValueError: the real cause";
        let mut r = json!({"content": [{"type": "text", "text": text}], "isError": true});
        let rep = fit_for(&mut r, &profile("claude-code"), MemorySink::new()).await;
        assert!(rep.after.text_bytes <= 10_000, "{:?}", rep.after);
        assert_eq!(r["isError"], true);
        let t = r["content"][0]["text"].as_str().unwrap();
        assert!(t.starts_with("Traceback: frame") && t.ends_with("ValueError: the real cause"), "the exception at the end stays: {t}");
    }

    #[tokio::test]
    async fn a_store_failure_cuts_with_a_note_and_names_no_path() {
        let text = log(400);
        let mut r = json!({"content": [{"type": "text", "text": text}]});
        let rep = fit_for(&mut r, &profile("codex"), Arc::new(stowage_transform::testing::FailingSink)).await;
        assert!(!rep.over);
        let t = r["content"][0]["text"].as_str().unwrap();
        assert!(t.contains("could not be stored (artifact_storage_failed)"), "{t}");
    }

    #[tokio::test]
    async fn thousands_of_small_parts_are_stored_whole() {
        let parts: Vec<Value> = (0..3000).map(|i| json!({"type": "text", "text": format!("row {i}: ok")})).collect();
        let mut r = json!({"content": parts});
        let sink = MemorySink::new();
        let rep = fit_for(&mut r, &HostProfile::default_profile(), sink.clone()).await;
        assert!(rep.stored_whole && !rep.over, "{:?}", rep.after);
        let line = r["content"][0]["text"].as_str().unwrap();
        assert!(line.contains("stored whole as artifact://") && line.contains("artifact_query"), "{line}");
        let stored: Value = serde_json::from_slice(&sink.items().values().next().unwrap().1).unwrap();
        assert_eq!(stored["content"].as_array().unwrap().len(), 3000);
    }
}
