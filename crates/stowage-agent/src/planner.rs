//! The planner loop: ask the model, run the tools it picks through the gateway, feed back
//! the compact results, and end every run in a [`FinalPayload`].
//!
//! - Every tool call is [`Gateway::call_tool`] under the run's session and a fresh trace id,
//!   so the transform pipeline, the caller's ownership and the per-trace limits apply exactly
//!   as for an MCP client; the model sees the rewritten result and nothing heavier.
//! - Native tool calling, or (`tool_calling = false`) the seed's JSON-only action format
//!   `{"thought", "next_node", "args"}`.
//! - An invalid final answer gets one repair round naming the error; after that, and when a
//!   limit (`max_steps`, `max_wall_time`, `max_tokens`) is reached, the payload is the seed's
//!   fallback from the last observation, with a warning. A run ends without a payload only
//!   when the model itself fails (unreachable, HTTP error, timeout, dropped stream).
//! - `requires_followup: true` keeps the conversation: a later run in the same session (same
//!   caller) continues it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::{Value, json};
use stowage_mcp::{CallOptions, Caller, Gateway, GatewayError, Outbox, Session, SessionKind};
use stowage_store::ArtifactStore;
use stowage_transform::ArtifactRecord;
use tokio::sync::mpsc;

use crate::collector::ArtifactCollector;
use crate::config::AgentConfig;
use crate::events::{AgentEvent, StepStatus};
use crate::model::{ChatMessage, Model, ModelError, ModelReply, ModelRequest, ToolCall, ToolSpec};
use crate::payload::{FinalPayload, ModelAnswer, extract_json_object};

/// The most conversations kept for follow-ups; the oldest is forgotten first.
const MAX_CONVERSATIONS: usize = 1024;
/// A conversation unused this long is forgotten (and its gateway session closed).
const CONVERSATION_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);
/// How much of the last observation a fallback answer quotes.
const FALLBACK_QUOTE_CHARS: usize = 2000;
/// The progress `_meta` key a tool streams artifact chunks under.
pub const ARTIFACT_CHUNK_META: &str = "io.stowage/artifact_chunk";

const DEFAULT_SYSTEM_PROMPT: &str = "You are Stowage's planner. Answer the user's question, calling the available tools when \
you need data. Tool results are compact: heavy values are stored as artifacts and shown as placeholders such as \
<artifact:dict size=42KB> or artifact:// references; they reach the user automatically, so never copy or invent them. \
Keep thoughts short and factual. Never invent tool names.";

const ANSWER_FORMAT: &str = "When the task is complete, answer with only a JSON object, no prose around it:\n\
{\"raw_answer\": \"your complete, human-readable answer\"}\n\
\"raw_answer\" is required. Optional: \"confidence\" (0.0-1.0), \"route\" (a category such as \"knowledge_base\", \
\"calculation\", \"clarification\"), \"requires_followup\" (true when you need the user's input; then raw_answer is your \
question), \"warnings\" ([string]), \"suggested_actions\" ([{\"action_id\", \"label\", \"params\"}]), \"language\" (ISO 639-1), \
\"extra\" ({}). Artifacts and sources are collected automatically: do not include them.";

const JSON_ACTION_FORMAT: &str = "Respond with valid JSON only, one action per reply:\n\
{\"thought\": \"short reasoning\", \"next_node\": \"tool name\", \"args\": {tool arguments}}\n\
When the task is complete, set \"next_node\" to null and put the final answer object in \"args\".";

/// Why a run failed (no payload): the `error` event's message and code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("unknown agent session {0}: start a new run without a session")]
    UnknownSession(String),
    #[error("the query is empty: send {{\"query\": \"your question\"}}")]
    EmptyQuery,
}

impl AgentError {
    pub fn code(&self) -> &'static str {
        match self {
            AgentError::Model(e) => e.code(),
            AgentError::UnknownSession(_) => "unknown_session",
            AgentError::EmptyQuery => "bad_request",
        }
    }
}

/// One run's input.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub query: String,
    pub caller: Caller,
    /// Continue this agent session (a previous run's [`RunOutcome::session_id`]).
    pub session: Option<String>,
}

/// What a run came to.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub payload: FinalPayload,
    /// The session the run's artifacts belong to; pass it back to continue.
    pub session_id: String,
    pub trace_id: String,
}

