//! `artifact_read` on images and PDFs: an image comes back as an image block (the whole of it
//! fitted to `max_edge`, or a `region` of the original at native resolution), a PDF as the text
//! of the `pages` asked for. So a model can zoom into part of a large screenshot, or read page
//! 40 of a report, without the whole file ever entering its context.
//!
//! Decoding runs off the async workers and is guarded: images by `stowage_media::ImageLimits`
//! (dimensions and allocation, checked from the header before decoding), PDFs by a size cap
//! and a time cap.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use stowage_core::{ArtifactRef, ArtifactScope, human_size};
use stowage_http::ApiError;
use stowage_store::{Access, ArtifactStore};

use super::{ReadHints, ToolError};

/// The most bytes of one image answer (encoded).
const IMAGE_MAX_BYTES: usize = 768 * 1024;
/// PDFs larger than this are not parsed.
const PDF_MAX_BYTES: usize = 64 * 1024 * 1024;
/// The longest a PDF parse may take.
const PDF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The kinds of artifact `artifact_read` answers itself, besides text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Media {
    Image,
    Pdf,
}

/// Whether `meta` is an image or a PDF, which `artifact_read` answers itself (else: text).
pub(crate) fn media_of(meta: &ArtifactRef) -> Option<Media> {
    let essence = meta.mime_type.as_deref().unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match essence.as_str() {
        "image/png" | "image/jpeg" | "image/gif" | "image/webp" | "image/bmp" => Some(Media::Image),
        "application/pdf" => Some(Media::Pdf),
        _ => None,
    }
}

pub(crate) async fn read(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    media: Media,
    meta: ArtifactRef,
    arguments: &Value,
    hints: ReadHints,
) -> Result<Value, ToolError> {
    match media {
        Media::Image => read_image(store, scope, meta, arguments, hints).await,
        Media::Pdf => read_pdf(store, scope, meta, arguments, hints).await,
    }
}

/// Refuses an argument of `artifact_read` that does not apply to this kind of artifact, naming
/// the ones that do.
pub(crate) fn refuse_other(arguments: &Value, allowed: &[&str], what: &str) -> Result<(), ToolError> {
    for key in ["offset", "length", "grep", "count", "max_edge", "region", "pages"] {
        if !allowed.contains(&key) && arguments.get(key).is_some_and(|v| !v.is_null()) {
            return Err(ToolError::bad_request(format!(
                "artifact_read: \"{key}\" does not apply to {what}; it takes {}",
                allowed.iter().map(|k| format!("\"{k}\"")).collect::<Vec<_>>().join(" and ")
            )));
        }
    }
    Ok(())
}

fn u32_field(v: &Value, key: &str, at: &str) -> Result<u32, ToolError> {
    v.get(key)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| ToolError::bad_request(format!("artifact_read: \"{at}.{key}\" must be a whole number of pixels")))
}

async fn bytes_of(store: &Arc<dyn ArtifactStore>, scope: &ArtifactScope, meta: &ArtifactRef) -> Result<bytes::Bytes, ToolError> {
    store.get(&Access::owner_of(scope), &meta.id).await.map_err(|e| ToolError::from(ApiError::from(e)))
}

