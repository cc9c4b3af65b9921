//! `artifact_describe`: the inferred shape of a JSON, NDJSON or CSV artifact
//! (`stowage_transform::describe`): each path in jq syntax with its types and counts, the
//! values of low-cardinality fields, min and max of numbers, lengths of arrays. What a model
//! needs to write its first query right, in one answer within the host's page whatever the
//! artifact's size (deeper paths give way first, and the answer says how many).

use std::sync::Arc;

use serde_json::{Map, Value, json};
use stowage_core::{ArtifactScope, human_size};
use stowage_store::ArtifactStore;

use super::input::{self, Format};
use super::{CPU_POOL_BYTES, ReadHints, ToolError, as_str, id_argument, meta_of, text_of};

/// The tool's name in `tools/list`.
pub(crate) const ARTIFACT_DESCRIBE_TOOL: &str = "artifact_describe";

pub(super) fn def() -> Value {
    json!({
        "name": ARTIFACT_DESCRIBE_TOOL,
        "title": "Describe an artifact's data: its paths, types, values and ranges",
        "description": "The shape of a JSON, NDJSON or CSV artifact (an id or artifact:// URI from an earlier tool result), inferred from all of it: one line per path in jq syntax (.orders[].total) with its types and how often each occurs, the values of fields with few distinct values, min and max of numbers, and lengths of arrays. Call it before writing an artifact_query program for data you have not seen.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "artifact id or artifact:// URI"},
                "as": {"type": "string", "enum": ["json", "csv", "tsv", "ndjson", "lines"], "description": "how to read the artifact (default: from its media type, else JSON, else NDJSON, else CSV)"},
                "pointer": {"type": "string", "description": "JSON Pointer to describe only a part, e.g. \"/warehouses/0\""},
            },
            "required": ["id"],
        },
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
    })
}

pub(super) async fn call(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    arguments: &Value,
    hints: ReadHints,
) -> Result<Value, ToolError> {
    let id = id_argument(ARTIFACT_DESCRIBE_TOOL, arguments)?;
    let format = input::format_argument(ARTIFACT_DESCRIBE_TOOL, arguments)?;
    let pointer = match arguments.get("pointer") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if p.is_empty() || p.starts_with('/') => Some(p.clone()),
        Some(v) => {
            return Err(ToolError::bad_request(format!(
                "artifact_describe: \"pointer\" must be a JSON Pointer (\"\" or starting with \"/\"), not {v}"
            )));
        }
    };
    let meta = meta_of(store, scope, &id).await?;
    let format = format.or_else(|| Format::of_mime(meta.mime_type.as_deref()));
    let (meta, bytes) = text_of(store, scope, ARTIFACT_DESCRIBE_TOOL, meta).await?;
    let id = meta.id.to_string();
    let size = human_size(meta.size_bytes);
    let work = move || describe(&id, as_str(&bytes), format, pointer.as_deref(), &size, &hints);
    if meta.size_bytes as usize >= CPU_POOL_BYTES { crate::cpu_pool::run(work).await } else { work() }
}

/// Reads the text as `format` (or as the first of JSON, NDJSON and CSV that fits) and writes
/// its shape within the host's page.
fn describe(
    id: &str,
    text: &str,
    format: Option<Format>,
    pointer: Option<&str>,
    size: &str,
    hints: &ReadHints,
) -> Result<Value, ToolError> {
    let (format, shape) = shape_of(id, text, format, pointer)?;
    let mut budget = hints.text_budget;
    let mut text = shape.render(budget);
    for _ in 0..4 {
        let fits = hints.page_len(&text);
        if fits == text.len() {
            break;
        }
        budget = budget * fits / text.len() * 9 / 10;
        text = shape.render(budget);
    }
    let what = match format {
        Format::Json => "JSON",
        Format::Csv => "CSV, rows as objects keyed by the header",
        Format::Tsv => "TSV, rows as objects keyed by the header",
        Format::Ndjson => "NDJSON, one value a line",
        Format::Lines => "lines",
    };
    let part = pointer.map(|p| format!(" at {p:?}")).unwrap_or_default();
    let read_as = if matches!(format, Format::Json) { String::new() } else { format!(" with \"as\": \"{}\"", format.name()) };
    let header = format!(
        "[{id}{part}: {what}, {size}; its shape, one path per line in jq syntax: types ×count; values of fields with few; min and max; lengths. Query it with artifact_query{read_as}]"
    );
    let mut facts = Map::new();
    facts.insert("id".into(), json!(id));
    facts.insert("format".into(), json!(format.name()));
    facts.insert("paths".into(), json!(shape.paths()));
    Ok(hints.answer(header, text, facts))
}

/// The text's shape, read as `format` (or as the first of JSON, NDJSON and CSV that fits),
/// of the part at `pointer` if one is given. JSON is described as it is read, without
/// building it; the rest (and a part) are parsed first.
fn shape_of(
    id: &str,
    text: &str,
    format: Option<Format>,
    pointer: Option<&str>,
) -> Result<(Format, stowage_transform::describe::Shape), ToolError> {
    if pointer.is_none() && matches!(format, None | Some(Format::Json)) {
        match stowage_transform::describe::describe_json(text) {
            Ok(shape) => return Ok((Format::Json, shape)),
            Err(e) if format.is_some() => return Err(input::not_json(ARTIFACT_DESCRIBE_TOOL, id, &e)),
            // Not JSON: found below as what it is, or named.
            Err(_) => {}
        }
    }
    let (format, value) = match format {
        Some(f) => (f, input::parse(ARTIFACT_DESCRIBE_TOOL, id, text, f)?),
        None => sniff(id, text)?,
    };
    let value = match pointer {
        Some(p) => value
            .pointer(p)
            .cloned()
            .ok_or_else(|| ToolError::bad_request(format!("artifact_describe: pointer {p:?} selects nothing in artifact {id}")))?,
        None => value,
    };
    let shape = match (&value, format) {
        (Value::Array(rows), Format::Csv | Format::Tsv | Format::Ndjson) if pointer.is_none() => {
            stowage_transform::describe::describe_items(rows.iter())
        }
        _ => stowage_transform::describe::describe(&value),
    };
    if text.len() >= CPU_POOL_BYTES {
        // Freed after the answer has gone (a parsed document is a node per value).
        crate::cpu_pool::drop_later(value);
    }
    Ok((format, shape))
}

