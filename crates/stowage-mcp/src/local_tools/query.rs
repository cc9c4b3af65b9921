//! `artifact_query`: a part of a JSON artifact, selected by a JSON Pointer (RFC 6901) or a
//! JMESPath expression (the `jmespath` crate), so a model can explore an offloaded array or
//! object from its preview and schema without loading it whole.
//!
//! The answer is a page sized to the caller's host (at most [`READ_BUDGET_BYTES`] bytes of JSON). A larger selection keeps its
//! type: an array is cut to its first items, an object to its first keys, a string to its
//! first characters, and the answer says how much there was and how to narrow the selection.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use stowage_core::ArtifactScope;
use stowage_store::ArtifactStore;

use super::{CPU_POOL_BYTES, READ_BUDGET_BYTES, ReadHints, ToolError, as_str, cut_at_char, id_argument, read_text};

/// The tool's name in `tools/list`. It is not namespaced: it belongs to the gateway.
pub(crate) const ARTIFACT_QUERY_TOOL: &str = "artifact_query";

pub(super) fn def() -> Value {
    json!({
        "name": ARTIFACT_QUERY_TOOL,
        "title": "Query a JSON artifact",
        "description": format!("Selects part of a JSON artifact (an id or artifact:// URI from an earlier tool result) with a JSON Pointer (\"/rows/3/name\") or a JMESPath expression (\"rows[?total > `100`].name\"). Give exactly one of pointer and jmespath. At most {READ_BUDGET_BYTES} bytes of JSON per call (less when your host takes less); a larger selection is cut and says how to narrow it."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "artifact id or artifact:// URI"},
                "pointer": {"type": "string", "description": "JSON Pointer (RFC 6901): \"\" for the whole document, \"/rows/0\" for the first row"},
                "jmespath": {"type": "string", "description": "JMESPath expression, e.g. \"rows[0:10].{id: id, name: name}\" or \"length(rows)\""},
            },
            "required": ["id"],
        },
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
    })
}

