//! `resources/read` and `prompts/get` answers: a blob resource or an image in a prompt leaves
//! the upstream as base64 and reaches the client as a one-line text, the artifact's reference
//! and a signed link, exactly as a tool result's would.
//!
//! The read policy (docs/results.md, "Resources"): text contents up to
//! `resources.inline_text_if_under_chars` stay inline, longer text becomes an artifact, and a
//! blob above `transform.inline_binary_max_bytes` becomes an artifact. The pipeline already
//! knows a `contents` entry (its blob becomes a text stub that keeps the entry's `uri`); long
//! text is handed to it as a blob of its UTF-8 bytes so that every offload takes the same road
//! to the store (sniffing, dedupe, summaries, events): one encode of text that is leaving the
//! context anyway.
//!
//! The offloaded read ([`OffloadedRead`]) is what the gateway's read cache keeps; the contract
//! is applied on every answer ([`Shaper::read_answer`]), so a cached read never hands out a
//! stale link. Nothing is ever passed through on failure: a store failure or a blob that is
//! not base64 is a [`ReadError`], which the gateway answers as a JSON-RPC error.

use base64::Engine;
use serde_json::{Value, json};

use super::contract::{ARTIFACT_META_KEY, ASSETS_META_KEY, LinkMinter, TRANSFORM_META_KEY, set_meta};
use super::offload::{self, CallContext, OffloadError, OffloadOptions, OffloadedItem};
use super::{Figures, Shaped, Shaper, json_len};
use crate::hosts::HostProfile;

/// Which read-like answer is being shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    /// A `resources/read` result (`contents`).
    Resource,
    /// A `prompts/get` result (`messages`).
    Prompt,
}

impl ReadKind {
    /// The MCP method whose result this is, for messages and events.
    pub(crate) fn method(self) -> &'static str {
        match self {
            ReadKind::Resource => "resources/read",
            ReadKind::Prompt => "prompts/get",
        }
    }
}

/// Why a read could not be shaped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    /// The answer is not what the method returns.
    #[error("{0}")]
    Invalid(String),
    /// The store refused what must not stay inline; the message is for the client (it names
    /// no server path), `cause` for the log and the events.
    #[error("{message}")]
    Store {
        /// One line for the client.
        message: String,
        /// The store's failure as it was, for the log and the events.
        cause: OffloadError,
    },
}

/// A read's answer after the offload, before the contract: what the cache keeps.
#[derive(Debug, Clone)]
pub struct OffloadedRead {
    value: Value,
    items: Vec<OffloadedItem>,
    report: stowage_transform::TransformReport,
    /// Contents entries that were text before they went to the pipeline as blobs.
    long_texts: Vec<usize>,
    bytes_in: u64,
    /// The upstream's `ttlMs`, when it gave one.
    pub ttl_ms: Option<u64>,
}

impl OffloadedRead {
    /// What the offload stored (for the events).
    pub fn report(&self) -> &stowage_transform::TransformReport {
        &self.report
    }

    #[cfg(test)]
    pub(crate) fn for_tests(value: Value) -> Self {
        OffloadedRead { value, items: Vec::new(), report: Default::default(), long_texts: Vec::new(), bytes_in: 0, ttl_ms: None }
    }
}

impl Shaper {
    /// The offload of a read's answer (`raw`, its JSON text); `inline_text_limit` is
    /// `gateway.resources.inline_text_if_under_chars`.
    pub async fn offload_read(
        &self,
        ctx: &CallContext,
        kind: ReadKind,
        raw: String,
        inline_text_limit: usize,
    ) -> Result<OffloadedRead, ReadError> {
        let bytes_in = raw.len() as u64;
        let upstream = &ctx.upstream;
        let unreadable =
            |e: serde_json::Error| ReadError::Invalid(format!("{}: unreadable result from upstream {upstream}: {e}", kind.method()));
        // A borrowed look first: a 50 MB blob is neither copied nor decoded to learn that no
        // text needs preparing, and the answer then goes to the pipeline as the upstream's own
        // text (one parse, there, which lifts big strings without copying them).
        let (needs_prep, ttl_ms) = {
            let peek: Peek<'_> = serde_json::from_str(&raw).map_err(unreadable)?;
            let contents = match (kind, &peek.contents) {
                (ReadKind::Resource, None) => {
                    return Err(ReadError::Invalid(format!("resources/read: upstream {upstream} answered without a contents list")));
                }
                (_, c) => c.as_deref().unwrap_or_default(),
            };
            (kind == ReadKind::Resource && contents.iter().any(|c| c.is_long_text(inline_text_limit)), peek.ttl_ms)
        };
        let (text, long_texts) = if needs_prep {
            let mut value: Value = serde_json::from_str(&raw).map_err(unreadable)?;
            let long = prepare_contents(&mut value, inline_text_limit);
            (value.to_string(), long)
        } else {
            (raw, Vec::new())
        };
        let off = offload::offload(self.pipeline(upstream), ctx, text, OffloadOptions::default()).await.map_err(|cause| {
            // The store's own message names paths and hosts of the server: it goes to the log
            // and the event bus, the client gets the code and what to do.
            let message = format!(
                "{}: the {} from upstream {upstream} could not be stored (the gateway's log says why), and it is not relayed inline; try again once the store has room",
                cause.code,
                kind.method()
            );
            ReadError::Store { message, cause }
        })?;
        if kind == ReadKind::Resource {
            check_remaining_blobs(upstream, &off.value)?;
        }
        Ok(OffloadedRead { value: off.value, items: off.items, report: off.report, long_texts, bytes_in, ttl_ms })
    }

