//! L2: MCP typed content. Image and audio blocks and embedded-resource blobs carry base64 by
//! definition, so they are decoded and stored whatever their type, and each block becomes a
//! text fallback plus a `resource_link` (or, outside a content list, a `resource_link` whose
//! description is the summary).
//!
//! Binaries of at most `inline_binary_max_bytes` stay inline untouched: tiny icons are cheaper
//! inline than as a reference, and the protocol conformance scenarios send 70-byte PNGs that
//! must come back as they went. Blocks are found wherever they are (content lists, nested
//! JSON, `resources/read` `contents`), because a server that nests them still sends base64.
//! Data that does not decode is left as it is with a warning; L0 still applies to it.
//!
//! Images under `keep_images_under_bytes` stay image blocks, for clients whose model sees
//! images: the default keeps none beyond the inline threshold, because an image block costs a
//! vision model hundreds to thousands of tokens and every other model its base64 as text. A
//! kept image is left alone by every later layer (L3 would otherwise recognise its PNG, L0
//! its length) and by the observation clamp, which measures text.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::TransformConfig;
use crate::layers::WalkCx as Cx;
use crate::layers::base64::{Sniff, decode_all, decoded_len, shape, sniff, with_extension};
use crate::path::{push_index, push_key};
use crate::report::{Layer, TransformReport};
use crate::stub::TemplateVars;
use crate::work::{Docs, Offload, Payload, Render};

/// `[transform.typed_content]`: L2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TypedContentConfig {
    /// Offload image/audio/blob content blocks. Default true.
    pub enabled: bool,
    /// Image blocks (`{"type": "image"}`) whose decoded size is under this many bytes stay
    /// image blocks instead of becoming artifacts, for a model that reads images. Default 1024
    /// (the inline threshold, `inline_binary_max_bytes`: nothing more is kept).
    pub keep_images_under_bytes: u64,
}

impl Default for TypedContentConfig {
    fn default() -> Self {
        TypedContentConfig { enabled: true, keep_images_under_bytes: 1024 }
    }
}

/// Kept images lifted out of a result while the observation clamp measures it: the clamp
/// limits text for the model, and a kept image's base64 is neither text nor the model's to
/// read as such. Each `data` becomes a short placeholder the clamp never cuts (under 64
/// characters), and [`KeptImages::restore`] puts the data back.
#[derive(Debug, Default)]
pub(crate) struct KeptImages {
    data: Vec<String>,
}

const KEPT_PLACEHOLDER: &str = "\u{1}stowage-kept-image:";

impl KeptImages {
    /// Lifts every kept image's data out of `value` (nothing when the config keeps none).
    pub(crate) fn lift(value: &mut Value, config: &TransformConfig) -> KeptImages {
        let mut kept = KeptImages::default();
        if config.typed_content.keep_images_under_bytes > config.inline_binary_max_bytes.saturating_add(1) {
            kept.lift_in(value, config);
        }
        kept
    }

