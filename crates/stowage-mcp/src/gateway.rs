//! The gateway core: answers what it owns (initialize, discover, lists), routes the rest to
//! the right upstream with ids and progress tokens mapped, rewrites tool results, and relays
//! what upstreams initiate back to the right client.
//!
//! Transports ([`crate::downstream`]) call [`Gateway::handle`] for every client message with
//! an [`Outbox`] for messages tied to that request (progress, sampling). Routing of
//! upstream-initiated requests: a stdio upstream is shared by all sessions and does not say
//! which request a sampling/elicitation request belongs to, so it goes to the session with the
//! most recent call in flight to that upstream (exact whenever one client is active).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::routes::CallRoutes;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{GatewayConfig, PrefixMode, UpstreamSpec};
use crate::inputs::{Exchange, Exchanges, Step};
use crate::jsonrpc::{Id, Kind, Message, code, to_raw};
use crate::rewrite::{CallContext, Rewriter};
use crate::router::{Catalog, UpstreamLists};
use crate::session::{Outbox, Session};
use crate::upstream::{CallError, Conn, DemoFactory, Upstream, UpstreamEnv, UpstreamEvent, result_value};

/// Protocol versions offered to clients, oldest first. 2026-07-28 is the stateless revision
/// (answered through `server/discover`); the others through `initialize`.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];
const LATEST_HANDSHAKE: &str = "2025-11-25";
const META_PREFIX: &str = "io.modelcontextprotocol/";
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The running gateway.
pub struct Gateway {
    pub config: GatewayConfig,
    pub upstreams: Vec<Arc<Upstream>>,
    catalog: RwLock<Arc<Catalog>>,
    lists: Mutex<Vec<UpstreamLists>>,
    sessions: Mutex<Vec<Weak<Session>>>,
    routes: Arc<CallRoutes>,
    next_token: AtomicU64,
    rewriter: Rewriter,
    prefix: bool,
    shutdown: CancellationToken,
    ready: tokio::sync::watch::Sender<usize>,
    /// Fresh signed links for the `artifact_url` tool; unset over stdio (no HTTP listener).
    links: std::sync::OnceLock<stowage_http::LinkService>,
    /// Open `subscriptions/listen` streams (2026-07-28 clients).
    listeners: Mutex<Vec<Arc<Listener>>>,
    /// Interactive requests of 2026-07-28 clients waiting for their retry with input.
    exchanges: Arc<Exchanges>,
}

/// One `subscriptions/listen` stream: what its client asked for, and where it goes.
struct Listener {
    /// The listen request's id, stamped on every frame as the subscription id.
    id: Value,
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: HashSet<String>,
    outbox: Outbox,
}

impl Listener {
    fn wants(&self, method: &str, uri: Option<&str>) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => uri.is_some_and(|u| self.uris.contains(u)),
            _ => false,
        }
    }

    /// Sends `msg` tagged with this stream's subscription id.
    fn send(&self, msg: &Message) {
        let mut params = msg.params_value();
        if !params.is_object() {
            params = json!({});
        }
        params["_meta"][SUBSCRIPTION_ID] = self.id.clone();
        let method = msg.method.as_deref().unwrap_or_default();
        let _ = self.outbox.send(Message::notification(method, Some(&params)).to_line());
    }
}

impl Gateway {
    /// Starts every upstream's supervisor and the event loop.
    pub fn start(config: GatewayConfig, specs: Vec<UpstreamSpec>, rewriter: Rewriter, demo: Option<DemoFactory>) -> Arc<Gateway> {
        let shutdown = CancellationToken::new();
        let (tx, rx) = mpsc::unbounded_channel();
        let backoff = (
            Duration::from_millis(config.restart_backoff_initial_ms.max(10)),
            Duration::from_millis(config.restart_backoff_max_ms.max(config.restart_backoff_initial_ms.max(10))),
        );
        let prefix = match config.prefix {
            PrefixMode::Always => true,
            PrefixMode::Never => false,
            PrefixMode::Auto => specs.len() > 1,
        };
        let routes = Arc::new(CallRoutes::default());
        let env = UpstreamEnv {
            events: tx,
            routes: routes.clone(),
            shutdown: shutdown.clone(),
            max_message_bytes: config.max_message_bytes,
            backoff,
            demo,
        };
        let upstreams: Vec<_> = specs.into_iter().enumerate().map(|(i, spec)| Upstream::new(i, spec, env.clone())).collect();
        let lists = upstreams.iter().map(|u| UpstreamLists { name: u.name().to_owned(), ..Default::default() }).collect();
        let gw = Arc::new(Gateway {
            config,
            upstreams,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            lists: Mutex::new(lists),
            sessions: Mutex::new(Vec::new()),
            routes,
            next_token: AtomicU64::new(1),
            rewriter,
            prefix,
            shutdown,
            ready: tokio::sync::watch::channel(0).0,
            links: std::sync::OnceLock::new(),
            listeners: Mutex::new(Vec::new()),
            exchanges: Arc::default(),
        });
        for u in &gw.upstreams {
            tokio::spawn(u.clone().supervise());
        }
        tokio::spawn(event_loop(Arc::downgrade(&gw), rx));
        gw
    }

