//! The planner loop: ask the model, run the tools it picks through the gateway, feed back
//! what the gateway shaped for it, and end every run in a [`FinalPayload`].
//!
//! - The planner is one more host of the gateway: its sessions are shaped under the built-in
//!   `planner` host profile (`stowage_mcp::hosts::PLANNER_PROFILE`: a budget sized for one
//!   model request, `artifact://` references and never signed links, image previews), and
//!   every tool call is [`Gateway::call_tool`] under the run's session and a fresh trace id.
//!   The model reads the whole shaped answer ([`crate::observe`]): every text block in order,
//!   images as image parts for a vision model, within the request's image budget.
//! - Native tool calling, or (`tool_calling = false`) the JSON-only action format
//!   `{"thought", "next_node", "args"}`, whose history is plain text: the model's own JSON as
//!   its message and each observation as a user message, no tool-call structures.
//! - Repair, don't abort: tool arguments that are not JSON, a reply cut at its token limit,
//!   and a final answer without `raw_answer` each get one repair round naming the fault (two
//!   faults in a row end the run); a prose answer is the `raw_answer`; unknown keys and wrong
//!   optional fields are dropped or coerced with a warning each.
//! - A run that ends early (a limit, a model failure after a tool ran, cancellation) still
//!   returns a payload: `route: "partial"`, what was collected, and a warning naming the
//!   cause. `max_wall_time` bounds the whole run, tool calls included (a call cut off is
//!   cancelled upstream). Only a model that fails before any tool ran ends with an error.
//! - `requires_followup: true` keeps the conversation: a later run in the same session (same
//!   caller) continues it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use stowage_mcp::{CallOptions, Caller, Gateway, GatewayError, Outbox, Session};
use stowage_store::ArtifactStore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::collector::ArtifactCollector;
use crate::config::AgentConfig;
use crate::events::{AgentEvent, RunInfo, RunUsage, StepStatus};
use crate::model::names::ToolNames;
use crate::model::{ChatMessage, Content, FinishReason, Model, ModelError, ModelReply, ModelRequest, Part, ToolCall, ToolSpec};
use crate::payload::{AnswerError, FinalPayload, ModelAnswer, extract_json_object};
use crate::stream::AnswerText;

/// The most conversations kept for follow-ups; the oldest is forgotten first.
const MAX_CONVERSATIONS: usize = 1024;
/// A conversation unused this long is forgotten (and its gateway session closed).
const CONVERSATION_IDLE: Duration = Duration::from_secs(3600);
/// How much of the last observation a fallback answer quotes.
const FALLBACK_QUOTE_CHARS: usize = 2000;
/// The progress `_meta` key a tool streams artifact chunks under.
const ARTIFACT_CHUNK_META: &str = "io.stowage/artifact_chunk";
/// The route of a payload from a run that ended before the model answered.
const PARTIAL_ROUTE: &str = "partial";
/// The largest original result the sources are read from; above it, from the shaped copy.
const SOURCES_SCAN_MAX_BYTES: usize = 32 * 1024 * 1024;
/// How long a failed model check is trusted before the agent's routes ask the model again.
const MODEL_RECHECK: Duration = Duration::from_secs(5);

const DEFAULT_SYSTEM_PROMPT: &str = "You are Stowage's planner. Answer the user's question, calling the available tools when \
you need data. Tool results are compact: heavy values are stored as artifacts and shown as placeholders such as \
<artifact:dict size=42KB> or artifact:// references; they reach the user automatically, so never copy or invent them \
(artifact_read reads more of one when you need it). Keep thoughts short and factual. Never invent tool names.";

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
    /// The model failed before any tool ran (after that, a run ends with a partial payload).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The session named is not one of this caller's (or was forgotten): the id is the field.
    #[error("unknown agent session {0}: start a new run without a session")]
    UnknownSession(String),
    /// The query is blank.
    #[error("the query is empty: send {{\"query\": \"your question\"}}")]
    EmptyQuery,
    /// The model failed its check (the agent's routes answer 503 until it passes).
    #[error("{message}")]
    ModelDown {
        /// The failed check's [`ModelError::code`].
        code: &'static str,
        /// The failed check's message.
        message: String,
    },
}

