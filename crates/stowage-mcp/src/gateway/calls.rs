//! Tool calls: the MCP `tools/call`, the in-process API on the same path, the answer shaped
//! by the [`crate::shape`]r, and the events every call publishes with the shaped answer's
//! figures.
//!
//! One path for every caller: a client's `tools/call` and an in-process
//! [`Gateway::call_tool`] both go through [`Gateway::run_tool_call`], so the agent planner and
//! the playground see exactly what an MCP client would, and nothing heavier.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stowage_transform::TransformReport;

use super::Gateway;
use crate::error::GatewayError;
use crate::events::{CallOutcome, EventOwner, GatewayEvent};
use crate::jsonrpc::{Message, Raw};
use crate::outbox::Outbox;
use crate::session::Session;
use crate::shape::{CallContext, FailureKind, Job, Shaped};

/// How an in-process caller wants a call made.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Recorded with the call's artifacts, so the per-trace retention limits apply to a run.
    pub trace_id: Option<String>,
    /// Where the tool's progress notifications go (with the token `progress_token`, or a
    /// gateway-chosen one).
    pub progress: Option<Outbox>,
    /// The caller's own `progressToken`, echoed in the notifications; `None`: the gateway picks one.
    pub progress_token: Option<Value>,
    /// Keep the upstream's own result text in [`CallReport::original`] (the playground shows
    /// it beside the rewrite). Off by default: it costs a copy of the whole result.
    pub keep_original: bool,
    /// Shape the answer for this host profile (by name, e.g. `claude-code`) instead of the
    /// session's: the playground shows what each host's model would receive.
    pub host: Option<String>,
}

/// What one tool call came to, beside the result.
#[derive(Debug, Clone)]
pub struct CallReport {
    /// The call's number in the event stream.
    pub call: u64,
    /// The tool's name as the client called it.
    pub tool: String,
    /// The upstream that answered; `stowage` for the gateway's own tools.
    pub upstream: String,
    /// From the call's start to the shaped answer, upstream time included.
    pub latency: Duration,
    /// Bytes of the result's JSON as the upstream sent it (0 for a refused call).
    pub bytes_in: u64,
    /// Bytes of the result's JSON as sent to the client.
    pub bytes_out: u64,
    /// o200k tokens the model would have read without the gateway.
    pub tokens_in: u64,
    /// o200k tokens the model reads of the answer as sent (images counted).
    pub tokens_out: u64,
    /// The transform's own report (artifacts with their pointers, layers, warnings, clamp);
    /// `None` for the gateway's own tools and for a failed offload.
    pub transform: Option<TransformReport>,
    /// The upstream's result as it came, when [`CallOptions::keep_original`] asked for it and
    /// the call reached an upstream.
    pub original: Option<String>,
}

/// The result of an in-process tool call, as an MCP client would have received it.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    /// The `tools/call` result as sent (an `isError` result for a tool error).
    pub result: Value,
    /// What the call came to: sizes, tokens, latency, artifacts.
    pub report: CallReport,
}

/// What the shared call path returns: a rewritten result, or an upstream message relayed as
/// it came (its JSON-RPC error, or a task handle).
enum CallReply {
    Rewritten(Value, CallReport),
    Relayed(Message),
}

/// Publishes `ToolCallFinished` when a call ends without reaching its normal end (the client
/// cancelled it, or went away): every started call is finished in the event stream.
struct FinishGuard<'a> {
    gw: &'a Gateway,
    call: u64,
    owner: EventOwner,
    tool: String,
    upstream: String,
    /// The host profile the call was made under (a label on the call metrics).
    host: String,
    started: Instant,
    armed: bool,
}