    /// Waits until every upstream has connected and listed its tools once, or `timeout`.
    /// Returns how many did.
    pub async fn wait_ready(&self, timeout: Duration) -> usize {
        let n = self.upstreams.len();
        let mut rx = self.ready.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|r| *r >= n)).await;
        *rx.borrow()
    }

    /// Enables the gateway's own `artifact_url` tool.
    pub fn set_link_service(&self, links: stowage_http::LinkService) {
        let _ = self.links.set(links);
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap().clone()
    }

    /// Stops supervisors and kills every upstream.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
        for u in &self.upstreams {
            u.close();
        }
    }

    /// A new session; `notify` is its general stream for messages not tied to a request.
    pub fn open_session(&self, scope: Option<stowage_core::ArtifactScope>, notify: Option<Outbox>) -> Arc<Session> {
        let s = Arc::new(Session::new(scope, notify));
        let mut sessions = self.sessions.lock().unwrap();
        sessions.retain(|w| w.strong_count() > 0);
        sessions.push(Arc::downgrade(&s));
        metrics::gauge!("stowage_sessions").set(sessions.len() as f64);
        s
    }

    fn live_sessions(&self) -> Vec<Arc<Session>> {
        self.sessions.lock().unwrap().iter().filter_map(Weak::upgrade).collect()
    }

    /// Handles one message from a client. Returns the response to send, if any.
    pub async fn handle(self: &Arc<Self>, session: &Arc<Session>, msg: Message, outbox: &Outbox) -> Option<Message> {
        match msg.kind() {
            Kind::Response => {
                session.resolve(msg);
                None
            }
            Kind::Notification => {
                self.notification(session, msg);
                None
            }
            Kind::Request => {
                let id = msg.id.clone().expect("a request has an id");
                let method = msg.method.clone().unwrap_or_default();
                let modern = is_modern(session, &msg);
                let cancel = session.begin(&id);
                let interactive = modern && matches!(method.as_str(), "tools/call" | "prompts/get" | "resources/read");
                let work = async {
                    if interactive { self.interactive(session, msg, outbox).await } else { self.request(session, msg, outbox).await }
                };
                let out = tokio::select! {
                    r = work => Some(r),
                    _ = cancel.cancelled() => None,
                };
                session.end(&id);
                out.map(|r| match r {
                    Ok(mut m) => {
                        m.id = Some(id);
                        if modern {
                            stamp_modern_result(&method, &mut m);
                        }
                        m
                    }
                    Err((code, message)) => Message::error(id, code, message),
                })
            }
            Kind::Invalid => Some(Message::error(
                msg.id.unwrap_or(Value::Null),
                code::INVALID_REQUEST,
                "not a json-rpc 2.0 request, notification or response",
            )),
        }
    }

    fn notification(&self, session: &Arc<Session>, msg: Message) {
        let method = msg.method.as_deref().unwrap_or("");
        match method {
            "notifications/cancelled" => {
                if let Some(id) = msg.params_value().get("requestId") {
                    session.cancel(id);
                }
            }
            "notifications/roots/list_changed" => {
                for u in &self.upstreams {
                    if let Some(c) = u.current() {
                        c.send(&msg);
                    }
                }
            }
            _ => {}
        }
    }

    /// A 2026-07-28 client's `tools/call`, `prompts/get` or `resources/read`: the first attempt
    /// starts the call in an [`Exchange`]; a retry carrying `requestState` continues it with
    /// the client's `inputResponses`. Either way the client gets the final result or another
    /// `input_required` (see [`crate::inputs`]).
    async fn interactive(self: &Arc<Self>, session: &Arc<Session>, msg: Message, outbox: &Outbox) -> Result<Message, (i64, String)> {
        let owner = (session.scope.tenant_id.clone(), session.scope.user_id.clone());
        let params = msg.params_value();
        let exchange = match params.get("requestState").and_then(Value::as_str) {
            Some(state) => {
                let Some(mut ex) = self.exchanges.take(state, &owner) else {
                    return Err((code::INVALID_PARAMS, "unknown or expired requestState; send the request again without it".into()));
                };
                ex.answer(params.get("inputResponses").and_then(Value::as_object), outbox);
                ex
            }
            None => {
                let (gw, session) = (self.clone(), session.clone());
                Exchange::start(owner, outbox, move |call_out| async move { gw.request(&session, msg, &call_out).await })
            }
        };
        match exchange.step().await {
            Step::Done(out) => out,
            Step::NeedsInput(result, state, ex) => {
                metrics::counter!("stowage_input_required_total").increment(1);
                self.exchanges.park(state, ex, self.config.request_timeout());
                Ok(Message::response(Value::Null, &result))
            }
        }
    }

    async fn request(self: &Arc<Self>, session: &Arc<Session>, msg: Message, outbox: &Outbox) -> Result<Message, (i64, String)> {
        let method = msg.method.clone().unwrap_or_default();
        let params = msg.params_value();
        let id = msg.id.clone().unwrap_or(Value::Null);
        let ok = |v: Value| Ok(Message::response(Value::Null, &v));
        match method.as_str() {
            "initialize" => {
                let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or(LATEST_HANDSHAKE);
                let version = if HANDSHAKE_VERSIONS.contains(&asked) { asked } else { LATEST_HANDSHAKE };
                *session.protocol.lock().unwrap() = Some(version.to_owned());
                *session.client_capabilities.lock().unwrap() = params.get("capabilities").cloned().unwrap_or(json!({}));
                let mut result = json!({
                    "protocolVersion": version,
                    "capabilities": self.capabilities(),
                    "serverInfo": server_info(),
                });
                if let Some(i) = self.instructions() {
                    result["instructions"] = json!(i);
                }
                ok(result)
            }
            "server/discover" => {
                let asked = params.pointer("/_meta/io.modelcontextprotocol~1protocolVersion").and_then(Value::as_str);
                if let Some(v) = asked
                    && !MODERN_VERSIONS.contains(&v)
                {
                    let mut supported: Vec<&str> = MODERN_VERSIONS.to_vec();
                    supported.extend(HANDSHAKE_VERSIONS);
                    let e = json!({"code": -32022, "message": format!("unsupported protocol version {v}"), "data": {"supported": supported, "requested": v}});
                    return Ok(Message { id: Some(id), error: Some(to_raw(&e)), ..Default::default() });
                }
                *session.protocol.lock().unwrap() = Some(MODERN_VERSIONS[0].to_owned());
                if let Some(c) = params.pointer("/_meta/io.modelcontextprotocol~1clientCapabilities") {
                    *session.client_capabilities.lock().unwrap() = c.clone();
                }
                let mut result = json!({
                    "supportedVersions": MODERN_VERSIONS,
                    "capabilities": self.capabilities(),
                    "resultType": "complete",
                    "_meta": {"io.modelcontextprotocol/serverInfo": server_info()},
                });
                if let Some(i) = self.instructions() {
                    result["instructions"] = json!(i);
                }
                ok(result)
            }
            "ping" => ok(json!({})),
            "subscriptions/listen" => self.listen(&id, &params, outbox).await,
            "tools/list" => {
                let mut tools: Vec<Value> = self.catalog().tools.iter().map(|t| t.def.clone()).collect();
                if self.links.get().is_some() {
                    tools.push(crate::local_tools::artifact_url_def());
                }
                ok(json!({"tools": tools}))
            }
            "prompts/list" => {
                let prompts: Vec<Value> = self.catalog().prompts.iter().map(|t| t.def.clone()).collect();
                ok(json!({"prompts": prompts}))
            }
            "resources/list" => {
                let resources: Vec<Value> = self.catalog().resources.iter().map(|(_, r)| r.clone()).collect();
                ok(json!({"resources": resources}))
            }
            "resources/templates/list" => {
                let templates: Vec<Value> = self.catalog().templates.iter().map(|(_, r)| r.clone()).collect();
                ok(json!({"resourceTemplates": templates}))
            }
            "tools/call" => self.call_tool(session, &id, params, outbox).await,
            "prompts/get" => {
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                let Some(p) = self.catalog().prompt(name).cloned() else {
                    return Err((code::INVALID_PARAMS, format!("unknown prompt: {name}")));
                };
                let mut params = params;
                params["name"] = json!(p.original);
                self.forward(session, p.upstream, &method, params, outbox).await
            }
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or("").to_owned();
                let Some(u) = self.catalog().resource_upstream(&uri, self.upstreams.len()) else {
                    return Err((code::RESOURCE_NOT_FOUND, format!("resource not found: {uri}")));
                };
                match method.as_str() {
                    "resources/subscribe" => {
                        session.subscriptions.lock().unwrap().insert(uri.clone());
                    }
                    "resources/unsubscribe" => {
                        session.subscriptions.lock().unwrap().remove(&uri);
                    }
                    _ => {}
                }
                if method != "resources/read" && self.upstreams[u].is_stateless() {
                    // A stateless upstream hears about subscriptions through its listen stream.
                    let on = method == "resources/subscribe";
                    if on || !self.uri_wanted(&uri) {
                        self.upstreams[u].set_resource_subscription(&uri, on);
                    }
                    return ok(json!({}));
                }
                self.forward(session, u, &method, params, outbox).await
            }
            "completion/complete" => {
                let r = params.get("ref").cloned().unwrap_or(Value::Null);
                let target = match r.get("type").and_then(Value::as_str) {
                    Some("ref/prompt") => {
                        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                        self.catalog().prompt(name).map(|p| (p.upstream, Some(p.original.clone())))
                    }
                    Some("ref/resource") => {
                        let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
                        self.catalog().resource_upstream(uri, self.upstreams.len()).map(|u| (u, None))
                    }
                    _ => None,
                };
                let Some((u, original)) = target else {
                    return Err((code::INVALID_PARAMS, "completion/complete: unknown ref".into()));
                };
                let mut params = params;
                if let Some(o) = original {
                    params["ref"]["name"] = json!(o);
                }
                self.forward(session, u, &method, params, outbox).await
            }
            "logging/setLevel" => {
                for (i, u) in self.upstreams.iter().enumerate() {
                    if u.capability("logging") {
                        let _ = self.forward(session, i, &method, params.clone(), outbox).await;
                    }
                }
                ok(json!({}))
            }
            _ if self.upstreams.len() == 1 => self.forward(session, 0, &method, params, outbox).await,
            _ => Err((code::METHOD_NOT_FOUND, format!("method not found: {method}"))),
        }
    }

    async fn call_tool(
        self: &Arc<Self>,
        session: &Arc<Session>,
        _id: &Id,
        params: Value,
        outbox: &Outbox,
    ) -> Result<Message, (i64, String)> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
        if name == crate::local_tools::ARTIFACT_URL_TOOL
            && let Some(links) = self.links.get()
        {
            let args = params.get("arguments").cloned().unwrap_or(json!({}));
            let result = crate::local_tools::call_artifact_url(links, &session.scope, &args).await;
            return Ok(Message::response(Value::Null, &result));
        }
        let Some(tool) = self.catalog().tool(&name).cloned() else {
            return Err((code::INVALID_PARAMS, format!("unknown tool: {name}")));
        };
        let upstream = self.upstreams[tool.upstream].name().to_owned();
        let started = Instant::now();
        let mut params = params;
        params["name"] = json!(tool.original);
        let reply = self.forward(session, tool.upstream, "tools/call", params, outbox).await;
        let mut reply = match reply {
            Ok(r) => r,
            Err(e) => {
                metrics::counter!("stowage_tool_calls_total", "upstream" => upstream.clone(), "outcome" => "error").increment(1);
                tracing::info!(target: "stowage::call", upstream = %upstream, tool = %name, duration_ms = started.elapsed().as_secs_f64() * 1000.0, error = %e.1, "tool call failed");
                return Err(e);
            }
        };
        let Some(raw) = reply.result.take() else {
            metrics::counter!("stowage_tool_calls_total", "upstream" => upstream.clone(), "outcome" => "error").increment(1);
            return Ok(reply);
        };
        // Already validated JSON (it parsed as a raw value): handed over without a copy.
        let raw: Box<str> = raw.into();
        let ctx = CallContext {
            tool: tool.original.clone(),
            upstream: upstream.clone(),
            scope: session.scope.clone(),
            output_schema: tool.def.get("outputSchema").cloned(),
        };
        let out = self.rewriter.rewrite(&ctx, raw.into_string()).await;
        let secs = started.elapsed().as_secs_f64();
        let outcome = if out.value.get("isError").and_then(Value::as_bool) == Some(true) { "tool_error" } else { "ok" };
        metrics::counter!("stowage_tool_calls_total", "upstream" => upstream.clone(), "outcome" => outcome).increment(1);
        metrics::histogram!("stowage_tool_call_seconds", "upstream" => upstream.clone()).record(secs);
        metrics::counter!("stowage_tool_bytes_in_total", "upstream" => upstream.clone()).increment(out.bytes_in);
        metrics::counter!("stowage_tool_bytes_out_total", "upstream" => upstream.clone()).increment(out.bytes_out);
        metrics::counter!("stowage_artifacts_total", "upstream" => upstream.clone()).increment(out.artifacts as u64);
        tracing::info!(
            target: "stowage::call",
            upstream = %upstream, tool = %name, duration_ms = secs * 1000.0,
            bytes_in = out.bytes_in, bytes_out = out.bytes_out, artifacts = out.artifacts, outcome,
            "tool call"
        );
        Ok(Message::response(Value::Null, &out.value))
    }

    /// Serves one `subscriptions/listen` stream (2026-07-28): acknowledges what will be
    /// honoured, subscribes upstreams to the requested resources, then relays matching change
    /// notifications until the client goes away (the request is dropped) or the gateway shuts
    /// down (a graceful close: the result, stamped with the subscription id).
    async fn listen(self: &Arc<Self>, id: &Value, params: &Value, outbox: &Outbox) -> Result<Message, (i64, String)> {
        let asked = params.get("notifications").cloned().unwrap_or(json!({}));
        let flag = |k: &str| asked.get(k).and_then(Value::as_bool) == Some(true);
        let caps = self.capabilities();
        let subscribable = caps.pointer("/resources/subscribe").and_then(Value::as_bool) == Some(true);
        let listener = Arc::new(Listener {
            id: id.clone(),
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged") && caps.get("prompts").is_some(),
            resources: flag("resourcesListChanged") && caps.get("resources").is_some(),
            uris: if subscribable {
                asked
                    .get("resourceSubscriptions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            } else {
                HashSet::new()
            },
            outbox: outbox.clone(),
        });
        // Only what will be honoured is acknowledged; unrequested kinds are left out.
        let mut honored = serde_json::Map::new();
        for (key, on) in
            [("toolsListChanged", listener.tools), ("promptsListChanged", listener.prompts), ("resourcesListChanged", listener.resources)]
        {
            if on {
                honored.insert(key.into(), json!(true));
            }
        }
        if !listener.uris.is_empty() {
            honored.insert("resourceSubscriptions".into(), json!(listener.uris.iter().collect::<Vec<_>>()));
        }
        let meta = json!({ SUBSCRIPTION_ID: id });
        let ack = json!({"notifications": honored, "_meta": meta});
        self.listeners.lock().unwrap().push(listener.clone());
        let _unlisten = Unlisten { gw: self.clone(), listener: listener.clone() };
        let _ = outbox.send(Message::notification("notifications/subscriptions/acknowledged", Some(&ack)).to_line());
        for uri in &listener.uris {
            self.upstream_subscription(uri, "resources/subscribe").await;
        }
        tokio::select! {
            _ = outbox.closed() => {}
            _ = self.shutdown.cancelled() => {}
        }
        Ok(Message::response(Value::Null, &json!({"_meta": meta})))
    }

    /// Subscribes (or unsubscribes) the upstream serving `uri`, for listen streams. Failures
    /// are logged: the stream still carries list changes.
    async fn upstream_subscription(&self, uri: &str, method: &str) {
        let Some(i) = self.catalog().resource_upstream(uri, self.upstreams.len()) else { return };
        let u = &self.upstreams[i];
        if u.is_stateless() {
            u.set_resource_subscription(uri, method == "resources/subscribe");
            return;
        }
        let timeout = u.spec.request_timeout.min(Duration::from_secs(30));
        if let Err(e) = u.request(method, Some(&json!({"uri": uri})), timeout).await {
            tracing::warn!(target: "stowage::upstream", upstream = %u.name(), "{method} {uri}: {e}");
        }
    }

    /// Whether any session or listen stream still wants updates of `uri`.
    fn uri_wanted(&self, uri: &str) -> bool {
        self.listeners.lock().unwrap().iter().any(|l| l.uris.contains(uri))
            || self.live_sessions().iter().any(|s| s.subscriptions.lock().unwrap().contains(uri))
    }

    /// Delivers a change notification to every session that may hear it: legacy sessions on
    /// their standalone stream (resource updates only to subscribers), listen streams when
    /// they asked for it.
    fn publish(&self, msg: &Message) {
        let method = msg.method.as_deref().unwrap_or_default();
        let mut params = msg.params_value();
        // An upstream's own subscription id means nothing to our clients.
        if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(SUBSCRIPTION_ID);
            if meta.is_empty() {
                params.as_object_mut().map(|p| p.remove("_meta"));
            }
        }
        let clean = Message::notification(method, (!params.is_null()).then_some(&params));
        let msg = &clean;
        let uri = params.get("uri").and_then(Value::as_str);
        for s in self.live_sessions() {
            let modern = is_modern_session(&s);
            // 2026-07-28 clients hear about changes only through listen streams.
            let subscribed = uri.is_none_or(|u| s.subscriptions.lock().unwrap().contains(u));
            if !modern && subscribed {
                s.notify(msg);
            }
        }
        for l in self.listeners.lock().unwrap().iter() {
            if l.wants(method, uri) {
                l.send(msg);
            }
        }
    }

    /// Sends a request to upstream `index` on behalf of `session` and waits for its reply.
    /// Dropping this future (client gone, cancelled) cancels the upstream request.
    async fn forward(
        self: &Arc<Self>,
        session: &Arc<Session>,
        index: usize,
        method: &str,
        mut params: Value,
        outbox: &Outbox,
    ) -> Result<Message, (i64, String)> {
        let upstream = &self.upstreams[index];
        let timeout = upstream.spec.request_timeout;
        let deadline = Instant::now() + timeout;
        strip_envelope(&mut params);
        // Progress tokens are mapped to gateway-unique ones: the upstream is shared.
        let mut token_key = None;
        if let Some(token) = params.pointer("/_meta/progressToken").cloned() {
            let mine = format!("stowage-p{}", self.next_token.fetch_add(1, Ordering::Relaxed));
            params["_meta"]["progressToken"] = json!(mine);
            self.routes.map_progress(mine.clone(), token, outbox);
            token_key = Some(mine);
        }
        let conn = upstream.connection(timeout).await.map_err(|e| (e.code(), e.to_string()))?;
        let out = conn.start(method, Some(to_raw(&params)));
        let key = (index, out.id);
        self.routes.begin_call(key, session, outbox, crate::inputs::current());
        let mut cleanup = Cleanup { gw: self.clone(), key, token: token_key };
        let mut reply =
            out.wait(deadline.saturating_duration_since(Instant::now())).await.map_err(|e: CallError| (e.code(), e.to_string()))?;
        // A stateless upstream asks for input by answering `input_required`: put each request
        // to the client (as a request, or as our own input_required for a 2026-07-28 client)
        // and retry with the answers, as its revision prescribes.
        for _round in 0..MAX_INPUT_ROUNDS {
            let Some(asked) = input_required(&conn, &reply) else { break };
            let mut responses = serde_json::Map::new();
            for (key, req) in asked.get("inputRequests").and_then(Value::as_object).into_iter().flatten() {
                let what = req.get("method").and_then(Value::as_str).unwrap_or_default();
                let target =
                    crate::routes::CallTarget { session: session.clone(), outbox: outbox.clone(), inputs: crate::inputs::current() };
                let answer = self.ask_client(Some(target), what, req.get("params").map(to_raw), Value::Null, timeout).await;
                match result_value(&answer) {
                    Ok(v) => responses.insert(key.clone(), v),
                    Err(e) => return Err((code::INTERNAL_ERROR, format!("the client did not answer {what}: {e}"))),
                };
            }
            params["inputResponses"] = Value::Object(responses);
            match asked.get("requestState") {
                Some(state) => params["requestState"] = state.clone(),
                None => {
                    params.as_object_mut().map(|p| p.remove("requestState"));
                }
            }
            let out = conn.start(method, Some(to_raw(&params)));
            self.routes.end_call(cleanup.key);
            cleanup.key = (index, out.id);
            self.routes.begin_call(cleanup.key, session, outbox, crate::inputs::current());
            reply = out.wait(deadline.saturating_duration_since(Instant::now())).await.map_err(|e: CallError| (e.code(), e.to_string()))?;
        }
        Ok(reply)
    }

    /// Puts an upstream's request for input (sampling, elicitation, roots) to the client
    /// behind `target` and returns the answer as a reply with id `reply_id`.
    async fn ask_client(
        &self,
        target: Option<crate::routes::CallTarget>,
        method: &str,
        params: Option<Box<serde_json::value::RawValue>>,
        reply_id: Value,
        timeout: Duration,
    ) -> Message {
        match target {
            // A 2026-07-28 client's call: the request becomes an input_required result.
            Some(crate::routes::CallTarget { inputs: Some(inputs), .. }) => {
                let params = params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or(Value::Null);
                match crate::inputs::ask(&inputs, method, params, timeout).await {
                    Ok(result) => Message::response(reply_id, &result),
                    Err(e) => Message::error(reply_id, code::INTERNAL_ERROR, e),
                }
            }
            Some(t) if is_modern_session(&t.session) => Message::error(
                reply_id,
                code::METHOD_NOT_FOUND,
                format!("the client speaks 2026-07-28, which takes {method} only within tools/call, prompts/get or resources/read"),
            ),
            Some(crate::routes::CallTarget { session, outbox, .. }) => match session.request_client(method, params, &outbox, timeout).await
            {
                Some(mut answer) => {
                    answer.id = Some(reply_id);
                    answer.method = None;
                    answer
                }
                None => Message::error(reply_id, code::INTERNAL_ERROR, format!("the client did not answer {method}")),
            },
            None if method == "roots/list" => Message::response(reply_id, &json!({"roots": []})),
            None => Message::error(reply_id, code::METHOD_NOT_FOUND, format!("no client is connected to answer {method}")),
        }
    }

    fn capabilities(&self) -> Value {
        let any = |k: &str| self.upstreams.iter().any(|u| u.capability(k));
        let mut caps = json!({"tools": {"listChanged": true}});
        if any("prompts") {
            caps["prompts"] = json!({"listChanged": true});
        }
        if any("resources") {
            let subscribe = self
                .upstreams
                .iter()
                .any(|u| u.info().and_then(|i| i.pointer("/capabilities/resources/subscribe").and_then(Value::as_bool)).unwrap_or(false));
            caps["resources"] = json!({"listChanged": true, "subscribe": subscribe});
        }
        if any("logging") {
            caps["logging"] = json!({});
        }
        if any("completions") {
            caps["completions"] = json!({});
        }
        caps
    }

    fn instructions(&self) -> Option<String> {
        let parts: Vec<String> = self
            .upstreams
            .iter()
            .filter_map(|u| {
                let text = u.info()?.get("instructions")?.as_str()?.to_owned();
                Some(if self.upstreams.len() > 1 { format!("[{}] {text}", u.name()) } else { text })
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    /// Fetches every list of upstream `index` (following pagination) and rebuilds the catalog.
    async fn refresh(self: &Arc<Self>, index: usize) {
        let u = &self.upstreams[index];
        let timeout = u.spec.request_timeout.min(Duration::from_secs(30));
        let mut fresh = UpstreamLists { name: u.name().to_owned(), ..Default::default() };
        let lists: [(&str, &str, &str, &mut Vec<Value>); 4] = [
            ("tools", "tools/list", "tools", &mut fresh.tools),
            ("prompts", "prompts/list", "prompts", &mut fresh.prompts),
            ("resources", "resources/list", "resources", &mut fresh.resources),
            ("resources", "resources/templates/list", "resourceTemplates", &mut fresh.templates),
        ];
        for (cap, method, key, into) in lists {
            if !u.capability(cap) {
                continue;
            }
            let mut cursor: Option<String> = None;
            for _page in 0..1000 {
                let params = cursor.as_ref().map(|c| json!({"cursor": c}));
                let reply = match u.request(method, params.as_ref(), timeout).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(target: "stowage::upstream", upstream = %u.name(), "{method} failed: {e}");
                        break;
                    }
                };
                let Ok(v) = result_value(&reply) else {
                    tracing::warn!(target: "stowage::upstream", upstream = %u.name(), "{method} returned an error");
                    break;
                };
                if let Some(items) = v.get(key).and_then(Value::as_array) {
                    into.extend(items.iter().cloned());
                }
                cursor = v.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
                if cursor.is_none() {
                    break;
                }
            }
        }
        let catalog = {
            let mut lists = self.lists.lock().unwrap();
            lists[index] = fresh;
            Catalog::build(&lists, self.prefix, &self.config.separator)
        };
        for c in &catalog.collisions {
            tracing::warn!(target: "stowage::router", "name collision: {c}");
        }
        *self.catalog.write().unwrap() = Arc::new(catalog);
    }

    /// Routes a notification or request that an upstream initiated.
    async fn from_upstream(self: Arc<Self>, index: usize, conn: Arc<Conn>, msg: Message) {
        let method = msg.method.clone().unwrap_or_default();
        if msg.kind() == Kind::Notification {
            match method.as_str() {
                _ if self.routes.deliver(index, &msg) => {}
                "notifications/tools/list_changed" | "notifications/prompts/list_changed" | "notifications/resources/list_changed" => {
                    self.refresh(index).await;
                    self.publish(&Message::notification(&method, None));
                }
                "notifications/resources/updated" => self.publish(&msg),
                // Our own listen stream to a stateless upstream opening: nothing for clients.
                "notifications/subscriptions/acknowledged" => {}
                _ => {
                    // Logging and anything else: to the client whose call is running there, else
                    // to every session's general stream.
                    for s in self.live_sessions() {
                        s.notify(&msg);
                    }
                }
            }
            return;
        }
        // A request from the upstream.
        let up_id = msg.id.clone().unwrap_or(Value::Null);
        if method == "ping" {
            conn.send(&Message::response(up_id, &json!({})));
            return;
        }
        let timeout = self.upstreams[index].spec.request_timeout;
        let target = self.routes.latest(index).or_else(|| {
            let session = self.live_sessions().pop()?;
            let outbox = session.outbox_for_requests()?;
            Some(crate::routes::CallTarget { session, outbox, inputs: None })
        });
        let reply = self.ask_client(target, &method, msg.params, up_id, timeout).await;
        conn.send(&reply);
    }
}