struct Conversation {
    caller: Caller,
    session: Arc<Session>,
    history: Vec<ChatMessage>,
    last_used: Instant,
}

/// The agent: a gateway, a model and the `[agent]` limits.
pub struct Planner {
    gateway: Arc<Gateway>,
    model: Arc<dyn Model>,
    config: AgentConfig,
    store: Option<Arc<dyn ArtifactStore>>,
    conversations: Mutex<VecDeque<(String, Arc<Mutex<Conversation>>)>>,
}

enum Action {
    Tools { text: String, calls: Vec<ToolCall> },
    Final { text: String, answer: Result<ModelAnswer, String> },
}

impl Planner {
    /// A planner over `gateway`'s tools. `store` is where the gateway offloads (small
    /// artifacts are read back from it to be inlined); links come from the gateway's link
    /// service when it has one.
    pub fn new(gateway: Arc<Gateway>, model: Arc<dyn Model>, config: AgentConfig, store: Option<Arc<dyn ArtifactStore>>) -> Self {
        Planner { gateway, model, config, store, conversations: Mutex::new(VecDeque::new()) }
    }

    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// The JSON Schema of the payload every run ends in.
    pub fn payload_schema() -> Value {
        crate::payload::final_payload_schema()
    }

    /// Runs one question to its payload, telling `events` what happens (a full or closed
    /// channel never stops the run). On failure an `error` event is sent too.
    pub async fn run(&self, req: RunRequest, events: mpsc::Sender<AgentEvent>) -> Result<RunOutcome, AgentError> {
        let trace_id = format!("run-{}", uuid::Uuid::new_v4().simple());
        let result = self.run_inner(req, &trace_id, &events).await;
        match &result {
            Ok(out) => {
                let _ = events.send(AgentEvent::Done(Box::new(out.payload.clone()))).await;
            }
            Err(e) => {
                tracing::warn!(target: "stowage::agent", trace = %trace_id, code = e.code(), "run failed: {e}");
                let _ =
                    events.send(AgentEvent::Error { error: e.to_string(), code: e.code().to_owned(), trace_id: trace_id.clone() }).await;
            }
        }
        result
    }

    /// The agent session a run of `caller` would use: `session` when it is theirs (else
    /// [`AgentError::UnknownSession`]), or a new one. Lets a caller learn a new session's id
    /// before the run starts (the HTTP route sends it as a header).
    pub fn resolve_session(&self, caller: &Caller, session: Option<String>) -> Result<String, AgentError> {
        let req = RunRequest { query: String::new(), caller: caller.clone(), session };
        self.conversation(&req).map(|(id, _)| id)
    }

    fn conversation(&self, req: &RunRequest) -> Result<(String, Arc<Mutex<Conversation>>), AgentError> {
        let mut all = self.conversations.lock();
        let now = Instant::now();
        all.retain(|(_, c)| {
            let c = c.lock();
            let keep = now.duration_since(c.last_used) < CONVERSATION_IDLE;
            if !keep {
                self.gateway.close_session(&c.session);
            }
            keep
        });
        if let Some(id) = &req.session {
            // Owner-bound: another caller's session id answers like an unknown one.
            let found = all.iter().find(|(k, c)| k == id && c.lock().caller == req.caller).map(|(k, c)| (k.clone(), c.clone()));
            if let Some((_, c)) = &found {
                c.lock().last_used = now;
            }
            return found.ok_or_else(|| AgentError::UnknownSession(id.clone()));
        }
        let session = self.gateway.open_session(SessionKind::InProcess, req.caller.clone(), None);
        let id = session.id.clone();
        let conv = Arc::new(Mutex::new(Conversation { caller: req.caller.clone(), session, history: Vec::new(), last_used: now }));
        if all.len() >= MAX_CONVERSATIONS
            && let Some((_, old)) = all.pop_front()
        {
            self.gateway.close_session(&old.lock().session);
        }
        all.push_back((id.clone(), conv.clone()));
        Ok((id, conv))
    }

