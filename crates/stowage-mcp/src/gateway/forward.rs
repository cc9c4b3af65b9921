//! Forwarding: a client's request to the right upstream connection (its own upstream session
//! in `per_client` mode, or a pristine one for what cannot change session state), with
//! progress tokens mapped and the call registered so what the upstream says during it
//! reaches this client alone; and the way back, an upstream's questions (sampling,
//! elicitation, roots) put to the client it belongs to, in the form the client's revision
//! understands, and only if the client declared it can answer.
//!
//! What cannot change session state ([`Need::Pristine`], see `upstream::sessions`) is decided
//! here, conservatively: the list methods, `resources/read`, `prompts/get`,
//! `completion/complete` and `tasks/list`, which retrieve by the protocol's design, and a
//! `tools/call` of a tool whose own listing says `annotations.readOnlyHint: true`, without a
//! `task` (a task lives in the session). Everything else, unknown methods included, needs the
//! client's own session.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Gateway;
use super::handshake::{META_PREFIX, is_modern_session};
use crate::attribution::{Attribution, CallTarget};
use crate::error::GatewayError;
use crate::inputs::{Exchange, Step};
use crate::jsonrpc::{Message, Raw, code, to_raw};
use crate::outbox::Outbox;
use crate::session::Session;
use crate::upstream::{CallError, Conn, Need, result_value};

/// How many `input_required` rounds one call may take with a stateless upstream.
const MAX_INPUT_ROUNDS: usize = 16;

/// Removes a finished call's routing entries, also when its future is dropped or it fails
/// before reaching its upstream: a progress mapping left behind would hold the client's
/// outbox, and with it the client's response stream, open forever.
struct Cleanup<'a> {
    gw: &'a Gateway,
    /// The upstream connection and request id, once the request was sent.
    call: Option<(u64, u64)>,
    token: Option<String>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Some((conn, request)) = self.call {
            self.gw.clients.routes.end_call(conn, request);
        }
        if let Some(t) = &self.token {
            self.gw.clients.routes.unmap_progress(t);
        }
    }
}

/// What a request with `method` needs of the upstream session it goes to, the tool call's
/// read-only hint aside (see [`Gateway::forward_as`]).
pub(super) fn need_of(method: &str) -> Need {
    match method {
        "tools/list"
        | "prompts/list"
        | "resources/list"
        | "resources/templates/list"
        | "resources/read"
        | "prompts/get"
        | "completion/complete"
        | "tasks/list"
        | "ping" => Need::Pristine,
        _ => Need::Own,
    }
}

/// What a call of the tool listed as `def` needs: a pristine session only when the server
/// marks the tool read-only and the call starts no task.
pub(super) fn need_of_call(def: &Value, params: &Value) -> Need {
    let read_only = def.pointer("/annotations/readOnlyHint") == Some(&Value::Bool(true));
    if read_only && params.get("task").is_none() { Need::Pristine } else { Need::Own }
}

impl Gateway {
    /// Sends a request to upstream `index` on behalf of `session` and waits for its reply.
    /// Dropping this future (client gone, cancelled) cancels the upstream request.
    pub(super) async fn forward(
        self: &Arc<Self>,
        session: &Arc<Session>,
        index: usize,
        method: &str,
        params: Value,
        outbox: &Outbox,
    ) -> Result<Message, GatewayError> {
        self.forward_as(session, index, method, params, outbox, need_of(method)).await
    }

