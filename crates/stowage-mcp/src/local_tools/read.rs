//! `artifact_read`: a window of a text artifact, or the lines matching a regex, so a model can
//! read past the preview the size net left it without loading the whole text.
//!
//! Offsets and lengths count characters (Unicode scalar values), not bytes: a window never
//! starts or ends inside a UTF-8 character, and the numbers are the ones the model sees in the
//! text. Every answer is a page sized to the caller's host ([`ReadHints`]); a cut answer says
//! so and gives `nextOffset`, the first character it did not give, where the next call starts. With `grep`, the matching lines come
//! back with their line numbers and the character offset where each starts (to read around a
//! match with a window); the regex is the `regex` crate's (linear time, so no pattern can hang
//! the gateway).

use std::sync::Arc;

use bytes::Bytes;
use regex::Regex;
use serde_json::{Map, Value, json};
use stowage_core::ArtifactScope;
use stowage_store::ArtifactStore;

use super::grep::grep_argument;
use super::{CPU_POOL_BYTES, READ_BUDGET_BYTES, ReadHints, ToolError, as_str, cut_at_char, id_argument, meta_of, text_of, usize_argument};

/// The tool's name in `tools/list`. It is not namespaced: it belongs to the gateway.
pub(crate) const ARTIFACT_READ_TOOL: &str = "artifact_read";

/// A matching line longer than this many bytes is cut (minified files are one long line).
const MAX_MATCH_LINE_BYTES: usize = 400;

pub(super) fn def() -> Value {
    json!({
        "name": ARTIFACT_READ_TOOL,
        "title": "Read an artifact: text, an image, or PDF pages",
        "description": format!("Reads an artifact (an id or artifact:// URI from an earlier tool result) past its preview. Text: a window of characters from `offset`, or with `grep` the lines matching a regex, with line numbers (with `count: true`, only how many match); a page of at most {READ_BUDGET_BYTES} bytes per call (less when your host takes less), and when cut, call again with offset = nextOffset. Image: the image itself, fitted to `max_edge`, or a `region` of the original at native resolution (to zoom into part of a large screenshot). PDF: the text of `pages` (\"2\", \"1-3\", \"4-\") from `offset` characters into the first of them, or with `grep` the matching lines and their pages. Audio and other binaries: use artifact_url."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "artifact id or artifact:// URI"},
                "offset": {"type": "integer", "minimum": 0, "description": "character offset to start at (default 0); for a PDF, into the first page asked for"},
                "length": {"type": "integer", "minimum": 1, "description": format!("characters to read (default and most: what fits {READ_BUDGET_BYTES} bytes); with grep, how far to search")},
                "grep": {"type": "string", "description": "a regular expression (Rust regex syntax; (?i) for case-insensitive): return the matching lines instead of a window (text and PDFs)"},
                "count": {"type": "boolean", "description": "with grep: answer only how many lines match (per page for a PDF), not the lines"},
                "max_edge": {"type": "integer", "minimum": 16, "maximum": 8192, "description": "images: the longest edge of the image returned, in pixels (default: what the host takes)"},
                "region": {
                    "type": "object",
                    "description": "images: the part of the original to return at native resolution, in pixels from the top left",
                    "properties": {"x": {"type": "integer", "minimum": 0}, "y": {"type": "integer", "minimum": 0}, "width": {"type": "integer", "minimum": 1}, "height": {"type": "integer", "minimum": 1}},
                    "required": ["x", "y", "width", "height"],
                },
                "pages": {"type": "string", "description": "PDFs: the pages to read, from 1: \"2\", \"1-3\", \"1,4-5\" (default: from page 1, as much as fits)"},
            },
            "required": ["id"],
        },
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
    })
}

/// What was asked, validated.
struct Request {
    offset: usize,
    length: Option<usize>,
    grep: Option<Regex>,
    count: bool,
}

fn parse(arguments: &Value) -> Result<Request, ToolError> {
    let offset = usize_argument(ARTIFACT_READ_TOOL, arguments, "offset")?.unwrap_or(0);
    let length = usize_argument(ARTIFACT_READ_TOOL, arguments, "length")?;
    if length == Some(0) {
        return Err(ToolError::bad_request("artifact_read: \"length\" must be at least 1 (leave it out to read as much as fits)"));
    }
    let grep = grep_argument(arguments)?;
    let count = super::grep::count_argument(arguments, grep.is_some())?;
    Ok(Request { offset, length, grep, count })
}