impl FinishGuard<'_> {
    /// A call refused before it reached its upstream (blob chaining's inputs or slots): it
    /// finishes as a tool error and the error is its result; nothing was sent or measured.
    fn refuse(&mut self, e: crate::local_tools::ToolError) -> CallReply {
        self.finish(CallOutcome::ToolError, Some(e.to_string()), [0; 4], 0);
        let report = CallReport {
            call: self.call,
            tool: self.tool.clone(),
            upstream: self.upstream.clone(),
            latency: self.started.elapsed(),
            bytes_in: 0,
            bytes_out: 0,
            tokens_in: 0,
            tokens_out: 0,
            transform: None,
            original: None,
        };
        CallReply::Rewritten(e.into_result(), report)
    }

    fn finish(&mut self, outcome: CallOutcome, error: Option<String>, sizes: [u64; 4], artifacts: usize) {
        self.armed = false;
        let [bytes_in, bytes_out, tokens_in, tokens_out] = sizes;
        self.gw.parts.events.publish(GatewayEvent::ToolCallFinished {
            call: self.call,
            owner: self.owner.clone(),
            tool: self.tool.clone(),
            upstream: self.upstream.clone(),
            host: self.host.clone(),
            latency: self.started.elapsed(),
            outcome,
            error,
            bytes_in,
            bytes_out,
            tokens_in,
            tokens_out,
            artifacts,
        });
    }
}

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.finish(CallOutcome::Cancelled, None, [0; 4], 0);
        }
    }
}

impl Gateway {
    /// Calls tool `name` (as listed by [`Gateway::list_tools`]) for `session`, in process,
    /// through the same router, upstream session, pipeline and store as a client's
    /// `tools/call`. An upstream's JSON-RPC error comes back as [`GatewayError::Refused`].
    pub async fn call_tool(
        self: &Arc<Self>,
        session: &Arc<Session>,
        name: &str,
        arguments: Value,
        opts: CallOptions,
    ) -> Result<ToolOutcome, GatewayError> {
        let mut params = json!({"name": name, "arguments": arguments});
        let outbox = match opts.progress {
            Some(o) => {
                let token = opts
                    .progress_token
                    .unwrap_or_else(|| json!(format!("in-process-{}", self.clients.next_token.fetch_add(1, Ordering::Relaxed))));
                params["_meta"] = json!({"progressToken": token});
                o
            }
            // Nobody listens: notifications are dropped at once.
            None => Outbox::with_capacity(1).0,
        };
        let host = match opts.host.as_deref() {
            Some(name) => Some(self.hosts().by_name(name).ok_or_else(|| GatewayError::UnknownHost(name.to_owned()))?),
            None => None,
        };
        match self.run_tool_call(session, params, &outbox, opts.trace_id, opts.keep_original, host).await? {
            CallReply::Rewritten(result, report) => Ok(ToolOutcome { result, report }),
            CallReply::Relayed(m) => {
                let e: Value = m.error.as_ref().and_then(|e| serde_json::from_str(e.get()).ok()).unwrap_or(Value::Null);
                let code = e.get("code").and_then(Value::as_i64).unwrap_or(crate::jsonrpc::code::INTERNAL_ERROR);
                let message = e.get("message").and_then(Value::as_str).unwrap_or("no message").to_owned();
                Err(GatewayError::Refused { tool: name.to_owned(), code, message })
            }
        }
    }

    /// A client's `tools/call`.
    pub(super) async fn call_tool_message(
        self: &Arc<Self>,
        session: &Arc<Session>,
        params: Value,
        outbox: &Outbox,
    ) -> Result<Message, GatewayError> {
        Ok(match self.run_tool_call(session, params, outbox, None, false, None).await? {
            CallReply::Rewritten(result, _) => Message::response(Value::Null, &result),
            CallReply::Relayed(m) => m,
        })
    }

