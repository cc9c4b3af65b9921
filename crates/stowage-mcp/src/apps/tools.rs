//! The apps tools: `artifact_view` for the model, and the app-only tools the view calls
//! through the host (`_meta.ui.visibility: ["app"]`, so hosts never offer them to the model).

use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};
use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, human_size};
use stowage_http::{ApiError, LinkService, describe};
use stowage_store::{Access, ArtifactStore};

use super::uploads::{CHUNK_BYTES, Declared};
use super::{Apps, VIEWER_URI};
use crate::local_tools::ToolError;

/// The tool that opens artifacts in the viewer: the one app tool a model is offered (the
/// others serve the viewer itself).
pub const ARTIFACT_VIEW_TOOL: &str = "artifact_view";
const FETCH: &str = "artifact_fetch";
const BEGIN: &str = "artifact_upload_begin";
const CHUNK: &str = "artifact_upload_chunk";
const COMMIT: &str = "artifact_upload_commit";
const ASSET: &str = "artifact_viewer_asset";

/// Every tool of the apps feature.
pub const APP_TOOLS: &[&str] = &[ARTIFACT_VIEW_TOOL, FETCH, BEGIN, CHUNK, COMMIT, ASSET];

/// Artifacts one `artifact_view` shows at most.
const VIEW_MAX: usize = 20;
/// The most bytes one `artifact_fetch` returns, and one `artifact_viewer_asset` part: base64
/// and JSON around them keep the result under 1 MB, which some hosts (and SDK clients'
/// stream readers) allow a tool result at most.
pub(super) const FETCH_BYTES: usize = 512 * 1024;

fn app_only(mut def: Value) -> Value {
    def["_meta"] = json!({"ui": {"resourceUri": VIEWER_URI, "visibility": ["app"]}});
    def
}

/// The tools' definitions.
pub(crate) fn defs() -> Vec<Value> {
    let mut view = json!({
        "name": ARTIFACT_VIEW_TOOL,
        "title": "Show artifacts to the user",
        "description": "Show stored artifacts (images, PDFs, audio, video, tables, JSON, text) to the user in an in-chat viewer, with their metadata, a download and an upload button. Pass the artifact:// references from earlier tool results. You get back a short text naming them; the bytes never enter your context.",
        "inputSchema": {"type": "object", "properties": {
            "ids": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": VIEW_MAX,
                    "description": "artifact ids or artifact:// URIs"}
        }, "required": ["ids"]},
        "annotations": {"readOnlyHint": true, "openWorldHint": false},
    });
    super::attach_viewer(&mut view);
    vec![
        view,
        app_only(json!({
            "name": FETCH,
            "description": "A chunk of an artifact's bytes for the viewer (at most 512 KiB a call), base64.",
            "inputSchema": {"type": "object", "properties": {
                "id": {"type": "string"}, "offset": {"type": "integer", "minimum": 0}, "length": {"type": "integer", "minimum": 1}
            }, "required": ["id"]},
            "annotations": {"readOnlyHint": true},
        })),
        app_only(json!({
            "name": BEGIN,
            "description": "Begin uploading a file from the viewer; returns an upload handle (and a PUT link when links are on).",
            "inputSchema": {"type": "object", "properties": {
                "name": {"type": "string"}, "mimeType": {"type": "string"},
                "size": {"type": "integer", "minimum": 1}, "sha256": {"type": "string"}
            }, "required": ["name", "mimeType", "size", "sha256"]},
        })),
        app_only(json!({
            "name": CHUNK,
            "description": "Send the next chunk (at most 1 MiB, base64) of an upload, at the offset of the bytes received so far.",
            "inputSchema": {"type": "object", "properties": {
                "upload": {"type": "string"}, "offset": {"type": "integer", "minimum": 0}, "data": {"type": "string"}
            }, "required": ["upload", "offset", "data"]},
        })),
        app_only(json!({
            "name": COMMIT,
            "description": "Finish an upload: when exactly the declared bytes arrived with the declared sha256, they become your artifact.",
            "inputSchema": {"type": "object", "properties": {"upload": {"type": "string"}}, "required": ["upload"]},
        })),
        app_only(json!({
            "name": ASSET,
            "description": "A renderer the viewer loads only when it needs it (the PDF renderer), in parts of at most 512 KiB.",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}, "part": {"type": "integer", "minimum": 0}}, "required": ["name"]},
            "annotations": {"readOnlyHint": true},
        })),
    ]
}

fn string<'a>(tool: &str, args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ToolError::bad_request(format!("{tool} needs \"{key}\" (a string)")))
}

