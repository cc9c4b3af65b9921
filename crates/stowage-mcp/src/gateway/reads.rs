//! `resources/read` and `prompts/get` results through the pipeline: a blob resource or an
//! image in a prompt leaves the upstream as base64 and reaches the client as a one-line text,
//! the artifact's reference and a signed link, exactly as a tool result's would.
//!
//! The read policy (seed RFC §3.5): text contents up to `resources.inline_text_if_under_chars`
//! stay inline, longer text becomes an artifact, and a blob above
//! `transform.inline_binary_max_bytes` becomes an artifact. The offloader already knows a
//! `contents` entry (its blob becomes a text stub that keeps the entry's `uri`); long text is
//! handed to it as a blob of its UTF-8 bytes so that every offload takes the same road to the
//! store (sniffing, dedupe, summaries, events) — one encode of text that is leaving the
//! context anyway.
//!
//! Nothing is ever passed through on failure: a store failure or a blob that is not base64
//! answers the read with a JSON-RPC error that says so.

use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};
use stowage_store::ArtifactStore;

use super::Gateway;
use super::read_cache::CacheKey;
use crate::error::GatewayError;
use crate::events::{EventOwner, GatewayEvent};
use crate::jsonrpc::Message;
use crate::local_tools::resources as local_resources;
use crate::outbox::Outbox;
use crate::rewrite::{ARTIFACT_META_KEY, ASSETS_META_KEY, CallContext, LinkMinter, OffloadedItem, TRANSFORM_META_KEY};
use crate::session::Session;

/// `_meta` key on a `resource_link` the gateway tried to read for the model and could not.
pub const FETCH_ERROR_META_KEY: &str = "io.stowage/fetch_error";

/// Which read-like result is being rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadKind {
    Resource,
    Prompt,
}

impl ReadKind {
    fn method(self) -> &'static str {
        match self {
            ReadKind::Resource => "resources/read",
            ReadKind::Prompt => "prompts/get",
        }
    }
}

/// A read's result after the offload, before the contract: what the cache keeps. Links are
/// minted from it on every answer, so a cached read never hands out a stale link.
#[derive(Debug, Clone)]
pub(super) struct OffloadedRead {
    value: Value,
    items: Vec<OffloadedItem>,
    /// Contents entries that were text before they went to the offloader as blobs.
    long_texts: Vec<usize>,
    bytes_in: u64,
    bytes_out: u64,
    /// The upstream's `ttlMs`, when it gave one.
    ttl_ms: Option<u64>,
}

impl OffloadedRead {
    #[cfg(test)]
    pub(super) fn for_tests(value: Value) -> Self {
        OffloadedRead { value, items: Vec::new(), long_texts: Vec::new(), bytes_in: 0, bytes_out: 0, ttl_ms: None }
    }
}

impl Gateway {
    /// Rewrites a successful `resources/read` or `prompts/get` reply from `upstream` in place;
    /// an error reply is left to the caller's usual relaying. Returns what the cache may keep
    /// (`None` for an error reply).
    pub(super) async fn rewrite_read(
        &self,
        session: &Session,
        upstream: &str,
        kind: ReadKind,
        reply: &mut Message,
    ) -> Result<Option<OffloadedRead>, GatewayError> {
        let started = std::time::Instant::now();
        let Some(read) = self.offload_read(session, upstream, kind, reply).await? else { return Ok(None) };
        reply.result = Some(crate::jsonrpc::to_raw(&self.contract_read(&read, kind, started, false)));
        Ok(Some(read))
    }

