//! Schema-marked fields (docs/agent.md): when a tool's output schema marks a
//! property `"artifact": true` or `"x-artifact": true`, that property is always extracted,
//! whatever its size or type, and the model sees a placeholder (`<artifact:dict size=42KB>`,
//! `<artifact:list size=847 items>`) followed by the reference.
//!
//! Marks are found under `properties` at any depth and through `items` (which match every
//! element). For a `CallToolResult` the schema describes `structuredContent`; the JSON text
//! block that mirrors it is handled the same way, so the marked value does not leak through
//! the mirror.
//!
//! The schema also decides the *form* of what replaces a value inside `structuredContent`:
//! clients validate it against the `outputSchema` the gateway advertises unchanged, so a
//! position the schema types as an array stays an array. [`collect_typed`] is the size net for
//! `structuredContent` (and its text twin) when the tool has an output schema: a large array
//! becomes a prefix of its items, a large object a subset of its keys (every `required` one
//! kept), both within `typed_preview_chars`, and the report says how many were kept of how
//! many ([`crate::report::Partial`]) so the gateway can write the note beside it. A marked
//! field whose schema does not admit a string gets the same typed form instead of the
//! placeholder string. [`SchemaView`] is the small schema walker both use (local `$ref`s,
//! `allOf`/`anyOf`/`oneOf`, `properties`, `items`), and the gateway uses it to repair what
//! its validator still rejects ([`SchemaView::minimal_instance`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::TransformConfig;
use crate::layers::base64::detect;
use crate::layers::payload_roots;
use crate::path::{FieldPath, push_index, push_key, split_last};
use crate::report::{Cut, Layer, Partial};
use crate::stub::{self, TemplateVars, placeholder};
use crate::work::{Docs, Offload, Payload, Render};

/// `[transform.schema_fields]`: schema-marked fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaFieldsConfig {
    /// Extract properties an output schema marks as artifacts. Default true.
    pub enabled: bool,
    /// When a tool has an output schema and a large array or object inside its
    /// `structuredContent` is offloaded, this many characters of it stay in place, typed as
    /// the schema says (a prefix of the items, a subset of the keys), so clients that validate
    /// the result still accept it. Default 2000.
    pub typed_preview_chars: usize,
}

