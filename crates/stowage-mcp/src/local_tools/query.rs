//! `artifact_query`: a question asked of an artifact's data, answered server-side. A jq
//! program (`jq`, run by jaq on our values: see `jq/`), a JSON Pointer (RFC 6901) or a JMESPath expression
//! (the `jmespath` crate) over one artifact (`id`) or several seen as one array (`ids`), read
//! as JSON or, with `as`, as CSV/TSV rows keyed by the header, NDJSON or lines (`input.rs`).
//!
//! The answer is a page sized to the caller's host (`page.rs`): the selection's true size
//! (20,000 items, not the number that happened to fit), which part this page holds, and the
//! `offset` the same call takes to continue exactly where the page stopped. A count, a group
//! or a filtered top row comes back whole and small.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use stowage_core::ArtifactScope;
use stowage_store::ArtifactStore;

use super::input::{self, Format};
use super::jq;
use super::page;
use super::{CPU_POOL_BYTES, READ_BUDGET_BYTES, ReadHints, ToolError, as_str, meta_of, text_of, usize_argument};

/// The tool's name in `tools/list`. It is not namespaced: it belongs to the gateway.
pub(crate) const ARTIFACT_QUERY_TOOL: &str = "artifact_query";

/// Artifacts one call reads at most (`ids`).
const MAX_IDS: usize = 50;

pub(super) fn def() -> Value {
    json!({
        "name": ARTIFACT_QUERY_TOOL,
        "title": "Ask an artifact's data: jq, JMESPath or a JSON Pointer",
        "description": format!("Answers a question about an artifact's data server-side (an id or artifact:// URI from an earlier tool result): a jq program (\"[.orders[] | select(.total > 100)] | length\"), a JMESPath expression or a JSON Pointer. Give exactly one of jq, jmespath and pointer. `as` reads text as \"csv\"/\"tsv\" rows (objects keyed by the header; numbers typed), \"ndjson\" or \"lines\" (an array of strings; count log lines per code with jq). `ids` runs over several artifacts, seen as one array. Ask for counts and top rows rather than pages: the answer is at most {READ_BUDGET_BYTES} bytes (less when your host takes less); a cut answer says the selection's true size and the offset to continue with."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "artifact id or artifact:// URI"},
                "ids": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_IDS, "description": "several artifacts, which the program sees as one array (instead of id)"},
                "jq": {"type": "string", "description": "a jq program, e.g. \".rows | map(select(.status == \\\"ERROR\\\")) | group_by(.code) | map({code: .[0].code, n: length})\""},
                "jmespath": {"type": "string", "description": "JMESPath expression, e.g. \"rows[0:10].{id: id, name: name}\" or \"length(rows)\""},
                "pointer": {"type": "string", "description": "JSON Pointer (RFC 6901): \"\" for the whole document, \"/rows/0\" for the first row"},
                "as": {"type": "string", "enum": ["json", "csv", "tsv", "ndjson", "lines"], "description": "how to read a text artifact (default: JSON; CSV and TSV by their media type)"},
                "offset": {"type": "integer", "minimum": 0, "description": "where to continue a cut answer: the item, key or character its header names"},
            },
        },
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
    })
}

