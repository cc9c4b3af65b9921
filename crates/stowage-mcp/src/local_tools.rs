//! Tools the gateway answers itself: `artifact_url`, a fresh signed link for one of the
//! caller's own artifacts.
//!
//! Links expire (15 minutes by default) but artifacts live longer, so a model that wants to
//! hand a file to a person later asks for a new link instead of reusing a stale one. The
//! lookup is made as the calling session's owner, so the tool can never reveal another
//! session's artifact — an unknown id, a guessed id and someone else's id all answer
//! `artifact_not_found`.

use serde_json::{Value, json};
use stowage_core::{ArtifactScope, human_size};
use stowage_http::LinkService;

/// The tool's name in `tools/list`. It is not namespaced: it belongs to the gateway.
pub const ARTIFACT_URL_TOOL: &str = "artifact_url";

/// The tool definition added to every tool list while signed links are available.
pub fn artifact_url_def() -> Value {
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

/// Answers an `artifact_url` call for the session owning `scope`; always a CallToolResult.
pub async fn call_artifact_url(links: &LinkService, scope: &ArtifactScope, arguments: &Value) -> Value {
    let Some(id) = arguments.get("id").and_then(Value::as_str) else {
        return error("bad_request", "artifact_url needs {\"id\": \"<artifact id or artifact:// uri>\"}");
    };
    match links.fresh_link(scope, id).await {
        Ok((meta, link)) => {
            let expires = time::OffsetDateTime::from_unix_timestamp(link.expires_at as i64)
                .ok()
                .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
                .unwrap_or_default();
            let mime = meta.mime_type.clone().unwrap_or_else(|| "application/octet-stream".into());
            json!({
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
            })
        }
        Err(e) => error(e.code, &e.message),
    }
}

fn error(code: &str, message: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": format!("{code}: {message}")}],
        "structuredContent": {"error": {"code": code, "message": message}},
        "isError": true,
    })
}
