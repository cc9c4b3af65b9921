//! tools/call rewriting into the output contract (`seeds/pr-image-gen-resource-links.md`).
//!
//! Two steps with one seam between them:
//! 1. an [`Offloader`] moves heavy parts of the raw result into the artifact store and leaves
//!    compact stubs, reporting each artifact with its JSON pointer ([`Offloaded`]); the
//!    transform pipeline plugs in through it ([`crate::pipeline::PipelineOffloader`]);
//! 2. [`apply_contract`] turns that report into what the client sees for every artifact: a
//!    short text block, a `resource_link` block and an entry in `structuredContent.assets[]`
//!    (mapping 1:1 onto MCP `FileValue`), plus transform stats in `_meta` under
//!    [`TRANSFORM_META_KEY`].
//!
//! A store failure never falls back to inline base64: the client gets an `isError` result
//! with the code `artifact_storage_failed`.
//!
//! 3. When the tool has an `outputSchema`, the rewritten `structuredContent` is checked
//!    against it ([`enforce_output_schema`]): clients that validate reject the whole result
//!    otherwise. The transform already keeps schema-typed positions typed; what still fails
//!    is repaired (the contract's `assets` moved to `_meta`, a value the rewrite touched
//!    replaced by the smallest instance its schema accepts), and what cannot be repaired
//!    becomes an `isError` result that still lists every artifact (clients do not validate
//!    error results). Never inline base64, never a dropped artifact.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use stowage_core::{ArtifactRef, ArtifactScope, human_size};
use stowage_transform::layers::schema::SchemaView;
use stowage_transform::{Layer, TransformReport};

use crate::output_schema::{OutputSchema, Violation};

/// `_meta` key of the transform stats on every rewritten result.
pub const TRANSFORM_META_KEY: &str = "io.stowage/transform";
/// `_meta` key, on a `resources/read` contents entry that stands for an artifact, of that
/// artifact (id, link, type, size).
pub const ARTIFACT_META_KEY: &str = "io.stowage/artifact";
/// `_meta` key of the assets when the tool's output schema forbids adding `assets`.
pub const ASSETS_META_KEY: &str = "io.stowage/assets";
/// Error code of a result whose compact form could not be made to match the tool's output
/// schema (see [`enforce_output_schema`]).
pub const OUTPUT_SCHEMA_MISMATCH: &str = "output_schema_mismatch";

/// What the offloader knows about the call.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The tool's name as the upstream knows it (used as the artifact id namespace).
    pub tool: String,
    pub upstream: String,
    pub scope: ArtifactScope,
    /// The tool's `outputSchema`, compiled (see [`crate::output_schema`]).
    pub output_schema: Option<Arc<OutputSchema>>,
}

/// One stored artifact and where it was found.
#[derive(Debug, Clone)]
pub struct OffloadedItem {
    pub reference: ArtifactRef,
    /// RFC 6901 pointer into the original result; `/content/3` for a whole typed block that
    /// the offloader removed (it left `null` in its place), `/content/0/text#/data` for a
    /// value inside JSON text.
    pub pointer: String,
    /// The one-line summary the model reads.
    pub summary: String,
    /// Width and height for images, when the header says.
    pub dimensions: Option<(u32, u32)>,
}

/// The offloader's output: the result with stubs in place of heavy parts, and the report.
#[derive(Debug, Clone)]
pub struct Offloaded {
    pub value: Value,
    pub items: Vec<OffloadedItem>,
    /// What the transform did: sizes and tokens, every artifact with its pointer, layers,
    /// warnings, whether the clamp ran.
    pub report: TransformReport,
}

/// Why offloading failed; the client gets an `isError` result with `code`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct OffloadError {
    pub code: &'static str,
    pub message: String,
}

/// Moves heavy parts of a tool result into the store.
#[async_trait]
pub trait Offloader: Send + Sync {
    /// `raw` is the result's JSON text, handed over so a large one is parsed once and freed.
    async fn offload(&self, ctx: &CallContext, raw: String) -> Result<Offloaded, OffloadError>;

    /// A tool result: like [`Offloader::offload`], except that a value the store cannot take
    /// is withheld with a note rather than failing the call (the store-full mode: the model
    /// still gets the rest of the result). Offloaders without that mode offload as usual.
    async fn offload_tool_result(&self, ctx: &CallContext, raw: String) -> Result<Offloaded, OffloadError> {
        self.offload(ctx, raw).await
    }

    /// Stores `data` as an artifact of the call's owner (a part of a result moved out to fit
    /// the host, see [`crate::hosts::fit`]). Offloaders without a store refuse.
    async fn store(&self, ctx: &CallContext, data: bytes::Bytes, mime: &str) -> Result<ArtifactRef, OffloadError> {
        let _ = (ctx, data, mime);
        Err(OffloadError { code: "artifact_storage_failed", message: "this gateway has no store to move parts of a result to".into() })
    }

    /// The most characters a final result may have (the clamp's limit), which the contract's
    /// additions must respect too (see [`crate::fit`]); `None`: no limit.
    fn observation_limit(&self) -> Option<usize> {
        None
    }
}