    /// The offload half of [`Self::rewrite_read`].
    async fn offload_read(
        &self,
        session: &Session,
        upstream: &str,
        kind: ReadKind,
        reply: &mut Message,
    ) -> Result<Option<OffloadedRead>, GatewayError> {
        let Some(raw) = reply.result.take() else { return Ok(None) };
        let bytes_in = raw.get().len() as u64;
        let unreadable = |e: serde_json::Error| GatewayError::Internal(format!("{}: unreadable result: {e}", kind.method()));
        // A borrowed look first: a 50 MB blob is neither copied nor decoded to learn that no
        // text needs preparing, and the result then goes to the offloader as the upstream's
        // own text (one parse, there, which lifts big strings without copying them).
        let limit = self.config.resources.inline_text_if_under_chars;
        let (needs_prep, ttl_ms) = {
            let peek: Peek<'_> = serde_json::from_str(raw.get()).map_err(unreadable)?;
            let contents = match (kind, &peek.contents) {
                (ReadKind::Resource, None) => {
                    return Err(GatewayError::NotRelayed(format!("resources/read: upstream {upstream} answered without a contents list")));
                }
                (_, c) => c.as_deref().unwrap_or_default(),
            };
            (kind == ReadKind::Resource && contents.iter().any(|c| c.is_long_text(limit)), peek.ttl_ms)
        };
        let (text, long_texts) = if needs_prep {
            let mut value: Value = serde_json::from_str(raw.get()).map_err(unreadable)?;
            let long = prepare_contents(&mut value, limit);
            (value.to_string(), long)
        } else {
            (raw.into_string(), Vec::new())
        };
        let ctx = CallContext {
            tool: kind.method().to_owned(),
            upstream: upstream.to_owned(),
            scope: session.scope.clone(),
            output_schema: None,
        };
        let off = self.rewriter.offloader_for(upstream).offload(&ctx, text).await.map_err(|e| {
            self.events.publish(GatewayEvent::StoreFailed {
                call: 0,
                owner: EventOwner::from(&session.scope),
                tool: kind.method().to_owned(),
                fatal: true,
                message: e.to_string(),
            });
            // The store's own message names paths and hosts of the server: it goes to the log
            // and the event bus, the client gets the code and what to do.
            tracing::warn!(target: "stowage::call", upstream, method = kind.method(), error = %e, "a read's content could not be stored");
            GatewayError::NotRelayed(format!(
                "{}: the {} from upstream {upstream} could not be stored (the gateway's log says why), and it is not relayed inline; try again once the store has room",
                e.code,
                kind.method()
            ))
        })?;
        for a in &off.report.artifacts {
            self.events.publish(GatewayEvent::offloaded(0, EventOwner::from(&session.scope), kind.method(), a));
        }
        if kind == ReadKind::Resource {
            check_remaining_blobs(upstream, &off.value)?;
        }
        let bytes_out = off.report.bytes_out;
        Ok(Some(OffloadedRead { value: off.value, items: off.items, long_texts, bytes_in, bytes_out, ttl_ms }))
    }

    /// The client's result from an offloaded read: each offloaded entry a line with the
    /// reference and a freshly minted link, the assets and stats in `_meta`. A read with
    /// nothing offloaded is returned as the upstream sent it (`cached` still marks a hit).
    fn contract_read(&self, read: &OffloadedRead, kind: ReadKind, started: std::time::Instant, cached: bool) -> Value {
        let mut value = read.value.clone();
        if read.items.is_empty() && !cached {
            return value;
        }
        let links = self.rewriter.links.as_deref();
        let mut assets = Vec::new();
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
            if !assets.iter().any(|a: &Value| a["id"] == asset["id"]) {
                assets.push(asset);
            }
        }
        let mut stats = json!({
            "bytesIn": read.bytes_in,
            "bytesOut": read.bytes_out,
            "artifacts": assets.len(),
            "ms": (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0,
        });
        if cached {
            stats["cached"] = json!(true);
        }
        if !assets.is_empty() {
            crate::rewrite::set_meta(&mut value, ASSETS_META_KEY, Value::Array(assets));
        }
        crate::rewrite::set_meta(&mut value, TRANSFORM_META_KEY, stats);
        value
    }

    /// `resources/read` of `params.uri` on upstream `u`: from the cache when a fresh entry is
    /// there for this owner (and, for a `per_client` upstream, this client's session), else
    /// from the upstream through the pipeline, kept for the entry's TTL.
    pub(super) async fn read_from(
        self: &Arc<Self>,
        session: &Arc<Session>,
        u: usize,
        params: Value,
        outbox: &Outbox,
    ) -> Result<Message, GatewayError> {
        let started = std::time::Instant::now();
        let uri = params.get("uri").and_then(Value::as_str).unwrap_or("").to_owned();
        let upstream = &self.upstreams[u];
        let client = (!upstream.mode.is_shared()).then(|| session.upstream_key());
        // Entries are shared exactly as the artifacts in them are: by (tenant, user), and by
        // session too when the store isolates sessions.
        let mut owner = session.scope.owner();
        if self.artifacts.get().is_none_or(|s| s.isolation() == stowage_core::Isolation::User) {
            owner.session_id = None;
        }
        let key = CacheKey { upstream: u, uri, owner, client };
        if let Some(hit) = self.read_cache.get(&key) {
            metrics::counter!("stowage_resource_cache_hits_total").increment(1);
            return Ok(Message::response(Value::Null, &self.contract_read(&hit, ReadKind::Resource, started, true)));
        }
        let generation = self.read_cache.generation(u, &key.uri);
        let mut reply = self.forward(session, u, "resources/read", params, outbox).await?;
        if let Some(read) = self.rewrite_read(session, upstream.name(), ReadKind::Resource, &mut reply).await? {
            let ttl = self.config.resources.cache_ttl();
            let ttl = read.ttl_ms.map_or(ttl, |ms| ttl.min(std::time::Duration::from_millis(ms)));
            self.read_cache.put(key, read, ttl, generation);
        }
        Ok(reply)
    }