    async fn run_inner(&self, req: RunRequest, trace_id: &str, events: &mpsc::Sender<AgentEvent>) -> Result<RunOutcome, AgentError> {
        if req.query.trim().is_empty() {
            return Err(AgentError::EmptyQuery);
        }
        let started = Instant::now();
        let (session_id, conv) = self.conversation(&req)?;
        let (session, mut messages) = {
            let c = conv.lock();
            (c.session.clone(), c.history.clone())
        };
        messages.push(ChatMessage::User(req.query.clone()));
        // The same start-up rule as a client's tools/list: upstreams still on their first
        // attempt get the grace, so a run started the moment serve listens sees every tool.
        self.gateway.wait_startup().await;
        let defs = self.gateway.list_tools(&session);
        let schemas: HashMap<String, Value> = defs
            .iter()
            .filter_map(|d| Some((d.get("name")?.as_str()?.to_owned(), d.get("outputSchema").cloned().unwrap_or(Value::Null))))
            .collect();
        let specs: Vec<ToolSpec> = defs
            .iter()
            .filter_map(|d| {
                Some(ToolSpec {
                    name: d.get("name")?.as_str()?.to_owned(),
                    description: d.get("description").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    input_schema: d.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"})),
                })
            })
            .collect();
        let system = self.system_prompt(&specs);
        let mut scope = session.scope.clone();
        scope.trace_id = Some(trace_id.to_owned());
        let mut collector =
            ArtifactCollector::new(scope, self.config.inline_artifact_max_bytes, self.store.clone(), self.gateway.link_service().cloned());
        let mut stream_seq: HashMap<String, u64> = HashMap::new();
        let mut steps = 0u32;
        let mut tokens = 0u64;
        let mut repaired = false;
        let mut last_observation: Option<(String, String)> = None;
        let mut chunk_seq = 0u64;
        let deadline = started + self.config.max_wall_time;
        let finish = |payload: Result<ModelAnswer, String>, warning: Option<String>, last: &Option<(String, String)>| {
            let mut p = match payload {
                Ok(a) => a.into_payload(),
                Err(_) => FinalPayload::answer(fallback_answer(last)),
            };
            if let Some(w) = warning {
                p.warnings.push(w);
            }
            p
        };
        let payload = loop {
            if Instant::now() >= deadline {
                break finish(Err(String::new()), Some("max_wall_time_reached".into()), &last_observation);
            }
            if tokens >= self.config.max_tokens {
                break finish(Err(String::new()), Some("max_tokens_reached".into()), &last_observation);
            }
            let tools: &[ToolSpec] = if self.config.tool_calling { &specs } else { &[] };
            let request = ModelRequest { system: &system, messages: &messages, tools, max_tokens: self.config.max_response_tokens };
            let reply = match tokio::time::timeout_at(deadline.into(), self.ask(&request, events, &mut chunk_seq)).await {
                Ok(r) => r?,
                Err(_) => break finish(Err(String::new()), Some("max_wall_time_reached".into()), &last_observation),
            };
            tokens += reply.usage.input_tokens + reply.usage.output_tokens;
            match self.action(reply) {
                Action::Final { text, answer: Ok(a) } => {
                    messages.push(ChatMessage::Assistant { text, tool_calls: Vec::new() });
                    break finish(Ok(a), None, &last_observation);
                }
                Action::Final { text, answer: Err(why) } if !repaired => {
                    repaired = true;
                    messages.push(ChatMessage::Assistant { text, tool_calls: Vec::new() });
                    messages.push(ChatMessage::User(format!(
                        "Your final answer is invalid: {why}. Answer again with only the JSON object described in the instructions."
                    )));
                }
                Action::Final { text, answer: Err(why) } => {
                    messages.push(ChatMessage::Assistant { text, tool_calls: Vec::new() });
                    break finish(Err(why.clone()), Some(format!("invalid_final_answer: {why}")), &last_observation);
                }
                Action::Tools { text, calls } => {
                    if steps >= self.config.max_steps {
                        break finish(Err(String::new()), Some("max_steps_reached".into()), &last_observation);
                    }
                    steps += 1;
                    let thought = Some(text.trim().to_owned()).filter(|t| !t.is_empty());
                    messages.push(ChatMessage::Assistant { text: text.clone(), tool_calls: calls.clone() });
                    for call in calls {
                        let (observation, is_error) = self
                            .call(
                                &session,
                                trace_id,
                                &call,
                                thought.clone(),
                                schemas.get(&call.name),
                                &mut collector,
                                &mut stream_seq,
                                events,
                            )
                            .await;
                        last_observation = Some((call.name.clone(), observation.clone()));
                        messages.push(if self.config.tool_calling {
                            ChatMessage::ToolResult { call_id: call.id.clone(), name: call.name.clone(), content: observation, is_error }
                        } else {
                            let status = if is_error { "error" } else { "ok" };
                            ChatMessage::User(format!("Observation from {} ({status}): {observation}", call.name))
                        });
                    }
                }
            }
        };
        let (artifacts, sources) = collector.into_parts();
        let mut payload = payload;
        payload.artifacts = artifacts;
        payload.sources = sources;
        let _ = events.send(AgentEvent::Chunk { stream_id: "answer".into(), seq: chunk_seq, text: String::new(), done: true }).await;
        {
            let mut c = conv.lock();
            if payload.requires_followup {
                c.history = messages;
            } else {
                c.history.clear();
            }
        }
        tracing::info!(target: "stowage::agent", trace = %trace_id, steps, tokens, ms = started.elapsed().as_millis() as u64, "run finished");
        Ok(RunOutcome { payload, session_id, trace_id: trace_id.to_owned() })
    }