impl Default for SchemaFieldsConfig {
    fn default() -> Self {
        SchemaFieldsConfig { enabled: true, typed_preview_chars: 2000 }
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
            push_key(&mut p, &seg.replace('\u{0}', "."));
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
    let view = SchemaView::new(schema);
    let roots = payload_roots(docs);
    for mark in &marks {
        let Ok(path) = FieldPath::parse(mark) else { continue };
        for (doc, root_ptr) in &roots {
            let Some(root) = docs.docs[*doc].value.pointer(root_ptr) else { continue };
            // Inside structuredContent the schema types the slot: a marked array or object
            // that must not become a string keeps its type (see `typed_prefix`).
            let found: Vec<(String, Option<Vec<&Value>>)> = path
                .resolve(root)
                .into_iter()
                .map(|rel| {
                    let typed = (*doc == 0 && root_ptr == "/structuredContent")
                        .then(|| view.at(root, &rel))
                        .filter(|schemas| !admits_string(schemas));
                    (rel, typed)
                })
                .collect();
            for (rel, typed) in found {
                let ptr = format!("{root_ptr}{rel}");
                if let Some(off) = offload(docs, *doc, &ptr, typed.as_deref()) {
                    out.push(off);
                }
            }
        }
    }
    out
}

/// `typed`: the schemas of a slot that must keep its JSON type (it gets the typed form with
/// nothing optional kept, rather than the placeholder string).
fn offload(docs: &mut Docs, doc: usize, ptr: &str, typed: Option<&[&Value]>) -> Option<Offload> {
    let value = docs.docs[doc].value.pointer_mut(ptr)?;
    if value.is_null() || value.as_str().is_some_and(|s| s.is_empty() || stub::is_stub(s)) {
        return None;
    }
    let value = std::mem::take(value);
    let (parent_ptr, key) = split_last(ptr)?;
    let parent = docs.docs[doc].value.pointer(parent_ptr).and_then(Value::as_object);
    let mut vars = TemplateVars::from_siblings(parent, Some(&key));
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
    let mut summary_template = format!("Field '{key}' ({{size_human}}) stored as {{uri}}");
    let render = match typed {
        Some(schemas) if value.is_array() || value.is_object() => {
            let (kept, partial) = typed_prefix(&value, schemas, 0);
            vars.set("kept", partial.kept);
            vars.set("total", partial.total);
            summary_template.push_str(&partial_note(&value));
            // Written now, so the text twin and anything measuring this document see it.
            if let Some(slot) = docs.docs[doc].value.pointer_mut(ptr) {
                *slot = kept.clone();
            }
            Render::Typed { value: kept, partial, cuts: Vec::new() }
        }
        _ => Render::Placeholder { placeholder: placeholder(&value, size as u64) },
    };
    Some(Offload {
        doc,
        ptr: ptr.to_owned(),
        payload,
        what: format!("schema-marked field {key}"),
        mime: Some(mime),
        filename: None,
        layer: Layer::SchemaField,
        render,
        fatal: true,
        fallback: None,
        summary_template: Some(summary_template),
        content_type: None,
        vars,
        source: Map::new(),
    })
}

/// The size net for `structuredContent` when the tool has an output schema (see the module
/// docs). Runs after the string pass and before the size net's containers, which then find
/// nothing left to do there.
pub(crate) fn collect_typed(docs: &mut Docs, config: &TransformConfig, output_schema: Option<&Value>) -> Vec<Offload> {
    let mut out = Vec::new();
    let Some(schema) = output_schema.filter(|_| config.size_net.enabled) else { return out };
    if docs.docs[0].value.get("structuredContent").is_none() {
        return out;
    }
    let view = SchemaView::new(schema);
    for (doc, root_ptr) in payload_roots(docs) {
        // Only structuredContent is described by the schema. A text that is JSON of another
        // value gets the same form without the schema's constraints.
        let schemas = if doc == 0 { view.root() } else { Vec::new() };
        let Some(root) = docs.docs[doc].value.pointer_mut(&root_ptr) else { continue };
        let mut ptr = root_ptr.clone();
        let mut walk = TypedWalk { view: &view, config, cuts: Vec::new() };
        walk.visit(root, &mut ptr, &schemas);
        if walk.cuts.is_empty() {
            continue;
        }
        // The artifact is the whole value, as the tool sent it (the object its schema
        // describes), not the arrays cut from it: `length(rows)` and `rows[?total > `100`]`
        // then work on it as they would on the tool's own answer. The cuts are put back into a
        // copy of what stays, outermost first (the walk recorded them innermost first).
        let kept = root.clone();
        let mut whole = kept.clone();
        for cut in walk.cuts.iter().rev() {
            let rel = &cut.ptr[root_ptr.len()..];
            if let Some(slot) = if rel.is_empty() { Some(&mut whole) } else { whole.pointer_mut(rel) } {
                *slot = cut.taken.clone();
            }
        }
        let text = serde_json::to_string(&whole).expect("a Value always serialises");
        drop(whole);
        let main = walk.cuts.iter().max_by_key(|c| c.partial.total).expect("cuts is not empty");
        let mut vars = TemplateVars::default();
        let (what, template) = match &kept {
            Value::Array(items) => {
                vars.set("items", main.partial.total.max(items.len()));
                ("JSON array", "JSON array ({size_human}) stored as {uri}")
            }
            Value::Object(m) => {
                vars.set("items", m.len());
                ("JSON object", "JSON object with {items} keys ({size_human}) stored as {uri}")
            }
            _ => ("JSON value", "JSON ({size_human}) stored as {uri}"),
        };
        let kept_notes: Vec<String> = walk
            .cuts
            .iter()
            .map(|c| {
                let unit = if c.taken.is_array() { "items" } else { "keys" };
                format!("{} keeps {} of {} {unit} in place", jmespath_of(&c.ptr[root_ptr.len()..]), c.partial.kept, c.partial.total)
            })
            .collect();
        let example = format!("length({})", jmespath_of(&main.ptr[root_ptr.len()..]));
        let mut summary = format!(
            "{template}; {}; the rest is only in the artifact: artifact_query selects parts of it (JMESPath, e.g. {example}), artifact_read reads it as text",
            kept_notes.join(", ")
        );
        // A part cut to nothing (each of its items too big to keep) would leave the model an
        // empty array and no idea what was there: the summary carries its described shape
        // (set as a template variable, so braces in the data are never read as placeholders).
        let empty: Vec<&TypedCut> = walk.cuts.iter().filter(|c| c.partial.kept == 0 && c.partial.total > 0).collect();
        if !empty.is_empty() {
            let mut shape = String::new();
            let each = SHAPE_CHARS / empty.len();
            for c in &empty {
                let at = jmespath_of(&c.ptr[root_ptr.len()..]);
                shape.push_str(&format!("\nshape of {at} (jq paths from it):\n"));
                shape.push_str(crate::describe::describe(&c.taken).render(each).trim_end());
            }
            vars.set("shape", shape);
            summary.push_str("{shape}");
        }
        let cuts = walk
            .cuts
            .iter()
            .map(|c| Cut { pointer: docs.report_pointer(doc, &c.ptr), kept: c.partial.kept, total: c.partial.total })
            .collect();
        out.push(Offload {
            doc,
            ptr: root_ptr.clone(),
            payload: Payload::Text(text),
            mime: Some("application/json".to_owned()),
            filename: None,
            layer: Layer::SizeNet,
            render: Render::Typed { value: kept.clone(), partial: main.partial, cuts },
            fatal: false,
            // A store that refuses it leaves the typed prefixes, still valid (with a warning).
            fallback: Some(kept),
            what: what.to_owned(),
            summary_template: Some(summary),
            content_type: Some("json".to_owned()),
            vars,
            source: Map::new(),
        });
        docs.docs[doc].changed = true;
    }
    out
}

/// A JMESPath expression for a JSON Pointer relative to the stored value (`/rows` → `rows`,
/// `/data/0/items` → `data[0].items`, `""` → `@`), quoting keys that are not identifiers.
fn jmespath_of(pointer: &str) -> String {
    if pointer.is_empty() {
        return "@".to_owned();
    }
    let mut out = String::new();
    for raw in pointer.split('/').skip(1) {
        let key = raw.replace("~1", "/").replace("~0", "~");
        if let Ok(i) = key.parse::<usize>() {
            out.push_str(&format!("[{i}]"));
            continue;
        }
        if !out.is_empty() {
            out.push('.');
        }
        let ident = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if ident { out.push_str(&key) } else { out.push_str(&serde_json::to_string(&key).expect("a string serialises")) }
    }
    out
}

/// Characters of described shape a typed preview carries for parts cut to nothing.
const SHAPE_CHARS: usize = 1_200;

/// A part of a typed value cut to its prefix: where, what it was, and how much stayed.
struct TypedCut {
    ptr: String,
    taken: Value,
    partial: Partial,
}

struct TypedWalk<'a, 's> {
    view: &'a SchemaView<'s>,
    config: &'a TransformConfig,
    cuts: Vec<TypedCut>,
}

impl<'s> TypedWalk<'_, 's> {
    /// Post-order, like the size net: returns the value's approximate JSON length after its
    /// children were cut, so each node is measured once.
    fn visit(&mut self, value: &mut Value, ptr: &mut String, schemas: &[&'s Value]) -> usize {
        let len = ptr.len();
        let described = !schemas.is_empty();
        let size = match &mut *value {
            Value::Array(items) => {
                let mut total = 2;
                for (i, item) in items.iter_mut().enumerate() {
                    push_index(ptr, i);
                    let sub = if described { self.view.item(schemas, i) } else { Vec::new() };
                    total += self.visit(item, ptr, &sub) + 1;
                    ptr.truncate(len);
                }
                total
            }
            Value::Object(map) => {
                let mut total = 2;
                for (k, item) in map.iter_mut() {
                    push_key(ptr, k);
                    let sub = if described { self.view.member(schemas, k) } else { Vec::new() };
                    total += k.len() + 4 + self.visit(item, ptr, &sub);
                    ptr.truncate(len);
                }
                total
            }
            // As in the size net: a string this long survived the string pass on purpose (text
            // within an inline budget, or a store failure's truncated copy), so it does not make
            // its container an artifact.
            Value::String(s) if s.len() > self.config.size_net.large_json_chars => 0,
            Value::String(s) if s.len() > 64 => s.chars().count() + 2,
            other => json_len(&*other),
        };
        if size <= self.config.size_net.large_json_chars || !(value.is_array() || value.is_object()) {
            return size;
        }
        let taken = std::mem::take(value);
        let (kept, partial) = typed_prefix(&taken, schemas, self.config.schema_fields.typed_preview_chars);
        let kept_size = json_len(&kept);
        *value = kept;
        self.cuts.push(TypedCut { ptr: ptr.clone(), taken, partial });
        kept_size
    }
}

/// The note that follows a summary when part of the value stays in place (`{kept}` is filled
/// from the template variables).
fn partial_note(value: &Value) -> String {
    let (total, unit) = match value {
        Value::Array(items) => (items.len(), "items"),
        Value::Object(members) => (members.len(), "keys"),
        _ => (1, "values"),
    };
    format!("; {{kept}} of {total} {unit} are kept in place, the rest only in the artifact")
}

/// What stays in place of a large array or object so its schema still holds: the first items
/// (at least `minItems`) or keys (every `required` one, at least `minProperties`) that fit in
/// `budget` characters of JSON. Items and values are kept whole, never cut: a cut item could
/// break the item schema.
pub fn typed_prefix(value: &Value, schemas: &[&Value], budget: usize) -> (Value, Partial) {
    match value {
        Value::Array(items) => {
            let min = min_count(schemas, "minItems");
            let mut used = 2;
            let mut kept = Vec::new();
            for item in items {
                let n = json_len(item) + 1;
                if kept.len() >= min && used + n > budget {
                    break;
                }
                used += n;
                kept.push(item.clone());
            }
            let partial = Partial { kept: kept.len(), total: items.len() };
            (Value::Array(kept), partial)
        }
        Value::Object(members) => {
            let required = required_keys(schemas);
            let min = min_count(schemas, "minProperties");
            let (mut used, mut full) = (2, false);
            let mut kept = Map::new();
            for (k, v) in members {
                let n = k.len() + 4 + json_len(v);
                let needed = required.contains(&k.as_str()) || kept.len() < min;
                if needed || (!full && used + n <= budget) {
                    used += n;
                    kept.insert(k.clone(), v.clone());
                } else {
                    full = true;
                }
            }
            let partial = Partial { kept: kept.len(), total: members.len() };
            (Value::Object(kept), partial)
        }
        other => (other.clone(), Partial { kept: 1, total: 1 }),
    }
}

/// Length of the compact JSON of `v`, without building it ([`crate::json_len`] as a `usize`).
fn json_len(v: &Value) -> usize {
    crate::json_len(v) as usize
}

/// `$ref` and combinators are followed at most this deep: a recursive schema (`"$ref": "#"`)
/// ends here.
const MAX_EXPAND: usize = 16;
/// A schema position never expands to more than this many schemas (a combinator bomb).
const MAX_SCHEMAS: usize = 64;

/// A read-only walk over one JSON Schema document: which (sub)schemas apply to a value at a
/// position. Only document-local `$ref`s (`#/$defs/X`, `#/definitions/X`, `#`) are followed:
/// the gateway never fetches a schema from anywhere. `allOf`/`anyOf`/`oneOf` members are all
/// included (an approximation that only ever asks to keep more, and the gateway's validator
/// checks the result); `true`/`false` schemas say nothing about shape and are skipped.
#[derive(Debug, Clone, Copy)]
pub struct SchemaView<'a> {
    root: &'a Value,
}

