//! Declared blobs in one call: input blobs become short-lived read links, output blobs upload
//! slots with write-only links; after the call, each slot's artifact (or why there is none)
//! is injected into the result the model sees.

use serde_json::{Value, json};
use stowage_core::ArtifactScope;
use stowage_http::{LinkService, SlotRequest, SlotState};

use super::inputs::{InputEnv, resolve_link};
use super::schema::{BlobFields, Shape};
use crate::tool_error::ToolError;

/// An upload slot opened for one output blob of a call.
#[derive(Debug)]
pub(crate) struct OpenSlot {
    pub field: String,
    pub slot: String,
}

/// Rewrites the declared blob fields of `arguments` into what the tool takes, opening an upload
/// slot for every output blob. Nothing is opened unless every input is accepted.
pub(crate) async fn translate_blobs(
    env: &InputEnv<'_>,
    links: Option<&LinkService>,
    tool: &str,
    fields: &BlobFields,
    scope: &ArtifactScope,
    arguments: &mut Value,
) -> Result<Vec<OpenSlot>, ToolError> {
    if !arguments.is_object() {
        *arguments = json!({});
    }
    for f in &fields.inputs {
        let Some(given) = arguments.get(&f.name) else { continue };
        let (uri, claimed) = match given {
            Value::String(s) => (s.clone(), None),
            Value::Object(o) => match o.get("uri").and_then(Value::as_str) {
                Some(u) => (u.to_owned(), o.get("contentType").and_then(Value::as_str).map(str::to_owned)),
                None => {
                    return Err(ToolError::bad_request(format!(
                        "{tool}'s {} needs {{\"uri\": \"artifact://…\"}}: the artifact:// URI of an earlier result, or an https:// URL",
                        f.name
                    )));
                }
            },
            _ => return Err(ToolError::bad_request(format!("{tool}'s {} must be {{\"uri\": \"artifact://…\"}}", f.name))),
        };
        let (url, content_type) = resolve_link(env, tool, scope, &uri).await?;
        let content_type = claimed.or(content_type);
        arguments[&f.name] = match f.shape {
            Shape::UrlString => Value::String(url),
            Shape::Object => match content_type {
                Some(t) => json!({"url": url, "contentType": t}),
                None => json!({"url": url}),
            },
        };
    }
    let mut slots = Vec::new();
    if fields.outputs.is_empty() {
        return Ok(slots);
    }
    let links = links.ok_or_else(|| {
        ToolError::bad_request(format!("{tool} writes its output to an upload link, but signed links are off: enable [links]"))
    })?;
    for f in &fields.outputs {
        let asked = arguments.get(&f.name);
        let accept = asked.and_then(|a| a.get("accept")).and_then(Value::as_str).map(str::to_owned).or_else(|| f.accept.clone());
        let prefix = asked.and_then(|a| a.get("prefix")).and_then(Value::as_str).map(str::to_owned);
        let request = SlotRequest {
            max_bytes: env.config.max_output_bytes,
            accept: accept.iter().flat_map(|a| a.split(',')).map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect(),
            ttl: Some(env.config.input_link_ttl()),
            filename: prefix,
            namespace: Some(namespace(tool)),
        };
        let slot = links.open_upload_slot(scope, request).map_err(|e| ToolError {
            code: e.code,
            message: format!("cannot open an upload slot for {tool}'s {}: {}", f.name, e.message),
        })?;
        arguments[&f.name] = match f.shape {
            Shape::UrlString => Value::String(slot.link.url.clone()),
            Shape::Object => match &accept {
                Some(a) => json!({"url": slot.link.url, "accept": a}),
                None => json!({"url": slot.link.url}),
            },
        };
        slots.push(OpenSlot { field: f.name.clone(), slot: slot.slot });
    }
    Ok(slots)
}

/// An artifact id's namespace from a tool name (ids allow `[A-Za-z0-9_.-]`).
fn namespace(tool: &str) -> String {
    let ns: String = tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).take(48).collect();
    if ns.is_empty() { "blob".into() } else { ns }
}

/// After the call: what became of each slot, injected where the model and programs read.
/// A written slot gives `{uri, contentType, size, sha256}`; one never written (or whose
/// upload did not finish) says so, and no artifact exists for it. What detected inputs were
/// filled with goes to `_meta["io.stowage/inputs"]`, for programs only (the model wrote the
/// URIs itself).
pub(crate) fn inject(links: Option<&LinkService>, slots: &[OpenSlot], filled: &[super::Filled], result: &mut Value) {
    if !result.is_object() {
        return;
    }
    if !filled.is_empty() {
        if !result.get("_meta").is_some_and(Value::is_object) {
            result["_meta"] = json!({});
        }
        result["_meta"]["io.stowage/inputs"] = serde_json::to_value(filled).unwrap_or(Value::Null);
    }
    if slots.is_empty() {
        return;
    }
    let mut lines = Vec::new();
    let mut meta = serde_json::Map::new();
    for s in slots {
        // Closed as it is read: a tool cannot fill a slot after its result said it was empty.
        let state = links.and_then(|l| l.close_slot(&s.slot));
        let (entry, line) = match state {
            Some(SlotState::Done(a)) => {
                let mime = a.mime_type.clone().unwrap_or_else(|| "application/octet-stream".into());
                (
                    json!({"uri": a.uri, "contentType": mime, "size": a.size_bytes, "sha256": a.sha256}),
                    format!("{}: {} ({mime}, {} bytes, sha256 {})", s.field, a.uri, a.size_bytes, a.sha256),
                )
            }
            Some(SlotState::Uploading) => (
                json!({"error": "slot_not_written", "message": "the tool's upload did not finish; no artifact was made"}),
                format!("{}: not written — the tool's upload did not finish; no artifact was made", s.field),
            ),
            _ => (
                json!({"error": "slot_not_written", "message": "the tool did not write this output; no artifact was made"}),
                format!("{}: not written — the tool did not write this output; no artifact was made", s.field),
            ),
        };
        if let Some(Value::Object(sc)) = result.get_mut("structuredContent") {
            match sc.get_mut(&s.field) {
                Some(Value::Object(existing)) => {
                    existing.remove("url");
                    if let Value::Object(e) = &entry {
                        existing.extend(e.clone());
                    }
                }
                _ => {
                    sc.insert(s.field.clone(), entry.clone());
                }
            }
        }
        meta.insert(s.field.clone(), entry);
        lines.push(line);
    }
    if let Some(Value::Array(content)) = result.get_mut("content") {
        content.push(json!({"type": "text", "text": lines.join("\n")}));
    } else {
        result["content"] = json!([{"type": "text", "text": lines.join("\n")}]);
    }
    if !result.get("_meta").is_some_and(Value::is_object) {
        result["_meta"] = json!({});
    }
    result["_meta"]["io.stowage/blobs"] = Value::Object(meta);
}