/// How many `input_required` rounds one call may take with a stateless upstream.
const MAX_INPUT_ROUNDS: usize = 16;

/// The parsed result when a stateless upstream's `reply` is `input_required`.
fn input_required(conn: &Conn, reply: &Message) -> Option<Value> {
    let raw = reply.result.as_ref()?;
    // Only stateless upstreams use it; the substring test spares parsing every big result.
    if !conn.is_stateless() || !raw.get().contains("\"input_required\"") {
        return None;
    }
    let v: Value = serde_json::from_str(raw.get()).ok()?;
    (v.get("resultType").and_then(Value::as_str) == Some("input_required")).then_some(v)
}

/// Removes a finished call's routing entries, also when its future is dropped.
struct Cleanup {
    gw: Arc<Gateway>,
    key: (usize, u64),
    token: Option<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.gw.routes.end_call(self.key);
        if let Some(t) = &self.token {
            self.gw.routes.unmap_progress(t);
        }
    }
}

/// Ends a listen stream's registration when its request finishes or is dropped, and
/// unsubscribes upstreams from resources nobody wants any more.
struct Unlisten {
    gw: Arc<Gateway>,
    listener: Arc<Listener>,
}

impl Drop for Unlisten {
    fn drop(&mut self) {
        self.gw.listeners.lock().unwrap().retain(|l| !Arc::ptr_eq(l, &self.listener));
        let orphaned: Vec<String> = self.listener.uris.iter().filter(|u| !self.gw.uri_wanted(u)).cloned().collect();
        if orphaned.is_empty() || self.gw.shutdown.is_cancelled() {
            return;
        }
        let gw = self.gw.clone();
        tokio::spawn(async move {
            for uri in orphaned {
                gw.upstream_subscription(&uri, "resources/unsubscribe").await;
            }
        });
    }
}

