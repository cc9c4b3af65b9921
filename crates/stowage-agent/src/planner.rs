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
//!   `{"thought", "next_node", "args"}` (or `"plan"` and `"join"`), whose history is plain
//!   text: the model's own JSON as its message and each observation as a user message.
//! - The calls of one step run at once, and so do a parallel plan's branches ([`crate::plan`]:
//!   `plan` and `join.inject`, through the `parallel_plan` tool with native tool
//!   calling); their observations go back in the order the model asked for them.
//! - Repair, don't deliver: tool arguments that are not JSON, a reply cut at its token limit,
//!   a final answer that is no answer (missing, empty, JSON cut inside a string or invalid) and
//!   a JSON-only reply that is no action each get a repair round naming the fault, within one
//!   budget per run counted across every kind (`agent.max_repairs`): a run asks the model at
//!   most `max_steps + max_repairs + 1` times. A prose answer is the `raw_answer`; an answer
//!   under a common other key, or cut only before its closing brackets, is read with a
//!   warning; unknown keys and wrong optional fields are dropped or coerced with a warning each.
//! - The client holds what streamed: when that will not be the answer (a repair, a reply that
//!   turned to tool calls, a fallback), an `answer_reset` event says so before the
//!   replacement streams.
//! - A run that ends early (a limit, a model failure after a tool ran, a spent repair budget,
//!   cancellation) still returns a payload: `route: "partial"`, what was collected, an answer
//!   that names the last tool result, and a warning naming the cause. `max_wall_time` bounds
//!   the whole run, tool calls included (a call cut off is cancelled upstream). Only a model
//!   that fails before any tool ran ends with an error.
//! - `requires_followup: true` keeps the conversation: a later run in the same session (same
//!   caller) continues it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesOrdered;
use parking_lot::Mutex;
use serde_json::{Value, json};
use stowage_mcp::{CallOptions, Caller, Gateway, GatewayError, Outbox, Session, ToolOutcome};
use stowage_store::ArtifactStore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::collector::ArtifactCollector;
use crate::config::AgentConfig;
use crate::events::{AgentEvent, RunInfo, RunUsage, StepStatus};
use crate::model::names::ToolNames;
use crate::model::{ChatMessage, Content, FinishReason, Model, ModelError, ModelReply, ModelRequest, Part, ToolCall, ToolSpec};
use crate::payload::{AnswerError, FinalPayload, Found, ModelAnswer, find_json};
use crate::plan::{PLAN_TOOL, Plan};
use crate::stream::AnswerText;

/// The most conversations kept for follow-ups; the oldest is forgotten first.
const MAX_CONVERSATIONS: usize = 1024;
/// A conversation unused this long is forgotten (and its gateway session closed).
const CONVERSATION_IDLE: Duration = Duration::from_secs(3600);
/// How much of the last tool result a fallback answer quotes.
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
To run several tools at once, set \"next_node\" to null and list them: \"plan\": [{\"node\": \"tool name\", \"args\": {…}}, …]. \
To hand their results to one more tool, add \"join\": {\"node\": \"tool name\", \"args\": {…}, \"inject\": {\"its argument\": \"$results\"}} \
(sources: $results, the results in plan order; $branches; $failures; $success_count; $failure_count; $expect).\n\
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
            AgentError::EmptyQuery => stowage_core::ErrorCode::BadRequest.as_str(),
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

/// A fault of a model reply. Each gets a repair round that names it, within the run's one
/// repair budget (`agent.max_repairs`), counted across every kind: alternating faults end the
/// run as surely as repeated ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Tool arguments that are not a JSON object, or a parallel plan that cannot run.
    Arguments,
    /// A reply cut at the token limit.
    Cut,
    /// A final answer that is none (missing, empty, JSON cut inside a string, invalid).
    Answer,
    /// A JSON-only reply that is no action.
    Action,
}

impl Fault {
    /// The finish reason and the warning's code when the budget is spent.
    fn codes(self) -> (&'static str, &'static str) {
        match self {
            Fault::Arguments => ("invalid_tool_arguments", "invalid_tool_arguments"),
            Fault::Cut => ("reply_cut", "reply_cut"),
            Fault::Answer => ("invalid_answer", "invalid_final_answer"),
            Fault::Action => ("invalid_action", "invalid_action"),
        }
    }
}

/// One piece of work a reply asks for.
enum Work {
    /// A tool call (the gateway's name; `invalid` says why it cannot run).
    Call(ToolCall),
    /// A parallel plan: the call that carried it (the plan tool's, or the JSON-only action)
    /// and the plan, or why it cannot run.
    Plan { call: ToolCall, plan: Result<Plan, String> },
}

enum Action {
    Tools {
        text: String,
        thought: Option<String>,
        work: Vec<Work>,
    },
    Final {
        text: String,
        answer: Result<crate::payload::Read, AnswerError>,
    },
    /// A JSON-only reply that is no usable action.
    Broken {
        text: String,
        why: AnswerError,
    },
}

