//! `artifact_collect`: one of the caller's tools called page by page, server-side, and every
//! page's items stored as one JSON array artifact, so "find one ticket across 30 pages" is one
//! call here and one `artifact_query` after it, instead of 30 calls through the model.
//!
//! The cursor is inferred: a `next_cursor`/`nextCursor`/`next_page_token`/`nextPageToken`
//! (or `next_token`, `next`) field of the page's payload (its `structuredContent`, else its
//! JSON text), at the top or under `meta`/`pagination`/`page_info`, is fed back as the
//! argument the tool's input schema has for it (`cursor`, `page_token`, …); `cursor: {from,
//! to}` names both when inference cannot. The items are the payload when it is an array,
//! else its array field (the longest, when there are several; `items` names it).
//!
//! Bounded: at most `max_pages` pages (default [`DEFAULT_PAGES`], at most [`MAX_PAGES`]),
//! [`MAX_BYTES`] of items and `max_seconds` (default [`DEFAULT_SECONDS`], at most
//! [`MAX_SECONDS`]; each page also within the upstream's own timeout); a cursor seen before (a
//! listing that loops) or a page that hands back the cursor it was given (a tool that ignores
//! the argument) stops it. What stops early says so: the answer is `complete: false` with the reason and the cursor to go on
//! from. The pages go straight into the store's stream as they come (a bounded pipe), so at
//! most one page is held beyond it. The calls themselves are the gateway's (see
//! [`Pages`]): the caller's routing, upstream session and timeouts.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use stowage_core::{ArtifactScope, PutOptions, human_size};
use stowage_http::ApiError;
use stowage_store::ArtifactStore;
use tokio::io::AsyncWriteExt;

use super::{ReadHints, ToolError};

/// The tool's name in `tools/list`.
pub(crate) const ARTIFACT_COLLECT_TOOL: &str = "artifact_collect";
/// Pages fetched when `max_pages` is not given.
pub(crate) const DEFAULT_PAGES: usize = 100;
/// The most pages one call fetches.
pub(crate) const MAX_PAGES: usize = 1_000;
/// The most bytes of items (as JSON) one call stores.
pub(crate) const MAX_BYTES: usize = 64 << 20;
/// Seconds a collection runs when `max_seconds` is not given: no new page starts after them.
pub(crate) const DEFAULT_SECONDS: u64 = 120;
/// The most `max_seconds` one call may ask for.
pub(crate) const MAX_SECONDS: u64 = 600;
/// The pipe between the pages and the store: a page waits while the store reads the last.
const PIPE_BYTES: usize = 256 << 10;

/// Result fields that carry the next page's cursor, and the arguments each usually feeds.
const CURSOR_FIELDS: [&str; 7] = ["next_cursor", "nextCursor", "next_page_token", "nextPageToken", "next_token", "nextToken", "next"];
const CURSOR_ARGS: [&str; 12] = [
    "cursor",
    "page_token",
    "pageToken",
    "next_cursor",
    "nextCursor",
    "next_page_token",
    "nextPageToken",
    "starting_after",
    "after",
    "token",
    "continuation_token",
    "continuationToken",
];
/// Objects a payload may keep its cursor in.
const CURSOR_HOMES: [&str; 5] = ["meta", "pagination", "page_info", "pageInfo", "paging"];

