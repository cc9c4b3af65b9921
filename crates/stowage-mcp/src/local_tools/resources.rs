//! The caller's artifacts as MCP resources, and `artifact_list` for hosts that never show
//! resources to the model.
//!
//! `resources/list` pages through the caller's own artifacts (owner-scoped, as every local
//! tool is), `resources/templates/list` offers `artifact://{id}`, and `resources/read` of an
//! `artifact://` URI returns the bytes only when they are small
//! (`gateway.resources.artifact_inline_max_bytes`, 64 KiB by default) or when the client asks
//! with `_meta["io.stowage/inline"]: true`, up to `artifact_inline_cap_bytes`. Otherwise it
//! returns a line of text with the metadata and a fresh signed link: some hosts read every
//! `resource_link` they see, and such a host must never pull a 50 MB blob back into the model.

use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};
use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, human_size};
use stowage_http::{ApiError, LinkService};
use stowage_store::{Access, ArtifactStore, ListQuery, StoreError};

use super::{ToolError, usize_argument};
use crate::config::ResourcesConfig;

/// The tool's name in `tools/list` (the gateway's own, not namespaced).
pub(crate) const ARTIFACT_LIST_TOOL: &str = "artifact_list";

/// `_meta` key a client sets on `resources/read` to get an artifact's bytes even when they are
/// over the inline limit (up to the cap).
pub(crate) const INLINE_META_KEY: &str = "io.stowage/inline";

/// Prefix of a `resources/list` cursor that pages through artifacts.
const CURSOR_PREFIX: &str = "artifacts:";

/// Artifacts per `resources/list` page and per `artifact_list` answer at most.
pub const PAGE: usize = 100;

/// The resource template every client sees while the store keeps artifacts.
pub(crate) fn template() -> Value {
    json!({
        "uriTemplate": "artifact://{id}",
        "name": "artifact",
        "title": "A stored artifact",
        "description": "An artifact the gateway stored for you (an id from a tool result). Small ones read inline; larger ones answer with a fresh download link.",
    })
}

/// Whether a `resources/list` cursor is one of ours.
pub(crate) fn is_artifact_cursor(cursor: &str) -> bool {
    cursor.starts_with(CURSOR_PREFIX)
}

/// One page of the caller's artifacts as resources, and the cursor of the next page.
pub(crate) async fn list(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    cursor: Option<&str>,
    limit: usize,
) -> Result<(Vec<Value>, Option<String>), ToolError> {
    let store_cursor = match cursor {
        None => None,
        Some(c) => Some(
            c.strip_prefix(CURSOR_PREFIX)
                .filter(|c| !c.is_empty())
                .ok_or_else(|| ToolError::bad_request(format!("unknown cursor {c:?}: pass the nextCursor of the previous page")))?
                .to_owned(),
        ),
    };
    let query = ListQuery { owner: Some(scope.owner()), cursor: store_cursor, limit: limit.clamp(1, PAGE), ..ListQuery::default() };
    let page = store.list(query).await.map_err(|e| ToolError::from(ApiError::from(e)))?;
    let items = page.items.iter().map(as_resource).collect();
    Ok((items, page.next.map(|n| format!("{CURSOR_PREFIX}{n}"))))
}

/// An artifact as a `Resource` entry of `resources/list`.
fn as_resource(r: &ArtifactRef) -> Value {
    let mut v = json!({
        "uri": r.uri,
        "name": r.filename.clone().unwrap_or_else(|| r.id.to_string()),
        "size": r.size_bytes,
    });
    if let Some(m) = &r.mime_type {
        v["mimeType"] = json!(m);
    }
    v
}

