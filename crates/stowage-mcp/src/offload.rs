//! The gateway's built-in [`Offloader`]: MCP typed content, base64 inside JSON (text blocks
//! and `structuredContent`), and a size net for oversized text.
//!
//! What it stores, in order:
//! - `image`/`audio` blocks and embedded `resource` blobs whose decoded size is over
//!   `inline_binary_max_bytes` (smaller ones, like the conformance suite's 70-byte PNG, pass
//!   through unchanged); the block is removed and the contract puts a text line and a
//!   `resource_link` in its place;
//! - base64 strings (plain or `data:` URIs) inside JSON — a text block whose text is JSON, or
//!   `structuredContent` — when their bytes have a recognised magic number (a long random
//!   token is not a file). The string becomes the `artifact://` URI, so the JSON keeps its
//!   shape and still validates against the tool's output schema;
//! - text blocks still over `inline_text_max_bytes` after that (the size net), kept as a
//!   short preview in the summary.
//!
//! The same bytes found twice (a result's `structuredContent` and its JSON text twin) are one
//! artifact, listed once.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use bytes::Bytes;
use serde_json::{Map, Value};
use stowage_core::{ArtifactRef, ArtifactSink, PutOptions, human_size};

use crate::rewrite::{CallContext, OffloadError, Offloaded, OffloadedItem, Offloader};

/// Thresholds of the built-in offloader.
#[derive(Debug, Clone)]
pub struct OffloadConfig {
    pub inline_binary_max_bytes: usize,
    pub inline_text_max_bytes: usize,
}

pub struct BuiltinOffloader {
    sink: Arc<dyn ArtifactSink>,
    config: OffloadConfig,
}

const STANDARD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

impl BuiltinOffloader {
    pub fn new(sink: Arc<dyn ArtifactSink>, config: OffloadConfig) -> Self {
        BuiltinOffloader { sink, config }
    }
}

struct Walk<'a> {
    this: &'a BuiltinOffloader,
    ctx: &'a CallContext,
    items: Vec<OffloadedItem>,
    /// Pointer prefix of the JSON being walked (`/structuredContent`, `/content/0/text#`).
    base: String,
}

impl Walk<'_> {
    async fn store(
        &mut self,
        bytes: Bytes,
        mime: Option<String>,
        filename: Option<String>,
        pointer: String,
    ) -> Result<ArtifactRef, OffloadError> {
        let dimensions = image_dimensions(&bytes);
        let mut opts = PutOptions::scoped(self.ctx.scope.clone())
            .namespace(self.ctx.tool.clone())
            .source_entry("tool", self.ctx.tool.clone())
            .source_entry("upstream", self.ctx.upstream.clone())
            .source_entry("pointer", pointer.clone());
        opts.mime_type = mime;
        opts.filename = filename;
        let r = self
            .this
            .sink
            .put_bytes(bytes, opts)
            .await
            .map_err(|e| OffloadError { code: e.code(), message: e.to_string() })?;
        if !self.items.iter().any(|i| i.reference.id == r.id) {
            self.items.push(OffloadedItem { summary: summary(&r, None), reference: r.clone(), pointer, dimensions });
        }
        Ok(r)
    }

    /// Replaces base64 files inside `v` by their artifact URIs. Returns whether it changed.
    async fn walk_json(&mut self, v: &mut Value) -> Result<bool, OffloadError> {
        // An explicit stack rather than recursion: async recursion needs boxing, and deeply
        // nested JSON must not overflow the stack. Strings are collected first, then stored.
        let mut changed = false;
        let mut todo: Vec<(String, &mut Value)> = vec![(String::new(), v)];
        let mut strings: Vec<(String, &mut Value, Option<String>)> = Vec::new();
        while let Some((ptr, node)) = todo.pop() {
            match node {
                Value::Object(map) => {
                    let filename = sibling_filename(map);
                    for (k, child) in map.iter_mut() {
                        let p = format!("{ptr}/{}", k.replace('~', "~0").replace('/', "~1"));
                        if let Value::String(_) = child {
                            strings.push((p, child, filename.clone()));
                        } else {
                            todo.push((p, child));
                        }
                    }
                }
                Value::Array(items) => {
                    for (i, child) in items.iter_mut().enumerate() {
                        let p = format!("{ptr}/{i}");
                        if let Value::String(_) = child {
                            strings.push((p, child, None));
                        } else {
                            todo.push((p, child));
                        }
                    }
                }
                _ => {}
            }
        }
        let min_chars = (self.this.config.inline_binary_max_bytes * 4 / 3).max(64);
        for (p, node, filename) in strings {
            let Value::String(s) = &*node else { continue };
            if s.len() <= min_chars {
                continue;
            }
            let Some((bytes, mime)) = decode_file(s) else { continue };
            if bytes.len() <= self.this.config.inline_binary_max_bytes {
                continue;
            }
            let base = self.base.clone();
            let r = self.store(bytes, Some(mime), filename, format!("{base}{p}")).await?;
            *node = Value::String(r.uri.clone());
            changed = true;
        }
        Ok(changed)
    }
}