    /// [`Gateway::forward`] on a connection fit for `need`.
    pub(super) async fn forward_as(
        self: &Arc<Self>,
        session: &Arc<Session>,
        index: usize,
        method: &str,
        mut params: Value,
        outbox: &Outbox,
        need: Need,
    ) -> Result<Message, GatewayError> {
        let upstream = &self.upstreams[index];
        let timeout = upstream.spec.request_timeout;
        let deadline = Instant::now() + timeout;
        strip_envelope(&mut params);
        // Progress tokens are mapped to gateway-unique ones: an upstream connection may be shared.
        let mut cleanup = Cleanup { gw: self, call: None, token: None };
        if let Some(original) = params.pointer("/_meta/progressToken").cloned() {
            let mine = format!("stowage-p{}", self.clients.next_token.fetch_add(1, Ordering::Relaxed));
            params["_meta"]["progressToken"] = json!(mine);
            self.clients.routes.map_progress(mine.clone(), original, outbox);
            cleanup.token = Some(mine);
        }
        let conn = upstream.connection_for(session, need, timeout).await?;
        let out = conn.start(method, Some(to_raw(&params))).await?;
        self.clients.routes.begin_call(conn.id, out.id, session, outbox, crate::inputs::current());
        cleanup.call = Some((conn.id, out.id));
        let mut reply = out.wait(deadline.saturating_duration_since(Instant::now())).await?;
        // A stateless upstream asks for input by answering `input_required`: put each request
        // to the client (as a request, or as our own input_required for a 2026-07-28 client)
        // and retry with the answers, as its revision prescribes.
        for _round in 0..MAX_INPUT_ROUNDS {
            let Some(asked) = input_required(&conn, &reply) else { break };
            let mut responses = serde_json::Map::new();
            for (key, req) in asked.get("inputRequests").and_then(Value::as_object).into_iter().flatten() {
                let what = req.get("method").and_then(Value::as_str).unwrap_or_default();
                let target = CallTarget { session: session.clone(), outbox: outbox.clone(), inputs: crate::inputs::current() };
                let answer = self.ask_client(Attribution::Call(target), what, req.get("params").map(to_raw), Value::Null, timeout).await;
                match result_value(&answer) {
                    Ok(v) => responses.insert(key.clone(), v),
                    Err(reason) => return Err(GatewayError::ClientDidNotAnswer { method: what.to_owned(), reason }),
                };
            }
            params["inputResponses"] = Value::Object(responses);
            match asked.get("requestState") {
                Some(state) => params["requestState"] = state.clone(),
                None => {
                    params.as_object_mut().map(|p| p.remove("requestState"));
                }
            }
            let out = conn.start(method, Some(to_raw(&params))).await?;
            if let Some((conn, request)) = cleanup.call.take() {
                self.clients.routes.end_call(conn, request);
            }
            self.clients.routes.begin_call(conn.id, out.id, session, outbox, crate::inputs::current());
            cleanup.call = Some((conn.id, out.id));
            reply = out.wait(deadline.saturating_duration_since(Instant::now())).await.map_err(|e: CallError| GatewayError::from(e))?;
        }
        self.scrub_error(session, upstream.name(), &mut reply).await;
        Ok(reply)
    }

    /// A 2026-07-28 client's `tools/call`, `prompts/get` or `resources/read`: the first attempt
    /// starts the call in an [`Exchange`]; a retry carrying `requestState` continues it with
    /// the client's `inputResponses`. Either way the client gets the final result or another
    /// `input_required` (see [`crate::inputs`]).
    pub(super) async fn interactive(
        self: &Arc<Self>,
        session: &Arc<Session>,
        msg: Message,
        outbox: &Outbox,
    ) -> Result<Message, GatewayError> {
        let owner = (session.scope.tenant_id.clone(), session.scope.user_id.clone());
        let params = msg.params_value();
        let exchange = match params.get("requestState").and_then(Value::as_str) {
            Some(state) => {
                let mut ex = self.clients.exchanges.take(state, &owner).ok_or(GatewayError::UnknownRequestState)?;
                ex.answer(params.get("inputResponses").and_then(Value::as_object), outbox);
                ex
            }
            None => {
                let (gw, session) = (self.clone(), session.clone());
                Exchange::start(owner, outbox, move |call_out| async move { gw.dispatch(&session, msg, &call_out).await })
            }
        };
        match exchange.step().await {
            Step::Done(out) => out,
            Step::NeedsInput(result, state, ex) => {
                metrics::counter!("stowage_input_required_total").increment(1);
                self.clients.exchanges.park(state, ex, self.config.request_timeout());
                Ok(Message::response(Value::Null, &result))
            }
        }
    }