/// The first of JSON, NDJSON and CSV that reads the text whole.
fn sniff(id: &str, text: &str) -> Result<(Format, Value), ToolError> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => return Ok((Format::Json, v)),
        Err(e) if text.trim_start().starts_with(['{', '[']) && e.line() == 1 => {
            return Err(input::not_json(ARTIFACT_DESCRIBE_TOOL, id, &e));
        }
        Err(_) => {}
    }
    if let Ok(rows) = input::ndjson(ARTIFACT_DESCRIBE_TOOL, id, text) {
        return Ok((Format::Ndjson, Value::Array(rows)));
    }
    let header_fields = text.lines().next().map_or(0, |l| l.split(',').count());
    if header_fields >= 2
        && let Ok(v) = input::parse(ARTIFACT_DESCRIBE_TOOL, id, text, Format::Csv)
    {
        return Ok((Format::Csv, v));
    }
    let tabs = text.lines().next().map_or(0, |l| l.split('\t').count());
    if tabs >= 2
        && let Ok(v) = input::parse(ARTIFACT_DESCRIBE_TOOL, id, text, Format::Tsv)
    {
        return Ok((Format::Tsv, v));
    }
    Err(ToolError::bad_request(format!(
        "artifact_describe: artifact {id} is not JSON, NDJSON or CSV; pass \"as\" (\"lines\" for plain text), or read it with artifact_read"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(name: &str) -> ReadHints {
        ReadHints::for_host(&crate::hosts::builtin().into_iter().find(|p| p.name == name).unwrap())
    }

    #[test]
    fn a_big_nested_document_fits_a_claude_code_page() {
        // About 5 MB: 200 warehouses × 250 bins, with a long note beside them.
        let warehouses: Vec<Value> = (0..200)
            .map(|w| {
                let bins: Vec<Value> = (0..250)
                    .map(|b| {
                        let zone = ["A", "B", "C", "D"][b % 4];
                        json!({"sku": format!("SKU-{w:03}-{b:04}"), "qty": (w * 31 + b * 7) % 1000, "zone": zone, "tags": vec!["x"; b % 3], "dims": {"w": b % 50, "h": 10.5}})
                    })
                    .collect();
                let region = ["north", "south", "east", "west"][w % 4];
                json!({"id": format!("WH-{w:03}"), "region": region, "bins": bins, "manager": {"name": format!("m{w}"), "phone": null}})
            })
            .collect();
        let text = json!({"warehouses": warehouses, "notes": "n".repeat(4_500), "generated": "2026-11-28"}).to_string();
        assert!(text.len() > 4_000_000, "{}", text.len());
        let h = hints("claude-code");
        let v = describe("inv_1", &text, None, None, "5 MB", &h).unwrap();
        assert!(v.get("structuredContent").is_none());
        let seen = format!("{}\n{}", v["content"][0]["text"].as_str().unwrap(), v["content"][1]["text"].as_str().unwrap());
        let tokens = stowage_transform::tokens::count_exact(&seen);
        assert!(tokens < 1_000, "{tokens} tokens:\n{seen}");
        for line in [
            ".warehouses: array ×1; length 200",
            ".warehouses[].region: string ×200; values \"east\" 50, \"north\" 50, \"south\" 50, \"west\" 50",
            ".warehouses[].bins: array ×200; length 250",
            ".warehouses[].bins[].qty: integer ×50000; min 0 max 999",
            ".warehouses[].bins[].tags: array ×50000; length 0..2",
            ".warehouses[].manager.phone: null ×200",
            ".notes: string ×1; value \"nnnnnnnn",
            "…\" (4500 chars)",
        ] {
            assert!(seen.contains(line), "{line} not in\n{seen}");
        }
    }

    #[test]
    fn csv_and_ndjson_are_found_or_named() {
        let csv = "id,status,amount\n1,open,10\n2,closed,20.5\n3,open,\n";
        let v = describe("c_1", csv, None, None, "40 B", &ReadHints::default()).unwrap();
        let text = v["content"][1]["text"].as_str().unwrap();
        assert!(text.contains(".[].status: string ×3; values \"open\" 2, \"closed\" 1"), "{text}");
        assert!(text.contains(".[].amount: string ×1 | integer ×1 | number ×1; min 10 max 20.5"), "{text}");
        assert!(v["content"][0]["text"].as_str().unwrap().contains("CSV"), "{v}");
        let nd = "{\"a\": 1}\n{\"a\": 2, \"b\": true}\n";
        let v = describe("n_1", nd, None, None, "30 B", &ReadHints::default()).unwrap();
        assert!(v["content"][1]["text"].as_str().unwrap().contains(".[].b: boolean ×1; value true"), "{v}");
        let e = describe("t_1", "just some words\nand more", None, None, "1 B", &ReadHints::default()).unwrap_err();
        assert!(e.message.contains("not JSON, NDJSON or CSV"), "{e}");
        let e = describe("t_1", "{\"a\": ", None, None, "1 B", &ReadHints::default()).unwrap_err();
        assert!(e.message.contains("is not JSON"), "{e}");
    }
}
