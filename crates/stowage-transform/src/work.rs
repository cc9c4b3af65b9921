//! The machinery every offloading layer shares: the documents a result is made of, the
//! offloads a layer decides on, and committing them (store, then rewrite).
//!
//! A layer never awaits while it walks the JSON. It walks synchronously, *moves* each heavy
//! value out of the tree (no copy of a 50 MB string) into an [`Offload`], and leaves the slot
//! empty; [`commit`] then stores the offloads and writes each stub into its slot. That keeps
//! the walks simple and allocation-free, and puts every store error handling decision in one
//! place.
//!
//! JSON that sits inside a string (the Tableau server's JSON text in a text block) is parsed
//! once, up front, into its own [`Doc`] so every layer sees inside it; at the end each changed
//! document is serialised back into its parent's string, innermost first, and an unchanged one
//! gets its original text back (kept when it is small) so nothing changes needlessly. When the
//! parse of a document indexed its longest string ([`StringIndex`]), that string is parsed
//! without being scanned again.

use std::cmp::Reverse;

use bytes::Bytes;
use serde_json::{Map, Value};
use stowage_core::{ArtifactRef, ArtifactSink, PutOptions};

use crate::TransformError;
use crate::fastjson::StringIndex;
use crate::path::{push_index, push_key, split_last};
use crate::report::{ArtifactRecord, Layer, TransformReport};
use crate::stub::{self, TemplateVars};
use crate::twins::looks_like_json_container;

/// Embedded JSON up to this size keeps its original text, so an unchanged document is restored
/// byte for byte; larger ones are re-serialised (equal in meaning) to keep peak memory low.
const KEEP_ORIGINAL_MAX: usize = 1 << 20;

/// Embedded JSON is looked for at most this deep (JSON in a string in JSON in a string …).
const MAX_EMBED_DEPTH: usize = 4;

/// One JSON document: the result itself (index 0) or JSON parsed out of a string.
#[derive(Debug)]
pub(crate) struct Doc {
    pub value: Value,
    /// The parent document and the pointer of the string this document was parsed from.
    pub parent: Option<(usize, String)>,
    /// Report pointer prefix: `""` for the root, `/content/0/text#` for embedded JSON.
    pub prefix: String,
    original: Option<String>,
    pub changed: bool,
    depth: usize,
    /// The index its parse made of its longest string, while `value` is as parsed.
    index: Option<StringIndex>,
}

/// The result split into documents.
#[derive(Debug)]
pub(crate) struct Docs {
    pub docs: Vec<Doc>,
    /// Text blocks of the root that repeat a value of its `structuredContent` as JSON
    /// (see [`crate::twins`]): folded away while the layers run, written back by
    /// [`Docs::collapse`] from what the layers left of the value.
    twins: Vec<FoldedTwin>,
}

/// A JSON twin taken out of its text block.
#[derive(Debug)]
struct FoldedTwin {
    /// The text's pointer in the root.
    ptr: String,
    source: &'static str,
    /// The original text and its parse, kept when small: an unchanged value gets its text
    /// back byte for byte.
    original: Option<(String, Value)>,
}

impl Docs {
    /// Splits `root` into documents, parsing JSON found in strings of at least `min_len` bytes.
    /// `index`, if any, came from the parse of `root`, which must be unchanged since.
    pub(crate) fn expand(root: Value, min_len: usize, index: Option<StringIndex>) -> Docs {
        let mut docs = vec![Doc { value: root, parent: None, prefix: String::new(), original: None, changed: false, depth: 0, index }];
        let mut twins = Vec::new();
        let mut i = 0;
        while i < docs.len() {
            let index = docs[i].index.take();
            if docs[i].depth < MAX_EMBED_DEPTH {
                let mut found = Vec::new();
                let mut ptr = String::new();
                find_embedded(&mut docs[i].value, &mut ptr, min_len, index.as_ref(), &mut found);
                for Embedded { ptr, value, original, index } in found {
                    if i == 0
                        && let Some(source) = twin_source(&docs[0].value, &ptr, &value)
                    {
                        // The layers see this value once, in structuredContent.
                        twins.push(FoldedTwin { ptr, source, original: original.map(|o| (o, value)) });
                        continue;
                    }
                    let prefix = format!("{}{}#", docs[i].prefix, ptr);
                    let depth = docs[i].depth + 1;
                    docs.push(Doc { value, parent: Some((i, ptr)), prefix, original, changed: false, depth, index });
                }
            }
            i += 1;
        }
        Docs { docs, twins }
    }

