//! The artifact collector, over what the gateway already did: the pipeline stored every
//! schema-marked field (`artifact` / `x-artifact`) and every offloaded value before the clamp,
//! and left `<artifact:…>` placeholders in the result. The collector reads the transform report
//! and puts each value into the payload, per tool and field: inlined when it is at most
//! `inline_artifact_max_bytes` of JSON or text, otherwise (and for every binary or
//! pipeline-offloaded value) as its reference with a fresh signed link. It also gathers
//! [`Source`]s from tools marked `produces_sources` / `x-produces-sources`: on the output
//! schema, or on the model of its list items (Pydantic's `json_schema_extra` on the item class
//! lands in `$defs`), read from the tool's original result (not the gateway's shortened copy)
//! and capped at `agent.max_sources`.
//!
//! One artifact is collected once: the structured value and its text mirror (FastMCP's
//! `{"result": …}` and its JSON text) are one blob, and so is the same value from a second
//! call. A field's payload key names its call: the field's name for the tool's first call in
//! the run, `field#2`, `field#3`… for its later ones, by the order the model asked for them
//! (not the order they finish: parallel calls get the same keys every run), so a live chunk
//! knows its key before the call returns.

use std::collections::{HashMap, HashSet};
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
pub(crate) struct Streamed {
    pub stream_id: String,
    pub chunk: Value,
    pub artifact_type: String,
    /// The payload key it fills (`artifacts[tool][key]`).
    pub key: String,
}

/// Collects one run's artifacts and sources.
pub(crate) struct ArtifactCollector {
    artifacts: Map<String, Value>,
    sources: Vec<Source>,
    /// Source dedup keys (URL, else title) seen so far.
    source_keys: HashSet<String>,
    max_sources: usize,
    /// Sources found beyond `max_sources`.
    sources_dropped: usize,
    inline_max: u64,
    store: Option<Arc<dyn ArtifactStore>>,
    links: Option<LinkService>,
    scope: ArtifactScope,
    /// Artifacts collected, by id: (tool, key).
    collected: HashMap<String, (String, String)>,
}

impl ArtifactCollector {
    /// A collector reading as `scope`'s owner (the run's caller, session and trace).
    pub(crate) fn new(scope: ArtifactScope, inline_max: u64, store: Option<Arc<dyn ArtifactStore>>, links: Option<LinkService>) -> Self {
        ArtifactCollector {
            artifacts: Map::new(),
            sources: Vec::new(),
            source_keys: HashSet::new(),
            max_sources: usize::MAX,
            sources_dropped: 0,
            inline_max,
            store,
            links,
            scope,
            collected: HashMap::new(),
        }
    }

    /// At most `n` sources (`agent.max_sources`).
    pub(crate) fn with_max_sources(mut self, n: usize) -> Self {
        self.max_sources = n;
        self
    }

