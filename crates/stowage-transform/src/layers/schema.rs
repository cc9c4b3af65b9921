//! Schema-marked fields (structured-planner RFC section 2): when a tool's output schema marks
//! a property `"artifact": true` or `"x-artifact": true`, that property is always extracted,
//! whatever its size or type, and the model sees the seed's placeholder (`<artifact:dict
//! size=42KB>`, `<artifact:list size=847 items>`) followed by the reference.
//!
//! Marks are found under `properties` at any depth and through `items` (which match every
//! element). For a `CallToolResult` the schema describes `structuredContent`; the JSON text
//! block that mirrors it is handled the same way, so the marked value does not leak through
//! the mirror.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::TransformConfig;
use crate::layers::base64::detect;
use crate::layers::payload_roots;
use crate::path::{FieldPath, split_last};
use crate::report::Layer;
use crate::stub::{self, TemplateVars, placeholder};
use crate::work::{Docs, Offload, Payload, Render};

/// `[transform.schema_fields]`: schema-marked fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaFieldsConfig {
    /// Extract properties an output schema marks as artifacts. Default true.
    pub enabled: bool,
}

impl Default for SchemaFieldsConfig {
    fn default() -> Self {
        SchemaFieldsConfig { enabled: true }
    }
}

/// The dot paths (with `*` for array items) of every marked property of `schema`.
pub fn marked_paths(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_marks(schema, &mut Vec::new(), &mut out, 0);
    out
}

fn is_marked(s: &Value) -> bool {
    s.get("artifact").and_then(Value::as_bool) == Some(true) || s.get("x-artifact").and_then(Value::as_bool) == Some(true)
}

fn collect_marks(schema: &Value, path: &mut Vec<String>, out: &mut Vec<String>, depth: usize) {
    if depth > 16 {
        return;
    }
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (k, sub) in props {
            path.push(k.replace('.', "\u{0}"));
            if is_marked(sub) {
                out.push(to_pointer(path));
            } else {
                collect_marks(sub, path, out, depth + 1);
            }
            path.pop();
        }
    }
    if let Some(items) = schema.get("items") {
        path.push("*".to_owned());
        if is_marked(items) {
            out.push(to_pointer(path));
        } else {
            collect_marks(items, path, out, depth + 1);
        }
        path.pop();
    }
}

fn to_pointer(path: &[String]) -> String {
    let mut p = String::new();
    for seg in path {
        if seg == "*" {
            p.push_str("/*");
        } else {
            crate::path::push_key(&mut p, &seg.replace('\u{0}', "."));
        }
    }
    p
}

/// The pass: extracts every marked value found in the tool's payload.
pub(crate) fn collect(docs: &mut Docs, config: &TransformConfig, output_schema: Option<&Value>) -> Vec<Offload> {
    let mut out = Vec::new();
    let Some(schema) = output_schema.filter(|_| config.schema_fields.enabled) else { return out };
    let marks = marked_paths(schema);
    if marks.is_empty() {
        return out;
    }
    let roots = payload_roots(docs);
    for mark in &marks {
        let Ok(path) = FieldPath::parse(mark) else { continue };
        for (doc, root_ptr) in &roots {
            let Some(root) = docs.docs[*doc].value.pointer(root_ptr) else { continue };
            for rel in path.resolve(root) {
                let ptr = format!("{root_ptr}{rel}");
                if let Some(off) = offload(docs, *doc, &ptr, config) {
                    out.push(off);
                }
            }
        }
    }
    out
}

fn offload(docs: &mut Docs, doc: usize, ptr: &str, _config: &TransformConfig) -> Option<Offload> {
    let value = docs.docs[doc].value.pointer_mut(ptr)?;
    if value.is_null() || value.as_str().is_some_and(|s| s.is_empty() || stub::is_stub(s)) {
        return None;
    }
    let value = std::mem::take(value);
    let (parent_ptr, key) = split_last(ptr)?;
    let parent = docs.docs[doc].value.pointer(parent_ptr).and_then(Value::as_object);
    let vars = TemplateVars::from_siblings(parent, Some(&key));
    let (payload, mime, size) = match &value {
        Value::String(s) => match detect(s) {
            Some(found) => {
                let n = found.bytes.len();
                (Payload::Bytes(found.bytes.into()), found.mime, n)
            }
            None => (Payload::Text(s.clone()), "text/plain; charset=utf-8".to_owned(), s.len()),
        },
        other => {
            let text = serde_json::to_string(other).expect("serialises");
            let n = text.len();
            (Payload::Text(text), "application/json".to_owned(), n)
        }
    };
    let ph = placeholder(&value, size as u64);
    Some(Offload {
        doc,
        ptr: ptr.to_owned(),
        payload,
        what: format!("schema-marked field {key}"),
        mime: Some(mime),
        filename: None,
        layer: Layer::SchemaField,
        render: Render::Placeholder { placeholder: ph },
        fatal: true,
        fallback: None,
        summary_template: Some(format!("Field '{key}' ({{size_human}}) stored as {{uri}}")),
        content_type: None,
        vars,
        source: Map::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn marks() {
        let schema = json!({
            "type": "object",
            "properties": {
                "summary": {"type": "string"},
                "chart_options": {"type": "object", "artifact": true},
                "raw_data": {"type": "array", "x-artifact": true},
                "pages": {"type": "array", "items": {"type": "object", "properties": {"png": {"type": "string", "artifact": true}}}},
                "a.b": {"type": "string", "artifact": true},
                "not": {"type": "string", "artifact": false}
            }
        });
        assert_eq!(marked_paths(&schema), ["/chart_options", "/raw_data", "/pages/*/png", "/a.b"]);
        assert!(marked_paths(&json!({"type": "object"})).is_empty());
    }
}