    /// Puts every embedded document back into its parent string, innermost first.
    pub(crate) fn collapse(mut self) -> Value {
        while self.docs.len() > 1 {
            let doc = self.docs.pop().expect("len > 1");
            let (parent, ptr) = doc.parent.expect("embedded docs have parents");
            let text = match (doc.changed, doc.original) {
                (false, Some(original)) => original,
                _ => serde_json::to_string(&doc.value).expect("a Value always serialises"),
            };
            if doc.changed {
                self.docs[parent].changed = true;
            }
            if let Some(slot) = self.docs[parent].value.pointer_mut(&ptr) {
                *slot = Value::String(text);
            }
        }
        let mut root = self.docs.pop().expect("the root doc").value;
        for twin in self.twins {
            let text = match (root.pointer(twin.source), twin.original) {
                (Some(now), Some((text, was))) if *now == was => text,
                (Some(now), _) => serde_json::to_string(now).expect("a Value always serialises"),
                // A custom layer took structuredContent away: the text stays as it was.
                (None, Some((text, _))) => text,
                (None, None) => continue,
            };
            if let Some(slot) = root.pointer_mut(&twin.ptr) {
                *slot = Value::String(text);
            }
        }
        root
    }

    /// The report pointer of `ptr` in document `doc`.
    pub(crate) fn report_pointer(&self, doc: usize, ptr: &str) -> String {
        format!("{}{}", self.docs[doc].prefix, ptr)
    }

    /// For a document embedded (directly or not) in the text of a content block of the root
    /// result, the pointer of that block's array and its index: where a `resource_link` for an
    /// artifact found inside goes.
    pub(crate) fn content_block_of(&self, mut doc: usize) -> Option<(String, usize)> {
        loop {
            let (parent, ptr) = self.docs[doc].parent.as_ref()?;
            if *parent == 0 {
                let (block_ptr, key) = split_last(ptr)?;
                if key != "text" {
                    return None;
                }
                let (array_ptr, index) = split_last(block_ptr)?;
                let index: usize = index.parse().ok()?;
                let block = self.docs[0].value.pointer(block_ptr)?;
                let is_text_block = block.get("type").and_then(Value::as_str) == Some("text");
                return is_text_block.then(|| (array_ptr.to_owned(), index));
            }
            doc = *parent;
        }
    }
}

/// A JSON document found in a string of another.
struct Embedded {
    ptr: String,
    value: Value,
    original: Option<String>,
    index: Option<StringIndex>,
}

fn find_embedded(value: &mut Value, ptr: &mut String, min_len: usize, index: Option<&StringIndex>, found: &mut Vec<Embedded>) {
    match value {
        Value::String(s) if s.len() >= min_len.max(2) && looks_like_json_container(s) => {
            if s.len() <= KEEP_ORIGINAL_MAX {
                if let Ok(parsed @ (Value::Object(_) | Value::Array(_))) = crate::fastjson::parse(s.as_bytes()) {
                    found.push(Embedded { ptr: ptr.clone(), value: parsed, original: Some(std::mem::take(s)), index: None });
                }
            } else {
                // Large: parse in place (the string's memory becomes its longest string);
                // the original is not kept, a changed or not document is re-serialised. The
                // text block of a 50 MB result was indexed when the result was parsed: no
                // second scan of it.
                let text = std::mem::take(s);
                let parsed = match index.filter(|x| x.is_for(ptr, &text)) {
                    Some(x) => crate::fastjson::parse_string_with_index(text, x),
                    None => crate::fastjson::parse_string_indexed(text),
                };
                match parsed {
                    Ok((parsed @ (Value::Object(_) | Value::Array(_)), index)) => {
                        found.push(Embedded { ptr: ptr.clone(), value: parsed, original: None, index })
                    }
                    Ok((other, _)) => *s = serde_json::to_string(&other).expect("serialises"),
                    Err(original) => *s = original,
                }
            }
        }
        Value::Array(items) => {
            let len = ptr.len();
            for (i, item) in items.iter_mut().enumerate() {
                push_index(ptr, i);
                find_embedded(item, ptr, min_len, index, found);
                ptr.truncate(len);
            }
        }
        Value::Object(map) => {
            let len = ptr.len();
            for (k, item) in map.iter_mut() {
                push_key(ptr, k);
                find_embedded(item, ptr, min_len, index, found);
                ptr.truncate(len);
            }
        }
        _ => {}
    }
}