/// Turns stored artifacts into signed download links (issue 5). Without one, `resource_link`
/// and `assets[].uri` carry the permanent `artifact://` URI.
pub trait LinkMinter: Send + Sync {
    /// A download URL and its expiry (RFC 3339) for this artifact.
    fn link(&self, artifact: &ArtifactRef) -> Option<(String, String)>;
}

/// Everything the rewrite step needs.
#[derive(Clone)]
pub struct Rewriter {
    pub offloader: Arc<dyn Offloader>,
    pub links: Option<Arc<dyn LinkMinter>>,
    /// Offloaders for upstreams with their own `[gateway.servers.NAME.transform]`, by name.
    pub per_upstream: HashMap<String, Arc<dyn Offloader>>,
}

/// The rewritten result and what happened to it.
#[derive(Debug)]
pub struct Rewritten {
    pub value: Value,
    /// The transform's report; `None` when the offload failed (see `error`).
    pub report: Option<TransformReport>,
    /// Why the offload failed; the value is then the `isError` result saying so.
    pub error: Option<OffloadError>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub artifacts: usize,
}

impl Rewriter {
    pub fn new(offloader: Arc<dyn Offloader>) -> Self {
        Rewriter { offloader, links: None, per_upstream: HashMap::new() }
    }

    /// The offloader for results from `upstream`.
    pub fn offloader_for(&self, upstream: &str) -> &Arc<dyn Offloader> {
        self.per_upstream.get(upstream).unwrap_or(&self.offloader)
    }

    pub async fn rewrite(&self, ctx: &CallContext, raw: String) -> Rewritten {
        let started = std::time::Instant::now();
        let raw_len = raw.len() as u64;
        match self.offloader_for(&ctx.upstream).offload_tool_result(ctx, raw).await {
            Ok(off) => {
                let report = off.report.clone();
                let artifacts = unique_assets(&off.items);
                let schema = ctx.output_schema.as_deref();
                let (mut value, assets_in_structured) = contract(off, schema.map(OutputSchema::schema), self.links.as_deref());
                // Only a result the rewrite changed is checked: an untouched one is the
                // upstream's as it sent it, and small calls pay nothing.
                let changed = !report.artifacts.is_empty() || report.clamped || !report.warnings.is_empty();
                let check = match schema {
                    Some(s) if changed => enforce_output_schema(&mut value, s, &touched(&report), assets_in_structured),
                    _ => SchemaCheck::Unchecked,
                };
                if matches!(check, SchemaCheck::Repaired | SchemaCheck::Error) {
                    tracing::warn!(target: "stowage::call", upstream = %ctx.upstream, tool = %ctx.tool, check = check.as_str(),
                        "the rewritten structuredContent did not match the tool's outputSchema");
                }
                // The clamp ran before the contract added its lines, links and assets: the
                // limit is held for what is finally sent.
                let fitted = match self.offloader_for(&ctx.upstream).observation_limit() {
                    Some(limit) if artifacts > 0 => {
                        // Room for the summary `_meta` added below: a draft of it, measured,
                        // and a little for its keys that depend on what happens next.
                        let draft = summary(&report, report.bytes_out, report.tokens_out, artifacts, 0.0);
                        let room = serde_json::to_string(&draft).map_or(400, |d| d.len()) + TRANSFORM_META_KEY.len() + 80;
                        crate::fit::fit_to_limit(&mut value, limit.saturating_sub(room))
                    }
                    _ => false,
                };
                let out = serde_json::to_string(&value).unwrap_or_default();
                let bytes_out = out.len() as u64;
                // What the contract added (a line and a link per artifact) is counted exactly
                // when something was offloaded: the result is then a compact stub, and the
                // call already stored a blob, so a count of a few KB costs nothing noticeable.
                // Small calls with nothing offloaded keep the pipeline's count (plus an
                // estimate of any remainder): no counting on their path.
                let added = bytes_out.saturating_sub(report.bytes_out);
                let exact = artifacts > 0
                    && report.tokens_out > 0
                    && out.len() <= stowage_transform::tokens::TokensConfig::default().exact_max_bytes;
                let tokens_out = if exact {
                    stowage_transform::tokens::count(&out, &stowage_transform::tokens::TokensConfig::default()).0
                } else {
                    report.tokens_out + added.div_ceil(4)
                };
                let ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
                let mut stats = summary(&report, bytes_out, tokens_out, artifacts, ms);
                if let Some(c) = check.meta() {
                    stats["outputSchema"] = json!(c);
                }
                if fitted {
                    stats["fitted"] = json!(true);
                }
                set_meta(&mut value, TRANSFORM_META_KEY, stats);
                let tokens_in = report.tokens_in;
                Rewritten { value, report: Some(report), error: None, bytes_in: raw_len, bytes_out, tokens_in, tokens_out, artifacts }
            }
            Err(e) => {
                let value = error_result(&e, ctx.output_schema.is_some());
                let bytes_out = serde_json::to_vec(&value).map(|v| v.len() as u64).unwrap_or(0);
                Rewritten {
                    value,
                    report: None,
                    error: Some(e),
                    bytes_in: raw_len,
                    bytes_out,
                    tokens_in: 0,
                    tokens_out: bytes_out.div_ceil(4),
                    artifacts: 0,
                }
            }
        }
    }
}

