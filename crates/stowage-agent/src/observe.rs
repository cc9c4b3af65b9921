//! What the model reads of a tool result: the whole answer as the gateway shaped it for the
//! planner's host profile (`planner`: a budget sized for one model request, `artifact://`
//! references and no signed links, image previews within an image budget), turned into
//! message parts in order:
//!
//! - every text block, as it is; the one that repeats `structuredContent` (FastMCP's JSON
//!   text) is replaced by the structured content with `<artifact:…>` placeholders
//!   (`<artifact:list size=847 items>`, `<artifact:dict stream=chart>`), and a structured
//!   content no block repeats comes last;
//! - every image block as an image part (or, for a type the model APIs do not take, its line),
//!   with a line saying what it is, which stands for it when it is not sent;
//! - a `resource_link` whose URI no line names yet, as a line; an embedded resource's text;
//! - an `isError` result's text prefixed `error: `.

use serde_json::Value;
use stowage_transform::ArtifactRecord;

use crate::model::{Content, ImagePart, Part};

/// Image types both model APIs take as base64.
const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The parts of `result` (a shaped tool result) the model is sent; see the module docs.
pub(crate) fn observation(result: &Value, schema: Option<&Value>, records: &[ArtifactRecord]) -> Content {
    let twins = stowage_transform::twins::find(result);
    let structured = result.get("structuredContent").filter(|v| !v.is_null()).map(|sc| structured_text(sc, schema, records));
    let mut parts: Vec<Part> = Vec::new();
    let mut text_so_far = String::new();
    let push_text = |parts: &mut Vec<Part>, t: String, seen: &mut String| {
        seen.push_str(&t);
        seen.push('\n');
        parts.push(Part::Text(t));
    };
    let mut structured_shown = false;
    for (i, block) in result.get("content").and_then(Value::as_array).into_iter().flatten().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if twins.iter().any(|t| t.block == i)
                    && let Some(sc) = &structured
                {
                    if !structured_shown {
                        structured_shown = true;
                        push_text(&mut parts, sc.clone(), &mut text_so_far);
                    }
                    continue;
                }
                let t = block.get("text").and_then(Value::as_str).unwrap_or_default();
                if !t.is_empty() {
                    push_text(&mut parts, t.to_owned(), &mut text_so_far);
                }
            }
            Some("image") => {
                let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("image/png").to_ascii_lowercase();
                let data = block.get("data").and_then(Value::as_str).unwrap_or_default();
                let preview_of = block.pointer("/_meta/io.stowage~1preview").and_then(Value::as_str);
                let label = match preview_of {
                    Some(uri) => format!("[image {mime}, {}: a preview of {uri}]", stowage_core::human_size(b64_len(data))),
                    None => format!("[image {mime}, {}]", stowage_core::human_size(b64_len(data))),
                };
                if IMAGE_TYPES.contains(&mime.as_str()) && !data.is_empty() {
                    parts.push(Part::Image(ImagePart { mime_type: mime, data: data.into(), label }));
                } else {
                    push_text(&mut parts, format!("{label} (not a type the model takes)"), &mut text_so_far);
                }
            }
            Some("resource_link") => {
                let uri = block.get("uri").and_then(Value::as_str).unwrap_or_default();
                if uri.is_empty() || text_so_far.contains(uri) {
                    continue; // the gateway's line before it names it already
                }
                let line = format!(
                    "[resource_link {uri} {} {}]",
                    block.get("mimeType").and_then(Value::as_str).unwrap_or_default(),
                    block.get("name").and_then(Value::as_str).unwrap_or_default()
                );
                push_text(&mut parts, line, &mut text_so_far);
            }
            Some("resource") => {
                let r = block.get("resource").cloned().unwrap_or(Value::Null);
                let uri = r.get("uri").and_then(Value::as_str).unwrap_or_default();
                let t = match r.get("text").and_then(Value::as_str) {
                    Some(t) => format!("[resource {uri}]\n{t}"),
                    None => format!("[resource {uri} {}]", r.get("mimeType").and_then(Value::as_str).unwrap_or_default()),
                };
                push_text(&mut parts, t, &mut text_so_far);
            }
            Some("audio") => {
                let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("audio");
                let size = b64_len(block.get("data").and_then(Value::as_str).unwrap_or_default());
                push_text(&mut parts, format!("[audio {mime}, {}]", stowage_core::human_size(size)), &mut text_so_far);
            }
            Some(other) => push_text(&mut parts, format!("[{other} block]"), &mut text_so_far),
            None => {}
        }
    }
    if let Some(sc) = structured.filter(|_| !structured_shown) {
        push_text(&mut parts, sc, &mut text_so_far);
    }
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        match parts.iter_mut().find_map(|p| if let Part::Text(t) = p { Some(t) } else { None }) {
            Some(t) if !t.starts_with("error") => t.insert_str(0, "error: "),
            Some(_) => {}
            None => parts.insert(0, Part::Text("error: the tool failed and said nothing".into())),
        }
    }
    Content(parts)
}