/// Whether the JSON text at `ptr` of the root, parsed as `parsed`, repeats a value of the
/// root's `structuredContent` (only a text block's text can: see [`crate::twins`]).
fn twin_source(root: &Value, ptr: &str, parsed: &Value) -> Option<&'static str> {
    let block = ptr.strip_prefix("/content/")?.strip_suffix("/text")?;
    if block.contains('/') || root.pointer(&format!("/content/{block}/type")).and_then(Value::as_str) != Some("text") {
        return None;
    }
    crate::twins::source_of(parsed, root.get("structuredContent").filter(|s| !s.is_null())?)
}

/// The bytes of an offload.
#[derive(Debug)]
pub(crate) enum Payload {
    Bytes(Bytes),
    /// Bytes whose sha256 was computed while they were made (for a sink that prefers it).
    Digested(Bytes, [u8; 32]),
    Text(String),
}

impl Payload {
    /// Decoded bytes, with their digest if one was computed.
    pub(crate) fn new(bytes: Vec<u8>, sha256: Option<[u8; 32]>) -> Payload {
        match sha256 {
            Some(d) => Payload::Digested(bytes.into(), d),
            None => Payload::Bytes(bytes.into()),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Payload::Bytes(b) | Payload::Digested(b, _) => b.len(),
            Payload::Text(t) => t.len(),
        }
    }
}

/// How the stub is written back.
#[derive(Debug)]
pub(crate) enum Render {
    /// A one-line string stub in place of the value (JSON type kept for strings).
    StringStub,
    /// The slot is a content block in an array: a text block, then a `resource_link` block.
    Blocks,
    /// The slot is a content block outside a list: a `resource_link` whose description is the
    /// summary.
    Link,
    /// The slot is a resource contents entry (`{uri, mimeType, blob}`): `blob` is removed and
    /// `text` holds the stub, so the entry stays a valid (text) resource contents.
    BlobToText,
    /// The `<artifact:dict size=…>` placeholder, then the summary (schema-marked fields).
    Placeholder { placeholder: String },
    /// The text's head and tail around the stub, which says how much is left out (L0 strings).
    TextPreview { head: String, tail: String, omitted: usize },
    /// `{"$artifact": …, "preview": …, "schema": …}` (L0 containers, the clamp).
    JsonPreview { preview: Value, schema: Value },
    /// A value of the same JSON type (a prefix of an array, a subset of an object's keys), for
    /// slots an output schema types (see [`crate::layers::schema`]); the summary says how much.
    Typed { value: Value, partial: crate::report::Partial, cuts: Vec<crate::report::Cut> },
}

/// One value a layer decided to store.
#[derive(Debug)]
pub(crate) struct Offload {
    pub doc: usize,
    pub ptr: String,
    pub payload: Payload,
    pub mime: Option<String>,
    pub filename: Option<String>,
    pub layer: Layer,
    pub render: Render,
    /// Whether a store failure fails the transform (binaries, marked fields) or degrades to
    /// `fallback` with a warning (size-net offloads).
    pub fatal: bool,
    /// What goes back into the slot when a non-fatal store fails.
    pub fallback: Option<Value>,
    /// What is stored, for messages: `application/pdf binary`, `text`, …
    pub what: String,
    pub summary_template: Option<String>,
    pub content_type: Option<String>,
    pub vars: TemplateVars,
    /// Extra provenance for [`ArtifactRef::source`].
    pub source: Map<String, Value>,
}

/// Where artifacts go and under which name; shared by every layer of one run.
pub(crate) struct StoreCtx<'a> {
    pub sink: &'a dyn ArtifactSink,
    pub opts: &'a PutOptions,
    pub tool: &'a str,
    /// A value the store refuses is withheld (replaced by a note) instead of failing the run
    /// ([`crate::TransformInput::withhold_on_store_failure`]).
    pub withhold: bool,
}

impl StoreCtx<'_> {
    /// Stores a payload with this run's scope and namespace, handing over its sha256 if known.
    pub(crate) async fn put(
        &self,
        payload: Payload,
        mime: Option<String>,
        filename: Option<String>,
        layer: Layer,
        pointer: &str,
        extra: Map<String, Value>,
    ) -> Result<ArtifactRef, stowage_core::StoreError> {
        let mut opts = self.opts.clone();
        opts.mime_type = mime;
        opts.filename = filename;
        if !self.tool.is_empty() {
            opts.source.insert("tool".into(), self.tool.into());
        }
        opts.source.insert("pointer".into(), pointer.into());
        opts.source.insert("layer".into(), serde_json::to_value(layer).expect("layer serialises"));
        opts.source.extend(extra);
        match payload {
            Payload::Bytes(b) => self.sink.put_bytes(b, opts).await,
            Payload::Digested(b, d) => self.sink.put_bytes_sha256(b, d, opts).await,
            Payload::Text(t) => self.sink.put_bytes(Bytes::from(t), opts).await,
        }
    }
}