/// How many distinct assets a result has (the same bytes found twice are one asset).
fn unique_assets(items: &[OffloadedItem]) -> usize {
    items.iter().filter(|i| !i.reference.is_truncated()).map(|i| &i.reference.id).collect::<std::collections::HashSet<_>>().len()
}

/// The compact summary of a transform that rides in every rewritten result's `_meta`: sizes
/// and tokens before and after, artifacts, time, and which layers acted (kept short: the
/// model may read it on every call).
fn summary(report: &TransformReport, bytes_out: u64, tokens_out: u64, artifacts: usize, ms: f64) -> Value {
    let mut layers: Vec<&'static str> = Vec::new();
    for a in &report.artifacts {
        let l = layer_name(a.layer);
        if !layers.contains(&l) {
            layers.push(l);
        }
    }
    if !report.links.is_empty() && !layers.contains(&"resource_link") {
        layers.push("resource_link");
    }
    let mut s = json!({
        "bytesIn": report.bytes_in,
        "bytesOut": bytes_out,
        "tokensIn": report.tokens_in,
        "tokensOut": tokens_out,
        "artifacts": artifacts,
        "ms": ms,
    });
    if !layers.is_empty() {
        s["layers"] = json!(layers);
    }
    if report.tokens_estimated {
        s["tokensEstimated"] = json!(true);
    }
    if report.clamped {
        s["clamped"] = json!(true);
    }
    // Values kept in place in part (typed prefixes in structuredContent): where, how much, and
    // which artifact has the rest.
    let partial: Vec<Value> = report
        .artifacts
        .iter()
        .filter_map(|a| {
            let p = a.partial?;
            Some(json!({"pointer": a.pointer, "artifact": a.id, "kept": p.kept, "total": p.total}))
        })
        .collect();
    if !partial.is_empty() {
        s["partial"] = Value::Array(partial);
    }
    if !report.warnings.is_empty() {
        s["warnings"] = json!(report.warnings.len());
    }
    s
}

/// The report's name of a layer (`base64`, `typed_content`, …).
pub fn layer_name(layer: Layer) -> &'static str {
    match layer {
        Layer::Custom => "custom",
        Layer::FieldRule => "field_rule",
        Layer::SchemaField => "schema_field",
        Layer::ResourceLink => "resource_link",
        Layer::TypedContent => "typed_content",
        Layer::Base64 => "base64",
        Layer::SizeNet => "size_net",
        Layer::Clamp => "clamp",
        Layer::Pipeline => "pipeline",
    }
}

/// The `isError` result for a failed offload: the code in the text, in `_meta`, and (when
/// the tool has no output schema to respect) in `structuredContent.error`.
pub fn error_result(e: &OffloadError, has_output_schema: bool) -> Value {
    let mut v = json!({
        "content": [{"type": "text", "text": format!("{}: {}", e.code, e.message)}],
        "isError": true,
        "_meta": {"io.stowage/error": {"code": e.code, "message": e.message}},
    });
    if !has_output_schema {
        v["structuredContent"] = json!({"error": {"code": e.code, "message": e.message}});
    }
    v
}

pub(crate) fn set_meta(value: &mut Value, key: &str, entry: Value) {
    if let Some(obj) = value.as_object_mut() {
        let meta = obj.entry("_meta").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        meta.as_object_mut().expect("made an object").insert(key.to_owned(), entry);
    }
}

/// The asset kind for a media type.
pub fn kind_of(mime: Option<&str>) -> &'static str {
    let m = mime.unwrap_or("").to_ascii_lowercase();
    if m.starts_with("image/") {
        "image"
    } else if m.starts_with("audio/") {
        "audio"
    } else if m.starts_with("video/") {
        "video"
    } else if m.starts_with("text/") || m.contains("json") {
        "text"
    } else {
        "file"
    }
}

/// Builds the contract's three parts for every offloaded item.
pub fn apply_contract(off: Offloaded, output_schema: Option<&Value>, links: Option<&dyn LinkMinter>) -> Value {
    contract(off, output_schema, links).0
}

