//! Step 2, the contract: what a client sees for every offloaded item
//! (`pr-image-gen-resource-links` in the design notes).
//!
//! Per artifact, in `content`: one text line (kind, name, size, media type, the `artifact://`
//! URI, and when a download link was minted, its expiry) and one `resource_link` whose URI is
//! the signed download link (or the `artifact://` URI without links). The full record of each
//! artifact (id, kind, media type, size, sha256, dimensions, the download link, the permanent
//! URI, the expiry: MCP's `FileValue` and then some) goes to `_meta["io.stowage/assets"]`,
//! where hosts and apps read it and the model does not: references stay cheap, and each
//! signed URL appears once in what a model sees. A host that cannot take `resource_link`
//! blocks gets the link in the line instead (see [`super::host`]).
//!
//! A store failure never falls back to inline base64: the client gets an `isError` result
//! with the code `artifact_storage_failed` ([`error_result`]).

use std::collections::HashSet;

use serde_json::{Map, Value, json};
use stowage_core::ArtifactRef;
use stowage_transform::{Layer, TransformReport};

use super::offload::{OffloadError, Offloaded, OffloadedItem};

/// `_meta` key of the stats on every shaped answer.
pub const TRANSFORM_META_KEY: &str = "io.stowage/transform";
/// `_meta` key, on a `resources/read` contents entry that stands for an artifact, of that
/// artifact (id, link, type, size).
pub const ARTIFACT_META_KEY: &str = "io.stowage/artifact";
/// `_meta` key of the full record of every artifact an answer references.
pub const ASSETS_META_KEY: &str = "io.stowage/assets";

/// Turns stored artifacts into signed download links. Without one, `resource_link` and the
/// assets carry the permanent `artifact://` URI.
pub trait LinkMinter: Send + Sync {
    /// A download URL and its expiry (RFC 3339) for this artifact.
    fn link(&self, artifact: &ArtifactRef) -> Option<(String, String)>;
}

