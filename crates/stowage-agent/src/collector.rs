//! The seed's `ArtifactCollector`, over what the gateway already did: the pipeline stored every
//! schema-marked field (`artifact` / `x-artifact`) and every offloaded value before the clamp,
//! and left the seed's placeholders in the result. The collector reads the transform report
//! and puts each value into the payload, per tool and field: inlined when it is at most
//! `inline_artifact_max_bytes` of JSON or text, otherwise (and for every binary or
//! pipeline-offloaded value) as its reference with a fresh signed link. It also gathers
//! [`Source`]s from tools marked `produces_sources` / `x-produces-sources`.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use stowage_core::ArtifactScope;
use stowage_http::LinkService;
use stowage_store::{Access, ArtifactStore};
use stowage_transform::{ArtifactRecord, Layer};

use crate::payload::Source;

/// A field marked `stream: true`: its value is sent as an `artifact_chunk` when the tool
/// returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Streamed {
    pub stream_id: String,
    pub chunk: Value,
    pub artifact_type: String,
}

/// Collects one run's artifacts and sources.
pub struct ArtifactCollector {
    artifacts: Map<String, Value>,
    sources: Vec<Source>,
    inline_max: u64,
    store: Option<Arc<dyn ArtifactStore>>,
    links: Option<LinkService>,
    scope: ArtifactScope,
}

impl ArtifactCollector {
    /// A collector reading as `scope`'s owner (the run's caller, session and trace).
    pub fn new(scope: ArtifactScope, inline_max: u64, store: Option<Arc<dyn ArtifactStore>>, links: Option<LinkService>) -> Self {
        ArtifactCollector { artifacts: Map::new(), sources: Vec::new(), inline_max, store, links, scope }
    }

    /// Collects what one call of `tool` (with `output_schema`) stored; returns the values of
    /// its `stream: true` fields, for `artifact_chunk` events.
    pub async fn collect(&mut self, tool: &str, output_schema: Option<&Value>, records: &[ArtifactRecord]) -> Vec<Streamed> {
        let streams = output_schema.map(stream_marks).unwrap_or_default();
        let mut streamed = Vec::new();
        let mut seen: Vec<(String, String)> = Vec::new();
        for r in records {
            let key = field_key(r);
            // The structured content and its JSON text mirror store the same value twice
            // (one blob, two records): it is one artifact.
            if seen.iter().any(|(k, id)| *k == key && *id == r.id) {
                continue;
            }
            seen.push((key.clone(), r.id.clone()));
            let value = self.value_of(r).await;
            if r.layer == Layer::SchemaField
                && let Some(stream_id) = streams.get(&key)
            {
                streamed.push(Streamed { stream_id: stream_id.clone(), artifact_type: artifact_type(&value), chunk: value.clone() });
            }
            let entry = self.artifacts.entry(tool.to_owned()).or_insert_with(|| Value::Object(Map::new()));
            let fields = entry.as_object_mut().expect("an object");
            let mut k = key.clone();
            let mut n = 2;
            while fields.get(&k).is_some_and(|v| !same_artifact(v, &r.id)) {
                k = format!("{key}_{n}");
                n += 1;
            }
            fields.insert(k, value);
        }
        streamed
    }

    /// Adds the sources in `structured` when `output_schema` marks the tool as producing them.
    pub fn collect_sources(&mut self, output_schema: Option<&Value>, structured: Option<&Value>) {
        let (Some(schema), Some(structured)) = (output_schema, structured) else { return };
        if !produces_sources(schema) {
            return;
        }
        let mapping = source_fields(schema);
        for item in source_items(structured) {
            if let Some(s) = to_source(item, &mapping) {
                let dup = self.sources.iter().any(|o| match (&o.url, &s.url) {
                    (Some(a), Some(b)) => a == b,
                    (None, None) => o.title == s.title,
                    _ => false,
                });
                if !dup {
                    self.sources.push(s);
                }
            }
        }
    }

    pub fn artifacts(&self) -> &Map<String, Value> {
        &self.artifacts
    }

    pub fn into_parts(self) -> (Map<String, Value>, Vec<Source>) {
        (self.artifacts, self.sources)
    }

