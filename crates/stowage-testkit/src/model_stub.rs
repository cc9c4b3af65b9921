//! A model server of our own for the agent's and the real hosts' tests: it speaks OpenAI Chat
//! Completions (`POST /v1/chat/completions`), the OpenAI Responses API (`POST /v1/responses`,
//! what Codex CLI speaks) and Anthropic Messages (`POST /v1/messages`, with
//! `/v1/messages/count_tokens`, what Claude Code speaks) over real HTTP, plays back a scripted
//! conversation one [`Turn`] per request, or asks a [`Plan`] for each turn from what the
//! request holds (a host's tool results decide the next call), streams like the real APIs
//! (`data:` chunks ending in `[DONE]`; `message_start` … `message_stop` events;
//! `response.created` … `response.completed` events; tool-call arguments in fragments), and
//! records every request body, so tests assert on exactly what the model was sent.
//!
//! No model API is reachable from the test machines, and a mock inside the client would not
//! exercise the wire formats: this is the real protocol, scripted.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Turn {
    /// Answer text, streamed in small pieces.
    Text(String),
    /// Tool calls (name, arguments), optionally after some text (the thought).
    Tools { thought: String, calls: Vec<(String, Value)> },
    /// Tool calls whose arguments are this raw text, valid JSON or not (what local models
    /// send).
    RawTools { thought: String, calls: Vec<(String, String)> },
    /// The turn, stopped by the token limit (`finish_reason: "length"`, `stop_reason:
    /// "max_tokens"`).
    Cut(Box<Turn>),
    /// The turn as one plain JSON answer, even to a streaming request.
    Whole(Box<Turn>),
    /// An HTTP error with this body.
    Status(u16, String),
    /// An HTTP error with a `Retry-After` header of this value.
    RetryAfter(u16, String),
    /// This body, as this content type (garbage, a broken stream).
    Raw { content_type: String, body: String },
    /// Accept the request and never answer (a timeout).
    Hang,
    /// Stream text forever, never ending the answer.
    Endless,
    /// Wait, then play the turn.
    After(Duration, Box<Turn>),
    /// Stream this text, then break the connection before the end of the answer.
    DropAfter(String),
    /// Tool calls streamed as Gemini's OpenAI-compatible endpoint sends them: deltas without
    /// `index`. `ids: true`: each call whole in one delta under its own `id`; `ids: false`: a
    /// first delta with the call's name, then its argument fragments, none with id or index.
    /// (Anthropic always numbers its blocks: there this is a plain tool turn.)
    Unindexed { calls: Vec<(String, Value)>, ids: bool },
}

impl Turn {
    pub fn tool(name: &str, args: Value) -> Turn {
        Turn::Tools { thought: String::new(), calls: vec![(name.to_owned(), args)] }
    }
}

/// Picks each turn from the request a host sent (its path and body): how a test plays a model
/// whose next call depends on what the last tool returned.
pub type Plan = Arc<dyn Fn(&Recorded) -> Turn + Send + Sync>;

/// A reply to write, in any format.
struct Reply {
    text: String,
    calls: Vec<(String, String)>,
    cut: bool,
    drop: bool,
}

impl Reply {
    fn of(turn: Turn) -> Reply {
        match turn {
            Turn::Text(t) => Reply { text: t, calls: Vec::new(), cut: false, drop: false },
            Turn::Tools { thought, calls } => {
                Reply { text: thought, calls: calls.into_iter().map(|(n, a)| (n, a.to_string())).collect(), cut: false, drop: false }
            }
            Turn::RawTools { thought, calls } => Reply { text: thought, calls, cut: false, drop: false },
            Turn::Cut(t) => Reply { cut: true, ..Reply::of(*t) },
            Turn::Whole(t) | Turn::After(_, t) => Reply::of(*t),
            Turn::DropAfter(t) => Reply { text: t, calls: Vec::new(), cut: false, drop: true },
            Turn::Unindexed { calls, .. } => Reply::of(Turn::Tools { thought: String::new(), calls }),
            other => unreachable!("not a reply: {other:?}"),
        }
    }
}