pub(super) fn def() -> Value {
    json!({
        "name": ARTIFACT_COLLECT_TOOL,
        "title": "Collect every page of a paginated tool into one artifact",
        "description": format!("Calls one of your tools page by page on the server (following its next_cursor/nextCursor/next_page_token into the matching argument) and stores every page's items as one JSON array artifact. Answers with its reference, the pages fetched, the item count and whether the listing is complete; then ask it with artifact_query (e.g. jq \".[] | select(.subject | test(\\\"refund\\\"))\"). At most {MAX_PAGES} pages and {} of items.", human_size(MAX_BYTES as u64)),
        "inputSchema": {
            "type": "object",
            "properties": {
                "tool": {"type": "string", "description": "the tool to call, by the name you call it"},
                "arguments": {"type": "object", "description": "its arguments for the first page"},
                "max_pages": {"type": "integer", "minimum": 1, "maximum": MAX_PAGES, "description": format!("pages to fetch at most (default {DEFAULT_PAGES})")},
                "max_seconds": {"type": "integer", "minimum": 1, "maximum": MAX_SECONDS, "description": format!("no new page starts after this many seconds (default {DEFAULT_SECONDS})")},
                "cursor": {
                    "type": "object",
                    "description": "when the cursor cannot be inferred: the result field that holds the next cursor (a name or JSON Pointer) and the argument it goes into",
                    "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
                    "required": ["from", "to"],
                },
                "items": {"type": "string", "description": "JSON Pointer to the items in each page's result, when it has several arrays"},
            },
            "required": ["tool"],
        },
        "annotations": {"readOnlyHint": false, "idempotentHint": false, "openWorldHint": true},
    })
}

/// How the gateway calls the caller's tools for a collection: the caller's own routing, upstream
/// session, timeouts and events.
#[async_trait]
pub(crate) trait Pages: Send + Sync {
    /// The input schema of `tool` as the caller sees it; `None` when the caller has no such
    /// upstream tool.
    fn input_schema(&self, tool: &str) -> Option<Value>;
    /// `tool`'s result (a CallToolResult as the upstream sent it), or why there is none.
    async fn call(&self, tool: &str, arguments: Value) -> Result<Value, ToolError>;
}

/// What was asked, validated.
#[derive(Debug)]
pub(crate) struct Request {
    tool: String,
    arguments: Map<String, Value>,
    max_pages: usize,
    max_seconds: u64,
    /// [`MAX_BYTES`], smaller in tests.
    max_bytes: usize,
    cursor: Option<(String, String)>,
    items: Option<String>,
}

pub(crate) fn parse(arguments: &Value) -> Result<Request, ToolError> {
    let tool = match arguments.get("tool") {
        Some(Value::String(t)) if !t.trim().is_empty() => t.trim().to_owned(),
        _ => return Err(ToolError::bad_request("artifact_collect needs \"tool\": the name of the paginated tool to call")),
    };
    let args = match arguments.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(v) => return Err(ToolError::bad_request(format!("artifact_collect: \"arguments\" must be an object, not {v}"))),
    };
    let max_pages = match super::usize_argument(ARTIFACT_COLLECT_TOOL, arguments, "max_pages")? {
        None => DEFAULT_PAGES,
        Some(n) if (1..=MAX_PAGES).contains(&n) => n,
        Some(n) => return Err(ToolError::bad_request(format!("artifact_collect: \"max_pages\" must be 1 to {MAX_PAGES}, not {n}"))),
    };
    let max_seconds = match super::usize_argument(ARTIFACT_COLLECT_TOOL, arguments, "max_seconds")? {
        None => DEFAULT_SECONDS,
        Some(n) if (1..=MAX_SECONDS as usize).contains(&n) => n as u64,
        Some(n) => return Err(ToolError::bad_request(format!("artifact_collect: \"max_seconds\" must be 1 to {MAX_SECONDS}, not {n}"))),
    };
    let cursor = match arguments.get("cursor") {
        None | Some(Value::Null) => None,
        Some(c) => match (c.get("from").and_then(Value::as_str), c.get("to").and_then(Value::as_str)) {
            (Some(from), Some(to)) if !from.is_empty() && !to.is_empty() => Some((from.to_owned(), to.to_owned())),
            _ => {
                return Err(ToolError::bad_request(
                    "artifact_collect: \"cursor\" must be {\"from\": the result field with the next cursor, \"to\": the argument it goes into}",
                ));
            }
        },
    };
    let items = match arguments.get("items") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if p.is_empty() || p.starts_with('/') => Some(p.clone()),
        Some(v) => {
            return Err(ToolError::bad_request(format!("artifact_collect: \"items\" must be a JSON Pointer like \"/tickets\", not {v}")));
        }
    };
    Ok(Request { tool, arguments: args, max_pages, max_seconds, max_bytes: MAX_BYTES, cursor, items })
}