    /// The inlined value, or the reference.
    async fn value_of(&self, r: &ArtifactRecord) -> Value {
        let mime = self.mime_of(r).await;
        let textual = mime.as_deref().is_some_and(|m| m.starts_with("application/json") || m.starts_with("text/"));
        if r.layer == Layer::SchemaField
            && textual
            && r.size_bytes <= self.inline_max
            && let Some(store) = &self.store
            && let Ok(bytes) = store.get(&Access::owner_of(&self.scope), &r.artifact.id).await
            && let Ok(text) = String::from_utf8(bytes.to_vec())
        {
            if mime.as_deref().is_some_and(|m| m.starts_with("application/json"))
                && let Ok(v) = serde_json::from_str::<Value>(&text)
            {
                return v;
            }
            return Value::String(text);
        }
        self.reference(r, mime)
    }

    /// The media type the store recorded (typed from the bytes when the producer claimed
    /// none), else the pipeline's claim.
    async fn mime_of(&self, r: &ArtifactRecord) -> Option<String> {
        if let Some(m) = r.artifact.mime_type.clone() {
            return Some(m);
        }
        if let Some(store) = &self.store
            && let Ok(meta) = store.meta(&Access::owner_of(&self.scope), &r.artifact.id).await
            && meta.mime_type.is_some()
        {
            return meta.mime_type;
        }
        r.mime_type.clone()
    }

    /// `{"$artifact": {id, uri, mime_type, size_bytes, sha256, url, expires_at}}`: never the bytes.
    fn reference(&self, r: &ArtifactRecord, mime: Option<String>) -> Value {
        let mut a = json!({
            "id": r.id,
            "uri": r.uri,
            "mime_type": mime,
            "size_bytes": r.size_bytes,
            "sha256": r.sha256,
        });
        if let Some(links) = &self.links {
            let link = links.link_for(&r.artifact);
            a["url"] = json!(link.url);
            a["expires_at"] = json!(link.expires_at);
        }
        json!({ "$artifact": a })
    }
}

fn same_artifact(v: &Value, id: &str) -> bool {
    v.pointer("/$artifact/id").and_then(Value::as_str) == Some(id)
}

/// The payload key of a record: the field's name (the last pointer segment, inside embedded
/// JSON when there is some), or the parent and index for an array element (`content_1`).
/// Not the filename: a field name is what the tool's schema promises, a filename is not.
fn field_key(r: &ArtifactRecord) -> String {
    let ptr = r.pointer.rsplit('#').next().unwrap_or("");
    let segs: Vec<String> = ptr.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
    match segs.as_slice() {
        [] => "observation".to_owned(),
        [.., parent, last] if last.parse::<u64>().is_ok() => format!("{parent}_{last}"),
        [.., last] => last.clone(),
    }
}

/// `dict`, `list`, `str`, … as in the seed's placeholders; `reference` for a stored value.
fn artifact_type(v: &Value) -> String {
    match v {
        Value::Object(m) if m.contains_key("$artifact") => "reference",
        Value::Object(_) => "dict",
        Value::Array(_) => "list",
        Value::String(_) => "str",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Null => "null",
    }
    .to_owned()
}

/// Top-level properties marked `stream: true`, with their stream id (`stream_id`, else the
/// field's name).
pub fn stream_marks(schema: &Value) -> HashMap<String, String> {
    let mut out = HashMap::new();
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (k, p) in props {
            if p.get("stream").and_then(Value::as_bool) == Some(true) || p.get("x-stream").and_then(Value::as_bool) == Some(true) {
                let id = p.get("stream_id").or_else(|| p.get("x-stream-id")).and_then(Value::as_str).unwrap_or(k);
                out.insert(k.clone(), id.to_owned());
            }
        }
    }
    out
}

fn produces_sources(schema: &Value) -> bool {
    ["produces_sources", "x-produces-sources"].iter().any(|k| schema.get(*k).and_then(Value::as_bool) == Some(true))
}