fn number(tool: &str, args: &Value, key: &str, default: Option<u64>) -> Result<u64, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => default.ok_or_else(|| ToolError::bad_request(format!("{tool} needs \"{key}\" (a whole number)"))),
        Some(v) => {
            v.as_u64().ok_or_else(|| ToolError::bad_request(format!("{tool}: \"{key}\" must be a whole number of at least 0, not {v}")))
        }
    }
}

/// `id` as the caller's artifact; another owner's answers like one that never existed.
async fn meta(store: &Arc<dyn ArtifactStore>, scope: &ArtifactScope, id: &str) -> Result<(ArtifactId, ArtifactRef), ToolError> {
    let parsed = ArtifactId::parse_loose(id).map_err(|_| ToolError::from(ApiError::not_found()))?;
    let m = store.meta(&Access::owner_of(scope), &parsed).await.map_err(|e| ToolError::from(ApiError::from(e)))?;
    Ok((parsed, m))
}

fn described(m: &ArtifactRef, links: Option<&LinkService>) -> Value {
    let link = links.map(|l| l.link_for(m));
    describe(m, link.as_ref())
}

/// One line about an artifact, for hosts that show no UI (and for the model).
fn line(m: &ArtifactRef) -> String {
    let name = m.filename.as_deref().unwrap_or("unnamed");
    format!("{} ({name}, {}, {})", m.uri, m.mime_type.as_deref().unwrap_or("unknown type"), human_size(m.size_bytes))
}

/// One call: whose, with what, and what it may use.
struct Call<'a> {
    scope: &'a ArtifactScope,
    args: &'a Value,
    store: &'a Arc<dyn ArtifactStore>,
    links: Option<&'a LinkService>,
}

impl Call<'_> {
    /// The caller's access key under the store's isolation (who may continue an upload).
    fn owner(&self) -> String {
        self.scope.owner().access_key(self.store.isolation())
    }
}

impl Apps {
    /// Answers a call to one of [`APP_TOOLS`] for the session owning `scope`; always a
    /// CallToolResult.
    pub(crate) async fn call(
        &self,
        name: &str,
        scope: &ArtifactScope,
        args: &Value,
        store: &Arc<dyn ArtifactStore>,
        links: Option<&LinkService>,
    ) -> Value {
        let c = Call { scope, args, store, links };
        let result = match name {
            ARTIFACT_VIEW_TOOL => self.view(&c).await,
            FETCH => fetch(&c).await,
            BEGIN => self.begin(&c).await,
            CHUNK => self.chunk(&c).await,
            COMMIT => self.commit(&c).await,
            ASSET => self.asset(args),
            _ => Err(ToolError::bad_request(format!("{name} is not an apps tool"))),
        };
        result.unwrap_or_else(ToolError::into_result)
    }

    async fn view(&self, c: &Call<'_>) -> Result<Value, ToolError> {
        let (scope, args, store, links) = (c.scope, c.args, c.store, c.links);
        let ids: Vec<&str> = args.get("ids").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        if ids.is_empty() || ids.len() > VIEW_MAX {
            return Err(ToolError::bad_request(format!(
                "{ARTIFACT_VIEW_TOOL} needs \"ids\": 1 to {VIEW_MAX} artifact ids or artifact:// URIs from earlier tool results"
            )));
        }
        let mut shown = Vec::new();
        let mut lines = Vec::new();
        for id in ids {
            let (_, m) = meta(store, scope, id).await.map_err(|e| ToolError { message: format!("{id}: {}", e.message), ..e })?;
            lines.push(line(&m));
            shown.push(described(&m, links));
        }
        let noun = if shown.len() == 1 { "artifact" } else { "artifacts" };
        let text = format!("Showing {} {noun} to the user: {}", shown.len(), lines.join("; "));
        Ok(json!({"content": [{"type": "text", "text": text}], "structuredContent": {"artifacts": shown}}))
    }

    async fn begin(&self, c: &Call<'_>) -> Result<Value, ToolError> {
        let (scope, args, links) = (c.scope, c.args, c.links);
        let declared = Declared {
            name: string(BEGIN, args, "name")?.to_owned(),
            mime: string(BEGIN, args, "mimeType")?.to_owned(),
            size: number(BEGIN, args, "size", None)?,
            sha256: string(BEGIN, args, "sha256")?.to_ascii_lowercase(),
        };
        let begun = self.uploads.begin(scope, c.store.isolation(), declared, self.config.max_upload_bytes, links).await?;
        let expires = time::OffsetDateTime::now_utc() + begun.expires_in;
        let expires = expires.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
        Ok(json!({
            "content": [{"type": "text", "text": format!("upload {} open until {expires}", begun.handle)}],
            "structuredContent": {"upload": begun.handle, "chunk_bytes": CHUNK_BYTES, "expires_at": expires, "url": begun.url},
        }))
    }

