//! Tools the gateway answers itself, one file each: `artifact_url` (a fresh signed link),
//! `artifact_read` (a window of a text artifact, or its lines matching a regex),
//! `artifact_query` (a question of an artifact's data: jq, JMESPath or a JSON Pointer over
//! JSON, CSV, NDJSON or lines; `jq/` runs programs, `input.rs` reads the formats, `page.rs`
//! pages answers), `artifact_describe` (the inferred shape of its data) and `artifact_list`
//! (the caller's artifacts; `resources.rs` also serves them as MCP resources).
//!
//! All of them look artifacts up as the calling session's owner, so none can reveal another
//! owner's artifact: an unknown id, a guessed id and someone else's id all answer
//! `artifact_not_found`, with the same message. Their errors are `isError: true` results with
//! one text block naming the code (`artifact_not_found: …`) and no `structuredContent`, so an
//! error never fails a client's validation against the tool's `outputSchema`.
//!
//! What the reader tools return is sized to the caller's host ([`ReadHints`]): at most
//! [`READ_BUDGET_BYTES`] bytes of UTF-8 for a host with no budget (about 6,000–8,000 o200k
//! tokens of code or prose, under the pipeline's default inline budget), less for one whose
//! bytes, lines or tokens are fewer; a cut answer says so and where the next part starts, the
//! first character it did not give. The payload is written once, where the host's model reads.
//! Their answers go through the shaper's host step and final limit, not through the transform
//! pipeline again: they are already small, and a window must reach the model as it is.

pub(crate) mod collect;
mod describe;
mod grep;
mod hints;
mod input;
mod jq;
mod media;
mod page;
mod query;
mod read;
pub(crate) mod resources;
mod url;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, cut_at_char, human_size};
use stowage_http::{ApiError, LinkService};
use stowage_store::{Access, ArtifactStore};

pub(crate) use describe::ARTIFACT_DESCRIBE_TOOL;
pub(crate) use hints::ReadHints;
pub(crate) use query::ARTIFACT_QUERY_TOOL;
pub(crate) use read::ARTIFACT_READ_TOOL;
pub(crate) use resources::ARTIFACT_LIST_TOOL;
pub use url::ARTIFACT_URL_TOOL;

/// The most bytes of artifact content one reader-tool answer carries.
pub(crate) const READ_BUDGET_BYTES: usize = 24_000;

/// Artifacts at least this large are scanned or parsed on the CPU pool, not on a runtime
/// worker (the gateway's rule for heavy work).
const CPU_POOL_BYTES: usize = 64 * 1024;

/// What the gateway's own tools can use: links for `artifact_url`, the store for the readers.
#[derive(Clone, Copy, Default)]
pub(crate) struct LocalTools<'a> {
    pub links: Option<&'a LinkService>,
    pub store: Option<&'a Arc<dyn ArtifactStore>>,
}

impl LocalTools<'_> {
    /// The reader tools (and artifacts as resources) need a store that keeps bytes.
    pub(crate) fn readers(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.store.filter(|s| !s.is_noop())
    }

    /// The definitions added to every tool list: `artifact_url` while signed links are
    /// available, the readers while a store keeps artifacts.
    pub(crate) fn defs(&self) -> Vec<Value> {
        let mut defs = Vec::new();
        if self.links.is_some() {
            defs.push(url::def());
        }
        if self.readers().is_some() {
            defs.push(read::def());
            defs.push(query::def());
            defs.push(describe::def());
            defs.push(collect::def());
            defs.push(resources::def());
        }
        defs
    }

    /// Whether `name` is one of the tools [`Self::defs`] lists.
    pub(crate) fn handles(&self, name: &str) -> bool {
        match name {
            ARTIFACT_URL_TOOL => self.links.is_some(),
            ARTIFACT_READ_TOOL | ARTIFACT_QUERY_TOOL | ARTIFACT_DESCRIBE_TOOL | ARTIFACT_LIST_TOOL => self.readers().is_some(),
            _ => false,
        }
    }

    /// Answers a call to one of them for the session owning `scope`; always a
    /// CallToolResult. `None` when `name` is not one of them (see [`Self::handles`]).
    /// `hints`: what the caller's host takes in one answer (the image edge, the text budget).
    pub(crate) async fn call(&self, name: &str, scope: &ArtifactScope, arguments: &Value, hints: ReadHints) -> Option<Value> {
        let result = match name {
            ARTIFACT_URL_TOOL => url::call(self.links?, scope, arguments).await,
            ARTIFACT_READ_TOOL => read::call(self.readers()?, scope, arguments, hints).await,
            ARTIFACT_QUERY_TOOL => query::call(self.readers()?, scope, arguments, hints).await,
            ARTIFACT_DESCRIBE_TOOL => describe::call(self.readers()?, scope, arguments, hints).await,
            ARTIFACT_LIST_TOOL => resources::call(self.readers()?, scope, arguments).await,
            _ => return None,
        };
        Some(result.unwrap_or_else(|e| e.into_result()))
    }
}

