//! `stowage-fixture`: a stdio MCP server with well-behaved and misbehaving tools, for the
//! gateway's tests and benchmarks. Each tool exists to exercise one path:
//!
//! | tool | why |
//! |---|---|
//! | `echo` | the small-call fast path (latency benchmark) |
//! | `get_view_pdf` | Tableau's shape: a ~500 KB base64 PDF inside JSON text (`bytes` to resize; `prepare: true` only builds the next answer's whole line, so a timed call starts from a ready result) |
//! | `get_image` | a native image block over the inline threshold |
//! | `get_report_structured` | a base64 PDF in `structuredContent` under a closed output schema |
//! | `slow` | sleeps `ms`, sending progress if asked: cancellation and progress mapping |
//! | `crash` | exits the process mid-call: restart and a clear error |
//! | `hang` | never answers: timeouts and client-disconnect cleanup |
//! | `malformed` | answers with broken JSON carrying the request id |
//! | `sample` | asks the client for sampling/createMessage: upstream-initiated requests |
//! | `pid` | the fixture's process id: which upstream session (child) served a client |
//! | `log` | sends `notifications/message` during the call: attribution of logs |
//! | `log_later` | answers, then sends `notifications/message` `ms` later, outside any call: session-level messages |
//! | `roots` | asks the client for `roots/list`: capabilities follow the client |
//! | `elicit_url` | a URL-mode elicitation, then `notifications/elicitation/complete` |
//! | `progress_burst` | `n` progress notifications, then the result: ordering |
//! | `not_object` | a `tools/call` result that is a bare string of `bytes` characters |
//! | `heavy_log`, `heavy_progress`, `heavy_error` | a 50 KB base64 PDF in a log message's data, a progress message, or a JSON-RPC error's data |
//! | `list_storm` | sends `n` `notifications/tools/list_changed` in a row |
//! | `env` | the names of the variables in the fixture's environment, sorted |
//! | `stderr_noise` | writes a non-UTF-8 line and a `bytes`-long line to stderr, then answers |
//! | `task_image` | task-capable (`task` param): the task's result is a 1 MB PNG image block |
//! | `analyze_sales` | a sales analysis with marked fields: `chart_options` (~40 KB, `artifact` + `stream`, `stream_id` `sales_chart`, one partial chunk sent live as progress `_meta["io.stowage/artifact_chunk"]` when a progress token is given) and `raw_data` (847 items, `x-artifact`) |
//! | `search_docs` | `x-produces-sources` results with a `source_field` mapping, duplicates included |
//! | `tool_error` | a result with `isError: true` |
//! | `get_links` | `resource_link`s to a small note, the 200 KB report and a resource that does not exist |
//! | `edit_note` | sets `fx://docs/note.txt`'s text and sends `notifications/resources/updated` for it |
//! | `rendezvous` | answers once `n` calls with the same `key` are in flight (an error after 5 s): calls that run at once, proved without a clock |
//! | `merge_results` | a join: totals over `branch_outputs` (rows and revenue of `raw_data` lists, their `summary`s), with `total_requests` and `failures` echoed |
//! | `list_tickets` | 600 tickets, 20 a page, behind `cursor` (`next_cursor`, null on the last page); `ticket 377` is the refund. Knobs: `loop_at` (that page's cursor points back at page 1), `fail_at` (that page is an `isError` result), `stuck` (the cursor argument is ignored), `delay_ms` (a sleep per page) |
//!
//! Resources (`resources/read`): `fx://docs/report.pdf` (a 200 KB PDF blob), `fx://docs/log.txt`
//! (17,000 characters of text), `fx://docs/note.txt` (one short line), `fx://docs/dot.png` (a
//! tiny PNG blob, under the inline threshold), `fx://docs/broken.bin` (a blob that is not
//! base64) and `fx://docs/hang.bin` (never answered). Template `fx://blob/{bytes}`: a PDF blob of that many bytes (made once per size).
//! `STOWAGE_FIXTURE_RESOURCES=N` lists N more, `fx://many/{i}`. Prompt `chart_prompt`: a user
//! message holding a 600×600 PNG image block.
//!
//! `STOWAGE_FIXTURE_IGNORE_FIRST_TOOLS_LIST=1` leaves its first `tools/list` unanswered (a
//! server slow to start); `STOWAGE_FIXTURE_REFUSE_FIRST_TOOLS_LIST=1` answers it with an error
//! (what the Python SDK answers a request that comes before its initialization finished).
//!
//! `STOWAGE_FIXTURE_NO_TEMPLATES=1` answers `resources/templates/list` with "method not found",
//! as servers that have resources but no templates do.
//!
//! `STOWAGE_FIXTURE_STATELESS=1` makes it a 2026-07-28-only server: it refuses `initialize`,
//! answers `server/discover`, `sample` asks for input by returning `input_required`, and
//! change notifications go only to `subscriptions/listen` streams: `touch` announces a tool
//! list change, `update` (`uri`) a resource update.
//!
//! `STOWAGE_FIXTURE_LOG=FILE` appends every received method (and cancellations) to FILE, so
//! tests can see what reached the upstream.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use stowage_testkit::samples;
use stowage_testkit::server::{Handler, Peer, code, serve, text_result};