/// The selection asked for.
enum Selector {
    Pointer(String),
    JmesPath(jmespath::Expression<'static>),
    Jq(String),
}

impl Selector {
    fn describe(&self) -> String {
        let quoted = |s: &str| serde_json::to_string(&stowage_transform::stub::one_line(s, 120)).expect("a string serialises");
        match self {
            Selector::Pointer(p) => format!("pointer {}", quoted(p)),
            Selector::JmesPath(e) => format!("jmespath {}", quoted(e.as_str())),
            Selector::Jq(c) => format!("jq {}", quoted(c)),
        }
    }
}

fn selector(arguments: &Value) -> Result<Selector, ToolError> {
    let given: Vec<(&str, &Value)> =
        ["pointer", "jmespath", "jq"].into_iter().filter_map(|k| arguments.get(k).filter(|v| !v.is_null()).map(|v| (k, v))).collect();
    match given.as_slice() {
        [] => Err(ToolError::bad_request(
            "artifact_query needs \"jq\" (e.g. \".rows | length\"), \"jmespath\" (e.g. \"rows[0:5]\") or \"pointer\" (e.g. \"/rows/0\")",
        )),
        [("pointer", Value::String(p))] => {
            if !p.is_empty() && !p.starts_with('/') {
                return Err(ToolError::bad_request(format!(
                    "artifact_query: pointer {p:?} is not a JSON Pointer: it must be \"\" or start with \"/\", as in \"/{}\"",
                    p.trim_start_matches(['.', '$']).replace('.', "/")
                )));
            }
            Ok(Selector::Pointer(p.clone()))
        }
        [("jmespath", Value::String(e))] => jmespath::compile(e).map(Selector::JmesPath).map_err(|err| {
            let at = format!(" at character {}", err.column);
            let why = err.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
            ToolError::bad_request(format!("artifact_query: jmespath {e:?} does not parse{at} ({why})"))
        }),
        [("jq", Value::String(c))] => {
            jq::check(c)?;
            Ok(Selector::Jq(c.clone()))
        }
        [(k, v)] => Err(ToolError::bad_request(format!("artifact_query: \"{k}\" must be a string, not {v}"))),
        _ => Err(ToolError::bad_request(format!(
            "artifact_query takes one of \"jq\", \"jmespath\" and \"pointer\", not {}",
            given.iter().map(|(k, _)| format!("\"{k}\"")).collect::<Vec<_>>().join(" and ")
        ))),
    }
}

/// The artifacts asked for: `id`, or `ids` (then the program sees an array).
fn ids_argument(arguments: &Value) -> Result<(Vec<String>, bool), ToolError> {
    match (arguments.get("id").filter(|v| !v.is_null()), arguments.get("ids").filter(|v| !v.is_null())) {
        (Some(_), Some(_)) => Err(ToolError::bad_request("artifact_query takes \"id\" or \"ids\", not both")),
        (Some(_), None) => Ok((vec![super::id_argument(ARTIFACT_QUERY_TOOL, arguments)?], false)),
        (None, Some(Value::Array(list))) if !list.is_empty() && list.len() <= MAX_IDS => {
            let ids = list
                .iter()
                .map(|v| v.as_str().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ToolError::bad_request("artifact_query: \"ids\" must be a list of artifact ids or artifact:// URIs"))?;
            Ok((ids, true))
        }
        (None, Some(_)) => Err(ToolError::bad_request(format!(
            "artifact_query: \"ids\" must be a list of 1 to {MAX_IDS} artifact ids or artifact:// URIs"
        ))),
        (None, None) => Err(ToolError::bad_request(
            "artifact_query needs \"id\" (an artifact id or artifact:// URI from an earlier tool result) or \"ids\" (a list of them)",
        )),
    }
}

pub(super) async fn call(
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    arguments: &Value,
    hints: ReadHints,
) -> Result<Value, ToolError> {
    // Arguments first: a bad program is an error whatever the ids.
    let (ids, several) = ids_argument(arguments)?;
    let selector = selector(arguments)?;
    let format = input::format_argument(ARTIFACT_QUERY_TOOL, arguments)?;
    let offset = usize_argument(ARTIFACT_QUERY_TOOL, arguments, "offset")?.unwrap_or(0);
    // Every id is looked up before any is read: an unknown one answers like a missing one.
    let mut metas = Vec::with_capacity(ids.len());
    for id in &ids {
        metas.push(meta_of(store, scope, id).await?);
    }
    let total: u64 = metas.iter().map(|m| m.size_bytes).sum();
    if total > jq::MAX_INPUT_BYTES as u64 {
        return Err(ToolError::bad_request(format!(
            "artifact_query reads at most {} of artifacts in one call, and these are {}; query fewer, or grep with artifact_read",
            stowage_core::human_size(jq::MAX_INPUT_BYTES as u64),
            stowage_core::human_size(total)
        )));
    }
    // `as`, else what the first artifact's media type says, else JSON.
    let format = format.or_else(|| Format::of_mime(metas[0].mime_type.as_deref())).unwrap_or(Format::Json);
    let mut docs = Vec::with_capacity(metas.len());
    for meta in metas {
        let (meta, bytes) = text_of(store, scope, ARTIFACT_QUERY_TOOL, meta).await?;
        docs.push((meta.id.to_string(), bytes));
    }
    let names = docs.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>().join(", ");
    let where_ = selector.describe();
    let (paged, stopped) = match selector {
        Selector::Jq(code) => jq::run_program(code, jq::Input { docs, format, several }).await?,
        other => {
            let big = total as usize >= CPU_POOL_BYTES;
            let select = move || select(&docs, format, several, &other).map(|v| (page::paged(&v), None));
            if big { crate::cpu_pool::run(select).await? } else { select()? }
        }
    };
    let page = page::page(&paged, offset, &hints).map_err(|e| ToolError::bad_request(format!("artifact_query: {e}")))?;
    let mut header = format!("[{names} {where_}: {}", page.what);
    if !page.summarized.is_empty() {
        header.push_str(&format!("; too big for one page, so shown as <summaries>: {}", page.summarized.join(", ")));
    }
    if let Some(s) = &stopped {
        header.push_str("; ");
        header.push_str(s);
    }
    if let Some(n) = page.next {
        header.push_str(&format!("; more: the same call with offset={n}"));
    }
    header.push(']');
    let mut facts = Map::new();
    if several {
        facts.insert("ids".into(), json!(ids));
    } else {
        facts.insert("id".into(), json!(names));
    }
    facts.insert("total".into(), json!(page.total));
    facts.insert("offset".into(), json!(offset));
    facts.insert("returned".into(), json!(page.returned));
    let cut = page.next.is_some() || offset > 0 || !page.summarized.is_empty() || stopped.is_some();
    facts.insert("truncated".into(), json!(cut));
    if let Some(n) = page.next {
        facts.insert("nextOffset".into(), json!(n));
    }
    if cut {
        let note = header.trim_start_matches('[').trim_end_matches(']').split_once(": ").map(|x| x.1).unwrap_or_default().to_owned();
        facts.insert("note".into(), json!(note));
    }
    Ok(hints.answer(header, page.payload, facts))
}

/// The selection of a pointer or JMESPath over the input (an array of the documents for `ids`).
fn select(docs: &[(String, Bytes)], format: Format, several: bool, selector: &Selector) -> Result<Value, ToolError> {
    let mut values = Vec::with_capacity(docs.len());
    for (id, bytes) in docs {
        values.push(input::parse(ARTIFACT_QUERY_TOOL, id, as_str(bytes), format)?);
    }
    let doc = if several { Value::Array(values) } else { values.pop().unwrap_or(Value::Null) };
    let names = || docs.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>().join(", ");
    match selector {
        Selector::Pointer(p) => match doc.pointer(p) {
            Some(v) => Ok(v.clone()),
            None => Err(ToolError::bad_request(format!(
                "artifact_query: pointer {p:?} selects nothing in artifact {}; {}",
                names(),
                nearest(&doc, p)
            ))),
        },
        Selector::JmesPath(expr) => {
            let found = expr.search(&doc).map_err(|e| {
                ToolError::bad_request(format!("artifact_query: jmespath {:?} failed on artifact {} ({e})", expr.as_str(), names()))
            })?;
            Ok(serde_json::to_value(&*found).unwrap_or(Value::Null))
        }
        Selector::Jq(_) => unreachable!("jq runs on its own thread"),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Value {
        json!({"rows": (0..2000).map(|i| json!({"id": i, "name": format!("row {i}"), "total": i * 3})).collect::<Vec<_>>(), "count": 2000})
    }

    /// The answer for `args` over `doc` as `hints`' host reads it: its header and payload.
    fn answer_for(doc: &str, args: Value, hints: ReadHints) -> Result<(String, String, Value), ToolError> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store: Arc<dyn ArtifactStore> = Arc::new(stowage_store::MemoryStore::new(Default::default()));
            let scope = ArtifactScope::session("s");
            let r = store
                .put_bytes(Bytes::copy_from_slice(doc.as_bytes()), stowage_core::PutOptions::scoped(scope.clone()).mime("application/json"))
                .await
                .unwrap();
            let mut args = args;
            if args.get("ids").is_none() {
                args["id"] = json!(r.id.as_str());
            }
            let v = call(&store, &scope, &args, hints).await?;
            let header = v["content"][0]["text"].as_str().unwrap().to_owned();
            let payload = v["content"][1]["text"].as_str().unwrap_or("").to_owned();
            Ok((header, payload, v["structuredContent"].clone()))
        })
    }

    fn run(doc: &Value, args: Value) -> Result<(String, Value, Value), ToolError> {
        let (h, p, facts) = answer_for(&doc.to_string(), args, ReadHints::default())?;
        Ok((h, serde_json::from_str(&p).unwrap_or(Value::String(p)), facts))
    }

    #[test]
    fn pointers_and_jmespath() {
        let doc = rows();
        assert_eq!(run(&doc, json!({"pointer": "/rows/3/name"})).unwrap().1, "row 3");
        assert_eq!(run(&doc, json!({"pointer": "/count"})).unwrap().2["truncated"], false);
        let e = run(&doc, json!({"pointer": "/rows/5000/name"})).unwrap_err();
        assert!(e.message.contains("\"/rows\" is an array of 2000 items"), "{e}");
        let e = run(&doc, json!({"pointer": "/nope"})).unwrap_err();
        assert!(e.message.contains("keys rows, count"), "{e}");
        let e = run(&doc, json!({"pointer": "rows.3"})).unwrap_err();
        assert!(e.message.contains("\"/rows/3\""), "{e}");
        assert_eq!(run(&doc, json!({"jmespath": "length(rows)"})).unwrap().1, 2000);
        assert_eq!(run(&doc, json!({"jmespath": "rows[?total > `5990`].id"})).unwrap().1, json!([1997, 1998, 1999]));
        let e = run(&doc, json!({"jmespath": "rows[?"})).unwrap_err();
        assert!(e.code == "bad_request" && e.message.contains("does not parse at character") && !e.message.contains('\n'), "{e}");
        assert_eq!(run(&doc, json!({})).unwrap_err().code, "bad_request");
        let e = run(&doc, json!({"pointer": "", "jq": "."})).unwrap_err();
        assert!(e.message.contains("not \"pointer\" and \"jq\""), "{e}");
    }

    #[test]
    fn jq_answers_small_and_exact() {
        let doc = rows();
        let (h, v, _) = run(&doc, json!({"jq": "[.rows[] | select(.total % 2 == 0)] | length"})).unwrap();
        assert_eq!(v, 1000, "{h}");
        let (_, v, _) = run(&doc, json!({"jq": "[.rows[] | select(.total > 5990)] | .[0]"})).unwrap();
        assert_eq!(v, json!({"id": 1997, "name": "row 1997", "total": 5991}));
        let (h, v, _) = run(&doc, json!({"jq": ".rows[] | select(.id < 2) | .name"})).unwrap();
        assert_eq!(v, json!(["row 0", "row 1"]));
        assert!(h.contains("2 results (jq's output stream"), "{h}");
        let e = run(&doc, json!({"jq": ".rows | map(.id"})).unwrap_err();
        assert!(e.message.contains("does not parse at character"), "{e}");
    }

    #[test]
    fn a_cut_selection_states_its_true_total_and_continues_at_offset() {
        // The fault this guards: 20,000 items reported as "cut to items 0..1691 of 2666".
        let orders: Vec<Value> =
            (0..20_000).map(|i| json!({"id": format!("O-{i}"), "customer": format!("customer {}", i % 1500), "total": i})).collect();
        let doc = json!({"orders": orders}).to_string();
        let host = crate::hosts::builtin().into_iter().find(|p| p.name == "claude-code").unwrap();
        let hints = ReadHints::for_host(&host);
        let (h, p, _) = answer_for(&doc, json!({"jq": ".orders"}), hints).unwrap();
        assert!(h.contains("an array of 20000 items; items 0-"), "{h}");
        let first: Vec<Value> = serde_json::from_str(&p).unwrap();
        let next = first.len();
        assert!(h.contains(&format!("more: the same call with offset={next}")), "{h}");
        let (h2, p2, _) = answer_for(&doc, json!({"jq": ".orders", "offset": next}), hints).unwrap();
        let second: Vec<Value> = serde_json::from_str(&p2).unwrap();
        assert_eq!(second[0]["id"], format!("O-{next}"), "{h2}");
        let (h3, p3, _) = answer_for(&doc, json!({"jmespath": "orders", "offset": 19_999}), hints).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&p3).unwrap(),
            json!([{"id": "O-19999", "customer": "customer 499", "total": 19999}]),
            "{h3}"
        );
        assert!(!h3.contains("more:"), "{h3}");
        let e = answer_for(&doc, json!({"jq": ".orders", "offset": 20_001}), hints).unwrap_err();
        assert!(e.message.contains("past the end: the selection has 20000 items"), "{e}");
    }

    #[test]
    fn csv_lines_and_several_ids() {
        let csv: String = std::iter::once("id,region,amount\n".to_owned())
            .chain((0..300).map(|i| format!("{i},{},{}\n", ["north", "south", "east"][i % 3], i * 2)))
            .collect();
        let (_, n, _) = answer_for(
            &csv,
            json!({"as": "csv", "jq": "[.[] | select(.region == \"east\" and .amount > 100)] | length"}),
            ReadHints::default(),
        )
        .unwrap();
        assert_eq!(n, "83");
        let (_, top, _) =
            answer_for(&csv, json!({"as": "csv", "jq": "[.[] | select(.region == \"east\")] | max_by(.amount)"}), ReadHints::default())
                .unwrap();
        assert_eq!(serde_json::from_str::<Value>(&top).unwrap(), json!({"id": 299, "region": "east", "amount": 598}));
        let e = answer_for("a,b\n1,2\n3\n", json!({"as": "csv", "jq": "length"}), ReadHints::default()).unwrap_err();
        assert!(e.message.contains("not CSV at line 3"), "{e}");
        let log = "INFO a\nERROR E42 x\nERROR E7 y\nERROR E42 z\n";
        let (_, counts, _) = answer_for(
            log,
            json!({"as": "lines", "jq": "map(select(startswith(\"ERROR\")) | split(\" \")[1]) | group_by(.) | map({(.[0]): length}) | add"}),
            ReadHints::default(),
        )
        .unwrap();
        assert_eq!(serde_json::from_str::<Value>(&counts).unwrap(), json!({"E42": 2, "E7": 1}));
        let e = answer_for("{}", json!({"ids": ["t_0000000000000000"], "jq": "."}), ReadHints::default()).unwrap_err();
        assert_eq!(e.code, "artifact_not_found");
    }
}