/// One request the stub received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    /// The raw body, as sent.
    pub body: String,
}

impl Recorded {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON request body")
    }
}

#[derive(Default)]
struct Inner {
    script: Mutex<VecDeque<Turn>>,
    /// Scripts for concurrent conversations: the first whose key the request body contains
    /// answers it.
    keyed: Mutex<Vec<(String, VecDeque<Turn>)>>,
    requests: Mutex<Vec<Recorded>>,
    /// What `GET /v1/models` lists.
    models: Mutex<Vec<String>>,
    /// When set, every turn comes from it instead of the script.
    plan: Mutex<Option<Plan>>,
    /// Tool-call ids are unique across the stub's answers, as the real APIs' are (a host keys
    /// its conversation on them).
    next_call_id: std::sync::atomic::AtomicU64,
}

impl Inner {
    fn call_id(&self) -> u64 {
        self.next_call_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// A running stub; it stops when dropped.
pub struct ModelStub {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ModelStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ModelStub {
    /// Starts the stub on a free loopback port with `script`.
    pub async fn start(script: Vec<Turn>) -> ModelStub {
        let inner =
            Arc::new(Inner { script: Mutex::new(script.into()), models: Mutex::new(vec!["stub-model".into()]), ..Default::default() });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/v1/responses", post(responses))
            .route("/v1/models", get(models))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("an address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ModelStub { addr, inner, task }
    }

    /// Starts the stub with a plan: every turn is `plan`'s answer to the request.
    pub async fn planned(plan: Plan) -> ModelStub {
        let stub = ModelStub::start(Vec::new()).await;
        *stub.inner.plan.lock().unwrap() = Some(plan);
        stub
    }

    /// `http://127.0.0.1:PORT`: what `ANTHROPIC_BASE_URL` takes.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`: what `agent.base_url` takes.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Adds a script for the requests whose body contains `key` (e.g. a question only one of
    /// several concurrent runs asks), so concurrent runs each get their own turns.
    pub fn push_keyed(&self, key: &str, turns: impl IntoIterator<Item = Turn>) {
        self.inner.keyed.lock().unwrap().push((key.to_owned(), turns.into_iter().collect()));
    }

    /// Adds turns to the script.
    pub fn push(&self, turns: impl IntoIterator<Item = Turn>) {
        self.inner.script.lock().unwrap().extend(turns);
    }

    /// The completion requests received so far (not `GET /models`), in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// What `GET /v1/models` lists from now on.
    pub fn set_models(&self, models: &[&str]) {
        *self.inner.models.lock().unwrap() = models.iter().map(|m| (*m).to_owned()).collect();
    }

    /// Turns not played yet.
    pub fn remaining(&self) -> usize {
        self.inner.script.lock().unwrap().len()
    }

    /// Every way the requests received so far break their API's published rules
    /// ([`rule_violations`]), each naming the request by its position.
    pub fn violations(&self) -> Vec<String> {
        self.requests()
            .iter()
            .enumerate()
            .flat_map(|(i, r)| match serde_json::from_str::<Value>(&r.body) {
                Ok(body) => rule_violations(&r.path, &body).into_iter().map(|v| format!("request {i} ({}): {v}", r.path)).collect(),
                Err(e) => vec![format!("request {i} ({}): the body is not JSON: {e}", r.path)],
            })
            .collect()
    }
}

/// How a request body breaks the published rules of the API its path names, one line each
/// (none: the API would take it).
///
/// Anthropic Messages (`/v1/messages`): `model` and `max_tokens` are set; `messages` is not
/// empty, starts with a user turn, alternates user and assistant strictly, and ends with a user
/// turn; no content is empty and no text block is blank; `tool_use` blocks appear only in
/// assistant turns and only when `tools` are given; each turn of
/// `tool_use` blocks is answered by the next turn, a user turn whose `tool_result` blocks come
/// first and answer exactly those ids; a `tool_result` answers a `tool_use` of the turn just
/// before it.
///
/// OpenAI Chat Completions (`/v1/chat/completions`): `model` is set; `messages` is not empty;
/// each role is `system`, `developer`, `user`, `assistant` or `tool`; a user message has
/// content; an assistant message has content or `tool_calls`, whose arguments are a JSON
/// string; a `tool` message follows an assistant message with `tool_calls` (or another `tool`
/// message answering it) and names one of its calls, and every call is answered before the
/// next message that is not a `tool` message; `tool_calls` appear only when `tools` are given.
pub fn rule_violations(path: &str, body: &Value) -> Vec<String> {
    if path.ends_with("/messages") { anthropic_rules(body) } else { openai_rules(body) }
}

fn blank(v: &Value) -> bool {
    v.as_str().is_none_or(|s| s.trim().is_empty())
}

fn anthropic_rules(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if body["model"].as_str().is_none_or(str::is_empty) {
        out.push("no model".to_owned());
    }
    if !body["max_tokens"].is_u64() {
        out.push("no max_tokens".to_owned());
    }
    let tools: Vec<&str> = body["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    let Some(messages) = body["messages"].as_array().filter(|m| !m.is_empty()) else {
        out.push("messages is empty".to_owned());
        return out;
    };
    // The tool_use ids of the assistant turn just before, waiting for their results.
    let mut asked: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if role != expected {
            out.push(format!("message {i} is {role:?}, not {expected}: turns must alternate, starting with the user"));
        }
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) => {
                if s.trim().is_empty() {
                    out.push(format!("message {i} has empty content"));
                }
                vec![json!({"type": "text", "text": s})]
            }
            Value::Array(b) if b.is_empty() => {
                out.push(format!("message {i} has empty content"));
                Vec::new()
            }
            Value::Array(b) => b.clone(),
            other => {
                out.push(format!("message {i} has content {other}"));
                Vec::new()
            }
        };
        let mut results: Vec<String> = Vec::new();
        let mut seen_other = false;
        let mut uses: Vec<String> = Vec::new();
        for b in &blocks {
            match b["type"].as_str().unwrap_or("") {
                "text" => {
                    if blank(&b["text"]) {
                        out.push(format!("message {i} has a blank text block"));
                    }
                    seen_other = true;
                }
                "tool_use" => {
                    if role != "assistant" {
                        out.push(format!("message {i}: tool_use in a {role} turn"));
                    }
                    // (A name the request's tools do not list is what the model itself called: the
                    // API takes it back in the history, and the model is told the tool is unknown.)
                    let name = b["name"].as_str().unwrap_or("");
                    if tools.is_empty() {
                        out.push(format!("message {i}: tool_use of {name} in a request without tools"));
                    }
                    if !b["input"].is_object() {
                        out.push(format!("message {i}: the input of tool_use {name} is not an object"));
                    }
                    uses.push(b["id"].as_str().unwrap_or("").to_owned());
                }
                "tool_result" => {
                    if role != "user" {
                        out.push(format!("message {i}: tool_result in a {role} turn"));
                    }
                    if seen_other {
                        out.push(format!("message {i}: a tool_result after other content (tool results must come first)"));
                    }
                    if tools.is_empty() {
                        out.push(format!("message {i}: tool_result in a request without tools"));
                    }
                    match &b["content"] {
                        Value::String(s) if s.trim().is_empty() => out.push(format!("message {i}: a tool_result with empty content")),
                        Value::Array(inner) => {
                            if inner.is_empty() {
                                out.push(format!("message {i}: a tool_result with empty content"));
                            }
                            for ib in inner.iter().filter(|ib| ib["type"] == "text") {
                                if blank(&ib["text"]) {
                                    out.push(format!("message {i}: a blank text block in a tool_result"));
                                }
                            }
                        }
                        _ => {}
                    }
                    results.push(b["tool_use_id"].as_str().unwrap_or("").to_owned());
                }
                "image" => seen_other = true,
                other => out.push(format!("message {i}: a block of type {other:?}")),
            }
        }
        for r in &results {
            if !asked.contains(r) {
                out.push(format!("message {i}: tool_result for {r}, which the turn before did not ask for"));
            }
        }
        for a in &asked {
            if !results.contains(a) {
                out.push(format!("message {i}: no tool_result for tool_use {a} of the turn before"));
            }
        }
        asked = uses;
    }
    if !asked.is_empty() {
        out.push("the last turn asks for tools that no turn answers".to_owned());
    }
    if messages.last().is_some_and(|m| m["role"] != "user") {
        out.push("the last message is not the user's".to_owned());
    }
    out
}

fn openai_rules(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if body["model"].as_str().is_none_or(str::is_empty) {
        out.push("no model".to_owned());
    }
    let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let Some(messages) = body["messages"].as_array().filter(|m| !m.is_empty()) else {
        out.push("messages is empty".to_owned());
        return out;
    };
    // Calls of the last assistant message not answered yet.
    let mut open: Vec<String> = Vec::new();
    // Whether tool messages may come now (after an assistant message with tool_calls).
    let mut in_tools = false;
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role != "tool" {
            if !open.is_empty() {
                out.push(format!("message {i}: the calls {open:?} were not answered by tool messages before it"));
                open.clear();
            }
            in_tools = false;
        }
        match role {
            "system" | "developer" => {}
            "user" => {
                let empty = match &m["content"] {
                    Value::String(s) => s.trim().is_empty(),
                    Value::Array(parts) => parts.is_empty(),
                    _ => true,
                };
                if empty {
                    out.push(format!("message {i}: a user message without content"));
                }
            }
            "assistant" => {
                let calls = m["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default();
                if blank(&m["content"]) && calls.is_empty() {
                    out.push(format!("message {i}: an assistant message with neither content nor tool_calls"));
                }
                if !calls.is_empty() && !has_tools {
                    out.push(format!("message {i}: tool_calls in a request without tools"));
                }
                for c in calls {
                    let args = c.pointer("/function/arguments").and_then(Value::as_str);
                    if args.is_none_or(|a| serde_json::from_str::<Value>(a).is_err()) {
                        out.push(format!("message {i}: the arguments of call {} are not a JSON string", c["id"]));
                    }
                    open.push(c["id"].as_str().unwrap_or("").to_owned());
                }
                in_tools = !calls.is_empty();
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                if !in_tools {
                    out.push(format!("message {i}: a tool message that does not follow an assistant message with tool_calls"));
                } else if let Some(at) = open.iter().position(|o| o == id) {
                    open.remove(at);
                } else {
                    out.push(format!("message {i}: a tool message for {id}, which the assistant message did not call"));
                }
            }
            other => out.push(format!("message {i}: role {other:?}")),
        }
    }
    if !open.is_empty() {
        out.push(format!("the calls {open:?} were not answered"));
    }
    out
}

async fn models(State(inner): State<Arc<Inner>>) -> impl IntoResponse {
    // Both APIs' shapes at once: OpenAI's `object`/`id`, Anthropic's `type`/`display_name`.
    let data: Vec<Value> = inner
        .models
        .lock()
        .unwrap()
        .iter()
        .map(|m| json!({"id": m, "object": "model", "type": "model", "display_name": m, "created_at": "2026-01-01T00:00:00Z"}))
        .collect();
    let last = data.last().and_then(|m| m.get("id")).cloned().unwrap_or(Value::Null);
    let first = data.first().and_then(|m| m.get("id")).cloned().unwrap_or(Value::Null);
    axum::Json(json!({"object": "list", "data": data, "has_more": false, "first_id": first, "last_id": last}))
}

/// `POST /v1/messages/count_tokens`: a rough count (a quarter of the body's bytes), as a host
/// only uses it to decide when to compact.
async fn count_tokens(body: Bytes) -> impl IntoResponse {
    axum::Json(json!({"input_tokens": body.len() / 4}))
}

fn next_turn(inner: &Inner, path: &str, headers: HeaderMap, body: &Bytes) -> Turn {
    let text = String::from_utf8_lossy(body).into_owned();
    let recorded = Recorded { path: path.to_owned(), headers, body: text.clone() };
    let plan = inner.plan.lock().unwrap().clone();
    if let Some(plan) = plan {
        let turn = plan(&recorded);
        inner.requests.lock().unwrap().push(recorded);
        return turn;
    }
    let keyed = inner.keyed.lock().unwrap().iter_mut().find(|(k, _)| text.contains(k.as_str())).map(|(_, s)| s.pop_front());
    inner.requests.lock().unwrap().push(recorded);
    if let Some(turn) = keyed {
        return turn.unwrap_or_else(|| Turn::Status(500, "the model stub's keyed script is exhausted".into()));
    }
    inner.script.lock().unwrap().pop_front().unwrap_or_else(|| Turn::Status(500, "the model stub's script is exhausted".into()))
}

/// Pieces of `s` of at most `n` characters (fragments like a real stream's).
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

/// Where a streamed response is written, counting its events.
struct Tx {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    sent: std::sync::atomic::AtomicUsize,
}

impl Tx {
    async fn raw(&self, item: Result<Bytes, std::io::Error>) -> bool {
        self.tx.send(item).await.is_ok()
    }
}

/// A streamed `text/event-stream` response written by `write`.
fn sse<F, Fut>(write: F) -> Response
where
    F: FnOnce(Tx) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(write(Tx { tx, sent: Default::default() }));
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    Response::builder().header(header::CONTENT_TYPE, "text/event-stream").body(body).expect("a response")
}