struct Fixture {
    log: Option<std::sync::Mutex<std::fs::File>>,
    stateless: bool,
    /// Open listen streams: (request id, requested filter).
    listeners: std::sync::Mutex<Vec<(Value, Value)>>,
    /// `get_view_pdf` results by PDF size.
    view_pdfs: std::sync::Mutex<std::collections::HashMap<usize, Arc<String>>>,
    /// Whole response lines for the next `get_view_pdf` call of a size, made by `prepare: true`
    /// ahead of a timed call; the id goes into a blank slot (JSON whitespace) when sent.
    ready_lines: std::sync::Mutex<std::collections::HashMap<usize, Vec<u8>>>,
    /// Tasks started with `task_image`: id → done.
    tasks: std::sync::Mutex<std::collections::HashMap<String, bool>>,
    /// `fx://docs/note.txt`'s text, once `edit_note` changed it.
    note: std::sync::Mutex<Option<String>>,
    /// `fx://blob/{bytes}` contents, base64, made once per size.
    blobs: std::sync::Mutex<std::collections::HashMap<usize, Arc<String>>>,
    /// `STOWAGE_FIXTURE_RESOURCES=N`: N more listed resources, `fx://many/{i}`.
    many: usize,
    /// `STOWAGE_FIXTURE_IGNORE_FIRST_TOOLS_LIST=1`: the first `tools/list` is never answered (a
    /// server slow to start: the gateway's list request times out and must be tried again).
    ignore_first_tools_list: std::sync::atomic::AtomicBool,
    refuse_first_tools_list: std::sync::atomic::AtomicBool,
    /// `STOWAGE_FIXTURE_NO_TEMPLATES=1`: `resources/templates/list` is not implemented.
    no_templates: bool,
    /// `rendezvous` calls that arrived, by key.
    rendezvous: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

/// The blank the id of a prepared response line is written into.
const ID_SLOT: usize = 24;
const LINE_HEAD: &str = r#"{"jsonrpc":"2.0","id":"#;

impl Fixture {
    /// Sends `method` on every listen stream whose filter `wants` it.
    fn announce(&self, peer: &Peer, method: &str, mut params: Value, wants: impl Fn(&Value) -> bool) -> usize {
        let listeners = self.listeners.lock().unwrap();
        let mut n = 0;
        for (id, _) in listeners.iter().filter(|(_, f)| wants(f)) {
            params["_meta"] = json!({"io.modelcontextprotocol/subscriptionId": id});
            peer.notify(method, params.clone());
            n += 1;
        }
        n
    }
}

impl Fixture {
    /// The `get_view_pdf` result for a PDF of `size` bytes, as JSON text, made once per size.
    fn view_pdf(&self, size: usize) -> Arc<String> {
        let mut cache = self.view_pdfs.lock().unwrap();
        cache
            .entry(size)
            .or_insert_with(|| {
                let pdf = samples::pdf(size, "Sales Dashboard");
                let body = json!({"view": "Sales Dashboard", "format": "pdf", "filename": "sales.pdf", "data": STANDARD.encode(&pdf)});
                Arc::new(text_result(body.to_string()).to_string())
            })
            .clone()
    }