async fn read_image(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    meta: ArtifactRef,
    arguments: &Value,
    hints: ReadHints,
) -> Result<Value, ToolError> {
    refuse_other(arguments, &["max_edge", "region"], "an image")?;
    let max_edge = match arguments.get("max_edge") {
        None | Some(Value::Null) => hints.max_image_edge,
        Some(v) => v.as_u64().filter(|n| (16..=8192).contains(n)).map(|n| n as u32).ok_or_else(|| {
            ToolError::bad_request(format!("artifact_read: \"max_edge\" must be a number of pixels from 16 to 8192, not {v}"))
        })?,
    };
    let region = match arguments.get("region") {
        None | Some(Value::Null) => None,
        Some(r @ Value::Object(_)) => Some(stowage_media::Region {
            x: u32_field(r, "x", "region")?,
            y: u32_field(r, "y", "region")?,
            width: u32_field(r, "width", "region")?,
            height: u32_field(r, "height", "region")?,
        }),
        Some(v) => {
            return Err(ToolError::bad_request(format!(
                "artifact_read: \"region\" must be {{\"x\", \"y\", \"width\", \"height\"}} in pixels, not {v}"
            )));
        }
    };
    let bytes = bytes_of(store, scope, &meta).await?;
    let opts = stowage_media::PreviewOptions { max_edge, max_bytes: IMAGE_MAX_BYTES };
    let limits = stowage_media::ImageLimits::default();
    let made = crate::cpu_pool::run(move || {
        let info = stowage_media::probe(&bytes)?;
        let out = match region {
            Some(r) => stowage_media::region(&bytes, r, &opts, &limits)?,
            None => stowage_media::fit(&bytes, &opts, &limits)?,
        };
        Ok::<_, stowage_media::MediaError>((info, out))
    })
    .await;
    let (info, out) = made.map_err(|e| ToolError::bad_request(format!("artifact_read: {e}")))?;
    let what = match region {
        Some(r) if (out.width, out.height) == (r.width, r.height) => {
            format!("region x={} y={} {}x{} at native resolution", r.x, r.y, r.width, r.height)
        }
        Some(r) => format!("region x={} y={} {}x{}, fitted to {}x{}", r.x, r.y, r.width, r.height, out.width, out.height),
        None if (out.width, out.height) == (info.width, info.height) => "the whole image at native resolution".to_owned(),
        None => format!("the whole image fitted to {}x{} (pass region for detail at native resolution)", out.width, out.height),
    };
    let line = format!("[{}: {} image, {}x{} px, {}; {what}]", meta.id, info.format, info.width, info.height, human_size(meta.size_bytes));
    let mut structured = Map::new();
    structured.insert("id".into(), json!(meta.id));
    structured.insert("mimeType".into(), json!(info.format));
    structured.insert("width".into(), json!(info.width));
    structured.insert("height".into(), json!(info.height));
    structured.insert("returned".into(), json!({"width": out.width, "height": out.height, "mimeType": out.mime_type}));
    if let Some(r) = region {
        structured.insert("region".into(), json!({"x": r.x, "y": r.y, "width": r.width, "height": r.height}));
    }
    let data = base64::engine::general_purpose::STANDARD.encode(&out.bytes);
    // The image is in content, where every host shows it when there is no structuredContent
    // (Codex drops images beside it).
    Ok(hints.with_facts(
        vec![json!({"type": "text", "text": line}), json!({"type": "image", "data": data, "mimeType": out.mime_type})],
        structured,
    ))
}