/// Answers `resources/read` of an `artifact://` URI for the session owning `scope`: the
/// `ReadResourceResult`, or `None` when the artifact is not the caller's (or does not exist:
/// the same answer, so ids cannot be probed).
pub(crate) async fn read(
    store: &Arc<dyn ArtifactStore>,
    links: Option<&LinkService>,
    config: &ResourcesConfig,
    scope: &ArtifactScope,
    uri: &str,
    inline_requested: bool,
) -> Result<Option<Value>, ToolError> {
    let Ok(id) = ArtifactId::parse_loose(uri) else { return Ok(None) };
    let access = Access::owner_of(scope);
    let meta = match store.meta(&access, &id).await {
        Ok(m) => m,
        Err(StoreError::NotFound { .. } | StoreError::Expired { .. }) => return Ok(None),
        Err(e) => return Err(ToolError::from(ApiError::from(e))),
    };
    let limit = if inline_requested { config.artifact_inline_cap_bytes } else { config.artifact_inline_max_bytes };
    let mime = meta.mime_type.clone().unwrap_or_else(|| "application/octet-stream".into());
    if meta.size_bytes <= limit && !store.is_noop() {
        let bytes = store.get(&access, &id).await.map_err(|e| ToolError::from(ApiError::from(e)))?;
        let entry = match std::str::from_utf8(&bytes) {
            Ok(text) if !super::is_binary_type(&mime) && super::is_text(&bytes) => {
                json!({"uri": meta.uri, "mimeType": mime, "text": text})
            }
            _ => json!({"uri": meta.uri, "mimeType": mime, "blob": base64::engine::general_purpose::STANDARD.encode(&bytes)}),
        };
        return Ok(Some(json!({"contents": [entry]})));
    }
    let name = meta.filename.as_deref().map(|f| format!(" {f}")).unwrap_or_default();
    let mut line = format!("{}{name} ({mime}, {})", meta.id, human_size(meta.size_bytes));
    let mut artifact = json!({"id": meta.id.as_str(), "artifact": meta.uri, "mimeType": mime, "size": meta.size_bytes});
    match links.map(|l| l.link_for(&meta)) {
        Some(link) => {
            let expires = link.expires_rfc3339();
            line.push_str(&format!(": too large to read inline (over {}); download: {} (expires {expires})", human_size(limit), link.url));
            artifact["uri"] = json!(link.url);
            artifact["expiresAt"] = json!(expires);
        }
        None => line.push_str(&format!(": too large to read inline (over {}); no download links on this gateway", human_size(limit))),
    }
    if !inline_requested && meta.size_bytes <= config.artifact_inline_cap_bytes {
        line.push_str(&format!("; read it whole with _meta[\"{INLINE_META_KEY}\"] = true, or parts of it with artifact_read"));
    }
    Ok(Some(json!({
        "contents": [{"uri": meta.uri, "mimeType": "text/plain", "text": line, "_meta": {crate::shape::ARTIFACT_META_KEY: artifact}}],
    })))
}

/// The `artifact_list` tool definition.
pub(super) fn def() -> Value {
    json!({
        "name": ARTIFACT_LIST_TOOL,
        "title": "List your artifacts",
        "description": "Lists the artifacts stored for you (files, images and large results from earlier tool calls): id, name, type and size, newest last. Pass nextCursor back as cursor for more.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "cursor": {"type": "string", "description": "nextCursor from the previous answer"},
                "limit": {"type": "integer", "minimum": 1, "maximum": PAGE, "description": "how many at most (default 50)"},
            },
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "artifacts": {"type": "array", "items": {"type": "object"}},
                "nextCursor": {"type": "string"},
            },
            "required": ["artifacts"],
        },
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
    })
}

/// Answers an `artifact_list` call for the session owning `scope`.
pub(super) async fn call(store: &Arc<dyn ArtifactStore>, scope: &ArtifactScope, arguments: &Value) -> Result<Value, ToolError> {
    let limit = usize_argument(ARTIFACT_LIST_TOOL, arguments, "limit")?.unwrap_or(50);
    let cursor = match arguments.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(v) => return Err(ToolError::bad_request(format!("{ARTIFACT_LIST_TOOL}: \"cursor\" must be a string, not {v}"))),
    };
    let (items, next) = list(store, scope, cursor, limit).await?;
    let lines: Vec<String> = items
        .iter()
        .map(|r| {
            format!(
                "{} — {} ({}, {})",
                r["uri"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or(""),
                r["mimeType"].as_str().unwrap_or("unknown type"),
                human_size(r["size"].as_u64().unwrap_or(0))
            )
        })
        .collect();
    let mut text = if lines.is_empty() { "No artifacts stored for you yet.".to_owned() } else { lines.join("\n") };
    let mut structured = json!({"artifacts": items});
    if let Some(n) = next {
        text.push_str(&format!("\nMore: call {ARTIFACT_LIST_TOOL} with cursor {n:?}."));
        structured["nextCursor"] = json!(n);
    }
    Ok(json!({"content": [{"type": "text", "text": text}], "structuredContent": structured}))
}