async fn send(tx: &Tx, event: Option<&str>, data: &str) {
    let text = match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    };
    tx.raw(Ok(Bytes::from(text))).await;
    // A pause between events, so the client really reads a stream and not one buffer (but
    // only for the first few hundred: a reply of 10,000 tool calls streams at once).
    if tx.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 300 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn break_connection(tx: &Tx) {
    tx.raw(Err(std::io::Error::other("the stub drops the stream on purpose"))).await;
}

/// Turns that are no reply: an error, a hang, a raw body, an endless stream.
async fn special(turn: &Turn, openai: bool) -> Option<Response> {
    match turn {
        Turn::Status(code, body) => Some(
            (StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), axum::Json(json!({"error": {"message": body}})))
                .into_response(),
        ),
        Turn::RetryAfter(code, after) => Some(
            (
                StatusCode::from_u16(*code).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
                [(header::RETRY_AFTER, after.clone())],
                axum::Json(json!({"error": {"message": "slow down"}})),
            )
                .into_response(),
        ),
        Turn::Raw { content_type, body } => Some(
            Response::builder().header(header::CONTENT_TYPE, content_type.as_str()).body(Body::from(body.clone())).expect("a response"),
        ),
        Turn::Hang => std::future::pending().await,
        Turn::Endless => Some(sse(move |tx| async move {
            loop {
                let data = if openai {
                    json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "la "}, "finish_reason": null}]})
                } else {
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "la "}})
                };
                let event = if openai { None } else { Some("content_block_delta") };
                let text = match event {
                    Some(e) => format!("event: {e}\ndata: {data}\n\n"),
                    None => format!("data: {data}\n\n"),
                };
                if !tx.raw(Ok(Bytes::from(text))).await {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })),
        _ => None,
    }
}

