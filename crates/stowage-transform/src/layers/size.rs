//! L0: the size safety net. Whatever is still big after the layers above is offloaded here.
//!
//! - A string of more than `max_inline_tokens` o200k tokens (or, whatever its tokens, more than
//!   `max_inline_chars` characters) becomes a text artifact; the model sees its head and its
//!   tail (together about `preview_chars` characters, two thirds head: the first lines of a log
//!   and the exception at the end of a trace) around a stub naming `artifact_read`, the gateway
//!   tool that reads further. Below the budget text stays whole: a model usually needs the file it asked for,
//!   and a preview it cannot read past is the wrong trade. The decision stays cheap: a string
//!   of at most `max_inline_tokens` bytes is never counted (a token is at least one byte), one
//!   over the character ceiling never either; only the band between them is tokenized.
//! - An array or object whose JSON is longer than `large_json_chars` becomes a JSON artifact;
//!   the model sees `{"$artifact": …, "preview": …, "schema": …}`: a preview that is itself
//!   valid JSON (first `preview_items` items, short strings) and an inferred schema (keys,
//!   types, array lengths), so it can reason about what it did not see, and the stub names
//!   `artifact_query`, the gateway tool that selects parts of it.
//!
//! Strings go first (and are committed), then containers, so a container artifact holds the
//! stubs of its long strings rather than the strings twice. These offloads are a safety net,
//! not a contract: when the store fails, the value is truncated with a warning instead of
//! failing the tool call.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::TransformConfig;
use crate::path::{push_index, push_key};
use crate::report::Layer;
use crate::stub::{TemplateVars, one_line};
use crate::tokens;
use crate::work::{Docs, Offload, Payload, Render};

/// `[transform.size_net]`: L0 (the string limit is the top-level `max_inline_chars`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SizeNetConfig {
    /// Offload oversized strings and JSON. Default true.
    pub enabled: bool,
    /// Characters of an offloaded string the model still sees: its head and its tail, two
    /// thirds head. Default 1000.
    pub preview_chars: usize,
    /// Arrays and objects whose JSON exceeds this many characters are offloaded with a
    /// preview and a schema. Default 20000.
    pub large_json_chars: usize,
    /// Items per array (and members per object) kept in a JSON preview. Default 3.
    pub preview_items: usize,
}

impl Default for SizeNetConfig {
    fn default() -> Self {
        SizeNetConfig { enabled: true, preview_chars: 1000, large_json_chars: 20_000, preview_items: 3 }
    }
}

/// The stub of an offloaded string names the tool that reads past the preview (kept short: it
/// is repeated for every offloaded string).
const TEXT_SUMMARY: &str = "Text of {chars} characters ({size_human}) stored as {uri}; read more with artifact_read";

/// L0 strings; an offloaded one keeps `preview_chars` characters of head and tail.
pub(crate) fn collect_strings(docs: &mut Docs, config: &TransformConfig, preview_chars: usize) -> Vec<Offload> {
    let mut out = Vec::new();
    if !config.size_net.enabled {
        return out;
    }
    let walk = StringWalk { config, preview_chars };
    for d in 0..docs.docs.len() {
        let mut ptr = String::new();
        walk.visit(&mut docs.docs[d].value, &mut ptr, d, &mut out);
    }
    out
}

struct StringWalk<'a> {
    config: &'a TransformConfig,
    preview_chars: usize,
}