/// A page's JSON: its `structuredContent`, else its first text block that is JSON.
fn payload(result: &Value) -> Option<Value> {
    if let Some(sc) = result.get("structuredContent").filter(|v| v.is_object() || v.is_array()) {
        return Some(sc.clone());
    }
    result
        .get("content")?
        .as_array()?
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .find_map(|t| if stowage_transform::twins::looks_like_json_container(t) { serde_json::from_str(t).ok() } else { None })
}

/// Where the items are in a payload: the pointer `items` gives, the payload itself when it is
/// an array, else its longest array field (one level down when the top has none).
fn items_pointer(payload: &Value, asked: Option<&str>) -> Option<String> {
    if let Some(p) = asked {
        return payload.pointer(p).filter(|v| v.is_array()).map(|_| p.to_owned());
    }
    if payload.is_array() {
        return Some(String::new());
    }
    let longest = |m: &Map<String, Value>, prefix: &str| {
        m.iter()
            .filter_map(|(k, v)| v.as_array().map(|a| (a.len(), k)))
            .max_by_key(|(n, _)| *n)
            .map(|(_, k)| format!("{prefix}/{}", k.replace('~', "~0").replace('/', "~1")))
    };
    let top = payload.as_object()?;
    longest(top, "").or_else(|| {
        top.iter()
            .filter_map(|(k, v)| v.as_object().and_then(|m| longest(m, &format!("/{}", k.replace('~', "~0").replace('/', "~1")))))
            .next()
    })
}

/// The next cursor in a payload: (where it was, its value); `None` at the end (absent, null,
/// empty or `false`).
fn next_cursor(payload: &Value, from: Option<&str>) -> Option<(String, Value)> {
    let usable = |v: &Value| match v {
        Value::String(s) => !s.is_empty(),
        Value::Number(_) => true,
        Value::Object(m) => !m.is_empty(),
        _ => false,
    };
    if let Some(from) = from {
        let v = if from.starts_with('/') { payload.pointer(from) } else { payload.get(from) };
        return v.filter(|v| usable(v)).map(|v| (from.to_owned(), v.clone()));
    }
    let obj = payload.as_object()?;
    let homes = std::iter::once(("".to_owned(), obj))
        .chain(CURSOR_HOMES.iter().filter_map(|h| obj.get(*h)?.as_object().map(|m| (format!("{h}."), m))));
    for (prefix, m) in homes {
        for field in CURSOR_FIELDS {
            if let Some(v) = m.get(field) {
                // A field that is there but empty is the end; an object `next` is not a cursor.
                return usable(v).then(|| (format!("{prefix}{field}"), v.clone()));
            }
        }
    }
    None
}

/// Whether a payload names a cursor field at all (even an empty one): then the listing is
/// paginated by cursor.
fn has_cursor_field(payload: &Value) -> Option<String> {
    let obj = payload.as_object()?;
    CURSOR_FIELDS.iter().find(|f| obj.contains_key(**f)).map(|f| (*f).to_owned()).or_else(|| {
        CURSOR_HOMES.iter().find_map(|h| {
            let m = obj.get(*h)?.as_object()?;
            CURSOR_FIELDS.iter().find(|f| m.contains_key(**f)).map(|f| format!("{h}.{f}"))
        })
    })
}

/// The argument of `schema` a cursor from field `field` goes into.
fn cursor_argument(schema: &Value, field: &str) -> Option<String> {
    let props = schema.get("properties")?.as_object()?;
    let field = field.rsplit('.').next().unwrap_or(field);
    let base = field.trim_start_matches("next_").trim_start_matches("next");
    let base = if base.is_empty() { "cursor" } else { base };
    let same = |a: &str, b: &str| a.replace('_', "").eq_ignore_ascii_case(&b.replace('_', ""));
    // The field's own name without `next` (`next_page_token` → `page_token`), then the name
    // itself, then the usual cursor arguments.
    props
        .keys()
        .find(|k| same(k, base))
        .or_else(|| props.keys().find(|k| same(k, field)))
        .or_else(|| CURSOR_ARGS.iter().find_map(|a| props.keys().find(|k| same(k, a))))
        .cloned()
}

