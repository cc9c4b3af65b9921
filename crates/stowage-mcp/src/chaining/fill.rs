//! Detected inputs in one call: every `artifact://` URI the model wrote in a chained property
//! becomes the form that property asks for, with its mime/filename sibling filled when the
//! model left it empty.
//!
//! Everything that can refuse a call is checked before a byte is read: the owner (the
//! caller's, as in configured chaining), expiry, `max_materialize_bytes` (each artifact) and
//! the per-call totals (`max_materialize_bytes_per_call`, `max_file_bytes_per_call`), the property's
//! `maxLength` (counted as base64 for base64 properties), its media types (`contentMediaType`,
//! the mime sibling's `enum`) and the upstream's `max_request_bytes`. One refusal refuses the
//! call; the upstream is not called.
//!
//! Which URIs are rewritten follows from what a value of the form can be: in a base64 or path
//! property no URI is a valid value, so every URI goes through configured chaining's scheme
//! policy (`https://` fetched from allowed hosts only, others refused); in a URL property only
//! `artifact://` is rewritten and other URLs are the tool's to fetch, as without the gateway;
//! in a text property only `artifact://` is, since a URI can be the text itself.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use stowage_core::{ArtifactRef, ArtifactScope};
use stowage_store::{Access, ArtifactStore};

use super::InputMode;
use super::detect::{DetectedInput, Step, ToolInputs, media_type_allowed};
use super::inputs::{InputEnv, Materialized, check_call_totals, check_size, inline, lookup, materialize, scheme_of, store_error};
use crate::tool_error::ToolError;

/// The body limit of the upstream a call goes to.
pub(crate) struct Limits<'a> {
    pub upstream: &'a str,
    /// `gateway.servers.NAME.max_request_bytes`.
    pub max_request_bytes: Option<u64>,
}

/// What one chained property of a call was filled with (never the bytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Filled {
    /// JSON Pointer into the call's arguments.
    pub pointer: String,
    /// The detected property (`attachments[].content_base64`).
    pub property: String,
    /// The form it was filled in.
    pub form: InputMode,
    /// What the model wrote there.
    pub uri: String,
    /// The artifact's (or fetched body's) size in bytes.
    pub size: u64,
    /// Characters sent in its place (base64 is 4/3 of the bytes).
    pub sent: u64,
    /// The artifact's media type, when known.
    #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Siblings the gateway set (`mime_type`, `filename`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<String>,
}

/// One URI to rewrite.
struct Target<'a> {
    pointer: String,
    uri: String,
    input: &'a DetectedInput,
}

/// Fills the chained properties of `arguments` (a tool's, as `inputs` detected them).
pub(crate) async fn fill(
    env: &InputEnv<'_>,
    tool: &str,
    inputs: &ToolInputs,
    scope: &ArtifactScope,
    arguments: &mut Value,
    limits: &Limits<'_>,
) -> Result<(Materialized, Vec<Filled>), ToolError> {
    let targets = find_targets(arguments, inputs);
    let mut done = Materialized::default();
    if targets.is_empty() {
        return Ok((done, Vec::new()));
    }
    // 1. Every check that needs no bytes, for every target, before anything is read.
    let looked_up = check_targets(env, tool, scope, &targets, arguments.to_string().len() as u64, limits).await?;
    // 2. The bytes, in the form each property asks for.
    let mut filled = Vec::with_capacity(targets.len());
    let mut pending = Vec::with_capacity(targets.len());
    let mut replacements = Vec::with_capacity(targets.len());
    for (t, found) in targets.iter().zip(looked_up) {
        let Some((f, siblings, new)) = fill_one(env, tool, scope, t, found, &mut done).await? else { continue };
        filled.push(f);
        pending.push(siblings);
        replacements.push((t.pointer.clone(), new));
    }
    for (pointer, new) in replacements {
        if let Some(slot) = arguments.pointer_mut(&pointer) {
            *slot = Value::String(new);
            done.rewritten += 1;
        }
    }
    // 3. Siblings the model left empty.
    for (f, pending) in filled.iter_mut().zip(pending) {
        let parent = f.pointer.rsplit_once('/').map_or("", |(p, _)| p).to_owned();
        let Some(Value::Object(obj)) = arguments.pointer_mut(&parent) else { continue };
        for (key, value) in pending {
            if obj.get(&key).is_none_or(|v| v.is_null() || v.as_str() == Some("")) {
                obj.insert(key.clone(), Value::String(value));
                f.set.push(key);
            }
        }
    }
    Ok((done, filled))
}