/// Bytes a base64 string decodes to.
fn b64_len(data: &str) -> u64 {
    (data.len() as u64 / 4) * 3
}

/// The structured content as the model reads it: `<artifact:…>` placeholders where values were
/// stored, `stream=` for streamed fields.
fn structured_text(sc: &Value, schema: Option<&Value>, records: &[ArtifactRecord]) -> String {
    let mut sc = sc.clone();
    put_placeholders(&mut sc, records);
    if let (Some(schema), Some(obj)) = (schema, sc.as_object_mut()) {
        for (field, stream_id) in crate::collector::stream_marks(schema) {
            if let Some(Value::String(s)) = obj.get_mut(&field)
                && let Some(rest) = s.strip_prefix("<artifact:")
                && let Some(end) = rest.find('>')
            {
                let kind = rest[..end].split_whitespace().next().unwrap_or("dict").to_owned();
                *s = format!("<artifact:{kind} stream={stream_id}>{}", &rest[end + 1..]);
            }
        }
    }
    sc.to_string()
}

/// Puts the placeholders (`<artifact:list size=847 items> artifact://…`) where the pipeline
/// offloaded a part of `structuredContent`. For MCP clients the gateway keeps those positions
/// typed (a prefix of the array, the first keys of the object), because clients validate
/// against the tool's `outputSchema`; the planner's model validates nothing, and a placeholder
/// tells it plainly that the value is stored whole elsewhere, and how big it is.
fn put_placeholders(sc: &mut Value, records: &[ArtifactRecord]) {
    for r in records {
        // Only values of the structured content itself (not JSON embedded in a string, `#`).
        let Some(rel) = r.pointer.strip_prefix("/structuredContent") else { continue };
        if rel.is_empty() || rel.contains('#') {
            continue;
        }
        let Some(slot) = sc.pointer_mut(rel) else { continue };
        let shown = match (&*slot, r.partial) {
            (Value::Array(_), Some(p)) => format!("<artifact:list size={} items>", p.total),
            (Value::String(s), _) if s.starts_with("<artifact:") => continue,
            (v, _) => stowage_transform::stub::placeholder(v, r.size_bytes),
        };
        *slot = Value::String(format!("{shown} {}", r.uri));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text(c: &Content) -> String {
        c.text()
    }

    #[test]
    fn structured_content_with_stream_placeholders_in_place_of_its_twin() {
        let schema = json!({"properties": {"chart": {"artifact": true, "stream": true, "stream_id": "c1"}, "raw": {"artifact": true}}});
        let sc = json!({"chart": "<artifact:dict size=42KB> artifact://chart_1", "raw": "<artifact:list size=3 items> artifact://raw_1", "n": 1});
        let result = json!({
            "content": [
                {"type": "text", "text": "Before."},
                {"type": "text", "text": sc.to_string()},
                {"type": "text", "text": "stored x.pdf artifact://x_1"},
                {"type": "resource_link", "uri": "artifact://x_1", "mimeType": "application/pdf", "name": "x.pdf"},
                {"type": "resource_link", "uri": "artifact://y_1", "mimeType": "text/plain", "name": "y.txt"}
            ],
            "structuredContent": sc
        });
        let o = text(&observation(&result, Some(&schema), &[]));
        assert!(o.starts_with("Before.\n{"), "{o}");
        assert!(o.contains("\"chart\":\"<artifact:dict stream=c1> artifact://chart_1\""), "{o}");
        assert!(o.contains("<artifact:list size=3 items>"), "{o}");
        assert_eq!(o.matches("\"n\":1").count(), 1, "the twin is read once: {o}");
        assert_eq!(o.matches("artifact://x_1").count(), 1, "a link its line names is not repeated: {o}");
        assert!(o.ends_with("[resource_link artifact://y_1 text/plain y.txt]"), "{o}");
        let err = json!({"content": [{"type": "text", "text": "boom"}], "isError": true});
        assert_eq!(text(&observation(&err, None, &[])), "error: boom");
    }

    #[test]
    fn every_text_block_in_order_and_images_as_parts() {
        let result = json!({"content": [
            {"type": "text", "text": "Found 3 matching incidents:"},
            {"type": "text", "text": "INC-1 disk full"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo=", "_meta": {"io.stowage/preview": "artifact://img_1"}},
            {"type": "text", "text": "INC-2 (ROOT CAUSE)"},
            {"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zz4="},
            {"type": "resource", "resource": {"uri": "kb://a", "text": "embedded"}}
        ]});
        let c = observation(&result, None, &[]);
        let o = c.text();
        let order = ["Found 3", "INC-1", "[image image/png", "a preview of artifact://img_1", "INC-2", "image/svg+xml", "embedded"];
        let mut at = 0;
        for needle in order {
            let i = o[at..].find(needle).unwrap_or_else(|| panic!("{needle} not after {at} in {o}")) + at;
            at = i;
        }
        let images: Vec<&ImagePart> = c.images().collect();
        assert_eq!(images.len(), 1, "svg is not a type the APIs take");
        assert_eq!((images[0].mime_type.as_str(), &*images[0].data), ("image/png", "iVBORw0KGgo="));
    }

    #[test]
    fn typed_prefixes_become_placeholders_for_the_model() {
        // What the gateway returns to validating clients: the array as a prefix, the object
        // reduced to its required keys; the report says what was offloaded.
        let result = json!({
            "content": [{"type": "text", "text": "mirror"}],
            "structuredContent": {"raw": [1, 2], "chart": {}, "n": 1}
        });
        let rec = |ptr: &str, uri: &str, size: u64, partial: Option<stowage_transform::Partial>| {
            let mut r: ArtifactRecord = serde_json::from_value(json!({
                "id": "x", "uri": uri, "pointer": ptr, "mime_type": "application/json", "size_bytes": size,
                "sha256": "00", "layer": "schema_field", "filename": null, "summary": "",
                "ref": {"id": "x_0000000000000000", "uri": uri, "mime_type": "application/json", "size_bytes": size,
                        "sha256": "00", "created_at": "2026-11-23T00:00:00Z"}
            }))
            .expect("a record");
            r.partial = partial;
            r
        };
        let records = [
            rec("/structuredContent/raw", "artifact://raw_1", 9000, Some(stowage_transform::Partial { kept: 2, total: 847 })),
            rec("/structuredContent/chart", "artifact://chart_1", 43_008, None),
            rec("/content/0/text#/raw", "artifact://raw_1", 9000, None),
        ];
        let schema = json!({"properties": {"chart": {"artifact": true, "stream": true, "stream_id": "c1"}}});
        let o = text(&observation(&result, Some(&schema), &records));
        assert!(o.contains("\"raw\":\"<artifact:list size=847 items> artifact://raw_1\""), "{o}");
        assert!(o.contains("\"chart\":\"<artifact:dict stream=c1> artifact://chart_1\""), "{o}");
        assert!(o.contains("\"n\":1"), "{o}");
        assert!(o.starts_with("mirror"), "a text that is no twin is kept: {o}");
    }
}