/// Runs a collection (see the module docs) for the session owning `scope`.
pub(crate) async fn collect(
    pages: &dyn Pages,
    store: &Arc<dyn ArtifactStore>,
    scope: &ArtifactScope,
    request: Request,
    hints: &ReadHints,
) -> Result<Value, ToolError> {
    let Request { tool, arguments, max_pages, max_seconds, max_bytes, cursor, items } = request;
    let started = Instant::now();
    let first = first_page(pages, &tool, &arguments, cursor.as_ref(), items.as_deref()).await?;
    let to = first.to.clone();

    // The store reads the array as the pages come.
    let (mut writer, reader) = tokio::io::duplex(PIPE_BYTES);
    let mut opts = PutOptions::scoped(scope.clone()).mime("application/json").filename(format!("{tool}-all-pages.json"));
    opts.namespace = Some(tool.clone());
    let put_store = store.clone();
    let put = tokio::spawn(async move { put_store.put_stream(Box::pin(reader), opts).await });
    let limits = Limits { max_pages, max_bytes, max_seconds, deadline: started + Duration::from_secs(max_seconds) };
    let from = cursor.as_ref().map(|(f, _)| f.as_str());
    let walk = walk(pages, &tool, arguments, first, from, &limits, &mut writer).await;
    drop(writer);
    // The store's own failure (full, over its size limit, …) says more than the broken pipe.
    let stored = put
        .await
        .map_err(|_| ToolError::bad_request("artifact_collect: storing the collection failed"))?
        .map_err(|e| ToolError::from(ApiError::from(e)))?;
    if walk.broken {
        return Err(ToolError::bad_request("artifact_collect: the artifact store stopped reading the collection"));
    }
    Ok(answer(hints, &tool, &stored, walk, to.as_deref()))
}

/// The first page, checked: its payload, where its items are, and the argument the next
/// cursor goes into (none for a listing of one page).
struct First {
    body: Value,
    items_at: String,
    to: Option<String>,
}

/// Checks the request against the tool and fetches the first page. An error here is the
/// answer, and nothing is stored.
async fn first_page(
    pages: &dyn Pages,
    tool: &str,
    arguments: &Map<String, Value>,
    cursor: Option<&(String, String)>,
    items: Option<&str>,
) -> Result<First, ToolError> {
    if tool.starts_with("artifact_") {
        return Err(ToolError::bad_request(format!(
            "artifact_collect calls one of your upstream tools page by page; {tool} is the gateway's own"
        )));
    }
    let Some(schema) = pages.input_schema(tool) else {
        return Err(ToolError::bad_request(format!("artifact_collect: there is no tool {tool:?}; give the name of a tool you can call")));
    };
    let props = schema.get("properties").and_then(Value::as_object).filter(|p| !p.is_empty());
    if let (Some((_, to)), Some(props)) = (cursor, props)
        && !props.contains_key(to)
    {
        let names: Vec<&str> = props.keys().map(String::as_str).collect();
        return Err(ToolError::bad_request(format!(
            "artifact_collect: {tool} takes no argument {to:?} for the cursor (its arguments: {})",
            names.join(", ")
        )));
    }
    let first = pages.call(tool, Value::Object(arguments.clone())).await?;
    if first.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(ToolError::bad_request(format!("artifact_collect: {tool} failed on the first page: {}", error_text(&first, 400))));
    }
    let Some(body) = payload(&first) else {
        return Err(ToolError::bad_request(format!(
            "artifact_collect: {tool}'s result is not JSON (no structuredContent, no JSON text): it collects JSON listings"
        )));
    };
    let Some(items_at) = items_pointer(&body, items) else {
        if let Some(p) = items {
            return Err(ToolError::bad_request(format!("artifact_collect: {tool}'s result has no array at \"items\": {p:?}")));
        }
        let keys: Vec<String> = body.as_object().map(|m| m.keys().take(12).cloned().collect()).unwrap_or_default();
        return Err(ToolError::bad_request(format!(
            "artifact_collect: no array of items in {tool}'s result (keys: {}); name it with \"items\", a JSON Pointer",
            keys.join(", ")
        )));
    };
    let from = cursor.map(|(f, _)| f.as_str());
    let to = match (cursor, next_cursor(&body, from).map(|(f, _)| f).or_else(|| has_cursor_field(&body))) {
        (Some((_, to)), _) => Some(to.clone()),
        (None, Some(field)) => match cursor_argument(&schema, &field) {
            Some(arg) => Some(arg),
            None => {
                return Err(ToolError::bad_request(format!(
                    "artifact_collect: {tool}'s result has a cursor ({field}) but its input schema names no argument it goes into; say it with \"cursor\": {{\"from\": \"{field}\", \"to\": \"<argument>\"}}"
                )));
            }
        },
        // A tool that takes a cursor but names no next one: a listing of one page.
        (None, None) if props.is_some_and(|p| p.keys().any(|k| CURSOR_ARGS.iter().any(|a| a.eq_ignore_ascii_case(k)))) => None,
        (None, None) => {
            return Err(ToolError::bad_request(format!(
                "artifact_collect: {tool} is not a paginated listing: its result names no next cursor (next_cursor, nextCursor, next_page_token, …) and it takes no cursor argument; call it directly, or name both with \"cursor\": {{\"from\": \"<result field>\", \"to\": \"<argument>\"}}"
            )));
        }
    };
    Ok(First { body, items_at, to })
}

