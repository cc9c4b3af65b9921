//! `resources/read` and `prompts/get` through the shaper ([`crate::shape::read`]): the
//! upstream's answer is offloaded once (what the read cache keeps), and every answer gets the
//! contract with fresh links; `artifact://` reads are answered here, and `auto_read_links`
//! inlines small `resource_link`s of tool results (off by default).
//!
//! Nothing is ever passed through on failure: a store failure or a blob that is not base64
//! answers the read with a JSON-RPC error that says so.

use std::sync::Arc;

use serde_json::{Value, json};
use stowage_store::ArtifactStore;

use super::Gateway;
use super::read_cache::CacheKey;
use crate::error::GatewayError;
use crate::events::{EventOwner, GatewayEvent};
use crate::jsonrpc::Message;
use crate::local_tools::resources as local_resources;
use crate::outbox::Outbox;
use crate::session::Session;
use crate::shape::read::{OffloadedRead, ReadError, ReadKind};
use crate::shape::{CallContext, Draft};

/// `_meta` key on a `resource_link` the gateway tried to read for the model and could not.
pub(super) const FETCH_ERROR_META_KEY: &str = "io.stowage/fetch_error";

impl Gateway {
    /// Shapes a successful `resources/read` or `prompts/get` reply from `upstream` in place;
    /// an error reply is left to the caller's usual relaying. Returns what the cache may keep
    /// (`None` for an error reply).
    pub(super) async fn shape_read(
        &self,
        session: &Session,
        upstream: &str,
        kind: ReadKind,
        reply: &mut Message,
    ) -> Result<Option<OffloadedRead>, GatewayError> {
        let started = std::time::Instant::now();
        let Some(raw) = reply.result.take() else { return Ok(None) };
        let ctx = CallContext {
            tool: kind.method().to_owned(),
            upstream: upstream.to_owned(),
            scope: session.scope.clone(),
            output_schema: None,
        };
        let owner = EventOwner::from(&session.scope);
        let read = match self
            .parts
            .shaper
            .offload_read(&ctx, kind, raw.into_string(), self.config.resources.inline_text_if_under_chars)
            .await
        {
            Ok(read) => read,
            Err(ReadError::Invalid(m)) => return Err(GatewayError::NotRelayed(m)),
            Err(ReadError::Store { message, cause }) => {
                self.parts.events.publish(GatewayEvent::StoreFailed {
                    call: 0,
                    owner,
                    tool: kind.method().to_owned(),
                    fatal: true,
                    message: cause.to_string(),
                });
                tracing::warn!(target: "stowage::call", upstream, method = kind.method(), error = %cause, "a read's content could not be stored");
                return Err(GatewayError::NotRelayed(message));
            }
        };
        for a in &read.report().artifacts {
            self.parts.events.publish(GatewayEvent::offloaded(0, owner.clone(), kind.method(), a));
        }
        reply.result =
            Some(crate::jsonrpc::to_raw(&self.parts.shaper.read_answer(&read, kind, &self.host_profile(session), false, started).value));
        Ok(Some(read))
    }

    /// `resources/read` of `params.uri` on upstream `u`: from the cache when a fresh entry is
    /// there for this owner (and, for a `per_client` upstream, this client's session), else
    /// from the upstream through the pipeline, kept for the `ttlMs` the upstream gave (none:
    /// not kept).
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
        if self.parts.artifacts.as_ref().is_none_or(|s| s.isolation() == stowage_core::Isolation::User) {
            owner.session_id = None;
        }
        let key = CacheKey { upstream: u, uri, owner, client };
        if let Some(hit) = self.parts.read_cache.get(&key) {
            metrics::counter!("stowage_resource_cache_hits_total").increment(1);
            return Ok(Message::response(
                Value::Null,
                &self.parts.shaper.read_answer(&hit, ReadKind::Resource, &self.host_profile(session), true, started).value,
            ));
        }
        let generation = self.parts.read_cache.generation(u, &key.uri);
        let mut reply = self.forward(session, u, "resources/read", params, outbox).await?;
        if let Some(read) = self.shape_read(session, upstream.name(), ReadKind::Resource, &mut reply).await? {
            // Kept only for as long as the upstream says its answer holds (`ttlMs`), at most
            // `cache_ttl_secs`: a read that states no lifetime may change at any moment (a
            // dynamic resource), so it is read through every time.
            if let Some(ms) = read.ttl_ms {
                let ttl = self.config.resources.cache_ttl().min(std::time::Duration::from_millis(ms));
                self.parts.read_cache.put(key, read, ttl, generation);
            }
        }
        Ok(reply)
    }

    /// `resource_link` blocks of a tool result whose `size` is under
    /// `gateway.resources.auto_read_if_size_under_bytes` are read (through the cache and the
    /// pipeline) and put in their place as embedded resources. Links stay lazy by default (the
    /// setting is 0), a link of unknown size or to an artifact is left alone, and a read that
    /// fails leaves the link with `_meta["io.stowage/fetch_error"]`: never a failed call.
    pub(super) async fn auto_read_links(self: &Arc<Self>, session: &Arc<Session>, draft: &mut Draft, outbox: &Outbox) {
        let limit = self.config.resources.auto_read_if_size_under_bytes;
        if limit == 0 {
            return;
        }
        let wanted = |b: &Value| {
            b.get("type").and_then(Value::as_str) == Some("resource_link")
                && b.get("size").and_then(Value::as_u64).is_some_and(|s| s < limit)
                && b.get("uri").and_then(Value::as_str).is_some_and(|u| !u.starts_with("artifact://"))
        };
        if !draft.value().get("content").and_then(Value::as_array).is_some_and(|c| c.iter().any(wanted)) {
            return;
        }
        let Some(content) = draft.value_mut().get_mut("content").and_then(Value::as_array_mut) else { return };
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