async fn read_pdf(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    meta: ArtifactRef,
    arguments: &Value,
    hints: ReadHints,
) -> Result<Value, ToolError> {
    refuse_other(arguments, &["pages", "offset", "grep", "count"], "a PDF")?;
    let pages = match arguments.get("pages") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(v) => return Err(ToolError::bad_request(format!("artifact_read: \"pages\" must be like \"2\", \"1-3\" or \"4-\", not {v}"))),
    };
    let offset = super::usize_argument(super::ARTIFACT_READ_TOOL, arguments, "offset")?.unwrap_or(0);
    let grep = super::grep::grep_argument(arguments)?;
    let count = super::grep::count_argument(arguments, grep.is_some())?;
    let bytes = bytes_of(store, scope, &meta).await?;
    // A window needs the text up to its end; grep searches further (bounded all the same).
    let max_chars = if grep.is_some() { PDF_GREP_CHARS } else { offset.saturating_add(hints.text_budget * 2).min(PDF_GREP_CHARS) };
    let limits = stowage_media::PdfLimits { max_input_bytes: PDF_MAX_BYTES, timeout: PDF_TIMEOUT, max_chars };
    // The parse has its own time cap (its thread is given up on after it); it blocks while
    // waiting, so it waits on tokio's blocking pool, not on the CPU pool or a runtime worker.
    let asked = pages.clone();
    let text = tokio::task::spawn_blocking(move || stowage_media::pdf_text(&bytes, asked.as_deref(), &limits))
        .await
        .map_err(|_| ToolError::bad_request("artifact_read: the PDF could not be read (its parser failed)"))?
        .map_err(|e| ToolError::bad_request(format!("artifact_read: {e}")))?;
    let last_asked = asked_last(pages.as_deref(), text.page_count);
    let mut head = format!("[{}: PDF, {} pages, {}", meta.id, text.page_count, human_size(meta.size_bytes));
    if !text.has_text_layer {
        head.push_str("; these pages have no text layer (a scanned PDF?): there is no text to read; artifact_url gives a link to the file");
    }
    let mut structured = Map::new();
    structured.insert("id".into(), json!(meta.id));
    structured.insert("mimeType".into(), json!("application/pdf"));
    structured.insert("pageCount".into(), json!(text.page_count));
    structured.insert("hasTextLayer".into(), json!(text.has_text_layer));
    if let Some(re) = grep {
        if count {
            return Ok(pdf_count(&text, &re, head, structured, &hints));
        }
        return Ok(pdf_grep(&text, &re, head, structured, &hints, last_asked));
    }
    // The window: from `offset` characters into the first page asked for.
    let Some(first) = text.pages.first() else {
        head.push_str("; no pages]");
        structured.insert("pages".into(), json!([]));
        return Ok(hints.answer(head, String::new(), structured));
    };
    let first_chars = first.text.chars().count();
    if offset > first_chars {
        return Err(ToolError::bad_request(format!(
            "artifact_read: offset {offset} is past the end of page {}, which has {first_chars} characters",
            first.number
        )));
    }
    // The body as the model reads it, and where each page's text is in it.
    struct Span {
        page: u32,
        start: usize,
        end: usize,
        /// Characters of the page before `start` (the offset, on the first page).
        skip: usize,
        chars: usize,
    }
    let mut body = String::new();
    let mut spans: Vec<Span> = Vec::new();
    for (i, p) in text.pages.iter().enumerate() {
        let skip = if i == 0 { offset } else { 0 };
        body.push_str(&if skip > 0 {
            format!("--- page {} from character {skip} ---\n", p.number)
        } else {
            format!("--- page {} ---\n", p.number)
        });
        let start = body.len();
        body.push_str(&p.text[byte_of_char(&p.text, skip)..]);
        spans.push(Span { page: p.number, start, end: body.len(), skip, chars: p.text.chars().count() });
        body.push('\n');
    }
    let n = hints.page_len(&body);
    // Where the next call starts: the page the cut fell in, and how far into it.
    let next = if n < body.len() || text.truncated {
        let s = spans.iter().rev().find(|s| s.start <= n).unwrap_or(&spans[0]);
        let into = s.skip + body[s.start..n.clamp(s.start, s.end)].chars().count();
        if into >= s.chars { (s.page < last_asked).then_some((s.page + 1, 0)) } else { Some((s.page, into)) }
    } else {
        None
    };
    let shown = &body[..n];
    let numbers: Vec<u32> = spans.iter().filter(|s| s.start <= n).map(|s| s.page).collect();
    match (numbers.first(), numbers.last()) {
        (Some(a), Some(b)) if a == b => head.push_str(&format!("; page {a}")),
        (Some(a), Some(b)) => head.push_str(&format!("; pages {a}-{b}")),
        _ => {}
    }
    if let Some((page, into)) = next {
        let range = if page == last_asked { page.to_string() } else { format!("{page}-{last_asked}") };
        if into > 0 {
            head.push_str(&format!("; a page of what fits this host; more: pages=\"{range}\" offset={into}"));
        } else {
            head.push_str(&format!("; more: pages=\"{range}\""));
        }
        structured.insert("next".into(), json!({"pages": range, "offset": into}));
    }
    head.push(']');
    structured.insert("pages".into(), json!(numbers));
    structured.insert("truncated".into(), json!(next.is_some()));
    Ok(hints.answer(head, shown.to_owned(), structured))
}

/// The characters of PDF text one grep searches at most.
const PDF_GREP_CHARS: usize = 4_000_000;