/// A call to make.
struct Pending {
    /// The tool (gateway name) and its arguments.
    call: ToolCall,
    thought: Option<String>,
    /// Keep the tool's own result: a join is handed it.
    keep_original: bool,
}

/// A call about to run: its id in the run, which call of its tool it is (the payload keys of
/// its artifacts), and how its result is read.
struct Prepared {
    call: ToolCall,
    call_id: String,
    ordinal: u32,
    thought: Option<String>,
    schema: Option<Value>,
    keep_original: bool,
    /// Stream id → the field it fills.
    streams: HashMap<String, String>,
    started: Instant,
}

/// How a call's execution ended.
enum Executed {
    /// The gateway answered (a result or an error), at `ended`; `seqs`: the live chunks sent
    /// per stream.
    Answered { outcome: Box<Result<ToolOutcome, GatewayError>>, ended: Instant, seqs: HashMap<String, u64> },
    /// The run's deadline or cancellation cut it off.
    Stopped(Cause),
    /// Its arguments could not be used: why.
    NotRun(String),
}

/// What a call came to.
struct Done {
    /// What the model reads.
    content: Content,
    is_error: bool,
    /// The result as a join is handed it; `None` when the call failed.
    value: Option<Value>,
    /// The run ended during the call.
    stopped: Option<Cause>,
}

/// A tool's result, for the answer of a run that ends without one.
struct LastResult {
    tool: String,
    call_id: String,
    text: String,
    value: Option<Value>,
}