/// The request's bounds on a walk.
struct Limits {
    max_pages: usize,
    max_bytes: usize,
    max_seconds: u64,
    deadline: Instant,
}

/// What a walk through the pages kept, and why it stopped early when it did.
#[derive(Default)]
struct Walk {
    /// Pages kept, and their items.
    kept: usize,
    count: usize,
    /// The first item's keys (when items are objects), for the answer's description.
    first_keys: Vec<String>,
    stop: Option<String>,
    /// The cursor to go on from, when more was left.
    resume: Option<Value>,
    /// The store stopped reading.
    broken: bool,
}

/// Writes the first page's items and every next page's into `writer` as one JSON array,
/// page by page, within `limits`.
async fn walk(
    pages: &dyn Pages,
    tool: &str,
    mut arguments: Map<String, Value>,
    first: First,
    from: Option<&str>,
    limits: &Limits,
    writer: &mut tokio::io::DuplexStream,
) -> Walk {
    let First { mut body, items_at, to } = first;
    let mut w = Walk::default();
    let mut seen_cursors: HashSet<String> = HashSet::new();
    // Item bytes written; the cursor that fetched `body`.
    let mut bytes = 0usize;
    let mut sent: Option<Value> = None;
    w.broken = writer.write_all(b"[").await.is_err();
    while !w.broken {
        let next = next_cursor(&body, from).map(|(_, v)| v);
        // A page handing back the cursor that fetched it would be fetched forever: the tool
        // ignores the argument it went into.
        if let (Some(s), Some(n), Some(to)) = (&sent, &next, &to)
            && s == n
        {
            w.stop = Some(format!(
                "page {} handed back the cursor it was given ({}), so {tool} ignores \"{to}\"; name the right argument with \"cursor\"",
                w.kept + 1,
                one_line_value(n)
            ));
            break;
        }
        // This page's items, written out.
        let page_items = body.pointer(&items_at).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        if w.first_keys.is_empty()
            && let Some(Value::Object(m)) = page_items.first()
        {
            w.first_keys = m.keys().take(12).cloned().collect();
        }
        let chunk = items_json(page_items, w.count > 0);
        if bytes + chunk.len() > limits.max_bytes {
            w.stop = Some(format!("stopped before page {}: its items would pass {}", w.kept + 1, human_size(limits.max_bytes as u64)));
            w.resume = sent.clone();
            break;
        }
        if writer.write_all(&chunk).await.is_err() {
            w.broken = true;
            break;
        }
        bytes += chunk.len();
        w.count += page_items.len();
        w.kept += 1;
        drop(chunk);
        // The next page, if there is one.
        let (Some(to), Some(next)) = (&to, next) else { break };
        if let Some((why, resumable)) = why_stop(&w, &mut seen_cursors, &next, limits) {
            w.stop = Some(why);
            w.resume = resumable.then_some(next);
            break;
        }
        arguments.insert(to.clone(), next.clone());
        let page = w.kept + 1;
        let result = match pages.call(tool, Value::Object(arguments.clone())).await {
            Ok(r) if r.get("isError").and_then(Value::as_bool) != Some(true) => Ok(r),
            Ok(r) => Err(format!("page {page} failed: {}", error_text(&r, 200))),
            Err(e) => Err(format!("page {page} failed: {}", e.message)),
        };
        let checked = result.and_then(|r| match payload(&r) {
            Some(b) if b.pointer(&items_at).is_some_and(Value::is_array) => Ok(b),
            _ => Err(format!("page {page} has no array of items at {items_at:?}")),
        });
        match checked {
            Ok(b) => body = b,
            Err(why) => {
                w.stop = Some(why);
                w.resume = Some(next);
                break;
            }
        }
        sent = Some(next);
    }
    if !w.broken {
        w.broken = writer.write_all(b"]").await.is_err() || writer.shutdown().await.is_err();
    }
    w
}