    /// `resource_link` blocks of a tool result whose `size` is under
    /// `gateway.resources.auto_read_if_size_under_bytes` are read (through the cache and the
    /// pipeline) and put in their place as embedded resources. Links stay lazy by default (the
    /// setting is 0), a link of unknown size or to an artifact is left alone, and a read that
    /// fails leaves the link with `_meta["io.stowage/fetch_error"]`: never a failed call.
    pub(super) async fn auto_read_links(self: &Arc<Self>, session: &Arc<Session>, result: &mut Value, outbox: &Outbox) {
        let limit = self.config.resources.auto_read_if_size_under_bytes;
        if limit == 0 {
            return;
        }
        let Some(content) = result.get_mut("content").and_then(Value::as_array_mut) else { return };
        let wanted = |b: &Value| {
            b.get("type").and_then(Value::as_str) == Some("resource_link")
                && b.get("size").and_then(Value::as_u64).is_some_and(|s| s < limit)
                && b.get("uri").and_then(Value::as_str).is_some_and(|u| !u.starts_with("artifact://"))
        };
        if !content.iter().any(wanted) {
            return;
        }
        let mut out = Vec::with_capacity(content.len());
        for mut block in std::mem::take(content) {
            if !wanted(&block) {
                out.push(block);
                continue;
            }
            let uri = block["uri"].as_str().unwrap_or_default().to_owned();
            match self.read_link(session, &uri, outbox).await {
                Ok(entries) => out.extend(entries.into_iter().map(|e| json!({"type": "resource", "resource": e}))),
                Err(e) => {
                    let meta = block.as_object_mut().map(|m| m.entry("_meta").or_insert_with(|| json!({})));
                    if let Some(Value::Object(m)) = meta {
                        m.insert(FETCH_ERROR_META_KEY.into(), Value::String(e.to_string()));
                    }
                    out.push(block);
                }
            }
        }
        *content = out;
    }

    /// The contents of `uri`, read as the session would read it.
    async fn read_link(self: &Arc<Self>, session: &Arc<Session>, uri: &str, outbox: &Outbox) -> Result<Vec<Value>, GatewayError> {
        let u = self.resource_route(session, uri).ok_or_else(|| GatewayError::ResourceNotFound(uri.to_owned()))?;
        let result = self.read_result(session, u, uri, outbox).await?;
        Ok(result.get("contents").and_then(Value::as_array).cloned().unwrap_or_default())
    }

    /// `resources/read` of `uri` on upstream `u` (through the cache and the pipeline) for the
    /// gateway's own use: the result, or the upstream's refusal as an error (not found as
    /// [`GatewayError::ResourceNotFound`]).
    pub(super) async fn read_result(
        self: &Arc<Self>,
        session: &Arc<Session>,
        u: usize,
        uri: &str,
        outbox: &Outbox,
    ) -> Result<Value, GatewayError> {
        let reply = self.read_from(session, u, json!({"uri": uri}), outbox).await?;
        if let Some(err) = &reply.error {
            let v: Value = serde_json::from_str(err.get()).unwrap_or(Value::Null);
            if v.get("code").and_then(Value::as_i64) == Some(crate::jsonrpc::code::RESOURCE_NOT_FOUND) {
                return Err(GatewayError::ResourceNotFound(uri.to_owned()));
            }
            let message = v.get("message").and_then(Value::as_str).unwrap_or("the upstream refused the read");
            return Err(GatewayError::NotRelayed(format!("reading {uri} failed: {message}")));
        }
        crate::upstream::result_value(&reply).map_err(|e| GatewayError::Internal(format!("resources/read: {e}")))
    }