/// What the request asked for: a stream (the default) or one JSON answer.
fn wants_stream(body: &Bytes) -> bool {
    serde_json::from_slice::<Value>(body).ok().and_then(|v| v.get("stream").and_then(Value::as_bool)).unwrap_or(false)
}

async fn openai(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut turn = next_turn(&inner, "/v1/chat/completions", headers, &body);
    if let Turn::After(d, t) = turn {
        tokio::time::sleep(d).await;
        turn = *t;
    }
    if let Some(r) = special(&turn, true).await {
        return r;
    }
    let prompt_tokens = body.len() / 4;
    let whole = matches!(turn, Turn::Whole(_)) || !wants_stream(&body);
    if let Turn::Unindexed { calls, ids } = &turn
        && !whole
    {
        return unindexed(calls.clone(), *ids);
    }
    let reply = Reply::of(turn);
    if whole {
        let finish = if reply.cut {
            "length"
        } else if reply.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let calls: Vec<Value> = reply
            .calls
            .iter()
            .map(|(n, a)| json!({"id": format!("call_{}", inner.call_id()), "type": "function", "function": {"name": n, "arguments": a}}))
            .collect();
        let mut message = json!({"role": "assistant", "content": reply.text});
        if !calls.is_empty() {
            message["tool_calls"] = json!(calls);
        }
        return axum::Json(json!({"id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 7, "total_tokens": prompt_tokens + 7}}))
        .into_response();
    }
    let ids: Vec<u64> = reply.calls.iter().map(|_| inner.call_id()).collect();
    sse(move |tx| async move {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            .to_string()
        };
        send(&tx, None, &chunk(json!({"role": "assistant", "content": ""}), Value::Null)).await;
        let mut out_tokens = 0;
        for p in pieces(&reply.text, 5) {
            out_tokens += 1;
            send(&tx, None, &chunk(json!({"content": p}), Value::Null)).await;
        }
        if reply.drop {
            break_connection(&tx).await;
            return;
        }
        for (i, (name, args)) in reply.calls.iter().enumerate() {
            let head = json!({"tool_calls": [{"index": i, "id": format!("call_{}", ids[i]), "type": "function", "function": {"name": name, "arguments": ""}}]});
            send(&tx, None, &chunk(head, Value::Null)).await;
            for p in pieces(args, 7) {
                out_tokens += 1;
                send(&tx, None, &chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}), Value::Null)).await;
            }
        }
        let finish = if reply.cut {
            "length"
        } else if reply.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        send(&tx, None, &chunk(json!({}), json!(finish))).await;
        let usage = json!({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub-model", "choices": [],
                           "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens, "total_tokens": prompt_tokens + out_tokens}});
        send(&tx, None, &usage.to_string()).await;
        send(&tx, None, "[DONE]").await;
    })
}

/// [`Turn::Unindexed`], streamed.
fn unindexed(calls: Vec<(String, Value)>, ids: bool) -> Response {
    sse(move |tx| async move {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            .to_string()
        };
        send(&tx, None, &chunk(json!({"role": "assistant", "content": ""}), Value::Null)).await;
        for (i, (name, args)) in calls.iter().enumerate() {
            if ids {
                let call =
                    json!({"id": format!("call_u{i}"), "type": "function", "function": {"name": name, "arguments": args.to_string()}});
                send(&tx, None, &chunk(json!({"tool_calls": [call]}), Value::Null)).await;
            } else {
                let head = json!({"type": "function", "function": {"name": name, "arguments": ""}});
                send(&tx, None, &chunk(json!({"tool_calls": [head]}), Value::Null)).await;
                for p in pieces(&args.to_string(), 7) {
                    send(&tx, None, &chunk(json!({"tool_calls": [{"function": {"arguments": p}}]}), Value::Null)).await;
                }
            }
        }
        send(&tx, None, &chunk(json!({}), json!("tool_calls"))).await;
        let usage = json!({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub-model", "choices": [],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}});
        send(&tx, None, &usage.to_string()).await;
        send(&tx, None, "[DONE]").await;
    })
}

async fn anthropic(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut turn = next_turn(&inner, "/v1/messages", headers, &body);
    if let Turn::After(d, t) = turn {
        tokio::time::sleep(d).await;
        turn = *t;
    }
    if let Some(r) = special(&turn, false).await {
        return r;
    }
    let input_tokens = body.len() / 4;
    let whole = matches!(turn, Turn::Whole(_)) || !wants_stream(&body);
    let reply = Reply::of(turn);
    if whole {
        let stop = if reply.cut {
            "max_tokens"
        } else if reply.calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        };
        let mut content = Vec::new();
        if !reply.text.is_empty() {
            content.push(json!({"type": "text", "text": reply.text}));
        }
        for (n, a) in &reply.calls {
            // The API always sends input as an object; a raw text that is none is sent as a string.
            let input = serde_json::from_str::<Value>(a).unwrap_or_else(|_| json!(a));
            content.push(json!({"type": "tool_use", "id": format!("toolu_{}", inner.call_id()), "name": n, "input": input}));
        }
        return axum::Json(json!({"id": "msg_stub", "type": "message", "role": "assistant", "model": "stub-model", "content": content,
            "stop_reason": stop, "stop_sequence": null, "usage": {"input_tokens": input_tokens, "output_tokens": 7}}))
        .into_response();
    }
    let ids: Vec<u64> = reply.calls.iter().map(|_| inner.call_id()).collect();
    sse(move |tx| async move {
        let ev = |kind: &str, mut data: Value| {
            data["type"] = json!(kind);
            (kind.to_owned(), data.to_string())
        };
        let start = json!({"message": {"id": "msg_stub", "type": "message", "role": "assistant", "content": [], "model": "stub-model",
                           "stop_reason": null, "usage": {"input_tokens": input_tokens, "output_tokens": 1}}});
        for (k, d) in [ev("message_start", start), ev("ping", json!({}))] {
            send(&tx, Some(&k), &d).await;
        }
        let mut index = 0;
        let mut out_tokens = 0;
        if !reply.text.is_empty() {
            let (k, d) = ev("content_block_start", json!({"index": 0, "content_block": {"type": "text", "text": ""}}));
            send(&tx, Some(&k), &d).await;
            for p in pieces(&reply.text, 5) {
                out_tokens += 1;
                let (k, d) = ev("content_block_delta", json!({"index": 0, "delta": {"type": "text_delta", "text": p}}));
                send(&tx, Some(&k), &d).await;
            }
            if reply.drop {
                break_connection(&tx).await;
                return;
            }
            let (k, d) = ev("content_block_stop", json!({"index": 0}));
            send(&tx, Some(&k), &d).await;
            index += 1;
        }
        for (i, (name, args)) in reply.calls.iter().enumerate() {
            let id = format!("toolu_{}", ids[i]);
            let (k, d) = ev(
                "content_block_start",
                json!({"index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            );
            send(&tx, Some(&k), &d).await;
            for p in pieces(args, 7) {
                out_tokens += 1;
                let (k, d) = ev("content_block_delta", json!({"index": index, "delta": {"type": "input_json_delta", "partial_json": p}}));
                send(&tx, Some(&k), &d).await;
            }
            let (k, d) = ev("content_block_stop", json!({"index": index}));
            send(&tx, Some(&k), &d).await;
            index += 1;
        }
        let stop = if reply.cut {
            "max_tokens"
        } else if reply.calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        };
        let (k, d) =
            ev("message_delta", json!({"delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": out_tokens}}));
        send(&tx, Some(&k), &d).await;
        let (k, d) = ev("message_stop", json!({}));
        send(&tx, Some(&k), &d).await;
    })
}

/// `POST /v1/responses`, the OpenAI Responses API (what Codex CLI speaks): the reply as output
/// items, a `message` with `output_text` and one `function_call` per tool call, streamed as
/// `response.created`, `response.output_item.added`, `response.output_text.delta` /
/// `response.function_call_arguments.delta`, `response.output_item.done` and
/// `response.completed` events, or as one `response` object when not streamed.
async fn responses(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut turn = next_turn(&inner, "/v1/responses", headers, &body);
    if let Turn::After(d, t) = turn {
        tokio::time::sleep(d).await;
        turn = *t;
    }
    if let Some(r) = special(&turn, true).await {
        return r;
    }
    let input_tokens = body.len() / 4;
    let whole = matches!(turn, Turn::Whole(_)) || !wants_stream(&body);
    let reply = Reply::of(turn);
    let response_id = format!("resp_{}", inner.call_id());
    let msg_id = format!("msg_{response_id}");
    let message_item = move |status: &str, text: &str| {
        json!({"type": "message", "id": msg_id, "role": "assistant", "status": status,
               "content": if text.is_empty() && status == "in_progress" { json!([]) } else { json!([{"type": "output_text", "text": text, "annotations": []}]) }})
    };
    let calls: Vec<(String, String, String, String)> = reply
        .calls
        .iter()
        .map(|(name, args)| {
            let n = inner.call_id();
            (format!("fc_{n}"), format!("call_{n}"), name.clone(), args.clone())
        })
        .collect();
    // Codex offers a server's MCP tools in a namespace (`mcp__<server>`) and wants calls to
    // name it: a scripted `mcp__<server>__<tool>` is split so.
    let call_item = |(id, call_id, name, args): &(String, String, String, String), status: &str, with_args: bool| {
        let mut item = json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
               "arguments": if with_args { args.as_str() } else { "" }, "status": status});
        if let Some((namespace, tool)) = name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
            item["namespace"] = json!(format!("mcp__{namespace}"));
            item["name"] = json!(tool);
        }
        item
    };
    let mut output = Vec::new();
    if !reply.text.is_empty() {
        output.push(message_item("completed", &reply.text));
    }
    output.extend(calls.iter().map(|c| call_item(c, "completed", true)));
    let status = if reply.cut { "incomplete" } else { "completed" };
    let out_tokens = reply.text.len() / 4 + calls.iter().map(|c| c.3.len() / 4).sum::<usize>() + 1;
    let rid = response_id.clone();
    let response = move |status: &str, output: &[Value]| {
        let mut r = json!({"id": rid, "object": "response", "created_at": 0, "model": "stub-model", "status": status,
            "output": output, "usage": {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out_tokens, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input_tokens + out_tokens}});
        if status == "incomplete" {
            r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        r
    };
    if whole {
        return axum::Json(response(status, &output)).into_response();
    }
    sse(move |tx| async move {
        let mut seq = 0u64;
        let mut emit = async |kind: &str, mut data: Value| {
            data["type"] = json!(kind);
            data["sequence_number"] = json!(seq);
            seq += 1;
            send(&tx, Some(kind), &data.to_string()).await;
        };
        emit("response.created", json!({"response": response("in_progress", &[])})).await;
        emit("response.in_progress", json!({"response": response("in_progress", &[])})).await;
        let mut index = 0;
        if !reply.text.is_empty() {
            let item_id = format!("msg_{response_id}");
            emit("response.output_item.added", json!({"output_index": index, "item": message_item("in_progress", "")})).await;
            emit(
                "response.content_part.added",
                json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
            )
            .await;
            for p in pieces(&reply.text, 5) {
                emit("response.output_text.delta", json!({"item_id": item_id, "output_index": index, "content_index": 0, "delta": p}))
                    .await;
            }
            if reply.drop {
                break_connection(&tx).await;
                return;
            }
            emit("response.output_text.done", json!({"item_id": item_id, "output_index": index, "content_index": 0, "text": reply.text}))
                .await;
            emit(
                "response.content_part.done",
                json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": reply.text, "annotations": []}}),
            )
            .await;
            emit("response.output_item.done", json!({"output_index": index, "item": message_item("completed", &reply.text)})).await;
            index += 1;
        }
        for c in &calls {
            emit("response.output_item.added", json!({"output_index": index, "item": call_item(c, "in_progress", false)})).await;
            for p in pieces(&c.3, 7) {
                emit("response.function_call_arguments.delta", json!({"item_id": c.0, "output_index": index, "delta": p})).await;
            }
            emit("response.function_call_arguments.done", json!({"item_id": c.0, "output_index": index, "arguments": c.3})).await;
            emit("response.output_item.done", json!({"output_index": index, "item": call_item(c, "completed", true)})).await;
            index += 1;
        }
        let last = if status == "incomplete" { "response.incomplete" } else { "response.completed" };
        emit(last, json!({"response": response(status, &output)})).await;
    })
}