/// [`apply_contract`], and whether `assets` went into `structuredContent` (rather than
/// `_meta`).
fn contract(off: Offloaded, output_schema: Option<&Value>, links: Option<&dyn LinkMinter>) -> (Value, bool) {
    let Offloaded { mut value, items, report } = off;
    note_partial_fallbacks(&mut value, &report);
    if items.is_empty() {
        return (value, false);
    }
    let mut assets = Vec::new();
    // Blocks to put in the content list: (position, blocks). A removed typed block (pointer
    // exactly /content/k, now null) is replaced in place; one found inside block k goes right
    // after it; anything else goes at the end.
    let mut inserts: Vec<(usize, bool, Vec<Value>)> = Vec::new();
    let content_len = value.get("content").and_then(Value::as_array).map_or(0, Vec::len);
    let mut seen = std::collections::HashSet::new();
    let mut fixups: Vec<Fixup> = Vec::new();
    for item in &items {
        // The same bytes found twice (structuredContent and its JSON text twin) are one asset.
        if !seen.insert(item.reference.id.clone()) {
            continue;
        }
        let r = &item.reference;
        if r.is_truncated() {
            // The NoOp store kept nothing: the model reads that it was not kept, and gets no
            // link, no `artifact://` and no asset (there is nothing behind any of them).
            let blocks = vec![json!({"type": "text", "text": item.summary.clone()})];
            match content_position(&item.pointer) {
                // A whole block the offloader already replaced with its own line.
                Some((k, true)) if k < content_len => {}
                Some((k, false)) if k < content_len => inserts.push((k, false, blocks)),
                _ => inserts.push((usize::MAX, false, blocks)),
            }
            continue;
        }
        let (uri, expires) = match links.and_then(|l| l.link(r)) {
            Some((url, exp)) => (url, Some(exp)),
            None => (r.uri.clone(), r.expires_at.and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())),
        };
        let name = r.filename.clone().unwrap_or_else(|| r.id.to_string());
        // One line per artifact, and it carries the download link when there is one (a host
        // that shows the model text only still gets it).
        let mut text = item.summary.clone();
        if let Some(m) = &r.mime_type
            && !text.contains(m.as_str())
        {
            text.push_str(&format!(" [{m}]"));
        }
        let download = (uri != r.uri).then(|| download_note(&uri, expires.as_deref()));
        if let Some(d) = &download {
            text.push_str(d);
        }
        let mut link = json!({
            "type": "resource_link",
            "name": name,
            "title": format!("{} ({})", name, human_size(r.size_bytes)),
            "uri": uri,
            "size": r.size_bytes,
        });
        if let Some(m) = &r.mime_type {
            link["mimeType"] = json!(m);
        }
        let blocks = vec![json!({"type": "text", "text": text}), link];
        if existing_link(&value, &r.uri).is_some() {
            // The offloader already wrote this artifact's link; fixed up after the inserts.
            fixups.push(Fixup { artifact_uri: r.uri.clone(), uri: uri.clone(), summary: item.summary.clone(), text, download });
        } else {
            match content_position(&item.pointer) {
                Some((k, whole)) if k < content_len => inserts.push((k, whole, blocks)),
                _ => inserts.push((usize::MAX, false, blocks)),
            }
        }
        let mut asset = Map::new();
        asset.insert("id".into(), json!(r.id));
        asset.insert("kind".into(), json!(kind_of(r.mime_type.as_deref())));
        asset.insert("displayName".into(), json!(name));
        if let Some(m) = &r.mime_type {
            asset.insert("mimeType".into(), json!(m));
        }
        asset.insert("size".into(), json!(r.size_bytes));
        asset.insert("sha256".into(), json!(r.sha256));
        if let Some((w, h)) = item.dimensions {
            asset.insert("width".into(), json!(w));
            asset.insert("height".into(), json!(h));
        }
        asset.insert("uri".into(), json!(uri));
        asset.insert("artifactUri".into(), json!(r.uri));
        if let Some(exp) = expires {
            asset.insert("expiresAt".into(), json!(exp));
        }
        assets.push(Value::Object(asset));
    }

    if let Some(content) = value.get_mut("content").and_then(Value::as_array_mut) {
        let old = std::mem::take(content);
        let mut tail = Vec::new();
        for (_, _, blocks) in inserts.iter().filter(|(k, _, _)| *k == usize::MAX) {
            tail.extend(blocks.iter().cloned());
        }
        for (k, block) in old.into_iter().enumerate() {
            let mine: Vec<_> = inserts.iter().filter(|(p, _, _)| *p == k).collect();
            if !block.is_null() {
                content.push(block);
            }
            for (_, _, blocks) in mine {
                content.extend(blocks.iter().cloned());
            }
        }
        content.extend(tail);
        // Links the offloader wrote: point them at the download URL, and make sure exactly one
        // line before each says what it is.
        for f in fixups {
            let Some(k) = content.iter().position(|b| b["type"] == "resource_link" && b["uri"] == f.artifact_uri.as_str()) else {
                continue;
            };
            content[k]["uri"] = json!(f.uri);
            let before = k.checked_sub(1).and_then(|i| content[i]["text"].as_str());
            match before {
                // The offloader's own line for this artifact (a typed block's stub): it stays
                // the one line, and carries the download link.
                Some(t) if t == f.summary || is_stub_line(t, &f.summary) => {
                    let line = match &f.download {
                        Some(_) if t == f.summary => f.text.clone(),
                        Some(d) => format!("{t}{d}"),
                        None => t.to_owned(),
                    };
                    content[k - 1]["text"] = json!(line);
                }
                // A stub inside the JSON text before the link already names the artifact,
                // unless there is a download link to give.
                Some(t) if f.download.is_none() && t.contains(&f.summary) => {}
                _ => content.insert(k, json!({"type": "text", "text": f.text})),
            }
        }
    } else if let Some(obj) = value.as_object_mut() {
        let blocks: Vec<Value> = inserts.into_iter().flat_map(|(_, _, b)| b).collect();
        obj.insert("content".into(), Value::Array(blocks));
    }

    if assets.is_empty() {
        // Only content the NoOp store did not keep: nothing to list.
        return (value, false);
    }
    let assets = Value::Array(assets);
    let schema_allows = output_schema.is_none_or(schema_accepts_assets);
    match value.get_mut("structuredContent") {
        // Never over a key of the tool's own.
        Some(Value::Object(sc)) if schema_allows && !sc.contains_key("assets") => {
            sc.insert("assets".into(), assets);
            return (value, true);
        }
        None if output_schema.is_none() => {
            value["structuredContent"] = json!({"assets": assets});
            return (value, true);
        }
        _ => set_meta(&mut value, ASSETS_META_KEY, assets),
    }
    (value, false)
}