    /// Puts an upstream's request for input (sampling, elicitation, roots) to the client it
    /// is attributed to, and returns the answer as a reply with id `reply_id`. A client that
    /// did not declare the capability is never asked: the upstream gets an error instead.
    pub(super) async fn ask_client(
        &self,
        target: Attribution,
        method: &str,
        params: Option<Raw>,
        reply_id: Value,
        timeout: Duration,
    ) -> Message {
        // A session that has not finished `initialize` has declared nothing yet.
        let mut target = match target {
            Attribution::Session(s) if method == "roots/list" && s.protocol.lock().is_none() => Attribution::Nobody,
            t => t,
        };
        // Servers ask for roots as they start, before any client is there (server-everything
        // does, on every connection): the request waits a little for the first client (a host
        // that spawned the gateway is about to initialize), which answers it if it declares
        // roots. Otherwise "no roots" is the true answer, where an error would only be logged
        // by the server; a client that declares roots later makes the server ask again
        // (`notifications/roots/list_changed`, see `client_initialized`).
        if matches!(target, Attribution::Nobody) && method == "roots/list" && !self.any_client_initialized() {
            let mut ready = self.clients.initialized.subscribe();
            let _ = tokio::time::timeout(ROOTS_HOLD.min(timeout), ready.wait_for(|n| *n > 0)).await;
            match self.clients.sessions.only_one().filter(|s| s.protocol.lock().is_some() && missing_capability(s, method, None).is_none())
            {
                Some(s) => target = Attribution::Session(s),
                None => {
                    self.clients.roots_owed.store(true, Ordering::SeqCst);
                    crate::attribution::dropped(
                        "an upstream",
                        "a roots/list request at start-up no client with roots can answer (answered: no roots)",
                    );
                    return Message::response(reply_id, &json!({"roots": []}));
                }
            }
        }
        let session = match &target {
            Attribution::Call(t) => t.session.clone(),
            Attribution::Session(s) => s.clone(),
            Attribution::Nobody => {
                crate::attribution::dropped("an upstream", &format!("a {method} request no client can be found for"));
                return Message::error(
                    reply_id,
                    code::METHOD_NOT_FOUND,
                    format!("{method}: no client of the gateway can be attributed this request"),
                );
            }
        };
        if let Some(missing) = missing_capability(&session, method, params.as_ref()) {
            return Message::error(
                reply_id,
                code::METHOD_NOT_FOUND,
                format!("the client did not declare the {missing} capability, so it cannot answer {method}"),
            );
        }
        let elicitation = (method == "elicitation/create").then(|| url_elicitation_id(params.as_ref())).flatten();
        let answer = match target {
            // A 2026-07-28 client's call: the request becomes an input_required result.
            Attribution::Call(CallTarget { inputs: Some(inputs), .. }) => {
                let params = params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or(Value::Null);
                match crate::inputs::ask(&inputs, method, params, timeout).await {
                    Ok(result) => Message::response(reply_id, &result),
                    Err(e) => Message::error(reply_id, code::INTERNAL_ERROR, e),
                }
            }
            _ if is_modern_session(&session) || session.is_stateless() => Message::error(
                reply_id,
                code::METHOD_NOT_FOUND,
                format!("the client speaks 2026-07-28, which takes {method} only within tools/call, prompts/get or resources/read"),
            ),
            Attribution::Call(CallTarget { outbox, .. }) => relay_to_client(&session, method, params, &outbox, reply_id, timeout).await,
            _ => match session.general_stream() {
                Some(outbox) => relay_to_client(&session, method, params, &outbox, reply_id, timeout).await,
                None => Message::error(reply_id, code::INTERNAL_ERROR, format!("the client has no stream open to receive {method}")),
            },
        };
        if let Some(id) = elicitation
            && answer.error.is_none()
        {
            self.clients.routes.elicitation_sent(&id, &session);
        }
        answer
    }

    /// The upstream serving `uri` for `session`: its own `per_client` listing first, then the
    /// catalog (exact URI, template prefix, the only upstream).
    pub(super) fn resource_route(&self, session: &Session, uri: &str) -> Option<usize> {
        let mine = session.resource_routes.lock().get(uri).copied();
        mine.or_else(|| self.catalog().resource_upstream(uri, self.upstreams.len()))
    }