    /// The answer to a read from its offload, for `host`: each offloaded entry a line with the
    /// reference and a freshly minted link (none for a host whose profile takes no signed
    /// links, as its tool results get none), the assets and the figures in `_meta`. A read
    /// with nothing offloaded is the upstream's answer as it came (`cached` still marks a hit).
    pub fn read_answer(
        &self,
        read: &OffloadedRead,
        kind: ReadKind,
        host: &HostProfile,
        cached: bool,
        started: std::time::Instant,
    ) -> Shaped {
        let mut value = read.value.clone();
        let mut figures = Figures { bytes_in: read.bytes_in, ..Default::default() };
        if read.items.is_empty() && !cached {
            figures.bytes_out = read.bytes_in;
            return Shaped { value, report: Some(read.report.clone()), error: None, figures };
        }
        let links = self.links_for(host);
        let mut assets: Vec<Value> = Vec::new();
        for item in &read.items {
            if item.reference.is_truncated() {
                // The NoOp store kept nothing: the entry says so, with no link or artifact.
                if let Some(entry) = entry_index(&item.pointer).and_then(|i| value.get_mut("contents")?.get_mut(i)) {
                    entry["mimeType"] = json!("text/plain");
                }
                continue;
            }
            let asset = asset_of(item, links);
            if kind == ReadKind::Resource {
                mark_contents_entry(&mut value, item, &asset, read.long_texts.contains(&entry_index(&item.pointer).unwrap_or(usize::MAX)));
            }
            if !assets.iter().any(|a| a["id"] == asset["id"]) {
                assets.push(asset);
            }
        }
        figures.artifacts = assets.len();
        if !assets.is_empty() {
            set_meta(&mut value, ASSETS_META_KEY, Value::Array(assets));
        }
        let mut stats = json!({
            "bytesIn": read.bytes_in,
            "bytesOut": 0,
            "artifacts": figures.artifacts,
            "ms": (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0,
        });
        if cached {
            stats["cached"] = json!(true);
        }
        // Measured once, on the answer as sent (this entry's number included).
        let base = json_len(&value);
        let extra = TRANSFORM_META_KEY.len() as u64 + 4;
        for _ in 0..3 {
            let total = base + json_len(&stats) + extra;
            if stats["bytesOut"] == json!(total) {
                break;
            }
            stats["bytesOut"] = json!(total);
        }
        figures.bytes_out = stats["bytesOut"].as_u64().unwrap_or(base);
        set_meta(&mut value, TRANSFORM_META_KEY, stats);
        Shaped { value, report: Some(read.report.clone()), error: None, figures }
    }
}

/// Hands text contents over the inline limit to the pipeline as blobs of their UTF-8 bytes
/// (see the module docs); returns the entries it changed.
fn prepare_contents(value: &mut Value, limit: usize) -> Vec<usize> {
    let mut changed = Vec::new();
    for (i, entry) in value.get_mut("contents").and_then(Value::as_array_mut).into_iter().flatten().enumerate() {
        let Some(map) = entry.as_object_mut() else { continue };
        if map.contains_key("blob") || !map.get("text").and_then(Value::as_str).is_some_and(|t| is_long(t, limit)) {
            continue;
        }
        let Some(Value::String(text)) = map.remove("text") else { continue };
        map.insert("blob".into(), Value::String(base64::engine::general_purpose::STANDARD.encode(text.as_bytes())));
        if !map.contains_key("mimeType") {
            map.insert("mimeType".into(), Value::String("text/plain".into()));
        }
        changed.push(i);
    }
    changed
}

/// Over the inline limit in characters (the byte length decides first: it is free).
fn is_long(text: &str, limit: usize) -> bool {
    text.len() > limit && text.chars().count() > limit
}

/// What [`Shaper::offload_read`] needs to know of an answer before deciding how to hand it
/// over, borrowed from its text (blobs are skipped, not copied).
#[derive(serde::Deserialize)]
struct Peek<'a> {
    #[serde(default, borrow)]
    contents: Option<Vec<PeekEntry<'a>>>,
    #[serde(default, rename = "ttlMs")]
    ttl_ms: Option<u64>,
}