impl AgentError {
    /// The stable code of the `error` event and the HTTP error body: the model's code,
    /// `unknown_session` or `bad_request`.
    pub fn code(&self) -> &'static str {
        match self {
            AgentError::Model(e) => e.code(),
            AgentError::UnknownSession(_) => "unknown_session",
            AgentError::EmptyQuery => "bad_request",
            AgentError::ModelDown { code, .. } => code,
        }
    }
}

/// One run's input.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The user's question (or, continuing a session, their reply to the model's question).
    pub query: String,
    /// Who asks: the run's tools see this caller's scope and its artifacts are theirs.
    pub caller: Caller,
    /// Continue this agent session (a previous run's [`RunOutcome::session_id`]).
    pub session: Option<String>,
    /// The run's id (its trace id, what `DELETE /agent/runs/{id}` names); a fresh one when
    /// absent.
    pub run_id: Option<String>,
}

impl RunRequest {
    /// A question in a new session, with a fresh run id.
    pub fn new(query: impl Into<String>, caller: Caller) -> Self {
        RunRequest { query: query.into(), caller, session: None, run_id: None }
    }
}

/// What a run came to: its payload, and the ids to continue or trace it by.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The answer: the model's, or a partial one when the run ended early.
    pub payload: FinalPayload,
    /// The session the run's artifacts belong to; pass it back to continue.
    pub session_id: String,
    /// The run's id, also the trace id its artifacts and gateway events carry.
    pub trace_id: String,
    /// How it went: why it ended, steps, token usage.
    pub run: RunInfo,
}

struct Conversation {
    caller: Caller,
    session: Arc<Session>,
    history: Vec<ChatMessage>,
    last_used: Instant,
}

/// What the agent's routes know of the model: checked at start, rechecked after a failure.
#[derive(Default)]
struct ModelHealth {
    ok: bool,
    failed: Option<(Instant, &'static str, String)>,
}

/// The agent: a gateway, a model and the `[agent]` limits. One serves every run of a process:
/// it keeps the conversations waiting for a follow-up and the runs in flight (to cancel them).
pub struct Planner {
    gateway: Arc<Gateway>,
    model: Arc<dyn Model>,
    config: AgentConfig,
    store: Option<Arc<dyn ArtifactStore>>,
    vision: bool,
    conversations: Mutex<VecDeque<(String, Arc<Mutex<Conversation>>)>>,
    /// Runs in progress: id → (caller, cancel).
    runs: Mutex<HashMap<String, (Caller, CancellationToken)>>,
    health: Mutex<ModelHealth>,
}

/// Why a run ended before the model answered.
#[derive(Debug)]
enum Cause {
    MaxSteps,
    MaxWallTime,
    MaxTokens,
    Cancelled,
    Model(ModelError),
    /// A fault the repair round did not fix: (finish reason, warning).
    Unrepaired(&'static str, String),
}

impl Cause {
    fn finish_reason(&self) -> &'static str {
        match self {
            Cause::MaxSteps => "max_steps",
            Cause::MaxWallTime => "max_wall_time",
            Cause::MaxTokens => "max_tokens",
            Cause::Cancelled => "cancelled",
            Cause::Model(_) => "model_error",
            Cause::Unrepaired(r, _) => r,
        }
    }

    fn warning(&self) -> String {
        match self {
            Cause::MaxSteps => "max_steps_reached".into(),
            Cause::MaxWallTime => "max_wall_time_reached".into(),
            Cause::MaxTokens => "max_tokens_reached".into(),
            Cause::Cancelled => "cancelled: the run was cancelled before the model answered".into(),
            Cause::Model(e) => format!("{}: {e}", e.code()),
            Cause::Unrepaired(_, w) => w.clone(),
        }
    }
}

/// A fault the model is told about once before the run gives up on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Arguments,
    Cut,
    Answer,
}

enum Action {
    Tools { text: String, thought: Option<String>, calls: Vec<ToolCall> },
    Final { text: String, answer: Result<crate::payload::Read, AnswerError> },
}

/// How one tool call ended.
enum CallEnd {
    Observed(Content, bool),
    Stopped(Cause),
}

/// One run's state.
struct Run<'a> {
    trace_id: &'a str,
    session: Arc<Session>,
    events: &'a mpsc::Sender<AgentEvent>,
    cancel: CancellationToken,
    deadline: tokio::time::Instant,
    collector: ArtifactCollector,
    schemas: HashMap<String, Value>,
    names: ToolNames,
    steps: u32,
    tool_calls: u32,
    requests: u32,
    usage: RunUsage,
    last_observation: Option<(String, String)>,
    chunk_seq: u64,
    /// Answer text the last reply streamed.
    streamed: String,
    model_finish: Option<FinishReason>,
    fault: Option<Fault>,
}

