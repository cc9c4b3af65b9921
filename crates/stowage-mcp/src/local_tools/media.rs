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

use super::{ToolError, cut_at_char};

/// What the caller's host can take in one answer (from its profile).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadHints {
    /// The longest edge of an image answer unless `max_edge` says otherwise.
    pub max_image_edge: u32,
    /// The most bytes of text in one answer.
    pub text_budget: usize,
}

impl ReadHints {
    /// What `host` takes: its image edge, and its text budget less room for the answer's own
    /// lines (never under 2,000 bytes, never over the readers' usual budget).
    pub(crate) fn for_host(host: &crate::hosts::HostProfile) -> ReadHints {
        ReadHints {
            max_image_edge: host.max_image_edge.unwrap_or(DEFAULT_MAX_EDGE),
            text_budget: host
                .max_text_bytes
                .map_or(super::READ_BUDGET_BYTES, |b| b.saturating_sub(1_000).clamp(2_000, super::READ_BUDGET_BYTES)),
        }
    }
}

impl Default for ReadHints {
    fn default() -> Self {
        ReadHints { max_image_edge: DEFAULT_MAX_EDGE, text_budget: super::READ_BUDGET_BYTES }
    }
}

/// The longest edge of an image answer for a host with no published limit: the most a Claude
/// model takes without resizing.
pub(crate) const DEFAULT_MAX_EDGE: u32 = 1568;
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
    for key in ["offset", "length", "grep", "max_edge", "region", "pages"] {
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
    Ok(json!({
        "content": [{"type": "text", "text": line}, {"type": "image", "data": data, "mimeType": out.mime_type}],
        "structuredContent": structured,
    }))
}

async fn read_pdf(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    meta: ArtifactRef,
    arguments: &Value,
    hints: ReadHints,
) -> Result<Value, ToolError> {
    refuse_other(arguments, &["pages"], "a PDF")?;
    let pages = match arguments.get("pages") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(v) => return Err(ToolError::bad_request(format!("artifact_read: \"pages\" must be like \"2\" or \"1-3\", not {v}"))),
    };
    let bytes = bytes_of(store, scope, &meta).await?;
    let limits = stowage_media::PdfLimits { max_input_bytes: PDF_MAX_BYTES, timeout: PDF_TIMEOUT, max_chars: hints.text_budget };
    // The parse has its own time cap (its thread is given up on after it); it blocks while
    // waiting, so it waits on tokio's blocking pool, not on the CPU pool or a runtime worker.
    let asked = pages.clone();
    let text = tokio::task::spawn_blocking(move || stowage_media::pdf_text(&bytes, asked.as_deref(), &limits))
        .await
        .map_err(|_| ToolError::bad_request("artifact_read: the PDF could not be read (its parser failed)"))?
        .map_err(|e| ToolError::bad_request(format!("artifact_read: {e}")))?;
    let numbers: Vec<u32> = text.pages.iter().map(|p| p.number).collect();
    let span = match (numbers.first(), numbers.last()) {
        (Some(a), Some(b)) if a == b => format!("page {a}"),
        (Some(a), Some(b)) => format!("pages {a}-{b}"),
        _ => "no pages".to_owned(),
    };
    let mut head = format!("[{}: PDF, {} pages, {}; {span}", meta.id, text.page_count, human_size(meta.size_bytes));
    if !text.has_text_layer {
        head.push_str("; these pages have no text layer (a scanned PDF?): there is no text to read; artifact_url gives a link to the file");
    }
    if text.truncated {
        head.push_str(&format!("; cut at {} characters: ask for fewer pages", hints.text_budget));
    }
    if let Some(last) = numbers.last().filter(|&&l| l < text.page_count) {
        head.push_str(&format!("; more: pages=\"{}\"", last + 1));
    }
    head.push(']');
    let mut body = head;
    for p in &text.pages {
        body.push_str(&format!("\n--- page {} ---\n", p.number));
        body.push_str(&p.text);
    }
    let body = cut_at_char(&body, hints.text_budget + 400).to_owned();
    let structured = json!({
        "id": meta.id,
        "mimeType": "application/pdf",
        "pageCount": text.page_count,
        "pages": text.pages.iter().map(|p| json!({"page": p.number, "text": p.text})).collect::<Vec<_>>(),
        "hasTextLayer": text.has_text_layer,
        "truncated": text.truncated,
    });
    Ok(json!({"content": [{"type": "text", "text": body}], "structuredContent": structured}))
}
