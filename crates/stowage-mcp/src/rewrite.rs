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

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use stowage_core::{ArtifactRef, ArtifactScope, human_size};
use stowage_transform::{Layer, TransformReport};

/// `_meta` key of the transform stats on every rewritten result.
pub const TRANSFORM_META_KEY: &str = "io.stowage/transform";
/// `_meta` key of the assets when the tool's output schema forbids adding `assets`.
pub const ASSETS_META_KEY: &str = "io.stowage/assets";

/// What the offloader knows about the call.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The tool's name as the upstream knows it (used as the artifact id namespace).
    pub tool: String,
    pub upstream: String,
    pub scope: ArtifactScope,
    pub output_schema: Option<Value>,
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
        match self.offloader_for(&ctx.upstream).offload(ctx, raw).await {
            Ok(off) => {
                let report = off.report.clone();
                let artifacts = unique_assets(&off.items);
                let mut value = apply_contract(off, ctx.output_schema.as_ref(), self.links.as_deref());
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
                set_meta(&mut value, TRANSFORM_META_KEY, summary(&report, bytes_out, tokens_out, artifacts, ms));
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
    items.iter().map(|i| &i.reference.id).collect::<std::collections::HashSet<_>>().len()
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

fn set_meta(value: &mut Value, key: &str, entry: Value) {
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
    let Offloaded { mut value, items, .. } = off;
    if items.is_empty() {
        return value;
    }
    let mut assets = Vec::new();
    // Blocks to put in the content list: (position, blocks). A removed typed block (pointer
    // exactly /content/k, now null) is replaced in place; one found inside block k goes right
    // after it; anything else goes at the end.
    let mut inserts: Vec<(usize, bool, Vec<Value>)> = Vec::new();
    let content_len = value.get("content").and_then(Value::as_array).map_or(0, Vec::len);
    let mut seen = std::collections::HashSet::new();
    let mut fixups: Vec<(String, String, String, String)> = Vec::new();
    for item in &items {
        // The same bytes found twice (structuredContent and its JSON text twin) are one asset.
        if !seen.insert(item.reference.id.clone()) {
            continue;
        }
        let r = &item.reference;
        let (uri, expires) = match links.and_then(|l| l.link(r)) {
            Some((url, exp)) => (url, Some(exp)),
            None => (r.uri.clone(), r.expires_at.and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())),
        };
        let name = r.filename.clone().unwrap_or_else(|| r.id.to_string());
        // The signed URL is long (a token): it is in the resource_link and assets[] once, the
        // text only says that it exists and until when.
        let mut text = item.summary.clone();
        if let Some(m) = &r.mime_type
            && !text.contains(m.as_str())
        {
            text.push_str(&format!(" [{m}]"));
        }
        if uri != r.uri {
            match &expires {
                Some(exp) => text.push_str(&format!(" Download link in the resource_link (expires {exp}).")),
                None => text.push_str(" Download link in the resource_link."),
            }
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
            fixups.push((r.uri.clone(), uri.clone(), item.summary.clone(), text));
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
        // Links the offloader wrote: point them at the download URL, and make sure the
        // summary line sits right before each.
        for (artifact_uri, uri, summary, text) in fixups {
            let Some(k) = content.iter().position(|b| b["type"] == "resource_link" && b["uri"] == artifact_uri.as_str()) else {
                continue;
            };
            content[k]["uri"] = json!(uri);
            let signed = uri != artifact_uri;
            let before = k.checked_sub(1).and_then(|i| content[i]["text"].as_str());
            if before == Some(summary.as_str()) {
                content[k - 1]["text"] = json!(text);
            } else if signed || before.is_none_or(|t| !t.contains(&summary)) {
                // A stub inside the JSON text before the link already says it all, unless
                // there is a download link to announce.
                content.insert(k, json!({"type": "text", "text": text}));
            }
        }
    } else if let Some(obj) = value.as_object_mut() {
        let blocks: Vec<Value> = inserts.into_iter().flat_map(|(_, _, b)| b).collect();
        obj.insert("content".into(), Value::Array(blocks));
    }

    let assets = Value::Array(assets);
    let schema_allows = output_schema.is_none_or(schema_accepts_assets);
    match value.get_mut("structuredContent") {
        Some(Value::Object(sc)) if schema_allows => {
            sc.insert("assets".into(), assets);
        }
        None if output_schema.is_none() => {
            value["structuredContent"] = json!({"assets": assets});
        }
        _ => set_meta(&mut value, ASSETS_META_KEY, assets),
    }
    value
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
    if schema.pointer("/properties/assets").is_some() {
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
}