/// A value in `structuredContent` that could not be stored was cut to its typed prefix (the
/// store's refusal is a warning there, not an error): one line says so, so the cut is never
/// silent.
fn note_partial_fallbacks(value: &mut Value, report: &TransformReport) {
    for w in &report.warnings {
        let Some(p) = w.pointer.as_deref().filter(|p| p.starts_with("/structuredContent")) else { continue };
        if !w.message.starts_with("cannot store") {
            continue;
        }
        // What happened, without the store's own error, which may name server paths (the log
        // and the event bus have it whole).
        let what = w.message.split_once(": ").map_or(w.message.as_str(), |(head, _)| head);
        let line = json!({"type": "text", "text": format!("Only part of {p} is shown: {what}")});
        if let Some(content) = value.get_mut("content").and_then(Value::as_array_mut) {
            content.push(line);
        }
    }
}

/// A link the offloader already wrote, and the line that should stand before it.
struct Fixup {
    artifact_uri: String,
    uri: String,
    summary: String,
    /// The whole line, as written for a new link.
    text: String,
    /// ` Download: <url> (expires …)` when there is a download link.
    download: Option<String>,
}

/// The download part of an artifact's line.
fn download_note(url: &str, expires: Option<&str>) -> String {
    match expires {
        Some(exp) => format!(" Download: {url} (expires {exp})"),
        None => format!(" Download: {url}"),
    }
}

/// Whether `text` is the transform's one-line stub for the artifact with `summary` (summary,
/// then the bracketed details): a line of its own, not JSON that contains it.
fn is_stub_line(text: &str, summary: &str) -> bool {
    let head = stowage_transform::stub::one_line(summary, 240);
    text.strip_prefix(head.as_str()).is_some_and(|rest| rest.starts_with(" [") && !rest.contains('\n'))
}

/// What checking a rewritten result against the tool's output schema came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaCheck {
    /// Not checked: no schema, or the rewrite changed nothing.
    Unchecked,
    Valid,
    /// `assets` did not fit the schema and went to `_meta` instead.
    AssetsMoved,
    /// Positions the rewrite touched were replaced by the smallest values their schema accepts.
    Repaired,
    /// The upstream's own result does not validate, where the rewrite did not touch it: it is
    /// relayed as it is (not the gateway's to fix).
    UpstreamInvalid,
    /// No valid compact form: the result became an `isError` result listing every artifact.
    Error,
}

impl SchemaCheck {
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaCheck::Unchecked => "unchecked",
            SchemaCheck::Valid => "valid",
            SchemaCheck::AssetsMoved => "assets_moved",
            SchemaCheck::Repaired => "repaired",
            SchemaCheck::UpstreamInvalid => "upstream_invalid",
            SchemaCheck::Error => "error",
        }
    }

    /// What `_meta` says about it: nothing when it was checked and fine, or not checked.
    fn meta(self) -> Option<&'static str> {
        (!matches!(self, SchemaCheck::Unchecked | SchemaCheck::Valid)).then(|| self.as_str())
    }
}

/// Pointers (relative to `structuredContent`) of what the transform changed there; `""` when
/// it may have changed anything (the clamp).
fn touched(report: &TransformReport) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let pointers = report.artifacts.iter().map(|a| a.pointer.as_str()).chain(report.warnings.iter().filter_map(|w| w.pointer.as_deref()));
    for p in pointers {
        if p.is_empty() {
            out.push(String::new());
        } else if let Some(rel) = p.strip_prefix("/structuredContent")
            && (rel.is_empty() || rel.starts_with('/'))
        {
            out.push(rel.to_owned());
        }
    }
    if report.clamped {
        out.push(String::new());
    }
    out
}

/// Whether a violation at `at` can come from a change at `touched` (one contains the other).
fn related(touched: &str, at: &str) -> bool {
    let within = |outer: &str, inner: &str| inner == outer || inner.strip_prefix(outer).is_some_and(|r| r.starts_with('/'));
    touched.is_empty() || at.is_empty() || within(touched, at) || within(at, touched)
}