    fn log(&self, line: &str) {
        if let Some(f) = &self.log {
            let _ = writeln!(f.lock().unwrap(), "{line}");
        }
    }
}

/// The fixture's resources: URI and media type.
const DOCS: [(&str, &str); 5] = [
    ("fx://docs/report.pdf", "application/pdf"),
    ("fx://docs/log.txt", "text/plain"),
    ("fx://docs/note.txt", "text/plain"),
    ("fx://docs/dot.png", "image/png"),
    ("fx://docs/broken.bin", "application/octet-stream"),
];

/// A 1 MB PNG as an image block (the task tool's result).
fn image_result() -> Value {
    let png = samples::png(600, 600);
    json!({"content": [{"type": "image", "mimeType": "image/png", "data": STANDARD.encode(&png)}]})
}

fn tool(name: &str, props: Value) -> Value {
    json!({"name": name, "description": format!("fixture tool {name}"), "inputSchema": {"type": "object", "properties": props}})
}

/// One page of `list_tickets` (see the module docs): `{tickets, total, next_cursor}` in
/// `structuredContent` and as JSON text.
async fn list_tickets(args: &Value) -> Value {
    const TOTAL: u64 = 600;
    const PER: u64 = 20;
    let int = |k: &str| args.get(k).and_then(Value::as_u64);
    if let Some(ms) = int("delay_ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let stuck = args.get("stuck").and_then(Value::as_bool) == Some(true);
    let page = match args.get("cursor").and_then(Value::as_str) {
        Some(c) if !stuck => match c.strip_prefix("page-").and_then(|n| n.parse::<u64>().ok()) {
            Some(n) => n,
            None => return json!({"content": [{"type": "text", "text": format!("invalid cursor {c:?}")}], "isError": true}),
        },
        _ => 0,
    };
    if int("fail_at") == Some(page) {
        return json!({"content": [{"type": "text", "text": format!("the ticket database timed out on page {page}")}], "isError": true});
    }
    let tickets: Vec<Value> = (page * PER..((page + 1) * PER).min(TOTAL))
        .map(|i| {
            let subject = if i == 377 { "refund failed twice".to_owned() } else { format!("login problem {i}") };
            json!({"id": format!("T-{i}"), "subject": subject, "status": if i % 3 == 0 { "closed" } else { "open" }, "priority": i % 4})
        })
        .collect();
    let next = if int("loop_at") == Some(page) {
        json!("page-1")
    } else if (page + 1) * PER < TOTAL {
        json!(format!("page-{}", page + 1))
    } else {
        Value::Null
    };
    let body = json!({"tickets": tickets, "total": TOTAL, "next_cursor": next});
    json!({"content": [{"type": "text", "text": body.to_string()}], "structuredContent": body})
}

/// A `SalesAnalysisResult`: light fields for the model, two marked artifacts.
fn analyze_sales_tool() -> Value {
    json!({
        "name": "analyze_sales",
        "description": "Analyze sales data and generate visualizations",
        "inputSchema": {"type": "object", "properties": {"quarter": {"type": "string"}, "year": {"type": "integer"}}},
        "outputSchema": {"type": "object", "properties": {
            "summary": {"type": "string"},
            "total_revenue": {"type": "number"},
            "yoy_growth": {"type": "number"},
            "top_products": {"type": "array", "items": {"type": "string"}},
            "chart_options": {"type": "object", "artifact": true, "stream": true, "stream_id": "sales_chart"},
            "raw_data": {"type": "array", "x-artifact": true, "items": {"type": "object"}}
        }}
    })
}

fn analyze_sales(args: &Value) -> Value {
    let quarter = args.get("quarter").and_then(Value::as_str).unwrap_or("Q4");
    let year = args.get("year").and_then(Value::as_i64).unwrap_or(2024);
    let products = ["Widget Pro", "Gadget Plus", "Service Bundle"];
    let raw_data: Vec<Value> = (0..847).map(|i| json!({"day": i % 92, "product": products[i % 3], "revenue": 1000.5 + i as f64})).collect();
    // An ECharts configuration of about 40 KB.
    let points: Vec<Value> = (0..1800).map(|i| json!([i, (i * 37) % 1000])).collect();
    let chart_options = json!({"title": {"text": format!("{quarter} {year} sales")}, "xAxis": {"type": "value"}, "yAxis": {"type": "value"},
                               "series": [{"type": "line", "data": points}]});
    let structured = json!({
        "summary": format!("{quarter} {year}: Revenue $1,234,567, +15.2% YoY"),
        "total_revenue": 1234567.89,
        "yoy_growth": 15.2,
        "top_products": products,
        "chart_options": chart_options,
        "raw_data": raw_data,
    });
    json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured})
}

/// A join for parallel plans: it takes the branches' results as they came.
fn merge_results_tool() -> Value {
    json!({
        "name": "merge_results",
        "description": "Merge the results of several analyses",
        "inputSchema": {"type": "object", "required": ["branch_outputs"], "properties": {
            "branch_outputs": {"type": "array"}, "total_requests": {"type": "integer"}, "failures": {"type": "array"},
            "label": {"type": "string"}}},
        "outputSchema": {"type": "object", "properties": {
            "summary": {"type": "string"}, "branches": {"type": "integer"}, "rows": {"type": "integer"}, "revenue": {"type": "number"}}}
    })
}

fn merge_results(args: &Value) -> Value {
    let outputs = args.get("branch_outputs").and_then(Value::as_array).cloned().unwrap_or_default();
    let (mut rows, mut revenue) = (0usize, 0f64);
    let mut summaries = Vec::new();
    for o in &outputs {
        if let Some(data) = o.get("raw_data").and_then(Value::as_array) {
            rows += data.len();
            revenue += data.iter().filter_map(|r| r.get("revenue").and_then(Value::as_f64)).sum::<f64>();
        }
        if let Some(s) = o.get("summary").and_then(Value::as_str) {
            summaries.push(s.to_owned());
        }
    }
    let failures = args.get("failures").and_then(Value::as_array).map_or(0, Vec::len);
    let label = args.get("label").and_then(Value::as_str).unwrap_or("merged");
    let summary = format!(
        "{label}: {} branches of {} expected, {failures} failed; {rows} rows, revenue {revenue:.1}",
        outputs.len(),
        args.get("total_requests").map_or_else(|| "?".to_owned(), Value::to_string)
    );
    let structured = json!({"summary": summary, "branches": outputs.len(), "rows": rows, "revenue": revenue, "summaries": summaries,
                            "failures": failures});
    json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured})
}