    async fn run_tool_call(
        self: &Arc<Self>,
        session: &Arc<Session>,
        mut params: Value,
        outbox: &Outbox,
        trace: Option<String>,
        keep_original: bool,
        host: Option<Arc<crate::hosts::HostProfile>>,
    ) -> Result<CallReply, GatewayError> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
        named_arguments(&name, &mut params)?;
        let host = host.unwrap_or_else(|| self.host_profile(session));
        let mut scope = session.scope.clone();
        if trace.is_some() {
            scope.trace_id = trace;
        }
        #[cfg(feature = "test-hooks")]
        if self.life.fault.lock().as_deref() == Some(name.as_str()) {
            panic!("fault injected on purpose in tool {name}");
        }
        let start = CallStart { id: self.clients.next_call.fetch_add(1, Ordering::Relaxed), name, host, scope };
        if let Some(reply) = self.call_own_tool(session, &params, outbox, &start).await {
            return Ok(reply);
        }
        // An upstream's own tool first; a generated resource tool only by a name none has; a
        // name no list has, but which names an upstream, is that upstream's to answer (an
        // error result or a JSON-RPC error, as it would answer a client directly; a tool it
        // has but did not list, it runs).
        let tool = match self.catalog_for(session).tool(&start.name).cloned() {
            Some(tool) => tool,
            None => match self.resource_tool(&start.name) {
                Some((u, op)) => {
                    let started = Instant::now();
                    let args = params.get("arguments").cloned().unwrap_or(json!({}));
                    let result = self.call_resource_tool(session, u, op, &args, outbox).await;
                    let upstream = self.upstreams[u].name().to_owned();
                    return Ok(self.answered_here(&start, upstream, started, result).await);
                }
                None => self.unlisted(&start.name).ok_or_else(|| GatewayError::UnknownTool(start.name.clone()))?,
            },
        };
        self.call_upstream_tool(session, params, outbox, keep_original, start, tool).await
    }

    /// The gateway's own tools (the apps' tools, `artifact_collect`, the readers), answered
    /// here; `None` for any other name.
    async fn call_own_tool(
        self: &Arc<Self>,
        session: &Arc<Session>,
        params: &Value,
        outbox: &Outbox,
        start: &CallStart,
    ) -> Option<CallReply> {
        let (name, host, scope) = (start.name.as_str(), &start.host, &start.scope);
        let local = self.local_tools();
        let apps = self.apps_for(session).filter(|_| crate::apps::APP_TOOLS.contains(&name)).zip(local.readers());
        let collect = local.readers().filter(|_| name == crate::local_tools::collect::ARTIFACT_COLLECT_TOOL);
        if apps.is_none() && collect.is_none() && !local.handles(name) {
            // An upstream's arguments go on untouched (and uncopied).
            return None;
        }
        let started = Instant::now();
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let result = if let Some((apps, store)) = apps {
            let result = apps.call(name, scope, &args, store, self.link_service()).await;
            if name != crate::apps::ARTIFACT_VIEW_TOOL {
                // An app-only tool: its answer goes to the view, never to a model.
                let shaped = self.parts.shaper.shape_app(result);
                return Some(CallReply::Rewritten(
                    shaped.value,
                    local_report(start.id, name.to_owned(), "stowage".into(), started, &shaped.figures),
                ));
            }
            result
        } else if let Some(store) = collect {
            // The collection calls the caller's own tools, so it runs here, beside them.
            let hints = crate::local_tools::ReadHints::for_host(host);
            let pages = super::collect::CallerPages { gw: self, session, outbox, host: host.name.clone() };
            let result = match crate::local_tools::collect::parse(&args) {
                Ok(request) => crate::local_tools::collect::collect(&pages, store, scope, request, &hints).await,
                Err(e) => Err(e),
            };
            result.unwrap_or_else(crate::local_tools::ToolError::into_result)
        } else {
            let hints = crate::local_tools::ReadHints::for_host(host);
            local.call(name, scope, &args, hints).await.expect("handles() said it is a local tool")
        };
        Some(self.answered_here(start, "stowage".into(), started, result).await)
    }

    /// An upstream tool's call: its blob inputs filled, forwarded in the caller's session,
    /// and its result shaped for the caller's host.
    async fn call_upstream_tool(
        self: &Arc<Self>,
        session: &Arc<Session>,
        mut params: Value,
        outbox: &Outbox,
        keep_original: bool,
        start: CallStart,
        tool: crate::catalog::Exposed,
    ) -> Result<CallReply, GatewayError> {
        let CallStart { id: call, name, host, scope } = start;
        let owner = EventOwner::from(&scope);
        let upstream = self.upstreams[tool.upstream].name().to_owned();
        self.parts.events.publish(GatewayEvent::ToolCallStarted {
            call,
            owner: owner.clone(),
            tool: name.clone(),
            upstream: upstream.clone(),
        });
        let mut guard = FinishGuard {
            gw: self,
            call,
            owner: owner.clone(),
            tool: name.clone(),
            upstream: upstream.clone(),
            host: host.name.clone(),
            started: Instant::now(),
            armed: true,
        };
        // Blob chaining: artifact URIs in the arguments become what this tool takes. The
        // materialized inputs (files of `path` mode) live until this call returns.
        let chain = match self.translate_chain_inputs(&name, &tool, &scope, &mut params).await {
            Ok(m) => {
                if !m.filled.is_empty() {
                    let inputs = m.filled.clone();
                    self.parts.events.publish(GatewayEvent::InputsFilled { call, owner: owner.clone(), tool: name.clone(), inputs });
                }
                m
            }
            Err(e) => {
                tracing::info!(target: "stowage::call", upstream = %upstream, tool = %name, error = %e, "tool call refused: inputs");
                return Ok(guard.refuse(e));
            }
        };
        params["name"] = Value::String(tool.original.clone());
        let task_requested = params.get("task").is_some();
        if task_requested && !chain.slots.is_empty() {
            // A task's result comes back through tasks/result, long after this call's slots end
            // with it: refused plainly rather than losing the tool's output.
            let e = crate::local_tools::ToolError::bad_request(format!(
                "{name} writes output blobs, which the gateway cannot report for a task-augmented call yet; call it without \"task\""
            ));
            return Ok(guard.refuse(e));
        }
        let need = super::forward::need_of_call(&tool.def, &params);
        let mut reply = match self.forward_as(session, tool.upstream, "tools/call", params, outbox, need).await {
            Ok(r) => r,
            Err(e) => {
                guard.finish(CallOutcome::Error, Some(e.to_string()), [0; 4], 0);
                tracing::info!(target: "stowage::call", upstream = %upstream, tool = %name, duration_ms = ms(guard.started), error = %e, "tool call failed");
                return Err(e);
            }
        };
        let Some(raw) = reply.result.take() else {
            let error = reply.error.as_ref().map(|e| e.get().to_owned());
            guard.finish(CallOutcome::Error, error, [0; 4], 0);
            return Ok(CallReply::Relayed(reply));
        };
        // A task handle (the call runs on as a task): relayed as it is, and its id remembered
        // so tasks/result finds its way back and is rewritten then.
        if task_requested && let Some(task_id) = task_id_of(&raw) {
            self.remember_task(&task_id, tool.upstream, session, &tool.original, tool.output_schema.clone());
            guard.finish(CallOutcome::Ok, None, [raw.len() as u64, raw.len() as u64, 0, 0], 0);
            reply.result = Some(raw);
            return Ok(CallReply::Relayed(reply));
        }
        let ctx = CallContext { tool: tool.original.clone(), upstream: upstream.clone(), scope, output_schema: tool.output_schema.clone() };
        let original = keep_original.then(|| raw.get().to_owned());
        let job = self.job(&ctx, &host);
        let mut draft = self.parts.shaper.prepare(job, raw.into_string()).await;
        // The gateway's additions go in after the offload (the pipeline never sees, or
        // offloads, what is injected) and before the final limit (which holds for them too).
        if !chain.slots.is_empty() || !chain.filled.is_empty() {
            crate::chaining::inject(self.link_service(), &chain.slots, &chain.filled, draft.value_mut());
        }
        self.auto_read_links(session, &mut draft, outbox).await;
        let shaped = self.parts.shaper.finish(job, draft).await;
        let (result, mut report) = self.publish_shaped(call, &owner, &name, &ctx, shaped, &mut guard);
        report.original = original;
        Ok(CallReply::Rewritten(result, report))
    }

    /// Shapes one tool result (of `tasks/result`) for `session`, publishing what happened.
    pub(super) async fn shape_tool_result(self: &Arc<Self>, session: &Session, ctx: CallContext, raw: Raw) -> Value {
        let call = self.clients.next_call.fetch_add(1, Ordering::Relaxed);
        let owner = EventOwner::from(&session.scope);
        let name = ctx.tool.clone();
        self.parts.events.publish(GatewayEvent::ToolCallStarted {
            call,
            owner: owner.clone(),
            tool: name.clone(),
            upstream: ctx.upstream.clone(),
        });
        let host = self.host_profile(session);
        let mut guard = FinishGuard {
            gw: self,
            call,
            owner: owner.clone(),
            tool: name.clone(),
            upstream: ctx.upstream.clone(),
            host: host.name.clone(),
            started: Instant::now(),
            armed: true,
        };
        let shaped = self.parts.shaper.shape(self.job(&ctx, &host), raw.into_string()).await;
        self.publish_shaped(call, &owner, &name, &ctx, shaped, &mut guard).0
    }

    /// What the shaper needs of the gateway for one answer: the call and the host.
    pub(super) fn job<'a>(&'a self, ctx: &'a CallContext, host: &'a crate::hosts::HostProfile) -> Job<'a> {
        Job { ctx, host }
    }

    /// Publishes what shaping a tool result came to (its artifacts, a final limit that acted,
    /// store failures, the call's end with the shaped answer's figures) and returns the answer
    /// with its report.
    fn publish_shaped(
        &self,
        call: u64,
        owner: &EventOwner,
        name: &str,
        ctx: &CallContext,
        shaped: Shaped,
        guard: &mut FinishGuard<'_>,
    ) -> (Value, CallReport) {
        let Shaped { value, report, error, figures } = shaped;
        if let Some(report) = &report {
            for a in &report.artifacts {
                self.parts.events.publish(GatewayEvent::offloaded(call, owner.clone(), name, a));
            }
            // Safety-net values the store refused were cut or withheld instead: the call went on.
            for w in report.store_failures() {
                self.parts.events.publish(GatewayEvent::StoreFailed {
                    call,
                    owner: owner.clone(),
                    tool: name.to_owned(),
                    fatal: false,
                    message: w.message.clone(),
                });
            }
        }
        if figures.fitted {
            self.parts.events.publish(GatewayEvent::FinalFit {
                call,
                owner: owner.clone(),
                tool: name.to_owned(),
                bytes_from_upstream: figures.bytes_in,
                bytes_out: figures.bytes_out,
            });
        }
        if let Some(e) = error.as_ref().filter(|e| e.kind != FailureKind::Invalid) {
            self.parts.events.publish(GatewayEvent::StoreFailed {
                call,
                owner: owner.clone(),
                tool: name.to_owned(),
                fatal: true,
                message: e.to_string(),
            });
        }
        let outcome = match &error {
            Some(e) if e.kind == FailureKind::Invalid => CallOutcome::Error,
            _ if value.get("isError").and_then(Value::as_bool) == Some(true) => CallOutcome::ToolError,
            _ => CallOutcome::Ok,
        };
        let sizes = [figures.bytes_in, figures.bytes_out, figures.tokens_in, figures.tokens_out];
        guard.finish(outcome, error.as_ref().map(ToString::to_string), sizes, figures.artifacts);
        tracing::info!(
            target: "stowage::call",
            upstream = %ctx.upstream, tool = %name, duration_ms = ms(guard.started),
            bytes_in = figures.bytes_in, bytes_out = figures.bytes_out, tokens_out = figures.tokens_out, artifacts = figures.artifacts,
            outcome = outcome.as_str(), "tool call"
        );
        if let Some(h) = value.pointer("/_meta/io.stowage~1transform/host") {
            tracing::debug!(target: "stowage::hosts", host = %guard.host, tool = %ctx.tool, previews = figures.previews,
                fitted = figures.fitted, tokens = figures.tokens_out, text_bytes = figures.measure.text_bytes, stats = %h, "answer shaped for the host");
        }
        let report = CallReport {
            call,
            tool: name.to_owned(),
            upstream: ctx.upstream.clone(),
            latency: guard.started.elapsed(),
            bytes_in: figures.bytes_in,
            bytes_out: figures.bytes_out,
            tokens_in: figures.tokens_in,
            tokens_out: figures.tokens_out,
            transform: report,
            original: None,
        };
        (value, report)
    }

    /// The reply of a call the gateway answered itself (its own tools, the generated resource
    /// tools, the apps' tools): through the shaper for the caller's host, which measures it.
    async fn answered_here(&self, start: &CallStart, upstream: String, started: Instant, result: Value) -> CallReply {
        let ctx = CallContext { tool: start.name.clone(), upstream: upstream.clone(), scope: start.scope.clone(), output_schema: None };
        let shaped = self.parts.shaper.shape_local(self.job(&ctx, &start.host), result).await;
        let report = local_report(start.id, start.name.clone(), upstream, started, &shaped.figures);
        CallReply::Rewritten(shaped.value, report)
    }

    /// Applies tool `name`'s input rule (`[gateway.chaining.inputs]`), or its detected inputs,
    /// to the call's arguments; a tool with neither keeps its arguments as written.
    async fn translate_chain_inputs(
        &self,
        name: &str,
        tool: &crate::catalog::Exposed,
        scope: &stowage_core::ArtifactScope,
        params: &mut Value,
    ) -> Result<ChainCall, crate::local_tools::ToolError> {
        let buckets = crate::chaining::StoreBuckets(self.parts.artifacts.as_ref());
        let env = crate::chaining::InputEnv {
            store: self.parts.artifacts.as_ref(),
            signer: self.link_service().map(stowage_http::LinkService::signer),
            config: &self.config.chaining,
            s3: &buckets,
        };
        let mut chain = ChainCall::default();
        // Declared blobs first: a tool that says which fields are blobs gets exactly those.
        if let Some(fields) = &tool.blobs {
            let arguments = params.as_object_mut().map(|p| p.entry("arguments").or_insert_with(|| json!({})));
            if let Some(arguments) = arguments {
                chain.slots = crate::chaining::translate_blobs(&env, self.link_service(), name, fields, scope, arguments).await?;
                chain.links = self.link_service().filter(|_| !chain.slots.is_empty()).cloned();
            }
            return Ok(chain);
        }
        let Some(arguments) = params.get_mut("arguments") else { return Ok(chain) };
        let upstream = self.upstreams[tool.upstream].name();
        let limits =
            crate::chaining::Limits { upstream, max_request_bytes: self.config.servers.get(upstream).and_then(|s| s.max_request_bytes) };
        let done = crate::chaining::translate_call(&env, name, tool.inputs.as_deref(), scope, arguments, &limits).await?;
        (chain._materialized, chain.filled) = (done.materialized, done.filled);
        Ok(chain)
    }

    /// Runs an upstream's payload that is not a result (log data, a progress message, error
    /// data) through the pipeline under `session`'s scope, so base64 and huge strings leave it
    /// like they leave results. A store failure drops the payload's content rather than let it
    /// through: never a fallback to inline base64.
    pub(super) async fn scrub(&self, session: &Session, upstream: &str, what: &str, payload: Value) -> Value {
        let ctx = CallContext { tool: what.to_owned(), upstream: upstream.to_owned(), scope: session.scope.clone(), output_schema: None };
        match self.parts.shaper.offload_payload(&ctx, payload.to_string()).await {
            Ok(off) => {
                for a in &off.report.artifacts {
                    self.parts.events.publish(GatewayEvent::offloaded(0, EventOwner::from(&session.scope), what, a));
                }
                off.value
            }
            Err(e) => {
                self.parts.events.publish(GatewayEvent::StoreFailed {
                    call: 0,
                    owner: EventOwner::from(&session.scope),
                    tool: what.to_owned(),
                    fatal: true,
                    message: e.to_string(),
                });
                // The store's message may name a server path (a temp file on a full disk): it
                // goes to the event bus and the log, never to the client.
                tracing::warn!(target: "stowage::store", upstream, "could not store a heavy {what}: {}", e.message);
                json!({"stowage": format!("{}: the {what} from upstream {upstream} was too heavy to relay and the artifact store could not take it (full or unavailable)", e.code)})
            }
        }
    }

    /// A relayed JSON-RPC error whose `data` is large goes through [`Gateway::scrub`].
    pub(super) async fn scrub_error(&self, session: &Session, upstream: &str, reply: &mut Message) {
        let Some(err) = reply.error.as_ref().filter(|e| e.len() >= crate::attribution::SCRUB_FROM) else { return };
        let Ok(mut v) = serde_json::from_str::<Value>(err.get()) else { return };
        if let Some(data) = v.get_mut("data").map(Value::take) {
            v["data"] = self.scrub(session, upstream, "error", data).await;
        }
        reply.error = Some(crate::jsonrpc::to_raw(&v));
    }
}