/// Makes the rewritten `structuredContent` of `value` validate against `schema` (see the
/// module docs): `touched` are the positions the rewrite changed, `assets_added` whether the
/// contract put `assets` there.
pub fn enforce_output_schema(value: &mut Value, schema: &OutputSchema, touched: &[String], assets_added: bool) -> SchemaCheck {
    if value.get("isError") == Some(&Value::Bool(true)) || schema.compile_error().is_some() {
        return SchemaCheck::Unchecked;
    }
    let Some(sc) = value.get("structuredContent") else { return SchemaCheck::Unchecked };
    if schema.is_valid(sc) {
        return SchemaCheck::Valid;
    }
    if assets_added && let Some(assets) = value["structuredContent"].as_object_mut().and_then(|m| m.remove("assets")) {
        set_meta(value, ASSETS_META_KEY, assets);
        if schema.is_valid(&value["structuredContent"]) {
            return SchemaCheck::AssetsMoved;
        }
    }
    let view = SchemaView::new(schema.schema());
    let mut last: Option<Violation> = None;
    // A few rounds: a repair can uncover the next violation below it.
    for round in 0..4 {
        let violations = schema.violations(&value["structuredContent"], 32);
        let Some(first) = violations.first().cloned() else { return SchemaCheck::Repaired };
        let ours: Vec<&Violation> = violations.iter().filter(|v| touched.iter().any(|t| related(t, &v.pointer))).collect();
        if ours.is_empty() {
            return if round == 0 { SchemaCheck::UpstreamInvalid } else { SchemaCheck::Repaired };
        }
        last = Some(first);
        let mut changed = false;
        for v in ours {
            let sc = &value["structuredContent"];
            let Some(minimal) = view.minimal_instance(&view.at(sc, &v.pointer)) else { continue };
            let Some(slot) = value["structuredContent"].pointer_mut(&v.pointer) else { continue };
            changed |= repair(slot, minimal);
        }
        if !changed {
            break;
        }
    }
    if schema.is_valid(&value["structuredContent"]) {
        return SchemaCheck::Repaired;
    }
    let why = last.map_or_else(|| "it does not validate".to_owned(), |v| v.to_string());
    schema_error_result(value, &why);
    SchemaCheck::Error
}

/// Puts `minimal` at `slot`: an object only gets the members it lacks (what it has may be
/// fine), anything else is replaced. Whether anything changed.
fn repair(slot: &mut Value, minimal: Value) -> bool {
    match (slot, minimal) {
        (Value::Object(have), Value::Object(need)) => {
            let mut changed = false;
            for (k, v) in need {
                if !have.contains_key(&k) {
                    have.insert(k, v);
                    changed = true;
                }
            }
            changed
        }
        (slot, minimal) if *slot != minimal => {
            *slot = minimal;
            true
        }
        _ => false,
    }
}

/// The last resort: an `isError` result (clients do not validate those against the output
/// schema) that keeps every line and link, says why first, and drops the structuredContent
/// that does not fit.
fn schema_error_result(value: &mut Value, why: &str) {
    let message = format!(
        "The compact form of this result does not match the tool's outputSchema ({why}), so it is returned as an error; \
         the heavy parts are stored as the artifacts listed here."
    );
    if let Some(obj) = value.as_object_mut() {
        obj.remove("structuredContent");
        obj.insert("isError".into(), Value::Bool(true));
        let line = json!({"type": "text", "text": format!("{OUTPUT_SCHEMA_MISMATCH}: {message}")});
        match obj.get_mut("content").and_then(Value::as_array_mut) {
            Some(content) => content.insert(0, line),
            None => {
                obj.insert("content".into(), json!([line]));
            }
        }
    }
    set_meta(value, "io.stowage/error", json!({"code": OUTPUT_SCHEMA_MISMATCH, "message": message}));
}

/// The index in `content` of the `resource_link` block that points at `artifact_uri`.
fn existing_link(value: &Value, artifact_uri: &str) -> Option<usize> {
    value.get("content")?.as_array()?.iter().position(|b| b["type"] == "resource_link" && b["uri"] == artifact_uri)
}

/// `(k, whole_block)` for pointers into `/content/k`.
fn content_position(pointer: &str) -> Option<(usize, bool)> {
    let rest = pointer.strip_prefix("/content/")?;
    let end = rest.find(['/', '#']).unwrap_or(rest.len());
    let k = rest[..end].parse().ok()?;
    Some((k, end == rest.len()))
}

/// Whether adding an `assets` property keeps structuredContent valid against `schema`.
fn schema_accepts_assets(schema: &Value) -> bool {
    schema_accepts_key(schema, "assets")
}