/// A page's items as JSON, each after a comma unless it is the array's first.
fn items_json(items: &[Value], after_others: bool) -> Vec<u8> {
    let mut chunk = Vec::new();
    for item in items {
        if after_others || !chunk.is_empty() {
            chunk.push(b',');
        }
        serde_json::to_writer(&mut chunk, item).expect("a Value serialises");
    }
    chunk
}

/// Why the walk stops before fetching the page at `next`, if it does, and whether `next` is
/// where to go on from: not when the cursor came back (the listing loops), yes when a bound
/// was reached with more to fetch.
fn why_stop(w: &Walk, seen_cursors: &mut HashSet<String>, next: &Value, limits: &Limits) -> Option<(String, bool)> {
    if !seen_cursors.insert(next.to_string()) {
        let why = format!("stopped after page {}: the cursor {} came back again (the listing loops)", w.kept, one_line_value(next));
        return Some((why, false));
    }
    if w.kept >= limits.max_pages {
        return Some((format!("stopped at max_pages={} with more to fetch", limits.max_pages), true));
    }
    if Instant::now() >= limits.deadline {
        return Some((format!("stopped after {} s (max_seconds) with more to fetch", limits.max_seconds), true));
    }
    None
}

/// The answer: one header line that says what was stored, whether it is whole and how to go
/// on, and the facts as structured content.
fn answer(hints: &ReadHints, tool: &str, stored: &stowage_core::ArtifactRef, walk: Walk, to: Option<&str>) -> Value {
    let Walk { kept, count, first_keys, stop, resume, .. } = walk;
    let complete = stop.is_none();
    let mut header = format!(
        "[collected {count} items from {tool} in {kept} pages, {}: stored as {} ({}), a JSON array",
        if complete { "complete" } else { "incomplete" },
        stored.uri,
        human_size(stored.size_bytes)
    );
    if !first_keys.is_empty() {
        header.push_str(&format!(" of objects with keys {}", first_keys.join(", ")));
    }
    if let Some(s) = &stop {
        header.push_str(&format!("; {s}"));
    }
    if let (Some(next), Some(to)) = (&resume, to) {
        header.push_str(&format!("; to go on, collect again with arguments.{to} = {}", one_line_value(next)));
    }
    header.push_str("; ask it with artifact_query (jq over the array) or artifact_describe]");
    let mut facts = Map::new();
    facts.insert("id".into(), json!(stored.id));
    facts.insert("uri".into(), json!(stored.uri));
    facts.insert("pages".into(), json!(kept));
    facts.insert("items".into(), json!(count));
    facts.insert("complete".into(), json!(complete));
    if let Some(s) = stop {
        facts.insert("stopped".into(), json!(s));
    }
    if let (Some(next), Some(to)) = (resume, to) {
        facts.insert("resume".into(), json!({"argument": to, "cursor": next}));
    }
    hints.answer(header, String::new(), facts)
}