/// People's links as the gateway mints them everywhere else ([`stowage_http::Links::for_people`]),
/// capped at the artifact's expiry; an artifact that is already expired gets none.
impl LinkMinter for stowage_http::LinkService {
    fn link(&self, artifact: &ArtifactRef) -> Option<(String, String)> {
        let link = self.link_for(artifact);
        let expires = link.expires_rfc3339();
        (!expires.is_empty()).then_some((link.url, expires))
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

/// How many distinct artifacts `items` are (the same bytes found twice are one).
pub(crate) fn unique_assets(items: &[OffloadedItem]) -> usize {
    items.iter().filter(|i| !i.reference.is_truncated()).map(|i| &i.reference.id).collect::<HashSet<_>>().len()
}

/// The expiry part of an artifact's line: `(link expires 15:05 UTC)`. Links live at most an
/// hour, so the time of day is unambiguous and cheaper for a model than a full timestamp.
fn expiry_note(expires: &str) -> String {
    let at = time::OffsetDateTime::parse(expires, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.to_offset(time::UtcOffset::UTC))
        .and_then(|t| t.format(time::macros::format_description!("[hour]:[minute] UTC")).ok());
    format!(" (link expires {})", at.as_deref().unwrap_or(expires))
}

/// The full record of one artifact, as `_meta["io.stowage/assets"]` lists it.
fn asset_record(r: &ArtifactRef, dimensions: Option<(u32, u32)>, uri: &str, expires: Option<&str>) -> Value {
    let mut asset = Map::new();
    asset.insert("id".into(), json!(r.id));
    asset.insert("kind".into(), json!(kind_of(r.mime_type.as_deref())));
    asset.insert("displayName".into(), json!(display_name(r)));
    if let Some(m) = &r.mime_type {
        asset.insert("mimeType".into(), json!(m));
    }
    asset.insert("size".into(), json!(r.size_bytes));
    asset.insert("sha256".into(), json!(r.sha256));
    if let Some((w, h)) = dimensions {
        asset.insert("width".into(), json!(w));
        asset.insert("height".into(), json!(h));
    }
    asset.insert("uri".into(), json!(uri));
    asset.insert("artifactUri".into(), json!(r.uri));
    if let Some(exp) = expires {
        asset.insert("expiresAt".into(), json!(exp));
    }
    Value::Object(asset)
}

fn display_name(r: &ArtifactRef) -> String {
    r.filename.clone().unwrap_or_else(|| stowage_transform::stub::default_name(r))
}

/// The contract for a tool result (see the module docs); returns the answer.
pub fn apply_contract(off: Offloaded, links: Option<&dyn LinkMinter>) -> Value {
    let Offloaded { mut value, items, report } = off;
    note_partial_fallbacks(&mut value, &report);
    if items.is_empty() {
        return value;
    }
    let mut assets = Vec::new();
    // Blocks to put in the content list: (position, whole, blocks). A removed typed block
    // (pointer exactly /content/k, now null) is replaced in place; one found inside block k
    // goes right after it; anything else goes at the end.
    let mut inserts: Vec<(usize, bool, Vec<Value>)> = Vec::new();
    let content_len = value.get("content").and_then(Value::as_array).map_or(0, Vec::len);
    let mut seen = HashSet::new();
    let mut fixups: Vec<Fixup> = Vec::new();
    for item in &items {
        // The same bytes found twice are one asset.
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
            None => (r.uri.clone(), None),
        };
        // One line per artifact; the link's URL is in the link (or, for hosts that take no
        // links, appended to this line later), never twice.
        let mut text = item.summary.clone();
        if let Some(m) = &r.mime_type
            && !text.contains(m.as_str())
        {
            text.push_str(&format!(" [{m}]"));
        }
        let note = expires.as_deref().map(expiry_note);
        if let Some(n) = &note {
            text.push_str(n);
        }
        let mut link = json!({"type": "resource_link", "name": display_name(r), "uri": uri, "size": r.size_bytes});
        if let Some(m) = &r.mime_type {
            link["mimeType"] = json!(m);
        }
        if existing_link(&value, &r.uri).is_some() {
            // The pipeline already wrote this artifact's link; fixed up after the inserts.
            fixups.push(Fixup { artifact_uri: r.uri.clone(), uri: uri.clone(), summary: item.summary.clone(), text: text.clone(), note });
        } else {
            let blocks = vec![json!({"type": "text", "text": text}), link];
            match content_position(&item.pointer) {
                Some((k, whole)) if k < content_len => inserts.push((k, whole, blocks)),
                _ => inserts.push((usize::MAX, false, blocks)),
            }
        }
        assets.push(asset_record(r, item.dimensions, &uri, expires.as_deref()));
    }

    if let Some(content) = value.get_mut("content").and_then(Value::as_array_mut) {
        let old = std::mem::take(content);
        let mut tail = Vec::new();
        for (_, _, blocks) in inserts.iter().filter(|(k, _, _)| *k == usize::MAX) {
            tail.extend(blocks.iter().cloned());
        }
        for (k, block) in old.into_iter().enumerate() {
            if !block.is_null() {
                content.push(block);
            }
            for (_, _, blocks) in inserts.iter().filter(|(p, _, _)| *p == k) {
                content.extend(blocks.iter().cloned());
            }
        }
        content.extend(tail);
        // Links the pipeline wrote: point them at the download URL, and make sure exactly one
        // line before each says what it is.
        for f in fixups {
            let Some(k) = content.iter().position(|b| b["type"] == "resource_link" && b["uri"] == f.artifact_uri.as_str()) else {
                continue;
            };
            content[k]["uri"] = json!(f.uri);
            let before = k.checked_sub(1).and_then(|i| content[i]["text"].as_str());
            match before {
                // The pipeline's own line for this artifact (a typed block's stub): it stays
                // the one line, with the link's expiry.
                Some(t) if t == f.summary || is_stub_line(t, &f.summary) => {
                    let line = match &f.note {
                        Some(_) if t == f.summary => f.text.clone(),
                        Some(n) => format!("{t}{n}"),
                        None => t.to_owned(),
                    };
                    content[k - 1]["text"] = json!(line);
                }
                // A stub inside the JSON text before the link already names the artifact,
                // unless there is an expiry to give.
                Some(t) if f.note.is_none() && t.contains(&f.summary) => {}
                _ => content.insert(k, json!({"type": "text", "text": f.text})),
            }
        }
    } else if let Some(obj) = value.as_object_mut() {
        let blocks: Vec<Value> = inserts.into_iter().flat_map(|(_, _, b)| b).collect();
        obj.insert("content".into(), Value::Array(blocks));
    }
    if !assets.is_empty() {
        merge_assets(&mut value, assets);
    }
    value
}

/// Lists artifacts stored after the contract (parts moved out for a host's budget or the final
/// limit) in `_meta` with the others, each with a fresh link when links are on.
pub(crate) fn record_stored(value: &mut Value, stored: &[ArtifactRef], links: Option<&dyn LinkMinter>) {
    if stored.is_empty() {
        return;
    }
    let records = stored
        .iter()
        .map(|r| match links.and_then(|l| l.link(r)) {
            Some((url, exp)) => asset_record(r, super::offload::dimensions(&r.source), &url, Some(&exp)),
            None => asset_record(r, super::offload::dimensions(&r.source), &r.uri, None),
        })
        .collect();
    merge_assets(value, records);
}

/// Adds `assets` to the answer's `_meta` assets, keeping those already there.
pub(crate) fn merge_assets(value: &mut Value, assets: Vec<Value>) {
    let mut all = match value.pointer_mut(&format!("/_meta/{}", ASSETS_META_KEY.replace('/', "~1"))) {
        Some(Value::Array(a)) => std::mem::take(a),
        _ => Vec::new(),
    };
    for a in assets {
        if !all.iter().any(|x| x.get("id") == a.get("id")) {
            all.push(a);
        }
    }
    set_meta(value, ASSETS_META_KEY, Value::Array(all));
}

/// The assets an answer lists in `_meta`, by their download URI and permanent URI.
pub(crate) fn assets_of(value: &Value) -> Vec<(String, String)> {
    value
        .pointer(&format!("/_meta/{}", ASSETS_META_KEY.replace('/', "~1")))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| Some((x.get("uri")?.as_str()?.to_owned(), x.get("artifactUri")?.as_str()?.to_owned()))).collect())
        .unwrap_or_default()
}