/// A resource entry whose `blob` gives way to a `text` line about it.
fn blob_as_text(entry: Option<&Value>, line: String) -> Value {
    let mut entry = entry.cloned().unwrap_or_else(|| Value::Object(Map::new()));
    if let Value::Object(m) = &mut entry {
        m.remove("blob");
        m.insert("text".into(), Value::String(line));
    }
    entry
}

/// The line a withheld value becomes: what it was, how big, and why, in words that name no
/// server path (a backend's own message may: it goes to the log and the event bus only).
fn withheld_note(what: &str, size: usize, e: &stowage_core::StoreError) -> String {
    format!("[withheld: {what}, {} — not stored: {}]", stowage_core::human_size(size as u64), not_stored_why(e))
}

/// Why the store did not take a value, in words that name no server path.
fn not_stored_why(e: &stowage_core::StoreError) -> String {
    use stowage_core::StoreError;
    match e {
        // These name a limit and how to change it, nothing of the server.
        StoreError::TooLarge { .. } | StoreError::QuotaExceeded { .. } => e.to_string(),
        _ => "the artifact store cannot take it now (full or unavailable); call the tool again later".to_owned(),
    }
}

/// A truncated copy kept in place of a value the store did not take, saying so: a cut that
/// looks like the whole (or like an offload whose artifact exists) would mislead the model.
fn note_not_stored(fallback: Value, what: &str, e: &stowage_core::StoreError) -> Value {
    let why = not_stored_why(e);
    match fallback {
        Value::String(kept) => Value::String(format!("{kept}\n[{what} — not stored, only its start is here: {why}]")),
        Value::Object(mut m) => {
            m.insert("not_stored".into(), Value::String(format!("{what}: {why}")));
            Value::Object(m)
        }
        // A typed prefix (an array that must stay valid for the tool's schema) keeps its shape;
        // the report and the event say what happened.
        other => other,
    }
}

/// A link (or text) block and an index where it goes in an array: `(doc, array pointer,
/// index of the block it follows, discovery order, block)`.
type Insert = (usize, String, usize, usize, Value);

/// Stores every offload and writes its stub; returns how many were stored.
pub(crate) async fn commit(
    docs: &mut Docs,
    offloads: Vec<Offload>,
    store: &StoreCtx<'_>,
    report: &mut TransformReport,
) -> Result<usize, TransformError> {
    let mut inserts: Vec<Insert> = Vec::new();
    let mut stored = 0;
    for (seq, mut off) in offloads.into_iter().enumerate() {
        let pointer = docs.report_pointer(off.doc, &off.ptr);
        let payload_len = off.payload.len();
        let payload = std::mem::replace(&mut off.payload, Payload::Text(String::new()));
        // The provenance map is a few keys; the offload keeps its own for the link's annotations.
        let result = store.put(payload, off.mime.clone(), off.filename.clone(), off.layer, &pointer, off.source.clone()).await;
        match result {
            Ok(r) => {
                stored += 1;
                place(docs, off, r, pointer, seq, &mut inserts, report);
            }
            Err(e) => not_stored(docs, off, pointer, payload_len, e, store.withhold, report)?,
        }
    }
    insert_links(docs, inserts);
    Ok(stored)
}