impl Planner {
    /// A planner over `gateway`'s tools. `store` is where the gateway offloads (small
    /// artifacts are read back from it to be inlined); links come from the gateway's link
    /// service when it has one.
    pub fn new(gateway: Arc<Gateway>, model: Arc<dyn Model>, config: AgentConfig, store: Option<Arc<dyn ArtifactStore>>) -> Self {
        let vision = config.vision.enabled_for(&config.model);
        Planner {
            gateway,
            model,
            config,
            store,
            vision,
            conversations: Mutex::new(VecDeque::new()),
            runs: Mutex::new(HashMap::new()),
            health: Mutex::new(ModelHealth::default()),
        }
    }

    /// The `[agent]` settings every run uses (limits, model, prompt).
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// A fresh run id (`run-…`, also the run's trace id).
    pub(crate) fn new_run_id() -> String {
        format!("run-{}", uuid::Uuid::new_v4().simple())
    }

    /// Records what a start-up check of the model found (`serve` checks before it listens).
    pub fn note_model_check(&self, result: &Result<(), ModelError>) {
        let mut h = self.health.lock();
        match result {
            Ok(()) => *h = ModelHealth { ok: true, failed: None },
            Err(e) => *h = ModelHealth { ok: false, failed: Some((Instant::now(), e.code(), e.to_string())) },
        }
    }

    /// Whether the model can take a run: once it passed its check, yes; after a failed
    /// check, it is asked again at most every few seconds. What the agent's routes answer 503
    /// with.
    pub(crate) async fn ensure_model(&self) -> Result<(), AgentError> {
        {
            let h = self.health.lock();
            if h.ok {
                return Ok(());
            }
            if let Some((at, code, message)) = &h.failed
                && at.elapsed() < MODEL_RECHECK
            {
                return Err(AgentError::ModelDown { code, message: message.clone() });
            }
        }
        let result = self.model.check().await;
        self.note_model_check(&result);
        result.map_err(|e| AgentError::ModelDown { code: e.code(), message: e.to_string() })
    }

    /// Cancels `caller`'s run `run_id`: it ends at once with a partial payload (a tool call in
    /// flight is cancelled upstream). False when there is no such run of theirs.
    pub fn cancel(&self, caller: &Caller, run_id: &str) -> bool {
        match self.runs.lock().get(run_id) {
            Some((owner, token)) if owner == caller => {
                token.cancel();
                true
            }
            _ => false,
        }
    }

    /// Runs one question to its payload, telling `events` what happens (a full or closed
    /// channel never stops the run). On failure an `error` event is sent too.
    pub async fn run(&self, req: RunRequest, events: mpsc::Sender<AgentEvent>) -> Result<RunOutcome, AgentError> {
        let trace_id = req.run_id.clone().unwrap_or_else(Self::new_run_id);
        let cancel = CancellationToken::new();
        self.runs.lock().insert(trace_id.clone(), (req.caller.clone(), cancel.clone()));
        let result = self.run_inner(req, &trace_id, &events, cancel).await;
        self.runs.lock().remove(&trace_id);
        match &result {
            Ok(out) => {
                let _ = events.send(AgentEvent::Done(Box::new(out.payload.clone()), Box::new(out.run.clone()))).await;
            }
            Err(e) => {
                tracing::warn!(target: "stowage::agent", trace = %trace_id, code = e.code(), "run failed: {e}");
                if let AgentError::Model(ModelError::Unreachable { .. }) = e {
                    self.health.lock().ok = false;
                }
                let _ =
                    events.send(AgentEvent::Error { error: e.to_string(), code: e.code().to_owned(), trace_id: trace_id.clone() }).await;
            }
        }
        result
    }