    /// Collects what the `ordinal`-th call of `tool` in the run (1 for its first, with
    /// `output_schema`) stored; returns the values of its `stream: true` fields, for
    /// `artifact_chunk` events.
    pub(crate) async fn collect(
        &mut self,
        tool: &str,
        ordinal: u32,
        output_schema: Option<&Value>,
        records: &[ArtifactRecord],
    ) -> Vec<Streamed> {
        // Keys this call gave: two records of one call with the same field name (at different
        // depths) get `field_2`, … within the call's key.
        let mut given: HashSet<String> = HashSet::new();
        let streams = output_schema.map(stream_marks).unwrap_or_default();
        let mut streamed = Vec::new();
        // The structured value before its text mirror: its key is the field's name.
        let mut ordered: Vec<&ArtifactRecord> = records.iter().collect();
        ordered.sort_by_key(|r| !r.pointer.starts_with("/structuredContent"));
        for r in ordered {
            let field = field_key(r);
            let stream = (r.layer == Layer::SchemaField).then(|| streams.get(&field)).flatten();
            // The same blob found twice (a text mirror, a second call): one artifact.
            if let Some((first_tool, key)) = self.collected.get(&r.id) {
                if let Some(stream_id) = stream {
                    let chunk = self.artifacts.get(first_tool).and_then(|f| f.get(key)).cloned().unwrap_or(Value::Null);
                    streamed.push(Streamed { stream_id: stream_id.clone(), artifact_type: artifact_type(&chunk), chunk, key: key.clone() });
                }
                continue;
            }
            let mut key = artifact_key(&field, ordinal);
            let mut n = 2;
            while given.contains(&key) {
                key = artifact_key(&format!("{field}_{n}"), ordinal);
                n += 1;
            }
            given.insert(key.clone());
            let value = self.value_of(r).await;
            if let Some(stream_id) = stream {
                streamed.push(Streamed {
                    stream_id: stream_id.clone(),
                    artifact_type: artifact_type(&value),
                    chunk: value.clone(),
                    key: key.clone(),
                });
            }
            self.collected.insert(r.id.clone(), (tool.to_owned(), key.clone()));
            let entry = self.artifacts.entry(tool.to_owned()).or_insert_with(|| Value::Object(Map::new()));
            entry.as_object_mut().expect("an object").insert(key, value);
        }
        streamed
    }

    /// Adds the sources in `result` (a tool's structured result, as it came) when
    /// `output_schema` marks the tool, or the model of its items, as producing them.
    pub(crate) fn collect_sources(&mut self, output_schema: Option<&Value>, result: Option<&Value>) {
        let (Some(schema), Some(result)) = (output_schema, result) else { return };
        if !produces_sources(schema) {
            return;
        }
        let mapping = source_fields(schema);
        let mut items = Vec::new();
        source_items(result, &mut items, 0);
        for item in items {
            let Some(s) = to_source(item, &mapping) else { continue };
            let key = s.url.clone().map_or_else(|| format!("title:{}", s.title), |u| format!("url:{u}"));
            if self.source_keys.contains(&key) {
                continue;
            }
            if self.sources.len() >= self.max_sources {
                self.sources_dropped += 1;
                continue;
            }
            self.source_keys.insert(key);
            self.sources.push(s);
        }
    }

    /// Sources found beyond `max_sources` (the payload says so in a warning).
    pub(crate) fn sources_dropped(&self) -> usize {
        self.sources_dropped
    }