/// Removes the client's stateless-protocol envelope keys: the upstream connection has its own
/// (legacy handshake, or our own envelope stamped by the connection).
fn strip_envelope(params: &mut Value) {
    if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.retain(|k, _| !k.starts_with(META_PREFIX));
        if meta.is_empty() {
            params.as_object_mut().map(|p| p.remove("_meta"));
        }
    }
}

fn is_modern_session(session: &Session) -> bool {
    session.protocol.lock().unwrap().as_deref().is_some_and(|p| MODERN_VERSIONS.contains(&p))
}

/// Whether this request speaks the stateless revision (its envelope says so, or the session
/// was opened with `server/discover`).
fn is_modern(session: &Session, msg: &Message) -> bool {
    if is_modern_session(session) {
        return true;
    }
    let Some(p) = &msg.params else { return false };
    if !p.get().contains(META_PREFIX) {
        return false;
    }
    msg.params_value()
        .pointer("/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| MODERN_VERSIONS.contains(&v))
}

/// Results on the 2026-07-28 wire carry `resultType`, and cacheable ones `ttlMs` and
/// `cacheScope`; upstreams on older revisions do not send them. `private` and 0 ms are the
/// safe defaults: a gateway's lists change when upstreams restart.
fn stamp_modern_result(method: &str, m: &mut Message) {
    let Some(raw) = &m.result else { return };
    let Ok(mut v) = serde_json::from_str::<Value>(raw.get()) else { return };
    let Some(obj) = v.as_object_mut() else { return };
    obj.entry("resultType").or_insert_with(|| json!("complete"));
    if matches!(
        method,
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" | "resources/read" | "server/discover"
    ) {
        obj.entry("ttlMs").or_insert_with(|| json!(0));
        obj.entry("cacheScope").or_insert_with(|| json!("private"));
    }
    m.result = Some(to_raw(&v));
}

fn server_info() -> Value {
    json!({"name": "stowage", "title": "Stowage MCP gateway", "version": env!("CARGO_PKG_VERSION")})
}

async fn event_loop(gw: Weak<Gateway>, mut rx: mpsc::UnboundedReceiver<UpstreamEvent>) {
    let mut seen = HashSet::new();
    while let Some(ev) = rx.recv().await {
        let Some(gw) = gw.upgrade() else { return };
        match ev {
            UpstreamEvent::Ready { index } => {
                let gw2 = gw.clone();
                let first = seen.insert(index);
                tokio::spawn(async move {
                    gw2.refresh(index).await;
                    if first {
                        gw2.ready.send_modify(|n| *n += 1);
                    } else {
                        gw2.publish(&Message::notification("notifications/tools/list_changed", None));
                    }
                });
            }
            UpstreamEvent::Down { index, reason } => {
                metrics::counter!("stowage_upstream_restarts_total", "upstream" => gw.upstreams[index].name().to_owned()).increment(1);
                tracing::debug!(target: "stowage::upstream", upstream = %gw.upstreams[index].name(), "down: {reason}");
            }
            UpstreamEvent::Message { index, conn, msg } => {
                tokio::spawn(gw.from_upstream(index, conn, msg));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_keys_are_stripped_and_others_kept() {
        let mut p = json!({"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":5}});
        strip_envelope(&mut p);
        assert_eq!(p, json!({"name":"x","_meta":{"progressToken":5}}));
        let mut p = json!({"_meta":{"io.modelcontextprotocol/clientInfo":{}}});
        strip_envelope(&mut p);
        assert_eq!(p, json!({}));
    }
}