    /// The agent session a run of `caller` would use: `session` when it is theirs (else
    /// [`AgentError::UnknownSession`]), or a new one. Lets a caller learn a new session's id
    /// before the run starts (the HTTP route sends it as a header).
    pub(crate) fn resolve_session(&self, caller: &Caller, session: Option<String>) -> Result<String, AgentError> {
        let req = RunRequest { query: String::new(), caller: caller.clone(), session, run_id: None };
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
        // The planner is a host of its own: its answers are shaped under its profile.
        let session = self.gateway.open_session_as(req.caller.clone(), stowage_mcp::hosts::PLANNER_PROFILE);
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

    async fn run_inner(
        &self,
        req: RunRequest,
        trace_id: &str,
        events: &mpsc::Sender<AgentEvent>,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, AgentError> {
        if req.query.trim().is_empty() {
            return Err(AgentError::EmptyQuery);
        }
        let started = Instant::now();
        let (session_id, conv) = self.conversation(&req)?;
        let (session, mut messages) = {
            let c = conv.lock();
            (c.session.clone(), c.history.clone())
        };
        messages.push(ChatMessage::User(req.query.clone().into()));
        // The same start-up rule as a client's tools/list: upstreams still on their first
        // attempt get the grace, so a run started the moment serve listens sees every tool.
        self.gateway.wait_startup().await;
        // artifact_url mints signed links for people; the payload carries those, and a link
        // token has no business in a model's context.
        // Listed as a client's tools/list is: on the run's own upstream sessions, so the model
        // is offered what the servers offer this caller (one that cannot sample, say).
        let defs: Vec<Value> = self
            .gateway
            .tools_for(&session)
            .await
            .into_iter()
            .filter(|d| d.get("name").and_then(Value::as_str) != Some(stowage_mcp::ARTIFACT_URL_TOOL))
            .collect();
        let names = ToolNames::new(defs.iter().filter_map(|d| d.get("name")?.as_str()));
        let schemas: HashMap<String, Value> = defs
            .iter()
            .filter_map(|d| Some((d.get("name")?.as_str()?.to_owned(), d.get("outputSchema").cloned().unwrap_or(Value::Null))))
            .collect();
        let specs: Vec<ToolSpec> = defs
            .iter()
            .filter_map(|d| {
                Some(ToolSpec {
                    name: names.api(d.get("name")?.as_str()?).to_owned(),
                    description: d.get("description").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    input_schema: d.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"})),
                })
            })
            .collect();
        let system = self.system_prompt(&specs);
        let mut scope = session.scope.clone();
        scope.trace_id = Some(trace_id.to_owned());
        let collector =
            ArtifactCollector::new(scope, self.config.inline_artifact_max_bytes, self.store.clone(), self.gateway.link_service().cloned())
                .with_max_sources(self.config.max_sources);
        let mut run = Run {
            trace_id,
            session,
            events,
            cancel,
            deadline: (started + self.config.max_wall_time).into(),
            collector,
            schemas,
            names,
            steps: 0,
            tool_calls: 0,
            requests: 0,
            usage: RunUsage::default(),
            last_observation: None,
            chunk_seq: 0,
            streamed: String::new(),
            model_finish: None,
            fault: None,
        };
        let tools: &[ToolSpec] = if self.config.tool_calling { &specs } else { &[] };
        let ended: Result<(FinalPayload, &'static str), Cause> = loop {
            if run.cancel.is_cancelled() {
                break Err(Cause::Cancelled);
            }
            if tokio::time::Instant::now() >= run.deadline {
                break Err(Cause::MaxWallTime);
            }
            if run.usage.input_tokens + run.usage.output_tokens >= self.config.max_tokens {
                break Err(Cause::MaxTokens);
            }
            let view = self.request_view(&messages);
            let request = ModelRequest { system: &system, messages: &view, tools, max_tokens: self.config.max_response_tokens };
            let cancel = run.cancel.clone();
            let deadline = run.deadline;
            let asked = tokio::select! {
                _ = cancel.cancelled() => None,
                r = tokio::time::timeout_at(deadline, self.ask(&request, &mut run)) => Some(r),
            };
            let reply = match asked {
                None => break Err(Cause::Cancelled),
                Some(Err(_)) => break Err(Cause::MaxWallTime),
                Some(Ok(Err(e))) if run.tool_calls == 0 => return Err(e.into()),
                Some(Ok(Err(e))) => break Err(Cause::Model(e)),
                Some(Ok(Ok(reply))) => reply,
            };
            run.requests += 1;
            run.usage.input_tokens += reply.usage.input_tokens;
            run.usage.output_tokens += reply.usage.output_tokens;
            run.model_finish = Some(reply.finish.clone());
            let cut = reply.finish == FinishReason::Length;
            let dropped = reply.dropped_calls;
            match self.action(reply, &run.names) {
                Action::Tools { text, thought, calls } => {
                    if run.steps >= self.config.max_steps {
                        break Err(Cause::MaxSteps);
                    }
                    run.steps += 1;
                    let invalid: Vec<String> = calls.iter().filter_map(|c| c.invalid.clone()).collect();
                    if !invalid.is_empty() && run.fault == Some(Fault::Arguments) {
                        break Err(Cause::Unrepaired("invalid_tool_arguments", format!("invalid_tool_arguments: {}", invalid[0])));
                    }
                    run.fault = (!invalid.is_empty()).then_some(Fault::Arguments);
                    messages.push(if self.config.tool_calling {
                        let api_calls = calls.iter().map(|c| ToolCall { name: run.names.api(&c.name).to_owned(), ..c.clone() }).collect();
                        ChatMessage::Assistant { text: text.clone(), tool_calls: api_calls }
                    } else {
                        // The model's own JSON action, as it wrote it: no tool-call structures.
                        ChatMessage::Assistant { text: text.clone(), tool_calls: Vec::new() }
                    });
                    let n = calls.len();
                    let mut stopped = None;
                    for (i, call) in calls.into_iter().enumerate() {
                        let (mut content, is_error) = if stopped.is_some() {
                            (Content::from("error: not run: the run ended first"), true)
                        } else {
                            match self.call(&mut run, &call, thought.clone()).await {
                                CallEnd::Observed(c, e) => (c, e),
                                CallEnd::Stopped(cause) => {
                                    let what = format!("error: the call was cancelled: {}", cause.warning());
                                    stopped = Some(cause);
                                    (Content::from(what), true)
                                }
                            }
                        };
                        if i + 1 == n && dropped > 0 {
                            content.0.push(Part::Text(format!(
                                "note: {dropped} more tool calls in your reply were not run (at most {} per reply); ask for them again if you still need them",
                                crate::model::MAX_CALLS_PER_REPLY
                            )));
                        }
                        if stopped.is_none() {
                            // The fallback quotes what a tool said, not that a call was cut off.
                            run.last_observation = Some((call.name.clone(), content.text()));
                        }
                        messages.push(if self.config.tool_calling {
                            ChatMessage::ToolResult {
                                call_id: call.id.clone(),
                                name: run.names.api(&call.name).to_owned(),
                                content,
                                is_error,
                            }
                        } else {
                            let status = if is_error { "error" } else { "ok" };
                            let mut parts = vec![Part::Text(format!("Observation from {} ({status}):", run.names.api(&call.name)))];
                            parts.extend(content.0);
                            ChatMessage::User(Content(parts))
                        });
                    }
                    if let Some(cause) = stopped {
                        break Err(cause);
                    }
                }
                Action::Final { text, answer } if cut => {
                    let _ = answer;
                    if run.fault == Some(Fault::Cut) {
                        break Err(Cause::Unrepaired(
                            "reply_cut",
                            format!("reply_cut: the reply was cut at max_response_tokens ({}) twice", self.config.max_response_tokens),
                        ));
                    }
                    run.fault = Some(Fault::Cut);
                    messages.push(ChatMessage::Assistant { text, tool_calls: Vec::new() });
                    messages.push(ChatMessage::User(
                        format!(
                            "Your reply was cut off at the token limit ({} tokens) before it ended. Answer again, shorter, with only the JSON object described in the instructions.",
                            self.config.max_response_tokens
                        )
                        .into(),
                    ));
                }
                Action::Final { text, answer: Ok((a, warnings)) } => {
                    messages.push(ChatMessage::Assistant { text, tool_calls: Vec::new() });
                    let mut p = a.into_payload();
                    p.warnings.extend(warnings);
                    break Ok((p, "answer"));
                }
                Action::Final { text, answer: Err(why) } => {
                    if run.fault == Some(Fault::Answer) {
                        break Err(Cause::Unrepaired("invalid_answer", format!("invalid_final_answer: {why}")));
                    }
                    run.fault = Some(Fault::Answer);
                    messages.push(ChatMessage::Assistant { text, tool_calls: Vec::new() });
                    messages.push(ChatMessage::User(
                        format!(
                            "Your final answer is invalid: {why}. Answer again with only the JSON object described in the instructions."
                        )
                        .into(),
                    ));
                }
            }
        };
        let (mut payload, finish_reason) = match ended {
            Ok(p) => p,
            Err(cause) => {
                let mut p = FinalPayload::answer(fallback_answer(&run.last_observation));
                p.route = Some(PARTIAL_ROUTE.to_owned());
                p.warnings.push(cause.warning());
                (p, cause.finish_reason())
            }
        };
        let dropped_sources = run.collector.sources_dropped();
        let Run { collector, .. } = run;
        let (artifacts, sources) = collector.into_parts();
        payload.artifacts = artifacts;
        payload.sources = sources;
        if dropped_sources > 0 {
            payload.warnings.push(format!(
                "sources_capped: {dropped_sources} more sources were found than agent.max_sources ({}) keeps",
                self.config.max_sources
            ));
        }
        // The answer's text that did not stream (a prose answer, a fallback) goes out now.
        let rest = payload.raw_answer.strip_prefix(run.streamed.as_str()).unwrap_or_default();
        if !rest.is_empty() {
            let _ =
                events.send(AgentEvent::Chunk { stream_id: "answer".into(), seq: run.chunk_seq, text: rest.to_owned(), done: false }).await;
            run.chunk_seq += 1;
        }
        let _ = events.send(AgentEvent::Chunk { stream_id: "answer".into(), seq: run.chunk_seq, text: String::new(), done: true }).await;
        {
            let mut c = conv.lock();
            if payload.requires_followup {
                // Kept without images: a conversation waiting for its user holds text only.
                c.history = messages.iter().map(strip_images).collect();
            } else {
                c.history.clear();
            }
        }
        let info = RunInfo {
            trace_id: trace_id.to_owned(),
            finish_reason: finish_reason.to_owned(),
            model_finish_reason: run.model_finish.as_ref().map(|f| f.as_str().to_owned()),
            steps: run.steps,
            tool_calls: run.tool_calls,
            model_requests: run.requests,
            usage: run.usage,
            duration_ms: started.elapsed().as_millis() as u64,
        };
        tracing::info!(target: "stowage::agent", trace = %trace_id, steps = info.steps, finish = %info.finish_reason,
            input_tokens = info.usage.input_tokens, output_tokens = info.usage.output_tokens, ms = info.duration_ms, "run finished");
        Ok(RunOutcome { payload, session_id, trace_id: trace_id.to_owned(), run: info })
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

    /// The conversation as one request sends it: images only for a vision model, and at most
    /// `agent.max_images` of them and `agent.max_image_bytes` in all, the newest first; the
    /// others stand as their line.
    fn request_view(&self, messages: &[ChatMessage]) -> Vec<ChatMessage> {
        if !self.vision {
            return messages.iter().map(strip_images).collect();
        }
        let mut count = 0usize;
        let mut bytes = 0u64;
        let mut out: Vec<ChatMessage> = messages.to_vec();
        for m in out.iter_mut().rev() {
            let content = match m {
                ChatMessage::User(c) | ChatMessage::ToolResult { content: c, .. } => c,
                ChatMessage::Assistant { .. } => continue,
            };
            for p in content.0.iter_mut().rev() {
                let Part::Image(img) = p else { continue };
                let size = img.data.len() as u64;
                if count < self.config.max_images && bytes + size <= self.config.max_image_bytes {
                    count += 1;
                    bytes += size;
                } else {
                    *p = Part::Text(format!("{} (not shown: over one request's image budget)", img.label));
                }
            }
        }
        out
    }

    /// One model request; the answer's text (`raw_answer` as it streams) goes out as `chunk`
    /// events while it arrives.
    async fn ask(&self, req: &ModelRequest<'_>, run: &mut Run<'_>) -> Result<ModelReply, ModelError> {
        let (tx, mut rx) = mpsc::channel::<String>(64);
        let events = run.events;
        let seq = &mut run.chunk_seq;
        let streamed = &mut run.streamed;
        streamed.clear();
        let forward = async {
            let mut scan = AnswerText::new();
            while let Some(piece) = rx.recv().await {
                let text = scan.push(&piece);
                if !text.is_empty() {
                    streamed.push_str(&text);
                    let _ = events.send(AgentEvent::Chunk { stream_id: "answer".into(), seq: *seq, text, done: false }).await;
                    *seq += 1;
                }
            }
        };
        let (reply, ()) = tokio::join!(self.model.complete(req, tx), forward);
        reply
    }

    /// What the reply asks for. Tool names are mapped back to the gateway's.
    fn action(&self, reply: ModelReply, names: &ToolNames) -> Action {
        if self.config.tool_calling {
            if reply.tool_calls.is_empty() {
                let answer = ModelAnswer::parse(&reply.text);
                return Action::Final { text: reply.text, answer };
            }
            let thought = Some(reply.text.trim().to_owned()).filter(|t| !t.is_empty());
            let calls = reply.tool_calls.into_iter().map(|c| ToolCall { name: names.mcp(&c.name).to_owned(), ..c }).collect();
            return Action::Tools { text: reply.text, thought, calls };
        }
        // The JSON-only action format; a reply that is no action is read as the answer.
        let Some(action) = extract_json_object(&reply.text).filter(|a| a.get("next_node").is_some()) else {
            let answer = ModelAnswer::parse(&reply.text);
            return Action::Final { text: reply.text, answer };
        };
        let thought = action.get("thought").and_then(Value::as_str).map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned);
        match action.get("next_node") {
            Some(Value::String(tool)) => {
                let (arguments, invalid) = match action.get("args") {
                    None | Some(Value::Null) => (json!({}), None),
                    Some(a @ Value::Object(_)) => (a.clone(), None),
                    Some(other) => (json!({}), Some(format!("the \"args\" of {tool} must be a JSON object, not {other}"))),
                };
                let call = ToolCall { id: "json_action".into(), name: names.mcp(tool).to_owned(), arguments, invalid };
                Action::Tools { text: reply.text, thought, calls: vec![call] }
            }
            None | Some(Value::Null) => {
                let answer = match action.get("args") {
                    Some(args) if args.get("raw_answer").is_some() => ModelAnswer::from_value(args.clone()),
                    _ if action.get("raw_answer").is_some() => {
                        let mut a = action.clone();
                        if let Some(m) = a.as_object_mut() {
                            for k in ["thought", "next_node", "args"] {
                                m.remove(k);
                            }
                        }
                        ModelAnswer::from_value(a)
                    }
                    _ => Err(AnswerError::NoAnswerArgs),
                };
                Action::Final { text: reply.text, answer }
            }
            Some(other) => Action::Final { text: reply.text, answer: Err(AnswerError::BadNextNode { next_node: other.clone() }) },
        }
    }

    /// One tool call: `step` events, the call through the gateway (bounded by the run's
    /// deadline and its cancellation: dropping it cancels the call upstream), collection, and
    /// the observation the model gets.
    async fn call(&self, run: &mut Run<'_>, call: &ToolCall, thought: Option<String>) -> CallEnd {
        run.tool_calls += 1;
        let call_id = format!("c{}", run.tool_calls);
        let started = Instant::now();
        let events = run.events;
        let step = |status, thought: Option<String>| AgentEvent::Step {
            node: call.name.clone(),
            status,
            latency_ms: started.elapsed().as_secs_f64() * 1000.0,
            thought,
            call_id: call_id.clone(),
        };
        let _ = events.send(step(StepStatus::Started, thought.clone())).await;
        if let Some(why) = &call.invalid {
            let _ = events.send(step(StepStatus::Error, thought)).await;
            let text = format!("error: {why}. Call {} again with arguments that are one valid JSON object.", run.names.api(&call.name));
            return CallEnd::Observed(text.into(), true);
        }
        let schema = run.schemas.get(&call.name).filter(|s| s.is_object()).cloned();
        let keep_original = schema.as_ref().is_some_and(crate::collector::produces_sources);
        let (progress, mut progress_rx) = Outbox::channel();
        let opts = CallOptions {
            trace_id: Some(run.trace_id.to_owned()),
            progress: Some(progress),
            progress_token: None,
            keep_original,
            host: None,
        };
        let arguments = if call.arguments.is_object() { call.arguments.clone() } else { json!({}) };
        let session = run.session.clone();
        let call_fut = self.gateway.call_tool(&session, &call.name, arguments, opts);
        tokio::pin!(call_fut);
        let streams: HashMap<String, String> =
            schema.as_ref().map(crate::collector::stream_marks).unwrap_or_default().into_iter().map(|(field, id)| (id, field)).collect();
        // Per call and stream: two calls of one tool are told apart by call_id, each from 0.
        let mut seqs: HashMap<String, u64> = HashMap::new();
        let deadline = run.deadline;
        let cancel = run.cancel.clone();
        // Live artifact chunks from the tool's progress notifications, while it runs.
        let outcome = loop {
            tokio::select! {
                out = &mut call_fut => break Ok(out),
                Some(line) = progress_rx.recv() => {
                    if let Some(ev) = live_chunk(&line, &mut seqs, &streams, run, &call.name, &call_id) {
                        let _ = events.send(ev).await;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => break Err(Cause::MaxWallTime),
                _ = cancel.cancelled() => break Err(Cause::Cancelled),
            }
        };
        while let Ok(line) = progress_rx.try_recv() {
            if let Some(ev) = live_chunk(&line, &mut seqs, &streams, run, &call.name, &call_id) {
                let _ = events.send(ev).await;
            }
        }
        let outcome = match outcome {
            Ok(o) => o,
            Err(cause) => {
                let _ = events.send(step(StepStatus::Error, thought)).await;
                return CallEnd::Stopped(cause);
            }
        };
        let (observation, is_error) = match outcome {
            Ok(out) => {
                let is_error = out.result.get("isError").and_then(Value::as_bool) == Some(true);
                let records = out.report.transform.as_ref().map(|r| r.artifacts.as_slice()).unwrap_or_default();
                for s in run.collector.collect(&call.name, &call_id, schema.as_ref(), records).await {
                    let seq = seqs.entry(s.stream_id.clone()).or_insert(0);
                    let ev = AgentEvent::ArtifactChunk {
                        stream_id: s.stream_id,
                        seq: *seq,
                        chunk: s.chunk,
                        done: true,
                        artifact_type: s.artifact_type,
                        call_id: call_id.clone(),
                        tool: call.name.clone(),
                        key: s.key,
                    };
                    *seq += 1;
                    let _ = events.send(ev).await;
                }
                if !is_error && keep_original {
                    // Sources from what the tool returned, not the gateway's shortened copy.
                    let original = out
                        .report
                        .original
                        .as_deref()
                        .filter(|o| o.len() <= SOURCES_SCAN_MAX_BYTES)
                        .and_then(|o| serde_json::from_str::<Value>(o).ok())
                        .and_then(structured_of);
                    let structured = original.or_else(|| out.result.get("structuredContent").cloned());
                    run.collector.collect_sources(schema.as_ref(), structured.as_ref());
                }
                (crate::observe::observation(&out.result, schema.as_ref(), records), is_error)
            }
            Err(e) => (tool_error_text(&e).into(), true),
        };
        let status = if is_error { StepStatus::Error } else { StepStatus::Ok };
        let _ = events.send(step(status, thought)).await;
        CallEnd::Observed(observation, is_error)
    }
}

/// A message with its images as their lines.
fn strip_images(m: &ChatMessage) -> ChatMessage {
    match m {
        ChatMessage::User(c) if c.has_images() => ChatMessage::User(c.without_images()),
        ChatMessage::ToolResult { call_id, name, content, is_error } if content.has_images() => {
            ChatMessage::ToolResult { call_id: call_id.clone(), name: name.clone(), content: content.without_images(), is_error: *is_error }
        }
        other => other.clone(),
    }
}

/// A result's structured value: its `structuredContent`, else its first text block when
/// that is JSON (a server that sends structured output only as text).
fn structured_of(result: Value) -> Option<Value> {
    if let Some(sc) = result.get("structuredContent").filter(|v| !v.is_null()) {
        return Some(sc.clone());
    }
    let text = result.pointer("/content/0/text")?.as_str()?;
    serde_json::from_str::<Value>(text).ok().filter(|v| v.is_object() || v.is_array())
}

fn tool_error_text(e: &GatewayError) -> String {
    format!("error: {e}")
}

/// An `artifact_chunk` event from a progress notification carrying
/// `_meta["io.stowage/artifact_chunk"]` = `{stream_id, seq, chunk, done}`; `seq` defaults to
/// the next of this call's stream.
fn live_chunk(
    line: &[u8],
    seqs: &mut HashMap<String, u64>,
    streams: &HashMap<String, String>,
    run: &mut Run<'_>,
    tool: &str,
    call_id: &str,
) -> Option<AgentEvent> {
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
    // The payload key the field's value will have; a stream no field declares is its own key.
    let field = streams.get(&stream_id).cloned().unwrap_or_else(|| stream_id.clone());
    let key = run.collector.key_for(tool, call_id, &field);
    Some(AgentEvent::ArtifactChunk {
        stream_id,
        seq,
        chunk,
        done: c.get("done").and_then(Value::as_bool).unwrap_or(false),
        artifact_type,
        call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        key,
    })
}

/// The answer of a run that ends without one: what the last observation said.
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