    fn lift_in(&mut self, value: &mut Value, config: &TransformConfig) {
        match value {
            Value::Object(map) if super::base64::is_kept_image(map, config) => {
                let placeholder = Value::String(format!("{KEPT_PLACEHOLDER}{}", self.data.len()));
                if let Some(Value::String(d)) = map.insert("data".into(), placeholder) {
                    self.data.push(d);
                }
            }
            Value::Object(map) => map.values_mut().for_each(|v| self.lift_in(v, config)),
            Value::Array(items) => items.iter_mut().for_each(|v| self.lift_in(v, config)),
            _ => {}
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Puts the lifted data back wherever its placeholder still is (a block the clamp dropped
    /// is simply gone). `keep` leaves a copy of the data here, for a second restore.
    pub(crate) fn restore(&mut self, value: &mut Value, keep: bool) {
        match value {
            Value::String(s) => {
                if let Some(i) = s.strip_prefix(KEPT_PLACEHOLDER).and_then(|n| n.parse::<usize>().ok())
                    && let Some(d) = self.data.get_mut(i)
                {
                    *s = if keep { d.clone() } else { std::mem::take(d) };
                }
            }
            Value::Object(map) => map.values_mut().for_each(|v| self.restore(v, keep)),
            Value::Array(items) => items.iter_mut().for_each(|v| self.restore(v, keep)),
            _ => {}
        }
    }
}

/// L2's pass over every document.
pub(crate) fn collect(docs: &mut Docs, config: &TransformConfig, report: &mut TransformReport) -> Vec<Offload> {
    let mut out = Vec::new();
    if !config.typed_content.enabled {
        return out;
    }
    for d in 0..docs.docs.len() {
        let prefix = docs.docs[d].prefix.clone();
        // Typed blocks are decoded into a new buffer (`decode_all`), not hashed alongside.
        let mut cx = Cx { config, report, doc: d, prefix, out: &mut out, hash: false };
        let mut ptr = String::new();
        walk(&mut docs.docs[d].value, &mut ptr, false, &mut cx);
    }
    out
}

/// Where the base64 of a block is, relative to the block.
enum Kind {
    /// `{"type":"image"|"audio","data":…,"mimeType":…}`
    Media,
    /// `{"type":"resource","resource":{"uri","mimeType","blob"}}`
    Embedded,
    /// `{"uri","mimeType","blob"}` (a `resources/read` contents entry, or a bare resource).
    Contents,
}

fn kind_of(map: &Map<String, Value>) -> Option<Kind> {
    match map.get("type").and_then(Value::as_str) {
        Some("image" | "audio") if map.get("data").is_some_and(Value::is_string) => Some(Kind::Media),
        Some("resource") if map.get("resource").and_then(|r| r.get("blob")).is_some_and(Value::is_string) => Some(Kind::Embedded),
        None if map.get("blob").is_some_and(Value::is_string) && map.get("uri").is_some_and(Value::is_string) => Some(Kind::Contents),
        _ => None,
    }
}

fn walk(value: &mut Value, ptr: &mut String, in_array: bool, cx: &mut Cx<'_>) {
    let len = ptr.len();
    match value {
        Value::Object(map) => {
            if let Some(kind) = kind_of(map) {
                if super::base64::is_kept_image(map, cx.config) {
                    return;
                }
                if let Some(off) = consider(map, &kind, ptr, in_array, cx) {
                    match kind {
                        Kind::Media => {
                            map.insert("data".into(), Value::String(String::new()));
                        }
                        Kind::Embedded => {
                            if let Some(Value::Object(r)) = map.get_mut("resource") {
                                r.insert("blob".into(), Value::String(String::new()));
                            }
                        }
                        Kind::Contents => {
                            map.insert("blob".into(), Value::String(String::new()));
                        }
                    }
                    cx.out.push(off);
                }
                return;
            }
            for (k, item) in map.iter_mut() {
                push_key(ptr, k);
                walk(item, ptr, false, cx);
                ptr.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                push_index(ptr, i);
                walk(item, ptr, true, cx);
                ptr.truncate(len);
            }
        }
        _ => {}
    }
}

fn consider(map: &Map<String, Value>, kind: &Kind, ptr: &str, in_array: bool, cx: &mut Cx<'_>) -> Option<Offload> {
    let (holder, key) = match kind {
        Kind::Media => (map, "data"),
        Kind::Embedded => (map.get("resource")?.as_object()?, "blob"),
        Kind::Contents => (map, "blob"),
    };
    let data = holder.get(key)?.as_str()?;
    let declared = holder.get("mimeType").and_then(Value::as_str).filter(|m| !m.is_empty());
    let value_ptr = match kind {
        Kind::Embedded => format!("{ptr}/resource/blob"),
        _ => format!("{ptr}/{key}"),
    };
    let Some(sh) = shape(data) else {
        if !data.is_empty() {
            cx.report.warn(
                Layer::TypedContent,
                Some(format!("{}{value_ptr}", cx.prefix)),
                "content block data is not base64; left as it is",
            );
        }
        return None;
    };
    if decoded_len(&sh) <= cx.config.inline_binary_max_bytes {
        return None;
    }
    let bytes = match decode_all(&sh) {
        Ok(b) => b,
        Err(e) => {
            cx.report.warn(
                Layer::TypedContent,
                Some(format!("{}{value_ptr}", cx.prefix)),
                format!("content block data does not decode as base64 ({e}); left as it is"),
            );
            return None;
        }
    };
    if bytes.len() as u64 <= cx.config.inline_binary_max_bytes {
        return None;
    }
    let sniffed = sniff(&bytes);
    // The declared type wins (the server knows, e.g. audio/wav vs infer's audio/x-wav); the
    // sniffed one fills in when none was declared.
    let (mime, ext) = match (declared.or(sh.declared_mime), &sniffed) {
        (Some(m), Sniff::Binary { ext, .. }) => (m.to_owned(), *ext),
        (Some(m), _) => (m.to_owned(), ""),
        (None, Sniff::Binary { mime, ext }) => ((*mime).to_owned(), *ext),
        (None, _) => ("application/octet-stream".to_owned(), ""),
    };
    let uri = holder.get("uri").and_then(Value::as_str);
    let mut vars = TemplateVars::from_siblings(Some(holder), Some(key));
    let name = vars.name().or_else(|| uri.and_then(|u| u.rsplit('/').next()).filter(|s| !s.is_empty()).map(str::to_owned));
    if let Some(n) = &name {
        vars.set("name", n.clone());
    }
    let mut source = Map::new();
    if let Some(u) = uri {
        source.insert("original_uri".into(), u.into());
    }
    // The block's audience and priority stay with what stands for it (its resource_link).
    if let Some(a) = map.get("annotations").filter(|a| a.is_object()) {
        source.insert("annotations".into(), a.clone());
    }
    if let Sniff::Binary { mime: sniffed, .. } = sniffed
        && Some(sniffed) != declared
    {
        source.insert("sniffed_mime".into(), sniffed.into());
    }
    let render = match (kind, in_array) {
        // A contents entry keeps its uri and mimeType; its blob becomes a text stub.
        (Kind::Contents, _) => Render::BlobToText,
        (_, true) => Render::Blocks,
        (_, false) => Render::Link,
    };
    let slot = ptr.to_owned();
    Some(Offload {
        doc: cx.doc,
        ptr: slot,
        payload: Payload::Bytes(bytes.into()),
        what: format!("{mime} content block"),
        mime: Some(mime),
        filename: name.map(|n| with_extension(&n, ext)),
        layer: Layer::TypedContent,
        render,
        fatal: true,
        fallback: None,
        summary_template: None,
        content_type: None,
        vars,
        source,
    })
}