/// An offload the store refused: the run fails (a fatal offload when nothing may be
/// withheld), the value is withheld with a note (fatal), or a truncated copy stays (size net).
fn not_stored(
    docs: &mut Docs,
    off: Offload,
    pointer: String,
    payload_len: usize,
    e: stowage_core::StoreError,
    withhold: bool,
    report: &mut TransformReport,
) -> Result<(), TransformError> {
    if off.fatal && !withhold {
        return Err(TransformError::ArtifactStorageFailed { what: off.what, pointer, source: e });
    }
    if off.fatal {
        // The store cannot take it (full, over quota, down): the rest of the result
        // still reaches the model, and this value is named, never kept inline.
        let note = withheld_note(&off.what, payload_len, &e);
        report.warn_store(off.layer, Some(pointer.clone()), format!("cannot store {} ({}), withheld: {e}", off.what, e.code()));
        report.withheld.push(crate::report::Withheld {
            pointer,
            what: off.what.clone(),
            size_bytes: payload_len as u64,
            reason: note.clone(),
        });
        let replacement = match off.render {
            Render::Link | Render::Blocks => stub::text_block(note),
            Render::BlobToText => blob_as_text(docs.docs[off.doc].value.pointer(&off.ptr), note),
            // A typed prefix is already in place of the value: it stays, as a preview.
            Render::Typed { value, .. } => value,
            Render::TextPreview { head, tail, omitted } => Value::String(text_preview(&head, &tail, omitted, &note)),
            _ => Value::String(note),
        };
        if let Some(slot) = docs.docs[off.doc].value.pointer_mut(&off.ptr) {
            *slot = replacement;
        }
        docs.docs[off.doc].changed = true;
        return Ok(());
    }
    // A value kept in place in part says where it was cut: that is what is missing.
    let pointer = match &off.render {
        Render::Typed { cuts, .. } if !cuts.is_empty() => cuts.iter().map(|c| c.pointer.as_str()).collect::<Vec<_>>().join(", "),
        _ => pointer,
    };
    report.warn_store(off.layer, Some(pointer), format!("cannot store {} ({}), kept a truncated copy: {e}", off.what, e.code()));
    if let (Some(slot), Some(fallback)) = (docs.docs[off.doc].value.pointer_mut(&off.ptr), off.fallback) {
        *slot = note_not_stored(fallback, &off.what, &e);
        docs.docs[off.doc].changed = true;
    }
    Ok(())
}

/// A stored offload's stub in its slot (by its render), the links it adds queued in
/// `inserts`, and its record in the report.
fn place(
    docs: &mut Docs,
    off: Offload,
    r: ArtifactRef,
    pointer: String,
    seq: usize,
    inserts: &mut Vec<Insert>,
    report: &mut TransformReport,
) {
    // A typed block's annotations (audience, priority) go on the link that replaces it.
    let annotations = off.source.get("annotations").cloned();
    let link_block = |r: &ArtifactRef| {
        let mut b = stub::resource_link_block(r);
        if let Some(a) = &annotations {
            b["annotations"] = a.clone();
        }
        b
    };
    let vars = off.vars.with_artifact(&r, off.content_type.as_deref());
    // A tool's template may say "stored as {uri}": for content the NoOp store did not
    // keep, the default summary says what it was and that it was not kept.
    let summary = match &off.summary_template {
        Some(t) if !r.is_truncated() => vars.fill(t),
        _ => stub::default_summary(&r, &vars),
    };
    let line = stub::string_stub(&r, &summary);
    let mut partial = None;
    let mut cuts = Vec::new();
    let replacement = match off.render {
        Render::Typed { value, partial: p, cuts: c } => {
            partial = Some(p);
            cuts = c;
            value
        }
        Render::StringStub => Value::String(line),
        Render::Placeholder { placeholder } => Value::String(format!("{placeholder} {line}")),
        Render::TextPreview { head, tail, omitted } => Value::String(text_preview(&head, &tail, omitted, &line)),
        Render::JsonPreview { preview, schema } => {
            let mut m = Map::new();
            m.insert("$artifact".into(), artifact_object(&r, &summary));
            m.insert("preview".into(), preview);
            m.insert("schema".into(), schema);
            Value::Object(m)
        }
        // Content the NoOp store did not keep gets no link: there is nothing behind one.
        Render::Link if r.is_truncated() => stub::text_block(line),
        Render::Link => {
            let mut block = link_block(&r);
            block["description"] = Value::String(summary.clone());
            block
        }
        Render::BlobToText => blob_as_text(docs.docs[off.doc].value.pointer(&off.ptr), line),
        Render::Blocks => {
            if let Some((array_ptr, index)) = split_last(&off.ptr).and_then(|(a, i)| Some((a.to_owned(), i.parse::<usize>().ok()?)))
                && !r.is_truncated()
            {
                inserts.push((off.doc, array_ptr, index, seq, link_block(&r)));
            }
            stub::text_block(line)
        }
    };
    if let Some((array_ptr, index)) = docs.content_block_of(off.doc)
        && !r.is_truncated()
    {
        inserts.push((0, array_ptr, index, seq, stub::resource_link_block(&r)));
    }
    if let Some(slot) = docs.docs[off.doc].value.pointer_mut(&off.ptr) {
        *slot = replacement;
    }
    docs.docs[off.doc].changed = true;
    report.artifacts.push(ArtifactRecord {
        id: r.id.to_string(),
        uri: r.uri.clone(),
        pointer,
        mime_type: r.mime_type.clone(),
        size_bytes: r.size_bytes,
        sha256: r.sha256.clone(),
        layer: off.layer,
        filename: r.filename.clone(),
        summary,
        partial,
        cuts,
        artifact: r,
    });
}