/// A value in `structuredContent` that could not be stored was cut to its typed prefix (the
/// store's refusal is a warning there, not an error): one line says so, so the cut is never
/// silent.
fn note_partial_fallbacks(value: &mut Value, report: &TransformReport) {
    for w in report.store_failures() {
        let Some(p) = w.pointer.as_deref().filter(|p| p.starts_with("/structuredContent")) else { continue };
        // What happened, without the store's own error, which may name server paths (the log
        // and the event bus have it whole).
        let what = w.message.split_once(": ").map_or(w.message.as_str(), |(head, _)| head);
        let line = json!({"type": "text", "text": format!("Only part of {p} is shown: {what}")});
        if let Some(content) = value.get_mut("content").and_then(Value::as_array_mut) {
            content.push(line);
        }
    }
}

/// A link the pipeline already wrote, and the line that should stand before it.
struct Fixup {
    artifact_uri: String,
    uri: String,
    summary: String,
    /// The whole line, as written for a new link.
    text: String,
    /// ` (link expires …)` when there is a download link.
    note: Option<String>,
}

/// Whether `text` is the pipeline's one-line stub for the artifact with `summary` (summary,
/// then the bracketed details): a line of its own, not JSON that contains it.
fn is_stub_line(text: &str, summary: &str) -> bool {
    let head = stowage_transform::stub::one_line(summary, 240);
    text.strip_prefix(head.as_str()).is_some_and(|rest| rest.starts_with(" [") && !rest.contains('\n'))
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

/// Sets `_meta[key]` of an answer.
pub(crate) fn set_meta(value: &mut Value, key: &str, entry: Value) {
    if let Some(obj) = value.as_object_mut() {
        let meta = obj.entry("_meta").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        meta.as_object_mut().expect("made an object").insert(key.to_owned(), entry);
    }
}

#[cfg(test)]
mod tests {
    use stowage_core::{ArtifactId, ArtifactScope};

    use super::*;

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
            summary: "PNG image (3.9 KB) stored as artifact://t_abababababababab".into(),
            dimensions: Some((64, 32)),
        }
    }

    fn assets(v: &Value) -> &Vec<Value> {
        v["_meta"][ASSETS_META_KEY].as_array().unwrap()
    }

    struct FixedLinks;
    impl LinkMinter for FixedLinks {
        fn link(&self, a: &ArtifactRef) -> Option<(String, String)> {
            Some((format!("http://gw/artifacts/{}?token=t", a.id), "2026-11-22T09:00:00Z".into()))
        }
    }

    #[test]
    fn a_typed_block_is_replaced_in_place_by_a_line_and_a_link() {
        let off = Offloaded {
            value: json!({"content": [{"type":"text","text":"before"}, null, {"type":"text","text":"after"}]}),
            items: vec![item("/content/1", "image/png")],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, None);
        let types: Vec<_> = v["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["text", "text", "resource_link", "text"]);
        assert_eq!(v["content"][2]["uri"], "artifact://t_abababababababab");
        assert_eq!(v["content"][2]["mimeType"], "image/png");
        assert_eq!(v["content"][2]["name"], "t.png", "a short name, not the id");
        assert!(v.get("structuredContent").is_none(), "the records are for hosts, in _meta");
        let a = &assets(&v)[0];
        assert_eq!(a["kind"], "image");
        assert_eq!((a["width"].as_u64(), a["height"].as_u64()), (Some(64), Some(32)));
        assert_eq!(a["artifactUri"], a["uri"]);
        assert_eq!(a["sha256"].as_str().unwrap().len(), 64);
    }

    /// The pipeline writes its own text + resource_link for typed blocks, and only a stub
    /// inside JSON text: both end with one line and one signed link per artifact, and the
    /// signed URL is written once.
    #[test]
    fn each_signed_url_is_written_once() {
        let it = item("/content/0/text#/data", "application/pdf");
        let link = json!({"type":"resource_link","uri": it.reference.uri, "name":"x"});
        let off = Offloaded {
            value: json!({"content": [{"type":"text","text":"{\"data\":\"stub\"}"}, link], "structuredContent": {"n": 1}}),
            items: vec![it.clone(), it],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, Some(&FixedLinks));
        let content = v["content"].as_array().unwrap();
        assert_eq!(content.len(), 3, "{v}");
        let text = content[1]["text"].as_str().unwrap();
        assert!(
            text.contains("artifact://t_") && text.contains("[application/pdf]") && text.ends_with("(link expires 09:00 UTC)"),
            "{text}"
        );
        assert_eq!(content[2]["uri"], "http://gw/artifacts/t_abababababababab?token=t");
        assert_eq!(v["structuredContent"], json!({"n": 1}), "the tool's own structuredContent is left alone");
        let visible = serde_json::to_string(&v["content"]).unwrap() + &v["structuredContent"].to_string();
        assert_eq!(visible.matches("?token=t").count(), 1, "{visible}");
        let a = assets(&v);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0]["uri"], content[2]["uri"]);
        assert_eq!(a[0]["expiresAt"], "2026-11-22T09:00:00Z");
    }

    #[test]
    fn errors_carry_the_code() {
        let e = OffloadError::store("disk full");
        let v = error_result(&e, false);
        assert_eq!(v["isError"], true);
        assert_eq!(v["structuredContent"]["error"]["code"], "artifact_storage_failed");
        assert!(v["content"][0]["text"].as_str().unwrap().starts_with("artifact_storage_failed: "));
    }

    /// A typed block: the pipeline wrote its stub line and a link. There is still one line
    /// for the one artifact, with the link's expiry; `_meta` lists one asset.
    #[test]
    fn one_offloaded_item_is_one_line_and_one_link() {
        let it = item("/content/1", "image/png");
        let r = &it.reference;
        let stub = format!("{} [image/png]", it.summary);
        let link = json!({"type":"resource_link","uri": r.uri, "name":"x"});
        let off = Offloaded {
            value: json!({"content": [{"type":"text","text":"Here it is:"}, {"type":"text","text": stub}, link]}),
            items: vec![it.clone()],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, Some(&FixedLinks));
        let content = v["content"].as_array().unwrap();
        let lines: Vec<&str> = content.iter().filter_map(|b| b["text"].as_str()).filter(|t| t.contains("t_abababababababab")).collect();
        assert_eq!(lines, [format!("{stub} (link expires 09:00 UTC)")], "{v}");
        assert_eq!(content.len(), 3);
        assert_eq!(content[2]["uri"], "http://gw/artifacts/t_abababababababab?token=t");
        // Without links: the stub line as it was, one line.
        let off = Offloaded {
            value: json!({"content": [{"type":"text","text": stub.clone()}, {"type":"resource_link","uri": r.uri, "name":"x"}]}),
            items: vec![it],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, None);
        assert_eq!(v["content"].as_array().unwrap().len(), 2, "{v}");
        assert_eq!(v["content"][0]["text"], stub.as_str());
    }

    #[test]
    fn a_tools_own_assets_key_is_left_alone() {
        let off = Offloaded {
            value: json!({"content": [], "structuredContent": {"assets": ["mine"]}}),
            items: vec![item("/structuredContent/blob", "application/pdf")],
            report: TransformReport::default(),
        };
        let v = apply_contract(off, None);
        assert_eq!(v["structuredContent"]["assets"], json!(["mine"]));
        assert_eq!(assets(&v)[0]["kind"], "file");
    }
}