    /// `resources/read`, `resources/subscribe`, `resources/unsubscribe`: routed by URI.
    pub(super) async fn resource_request(
        self: &Arc<Self>,
        session: &Arc<Session>,
        method: &str,
        params: Value,
        outbox: &Outbox,
    ) -> Result<Message, GatewayError> {
        let uri = params.get("uri").and_then(Value::as_str).unwrap_or("").to_owned();
        // The MCP Apps view, for the clients it is offered to (others: not found, as before).
        if uri == crate::apps::VIEWER_URI
            && let Some(apps) = self.apps_for(session)
        {
            return match method {
                "resources/read" => Ok(Message::response(Value::Null, &apps.read_result())),
                _ => Ok(Message::response(Value::Null, &json!({}))),
            };
        }
        if uri.starts_with("artifact://")
            && let Some(store) = self.local_tools().readers().cloned()
        {
            return self.artifact_resource(session, &store, method, &uri, &params).await;
        }
        let u = self.resource_route(session, &uri).ok_or_else(|| GatewayError::ResourceNotFound(uri.clone()))?;
        let upstream = &self.upstreams[u];
        let mut params = params;
        // A URI two upstreams listed reaches the second with its own URI back.
        let original = crate::catalog::split_collided(&uri).filter(|(name, _)| name == upstream.name()).map(|(_, o)| o);
        if let Some(o) = &original {
            params["uri"] = Value::String(o.clone());
        }
        let upstream_uri = original.clone().unwrap_or_else(|| uri.clone());
        // Only an upstream that is up has said what it serves; a down one answers with why
        // it is down (from forward, below).
        if upstream.current().is_some() && !upstream.capability("resources") {
            return Err(GatewayError::InvalidParams(format!(
                "{method}: {uri} routes to upstream {}, which serves no resources (it did not declare the capability)",
                upstream.name()
            )));
        }
        match method {
            "resources/subscribe" => {
                session.subscriptions.lock().insert(uri.clone());
            }
            "resources/unsubscribe" => {
                session.subscriptions.lock().remove(&uri);
            }
            _ => {}
        }
        if method != "resources/read" {
            if upstream.is_stateless() {
                // A stateless upstream hears about subscriptions through its listen stream.
                let on = method == "resources/subscribe";
                if on || !self.uri_wanted(&uri) {
                    upstream.set_resource_subscription(&upstream_uri, on);
                }
                return Ok(Message::response(Value::Null, &json!({})));
            }
            // On a shared connection another client may still want the updates.
            if method == "resources/unsubscribe" && upstream.mode.is_shared() && self.uri_wanted(&uri) {
                return Ok(Message::response(Value::Null, &json!({})));
            }
        }
        if method == "resources/read" {
            let mut reply = self.read_from(session, u, params, outbox).await?;
            if let Some(o) = &original {
                expose_contents_uri(&mut reply, o, &uri);
            }
            return Ok(reply);
        }
        self.forward(session, u, method, params, outbox).await
    }

    /// The client's roots changed: tell the upstream sessions it uses (that declared roots).
    /// Whether any client has completed `initialize`.
    fn any_client_initialized(&self) -> bool {
        self.clients.sessions.live().iter().any(|s| s.protocol.lock().is_some())
    }

    /// A client finished its handshake: if shared upstreams were told "no roots" before any
    /// client was there and this one declares roots, they hear that the roots changed.
    pub(super) fn client_initialized(&self, session: &Session) {
        self.clients.initialized.send_modify(|n| *n += 1);
        if missing_capability(session, "roots/list", None).is_some() || !self.clients.roots_owed.swap(false, Ordering::SeqCst) {
            return;
        }
        let changed = Message::notification("notifications/roots/list_changed", None);
        for u in self.upstreams.iter().filter(|u| u.mode.is_shared()) {
            if let Some(c) = u.current().filter(|c| !c.is_stateless()) {
                c.send(&changed);
            }
        }
    }

    pub(super) fn roots_changed(&self, session: &Session, msg: &Message) {
        for u in &self.upstreams {
            let conn = if u.mode.is_shared() { u.current().filter(|c| !c.is_stateless()) } else { u.client_conn(&session.upstream_key()) };
            if let Some(c) = conn {
                c.send(msg);
            }
        }
    }
}

/// How long an upstream's `roots/list` at start-up waits for a first client to answer it.
const ROOTS_HOLD: Duration = Duration::from_secs(10);

/// A read of a rewritten URI answers with the URI the client asked for.
fn expose_contents_uri(reply: &mut Message, original: &str, exposed: &str) {
    let Some(raw) = reply.result.as_ref() else { return };
    let Ok(mut v) = serde_json::from_str::<Value>(raw.get()) else { return };
    for entry in v.get_mut("contents").and_then(Value::as_array_mut).into_iter().flatten() {
        if entry.get("uri").and_then(Value::as_str) == Some(original) {
            entry["uri"] = Value::String(exposed.to_owned());
        }
    }
    reply.result = Some(to_raw(&v));
}