pub(super) async fn call(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    arguments: &Value,
    hints: ReadHints,
) -> Result<Value, ToolError> {
    let id = id_argument(ARTIFACT_READ_TOOL, arguments)?;
    // One lookup decides what the artifact is, and the text path reads with it.
    let meta = meta_of(store, scope, &id).await?;
    if let Some(media) = super::media::media_of(&meta) {
        return super::media::read(store, scope, media, meta, arguments, hints).await;
    }
    // Arguments first: a bad regex is an error whatever the id.
    let request = parse(arguments)?;
    super::media::refuse_other(arguments, &["offset", "length", "grep", "count"], "text")?;
    let (meta, bytes) = text_of(store, scope, ARTIFACT_READ_TOOL, meta).await?;
    let mut head = Map::new();
    head.insert("id".into(), meta.id.as_str().into());
    if let Some(m) = &meta.mime_type {
        head.insert("mimeType".into(), m.clone().into());
    }
    let big = bytes.len() >= CPU_POOL_BYTES;
    let answer = move || answer(&bytes, request, head, &hints);
    if big { crate::cpu_pool::run(answer).await } else { answer() }
}

fn answer(bytes: &Bytes, request: Request, mut out: Map<String, Value>, hints: &ReadHints) -> Result<Value, ToolError> {
    let text = as_str(bytes);
    let id = out["id"].as_str().unwrap_or_default().to_owned();
    let total = text.chars().count();
    if request.offset > total {
        return Err(ToolError::bad_request(format!(
            "artifact_read: offset {} is past the end: artifact {id} has {total} characters (offsets 0 to {total})",
            request.offset
        )));
    }
    let start = byte_of_char(text, 0, request.offset);
    let end = match request.length {
        Some(n) => byte_of_char(text, start, n),
        None => text.len(),
    };
    let start_line = memchr::memchr_iter(b'\n', &bytes[..start]).count() + 1;
    out.insert("totalChars".into(), total.into());
    out.insert("offset".into(), request.offset.into());
    Ok(match &request.grep {
        None => window(&text[start..end], request.offset, total, start_line, out, hints),
        Some(re) if request.count => count(&text[start..end], re, request.offset, out, hints),
        Some(re) => grep(&text[start..end], re, request.offset, start_line, out, hints),
    })
}

/// The byte index `chars` characters after byte `from` (or the end). Whole blocks are
/// skipped with the standard library's vectorised character count, and only the block the
/// position falls in is walked character by character: an offset 2 MB into an artifact costs
/// a count, not two million iterator steps.
fn byte_of_char(text: &str, from: usize, chars: usize) -> usize {
    const BLOCK: usize = 16 << 10;
    let (mut at, mut left) = (from, chars);
    while left > 0 && text.len() - at > BLOCK {
        let end = cut_at_char(&text[at..], BLOCK).len() + at;
        let n = text[at..end].chars().count();
        if n > left {
            break;
        }
        left -= n;
        at = end;
    }
    if left == 0 {
        return at;
    }
    text[at..].char_indices().nth(left).map_or(text.len(), |(i, _)| at + i)
}

/// A window of `wanted`: the page of it that fits the host (see [`ReadHints::page_len`]).
fn window(wanted: &str, offset: usize, total: usize, start_line: usize, mut out: Map<String, Value>, hints: &ReadHints) -> Value {
    let text = &wanted[..hints.page_len(wanted)];
    let truncated = text.len() < wanted.len();
    let chars = text.chars().count();
    let next = offset + chars;
    let lines = text.matches('\n').count();
    out.insert("length".into(), chars.into());
    out.insert("startLine".into(), start_line.into());
    out.insert("truncated".into(), truncated.into());
    let mut header = format!(
        "[{} characters {offset}-{next} of {total}, lines {start_line}-{}",
        out["id"].as_str().unwrap_or_default(),
        start_line + lines.saturating_sub(usize::from(text.ends_with('\n')))
    );
    if truncated {
        header.push_str("; a page of what fits this host");
    }
    if next < total {
        out.insert("nextOffset".into(), next.into());
        header.push_str(&format!("; more: artifact_read offset={next}"));
    } else {
        header.push_str("; end of text");
    }
    header.push(']');
    hints.answer(header, text.to_owned(), out)
}

/// How many lines of `region` match `re`: the whole region, however long, in one answer.
fn count(region: &str, re: &Regex, offset: usize, mut out: Map<String, Value>, hints: &ReadHints) -> Value {
    let n = region.lines().filter(|l| re.is_match(l)).count();
    let lines = region.lines().count();
    let id = out["id"].as_str().unwrap_or_default().to_owned();
    let from = if offset > 0 { format!(" from offset {offset}") } else { String::new() };
    let header = format!("[{id}: {n} of {lines} lines match /{}/{from}]", re.as_str());
    out.insert("grep".into(), re.as_str().into());
    out.insert("count".into(), n.into());
    out.insert("lines".into(), lines.into());
    hints.answer(header, String::new(), out)
}