/// The gateway as the upstream readers' [`crate::attribution::Scrubber`] (weakly held: the readers
/// live inside the gateway).
pub(super) struct GatewayScrubber(pub(super) std::sync::Weak<Gateway>);

impl crate::attribution::Scrubber for GatewayScrubber {
    fn scrub<'a>(
        &'a self,
        session: &'a Session,
        upstream: &'a str,
        payload: Value,
    ) -> std::pin::Pin<Box<dyn Future<Output = Value> + Send + 'a>> {
        Box::pin(async move {
            match self.0.upgrade() {
                Some(gw) => gw.scrub(session, upstream, "notification", payload).await,
                None => payload,
            }
        })
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// What blob chaining keeps for one call: the files of `path` inputs (removed when this is
/// dropped, when the call returns) and the upload slots to report on afterwards.
#[derive(Default)]
struct ChainCall {
    _materialized: crate::chaining::Materialized,
    /// What detected inputs were filled with (reported in the result's `_meta` and an event).
    filled: Vec<crate::chaining::Filled>,
    slots: Vec<crate::chaining::OpenSlot>,
    links: Option<stowage_http::LinkService>,
}

impl Drop for ChainCall {
    /// However the call ended (an upstream error, a crash, a cancellation), its slots end with
    /// it: nothing written after the call becomes an artifact nobody was told about. Slots the
    /// result already reported are closed by then, and closing them again does nothing.
    fn drop(&mut self) {
        if let Some(links) = &self.links {
            for s in &self.slots {
                links.close_slot(&s.slot);
            }
        }
    }
}

