//! `artifact_url`: a fresh signed link for one of the caller's own artifacts.
//!
//! Links expire (15 minutes by default) but artifacts live longer, so a model that wants to
//! hand a file to a person later asks for a new link instead of reusing a stale one.

use serde_json::{Value, json};
use stowage_core::{ArtifactScope, human_size};
use stowage_http::LinkService;

use super::{ToolError, id_argument};

/// The tool's name in `tools/list`. It is not namespaced: it belongs to the gateway.
pub const ARTIFACT_URL_TOOL: &str = "artifact_url";

/// The tool definition.
pub(super) fn def() -> Value {
    json!({
        "name": ARTIFACT_URL_TOOL,
        "title": "Fresh download link for an artifact",
        "description": "Returns a fresh signed download URL for one of your artifacts (an id or artifact:// URI from an earlier tool result). Links expire; call this again for a new one.",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string", "description": "artifact id or artifact:// URI"}},
            "required": ["id"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "artifactUri": {"type": "string"},
                "url": {"type": "string"},
                "expiresAt": {"type": "string"},
                "mimeType": {"type": "string"},
                "size": {"type": "integer"},
            },
            "required": ["id", "artifactUri", "url", "expiresAt"],
        },
        "annotations": {"readOnlyHint": true, "idempotentHint": false, "openWorldHint": false},
    })
}

/// Answers an `artifact_url` call for the session owning `scope`.
pub(super) async fn call(links: &LinkService, scope: &ArtifactScope, arguments: &Value) -> Result<Value, ToolError> {
    let id = id_argument(ARTIFACT_URL_TOOL, arguments)?;
    let (meta, link) = links.fresh_link(scope, &id).await?;
    let expires = link.expires_rfc3339();
    let mime = meta.mime_type.clone().unwrap_or_else(|| "application/octet-stream".into());
    Ok(json!({
        "content": [{
            "type": "text",
            "text": format!("Download {} ({}, {}): {} (expires {expires})", meta.id, mime, human_size(meta.size_bytes), link.url),
        }],
        "structuredContent": {
            "id": meta.id.as_str(),
            "artifactUri": meta.uri,
            "url": link.url,
            "expiresAt": expires,
            "mimeType": mime,
            "size": meta.size_bytes,
        },
    }))
}