pub(crate) use crate::tool_error::ToolError;

/// The `id` argument: a bare id or an `artifact://` URI.
fn id_argument(tool: &str, arguments: &Value) -> Result<String, ToolError> {
    match arguments.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        _ => Err(ToolError::bad_request(format!("{tool} needs \"id\": an artifact id or artifact:// URI from an earlier tool result"))),
    }
}

/// An optional non-negative integer argument.
fn usize_argument(tool: &str, arguments: &Value, key: &str) -> Result<Option<usize>, ToolError> {
    match arguments.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(usize::try_from(n).unwrap_or(usize::MAX)))
            .ok_or_else(|| ToolError::bad_request(format!("{tool}: \"{key}\" must be a whole number of at least 0, not {v}"))),
    }
}

/// Media types that are certainly not text: refused before their bytes are read.
fn is_binary_type(mime: &str) -> bool {
    let essence = mime.split(';').next().unwrap_or("").trim();
    let (top, sub) = essence.split_once('/').unwrap_or((essence, ""));
    matches!(top, "image" | "audio" | "video" | "font" | "model") && !sub.ends_with("+xml") && !sub.ends_with("+json")
        || matches!(
            essence,
            "application/pdf"
                | "application/zip"
                | "application/gzip"
                | "application/x-gzip"
                | "application/x-bzip2"
                | "application/x-xz"
                | "application/x-tar"
                | "application/x-7z-compressed"
                | "application/vnd.sqlite3"
                | "application/wasm"
        )
        || essence.starts_with("application/vnd.openxmlformats")
        || essence.starts_with("application/vnd.oasis.opendocument")
        || essence.starts_with("application/vnd.ms-")
}

/// The record of artifact `id` (a bare id or an `artifact://` URI), looked up as `scope`'s
/// owner: another owner's id answers like one that never existed.
async fn meta_of(store: &Arc<dyn ArtifactStore>, scope: &ArtifactScope, id: &str) -> Result<ArtifactRef, ToolError> {
    let id = ArtifactId::parse_loose(id).map_err(|_| ToolError::from(ApiError::not_found()))?;
    store.meta(&Access::owner_of(scope), &id).await.map_err(|e| ToolError::from(ApiError::from(e)))
}

/// The artifact as text (a record looked up with [`meta_of`]); a binary artifact is refused
/// with what it is and what to use instead.
async fn text_of(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    tool: &str,
    meta: ArtifactRef,
) -> Result<(ArtifactRef, Bytes), ToolError> {
    let access = Access::owner_of(scope);
    let not_text = |meta: &ArtifactRef| {
        ToolError::bad_request(format!(
            "artifact {} is {} ({}), not text: {tool} reads text and JSON artifacts; call artifact_url for a download link",
            meta.id,
            meta.mime_type.as_deref().unwrap_or("binary"),
            human_size(meta.size_bytes)
        ))
    };
    if meta.mime_type.as_deref().is_some_and(is_binary_type) {
        return Err(not_text(&meta));
    }
    let bytes = store.get(&access, &meta.id).await.map_err(|e| ToolError::from(ApiError::from(e)))?;
    // Text is valid UTF-8 without NUL bytes; the check runs on the CPU pool for big artifacts.
    let is_text = if bytes.len() >= CPU_POOL_BYTES {
        let b = bytes.clone();
        crate::cpu_pool::run(move || is_text(&b)).await
    } else {
        is_text(&bytes)
    };
    if !is_text {
        return Err(not_text(&meta));
    }
    Ok((meta, bytes))
}

/// Text is valid UTF-8 without NUL bytes.
fn is_text(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes).is_ok() && memchr::memchr(0, bytes).is_none()
}

/// The text of bytes [`text_of`] checked.
fn as_str(bytes: &Bytes) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_types() {
        for m in [
            "image/png",
            "audio/wav",
            "application/pdf",
            "video/mp4",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        ] {
            assert!(is_binary_type(m), "{m}");
        }
        for m in ["text/plain; charset=utf-8", "application/json", "image/svg+xml", "application/octet-stream", "text/csv"] {
            assert!(!is_binary_type(m), "{m}");
        }
    }
}