/// The URIs in `arguments` at the detected inputs' positions: every `artifact://` one, and
/// other URIs in base64 and path properties (a URL or text property keeps what is not ours:
/// it may be the value itself).
fn find_targets<'a>(arguments: &Value, inputs: &'a ToolInputs) -> Vec<Target<'a>> {
    let mut targets = Vec::new();
    for input in &inputs.inputs {
        let mut found = Vec::new();
        positions(arguments, &input.steps, &mut String::new(), &mut found);
        for pointer in found {
            let Some(uri) = arguments.pointer(&pointer).and_then(Value::as_str) else { continue };
            let artifact = scheme_of(uri).is_some_and(|s| s.eq_ignore_ascii_case("artifact"));
            if !artifact && matches!(input.form, InputMode::Url | InputMode::Text) {
                continue;
            }
            targets.push(Target { pointer, uri: uri.to_owned(), input });
        }
    }
    targets
}

/// An artifact a target names, with the store that keeps it.
type Found<'s> = Option<(ArtifactRef, &'s Arc<dyn ArtifactStore>)>;

/// Step 1: each target's artifact looked up and checked against its property (media type,
/// size, maxLength) and the call's totals (bytes inline and in files, the upstream's request
/// limit), from sizes alone. `request` is the arguments' length as written.
async fn check_targets<'s>(
    env: &InputEnv<'s>,
    tool: &str,
    scope: &ArtifactScope,
    targets: &[Target<'_>],
    mut request: u64,
    limits: &Limits<'_>,
) -> Result<Vec<Found<'s>>, ToolError> {
    let mut looked_up = Vec::with_capacity(targets.len());
    // What the call materializes in all (and writes to files), from the artifacts' sizes.
    let (mut total, mut files, mut count) = (0u64, 0u64, 0usize);
    for t in targets {
        let what = || format!("{tool}'s {}", t.input.path);
        request = request.saturating_sub(t.uri.len() as u64);
        if !scheme_of(&t.uri).is_some_and(|s| s.eq_ignore_ascii_case("artifact")) {
            looked_up.push(None);
            continue;
        }
        let (meta, store) = lookup(env, scope, &t.uri).await?;
        let mime = meta.mime_type.clone().unwrap_or_else(|| "application/octet-stream".into());
        if matches!(t.input.form, InputMode::Base64 | InputMode::Path) && !media_type_allowed(&t.input.media_types, &mime) {
            return Err(ToolError::bad_request(format!(
                "{} is {mime}, and {} takes {} only; pass an artifact of that type",
                t.uri,
                what(),
                t.input.media_types.join(" or ")
            )));
        }
        let sent = match t.input.form {
            InputMode::Base64 => meta.size_bytes.div_ceil(3) * 4,
            InputMode::Text => meta.size_bytes,
            InputMode::Url | InputMode::Path => 256,
        };
        if t.input.form != InputMode::Url {
            check_size(env, tool, &t.uri, meta.size_bytes)?;
            total = total.saturating_add(meta.size_bytes);
            count += 1;
            if t.input.form == InputMode::Path {
                files = files.saturating_add(meta.size_bytes);
            }
        }
        if let Some(max) = t.input.max_length.filter(|&m| matches!(t.input.form, InputMode::Base64) && sent > m) {
            return Err(ToolError::bad_request(format!(
                "{} is {} bytes, {sent} characters as base64, and {} takes at most {max} (its maxLength); pass a smaller artifact",
                t.uri,
                meta.size_bytes,
                what()
            )));
        }
        request += sent;
        looked_up.push(Some((meta, store)));
    }
    check_call_totals(env, tool, total, files, Some(count))?;
    if let Some(max) = limits.max_request_bytes.filter(|&m| request > m) {
        return Err(ToolError::bad_request(format!(
            "{tool}'s arguments would be {request} bytes with the artifacts filled in, over the {max} bytes upstream {} accepts (gateway.servers.{}.max_request_bytes); pass a smaller artifact, or use a tool that takes a URL",
            limits.upstream, limits.upstream
        )));
    }
    Ok(looked_up)
}