    fn system_prompt(&self, specs: &[ToolSpec]) -> String {
        let mut s = self.config.system_prompt.clone().unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned());
        s.push_str("\n\n");
        if !self.config.tool_calling {
            s.push_str(JSON_ACTION_FORMAT);
            s.push_str("\n\nAvailable tools:\n");
            for t in specs {
                s.push_str(&format!("- {}: {} Arguments schema: {}\n", t.name, t.description, t.input_schema));
            }
            s.push('\n');
        }
        s.push_str(ANSWER_FORMAT);
        s
    }

    /// One model request, its text streamed out as `chunk` events while it arrives.
    async fn ask(&self, req: &ModelRequest<'_>, events: &mpsc::Sender<AgentEvent>, seq: &mut u64) -> Result<ModelReply, ModelError> {
        let (tx, mut rx) = mpsc::channel::<String>(64);
        let forward = async {
            while let Some(text) = rx.recv().await {
                let _ = events.send(AgentEvent::Chunk { stream_id: "answer".into(), seq: *seq, text, done: false }).await;
                *seq += 1;
            }
        };
        let (reply, ()) = tokio::join!(self.model.complete(req, tx), forward);
        reply
    }

    fn action(&self, reply: ModelReply) -> Action {
        if self.config.tool_calling {
            if reply.tool_calls.is_empty() {
                let answer = ModelAnswer::parse(&reply.text);
                return Action::Final { text: reply.text, answer };
            }
            return Action::Tools { text: reply.text, calls: reply.tool_calls };
        }
        // The JSON-only action format.
        let Some(action) = extract_json_object(&reply.text) else {
            return Action::Final {
                answer: Err("the reply is not a JSON action {\"thought\", \"next_node\", \"args\"}".into()),
                text: reply.text,
            };
        };
        match action.get("next_node") {
            Some(Value::String(tool)) => {
                let thought = action.get("thought").and_then(Value::as_str).unwrap_or_default().to_owned();
                let call =
                    ToolCall { id: "json_action".into(), name: tool.clone(), arguments: action.get("args").cloned().unwrap_or(json!({})) };
                // The reply is kept verbatim in the conversation, the thought is the step's.
                Action::Tools { text: if thought.is_empty() { reply.text } else { thought }, calls: vec![call] }
            }
            None | Some(Value::Null) => {
                let answer = match action.get("args") {
                    Some(args) => ModelAnswer::from_value(args.clone()),
                    None if action.get("raw_answer").is_some() => ModelAnswer::from_value(action),
                    None => Err("the final action has no \"args\" with the answer".into()),
                };
                Action::Final { text: reply.text, answer }
            }
            Some(other) => {
                Action::Final { text: reply.text, answer: Err(format!("\"next_node\" must be a tool name or null, not {other}")) }
            }
        }
    }

    /// One tool call: `step` events, the call through the gateway, collection, and the
    /// observation the model gets.
    #[allow(clippy::too_many_arguments)]
    async fn call(
        &self,
        session: &Arc<Session>,
        trace_id: &str,
        call: &ToolCall,
        thought: Option<String>,
        schema: Option<&Value>,
        collector: &mut ArtifactCollector,
        stream_seq: &mut HashMap<String, u64>,
        events: &mpsc::Sender<AgentEvent>,
    ) -> (String, bool) {
        let started = Instant::now();
        let _ = events
            .send(AgentEvent::Step { node: call.name.clone(), status: StepStatus::Started, latency_ms: 0.0, thought: thought.clone() })
            .await;
        let schema = schema.filter(|s| s.is_object());
        let (progress, mut progress_rx) = Outbox::channel();
        let opts = CallOptions {
            trace_id: Some(trace_id.to_owned()),
            progress: Some(progress),
            progress_token: None,
            keep_original: false,
            host: None,
        };
        let arguments = if call.arguments.is_object() { call.arguments.clone() } else { json!({}) };
        let call_fut = self.gateway.call_tool(session, &call.name, arguments, opts);
        tokio::pin!(call_fut);
        // Live artifact chunks from the tool's progress notifications, while it runs.
        let outcome = loop {
            tokio::select! {
                out = &mut call_fut => break out,
                Some(line) = progress_rx.recv() => {
                    if let Some(ev) = live_chunk(&line, stream_seq) {
                        let _ = events.send(ev).await;
                    }
                }
            }
        };
        while let Ok(line) = progress_rx.try_recv() {
            if let Some(ev) = live_chunk(&line, stream_seq) {
                let _ = events.send(ev).await;
            }
        }
        let (observation, is_error) = match outcome {
            Ok(out) => {
                let is_error = out.result.get("isError").and_then(Value::as_bool) == Some(true);
                let records = out.report.transform.as_ref().map(|r| r.artifacts.as_slice()).unwrap_or_default();
                for s in collector.collect(&call.name, schema, records).await {
                    let seq = stream_seq.entry(s.stream_id.clone()).or_insert(0);
                    let _ = events
                        .send(AgentEvent::ArtifactChunk {
                            stream_id: s.stream_id,
                            seq: *seq,
                            chunk: s.chunk,
                            done: true,
                            artifact_type: s.artifact_type,
                        })
                        .await;
                    *seq += 1;
                }
                if !is_error {
                    collector.collect_sources(schema, out.result.get("structuredContent"));
                }
                (observation(&out.result, schema, records), is_error)
            }
            Err(e) => (tool_error_text(&e), true),
        };
        let status = if is_error { StepStatus::Error } else { StepStatus::Ok };
        let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        let _ = events.send(AgentEvent::Step { node: call.name.clone(), status, latency_ms, thought }).await;
        (observation, is_error)
    }
}