impl StringWalk<'_> {
    fn visit(&self, value: &mut Value, ptr: &mut String, doc: usize, out: &mut Vec<Offload>) {
        let len = ptr.len();
        match value {
            Value::String(s) => {
                if let Some(tokens) = over_budget(s, self.config) {
                    let text = std::mem::take(s);
                    out.push(text_offload(text, tokens, doc, ptr.clone(), self.config, self.preview_chars));
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    push_index(ptr, i);
                    self.visit(item, ptr, doc, out);
                    ptr.truncate(len);
                }
            }
            // An image the user keeps inline (`keep_images_under_bytes`) is not text.
            Value::Object(map) if crate::layers::base64::is_kept_image(map, self.config) => {}
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    push_key(ptr, k);
                    self.visit(item, ptr, doc, out);
                    ptr.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// Whether a string is over the inline budget: `None` when it stays, else `Some(tokens)` with
/// its exact token count, or `None` inside when the character ceiling decided without one.
fn over_budget(s: &str, config: &TransformConfig) -> Option<Option<u64>> {
    // Byte length bounds the char count from above: most strings skip the count.
    if s.len() > config.max_inline_chars && s.chars().count() > config.max_inline_chars {
        return Some(None);
    }
    // A token is at least one byte, so this many bytes cannot exceed the budget.
    if s.len() as u64 <= config.max_inline_tokens {
        return None;
    }
    let tokens = tokens::count_exact(s);
    (tokens > config.max_inline_tokens).then_some(Some(tokens))
}

fn text_offload(text: String, tokens: Option<u64>, doc: usize, ptr: String, config: &TransformConfig, preview_chars: usize) -> Offload {
    let chars = text.chars().count();
    // Bytes for characters: a preview of mostly-ASCII text is about what was asked for, one of
    // wider characters a little shorter, never longer.
    let head_budget = preview_chars * 2 / 3;
    let (head, tail) = stowage_core::head_and_tail(&text, head_budget, preview_chars - head_budget);
    let omitted = chars - head.chars().count() - tail.chars().count();
    let render = Render::TextPreview { head: head.to_owned(), tail: tail.to_owned(), omitted };
    // Should the store fail, a prefix within the budget stays: the share of the characters the
    // budget is of the tokens when they were counted, else the character ceiling.
    let keep = match tokens {
        Some(t) if t > 0 => ((chars as u128 * config.max_inline_tokens as u128 / t as u128) as usize).min(config.max_inline_chars),
        _ => config.max_inline_chars,
    }
    .min(chars);
    let kept: String = text.chars().take(keep).collect();
    let fallback = format!("{kept}{}", config.clamp.suffix(chars - keep));
    let mut vars = TemplateVars::default();
    vars.set("chars", chars);
    if let Some(t) = tokens {
        vars.set("tokens", t);
    }
    Offload {
        doc,
        ptr,
        payload: Payload::Text(text),
        mime: Some("text/plain; charset=utf-8".to_owned()),
        filename: None,
        layer: Layer::SizeNet,
        render,
        fatal: false,
        fallback: Some(Value::String(fallback)),
        what: format!("text of {chars} characters"),
        summary_template: Some(TEXT_SUMMARY.to_owned()),
        content_type: Some("text".to_owned()),
        vars,
        source: Map::new(),
    }
}

/// L0 containers (after strings were committed).
pub(crate) fn collect_containers(docs: &mut Docs, config: &TransformConfig) -> Vec<Offload> {
    let mut out = Vec::new();
    if !config.size_net.enabled {
        return out;
    }
    for d in 0..docs.docs.len() {
        let mut ptr = String::new();
        // A CallToolResult must stay one, and its `content` a list of blocks (clients reject
        // anything else): their parts are offloaded one by one, and the clamp catches the sum.
        let keep: &[&str] = if d == 0 && crate::layers::is_call_tool_result(&docs.docs[0].value) { &["", "/content"] } else { &[] };
        containers(&mut docs.docs[d].value, &mut ptr, d, config, &mut out, keep);
    }
    out
}

/// Post-order: returns the value's approximate JSON length (after its children were offloaded),
/// so each node is measured once.
fn containers(value: &mut Value, ptr: &mut String, doc: usize, config: &TransformConfig, out: &mut Vec<Offload>, keep: &[&str]) -> usize {
    let len = ptr.len();
    let size = match value {
        // A kept image is an image block for the client, not JSON for the model: it neither
        // makes its container large nor is offloaded with it.
        Value::Object(map) if crate::layers::base64::is_kept_image(map, config) => return KEPT_IMAGE_SIZE,
        Value::Array(items) => {
            let mut total = 2;
            for (i, item) in items.iter_mut().enumerate() {
                push_index(ptr, i);
                total += containers(item, ptr, doc, config, out, keep) + 1;
                ptr.truncate(len);
            }
            total
        }
        Value::Object(map) => {
            let mut total = 2;
            for (k, item) in map.iter_mut() {
                push_key(ptr, k);
                total += k.len() + 4 + containers(item, ptr, doc, config, out, keep);
                ptr.truncate(len);
            }
            total
        }
        // A string this long survived the string pass on purpose (text within the token
        // budget, or a store failure's truncated copy): it is for the model to read whole, so
        // it does not make its container an artifact with 80-character previews. The clamp
        // still bounds the observation.
        Value::String(s) if s.len() > config.size_net.large_json_chars => 0,
        // Limits are in characters; counting is only worth it for long strings.
        Value::String(s) if s.len() > 64 => s.chars().count() + 2,
        Value::String(s) => s.len() + 2,
        Value::Number(n) => n.to_string().len(),
        Value::Bool(_) => 5,
        Value::Null => 4,
    };
    if size > config.size_net.large_json_chars
        && (value.is_array() || value.is_object())
        && !is_offloaded(value)
        && !keep.contains(&ptr.as_str())
    {
        let taken = std::mem::take(value);
        let offload = json_offload(&taken, doc, ptr.clone(), config, Layer::SizeNet);
        // The stub that replaces it is small; report that size upwards.
        return offload
            .map(|o| {
                out.push(o);
                300
            })
            .unwrap_or_else(|| {
                *value = taken;
                size
            });
    }
    size
}

/// What a kept image block counts for in its container's size: its keys and mime type.
const KEPT_IMAGE_SIZE: usize = 64;

fn is_offloaded(v: &Value) -> bool {
    v.get("$artifact").is_some() && v.get("preview").is_some()
}

/// A JSON artifact with a preview and a schema; used by L0 and by the clamp.
pub(crate) fn json_offload(value: &Value, doc: usize, ptr: String, config: &TransformConfig, layer: Layer) -> Option<Offload> {
    let text = serde_json::to_string(value).ok()?;
    let preview = preview(value, config.size_net.preview_items, 0);
    let schema = infer_schema(value, 0);
    let mut vars = TemplateVars::default();
    let what = match value {
        Value::Array(items) => {
            vars.set("items", items.len());
            "JSON array"
        }
        Value::Object(m) => {
            vars.set("items", m.len());
            "JSON object"
        }
        _ => "JSON value",
    };
    let template = match value {
        Value::Array(_) => "JSON array of {items} items ({size_human}) stored as {uri}; artifact_query selects parts",
        Value::Object(_) => "JSON object with {items} keys ({size_human}) stored as {uri}; artifact_query selects parts",
        _ => "JSON ({size_human}) stored as {uri}; artifact_query selects parts",
    };
    Some(Offload {
        doc,
        ptr,
        payload: Payload::Text(text),
        mime: Some("application/json".to_owned()),
        filename: None,
        layer,
        render: Render::JsonPreview { preview: preview.clone(), schema: schema.clone() },
        fatal: false,
        fallback: Some(json!({"preview": preview, "schema": schema, "truncated": true})),
        what: what.to_owned(),
        summary_template: Some(template.to_owned()),
        content_type: Some("json".to_owned()),
        vars,
        source: Map::new(),
    })
}

const PREVIEW_DEPTH: usize = 4;
const PREVIEW_STRING_CHARS: usize = 80;
const PREVIEW_MAX_KEYS: usize = 20;

/// A small, valid-JSON preview: first items of arrays, first keys of objects, short strings.
pub(crate) fn preview(value: &Value, items: usize, depth: usize) -> Value {
    match value {
        Value::String(s) => Value::String(one_line(s, PREVIEW_STRING_CHARS)),
        Value::Array(a) if depth >= PREVIEW_DEPTH => Value::String(format!("[{} items]", a.len())),
        Value::Object(m) if depth >= PREVIEW_DEPTH => Value::String(format!("{{{} keys}}", m.len())),
        Value::Array(a) => Value::Array(a.iter().take(items.max(1)).map(|v| preview(v, items, depth + 1)).collect()),
        Value::Object(m) => {
            let keys = if depth == 0 { PREVIEW_MAX_KEYS } else { items.max(1) * 3 };
            Value::Object(m.iter().take(keys).map(|(k, v)| (k.clone(), preview(v, items, depth + 1))).collect())
        }
        other => other.clone(),
    }
}

/// An inferred schema: JSON-Schema-like types, object keys, array lengths.
pub(crate) fn infer_schema(value: &Value, depth: usize) -> Value {
    match value {
        Value::Null => json!({"type": "null"}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Number(n) => json!({"type": if n.is_f64() { "number" } else { "integer" }}),
        Value::String(s) => json!({"type": "string", "maxLength": s.chars().count()}),
        Value::Array(items) => {
            let mut m = Map::new();
            m.insert("type".into(), "array".into());
            m.insert("length".into(), items.len().into());
            if depth < PREVIEW_DEPTH
                && let Some(first) = items.first()
            {
                m.insert("items".into(), infer_schema(first, depth + 1));
            }
            Value::Object(m)
        }
        Value::Object(obj) => {
            let mut m = Map::new();
            m.insert("type".into(), "object".into());
            if depth < PREVIEW_DEPTH {
                let props: Map<String, Value> =
                    obj.iter().take(PREVIEW_MAX_KEYS * 2).map(|(k, v)| (k.clone(), infer_schema(v, depth + 1))).collect();
                m.insert("properties".into(), Value::Object(props));
            }
            if obj.len() > PREVIEW_MAX_KEYS * 2 {
                m.insert("keys".into(), obj.len().into());
            }
            Value::Object(m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_small_valid_json() {
        let rows: Vec<Value> = (0..1000).map(|i| json!({"id": i, "name": format!("row {i}"), "tags": ["a", "b", "c", "d"]})).collect();
        let v = json!({"rows": rows, "total": 1000});
        let p = preview(&v, 3, 0);
        assert_eq!(p["rows"].as_array().unwrap().len(), 3);
        assert_eq!(p["rows"][0]["tags"], json!(["a", "b", "c"]));
        assert_eq!(p["total"], 1000);
        let s = infer_schema(&v, 0);
        assert_eq!(s["properties"]["rows"]["length"], 1000);
        assert_eq!(s["properties"]["rows"]["items"]["properties"]["id"]["type"], "integer");
        assert_eq!(s["properties"]["rows"]["items"]["properties"]["tags"]["length"], 4);
        assert!(serde_json::to_string(&p).unwrap().len() < 400);
    }
}