/// Whether an object `schema` lets `key` be added: it declares it, or does not close the
/// object.
pub(crate) fn schema_accepts_key(schema: &Value, key: &str) -> bool {
    if schema.get("properties").and_then(|p| p.get(key)).is_some() {
        return true;
    }
    !matches!(schema.get("additionalProperties"), Some(Value::Bool(false)))
        && !matches!(schema.get("unevaluatedProperties"), Some(Value::Bool(false)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::ArtifactId;

    fn item(pointer: &str, mime: &str) -> OffloadedItem {
        let sha = "ab".repeat(32);
        let id = ArtifactId::from_content(Some("t"), &sha);
        OffloadedItem {
            reference: ArtifactRef {
                uri: id.uri(),
                id,
                mime_type: Some(mime.into()),
                size_bytes: 4033,
                filename: None,
                sha256: sha,
                scope: ArtifactScope::session("s"),
                source: Map::new(),
                created_at: time::OffsetDateTime::UNIX_EPOCH,
                expires_at: None,
            },
            pointer: pointer.into(),
            summary: "PNG image, 3.9 KB, artifact://t_abababababababab".into(),
            dimensions: Some((64, 32)),
        }
    }

    #[test]
    fn typed_block_is_replaced_in_place_by_text_and_link() {
        let off = Offloaded {
            value: json!({"content": [{"type":"text","text":"before"}, null, {"type":"text","text":"after"}]}),
            items: vec![item("/content/1", "image/png")],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, None, None);
        let types: Vec<_> = v["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["text", "text", "resource_link", "text"]);
        assert_eq!(v["content"][2]["uri"], "artifact://t_abababababababab");
        assert_eq!(v["content"][2]["mimeType"], "image/png");
        assert_eq!(v["content"][2]["size"], 4033);
        let a = &v["structuredContent"]["assets"][0];
        assert_eq!(a["kind"], "image");
        assert_eq!((a["width"].as_u64(), a["height"].as_u64()), (Some(64), Some(32)));
        assert_eq!(a["artifactUri"], a["uri"]);
        assert_eq!(a["sha256"].as_str().unwrap().len(), 64);
    }

    #[test]
    fn a_closed_output_schema_gets_assets_in_meta_instead() {
        let schema = json!({"type":"object","properties":{"n":{"type":"number"}},"additionalProperties":false});
        let off = Offloaded {
            value: json!({"content": [{"type":"text","text":"{}"}], "structuredContent": {"n": 1}}),
            items: vec![item("/structuredContent/blob", "application/pdf")],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, Some(&schema), None);
        assert_eq!(v["structuredContent"], json!({"n": 1}));
        assert_eq!(v["_meta"][ASSETS_META_KEY][0]["kind"], "file");
        assert_eq!(v["content"].as_array().unwrap().len(), 3);
    }

    struct FixedLinks;
    impl LinkMinter for FixedLinks {
        fn link(&self, a: &ArtifactRef) -> Option<(String, String)> {
            Some((format!("http://gw/artifacts/{}?token=t", a.id), "2026-11-22T09:00:00Z".into()))
        }
    }

    /// The pipeline writes its own text + resource_link for typed blocks, and only a stub
    /// inside JSON text: both end with one summary line and one signed link per artifact.
    #[test]
    fn links_written_by_the_offloader_are_signed_and_get_their_summary_line() {
        let it = item("/content/0/text#/data", "application/pdf");
        let link = json!({"type":"resource_link","uri": it.reference.uri, "name":"x"});
        let off = Offloaded {
            value: json!({"content": [{"type":"text","text":"{\"data\":\"stub\"}"}, link]}),
            items: vec![it.clone(), it],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, None, Some(&FixedLinks));
        let content = v["content"].as_array().unwrap();
        assert_eq!(content.len(), 3, "{v}");
        let text = content[1]["text"].as_str().unwrap();
        assert!(
            text.contains("artifact://t_") && text.contains("[application/pdf]") && text.contains("expires 2026-11-22T09:00:00Z"),
            "{text}"
        );
        assert_eq!(content[2]["uri"], "http://gw/artifacts/t_abababababababab?token=t");
        let a = &v["structuredContent"]["assets"];
        assert_eq!(a.as_array().unwrap().len(), 1);
        assert_eq!(a[0]["uri"], content[2]["uri"]);
        assert_eq!(a[0]["artifactUri"], "artifact://t_abababababababab");
        assert_eq!(a[0]["expiresAt"], "2026-11-22T09:00:00Z");
    }

    #[test]
    fn errors_carry_the_code() {
        let e = OffloadError { code: "artifact_storage_failed", message: "disk full".into() };
        let v = error_result(&e, false);
        assert_eq!(v["isError"], true);
        assert_eq!(v["structuredContent"]["error"]["code"], "artifact_storage_failed");
        assert!(v["content"][0]["text"].as_str().unwrap().starts_with("artifact_storage_failed: "));
    }

    /// A typed block: the pipeline wrote its stub line and a link. With a download link there
    /// is still one line for the one artifact, and it carries the link; `_meta` counts one.
    #[test]
    fn one_offloaded_item_is_one_line_with_its_link() {
        let it = item("/content/1", "image/png");
        let r = &it.reference;
        let stub = format!("{} [{}, image/png, sha256:abababababab]", it.summary, r.uri);
        let link = json!({"type":"resource_link","uri": r.uri, "name":"x"});
        let off = Offloaded {
            value: json!({"content": [{"type":"text","text":"Here it is:"}, {"type":"text","text": stub}, link]}),
            items: vec![it.clone()],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, None, Some(&FixedLinks));
        let content = v["content"].as_array().unwrap();
        let lines: Vec<&str> = content.iter().filter_map(|b| b["text"].as_str()).filter(|t| t.contains("t_abababababababab")).collect();
        assert_eq!(lines.len(), 1, "{v}");
        assert!(lines[0].starts_with(&stub), "{}", lines[0]);
        assert!(
            lines[0].ends_with(" Download: http://gw/artifacts/t_abababababababab?token=t (expires 2026-11-22T09:00:00Z)"),
            "{}",
            lines[0]
        );
        assert_eq!(content.len(), 3);
        assert_eq!(content[2]["uri"], "http://gw/artifacts/t_abababababababab?token=t");
        // Without links: the stub line as it was, one line.
        let off = Offloaded {
            value: json!({"content": [{"type":"text","text": stub.clone()}, {"type":"resource_link","uri": r.uri, "name":"x"}]}),
            items: vec![it],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, None, None);
        assert_eq!(v["content"].as_array().unwrap().len(), 2, "{v}");
        assert_eq!(v["content"][0]["text"], stub.as_str());
    }

    #[test]
    fn a_tools_own_assets_key_is_never_overwritten() {
        let off = Offloaded {
            value: json!({"content": [], "structuredContent": {"assets": ["mine"]}}),
            items: vec![item("/structuredContent/blob", "application/pdf")],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, None, None);
        assert_eq!(v["structuredContent"]["assets"], json!(["mine"]));
        assert_eq!(v["_meta"][ASSETS_META_KEY][0]["kind"], "file");
    }

    fn rows_schema() -> OutputSchema {
        OutputSchema::compile(
            json!({"type": "object", "properties": {"result": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
            "n": {"type": "integer"}}, "required": ["result"]}),
        )
    }

    #[test]
    fn assets_that_break_the_schema_move_to_meta() {
        // Closed inside an allOf: only the validator sees that `assets` does not fit.
        let schema = OutputSchema::compile(
            json!({"allOf": [{"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false}]}),
        );
        let mut v = json!({"content": [], "structuredContent": {"n": 1, "assets": [{"id": "x"}]}});
        assert_eq!(enforce_output_schema(&mut v, &schema, &["/blob".into()], true), SchemaCheck::AssetsMoved);
        assert_eq!(v["structuredContent"], json!({"n": 1}));
        assert_eq!(v["_meta"][ASSETS_META_KEY][0]["id"], "x");
    }

    #[test]
    fn touched_positions_are_repaired_to_what_the_schema_accepts() {
        let schema = rows_schema();
        // The rewrite left an object where an array must be.
        let mut v = json!({"content": [], "structuredContent": {"result": {"$artifact": {}}, "n": 3}});
        assert_eq!(enforce_output_schema(&mut v, &schema, &["/result".into()], false), SchemaCheck::Repaired);
        assert_eq!(v["structuredContent"], json!({"result": [], "n": 3}));
        assert!(schema.is_valid(&v["structuredContent"]));
        // An item lost a required member: only that member is added.
        let mut v = json!({"content": [], "structuredContent": {"result": [{"id": 1}, {"x": 2}]}});
        assert_eq!(enforce_output_schema(&mut v, &schema, &["/result/1/x".into()], false), SchemaCheck::Repaired);
        assert_eq!(v["structuredContent"]["result"][1], json!({"x": 2, "id": 0}));
    }

    #[test]
    fn an_upstreams_own_invalid_result_is_left_alone() {
        let schema = rows_schema();
        let mut v = json!({"content": [], "structuredContent": {"result": [], "n": "three"}});
        let before = v.clone();
        assert_eq!(enforce_output_schema(&mut v, &schema, &["/result".into()], false), SchemaCheck::UpstreamInvalid);
        assert_eq!(v, before);
    }

    #[test]
    fn what_cannot_be_repaired_becomes_an_error_result_that_keeps_its_artifacts() {
        // `contains` cannot be met by a smallest instance.
        let schema = OutputSchema::compile(
            json!({"type": "object", "properties": {"xs": {"type": "array", "contains": {"const": 7}}}, "required": ["xs"]}),
        );
        let mut v = json!({"content": [{"type": "text", "text": "JSON array stored as artifact://t_1"}, {"type": "resource_link", "uri": "artifact://t_1", "name": "t_1"}],
            "structuredContent": {"xs": [1, 2]}});
        assert_eq!(enforce_output_schema(&mut v, &schema, &["/xs".into()], false), SchemaCheck::Error);
        assert_eq!(v["isError"], true);
        assert!(v.get("structuredContent").is_none());
        assert!(v["content"][0]["text"].as_str().unwrap().starts_with("output_schema_mismatch: "), "{v}");
        assert_eq!(v["content"][2]["uri"], "artifact://t_1", "the artifact is still there");
        assert_eq!(v["_meta"]["io.stowage/error"]["code"], OUTPUT_SCHEMA_MISMATCH);
    }
}