/// Inserts queued `resource_link` blocks after their blocks.
fn insert_links(docs: &mut Docs, mut inserts: Vec<Insert>) {
    // Deeper arrays first and, within an
    // array, higher indices first, so every pending pointer and index still refers to the
    // original positions; several links after one block keep their discovery order.
    inserts.sort_by_key(|(doc, array_ptr, index, seq, _)| {
        (Reverse(*doc), Reverse(array_ptr.matches('/').count()), array_ptr.clone(), Reverse(*index), Reverse(*seq))
    });
    for (doc, array_ptr, index, _, block) in inserts {
        if let Some(Value::Array(items)) = docs.docs[doc].value.pointer_mut(&array_ptr) {
            let at = (index + 1).min(items.len());
            items.insert(at, block);
            docs.docs[doc].changed = true;
        }
    }
}

/// An offloaded text as the model reads it: its head, one bracketed line saying how much was
/// left out and where the whole is, and its tail.
pub(crate) fn text_preview(head: &str, tail: &str, omitted: usize, line: &str) -> String {
    let mut out = String::with_capacity(head.len() + tail.len() + line.len() + 48);
    out.push_str(head);
    if !head.is_empty() {
        out.push_str(if head.ends_with('\n') { "" } else { "\n" });
    }
    out.push_str(&format!("[… {omitted} characters left out here. {line}]"));
    if !tail.is_empty() {
        out.push('\n');
        out.push_str(tail);
    }
    out
}

/// The compact artifact description used inside JSON previews.
pub(crate) fn artifact_object(r: &ArtifactRef, summary: &str) -> Value {
    let mut m = Map::new();
    m.insert("uri".into(), r.uri.clone().into());
    if let Some(mime) = &r.mime_type {
        m.insert("mime_type".into(), mime.clone().into());
    }
    m.insert("size_bytes".into(), r.size_bytes.into());
    m.insert("sha256".into(), r.sha256[..stub::SHORT_SHA_LEN.min(r.sha256.len())].into());
    m.insert("summary".into(), summary.into());
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expand_and_collapse_round_trip() {
        let inner = json!({"a": [1, 2, {"deeper": "{\"x\": 1}"}], "b": "text"});
        let root = json!({"content": [{"type": "text", "text": serde_json::to_string_pretty(&inner).unwrap()}], "n": "[not json"});
        let docs = Docs::expand(root.clone(), 2, None);
        assert_eq!(docs.docs.len(), 3);
        assert_eq!(docs.docs[1].prefix, "/content/0/text#");
        assert_eq!(docs.docs[2].prefix, "/content/0/text#/a/2/deeper#");
        assert_eq!(docs.content_block_of(2), Some(("/content".to_owned(), 0)));
        // Unchanged documents get their original text back, formatting included.
        assert_eq!(docs.collapse(), root);
    }

    #[test]
    fn json_twins_are_folded_and_written_back_from_structured_content() {
        let sc = json!({"rows": [1, 2, 3], "n": 3});
        let root = json!({"content": [{"type": "text", "text": "{\n  \"rows\": [1, 2, 3],\n  \"n\": 3\n}"}], "structuredContent": sc});
        let docs = Docs::expand(root.clone(), 2, None);
        assert_eq!(docs.docs.len(), 1, "the text is not a document of its own");
        assert_eq!(docs.docs[0].value["content"][0]["text"], "", "folded away while the layers run");
        assert_eq!(docs.collapse(), root, "unchanged: the original text, formatting included");
        let mut docs = Docs::expand(root, 2, None);
        docs.docs[0].value["structuredContent"]["rows"] = json!([1]);
        let v = docs.collapse();
        assert_eq!(v["content"][0]["text"], "{\"rows\":[1],\"n\":3}", "written from what the layers left");
    }

    #[test]
    fn changed_docs_are_reserialised() {
        let root = json!({"text": "{\"k\": \"v\"}"});
        let mut docs = Docs::expand(root, 2, None);
        *docs.docs[1].value.pointer_mut("/k").unwrap() = json!("w");
        docs.docs[1].changed = true;
        assert_eq!(docs.collapse(), json!({"text": "{\"k\":\"w\"}"}));
    }
}