    /// `resources/read` (and subscribe, unsubscribe) of one of the caller's artifacts: answered
    /// here, never routed upstream. Another owner's id is "not found", like a missing one.
    pub(super) async fn artifact_resource(
        &self,
        session: &Arc<Session>,
        store: &Arc<dyn ArtifactStore>,
        method: &str,
        uri: &str,
        params: &Value,
    ) -> Result<Message, GatewayError> {
        if method != "resources/read" {
            // Only one's own artifact can be subscribed to (another owner's is "not found").
            let id = stowage_core::ArtifactId::parse_loose(uri).ok();
            let found = match &id {
                Some(id) => store.meta(&stowage_store::Access::owner_of(&session.scope), id).await.is_ok(),
                None => false,
            };
            match (method, id) {
                ("resources/subscribe", Some(id)) if found => {
                    if session.subscriptions.lock().insert(uri.to_owned()) {
                        watch_artifact(session.clone(), store.clone(), uri.to_owned(), id);
                    }
                }
                ("resources/subscribe", _) => return Err(GatewayError::ResourceNotFound(uri.to_owned())),
                _ => {
                    session.subscriptions.lock().remove(uri);
                }
            }
            return Ok(Message::response(Value::Null, &json!({})));
        }
        let inline = params.pointer("/_meta/io.stowage~1inline").and_then(Value::as_bool).unwrap_or(false);
        let links = self.local_tools().links;
        match local_resources::read(store, links, &self.config.resources, &session.scope, uri, inline).await {
            Ok(Some(result)) => Ok(Message::response(Value::Null, &result)),
            Ok(None) => Err(GatewayError::ResourceNotFound(uri.to_owned())),
            Err(e) => Err(GatewayError::NotRelayed(e.to_string())),
        }
    }
}

/// Hands text contents over the inline limit to the offloader as blobs of their UTF-8 bytes
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

/// What [`Gateway::offload_read`] needs to know of a result before deciding how to hand it
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

/// How often a subscribed artifact with no expiry (or a far one) is looked at: it may still
/// go early (evicted for room, deleted).
const ARTIFACT_WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Artifacts never change, but they end: a subscriber to one hears
/// `notifications/resources/updated` when it expires or is removed, once, and the
/// subscription ends with it. The watch looks when the artifact is due to expire (and every
/// [`ARTIFACT_WATCH_EVERY`] otherwise) and stops when the session unsubscribes or ends.
fn watch_artifact(session: Arc<Session>, store: Arc<dyn ArtifactStore>, uri: String, id: stowage_core::ArtifactId) {
    tokio::spawn(async move {
        let access = stowage_store::Access::owner_of(&session.scope);
        loop {
            if session.is_closed() || !session.subscriptions.lock().contains(&uri) {
                return;
            }
            let wait = match store.meta(&access, &id).await {
                Ok(meta) => meta
                    .expires_at
                    .map(|at| {
                        let left = at - time::OffsetDateTime::now_utc();
                        std::time::Duration::try_from(left).unwrap_or_default() + std::time::Duration::from_millis(50)
                    })
                    .map_or(ARTIFACT_WATCH_EVERY, |d| d.min(ARTIFACT_WATCH_EVERY)),
                Err(stowage_store::StoreError::NotFound { .. } | stowage_store::StoreError::Expired { .. }) => {
                    session.subscriptions.lock().remove(&uri);
                    session.notify(&Message::notification("notifications/resources/updated", Some(&json!({"uri": uri}))));
                    return;
                }
                // The store is in trouble: look again later rather than announce an end.
                Err(_) => ARTIFACT_WATCH_EVERY,
            };
            tokio::select! {
                _ = session.closed() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    });
}

/// `/contents/3/blob` → 3.
fn entry_index(pointer: &str) -> Option<usize> {
    pointer.strip_prefix("/contents/")?.split('/').next()?.parse().ok()
}

/// A blob the offloader left in place is small, or not base64 at all: the second kind is an
/// upstream fault that must not reach the client as if it were content.
fn check_remaining_blobs(upstream: &str, value: &Value) -> Result<(), GatewayError> {
    let Some(contents) = value.get("contents").and_then(Value::as_array) else { return Ok(()) };
    for (i, entry) in contents.iter().enumerate() {
        let Some(blob) = entry.get("blob").and_then(Value::as_str) else { continue };
        if let Err(e) = base64::engine::general_purpose::STANDARD.decode(blob.trim_end()) {
            let uri = entry.get("uri").and_then(Value::as_str).unwrap_or("?");
            return Err(GatewayError::NotRelayed(format!(
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