fn tool_error_text(e: &GatewayError) -> String {
    format!("error: {e}")
}

/// An `artifact_chunk` event from a progress notification carrying
/// `_meta["io.stowage/artifact_chunk"]` = `{stream_id, seq, chunk, done}`.
fn live_chunk(line: &[u8], seqs: &mut HashMap<String, u64>) -> Option<AgentEvent> {
    let msg: Value = serde_json::from_slice(line).ok()?;
    if msg.get("method").and_then(Value::as_str) != Some("notifications/progress") {
        return None;
    }
    let c = msg.pointer("/params/_meta")?.get(ARTIFACT_CHUNK_META)?;
    let stream_id = c.get("stream_id")?.as_str()?.to_owned();
    let next = seqs.entry(stream_id.clone()).or_insert(0);
    let seq = c.get("seq").and_then(Value::as_u64).unwrap_or(*next);
    *next = seq + 1;
    let chunk = c.get("chunk").cloned().unwrap_or(Value::Null);
    let artifact_type = c.get("artifact_type").and_then(Value::as_str).map_or_else(
        || {
            match &chunk {
                Value::Object(_) => "dict",
                Value::Array(_) => "list",
                _ => "str",
            }
            .to_owned()
        },
        str::to_owned,
    );
    Some(AgentEvent::ArtifactChunk { stream_id, seq, chunk, done: c.get("done").and_then(Value::as_bool).unwrap_or(false), artifact_type })
}

/// What the model reads of a tool result: the structured content (with the seed's
/// `stream=` placeholders for streamed fields) when there is some, else the text blocks, plus
/// one line per resource link.
pub fn observation(result: &Value, schema: Option<&Value>, records: &[ArtifactRecord]) -> String {
    let mut out = String::new();
    if let Some(sc) = result.get("structuredContent").filter(|v| !v.is_null()) {
        let mut sc = sc.clone();
        seed_placeholders(&mut sc, records);
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
        out.push_str(&sc.to_string());
    }
    for block in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") if out.is_empty() => out.push_str(block.get("text").and_then(Value::as_str).unwrap_or_default()),
            Some("text") => {}
            Some("resource_link") => {
                let line = format!(
                    "\n[resource_link {} {} {}]",
                    block.get("uri").and_then(Value::as_str).unwrap_or_default(),
                    block.get("mimeType").and_then(Value::as_str).unwrap_or_default(),
                    block.get("name").and_then(Value::as_str).unwrap_or_default()
                );
                out.push_str(&line);
            }
            Some(other) => out.push_str(&format!("\n[{other} block]")),
            None => {}
        }
    }
    if result.get("isError").and_then(Value::as_bool) == Some(true) && !out.starts_with("error") {
        out.insert_str(0, "error: ");
    }
    out
}