/// The `task.taskId` of a CreateTaskResult (a result with a task and no content).
fn task_id_of(raw: &Raw) -> Option<String> {
    // Task handles are small; a big result is a real result, not a handle.
    if raw.len() > 64 * 1024 {
        return None;
    }
    let v: Value = serde_json::from_str(raw.get()).ok()?;
    if v.get("content").is_some() {
        return None;
    }
    v.pointer("/task/taskId").and_then(Value::as_str).map(str::to_owned)
}

/// A call as it starts: its number (the events'), the tool's name as the caller gave it,
/// the caller's host profile and its artifact scope.
struct CallStart {
    id: u64,
    name: String,
    host: Arc<crate::hosts::HostProfile>,
    scope: stowage_core::ArtifactScope,
}

/// A tool's inputs are named: nothing else is forwarded, rewritten for chaining or handed to
/// the gateway's own tools (`null` is taken as no arguments).
fn named_arguments(name: &str, params: &mut Value) -> Result<(), GatewayError> {
    match params.get("arguments") {
        Some(Value::Null) => drop(params.as_object_mut().map(|p| p.remove("arguments"))),
        Some(args) if !args.is_object() => {
            let kind = match args {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                _ => "a boolean",
            };
            return Err(GatewayError::InvalidParams(format!(
                "tools/call arguments must be an object of {name}'s named inputs ({{\"input\": value}}), not {kind}"
            )));
        }
        _ => {}
    }
    Ok(())
}

/// The report of a call the gateway answered itself.
fn local_report(call: u64, tool: String, upstream: String, started: Instant, f: &crate::shape::Figures) -> CallReport {
    CallReport {
        call,
        tool,
        upstream,
        latency: started.elapsed(),
        bytes_in: f.bytes_in,
        bytes_out: f.bytes_out,
        tokens_in: f.tokens_in,
        tokens_out: f.tokens_out,
        transform: None,
        original: None,
    }
}