/// The lines of `region` that match `re`, as many as fit the host's page.
fn grep(region: &str, re: &Regex, offset: usize, start_line: usize, mut out: Map<String, Value>, hints: &ReadHints) -> Value {
    let mut listing = String::new();
    // Where each listed line ends in `listing`, and where the line after it starts in the text.
    let mut ends: Vec<(usize, usize)> = Vec::new();
    let mut pos = offset;
    for (i, raw) in region.split_inclusive('\n').enumerate() {
        let line = raw.strip_suffix('\n').unwrap_or(raw);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let after = pos + raw.chars().count();
        if re.is_match(line) {
            let shown = cut_at_char(line, MAX_MATCH_LINE_BYTES);
            let shown = if shown.len() < line.len() { format!("{shown}…") } else { shown.to_owned() };
            let number = start_line + i;
            listing.push_str(&format!("{number}@{pos}: {shown}\n"));
            ends.push((listing.len(), after));
            if listing.len() > hints.text_budget.saturating_mul(2) {
                break; // already more than a page: the cut below decides
            }
        }
        pos = after;
    }
    // As many whole lines as fit; the next call starts after the last one given. An entry is
    // at most a few hundred bytes, under any page, so a page holds at least one.
    let fit = hints.page_len(&listing);
    let kept = ends.iter().take_while(|(end, _)| *end <= fit).count().max(ends.len().min(1));
    let next = (kept < ends.len()).then(|| ends[kept - 1].1);
    listing.truncate(if kept == 0 { 0 } else { ends[kept - 1].0 });
    let id = out["id"].as_str().unwrap_or_default().to_owned();
    let mut header = format!("[{id}: {kept} matching lines for /{}/ from offset {offset}, each as line@offset: text", re.as_str());
    out.insert("grep".into(), re.as_str().into());
    out.insert("truncated".into(), next.is_some().into());
    if let Some(n) = next {
        out.insert("nextOffset".into(), n.into());
        header.push_str(&format!("; a page of what fits this host; more: artifact_read grep with offset={n}"));
    }
    header.push(']');
    out.insert("count".into(), kept.into());
    hints.answer(header, listing, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_of_char_skips_blocks_and_lands_on_the_same_byte() {
        let text = "ab\u{e9}\u{65e5}\u{1f600}\n".repeat(20_000);
        for (from, chars) in [(0, 0), (0, 1), (0, 7), (0, 50_000), (12, 33_333), (0, 119_999), (0, 120_000), (0, 500_000)] {
            let slow = if chars == 0 { from } else { text[from..].char_indices().nth(chars).map_or(text.len(), |(i, _)| from + i) };
            assert_eq!(byte_of_char(&text, from, chars), slow, "from {from}, {chars} chars");
        }
    }

    /// The answer's facts with its page under `text` and, for grep, its lines as `matches`
    /// ({line, offset, text}, parsed from the `line@offset: text` listing the model reads).
    fn run(text: &str, args: Value) -> Result<Value, ToolError> {
        let v = run_for(text, args.clone(), &ReadHints::default())?;
        let mut facts = v["structuredContent"].clone();
        let page = v["content"].get(1).and_then(|b| b["text"].as_str()).unwrap_or("").to_owned();
        if args.get("grep").is_some() {
            let matches: Vec<Value> = page
                .lines()
                .map(|l| {
                    let (at, text) = l.split_once(": ").unwrap();
                    let (line, offset) = at.split_once('@').unwrap();
                    json!({"line": line.parse::<u64>().unwrap(), "offset": offset.parse::<u64>().unwrap(), "text": text})
                })
                .collect();
            facts["matches"] = json!(matches);
        } else {
            facts["text"] = json!(page);
        }
        Ok(facts)
    }

    fn run_for(text: &str, args: Value, hints: &ReadHints) -> Result<Value, ToolError> {
        let request = parse(&args)?;
        let mut head = Map::new();
        head.insert("id".into(), "t_0123456789abcdef".into());
        answer(&Bytes::copy_from_slice(text.as_bytes()), request, head, hints)
    }

    #[test]
    fn windows_count_characters() {
        let v = run("héllo\nwörld\n", json!({"offset": 1, "length": 4})).unwrap();
        assert_eq!(v["text"], "éllo");
        assert_eq!((v["totalChars"].as_u64(), v["nextOffset"].as_u64(), v["truncated"].as_bool()), (Some(12), Some(5), Some(false)));
        let v = run("héllo\nwörld\n", json!({"offset": 6})).unwrap();
        assert_eq!((v["text"].as_str(), v["startLine"].as_u64(), v.get("nextOffset")), (Some("wörld\n"), Some(2), None));
        // At the end: an empty window; past it: an error saying where the end is.
        assert_eq!(run("abc", json!({"offset": 3})).unwrap()["text"], "");
        let e = run("abc", json!({"offset": 4})).unwrap_err();
        assert!(e.message.contains("past the end") && e.message.contains("3 characters"), "{e}");
        assert_eq!(run("abc", json!({"length": 0})).unwrap_err().code, "bad_request");
        assert_eq!(run("abc", json!({"offset": -1})).unwrap_err().code, "bad_request");
    }

    #[test]
    fn windows_are_capped_and_never_split_a_char() {
        let text = "日本語のテキスト\n".repeat(5_000);
        let v = run(&text, json!({"length": 1_000_000_000u64})).unwrap();
        let got = v["text"].as_str().unwrap();
        assert!(got.len() <= READ_BUDGET_BYTES && got.len() > READ_BUDGET_BYTES / 2);
        assert!(got.ends_with('\n'), "cut at a line end when one is close");
        assert_eq!(v["truncated"], true);
        assert_eq!(v["nextOffset"].as_u64().unwrap() as usize, got.chars().count());
        // Paging to the end reassembles the text.
        let mut all = String::new();
        let mut offset = 0;
        loop {
            let v = run(&text, json!({"offset": offset})).unwrap();
            all.push_str(v["text"].as_str().unwrap());
            match v["nextOffset"].as_u64() {
                Some(n) => offset = n,
                None => break,
            }
        }
        assert_eq!(all, text);
    }

    #[test]
    fn grep_lists_lines_with_numbers_and_offsets() {
        let text = "fn main() {\n    let x = 1;\r\n    println!(\"{x}\");\n}\nfn other() {}\n";
        let v = run(text, json!({"grep": "^fn "})).unwrap();
        assert_eq!(
            v["matches"],
            json!([{"line": 1, "offset": 0, "text": "fn main() {"}, {"line": 5, "offset": 51, "text": "fn other() {}"}])
        );
        assert_eq!(&text[51..], "fn other() {}\n");
        // From an offset: line numbers stay the file's.
        let v = run(text, json!({"grep": "(?i)LET", "offset": 12})).unwrap();
        assert_eq!(v["matches"][0]["line"], 2);
        assert_eq!(v["matches"][0]["text"], "    let x = 1;");
        let e = run(text, json!({"grep": "fn (main"})).unwrap_err();
        assert_eq!(e.code, "bad_request");
        assert!(e.message.contains("not a valid regex") && !e.message.contains('\n'), "{e}");
        assert_eq!(run(text, json!({"grep": 3})).unwrap_err().code, "bad_request");
    }

    #[test]
    fn every_host_gets_the_page_in_content_once() {
        let text = "line\n".repeat(10);
        let v = run_for(&text, json!({}), &ReadHints::default()).unwrap();
        assert_eq!(v["content"][1]["text"], text.as_str());
        assert!(v["structuredContent"].get("text").is_none(), "not twice: {v}");
        assert_eq!(v["structuredContent"]["in"], "content");
        let codex = ReadHints::for_host(&crate::hosts::builtin().into_iter().find(|p| p.name == "codex").unwrap());
        let v = run_for(&text, json!({}), &codex).unwrap();
        assert_eq!(v["content"][1]["text"], text.as_str());
        assert!(v.get("structuredContent").is_none(), "Codex would show it instead of the page: {v}");
    }

    #[test]
    fn grep_counts_without_listing() {
        let text: String = (0..50_000).map(|i| format!("{} code E{}\n", if i % 5 == 0 { "ERROR" } else { "INFO" }, i % 7)).collect();
        let v = run_for(&text, json!({"grep": "^ERROR .*E3$", "count": true}), &ReadHints::default()).unwrap();
        let expected = (0..50_000).filter(|i| i % 5 == 0 && i % 7 == 3).count();
        assert_eq!(v["content"][0]["text"], format!("[t_0123456789abcdef: {expected} of 50000 lines match /^ERROR .*E3$/]"));
        assert_eq!(v["content"].as_array().unwrap().len(), 1, "no listing: {v}");
        assert_eq!(v["structuredContent"]["count"], expected);
        let e = run(&text, json!({"count": true})).unwrap_err();
        assert!(e.message.contains("\"count\" goes with \"grep\""), "{e}");
    }

    #[test]
    fn grep_is_capped() {
        let text: String = (0..20_000).map(|i| format!("match line {i}\n")).collect();
        let v = run(&text, json!({"grep": "match"})).unwrap();
        assert_eq!(v["truncated"], true);
        let n = v["matches"].as_array().unwrap().len();
        let next = v["nextOffset"].as_u64().unwrap();
        assert_eq!(v["matches"][n - 1]["line"], n);
        let v = run(&text, json!({"grep": "match", "offset": next})).unwrap();
        assert_eq!(v["matches"][0]["line"], n + 1);
    }
}