/// Puts the seed's placeholders (`<artifact:list size=847 items> artifact://…`) where the
/// pipeline offloaded a part of `structuredContent`. For MCP clients the gateway keeps those
/// positions typed (a prefix of the array, the first keys of the object), because clients
/// validate against the tool's `outputSchema`; the planner's model validates nothing, and a
/// placeholder tells it plainly that the value is stored whole elsewhere, and how big it is.
fn seed_placeholders(sc: &mut Value, records: &[ArtifactRecord]) {
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

/// The seed's fallback answer: what the last observation said.
fn fallback_answer(last: &Option<(String, String)>) -> String {
    match last {
        Some((tool, obs)) => {
            let quote: String = obs.chars().take(FALLBACK_QUOTE_CHARS).collect();
            let more = if obs.chars().count() > FALLBACK_QUOTE_CHARS { "…" } else { "" };
            format!("I could not complete the answer. The last result, from {tool}, was: {quote}{more}")
        }
        None => "I could not complete the answer, and no tool returned anything.".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_use_structured_content_with_stream_placeholders() {
        let schema = json!({"properties": {"chart": {"artifact": true, "stream": true, "stream_id": "c1"}, "raw": {"artifact": true}}});
        let result = json!({
            "content": [
                {"type": "text", "text": "{\"mirror\": true}"},
                {"type": "resource_link", "uri": "artifact://x_1", "mimeType": "application/pdf", "name": "x.pdf"}
            ],
            "structuredContent": {"chart": "<artifact:dict size=42KB> artifact://chart_1", "raw": "<artifact:list size=3 items> artifact://raw_1", "n": 1}
        });
        let o = observation(&result, Some(&schema), &[]);
        assert!(o.contains("\"chart\":\"<artifact:dict stream=c1> artifact://chart_1\""), "{o}");
        assert!(o.contains("<artifact:list size=3 items>"), "{o}");
        assert!(!o.contains("mirror"), "the text mirror of structured content is not sent twice: {o}");
        assert!(o.ends_with("[resource_link artifact://x_1 application/pdf x.pdf]"), "{o}");
        let err = json!({"content": [{"type": "text", "text": "boom"}], "isError": true});
        assert_eq!(observation(&err, None, &[]), "error: boom");
    }

    #[test]
    fn typed_prefixes_become_the_seeds_placeholders_for_the_model() {
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
        let o = observation(&result, Some(&schema), &records);
        assert!(o.contains("\"raw\":\"<artifact:list size=847 items> artifact://raw_1\""), "{o}");
        assert!(o.contains("\"chart\":\"<artifact:dict stream=c1> artifact://chart_1\""), "{o}");
        assert!(o.contains("\"n\":1"), "{o}");
    }

    #[test]
    fn live_chunks_come_only_from_marked_progress_notifications() {
        let mut seqs = HashMap::new();
        let note = |meta: Value| {
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1, "_meta": meta}}))
                .unwrap()
        };
        let chunk = json!({"io.stowage/artifact_chunk": {"stream_id": "s", "chunk": [1, 2], "done": false}});
        match live_chunk(&note(chunk.clone()), &mut seqs) {
            Some(AgentEvent::ArtifactChunk { stream_id, seq, artifact_type, done, .. }) => {
                assert_eq!((stream_id.as_str(), seq, artifact_type.as_str(), done), ("s", 0, "list", false));
            }
            other => panic!("{other:?}"),
        }
        // The next one without a seq gets the stream's next number.
        assert!(matches!(live_chunk(&note(chunk), &mut seqs), Some(AgentEvent::ArtifactChunk { seq: 1, .. })));
        assert!(live_chunk(&note(json!({"other": 1})), &mut seqs).is_none());
        assert!(live_chunk(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}", &mut seqs).is_none());
        assert!(live_chunk(b"not json", &mut seqs).is_none());
    }
}