/// One run's state.
struct Run<'a> {
    trace_id: &'a str,
    session: Arc<Session>,
    events: &'a mpsc::Sender<AgentEvent>,
    cancel: CancellationToken,
    deadline: tokio::time::Instant,
    collector: ArtifactCollector,
    /// Output schemas by tool.
    schemas: HashMap<String, Value>,
    /// Input schemas by tool (a join's, for the implicit injection).
    input_schemas: HashMap<String, Value>,
    names: ToolNames,
    /// The plan tool is offered (native tool calling, no tool of that name upstream).
    plan_tool: bool,
    steps: u32,
    tool_calls: u32,
    requests: u32,
    repairs: u32,
    usage: RunUsage,
    /// The last result a tool returned without error, and the last with one.
    last_ok: Option<LastResult>,
    last_error: Option<LastResult>,
    /// Calls started per tool: the next call's ordinal.
    ordinals: HashMap<String, u32>,
    chunk_seq: u64,
    /// Answer text the client was streamed since the last `answer_reset`.
    shown: String,
    model_finish: Option<FinishReason>,
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
        let (mut run, system, offered) = self.prepare(session, trace_id, events, cancel, started).await;
        let tools: &[ToolSpec] = if self.config.tool_calling { &offered } else { &[] };
        let ended = self.drive(&mut run, &mut messages, &system, tools).await?;
        let (payload, finish_reason) = self.payload(&mut run, ended).await;
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
            repairs: run.repairs,
            usage: run.usage,
            duration_ms: started.elapsed().as_millis() as u64,
        };
        tracing::info!(target: "stowage::agent", trace = %trace_id, steps = info.steps, finish = %info.finish_reason,
            input_tokens = info.usage.input_tokens, output_tokens = info.usage.output_tokens, ms = info.duration_ms, "run finished");
        Ok(RunOutcome { payload, session_id, trace_id: trace_id.to_owned(), run: info })
    }

    /// A run's setup: the tools the model is offered (the caller's own listing, the plan tool
    /// beside it), its system prompt, and its state.
    async fn prepare<'a>(
        &self,
        session: Arc<Session>,
        trace_id: &'a str,
        events: &'a mpsc::Sender<AgentEvent>,
        cancel: CancellationToken,
        started: Instant,
    ) -> (Run<'a>, String, Vec<ToolSpec>) {
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
        let schema_map = |key: &str| -> HashMap<String, Value> {
            defs.iter().filter_map(|d| Some((d.get("name")?.as_str()?.to_owned(), d.get(key).cloned().unwrap_or(Value::Null)))).collect()
        };
        let (schemas, input_schemas) = (schema_map("outputSchema"), schema_map("inputSchema"));
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
        // Parallel plans, offered as a tool of the planner's own beside the gateway's
        // (unless an upstream tool has its name: then the calls of one reply still run at once).
        let plan_tool = self.config.tool_calling && !specs.is_empty() && !specs.iter().any(|t| t.name == PLAN_TOOL);
        let mut offered = specs;
        if plan_tool {
            offered.push(ToolSpec {
                name: PLAN_TOOL.to_owned(),
                description: crate::plan::TOOL_DESCRIPTION.to_owned(),
                input_schema: crate::plan::tool_schema(),
            });
        }
        let mut scope = session.scope.clone();
        scope.trace_id = Some(trace_id.to_owned());
        let collector =
            ArtifactCollector::new(scope, self.config.inline_artifact_max_bytes, self.store.clone(), self.gateway.link_service().cloned())
                .with_max_sources(self.config.max_sources);
        let run = Run {
            trace_id,
            session,
            events,
            cancel,
            deadline: (started + self.config.max_wall_time).into(),
            collector,
            schemas,
            input_schemas,
            names,
            plan_tool,
            steps: 0,
            tool_calls: 0,
            requests: 0,
            repairs: 0,
            usage: RunUsage::default(),
            last_ok: None,
            last_error: None,
            ordinals: HashMap::new(),
            chunk_seq: 0,
            shown: String::new(),
            model_finish: None,
        };
        (run, system, offered)
    }

    /// The run's loop: ask the model, act on its reply, until an answer or a cause to stop.
    /// Fails only when the model fails before any tool ran (nothing to give back then).
    async fn drive(
        &self,
        run: &mut Run<'_>,
        messages: &mut Vec<ChatMessage>,
        system: &str,
        tools: &[ToolSpec],
    ) -> Result<Result<(FinalPayload, &'static str), Cause>, AgentError> {
        let ended = loop {
            if run.cancel.is_cancelled() {
                break Err(Cause::Cancelled);
            }
            if tokio::time::Instant::now() >= run.deadline {
                break Err(Cause::MaxWallTime);
            }
            if run.usage.input_tokens + run.usage.output_tokens >= self.config.max_tokens {
                break Err(Cause::MaxTokens);
            }
            let view = self.request_view(messages);
            let request = ModelRequest { system, messages: &view, tools, max_tokens: self.config.max_response_tokens };
            let cancel = run.cancel.clone();
            let deadline = run.deadline;
            let asked = tokio::select! {
                _ = cancel.cancelled() => None,
                r = tokio::time::timeout_at(deadline, self.ask(&request, run)) => Some(r),
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
            match self.action(reply, &run.names, run.plan_tool) {
                Action::Tools { text, thought, work } => {
                    if let Some(cause) = self.act(run, messages, text, thought, work, dropped).await {
                        break Err(cause);
                    }
                }
                Action::Final { text, .. } if cut => {
                    reset(run, "repair").await;
                    if !self.spend_repair(run) {
                        let why = format!("the reply was cut at max_response_tokens ({})", self.config.max_response_tokens);
                        break Err(self.unrepaired(run, Fault::Cut, &why));
                    }
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
                    reset(run, "repair").await;
                    if !self.spend_repair(run) {
                        break Err(self.unrepaired(run, Fault::Answer, &why.to_string()));
                    }
                    messages.push(ChatMessage::Assistant { text, tool_calls: Vec::new() });
                    messages.push(ChatMessage::User(
                        format!(
                            "Your final answer is invalid: {why}. Answer again with only the JSON object described in the instructions."
                        )
                        .into(),
                    ));
                }
                Action::Broken { text, why } => {
                    reset(run, "repair").await;
                    if !self.spend_repair(run) {
                        break Err(self.unrepaired(run, Fault::Action, &why.to_string()));
                    }
                    messages.push(ChatMessage::Assistant { text, tool_calls: Vec::new() });
                    messages.push(ChatMessage::User(
                        format!(
                            "Your reply is not a valid action: {why}. Reply again with one JSON action object as the instructions describe."
                        )
                        .into(),
                    ));
                }
            }
        };
        Ok(ended)
    }

    /// Runs one reply's tool calls (or plan) and adds the reply and its observations to the
    /// conversation; the cause to stop, if any.
    async fn act(
        &self,
        run: &mut Run<'_>,
        messages: &mut Vec<ChatMessage>,
        text: String,
        thought: Option<String>,
        work: Vec<Work>,
        dropped: usize,
    ) -> Option<Cause> {
        // Text streamed beside tool calls was no answer.
        reset(run, "tool_calls").await;
        if run.steps >= self.config.max_steps {
            return Some(Cause::MaxSteps);
        }
        run.steps += 1;
        let invalid = work.iter().find_map(|w| match w {
            Work::Call(c) => c.invalid.clone(),
            Work::Plan { plan: Err(why), .. } => Some(format!("the parallel plan is invalid: {why}")),
            Work::Plan { .. } => None,
        });
        if let Some(why) = invalid
            && !self.spend_repair(run)
        {
            return Some(self.unrepaired(run, Fault::Arguments, &why));
        }
        messages.push(if self.config.tool_calling {
            let api_calls = work
                .iter()
                .map(|w| match w {
                    Work::Call(c) => ToolCall { name: run.names.api(&c.name).to_owned(), ..c.clone() },
                    Work::Plan { call, .. } => call.clone(),
                })
                .collect();
            ChatMessage::Assistant { text, tool_calls: api_calls }
        } else {
            // The model's own JSON action, as it wrote it: no tool-call structures.
            ChatMessage::Assistant { text, tool_calls: Vec::new() }
        });
        let (observations, stopped) = self.step(run, thought, work).await;
        let n = observations.len();
        for (i, (call, mut content, is_error)) in observations.into_iter().enumerate() {
            if i + 1 == n && dropped > 0 {
                content.0.push(Part::Text(format!(
                    "note: {dropped} more tool calls in your reply were not run (at most {} per reply); ask for them again if you still need them",
                    crate::model::MAX_CALLS_PER_REPLY
                )));
            }
            let api = if call.name == PLAN_TOOL { PLAN_TOOL.to_owned() } else { run.names.api(&call.name).to_owned() };
            messages.push(if self.config.tool_calling {
                ChatMessage::ToolResult { call_id: call.id.clone(), name: api, content, is_error }
            } else {
                let status = if is_error { "error" } else { "ok" };
                let what = if call.name == PLAN_TOOL { "the parallel plan".to_owned() } else { api };
                let mut parts = vec![Part::Text(format!("Observation from {what} ({status}):"))];
                parts.extend(content.0);
                ChatMessage::User(Content(parts))
            });
        }
        stopped
    }

    /// The run's payload: its answer (or the partial one a cause leaves), its artifacts and
    /// sources, and the rest of the answer streamed.
    async fn payload(&self, run: &mut Run<'_>, ended: Result<(FinalPayload, &'static str), Cause>) -> (FinalPayload, &'static str) {
        let (mut payload, finish_reason) = match ended {
            Ok(p) => p,
            Err(cause) => {
                let mut p = FinalPayload::answer(fallback_answer(run.last_ok.as_ref().or(run.last_error.as_ref())));
                p.route = Some(PARTIAL_ROUTE.to_owned());
                p.warnings.push(cause.warning());
                (p, cause.finish_reason())
            }
        };
        let dropped_sources = run.collector.sources_dropped();
        let collector = std::mem::replace(&mut run.collector, ArtifactCollector::new(Default::default(), 0, None, None));
        let (artifacts, sources) = collector.into_parts();
        payload.artifacts = artifacts;
        payload.sources = sources;
        if dropped_sources > 0 {
            payload.warnings.push(format!(
                "sources_capped: {dropped_sources} more sources were found than agent.max_sources ({}) keeps",
                self.config.max_sources
            ));
        }
        // The answer's text that did not stream (a prose answer, a fallback) goes out now; when
        // what streamed is not where the answer starts, the client is told to drop it first.
        if !payload.raw_answer.starts_with(run.shown.as_str()) {
            reset(run, if finish_reason == "answer" { "replaced" } else { "partial" }).await;
        }
        let rest = payload.raw_answer[run.shown.len()..].to_owned();
        if !rest.is_empty() {
            let _ = run.events.send(AgentEvent::Chunk { stream_id: "answer".into(), seq: run.chunk_seq, text: rest, done: false }).await;
            run.chunk_seq += 1;
        }
        let _ =
            run.events.send(AgentEvent::Chunk { stream_id: "answer".into(), seq: run.chunk_seq, text: String::new(), done: true }).await;
        (payload, finish_reason)
    }

    /// Takes one repair round from the run's budget; false when it is spent.
    fn spend_repair(&self, run: &mut Run<'_>) -> bool {
        if run.repairs >= self.config.max_repairs {
            return false;
        }
        run.repairs += 1;
        true
    }

    /// Why a run ends on a fault its budget cannot repair.
    fn unrepaired(&self, run: &Run<'_>, fault: Fault, why: &str) -> Cause {
        let (reason, code) = fault.codes();
        let spent = match run.repairs {
            1 => "1 repair round".to_owned(),
            n => format!("{n} repair rounds"),
        };
        Cause::Unrepaired(reason, format!("{code}: {why} ({spent} spent; agent.max_repairs = {})", self.config.max_repairs))
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
    /// events while it arrives, and is what the client holds until an `answer_reset`.
    async fn ask(&self, req: &ModelRequest<'_>, run: &mut Run<'_>) -> Result<ModelReply, ModelError> {
        let (tx, mut rx) = mpsc::channel::<String>(64);
        let events = run.events;
        let seq = &mut run.chunk_seq;
        let shown = &mut run.shown;
        let forward = async {
            let mut scan = AnswerText::new();
            while let Some(piece) = rx.recv().await {
                let text = scan.push(&piece);
                if !text.is_empty() {
                    shown.push_str(&text);
                    let _ = events.send(AgentEvent::Chunk { stream_id: "answer".into(), seq: *seq, text, done: false }).await;
                    *seq += 1;
                }
            }
        };
        let (reply, ()) = tokio::join!(self.model.complete(req, tx), forward);
        reply
    }

    /// What the reply asks for. Tool names are mapped back to the gateway's.
    fn action(&self, reply: ModelReply, names: &ToolNames, plan_tool: bool) -> Action {
        if self.config.tool_calling {
            if reply.tool_calls.is_empty() {
                let answer = ModelAnswer::parse(&reply.text);
                return Action::Final { text: reply.text, answer };
            }
            let thought = Some(reply.text.trim().to_owned()).filter(|t| !t.is_empty());
            let work = reply
                .tool_calls
                .into_iter()
                .map(|c| {
                    if plan_tool && c.name == PLAN_TOOL && c.invalid.is_none() {
                        let plan = crate::plan::parse(&c.arguments, names);
                        Work::Plan { call: c, plan }
                    } else {
                        Work::Call(ToolCall { name: names.mcp(&c.name).to_owned(), ..c })
                    }
                })
                .collect();
            return Action::Tools { text: reply.text, thought, work };
        }
        // The JSON-only action format: every reply is one action object.
        let (action, closed) = match find_json(&reply.text) {
            Found::Object(m) => (m, None),
            Found::Closed(m, added) => (m, Some(added)),
            Found::Broken(why) => return Action::Broken { text: reply.text, why: AnswerError::BrokenAction(why) },
            Found::Prose if reply.text.trim().is_empty() => return Action::Broken { text: reply.text, why: AnswerError::EmptyReply },
            Found::Prose => return Action::Broken { text: reply.text, why: AnswerError::NoAction },
        };
        let thought = action.get("thought").and_then(Value::as_str).map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned);
        let next_node = action.get("next_node").cloned().unwrap_or(Value::Null);
        if action.get("plan").is_some_and(|p| !p.is_null()) {
            if !next_node.is_null() {
                let why = "set \"next_node\" to null when the action has a \"plan\"".to_owned();
                return Action::Broken { text: reply.text, why: AnswerError::BadPlan(why) };
            }
            let args = json!({"plan": action.get("plan"), "join": action.get("join")});
            return match crate::plan::parse(&args, names) {
                Ok(plan) => {
                    let call = ToolCall::new("json_action", PLAN_TOOL, args);
                    Action::Tools { text: reply.text, thought, work: vec![Work::Plan { call, plan: Ok(plan) }] }
                }
                Err(why) => Action::Broken { text: reply.text, why: AnswerError::BadPlan(why) },
            };
        }
        match next_node {
            Value::String(tool) => {
                let (arguments, invalid) = match action.get("args") {
                    None | Some(Value::Null) => (json!({}), None),
                    Some(a @ Value::Object(_)) => (a.clone(), None),
                    Some(other) => (json!({}), Some(format!("the \"args\" of {tool} must be a JSON object, not {other}"))),
                };
                let call = ToolCall { id: "json_action".into(), name: names.mcp(&tool).to_owned(), arguments, invalid };
                Action::Tools { text: reply.text, thought, work: vec![Work::Call(call)] }
            }
            Value::Null => {
                let answer = match action.get("args") {
                    Some(Value::Object(args)) => ModelAnswer::from_object(args.clone()).map_err(|e| match e {
                        AnswerError::NoRawAnswer => AnswerError::NoAnswerArgs,
                        other => other,
                    }),
                    _ => {
                        // The answer's keys beside the action's own (`{"next_node": null, "raw_answer": …}`).
                        let mut top = action.clone();
                        for k in ["thought", "next_node", "args", "plan", "join"] {
                            top.remove(k);
                        }
                        let has_answer =
                            top.contains_key("raw_answer") || crate::payload::ANSWER_ALIASES.iter().any(|k| top.contains_key(*k));
                        if has_answer { ModelAnswer::from_object(top) } else { Err(AnswerError::NoAnswerArgs) }
                    }
                };
                let answer = answer.map(|(a, mut w)| {
                    if let Some(added) = closed {
                        w.insert(0, format!("final answer: the JSON object was not closed; read with \"{added}\" added"));
                    }
                    (a, w)
                });
                Action::Final { text: reply.text, answer }
            }
            other => Action::Final { text: reply.text, answer: Err(AnswerError::BadNextNode { next_node: other }) },
        }
    }

    /// Runs one step's work: every call, and every plan's branches, at once; then each plan's
    /// join. Returns one observation per piece of work, in the order the model asked (the
    /// call that asked, what the model reads, whether it failed), and what stopped the run,
    /// if anything did.
    async fn step(&self, run: &mut Run<'_>, thought: Option<String>, work: Vec<Work>) -> (Vec<(ToolCall, Content, bool)>, Option<Cause>) {
        let mut pending = Vec::new();
        // The pending calls each piece of work owns.
        let mut spans = Vec::with_capacity(work.len());
        for w in &work {
            let start = pending.len();
            match w {
                Work::Call(c) => pending.push(Pending { call: c.clone(), thought: thought.clone(), keep_original: false }),
                Work::Plan { plan: Ok(p), .. } => {
                    for b in &p.branches {
                        let call = ToolCall::new("branch", b.node.clone(), b.args.clone());
                        pending.push(Pending { call, thought: thought.clone(), keep_original: p.join.is_some() });
                    }
                }
                Work::Plan { plan: Err(_), .. } => {}
            }
            spans.push(start..pending.len());
        }
        let mut done = self.run_calls(run, pending).await;
        let mut stopped = done.iter_mut().find_map(|d| d.stopped.take());
        let mut out = Vec::with_capacity(work.len());
        for (w, span) in work.into_iter().zip(spans) {
            match w {
                Work::Call(call) => {
                    let d = &mut done[span.start];
                    out.push((call, std::mem::take(&mut d.content), d.is_error));
                }
                Work::Plan { call, plan: Err(why) } => {
                    let text = format!("error: the parallel plan is invalid: {why}. Send it again, corrected.");
                    out.push((call, Content::from(text), true));
                }
                Work::Plan { call, plan: Ok(plan) } => {
                    let (content, is_error) = self.plan_observation(run, &plan, &mut done[span], thought.clone(), &mut stopped).await;
                    out.push((call, content, is_error));
                }
            }
        }
        (out, stopped)
    }

    /// A plan's observation: each branch's, then the join's (run here, handed what its
    /// `inject` names), as one message the model reads.
    async fn plan_observation(
        &self,
        run: &mut Run<'_>,
        plan: &Plan,
        branches: &mut [Done],
        thought: Option<String>,
        stopped: &mut Option<Cause>,
    ) -> (Content, bool) {
        let outcomes: Vec<crate::plan::Outcome> = plan
            .branches
            .iter()
            .zip(branches.iter())
            .map(|(b, d)| crate::plan::Outcome {
                node: b.node.clone(),
                args: b.args.clone(),
                result: match (&d.value, d.is_error) {
                    (Some(v), false) => Ok(v.clone()),
                    (None, false) => Ok(Value::String(d.content.text())),
                    (_, true) => Err(d.content.text()),
                },
            })
            .collect();
        let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
        let mut parts =
            vec![Part::Text(format!("Parallel plan: {} branches ran ({} ok, {failed} failed).", outcomes.len(), outcomes.len() - failed))];
        for (i, (b, d)) in plan.branches.iter().zip(branches.iter_mut()).enumerate() {
            let status = if d.is_error { "error" } else { "ok" };
            parts.push(Part::Text(format!("Branch {}, {} ({status}):", i + 1, run.names.api(&b.node))));
            parts.extend(std::mem::take(&mut d.content).0);
        }
        if plan.dropped > 0 {
            parts.push(Part::Text(format!(
                "note: {} more branches were not run (at most {} per plan)",
                plan.dropped,
                crate::model::MAX_CALLS_PER_REPLY
            )));
        }
        let mut is_error = failed == outcomes.len();
        let Some(join) = &plan.join else { return (Content(parts), is_error) };
        let api = run.names.api(&join.node).to_owned();
        if stopped.is_some() {
            parts.push(Part::Text(format!("Join {api}: not run: the run ended first.")));
            return (Content(parts), true);
        }
        match crate::plan::join_arguments(join, &outcomes, run.input_schemas.get(&join.node)) {
            Err(why) => {
                parts.push(Part::Text(format!("Join {api}: not run: {why}.")));
                is_error = true;
            }
            Ok(args) => {
                let call = ToolCall::new("join", join.node.clone(), args);
                let mut d = self.run_calls(run, vec![Pending { call, thought, keep_original: false }]).await.remove(0);
                *stopped = d.stopped.take();
                let status = if d.is_error { "error" } else { "ok" };
                parts.push(Part::Text(format!("Join, {api} ({status}):")));
                parts.extend(d.content.0);
                is_error = d.is_error;
            }
        }
        (Content(parts), is_error)
    }

    /// Runs `pending` at once: each gets its `step` started event now, in order; the calls go
    /// through the gateway together; each is finished (artifacts collected, `step` ended,
    /// observation read) in the order given, whatever order they end in, so payload keys and
    /// events do not depend on which tool was faster.
    async fn run_calls(&self, run: &mut Run<'_>, pending: Vec<Pending>) -> Vec<Done> {
        let mut prepared = Vec::with_capacity(pending.len());
        for p in pending {
            prepared.push(prepare(run, p).await);
        }
        let (events, trace_id, session, deadline, cancel) =
            (run.events, run.trace_id, run.session.clone(), run.deadline, run.cancel.clone());
        let mut running: FuturesOrdered<_> =
            prepared.iter().map(|p| self.execute(p, events, trace_id, &session, deadline, &cancel)).collect();
        let mut out = Vec::with_capacity(prepared.len());
        let mut i = 0;
        while let Some(executed) = running.next().await {
            out.push(self.finish(run, &prepared[i], executed).await);
            i += 1;
        }
        out
    }

    /// One call through the gateway, bounded by the run's deadline and its cancellation
    /// (dropping the call cancels it upstream), forwarding the tool's live artifact chunks.
    async fn execute(
        &self,
        p: &Prepared,
        events: &mpsc::Sender<AgentEvent>,
        trace_id: &str,
        session: &Arc<Session>,
        deadline: tokio::time::Instant,
        cancel: &CancellationToken,
    ) -> Executed {
        if let Some(why) = &p.call.invalid {
            return Executed::NotRun(why.clone());
        }
        let (progress, mut progress_rx) = Outbox::channel();
        let opts = CallOptions {
            trace_id: Some(trace_id.to_owned()),
            progress: Some(progress),
            progress_token: None,
            keep_original: p.keep_original,
            host: None,
        };
        let arguments = if p.call.arguments.is_object() { p.call.arguments.clone() } else { json!({}) };
        let call_fut = self.gateway.call_tool(session, &p.call.name, arguments, opts);
        tokio::pin!(call_fut);
        // Per stream of this call, from 0: two calls of one tool are told apart by call_id.
        let mut seqs: HashMap<String, u64> = HashMap::new();
        let outcome = loop {
            tokio::select! {
                out = &mut call_fut => break Ok(out),
                Some(line) = progress_rx.recv() => {
                    if let Some(ev) = live_chunk(&line, &mut seqs, p) {
                        let _ = events.send(ev).await;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => break Err(Cause::MaxWallTime),
                _ = cancel.cancelled() => break Err(Cause::Cancelled),
            }
        };
        let ended = Instant::now();
        while let Ok(line) = progress_rx.try_recv() {
            if let Some(ev) = live_chunk(&line, &mut seqs, p) {
                let _ = events.send(ev).await;
            }
        }
        match outcome {
            Ok(outcome) => Executed::Answered { outcome: Box::new(outcome), ended, seqs },
            Err(cause) => Executed::Stopped(cause),
        }
    }

    /// A call's end: its artifacts collected (the streamed fields sent as `artifact_chunk`s),
    /// its sources, the `step` ended event, and what the model reads.
    async fn finish(&self, run: &mut Run<'_>, p: &Prepared, executed: Executed) -> Done {
        let events = run.events;
        let step = |status, ended: Instant| AgentEvent::Step {
            node: p.call.name.clone(),
            status,
            latency_ms: ended.saturating_duration_since(p.started).as_secs_f64() * 1000.0,
            thought: p.thought.clone(),
            call_id: p.call_id.clone(),
        };
        let (outcome, ended, mut seqs) = match executed {
            Executed::NotRun(why) => {
                let _ = events.send(step(StepStatus::Error, Instant::now())).await;
                let text =
                    format!("error: {why}. Call {} again with arguments that are one valid JSON object.", run.names.api(&p.call.name));
                return Done { content: text.into(), is_error: true, value: None, stopped: None };
            }
            Executed::Stopped(cause) => {
                let _ = events.send(step(StepStatus::Error, Instant::now())).await;
                let text = format!("error: the call was cancelled: {}", cause.warning());
                return Done { content: text.into(), is_error: true, value: None, stopped: Some(cause) };
            }
            Executed::Answered { outcome, ended, seqs } => (outcome, ended, seqs),
        };
        let out = match *outcome {
            Ok(out) => out,
            Err(e) => {
                // The gateway's own refusal (no such tool, an upstream down): no tool result.
                let _ = events.send(step(StepStatus::Error, ended)).await;
                return Done { content: tool_error_text(&e).into(), is_error: true, value: None, stopped: None };
            }
        };
        let is_error = out.result.get("isError").and_then(Value::as_bool) == Some(true);
        let records = out.report.transform.as_ref().map(|r| r.artifacts.as_slice()).unwrap_or_default();
        for s in run.collector.collect(&p.call.name, p.ordinal, p.schema.as_ref(), records).await {
            let seq = seqs.entry(s.stream_id.clone()).or_insert(0);
            let ev = AgentEvent::ArtifactChunk {
                stream_id: s.stream_id,
                seq: *seq,
                chunk: s.chunk,
                done: true,
                artifact_type: s.artifact_type,
                call_id: p.call_id.clone(),
                tool: p.call.name.clone(),
                key: s.key,
            };
            *seq += 1;
            let _ = events.send(ev).await;
        }
        // What the tool returned, not the gateway's shortened copy: for sources and joins.
        let original: Option<Value> = (p.keep_original && !is_error)
            .then(|| {
                out.report.original.as_deref().filter(|o| o.len() <= SOURCES_SCAN_MAX_BYTES).and_then(|o| serde_json::from_str(o).ok())
            })
            .flatten();
        let shaped_structured = out.result.get("structuredContent").filter(|v| !v.is_null());
        if !is_error && p.schema.as_ref().is_some_and(crate::collector::produces_sources) {
            let structured = original.clone().and_then(structured_of).or_else(|| shaped_structured.cloned());
            run.collector.collect_sources(p.schema.as_ref(), structured.as_ref());
        }
        let content = crate::observe::observation(&out.result, p.schema.as_ref(), records);
        let value = if is_error {
            None
        } else if p.keep_original {
            Some(result_value(original, shaped_structured, &content))
        } else {
            shaped_structured.cloned()
        };
        let last = LastResult { tool: p.call.name.clone(), call_id: p.call_id.clone(), text: content.text(), value: value.clone() };
        if is_error {
            run.last_error = Some(last);
        } else {
            run.last_ok = Some(last);
        }
        let status = if is_error { StepStatus::Error } else { StepStatus::Ok };
        let _ = events.send(step(status, ended)).await;
        Done { content, is_error, value, stopped: None }
    }
}

/// Gives a call its id in the run (`c1`, `c2`, …) and its ordinal among its tool's calls (a
/// call that cannot run takes none), and sends its `step` started event.
async fn prepare(run: &mut Run<'_>, p: Pending) -> Prepared {
    run.tool_calls += 1;
    let call_id = format!("c{}", run.tool_calls);
    let ordinal = if p.call.invalid.is_some() {
        0
    } else {
        let n = run.ordinals.entry(p.call.name.clone()).or_insert(0);
        *n += 1;
        *n
    };
    let schema = run.schemas.get(&p.call.name).filter(|s| s.is_object()).cloned();
    let keep_original = p.keep_original || schema.as_ref().is_some_and(crate::collector::produces_sources);
    let streams: HashMap<String, String> =
        schema.as_ref().map(crate::collector::stream_marks).unwrap_or_default().into_iter().map(|(field, id)| (id, field)).collect();
    let started = Instant::now();
    let _ = run
        .events
        .send(AgentEvent::Step {
            node: p.call.name.clone(),
            status: StepStatus::Started,
            latency_ms: 0.0,
            thought: p.thought.clone(),
            call_id: call_id.clone(),
        })
        .await;
    Prepared { call: p.call, call_id, ordinal, thought: p.thought, schema, keep_original, streams, started }
}

/// Tells the client to drop the answer text streamed since the last reset (`reason`:
/// `tool_calls`, `repair`, `replaced`, `partial`); nothing when none streamed.
async fn reset(run: &mut Run<'_>, reason: &str) {
    if run.shown.is_empty() {
        return;
    }
    run.shown.clear();
    let _ = run.events.send(AgentEvent::AnswerReset { stream_id: "answer".into(), seq: run.chunk_seq, reason: reason.to_owned() }).await;
}

/// A result as a join is handed it: the tool's own structured result, else its text blocks
/// (both from what it returned, when that was kept and is at most 32 MiB), else the shaped
/// structured content, else what the model reads (references in place of binaries).
fn result_value(original: Option<Value>, shaped_structured: Option<&Value>, content: &Content) -> Value {
    if let Some(o) = original {
        let texts: Vec<&str> = o
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        let text = texts.join("\n");
        if let Some(v) = structured_of(o) {
            return v;
        }
        if !text.is_empty() {
            return Value::String(text);
        }
    }
    shaped_structured.cloned().unwrap_or_else(|| Value::String(content.text()))
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
fn live_chunk(line: &[u8], seqs: &mut HashMap<String, u64>, p: &Prepared) -> Option<AgentEvent> {
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
    let field = p.streams.get(&stream_id).cloned().unwrap_or_else(|| stream_id.clone());
    Some(AgentEvent::ArtifactChunk {
        stream_id,
        seq,
        chunk,
        done: c.get("done").and_then(Value::as_bool).unwrap_or(false),
        artifact_type,
        call_id: p.call_id.clone(),
        tool: p.call.name.clone(),
        key: crate::collector::artifact_key(&field, p.ordinal),
    })
}

/// Fields of a structured result that hold its answer in a sentence, read first by a fallback
/// answer.
const ANSWER_FIELDS: &[&str] = &["raw_answer", "answer", "summary", "text", "result", "message"];

/// The answer of a run that ends without one: it names the last tool result (a tool's own,
/// never the planner's note about a call it could not make) and quotes it, its answer-like
/// field when it has one.
fn fallback_answer(last: Option<&LastResult>) -> String {
    let Some(r) = last else {
        return "I could not complete the answer, and no tool returned anything.".to_owned();
    };
    let field = r.value.as_ref().and_then(|v| ANSWER_FIELDS.iter().find_map(|k| v.get(*k)?.as_str()).filter(|t| !t.trim().is_empty()));
    let quoted = field.unwrap_or(&r.text);
    let quote: String = quoted.chars().take(FALLBACK_QUOTE_CHARS).collect();
    let more = if quoted.chars().count() > FALLBACK_QUOTE_CHARS { "…" } else { "" };
    format!("I could not complete the answer. The last result, from {} (call {}), was: {quote}{more}", r.tool, r.call_id)
}