/// `source_field` marks anywhere in the schema: property name → `Source` field.
fn source_fields(schema: &Value) -> HashMap<String, String> {
    fn walk(s: &Value, out: &mut HashMap<String, String>, depth: usize) {
        if depth > 8 {
            return;
        }
        if let Some(Value::Object(props)) = s.get("properties") {
            for (k, p) in props {
                if let Some(t) = p.get("source_field").or_else(|| p.get("x-source-field")).and_then(Value::as_str) {
                    out.insert(k.clone(), t.to_owned());
                }
                walk(p, out, depth + 1);
            }
        }
        if let Some(items) = s.get("items") {
            walk(items, out, depth + 1);
        }
    }
    let mut out = HashMap::new();
    walk(schema, &mut out, 0);
    out
}

/// The items a source-producing result holds: the result itself when it looks like one
/// source, else the objects in its arrays (one level down).
fn source_items(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(items) => items.iter().filter(|i| i.is_object()).collect(),
        Value::Object(m) if m.contains_key("title") || m.contains_key("url") => vec![v],
        Value::Object(m) => m.values().filter_map(Value::as_array).flatten().filter(|i| i.is_object()).collect(),
        _ => Vec::new(),
    }
}

fn to_source(item: &Value, mapping: &HashMap<String, String>) -> Option<Source> {
    let obj = item.as_object()?;
    let mut fields: Map<String, Value> = Map::new();
    for (k, v) in obj {
        let target = mapping.get(k).map_or(k.as_str(), String::as_str);
        if matches!(target, "title" | "url" | "snippet" | "relevance_score") {
            fields.insert(target.to_owned(), v.clone());
        }
    }
    let url = fields.get("url").and_then(Value::as_str).map(str::to_owned);
    let title = fields.get("title").and_then(Value::as_str).map(str::to_owned).or_else(|| url.clone())?;
    Some(Source {
        title,
        url,
        snippet: fields.get("snippet").and_then(Value::as_str).map(str::to_owned),
        relevance_score: fields.get("relevance_score").and_then(Value::as_f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_mapped_and_deduplicated_by_url_then_title() {
        let schema = json!({
            "type": "object", "x-produces-sources": true,
            "properties": {"results": {"type": "array", "items": {"type": "object", "properties": {
                "title": {"type": "string"}, "url": {"type": "string"}, "snippet": {"type": "string"},
                "score": {"type": "number", "source_field": "relevance_score"}}}}}
        });
        let mut c = ArtifactCollector::new(ArtifactScope::default(), 1024, None, None);
        let page = json!({"results": [
            {"title": "A", "url": "https://a", "snippet": "a", "score": 0.9},
            {"title": "A again", "url": "https://a", "score": 0.5},
            {"title": "No url"},
            {"title": "No url"},
            {"snippet": "neither title nor url"}
        ]});
        c.collect_sources(Some(&schema), Some(&page));
        c.collect_sources(
            Some(&schema),
            Some(&json!({"results": [{"title": "B", "url": "https://b"}, {"title": "X", "url": "https://a"}]})),
        );
        // A tool not marked produces no sources.
        c.collect_sources(Some(&json!({"type": "object"})), Some(&json!({"results": [{"title": "C", "url": "https://c"}]})));
        let (_, sources) = c.into_parts();
        let got: Vec<(&str, Option<&str>, Option<f64>)> =
            sources.iter().map(|s| (s.title.as_str(), s.url.as_deref(), s.relevance_score)).collect();
        assert_eq!(got, [("A", Some("https://a"), Some(0.9)), ("No url", None, None), ("B", Some("https://b"), None)]);
    }

    #[test]
    fn stream_marks_default_to_the_field_name() {
        let schema = json!({"properties": {
            "chart_options": {"type": "object", "artifact": true, "stream": true, "stream_id": "sales_chart"},
            "raw": {"artifact": true, "stream": true},
            "summary": {"type": "string"}
        }});
        let m = stream_marks(&schema);
        assert_eq!(m.get("chart_options").map(String::as_str), Some("sales_chart"));
        assert_eq!(m.get("raw").map(String::as_str), Some("raw"));
        assert_eq!(m.len(), 2);
    }
}