/// Sends an upstream's request to a client and turns its answer into the reply upstream.
async fn relay_to_client(
    session: &Session,
    method: &str,
    params: Option<Raw>,
    outbox: &Outbox,
    reply_id: Value,
    timeout: Duration,
) -> Message {
    match session.request_client(method, params, outbox, timeout).await {
        Ok(mut answer) => {
            answer.id = Some(reply_id);
            answer.method = None;
            answer
        }
        Err(why) => Message::error(reply_id, code::INTERNAL_ERROR, format!("the client did not answer {method}: {why}")),
    }
}

/// The capability a client must have declared to be asked `method`, if it lacks it.
fn missing_capability(session: &Session, method: &str, params: Option<&Raw>) -> Option<&'static str> {
    let caps = session.client_capabilities.lock().clone();
    match method {
        "sampling/createMessage" if caps.get("sampling").is_none() => Some("sampling"),
        "roots/list" if caps.get("roots").is_none() => Some("roots"),
        "elicitation/create" => {
            let Some(e) = caps.get("elicitation") else { return Some("elicitation") };
            // URL mode needs `elicitation.url`; an empty object means form mode only.
            (url_elicitation_id(params).is_some() && e.get("url").is_none()).then_some("elicitation.url")
        }
        _ => None,
    }
}

/// The `elicitationId` of a URL-mode elicitation request.
fn url_elicitation_id(params: Option<&Raw>) -> Option<String> {
    let v: Value = serde_json::from_str(params?.get()).ok()?;
    (v.get("mode").and_then(Value::as_str) == Some("url"))
        .then(|| v.get("elicitationId").and_then(Value::as_str).map(str::to_owned))
        .flatten()
}

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

/// Removes the client's stateless-protocol envelope keys: the upstream connection has its own
/// (legacy handshake, or our own envelope stamped by the connection).
pub(super) fn strip_envelope(params: &mut Value) {
    if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.retain(|k, _| !k.starts_with(META_PREFIX));
        if meta.is_empty() {
            params.as_object_mut().map(|p| p.remove("_meta"));
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

    #[test]
    fn only_retrievals_and_tools_marked_read_only_may_go_to_a_pristine_session() {
        for m in ["tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read", "prompts/get"] {
            assert_eq!(need_of(m), Need::Pristine, "{m}");
        }
        for m in ["tools/call", "resources/subscribe", "resources/unsubscribe", "logging/setLevel", "tasks/get", "tasks/cancel", "x/y"] {
            assert_eq!(need_of(m), Need::Own, "{m}");
        }
        let read_only = json!({"name": "snapshot", "annotations": {"readOnlyHint": true}});
        assert_eq!(need_of_call(&read_only, &json!({"name": "snapshot"})), Need::Pristine);
        assert_eq!(need_of_call(&read_only, &json!({"name": "snapshot", "task": {"ttl": 1000}})), Need::Own, "a task lives in the session");
        for def in [
            json!({"name": "navigate"}),
            json!({"name": "navigate", "annotations": {"readOnlyHint": false}}),
            json!({"name": "navigate", "annotations": {"readOnlyHint": "true"}}),
            json!({"name": "navigate", "annotations": {"destructiveHint": false, "idempotentHint": true}}),
        ] {
            assert_eq!(need_of_call(&def, &json!({})), Need::Own, "{def}");
        }
    }

    #[test]
    fn a_client_is_asked_only_what_it_declared() {
        use crate::session::{Caller, SessionKind};
        let s = Session::new(SessionKind::Stdio, Caller::default(), None);
        *s.client_capabilities.lock() = json!({"elicitation": {}});
        let url = to_raw(&json!({"mode": "url", "elicitationId": "e1", "url": "https://x", "message": "m"}));
        assert_eq!(missing_capability(&s, "sampling/createMessage", None), Some("sampling"));
        assert_eq!(missing_capability(&s, "roots/list", None), Some("roots"));
        assert_eq!(missing_capability(&s, "elicitation/create", None), None);
        assert_eq!(missing_capability(&s, "elicitation/create", Some(&url)), Some("elicitation.url"));
        *s.client_capabilities.lock() = json!({"elicitation": {"url": {}}, "roots": {}, "sampling": {}});
        assert_eq!(missing_capability(&s, "elicitation/create", Some(&url)), None);
        assert_eq!(url_elicitation_id(Some(&url)).as_deref(), Some("e1"));
    }
}