    pub(crate) fn into_parts(self) -> (Map<String, Value>, Vec<Source>) {
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

/// The payload key of `field` of the `ordinal`-th call of its tool: the field's name for the
/// first call, `field#n` for the n-th (a `#` no pointer-derived name has, so `content_1#2` is
/// the second call's `content_1`, never the first call's `content_1_2`).
pub(crate) fn artifact_key(field: &str, ordinal: u32) -> String {
    if ordinal <= 1 { field.to_owned() } else { format!("{field}#{ordinal}") }
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

/// `dict`, `list`, `str`, … as in the `<artifact:…>` placeholders; `reference` for a stored value.
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
pub(crate) fn stream_marks(schema: &Value) -> HashMap<String, String> {
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

/// The most levels of a schema or a result the source search walks.
const MAX_DEPTH: usize = 8;

/// Whether the tool produces sources: the mark on its output schema, or on any model in it
/// (`$defs`, `items`, properties: Pydantic puts a list item class's `json_schema_extra` on
/// its definition).
pub(crate) fn produces_sources(schema: &Value) -> bool {
    fn walk(s: &Value, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        if ["produces_sources", "x-produces-sources"].iter().any(|k| s.get(*k).and_then(Value::as_bool) == Some(true)) {
            return true;
        }
        let defs =
            ["$defs", "definitions", "properties"].iter().filter_map(|k| s.get(*k).and_then(Value::as_object)).flat_map(|m| m.values());
        let items = ["items", "additionalProperties"].iter().filter_map(|k| s.get(*k)).filter(|v| v.is_object());
        let any = ["anyOf", "oneOf", "allOf"].iter().filter_map(|k| s.get(*k).and_then(Value::as_array)).flatten();
        defs.chain(items).chain(any).any(|c| walk(c, depth + 1))
    }
    walk(schema, 0)
}

/// `source_field` marks anywhere in the schema, `$defs` included: property name → `Source`
/// field.
fn source_fields(schema: &Value) -> HashMap<String, String> {
    fn walk(s: &Value, out: &mut HashMap<String, String>, depth: usize) {
        if depth > MAX_DEPTH {
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
        for k in ["$defs", "definitions"] {
            for d in s.get(k).and_then(Value::as_object).into_iter().flat_map(|m| m.values()) {
                walk(d, out, depth + 1);
            }
        }
        for k in ["items", "additionalProperties"] {
            if let Some(i) = s.get(k).filter(|v| v.is_object()) {
                walk(i, out, depth + 1);
            }
        }
        for k in ["anyOf", "oneOf", "allOf"] {
            for c in s.get(k).and_then(Value::as_array).into_iter().flatten() {
                walk(c, out, depth + 1);
            }
        }
    }
    let mut out = HashMap::new();
    walk(schema, &mut out, 0);
    out
}

/// The items a source-producing result holds, in order: an object that looks like one source
/// (a title or url), else the objects of its arrays and nested objects, a few levels down.
fn source_items<'a>(v: &'a Value, out: &mut Vec<&'a Value>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::Object(m) if m.contains_key("title") || m.contains_key("url") => out.push(v),
        Value::Object(m) => m.values().for_each(|c| source_items(c, out, depth + 1)),
        Value::Array(items) => items.iter().for_each(|c| source_items(c, out, depth + 1)),
        _ => {}
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
        let mut c = ArtifactCollector::new(ArtifactScope::default(), 1024, None, None).with_max_sources(3);
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
        c.collect_sources(Some(&schema), Some(&json!({"results": [{"title": "D", "url": "https://d"}]})));
        assert_eq!(c.sources_dropped(), 1, "over max_sources");
        let (_, sources) = c.into_parts();
        let got: Vec<(&str, Option<&str>, Option<f64>)> =
            sources.iter().map(|s| (s.title.as_str(), s.url.as_deref(), s.relevance_score)).collect();
        assert_eq!(got, [("A", Some("https://a"), Some(0.9)), ("No url", None, None), ("B", Some("https://b"), None)]);
    }

    #[test]
    fn the_mark_on_a_list_items_model_counts_and_nested_lists_are_read() {
        // What FastMCP 4 declares for `-> list[Hit]` where Hit's Config has
        // json_schema_extra = {"produces_sources": True} and score a source_field.
        let schema = json!({
            "type": "object", "x-fastmcp-wrap-result": true, "required": ["result"],
            "properties": {"result": {"type": "array", "items": {"$ref": "#/$defs/Hit"}}},
            "$defs": {"Hit": {"type": "object", "produces_sources": true, "properties": {
                "title": {"type": "string"}, "url": {"type": "string"},
                "score": {"type": "number", "source_field": "relevance_score"}}}}
        });
        assert!(produces_sources(&schema));
        assert!(!produces_sources(&json!({"type": "object", "properties": {"a": {"type": "string"}}})));
        let mut c = ArtifactCollector::new(ArtifactScope::default(), 1024, None, None);
        let hits: Vec<Value> =
            (0..300).map(|i| json!({"title": format!("Hit {i}"), "url": format!("https://kb/{i}"), "score": 0.5})).collect();
        c.collect_sources(Some(&schema), Some(&json!({"result": hits})));
        c.collect_sources(Some(&schema), Some(&json!({"page": {"hits": [{"title": "Deep", "url": "https://kb/deep"}]}})));
        let (_, sources) = c.into_parts();
        assert_eq!(sources.len(), 301);
        assert_eq!(sources[7].relevance_score, Some(0.5));
        assert_eq!(sources[300].title, "Deep");
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