/// A search whose results are sources: `score` maps onto `relevance_score`.
fn search_docs_tool() -> Value {
    json!({
        "name": "search_docs",
        "description": "Search the knowledge base",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "outputSchema": {"type": "object", "x-produces-sources": true, "properties": {"results": {"type": "array", "items": {
            "type": "object", "properties": {
                "title": {"type": "string"}, "url": {"type": "string"}, "snippet": {"type": "string"},
                "score": {"type": "number", "source_field": "relevance_score"}}}}}}
    })
}

fn search_docs() -> Value {
    let structured = json!({"results": [
        {"title": "Refund policy", "url": "https://docs.example/refunds", "snippet": "Refunds within 30 days", "score": 0.92},
        {"title": "Refund policy (copy)", "url": "https://docs.example/refunds", "snippet": "Refunds within 30 days", "score": 0.90},
        {"title": "Shipping FAQ", "url": "https://docs.example/shipping", "snippet": "Ships in 2 days", "score": 0.71},
        {"title": "Internal memo", "snippet": "No URL", "score": 0.4},
        {"title": "Internal memo", "snippet": "No URL, again", "score": 0.3}
    ]});
    json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured})
}

#[async_trait]
impl Handler for Fixture {
    fn server_info(&self) -> Value {
        if self.stateless {
            return json!({
                "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true}},
                "serverInfo": {"name": "stowage-fixture-stateless", "version": "1"},
            });
        }
        json!({
            "capabilities": {"tools": {"listChanged": true}, "logging": {}, "resources": {}, "prompts": {}, "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}},
            "serverInfo": {"name": "stowage-fixture", "version": "1"},
        })
    }

    fn stateless(&self) -> bool {
        self.stateless
    }

    fn on_notification(&self, method: &str, params: &Value) {
        if method == "notifications/cancelled" {
            let id = params.get("requestId").cloned().unwrap_or(Value::Null);
            self.log(&format!("{method} {id}"));
            self.listeners.lock().unwrap().retain(|(l, _)| *l != id);
        }
    }

    async fn handle(&self, method: &str, params: Value, id: &Value, peer: &Peer) -> Result<Option<Value>, (i64, String)> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        self.log(&format!("{method} {name}"));
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let r = match method {
            "tools/list" if self.ignore_first_tools_list.swap(false, std::sync::atomic::Ordering::SeqCst) => return Ok(None),
            "tools/list" if self.refuse_first_tools_list.swap(false, std::sync::atomic::Ordering::SeqCst) => {
                return Err((-32602, "Received request before initialization was complete".into()));
            }
            "tools/list" if self.stateless => json!({"tools": [
                tool("sample", json!({})),
                tool("touch", json!({})),
                tool("update", json!({"uri": {"type": "string"}})),
            ]}),
            "tools/list" => json!({"tools": [
                tool("echo", json!({"message": {"type": "string"}})),
                tool("get_view_pdf", json!({"bytes": {"type": "integer"}})),
                tool("get_image", json!({})),
                {
                    "name": "get_report_structured",
                    "inputSchema": {"type": "object"},
                    "outputSchema": {"type": "object", "additionalProperties": false, "required": ["title", "pdf"],
                        "properties": {"title": {"type": "string"}, "pdf": {"type": "string"}}},
                },
                {
                    // What FastMCP declares for a tool returning `list[dict]`.
                    "name": "get_rows_structured",
                    "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
                    "outputSchema": {"type": "object", "required": ["result"], "x-fastmcp-wrap-result": true,
                        "properties": {"result": {"type": "array", "items": {"type": "object", "additionalProperties": true}}}},
                },
                tool("slow", json!({"ms": {"type": "integer"}})),
                tool("crash", json!({})),
                tool("hang", json!({})),
                tool("malformed", json!({})),
                tool("sample", json!({})),
                tool("pid", json!({})),
                tool("log", json!({"message": {"type": "string"}})),
                tool("log_later", json!({"message": {"type": "string"}, "ms": {"type": "integer"}})),
                tool("roots", json!({})),
                tool("elicit_url", json!({})),
                tool("progress_burst", json!({"n": {"type": "integer"}})),
                tool("not_object", json!({"bytes": {"type": "integer"}})),
                tool("stderr_noise", json!({"bytes": {"type": "integer"}})),
                tool("env", json!({})),
                tool("list_storm", json!({"n": {"type": "integer"}})),
                tool("heavy_log", json!({})),
                tool("heavy_progress", json!({})),
                tool("heavy_error", json!({})),
                tool("odd_media", json!({})),
                {"name": "task_image", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"}},
                analyze_sales_tool(),
                search_docs_tool(),
                tool("tool_error", json!({})),
                tool("edit_note", json!({"text": {"type": "string"}})),
                tool("get_links", json!({})),
                tool("rendezvous", json!({"key": {"type": "string"}, "n": {"type": "integer"}})),
                merge_results_tool(),
                tool("list_tickets", json!({
                    "cursor": {"type": "string"}, "status": {"type": "string"}, "loop_at": {"type": "integer"},
                    "fail_at": {"type": "integer"}, "stuck": {"type": "boolean"}, "delay_ms": {"type": "integer"},
                })),
            ]}),
            "tools/call" => match name {
                "list_tickets" => list_tickets(&args).await,
                "echo" => text_result(args.get("message").and_then(Value::as_str).unwrap_or("").to_owned()),
                "get_view_pdf" => {
                    let size = args.get("bytes").and_then(Value::as_u64).unwrap_or(375_000) as usize;
                    if args.get("prepare").and_then(Value::as_bool) == Some(true) {
                        // The whole answer, ready to write: a benchmark then measures from the
                        // moment the upstream has its result, not the fixture making, encoding
                        // and copying a PDF.
                        let result = self.view_pdf(size);
                        let mut line = Vec::with_capacity(result.len() + 64);
                        line.extend_from_slice(LINE_HEAD.as_bytes());
                        line.extend_from_slice(&[b' '; ID_SLOT]);
                        line.extend_from_slice(br#","result":"#);
                        line.extend_from_slice(result.as_bytes());
                        line.push(b'}');
                        let len = line.len();
                        self.ready_lines.lock().unwrap().insert(size, line);
                        return Ok(Some(text_result(format!("prepared {len} bytes"))));
                    }
                    let id_text = id.to_string();
                    let ready = self.ready_lines.lock().unwrap().remove(&size).filter(|_| id_text.len() <= ID_SLOT);
                    let line = match ready {
                        Some(mut line) => {
                            let at = LINE_HEAD.len();
                            line[at..at + id_text.len()].copy_from_slice(id_text.as_bytes());
                            line
                        }
                        None => {
                            let result = self.view_pdf(size);
                            let mut line = Vec::with_capacity(result.len() + 64);
                            line.extend_from_slice(format!(r#"{LINE_HEAD}{id_text},"result":"#).as_bytes());
                            line.extend_from_slice(result.as_bytes());
                            line.push(b'}');
                            line
                        }
                    };
                    peer.send_raw(line);
                    return Ok(None);
                }
                "get_image" => {
                    json!({"content": [{"type": "image", "mimeType": "image/png", "data": STANDARD.encode(samples::png(64, 48))}]})
                }
                "get_report_structured" => {
                    let sc = json!({"title": "Q3", "pdf": STANDARD.encode(samples::pdf(50_000, "Q3"))});
                    json!({"content": [{"type": "text", "text": sc.to_string()}], "structuredContent": sc})
                }
                "get_rows_structured" => {
                    let n = args.get("n").and_then(Value::as_u64).unwrap_or(2000);
                    let rows: Vec<Value> =
                        (0..n).map(|i| json!({"id": i, "name": format!("row {i}"), "note": "lorem ipsum dolor"})).collect();
                    json!({"content": [{"type": "text", "text": Value::Array(rows.clone()).to_string()}], "structuredContent": {"result": rows}})
                }
                "slow" => {
                    let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(500);
                    let token = params.pointer("/_meta/progressToken").cloned();
                    let steps = 5;
                    for i in 1..=steps {
                        tokio::time::sleep(Duration::from_millis(ms / steps)).await;
                        if let Some(t) = &token {
                            peer.notify("notifications/progress", json!({"progressToken": t, "progress": i, "total": steps}));
                        }
                    }
                    text_result(format!("slept {ms} ms"))
                }
                "crash" => {
                    self.log("crashing");
                    std::process::exit(3);
                }
                "hang" => return Ok(None),
                "malformed" => {
                    peer.send_raw(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","#).into_bytes());
                    return Ok(None);
                }
                "touch" if self.stateless => {
                    let n = self.announce(peer, "notifications/tools/list_changed", json!({}), |f| f["toolsListChanged"] == true);
                    text_result(format!("told {n} listener(s)"))
                }
                "update" if self.stateless => {
                    let uri = args.get("uri").and_then(Value::as_str).unwrap_or("").to_owned();
                    let wants = |f: &Value| f["resourceSubscriptions"].as_array().is_some_and(|u| u.iter().any(|x| x == uri.as_str()));
                    let n = self.announce(peer, "notifications/resources/updated", json!({"uri": uri}), wants);
                    text_result(format!("told {n} listener(s)"))
                }
                "sample" if self.stateless => {
                    let req = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "say hi"}}], "maxTokens": 10});
                    match params.pointer("/inputResponses/ask-1/content/text").and_then(Value::as_str) {
                        Some(said) if params.get("requestState") == Some(&json!("fixture-state")) => {
                            text_result(format!("client said: {said}"))
                        }
                        Some(_) => return Err((code::INVALID_PARAMS, "requestState was not echoed".into())),
                        None => json!({
                            "resultType": "input_required",
                            "inputRequests": {"ask-1": {"method": "sampling/createMessage", "params": req}},
                            "requestState": "fixture-state",
                        }),
                    }
                }
                "sample" => {
                    let req = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "say hi"}}], "maxTokens": 10});
                    match peer.request("sampling/createMessage", req).await {
                        Ok(r) => text_result(format!("client said: {}", r.pointer("/content/text").and_then(Value::as_str).unwrap_or("?"))),
                        Err(e) => json!({"content": [{"type": "text", "text": format!("sampling failed: {e}")}], "isError": true}),
                    }
                }
                "pid" => text_result(std::process::id().to_string()),
                "log" => {
                    let message = args.get("message").and_then(Value::as_str).unwrap_or("hello").to_owned();
                    peer.notify("notifications/message", json!({"level": "info", "logger": "fixture", "data": message}));
                    text_result(format!("logged {message}"))
                }
                "log_later" => {
                    let message = args.get("message").and_then(Value::as_str).unwrap_or("later").to_owned();
                    let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(200);
                    let (peer, data) = (peer.clone(), message.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        peer.notify("notifications/message", json!({"level": "info", "logger": "fixture", "data": data}));
                    });
                    text_result(format!("will log {message} in {ms} ms"))
                }
                "roots" => match peer.request("roots/list", json!({})).await {
                    Ok(r) => text_result(format!("roots: {}", r["roots"])),
                    Err(e) => json!({"content": [{"type": "text", "text": format!("roots/list failed: {e}")}], "isError": true}),
                },
                "elicit_url" => {
                    let req = json!({"mode": "url", "elicitationId": "fixture-elicitation-1", "url": "https://example.invalid/consent", "message": "Open the page to consent"});
                    match peer.request("elicitation/create", req).await {
                        Ok(r) => {
                            peer.notify("notifications/elicitation/complete", json!({"elicitationId": "fixture-elicitation-1"}));
                            text_result(format!("elicitation: {}", r["action"]))
                        }
                        Err(e) => json!({"content": [{"type": "text", "text": format!("elicitation failed: {e}")}], "isError": true}),
                    }
                }
                "progress_burst" => {
                    let n = args.get("n").and_then(Value::as_u64).unwrap_or(3);
                    if let Some(t) = params.pointer("/_meta/progressToken") {
                        for i in 1..=n {
                            peer.notify("notifications/progress", json!({"progressToken": t, "progress": i, "total": n}));
                        }
                    }
                    text_result(format!("sent {n}"))
                }
                "not_object" => {
                    let n = args.get("bytes").and_then(Value::as_u64).unwrap_or(100_000) as usize;
                    Value::String(STANDARD.encode(vec![7u8; n * 3 / 4]))
                }
                "heavy_log" => {
                    let pdf = STANDARD.encode(samples::pdf(50_000, "Log"));
                    peer.notify("notifications/message", json!({"level": "debug", "logger": "fixture", "data": {"attachment": pdf}}));
                    text_result("logged a pdf")
                }
                "heavy_progress" => {
                    let pdf = STANDARD.encode(samples::pdf(50_000, "Progress"));
                    if let Some(t) = params.pointer("/_meta/progressToken") {
                        peer.notify("notifications/progress", json!({"progressToken": t, "progress": 1, "total": 2, "message": pdf}));
                    }
                    text_result("progressed with a pdf")
                }
                "heavy_error" => {
                    let pdf = STANDARD.encode(samples::pdf(50_000, "Error"));
                    let line = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "failed, report attached", "data": {"report": pdf}}});
                    peer.send_raw(line.to_string().into_bytes());
                    return Ok(None);
                }
                "odd_media" => {
                    // A PNG claimed as a list of types, and an HTML page claimed with an overlong
                    // type: what a hostile or sloppy upstream sends to get active content shown
                    // inline at the gateway's origin.
                    let page =
                        format!("<!DOCTYPE html><html><body><script>alert(document.cookie)</script>{}</body></html>", " ".repeat(4096));
                    let overlong = format!("text/plain; x={}", "a".repeat(300));
                    json!({"content": [
                        {"type": "image", "mimeType": "image/png,text/html", "data": STANDARD.encode(samples::png(300, 200))},
                        {"type": "resource", "resource": {"uri": "file:///page.txt", "mimeType": overlong, "blob": STANDARD.encode(page)}},
                    ]})
                }
                "list_storm" => {
                    let n = args.get("n").and_then(Value::as_u64).unwrap_or(100);
                    for _ in 0..n {
                        peer.notify("notifications/tools/list_changed", json!({}));
                    }
                    text_result(format!("announced {n} list changes"))
                }
                "env" => {
                    let mut names: Vec<String> = std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
                    names.sort();
                    text_result(names.join(" "))
                }
                "stderr_noise" => {
                    let n = args.get("bytes").and_then(Value::as_u64).unwrap_or(1 << 20) as usize;
                    let mut err = std::io::stderr().lock();
                    let _ = err.write_all(b"not utf-8: \xff\xfe\xfd\n");
                    let _ = err.write_all(&vec![b'e'; n]);
                    let _ = err.write_all(b"\nafter the long line\n");
                    let _ = err.flush();
                    text_result(format!("wrote {n} bytes to stderr"))
                }
                "task_image" if params.get("task").is_some() => {
                    let id = format!("task-{}", self.tasks.lock().unwrap().len() + 1);
                    self.tasks.lock().unwrap().insert(id.clone(), false);
                    json!({"task": {"taskId": id, "status": "working", "createdAt": "2026-11-23T00:00:00Z", "ttl": 60000, "pollInterval": 50}})
                }
                "task_image" => image_result(),
                "analyze_sales" => {
                    if let Some(t) = params.pointer("/_meta/progressToken") {
                        let partial =
                            json!({"stream_id": "sales_chart", "seq": 0, "chunk": {"title": {"text": "Q4 2024 sales"}}, "done": false});
                        peer.notify(
                            "notifications/progress",
                            json!({"progressToken": t, "progress": 1, "_meta": {"io.stowage/artifact_chunk": partial}}),
                        );
                    }
                    analyze_sales(&args)
                }
                "search_docs" => search_docs(),
                "tool_error" => json!({"content": [{"type": "text", "text": "the warehouse is closed"}], "isError": true}),
                "get_links" => json!({"content": [
                    {"type": "text", "text": "three documents"},
                    {"type": "resource_link", "uri": "fx://docs/note.txt", "name": "note.txt", "mimeType": "text/plain", "size": 28},
                    {"type": "resource_link", "uri": "fx://docs/report.pdf", "name": "report.pdf", "mimeType": "application/pdf", "size": 200_000},
                    {"type": "resource_link", "uri": "fx://docs/gone.txt", "name": "gone.txt", "mimeType": "text/plain", "size": 10},
                ]}),
                "edit_note" => {
                    let text = args.get("text").and_then(Value::as_str).unwrap_or("").to_owned();
                    *self.note.lock().unwrap() = Some(text);
                    peer.notify("notifications/resources/updated", json!({"uri": "fx://docs/note.txt"}));
                    text_result("edited".to_owned())
                }
                "rendezvous" => {
                    let key = args.get("key").and_then(Value::as_str).unwrap_or("").to_owned();
                    let n = args.get("n").and_then(Value::as_u64).unwrap_or(2);
                    *self.rendezvous.lock().unwrap().entry(key.clone()).or_insert(0) += 1;
                    let deadline = std::time::Instant::now() + Duration::from_secs(5);
                    loop {
                        let arrived = self.rendezvous.lock().unwrap().get(&key).copied().unwrap_or(0);
                        if arrived >= n {
                            let met = json!({"key": key, "met": n});
                            break json!({"content": [{"type": "text", "text": format!("{key}: all {n} calls met")}], "structuredContent": met});
                        }
                        if std::time::Instant::now() > deadline {
                            let text = format!("{key}: only {arrived} of {n} calls arrived within 5 s: they were not run at once");
                            break json!({"content": [{"type": "text", "text": text}], "isError": true});
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                "merge_results" => merge_results(&args),
                other => return Err((code::INVALID_PARAMS, format!("unknown tool: {other}"))),
            },
            "tasks/get" | "tasks/result" => {
                let id = params.get("taskId").and_then(Value::as_str).unwrap_or("").to_owned();
                if !self.tasks.lock().unwrap().contains_key(&id) {
                    return Err((code::INVALID_PARAMS, format!("unknown task {id}")));
                }
                self.tasks.lock().unwrap().insert(id.clone(), true);
                if method == "tasks/get" {
                    json!({"taskId": id, "status": "completed", "createdAt": "2026-11-23T00:00:00Z", "ttl": 60000})
                } else {
                    image_result()
                }
            }
            "tasks/list" => {
                let tasks: Vec<Value> = self.tasks.lock().unwrap().keys().map(|id| json!({"taskId": id, "status": "completed"})).collect();
                json!({"tasks": tasks})
            }
            "logging/setLevel" => json!({}),
            // It declares `resources.subscribe`; updates are sent by edit_note either way.
            "resources/subscribe" | "resources/unsubscribe" => json!({}),
            "resources/list" => {
                let docs = DOCS.iter().map(|(uri, mime)| json!({"uri": uri, "name": uri.rsplit('/').next(), "mimeType": mime}));
                let many =
                    (0..self.many).map(|i| json!({"uri": format!("fx://many/{i}"), "name": format!("item {i}"), "mimeType": "text/plain"}));
                json!({"resources": docs.chain(many).collect::<Vec<_>>()})
            }
            // A read that never answers (an upstream timing out on a large read).
            "resources/read" if params.get("uri").and_then(Value::as_str) == Some("fx://docs/hang.bin") => return Ok(None),
            "resources/read" if params.get("uri").and_then(Value::as_str).is_some_and(|u| u.starts_with("fx://blob/")) => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
                let Some(size) = uri.strip_prefix("fx://blob/").and_then(|n| n.parse::<usize>().ok()).filter(|n| *n <= 200 << 20) else {
                    return Err((code::RESOURCE_NOT_FOUND, format!("resource not found: {uri} (fx://blob/<bytes>, at most 200 MiB)")));
                };
                let blob =
                    self.blobs.lock().unwrap().entry(size).or_insert_with(|| Arc::new(STANDARD.encode(samples::pdf(size, "Blob")))).clone();
                // Blobs of a size never change: they say so (`ttlMs`), so a gateway may cache them.
                json!({"contents": [{"uri": uri, "mimeType": "application/pdf", "blob": blob.as_str()}], "ttlMs": 600_000})
            }
            "resources/read" => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
                let Some(&(_, mime)) = DOCS.iter().find(|(u, _)| *u == uri) else {
                    return Err((code::RESOURCE_NOT_FOUND, format!("resource not found: {uri}")));
                };
                let entry = match uri {
                    "fx://docs/report.pdf" => json!({"blob": STANDARD.encode(samples::pdf(200_000, "Fixture report"))}),
                    "fx://docs/log.txt" => {
                        let mut log = String::new();
                        for i in 0.. {
                            if log.len() >= 17_000 {
                                break;
                            }
                            log.push_str(&format!(
                                "2026-11-23T10:{:02}:{:02}Z request {i} served in {} ms\n",
                                (i / 60) % 60,
                                i % 60,
                                i % 97
                            ));
                        }
                        log.truncate(17_000);
                        json!({"text": log})
                    }
                    "fx://docs/note.txt" => {
                        let note = self.note.lock().unwrap().clone();
                        json!({"text": note.unwrap_or_else(|| "the quarter closed on Friday".to_owned())})
                    }
                    "fx://docs/dot.png" => json!({"blob": STANDARD.encode(samples::png(2, 2))}),
                    _ => json!({"blob": "this is %% not base64"}),
                };
                let mut entry = entry;
                entry["uri"] = json!(uri);
                entry["mimeType"] = json!(mime);
                // The report and the note state a lifetime (the note's ends early with an
                // update notification); the log and the dot state none, so a gateway reads
                // them through.
                match uri {
                    "fx://docs/report.pdf" | "fx://docs/note.txt" => json!({"contents": [entry], "ttlMs": 600_000}),
                    _ => json!({"contents": [entry]}),
                }
            }
            "prompts/list" => json!({"prompts": [{"name": "chart_prompt", "description": "a chart to discuss"}]}),
            "prompts/get" => json!({
                "description": "a chart to discuss",
                "messages": [
                    {"role": "user", "content": {"type": "text", "text": "What does this chart say?"}},
                    {"role": "user", "content": {"type": "image", "mimeType": "image/png", "data": STANDARD.encode(samples::png(600, 600))}},
                ],
            }),
            "resources/templates/list" if self.no_templates => return Err((code::METHOD_NOT_FOUND, format!("method not found: {method}"))),
            "resources/templates/list" => {
                json!({"resourceTemplates": [{"uriTemplate": "fx://blob/{bytes}", "name": "blob", "mimeType": "application/pdf"}]})
            }
            "subscriptions/listen" if self.stateless => {
                let filter = params.get("notifications").cloned().unwrap_or(json!({}));
                let meta = json!({"io.modelcontextprotocol/subscriptionId": id});
                peer.notify("notifications/subscriptions/acknowledged", json!({"notifications": filter, "_meta": meta}));
                self.listeners.lock().unwrap().push((id.clone(), filter));
                return Ok(None); // the stream stays open
            }
            _ => return Err((code::METHOD_NOT_FOUND, format!("method not found: {method}"))),
        };
        Ok(Some(r))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let log = std::env::var_os("STOWAGE_FIXTURE_LOG")
        .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok())
        .map(std::sync::Mutex::new);
    let stateless = std::env::var("STOWAGE_FIXTURE_STATELESS").is_ok_and(|v| v == "1");
    let fixture = Arc::new(Fixture {
        log,
        stateless,
        listeners: Default::default(),
        view_pdfs: Default::default(),
        ready_lines: Default::default(),
        tasks: Default::default(),
        note: Default::default(),
        blobs: Default::default(),
        many: std::env::var("STOWAGE_FIXTURE_RESOURCES").ok().and_then(|v| v.parse().ok()).unwrap_or(0),
        ignore_first_tools_list: std::env::var_os("STOWAGE_FIXTURE_IGNORE_FIRST_TOOLS_LIST").is_some().into(),
        refuse_first_tools_list: std::env::var_os("STOWAGE_FIXTURE_REFUSE_FIRST_TOOLS_LIST").is_some().into(),
        no_templates: std::env::var("STOWAGE_FIXTURE_NO_TEMPLATES").is_ok_and(|v| v == "1"),
        rendezvous: Default::default(),
    });
    fixture.log(&format!("started pid {}", std::process::id()));
    eprintln!("stowage-fixture: serving on stdio");
    serve(tokio::io::stdin(), tokio::io::stdout(), fixture).await;
}