impl<'a> SchemaView<'a> {
    /// A view of the schema `root` (its local `$ref`s resolve against it).
    pub fn new(root: &'a Value) -> Self {
        SchemaView { root }
    }

    /// The schemas that apply to the instance the root schema describes.
    pub fn root(&self) -> Vec<&'a Value> {
        let mut out = Vec::new();
        self.expand(self.root, &mut out, 0);
        out
    }

    fn expand(&self, s: &'a Value, out: &mut Vec<&'a Value>, depth: usize) {
        if depth > MAX_EXPAND || out.len() >= MAX_SCHEMAS {
            return;
        }
        let Value::Object(m) = s else { return };
        out.push(s);
        if let Some(target) = m.get("$ref").and_then(Value::as_str).and_then(|r| self.resolve(r)) {
            self.expand(target, out, depth + 1);
        }
        for k in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(members)) = m.get(k) {
                for x in members {
                    self.expand(x, out, depth + 1);
                }
            }
        }
    }

    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        let fragment = reference.strip_prefix('#')?;
        if fragment.is_empty() {
            return Some(self.root);
        }
        self.root.pointer(fragment)
    }

    /// The schemas for member `key` of an object that `parents` describe.
    pub fn member(&self, parents: &[&'a Value], key: &str) -> Vec<&'a Value> {
        let mut out = Vec::new();
        for p in parents {
            match (p.get("properties").and_then(|ps| ps.get(key)), p.get("additionalProperties")) {
                (Some(s), _) => self.expand(s, &mut out, 0),
                (None, Some(s)) => self.expand(s, &mut out, 0),
                _ => {}
            }
        }
        out
    }

    /// The schemas for item `index` of an array that `parents` describe (`prefixItems`, then
    /// `items`; draft 7's tuple `items` and `additionalItems` too).
    pub fn item(&self, parents: &[&'a Value], index: usize) -> Vec<&'a Value> {
        let mut out = Vec::new();
        for p in parents {
            match (p.get("prefixItems").and_then(|t| t.get(index)), p.get("items")) {
                (Some(s), _) => self.expand(s, &mut out, 0),
                (None, Some(Value::Array(tuple))) => {
                    if let Some(s) = tuple.get(index).or_else(|| p.get("additionalItems")) {
                        self.expand(s, &mut out, 0)
                    }
                }
                (None, Some(s)) => self.expand(s, &mut out, 0),
                _ => {}
            }
        }
        out
    }

    /// The schemas at `ptr` (a JSON Pointer into `instance`, the value the root describes);
    /// empty when the pointer leaves the instance or the schema says nothing there.
    pub fn at(&self, instance: &Value, ptr: &str) -> Vec<&'a Value> {
        let mut schemas = self.root();
        let mut cur = instance;
        for token in ptr.split('/').skip(1) {
            let token = token.replace("~1", "/").replace("~0", "~");
            match cur {
                Value::Array(items) => {
                    let Some((i, next)) = token.parse::<usize>().ok().and_then(|i| Some((i, items.get(i)?))) else {
                        return Vec::new();
                    };
                    schemas = self.item(&schemas, i);
                    cur = next;
                }
                Value::Object(members) => {
                    let Some(next) = members.get(&token) else { return Vec::new() };
                    schemas = self.member(&schemas, &token);
                    cur = next;
                }
                _ => return Vec::new(),
            }
            if schemas.is_empty() {
                return schemas;
            }
        }
        schemas
    }

    /// A small instance that these schemas accept, built from what they say (`const`,
    /// `enum`, `default`, then the type: `required` members, `minItems` items, `minLength`,
    /// `minimum`): what the gateway puts at a position its validator still rejects after the
    /// rewrite. `None` when the schemas do not say enough (the validator decides anyway).
    pub fn minimal_instance(&self, schemas: &[&'a Value]) -> Option<Value> {
        self.minimal(schemas, 0)
    }

    fn minimal(&self, schemas: &[&'a Value], depth: usize) -> Option<Value> {
        if depth > 8 {
            return None;
        }
        for key in ["const", "default"] {
            if let Some(v) = schemas.iter().find_map(|s| s.get(key)) {
                return Some(v.clone());
            }
        }
        if let Some(v) = schemas.iter().find_map(|s| s.get("enum")?.as_array()?.first()) {
            return Some(v.clone());
        }
        let mut types: Vec<&str> = Vec::new();
        for s in schemas {
            match s.get("type") {
                Some(Value::String(t)) => types.push(t),
                Some(Value::Array(ts)) => types.extend(ts.iter().filter_map(Value::as_str)),
                _ => {}
            }
        }
        let number = |integer: bool| {
            let minimum = schemas.iter().find_map(|s| s.get("minimum").and_then(Value::as_f64));
            let exclusive = schemas.iter().find_map(|s| s.get("exclusiveMinimum").and_then(Value::as_f64));
            let n = minimum.or(exclusive.map(|m| m.floor() + 1.0)).unwrap_or(0.0);
            if integer { Value::from(n.ceil() as i64) } else { serde_json::Number::from_f64(n).map_or(Value::from(0), Value::Number) }
        };
        let ty = if types.contains(&"null") { "null" } else { types.first().copied()? };
        Some(match ty {
            "null" => Value::Null,
            "boolean" => Value::Bool(false),
            "integer" => number(true),
            "number" => number(false),
            "string" => Value::String("-".repeat(min_count(schemas, "minLength"))),
            "array" => {
                let n = min_count(schemas, "minItems");
                let mut items = Vec::with_capacity(n);
                for i in 0..n {
                    items.push(self.minimal(&self.item(schemas, i), depth + 1)?);
                }
                Value::Array(items)
            }
            "object" => {
                let mut m = Map::new();
                for k in required_keys(schemas) {
                    m.insert(k.to_owned(), self.minimal(&self.member(schemas, k), depth + 1)?);
                }
                Value::Object(m)
            }
            _ => return None,
        })
    }
}

/// Every key some schema here lists as `required`.
pub fn required_keys<'a>(schemas: &[&'a Value]) -> Vec<&'a str> {
    let mut keys: Vec<&'a str> = Vec::new();
    for s in schemas {
        for k in s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    keys
}

/// The largest `minItems`/`minProperties`/`minLength` (per `keyword`) the schemas ask for.
fn min_count(schemas: &[&Value], keyword: &str) -> usize {
    schemas.iter().filter_map(|s| s.get(keyword)?.as_u64()).max().unwrap_or(0) as usize
}

/// Whether a string may stand at a position these schemas describe: when none of them says
/// `type`, or one of them allows `"string"`.
pub fn admits_string(schemas: &[&Value]) -> bool {
    let mut typed = false;
    for s in schemas {
        match s.get("type") {
            Some(Value::String(t)) if t == "string" => return true,
            Some(Value::Array(ts)) if ts.iter().any(|t| t == "string") => return true,
            Some(_) => typed = true,
            None => {}
        }
    }
    !typed
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

    fn pydantic() -> Value {
        json!({
            "$defs": {"Row": {"type": "object", "properties": {"i": {"type": "integer", "minimum": 3}, "s": {"type": "string", "minLength": 2}},
                "required": ["i", "s"]}},
            "type": "object",
            "properties": {
                "rows": {"type": "array", "items": {"$ref": "#/$defs/Row"}, "minItems": 2},
                "maybe": {"anyOf": [{"$ref": "#/$defs/Row"}, {"type": "null"}]},
                "kind": {"enum": ["a", "b"]},
                "tuple": {"prefixItems": [{"type": "string"}, {"type": "integer"}]}
            },
            "required": ["rows", "kind"]
        })
    }

    #[test]
    fn the_view_follows_refs_combinators_and_items() {
        let schema = pydantic();
        let view = SchemaView::new(&schema);
        let instance = json!({"rows": [{"i": 1, "s": "x"}], "maybe": {"i": 2}, "tuple": ["a", 1]});
        let at = |p: &str| view.at(&instance, p);
        assert_eq!(required_keys(&at("/rows/0")), ["i", "s"]);
        assert_eq!(required_keys(&at("/maybe")), ["i", "s"], "through anyOf and $ref");
        assert!(admits_string(&at("/rows/0/s")) && !admits_string(&at("/rows/0/i")) && !admits_string(&at("/rows")));
        assert!(!admits_string(&at("/maybe")), "anyOf object|null does not admit a string");
        assert!(admits_string(&at("/tuple/0")) && !admits_string(&at("/tuple/1")));
        assert!(at("/nowhere").is_empty() && admits_string(&at("/nowhere")));
        // A self-referencing schema ends.
        let recursive = json!({"$ref": "#", "type": "object"});
        assert!(SchemaView::new(&recursive).root().len() <= MAX_SCHEMAS);
    }

    #[test]
    fn minimal_instances_satisfy_what_they_can_read() {
        let schema = pydantic();
        let view = SchemaView::new(&schema);
        let m = view.minimal_instance(&view.root()).unwrap();
        assert_eq!(m, json!({"rows": [{"i": 3, "s": "--"}, {"i": 3, "s": "--"}], "kind": "a"}));
        assert_eq!(view.minimal_instance(&view.at(&json!({"maybe": {}}), "/maybe")), Some(Value::Null));
        let no_type = json!({"description": "anything"});
        assert_eq!(SchemaView::new(&no_type).minimal_instance(&[&no_type]), None);
    }

    #[test]
    fn typed_prefixes_keep_whole_items_and_required_keys() {
        let schema = pydantic();
        let view = SchemaView::new(&schema);
        let rows: Vec<Value> = (0..100).map(|i| json!({"i": i, "s": "abcdefghij"})).collect();
        let (kept, p) = typed_prefix(&Value::Array(rows.clone()), &view.item(&view.root(), 0), 110);
        assert_eq!((p.kept, p.total), (4, 100));
        assert_eq!(kept.as_array().unwrap()[..], rows[..4]);
        // minItems wins over the budget.
        let (kept, _) = typed_prefix(&Value::Array(rows), &view.at(&json!({"rows": []}), "/rows"), 0);
        assert_eq!(kept.as_array().unwrap().len(), 2);
        // Required keys stay, optional ones fill the budget in order.
        let big = json!({"a": "x".repeat(50), "kind": "b", "b": 1, "rows": [], "c": 2});
        let (kept, p) = typed_prefix(&big, &view.root(), 30);
        assert_eq!(kept, json!({"kind": "b", "rows": []}));
        assert_eq!((p.kept, p.total), (2, 5));
    }
}