/// The selection asked for.
enum Selector {
    Pointer(String),
    JmesPath(jmespath::Expression<'static>),
}

fn parse(arguments: &Value) -> Result<Selector, ToolError> {
    let pointer = arguments.get("pointer").filter(|v| !v.is_null());
    let expression = arguments.get("jmespath").filter(|v| !v.is_null());
    match (pointer, expression) {
        (Some(Value::String(p)), None) => {
            if !p.is_empty() && !p.starts_with('/') {
                return Err(ToolError::bad_request(format!(
                    "artifact_query: pointer {p:?} is not a JSON Pointer: it must be \"\" or start with \"/\", as in \"/{}\"",
                    p.trim_start_matches(['.', '$']).replace('.', "/")
                )));
            }
            Ok(Selector::Pointer(p.clone()))
        }
        (None, Some(Value::String(e))) => jmespath::compile(e).map(Selector::JmesPath).map_err(|err| {
            let why = err.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
            ToolError::bad_request(format!("artifact_query: jmespath {e:?} does not parse ({why})"))
        }),
        (None, None) => {
            Err(ToolError::bad_request("artifact_query needs \"pointer\" (e.g. \"/rows/0\") or \"jmespath\" (e.g. \"rows[0:5]\")"))
        }
        (Some(_), Some(_)) => Err(ToolError::bad_request("artifact_query takes one of \"pointer\" and \"jmespath\", not both")),
        (Some(v), None) | (None, Some(v)) => Err(ToolError::bad_request(format!("artifact_query: the selector must be a string, not {v}"))),
    }
}

pub(super) async fn call(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    arguments: &Value,
    hints: ReadHints,
) -> Result<Value, ToolError> {
    let id = id_argument(ARTIFACT_QUERY_TOOL, arguments)?;
    let selector = parse(arguments)?;
    let (meta, bytes) = read_text(store, scope, ARTIFACT_QUERY_TOOL, &id).await?;
    let id = meta.id.to_string();
    let big = bytes.len() >= CPU_POOL_BYTES;
    let answer = move || answer(&bytes, &id, selector, &hints);
    if big { crate::cpu_pool::run(answer).await } else { answer() }
}

/// `selected` cut (keeping its type) to what fits one page for the host: its JSON text within
/// the page's bytes, lines and tokens.
fn fit_selection(selected: Value, hints: &ReadHints) -> (Value, Option<String>, String) {
    let mut budget = hints.text_budget;
    let mut selected = Some(selected);
    for _ in 0..4 {
        let (result, note) = cap(selected.take().expect("put back below"), budget);
        let json_text = serde_json::to_string(&result).expect("a Value serialises");
        let fits = hints.page_len(&json_text);
        if fits == json_text.len() || budget < 256 {
            return (result, note, json_text);
        }
        // Over by lines or tokens: the same share smaller.
        budget = budget * fits / json_text.len().max(1) * 9 / 10;
        selected = Some(result);
    }
    let (result, note) = cap(selected.expect("set in the loop"), budget);
    let json_text = serde_json::to_string(&result).expect("a Value serialises");
    (result, note, json_text)
}

fn answer(bytes: &Bytes, id: &str, selector: Selector, hints: &ReadHints) -> Result<Value, ToolError> {
    let doc: Value = serde_json::from_str(as_str(bytes)).map_err(|e| {
        ToolError::bad_request(format!("artifact {id} is not JSON ({e}): artifact_query reads JSON artifacts; use artifact_read for text"))
    })?;
    let mut out = Map::new();
    out.insert("id".into(), id.into());
    let selected = match &selector {
        Selector::Pointer(p) => {
            out.insert("pointer".into(), p.clone().into());
            match doc.pointer(p) {
                Some(v) => v.clone(),
                None => {
                    return Err(ToolError::bad_request(format!(
                        "artifact_query: pointer {p:?} selects nothing in artifact {id}; {}",
                        nearest(&doc, p)
                    )));
                }
            }
        }
        Selector::JmesPath(expr) => {
            out.insert("jmespath".into(), expr.as_str().into());
            let found = expr.search(&doc).map_err(|e| {
                ToolError::bad_request(format!("artifact_query: jmespath {:?} failed on artifact {id} ({e})", expr.as_str()))
            })?;
            serde_json::to_value(&*found).unwrap_or(Value::Null)
        }
    };
    drop(doc);
    let (_, note, json_text) = fit_selection(selected, hints);
    let where_ = match &selector {
        Selector::Pointer(p) => format!("pointer {p:?}"),
        Selector::JmesPath(e) => format!("jmespath {:?}", e.as_str()),
    };
    let mut header = format!("[{id} {where_}");
    if let Some(n) = &note {
        header.push_str("; ");
        header.push_str(n);
    }
    header.push(']');
    out.insert("truncated".into(), note.is_some().into());
    if let Some(n) = note {
        out.insert("note".into(), n.into());
    }
    Ok(hints.answer(header, json_text, out))
}

/// Where a pointer stops matching, and what is there: the help a model needs to fix it.
fn nearest(doc: &Value, pointer: &str) -> String {
    let mut node = doc;
    let mut at = String::new();
    for token in pointer.split('/').skip(1) {
        let key = token.replace("~1", "/").replace("~0", "~");
        let next = match node {
            Value::Object(m) => m.get(&key),
            Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        };
        match next {
            Some(n) => {
                at.push('/');
                at.push_str(token);
                node = n;
            }
            None => break,
        }
    }
    let here = if at.is_empty() { "the top level".to_owned() } else { format!("{at:?}") };
    match node {
        Value::Object(m) => {
            let keys: Vec<&str> = m.keys().take(20).map(String::as_str).collect();
            let more = if m.len() > keys.len() { format!(" and {} more", m.len() - keys.len()) } else { String::new() };
            format!("{here} is an object with keys {}{more}", keys.join(", "))
        }
        Value::Array(a) => format!("{here} is an array of {} items (indices 0 to {})", a.len(), a.len().saturating_sub(1)),
        other => format!("{here} is a {}", type_name(other)),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `value` within `budget` bytes of JSON, keeping its type, and a note when it was cut.
fn cap(value: Value, budget: usize) -> (Value, Option<String>) {
    let size = json_len(&value);
    if size <= budget {
        return (value, None);
    }
    match value {
        Value::Array(items) => {
            let total = items.len();
            let mut kept = Vec::new();
            let mut used = 2;
            for item in items {
                let n = json_len(&item) + 1;
                if used + n > budget {
                    // Not even the first item fits: cut it, keeping its type.
                    if kept.is_empty() {
                        kept.push(cap(item, budget.saturating_sub(used)).0);
                    }
                    break;
                }
                used += n;
                kept.push(item);
            }
            let k = kept.len();
            let note = format!(
                "cut to items 0..{k} of {total} ({size} bytes of JSON, budget {budget}); narrow it, e.g. a slice like [{k}:{}] in JMESPath or a pointer to one item",
                (k * 2).min(total)
            );
            (Value::Array(kept), Some(note))
        }
        Value::Object(map) => {
            let total = map.len();
            let mut kept = Map::new();
            let mut omitted = Vec::new();
            let mut used = 2;
            for (k, v) in map {
                let n = k.len() + 4 + json_len(&v);
                if used + n > budget {
                    omitted.push(k);
                    continue;
                }
                used += n;
                kept.insert(k, v);
            }
            let names: Vec<&str> = omitted.iter().take(20).map(String::as_str).collect();
            let note = format!(
                "cut to {} of {total} keys ({size} bytes of JSON, budget {budget}); left out: {}{}; select one with a pointer like \"/{}\"",
                kept.len(),
                names.join(", "),
                if omitted.len() > names.len() { ", …" } else { "" },
                omitted.first().map(String::as_str).unwrap_or_default()
            );
            (Value::Object(kept), Some(note))
        }
        Value::String(s) => {
            let kept = cut_at_char(&s, budget.saturating_sub(2)).to_owned();
            let note = format!(
                "string cut to its first {} of {} characters; artifact_read reads text artifacts by character offset",
                kept.chars().count(),
                s.chars().count()
            );
            (Value::String(kept), Some(note))
        }
        // Numbers, booleans and null are small.
        other => (other, None),
    }
}

/// Length of the compact JSON of `v` (the shaper's count, as a `usize`), without building it.
fn json_len(v: &Value) -> usize {
    stowage_transform::json_len(v) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Value {
        json!({"rows": (0..2000).map(|i| json!({"id": i, "name": format!("row {i}"), "total": i * 3})).collect::<Vec<_>>(), "count": 2000})
    }

    fn run(doc: &Value, args: Value) -> Result<Value, ToolError> {
        let selector = parse(&args)?;
        let bytes = Bytes::from(serde_json::to_vec(doc).unwrap());
        let v = answer(&bytes, "t_0123456789abcdef", selector, &ReadHints::default())?;
        // The facts, with the selection the model reads (the JSON text in content) as `result`.
        let mut facts = v["structuredContent"].clone();
        facts["result"] = serde_json::from_str(v["content"][1]["text"].as_str().unwrap()).unwrap();
        Ok(facts)
    }

    #[test]
    fn pointers() {
        let doc = rows();
        assert_eq!(run(&doc, json!({"pointer": "/rows/3/name"})).unwrap()["result"], "row 3");
        assert_eq!(run(&doc, json!({"pointer": "/count"})).unwrap()["truncated"], false);
        let e = run(&doc, json!({"pointer": "/rows/5000/name"})).unwrap_err();
        assert!(e.message.contains("\"/rows\" is an array of 2000 items"), "{e}");
        let e = run(&doc, json!({"pointer": "/nope"})).unwrap_err();
        assert!(e.message.contains("keys rows, count"), "{e}");
        let e = run(&doc, json!({"pointer": "rows.3"})).unwrap_err();
        assert!(e.message.contains("\"/rows/3\""), "{e}");
    }

    #[test]
    fn jmespath_expressions() {
        let doc = rows();
        assert_eq!(run(&doc, json!({"jmespath": "length(rows)"})).unwrap()["result"], 2000);
        assert_eq!(run(&doc, json!({"jmespath": "rows[?total > `5990`].id"})).unwrap()["result"], json!([1997, 1998, 1999]));
        let e = run(&doc, json!({"jmespath": "rows[?"})).unwrap_err();
        assert!(e.code == "bad_request" && e.message.contains("does not parse") && !e.message.contains('\n'), "{e}");
        assert_eq!(run(&doc, json!({})).unwrap_err().code, "bad_request");
        assert_eq!(run(&doc, json!({"pointer": "", "jmespath": "a"})).unwrap_err().code, "bad_request");
    }

    #[test]
    fn a_big_selection_fits_each_hosts_own_limits() {
        // 15,000 rows of a structured result, queried as each host: the text the model reads
        // stays within that host's measured limits (Codex: about 12,000 bytes; Claude Code:
        // 10,000 o200k tokens, where its terminal warns), and the answer says it was cut and
        // how to narrow it.
        let doc = json!({"rows": (0..15_000).map(|i| json!({"id": i, "name": format!("row {i}"), "total": i * 3})).collect::<Vec<_>>()});
        let bytes = Bytes::from(serde_json::to_vec(&doc).unwrap());
        let hosts = crate::hosts::Hosts::default();
        for (name, max_bytes, max_lines, max_tokens) in [
            ("codex", 10 * 1024, usize::MAX, u64::MAX),
            ("claude-code", usize::MAX, usize::MAX, 10_000),
            ("default", usize::MAX, usize::MAX, u64::MAX),
        ] {
            let host = hosts.by_name(name).unwrap();
            let hints = ReadHints::for_host(&host);
            for args in [json!({"pointer": "/rows"}), json!({"jmespath": "rows[?total > `100`]"})] {
                let v = answer(&bytes, "t_0123456789abcdef", parse(&args).unwrap(), &hints).unwrap();
                // Every host reads the page in content: hosts that would show structuredContent
                // instead get none.
                assert_eq!(v.get("structuredContent").is_some(), host.name == "default", "{name}");
                let seen = v["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n");
                assert!(seen.len() <= max_bytes, "{name} {args}: {} bytes", seen.len());
                assert!(seen.lines().count() <= max_lines, "{name} {args}: {} lines", seen.lines().count());
                let tokens = stowage_transform::tokens::count_exact(&seen);
                assert!(tokens <= max_tokens, "{name} {args}: {tokens} tokens");
                assert!(seen.contains("narrow it"), "{name} {args}: {}", &seen[..seen.len().min(400)]);
            }
        }
    }

    #[test]
    fn big_selections_are_cut_keeping_their_type() {
        let doc = rows();
        let v = run(&doc, json!({"pointer": "/rows"})).unwrap();
        assert_eq!(v["truncated"], true);
        let kept = v["result"].as_array().unwrap();
        assert!(!kept.is_empty() && kept.len() < 2000);
        assert_eq!(kept[0], doc["rows"][0]);
        assert!(serde_json::to_string(&v["result"]).unwrap().len() <= READ_BUDGET_BYTES);
        assert!(v["note"].as_str().unwrap().contains("of 2000"), "{}", v["note"]);
        let whole = run(&doc, json!({"pointer": ""})).unwrap();
        assert_eq!(whole["result"]["count"], 2000);
        assert!(whole["note"].as_str().unwrap().contains("left out: rows"), "{}", whole["note"]);
        let text = json!("é".repeat(50_000));
        let v = run(&text, json!({"pointer": ""})).unwrap();
        assert!(v["result"].as_str().unwrap().len() <= READ_BUDGET_BYTES);
    }
}