/// The last page a `pages` selection asks for (the document's last for an open range or none).
fn asked_last(pages: Option<&str>, page_count: u32) -> u32 {
    let Some(spec) = pages else { return page_count };
    let last = spec.split(',').next_back().unwrap_or("").trim();
    match last.split_once('-') {
        Some((_, "")) => page_count,
        Some((_, b)) => b.trim().parse().unwrap_or(page_count),
        None => last.parse().unwrap_or(page_count),
    }
    .min(page_count)
}

/// The byte index of character `chars` of `text` (its end when shorter).
fn byte_of_char(text: &str, chars: usize) -> usize {
    text.char_indices().nth(chars).map_or(text.len(), |(i, _)| i)
}

/// How many lines of each page match `re` (pages without a match left out), and the total.
fn pdf_count(
    text: &stowage_media::PdfText,
    re: &regex::Regex,
    mut head: String,
    mut structured: Map<String, Value>,
    hints: &ReadHints,
) -> Value {
    let per_page: Vec<(u32, usize)> =
        text.pages.iter().map(|p| (p.number, p.text.lines().filter(|l| re.is_match(l)).count())).filter(|(_, n)| *n > 0).collect();
    let total: usize = per_page.iter().map(|(_, n)| n).sum();
    head.push_str(&format!("; {total} lines match /{}/ on {} pages, per page as p<page>: <lines>", re.as_str(), per_page.len()));
    if text.truncated {
        head.push_str(&format!("; counted in the first {PDF_GREP_CHARS} characters"));
    }
    head.push(']');
    let listing: String = per_page.iter().map(|(p, n)| format!("p{p}: {n}\n")).collect();
    structured.insert("grep".into(), json!(re.as_str()));
    structured.insert("count".into(), json!(total));
    structured.insert("perPage".into(), json!(per_page.iter().map(|(p, n)| json!({"page": p, "count": n})).collect::<Vec<_>>()));
    hints.answer(head, listing, structured)
}

/// The lines of the PDF's pages that match `re`, each with its page and line number, as many
/// as fit the host's page.
fn pdf_grep(
    text: &stowage_media::PdfText,
    re: &regex::Regex,
    mut head: String,
    mut structured: Map<String, Value>,
    hints: &ReadHints,
    last_asked: u32,
) -> Value {
    let mut listing = String::new();
    let mut ends: Vec<(usize, u32, usize)> = Vec::new(); // (end in listing, page, offset of the line after)
    'pages: for p in &text.pages {
        let mut pos = 0;
        for (i, raw) in p.text.split_inclusive('\n').enumerate() {
            let line = raw.trim_end_matches(['\n', '\r']);
            let after = pos + raw.chars().count();
            if re.is_match(line) {
                let shown = super::cut_at_char(line, 400);
                let shown = if shown.len() < line.len() { format!("{shown}…") } else { shown.to_owned() };
                listing.push_str(&format!("p{} l{}@{pos}: {shown}\n", p.number, i + 1));
                ends.push((listing.len(), p.number, after));
                if listing.len() > hints.text_budget.saturating_mul(2) {
                    break 'pages;
                }
            }
            pos = after;
        }
    }
    let fit = hints.page_len(&listing);
    let kept = ends.iter().take_while(|(end, _, _)| *end <= fit).count().max(ends.len().min(1));
    let next = (kept < ends.len()).then(|| (ends[kept - 1].1, ends[kept - 1].2));
    listing.truncate(if kept == 0 { 0 } else { ends[kept - 1].0 });
    head.push_str(&format!("; {kept} matching lines for /{}/, each as p<page> l<line>@<offset in the page>: text", re.as_str()));
    if text.truncated {
        head.push_str(&format!("; searched the first {PDF_GREP_CHARS} characters"));
    }
    if let Some((page, into)) = next {
        let range = if page == last_asked { page.to_string() } else { format!("{page}-{last_asked}") };
        head.push_str(&format!("; a page of what fits this host; more: grep with pages=\"{range}\" offset={into}"));
        structured.insert("next".into(), json!({"pages": range, "offset": into}));
    }
    head.push(']');
    structured.insert("grep".into(), json!(re.as_str()));
    structured.insert("count".into(), json!(kept));
    structured.insert("truncated".into(), json!(next.is_some()));
    hints.answer(head, listing, structured)
}