#[async_trait]
impl Offloader for BuiltinOffloader {
    async fn offload(&self, ctx: &CallContext, raw: String) -> Result<Offloaded, OffloadError> {
        let raw_len = raw.len();
        let mut result: Value = serde_json::from_str(&raw)
            .map_err(|e| OffloadError { code: "bad_request", message: format!("unreadable tool result: {e}") })?;
        drop(raw);
        let mut w = Walk { this: self, ctx, items: Vec::new(), base: String::new() };
        let max_bin = self.config.inline_binary_max_bytes;
        if let Some(content) = result.get_mut("content").and_then(Value::as_array_mut) {
            for (i, block) in content.iter_mut().enumerate() {
                let kind = block.get("type").and_then(Value::as_str).unwrap_or("").to_owned();
                match kind.as_str() {
                    "image" | "audio" => {
                        let Some(data) = block.get("data").and_then(Value::as_str) else { continue };
                        if data.len() <= max_bin * 4 / 3 {
                            continue;
                        }
                        let Some(bytes) = decode_b64(data) else { continue };
                        if bytes.len() <= max_bin {
                            continue;
                        }
                        let mime = block.get("mimeType").and_then(Value::as_str).map(str::to_owned);
                        w.store(bytes, mime, None, format!("/content/{i}")).await?;
                        *block = Value::Null;
                    }
                    "resource" => {
                        let res = block.get("resource").cloned().unwrap_or(Value::Null);
                        let uri = res.get("uri").and_then(Value::as_str).unwrap_or("");
                        let filename = uri.rsplit('/').next().filter(|s| !s.is_empty()).map(str::to_owned);
                        let mime = res.get("mimeType").and_then(Value::as_str).map(str::to_owned);
                        if let Some(blob) = res.get("blob").and_then(Value::as_str) {
                            if blob.len() <= max_bin * 4 / 3 {
                                continue;
                            }
                            let Some(bytes) = decode_b64(blob) else { continue };
                            if bytes.len() <= max_bin {
                                continue;
                            }
                            w.store(bytes, mime, filename, format!("/content/{i}")).await?;
                            *block = Value::Null;
                        } else if let Some(text) = res.get("text").and_then(Value::as_str)
                            && text.len() > self.config.inline_text_max_bytes
                        {
                            let mime = mime.or(Some("text/plain; charset=utf-8".into()));
                            w.store(Bytes::from(text.to_owned()), mime, filename, format!("/content/{i}")).await?;
                            *block = Value::Null;
                        }
                    }
                    "text" => {
                        let Some(text) = block.get("text").and_then(Value::as_str) else { continue };
                        let trimmed = text.trim_start();
                        let mut new_text = None;
                        if text.len() > max_bin && (trimmed.starts_with('{') || trimmed.starts_with('['))
                            && let Ok(mut inner) = serde_json::from_str::<Value>(text)
                        {
                            w.base = format!("/content/{i}/text#");
                            if w.walk_json(&mut inner).await? {
                                new_text = Some(serde_json::to_string(&inner).unwrap_or_default());
                            }
                            w.base.clear();
                        }
                        let text = new_text.clone().unwrap_or_else(|| text.to_owned());
                        if text.len() > self.config.inline_text_max_bytes {
                            let mime = if trimmed.starts_with('{') || trimmed.starts_with('[') {
                                "application/json"
                            } else {
                                "text/plain; charset=utf-8"
                            };
                            let preview = preview(&text, 200);
                            let r = w.store(Bytes::from(text), Some(mime.into()), None, format!("/content/{i}")).await?;
                            if let Some(item) = w.items.iter_mut().find(|it| it.reference.id == r.id) {
                                item.summary = summary(&r, Some(&preview));
                            }
                            *block = Value::Null;
                        } else if let Some(t) = new_text {
                            block["text"] = Value::String(t);
                        }
                    }
                    _ => {}
                }
            }
        }
        if let Some(sc) = result.get_mut("structuredContent") {
            w.base = "/structuredContent".into();
            w.walk_json(sc).await?;
        }
        Ok(Offloaded { value: result, items: w.items, bytes_in: raw_len as u64, tokens_in: (raw_len as u64).div_ceil(4) })
    }
}

fn sibling_filename(map: &Map<String, Value>) -> Option<String> {
    ["filename", "fileName", "file_name", "name", "title"]
        .iter()
        .find_map(|k| map.get(*k).and_then(Value::as_str))
        .filter(|s| s.len() <= 200)
        .map(str::to_owned)
}