#[derive(serde::Deserialize)]
struct PeekEntry<'a> {
    #[serde(default, borrow)]
    text: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    blob: Option<serde::de::IgnoredAny>,
}

impl PeekEntry<'_> {
    fn is_long_text(&self, limit: usize) -> bool {
        self.blob.is_none() && self.text.as_deref().is_some_and(|t| is_long(t, limit))
    }
}

/// `/contents/3/blob` → 3.
fn entry_index(pointer: &str) -> Option<usize> {
    pointer.strip_prefix("/contents/")?.split('/').next()?.parse().ok()
}

/// A blob the pipeline left in place is small, or not base64 at all: the second kind is an
/// upstream fault that must not reach the client as if it were content.
fn check_remaining_blobs(upstream: &str, value: &Value) -> Result<(), ReadError> {
    let Some(contents) = value.get("contents").and_then(Value::as_array) else { return Ok(()) };
    for (i, entry) in contents.iter().enumerate() {
        let Some(blob) = entry.get("blob").and_then(Value::as_str) else { continue };
        if let Err(e) = base64::engine::general_purpose::STANDARD.decode(blob.trim_end()) {
            let uri = entry.get("uri").and_then(Value::as_str).unwrap_or("?");
            return Err(ReadError::Invalid(format!(
                "resources/read: upstream {upstream} sent contents[{i}] ({uri}) with a blob that is not base64 ({e}); the gateway does not relay it — fix the server's encoding"
            )));
        }
    }
    Ok(())
}

/// The asset entry of an offloaded item, with a signed link when links are on.
fn asset_of(item: &OffloadedItem, links: Option<&dyn LinkMinter>) -> Value {
    let r = &item.reference;
    let mut asset = json!({
        "id": r.id.to_string(),
        "uri": r.uri,
        "artifact": r.uri,
        "mimeType": r.mime_type,
        "size": r.size_bytes,
        "summary": item.summary,
    });
    if let Some((url, expires)) = links.and_then(|l| l.link(r)) {
        asset["uri"] = Value::String(url);
        asset["expiresAt"] = Value::String(expires);
    }
    asset
}

/// The replaced contents entry says what it is: a text entry (its `uri` kept) whose line
/// names the artifact and the link, with the artifact in its `_meta`.
fn mark_contents_entry(value: &mut Value, item: &OffloadedItem, asset: &Value, was_text: bool) {
    let Some(i) = entry_index(&item.pointer) else { return };
    let Some(entry) = value.get_mut("contents").and_then(|c| c.get_mut(i)).and_then(Value::as_object_mut) else { return };
    let mut line = entry.get("text").and_then(Value::as_str).unwrap_or(&item.summary).to_owned();
    if let Some(url) = asset.get("expiresAt").and(asset.get("uri")).and_then(Value::as_str) {
        line.push_str(&format!("; download: {url}"));
    }
    line.push_str("; read parts of it with artifact_read");
    entry.insert("text".into(), Value::String(line));
    // The entry is now text about the resource, not the resource's bytes.
    entry.insert("mimeType".into(), Value::String("text/plain".into()));
    let mut meta = asset.clone();
    if was_text {
        meta["original"] = json!("text");
    }
    let slot = entry.entry("_meta").or_insert_with(|| json!({}));
    if let Some(m) = slot.as_object_mut() {
        m.insert(ARTIFACT_META_KEY.into(), meta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_indices_come_from_contents_pointers_only() {
        assert_eq!(entry_index("/contents/3/blob"), Some(3));
        assert_eq!(entry_index("/contents/0"), Some(0));
        assert_eq!(entry_index("/messages/0/content"), None);
    }

    #[test]
    fn a_blob_that_is_not_base64_is_refused_with_its_entry_named() {
        let v = json!({"contents": [{"uri": "a://ok", "blob": "aGk="}, {"uri": "a://bad", "blob": "not base64!"}]});
        let e = check_remaining_blobs("fx", &v).unwrap_err().to_string();
        assert!(e.contains("contents[1] (a://bad)") && e.contains("not base64"), "{e}");
        assert!(check_remaining_blobs("fx", &json!({"contents": [{"uri": "a://t", "text": "x"}]})).is_ok());
    }
}