/// An error result's text, on one line.
fn error_text(result: &Value, max: usize) -> String {
    let text = result["content"].as_array().into_iter().flatten().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join(" ");
    stowage_transform::stub::one_line(&text, max)
}

fn one_line_value(v: &Value) -> String {
    stowage_transform::stub::one_line(&v.to_string(), 120)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A listing of `total` tickets, `per` a page, behind a cursor; `looping`: page 3 points
    /// back at page 2.
    struct Tickets {
        total: usize,
        per: usize,
        looping: bool,
        calls: AtomicUsize,
        schema: Value,
        field: &'static str,
    }

    #[async_trait]
    impl Pages for Tickets {
        fn input_schema(&self, tool: &str) -> Option<Value> {
            (tool == "list_tickets").then(|| self.schema.clone())
        }
        async fn call(&self, _tool: &str, arguments: Value) -> Result<Value, ToolError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let page: usize =
                arguments.as_object().and_then(|m| m.values().find_map(|v| v.as_str()?.strip_prefix("p-")?.parse().ok())).unwrap_or(0);
            let tickets: Vec<Value> = (page * self.per..((page + 1) * self.per).min(self.total))
                .map(|i| json!({"id": format!("T-{i}"), "subject": if i == 377 { "refund failed twice" } else { "login" }}))
                .collect();
            let next = if self.looping && page == 2 {
                json!("p-1")
            } else if (page + 1) * self.per < self.total {
                json!(format!("p-{}", page + 1))
            } else {
                Value::Null
            };
            let mut body = json!({"tickets": tickets, "total": self.total});
            body[self.field] = next;
            Ok(json!({"content": [{"type": "text", "text": body.to_string()}], "structuredContent": body}))
        }
    }

    fn tickets(field: &'static str, arg: &str) -> Tickets {
        let schema = json!({"type": "object", "properties": {arg: {"type": "string"}, "status": {"type": "string"}}});
        Tickets { total: 600, per: 20, looping: false, calls: AtomicUsize::new(0), schema, field }
    }

    async fn run(pages: &Tickets, args: Value) -> (Result<Value, ToolError>, Arc<dyn ArtifactStore>) {
        let store: Arc<dyn ArtifactStore> = Arc::new(stowage_store::MemoryStore::new(Default::default()));
        let request = parse(&args).unwrap();
        let r = collect(pages, &store, &ArtifactScope::session("s"), request, &ReadHints::default()).await;
        (r, store)
    }

    async fn stored(store: &Arc<dyn ArtifactStore>, v: &Value) -> Vec<Value> {
        let id = stowage_core::ArtifactId::parse_loose(v["structuredContent"]["id"].as_str().unwrap()).unwrap();
        let bytes = store.get(&stowage_store::Access::owner_of(&ArtifactScope::session("s")), &id).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn thirty_pages_become_one_array_with_the_cursor_inferred() {
        for (field, arg) in
            [("next_cursor", "cursor"), ("nextCursor", "cursor"), ("next_page_token", "page_token"), ("nextPageToken", "pageToken")]
        {
            let t = tickets(field, arg);
            let (r, store) = run(&t, json!({"tool": "list_tickets", "arguments": {"status": "open"}})).await;
            let v = r.unwrap();
            let head = v["content"][0]["text"].as_str().unwrap().to_owned();
            assert!(
                head.starts_with("[collected 600 items from list_tickets in 30 pages, complete: stored as artifact://list_tickets_"),
                "{field}: {head}"
            );
            assert!(head.contains("keys id, subject"), "{head}");
            assert_eq!(v["structuredContent"]["complete"], true);
            let all = stored(&store, &v).await;
            assert_eq!(all.len(), 600);
            assert_eq!(all[377]["subject"], "refund failed twice");
            assert_eq!(t.calls.load(Ordering::SeqCst), 30);
        }
    }

    #[tokio::test]
    async fn loops_caps_and_bad_input_stop_and_say_so() {
        let mut t = tickets("next_cursor", "cursor");
        t.looping = true;
        let (r, store) = run(&t, json!({"tool": "list_tickets"})).await;
        let v = r.unwrap();
        let head = v["content"][0]["text"].as_str().unwrap();
        assert!(head.contains("incomplete") && head.contains("came back again"), "{head}");
        assert_eq!(stored(&store, &v).await.len(), 60, "the pages before the loop are kept");

        let t = tickets("next_cursor", "cursor");
        let (r, _) = run(&t, json!({"tool": "list_tickets", "max_pages": 5})).await;
        let head = r.unwrap()["content"][0]["text"].as_str().unwrap().to_owned();
        assert!(
            head.contains("100 items") && head.contains("stopped at max_pages=5") && head.contains("arguments.cursor = \"p-5\""),
            "{head}"
        );

        // A cursor field the schema has no argument for: the fix is named.
        let mut t = tickets("next_cursor", "status_only");
        t.schema = json!({"type": "object", "properties": {"status": {"type": "string"}, "since": {"type": "string"}}});
        let (r, _) = run(&t, json!({"tool": "list_tickets"})).await;
        assert!(r.unwrap_err().message.contains("\"cursor\": {\"from\": \"next_cursor\""));
        // …which `cursor` then gives; an argument the tool does not take is refused first.
        let (r, _) = run(&t, json!({"tool": "list_tickets", "cursor": {"from": "next_cursor", "to": "since"}})).await;
        assert!(r.unwrap()["content"][0]["text"].as_str().unwrap().contains("600 items"));
        let (r, _) = run(&t, json!({"tool": "list_tickets", "cursor": {"from": "next_cursor", "to": "after"}})).await;
        assert_eq!(
            r.unwrap_err().message,
            "artifact_collect: list_tickets takes no argument \"after\" for the cursor (its arguments: status, since)"
        );
        assert_eq!(t.calls.load(Ordering::SeqCst), 31, "a refused collection calls nothing");

        // The byte cap keeps the whole pages that fit, and says where to go on.
        let t = tickets("next_cursor", "cursor");
        let store: Arc<dyn ArtifactStore> = Arc::new(stowage_store::MemoryStore::new(Default::default()));
        let mut request = parse(&json!({"tool": "list_tickets"})).unwrap();
        request.max_bytes = 1_600;
        let v = collect(&t, &store, &ArtifactScope::session("s"), request, &ReadHints::default()).await.unwrap();
        let head = v["content"][0]["text"].as_str().unwrap();
        assert!(
            head.contains("incomplete") && head.contains("stopped before page 3: its items would pass") && head.contains("= \"p-2\""),
            "{head}"
        );
        assert_eq!(stored(&store, &v).await.len(), 40);

        let (r, _) = run(&t, json!({"tool": "nope"})).await;
        assert!(r.unwrap_err().message.contains("no tool \"nope\""));
        let (r, _) = run(&t, json!({"tool": "artifact_collect"})).await;
        assert!(r.unwrap_err().message.contains("the gateway's own"));
        assert!(parse(&json!({"tool": "x", "max_pages": 0})).is_err());
        assert!(parse(&json!({"tool": "x", "cursor": {"from": "a"}})).is_err());
    }

    #[test]
    fn cursor_arguments_are_matched_by_name() {
        let schema = json!({"properties": {"pageToken": {}, "limit": {}}});
        assert_eq!(cursor_argument(&schema, "nextPageToken").as_deref(), Some("pageToken"));
        assert_eq!(cursor_argument(&json!({"properties": {"cursor": {}}}), "meta.next_cursor").as_deref(), Some("cursor"));
        assert_eq!(cursor_argument(&json!({"properties": {"after": {}}}), "next").as_deref(), Some("after"));
        assert_eq!(next_cursor(&json!({"pagination": {"next_cursor": "x"}}), None).unwrap().0, "pagination.next_cursor");
        assert!(next_cursor(&json!({"next_cursor": ""}), None).is_none());
    }
}