    async fn chunk(&self, c: &Call<'_>) -> Result<Value, ToolError> {
        let args = c.args;
        let handle = string(CHUNK, args, "upload")?;
        let offset = number(CHUNK, args, "offset", None)?;
        let data =
            args.get("data").and_then(Value::as_str).ok_or_else(|| ToolError::bad_request(format!("{CHUNK} needs \"data\" (base64)")))?;
        let (received, total) = self.uploads.chunk(&c.owner(), handle, offset, data).await?;
        Ok(json!({
            "content": [{"type": "text", "text": format!("{received} of {total} bytes received")}],
            "structuredContent": {"received": received, "total": total},
        }))
    }

    async fn commit(&self, c: &Call<'_>) -> Result<Value, ToolError> {
        let (args, store, links) = (c.args, c.store, c.links);
        let handle = string(COMMIT, args, "upload")?;
        let stored = self.uploads.commit(&c.owner(), handle, store, links).await?;
        let name = stored.filename.clone().unwrap_or_else(|| "upload".into());
        Ok(json!({
            "content": [
                {"type": "text", "text": format!("stored as {}", line(&stored))},
                {"type": "resource_link", "uri": stored.uri, "name": name, "mimeType": stored.mime_type, "size": stored.size_bytes},
            ],
            "structuredContent": {"artifact": described(&stored, links)},
        }))
    }

    fn asset(&self, args: &Value) -> Result<Value, ToolError> {
        let name = string(ASSET, args, "name")?;
        let (_, text) = self.viewer.assets.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            let known: Vec<&str> = self.viewer.assets.iter().map(|(n, _)| *n).collect();
            ToolError::bad_request(format!("{ASSET}: no asset {name:?}; the viewer has {}", known.join(", ")))
        })?;
        let parts = split_parts(text, FETCH_BYTES);
        let part = usize::try_from(number(ASSET, args, "part", Some(0))?).unwrap_or(usize::MAX);
        let Some(piece) = parts.get(part) else {
            return Err(ToolError::bad_request(format!("{ASSET}: {name} has parts 0 to {}, not {part}", parts.len() - 1)));
        };
        Ok(json!({
            "content": [{"type": "text", "text": format!("{name}, part {} of {} ({} bytes)", part + 1, parts.len(), piece.len())}],
            "structuredContent": {"name": name, "part": part, "parts": parts.len(), "text": piece},
        }))
    }
}

/// `text` in pieces of at most `max` bytes, cut on character boundaries.
fn split_parts(text: &str, max: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text;
    while rest.len() > max {
        let mut end = max;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        parts.push(&rest[..end]);
        rest = &rest[end..];
    }
    parts.push(rest);
    parts
}

/// `artifact_fetch`: `length` bytes (at most 1 MiB) from `offset`, base64.
async fn fetch(c: &Call<'_>) -> Result<Value, ToolError> {
    let (scope, args, store) = (c.scope, c.args, c.store);
    let id = string(FETCH, args, "id")?;
    let offset = number(FETCH, args, "offset", Some(0))?;
    let length = number(FETCH, args, "length", Some(FETCH_BYTES as u64))?.clamp(1, FETCH_BYTES as u64);
    let (parsed, m) = meta(store, scope, id).await?;
    let total = m.size_bytes;
    let end = offset.saturating_add(length).min(total);
    let bytes = if offset >= total {
        bytes::Bytes::new()
    } else {
        store.get_range(&Access::owner_of(scope), &parsed, offset..end).await.map_err(|e| ToolError::from(ApiError::from(e)))?
    };
    let eof = offset.saturating_add(bytes.len() as u64) >= total;
    let text = if bytes.is_empty() {
        format!("no bytes at offset {offset} of {total}")
    } else {
        format!("bytes {offset}–{} of {total}", offset + bytes.len() as u64 - 1)
    };
    Ok(json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"data": base64::engine::general_purpose::STANDARD.encode(&bytes), "offset": offset, "total": total, "eof": eof},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cut_on_character_boundaries_and_join_back() {
        let text = "aé日".repeat(1000);
        let parts = split_parts(&text, 100);
        assert!(parts.iter().all(|p| p.len() <= 100 && !p.is_empty()));
        assert_eq!(parts.concat(), text);
        assert_eq!(split_parts("short", 100), ["short"]);
    }
}