/// Step 2 for one target: what its property gets (the value, and the siblings to set if the
/// model left them empty), or `None` when a URI that is not ours stays as written.
async fn fill_one(
    env: &InputEnv<'_>,
    tool: &str,
    scope: &ArtifactScope,
    t: &Target<'_>,
    found: Found<'_>,
    done: &mut Materialized,
) -> Result<Option<(Filled, Vec<(String, String)>, String)>, ToolError> {
    let Some((meta, store)) = found else {
        // Not ours, in a base64 or path property: configured chaining's policy decides.
        let Some(new) = materialize(env, tool, t.input.form, scope, &t.uri, done).await? else { return Ok(None) };
        let f = Filled {
            pointer: t.pointer.clone(),
            property: t.input.path.clone(),
            form: t.input.form,
            uri: t.uri.clone(),
            size: 0,
            sent: new.len() as u64,
            mime_type: None,
            set: Vec::new(),
        };
        return Ok(Some((f, Vec::new(), new)));
    };
    let mut file_ext = None;
    let new = match t.input.form {
        InputMode::Url => materialize(env, tool, InputMode::Url, scope, &t.uri, done).await?.unwrap_or_else(|| t.uri.clone()),
        form => {
            done.take(env, tool, form, meta.size_bytes)?;
            let bytes = store.get(&Access::owner_of(scope), &meta.id).await.map_err(store_error(&t.uri))?;
            file_ext = infer::get(&bytes).map(|k| k.extension());
            let new = inline(tool, form, &t.uri, meta.id.as_str(), &bytes, done)?;
            if let Some(max) = t.input.max_length.filter(|&m| form == InputMode::Text && new.chars().count() as u64 > m) {
                return Err(ToolError::bad_request(format!(
                    "{} is {} characters of text, and {tool}'s {} takes at most {max} (its maxLength); pass a smaller artifact",
                    t.uri,
                    new.chars().count(),
                    t.input.path
                )));
            }
            new
        }
    };
    let filename = meta.filename.clone().unwrap_or_else(|| match file_ext {
        Some(ext) => format!("{}.{ext}", meta.id.as_str()),
        None => meta.id.as_str().to_owned(),
    });
    let f = Filled {
        pointer: t.pointer.clone(),
        property: t.input.path.clone(),
        form: t.input.form,
        uri: t.uri.clone(),
        size: meta.size_bytes,
        sent: new.len() as u64,
        mime_type: meta.mime_type.clone(),
        set: Vec::new(),
    };
    Ok(Some((f, siblings(t.input, meta.mime_type.as_deref(), &filename), new)))
}

/// Each sibling the input has, with its value (set later if the model left it empty).
fn siblings(input: &DetectedInput, mime: Option<&str>, filename: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let (Some(k), Some(m)) = (&input.mime_sibling, mime) {
        out.push((k.clone(), m.to_owned()));
    }
    if let Some(k) = &input.filename_sibling {
        out.push((k.clone(), filename.to_owned()));
    }
    out
}

/// JSON Pointers of the strings `steps` reach in `v` that are URIs.
fn positions(v: &Value, steps: &[Step], at: &mut String, out: &mut Vec<String>) {
    match steps.split_first() {
        None => {
            if v.as_str().is_some_and(|s| scheme_of(s).is_some()) {
                out.push(at.clone());
            }
        }
        Some((Step::Key(k), rest)) => {
            if let Some(child) = v.as_object().and_then(|o| o.get(k)) {
                let len = at.len();
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                positions(child, rest, at, out);
                at.truncate(len);
            }
        }
        Some((Step::Items, rest)) => {
            for (i, item) in v.as_array().into_iter().flatten().enumerate() {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                positions(item, rest, at, out);
                at.truncate(len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn positions_follow_keys_and_items() {
        let args = json!({"attachments": [{"content_base64": "artifact://a_1"}, {"content_base64": "aGVsbG8="}, {"x": 1}], "a/b": "artifact://c_2"});
        let mut out = Vec::new();
        let steps = [Step::Key("attachments".into()), Step::Items, Step::Key("content_base64".into())];
        positions(&args, &steps, &mut String::new(), &mut out);
        assert_eq!(out, ["/attachments/0/content_base64"]);
        out.clear();
        positions(&args, &[Step::Key("a/b".into())], &mut String::new(), &mut out);
        assert_eq!(out, ["/a~1b"]);
        assert!(args.pointer(&out[0]).is_some());
    }
}