fn preview(text: &str, chars: usize) -> String {
    let p: String = text.chars().take(chars).collect();
    p.replace(['\n', '\r'], " ")
}

/// The one line the model reads for an artifact.
pub fn summary(r: &ArtifactRef, preview: Option<&str>) -> String {
    let mime = r.mime_type.as_deref().unwrap_or("application/octet-stream");
    let mut s = match &r.filename {
        Some(name) => format!("Stored {} '{name}' ({mime}, {}) as {}", crate::rewrite::kind_of(Some(mime)), human_size(r.size_bytes), r.uri),
        None => format!("Stored {} ({mime}, {}) as {}", crate::rewrite::kind_of(Some(mime)), human_size(r.size_bytes), r.uri),
    };
    if let Some(p) = preview {
        s.push_str(&format!(". Starts: {p}…"));
    }
    s
}

/// Decodes standard or URL-safe base64 (padding optional); `None` if it is not base64.
pub fn decode_b64(s: &str) -> Option<Bytes> {
    let s = s.trim();
    STANDARD.decode(s).or_else(|_| URL_SAFE.decode(s)).ok().map(Bytes::from)
}

/// A base64 string or `data:` URI that holds a file with a recognised magic number.
fn decode_file(s: &str) -> Option<(Bytes, String)> {
    if let Some(rest) = s.strip_prefix("data:") {
        let (head, data) = rest.split_once(',')?;
        let mime = head.strip_suffix(";base64")?;
        let bytes = decode_b64(data)?;
        let mime = if mime.is_empty() { sniff(&bytes)? } else { mime.to_owned() };
        return Some((bytes, mime));
    }
    // Cheap rejections before decoding megabytes: base64 has no spaces and a small alphabet.
    let head = &s.as_bytes()[..s.len().min(64)];
    if !head.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_' | b'=')) {
        return None;
    }
    // Sniff from the first few decoded bytes before decoding everything.
    let prefix = decode_b64(&s[..s.len().min(64) / 4 * 4])?;
    let mime = sniff(&prefix)?;
    let bytes = decode_b64(s)?;
    Some((bytes, mime))
}

fn sniff(bytes: &[u8]) -> Option<String> {
    infer::get(bytes).map(|t| t.mime_type().to_owned())
}

/// Width and height from PNG, GIF and JPEG headers.
pub fn image_dimensions(b: &[u8]) -> Option<(u32, u32)> {
    if b.len() >= 24 && b.starts_with(b"\x89PNG\r\n\x1a\n") {
        let w = u32::from_be_bytes(b[16..20].try_into().ok()?);
        let h = u32::from_be_bytes(b[20..24].try_into().ok()?);
        return Some((w, h));
    }
    if b.len() >= 10 && (b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a")) {
        return Some((u16::from_le_bytes([b[6], b[7]]) as u32, u16::from_le_bytes([b[8], b[9]]) as u32));
    }
    if b.len() >= 4 && b[0] == 0xFF && b[1] == 0xD8 {
        let mut i = 2;
        while i + 9 < b.len() {
            if b[i] != 0xFF {
                return None;
            }
            let marker = b[i + 1];
            let len = u16::from_be_bytes([b[i + 2], b[i + 3]]) as usize;
            if matches!(marker, 0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF) {
                let h = u16::from_be_bytes([b[i + 5], b[i + 6]]) as u32;
                let w = u16::from_be_bytes([b[i + 7], b[i + 8]]) as u32;
                return Some((w, h));
            }
            i += 2 + len;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_dimensions() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend_from_slice(&640u32.to_be_bytes());
        png.extend_from_slice(&480u32.to_be_bytes());
        assert_eq!(image_dimensions(&png), Some((640, 480)));
        assert_eq!(image_dimensions(b"GIF89a\x02\x00\x03\x00"), Some((2, 3)));
        assert_eq!(image_dimensions(b"nope"), None);
    }

    #[test]
    fn files_are_recognised_by_magic_bytes_only() {
        let pdf = b"%PDF-1.7\n% some pdf body that is long enough to matter\n".repeat(10);
        let b64 = STANDARD.encode(&pdf);
        let (bytes, mime) = decode_file(&b64).unwrap();
        assert_eq!((bytes.as_ref(), mime.as_str()), (pdf.as_slice(), "application/pdf"));
        let data_uri = format!("data:application/pdf;base64,{b64}");
        assert_eq!(decode_file(&data_uri).unwrap().1, "application/pdf");
        // A long token of base64 characters that decodes to no known file stays text.
        assert!(decode_file(&"QUFB".repeat(500)).is_none());
        assert!(decode_file("not base64 at all, with spaces").is_none());
    }
}
