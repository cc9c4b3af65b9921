//! The handshake: `initialize` (2024-11-05 … 2025-11-25), `server/discover` (2026-07-28),
//! the capabilities the gateway offers (what its upstreams can do), and the envelope of a
//! 2026-07-28 result.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Gateway;
use crate::error::GatewayError;
use crate::jsonrpc::{Id, Message, to_raw};
use crate::session::Session;

/// Protocol versions offered to clients through `initialize`, oldest first.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The stateless revision, answered through `server/discover`.
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];
const LATEST_HANDSHAKE: &str = "2025-11-25";
pub(crate) const META_PREFIX: &str = "io.modelcontextprotocol/";

impl Gateway {
    pub(super) fn initialize(&self, session: &Session, params: &Value) -> Value {
        let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or(LATEST_HANDSHAKE);
        let version = if HANDSHAKE_VERSIONS.contains(&asked) { asked } else { LATEST_HANDSHAKE };
        *session.protocol.lock() = Some(version.to_owned());
        *session.client_capabilities.lock() = params.get("capabilities").cloned().unwrap_or(json!({}));
        self.note_client(session, params.get("clientInfo"));
        let mut result = json!({"protocolVersion": version, "capabilities": self.capabilities(), "serverInfo": server_info()});
        if let Some(i) = self.instructions() {
            result["instructions"] = json!(i);
        }
        result
    }

    pub(super) fn discover(&self, session: &Session, params: &Value, id: Id) -> Result<Message, GatewayError> {
        let asked = params.pointer("/_meta/io.modelcontextprotocol~1protocolVersion").and_then(Value::as_str);
        if let Some(v) = asked
            && !MODERN_VERSIONS.contains(&v)
        {
            let mut supported: Vec<&str> = MODERN_VERSIONS.to_vec();
            supported.extend(HANDSHAKE_VERSIONS);
            let e = json!({"code": -32022, "message": format!("unsupported protocol version {v}"), "data": {"supported": supported, "requested": v}});
            return Ok(Message { id: Some(id), error: Some(to_raw(&e)), ..Default::default() });
        }
        *session.protocol.lock() = Some(MODERN_VERSIONS[0].to_owned());
        if let Some(c) = params.pointer("/_meta/io.modelcontextprotocol~1clientCapabilities") {
            *session.client_capabilities.lock() = c.clone();
        }
        self.note_client(session, params.pointer("/_meta/io.modelcontextprotocol~1clientInfo"));
        let mut result = json!({
            "supportedVersions": MODERN_VERSIONS,
            "capabilities": self.capabilities(),
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": server_info()},
        });
        if let Some(i) = self.instructions() {
            result["instructions"] = json!(i);
        }
        Ok(Message::response(Value::Null, &result))
    }

    pub(super) fn capabilities(&self) -> Value {
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
        // Tasks: what the upstreams offer, merged (the gateway routes each task back to the
        // upstream that created it).
        let mut tasks = serde_json::Map::new();
        for u in &self.upstreams {
            if let Some(Value::Object(t)) = u.info().and_then(|i| i.pointer("/capabilities/tasks").cloned()) {
                for (k, v) in t {
                    tasks.entry(k).or_insert(v);
                }
            }
        }
        if !tasks.is_empty() {
            caps["tasks"] = Value::Object(tasks);
        }
        // MCP Apps: declared to every client; only those that declare it back see the view.
        if self.apps().is_some() {
            caps["extensions"] = json!({crate::apps::EXTENSION_ID: {}});
            if caps.get("resources").is_none() {
                caps["resources"] = json!({"listChanged": true, "subscribe": false});
            }
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
}

/// The capabilities a handshake (`initialize` or `server/discover`) declares; `None` for any
/// other request.
pub(super) fn declared_capabilities(method: &str, params: &Value) -> Option<Value> {
    match method {
        "initialize" => Some(params.get("capabilities").cloned().unwrap_or(json!({}))),
        "server/discover" => Some(params.pointer("/_meta/io.modelcontextprotocol~1clientCapabilities").cloned().unwrap_or(json!({}))),
        _ => None,
    }
}

/// Who a handshake says the client is (`clientInfo`), before it is answered: its host's
/// start-up wait applies from the first request on.
pub(super) fn declared_client_info<'a>(method: &str, params: &'a Value) -> Option<&'a Value> {
    match method {
        "initialize" => params.get("clientInfo"),
        "server/discover" => params.pointer("/_meta/io.modelcontextprotocol~1clientInfo"),
        _ => None,
    }
}

pub(crate) fn is_modern_session(session: &Session) -> bool {
    session.protocol.lock().as_deref().is_some_and(|p| MODERN_VERSIONS.contains(&p))
}

/// Whether this request speaks the stateless revision (its envelope says so, or the session
/// was opened with `server/discover`).
pub(super) fn is_modern(session: &Session, msg: &Message) -> bool {
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

/// A stateless request carries the client's protocol and capabilities in its own envelope:
/// the one-request session takes them from there.
pub(super) fn adopt_envelope(session: &Arc<Session>, msg: &Message) {
    let params = msg.params_value();
    if let Some(v) = params.pointer("/_meta/io.modelcontextprotocol~1protocolVersion").and_then(Value::as_str) {
        *session.protocol.lock() = Some(v.to_owned());
    }
    if let Some(c) = params.pointer("/_meta/io.modelcontextprotocol~1clientCapabilities") {
        *session.client_capabilities.lock() = c.clone();
    }
}

/// Results on the 2026-07-28 wire carry `resultType`, and cacheable ones `ttlMs` and
/// `cacheScope`; upstreams on older revisions do not send them. `private` and 0 ms are the
/// safe defaults: a gateway's lists change when upstreams restart. The result's own keys are
/// kept, and a large result is not parsed to add them.
pub(super) fn stamp_modern_result(method: &str, m: &mut Message) {
    let Some(raw) = &m.result else { return };
    let cacheable = matches!(
        method,
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" | "resources/read" | "server/discover"
    );
    let mut defaults = vec![("resultType", json!("complete"))];
    if cacheable {
        defaults.push(("ttlMs", json!(0)));
        defaults.push(("cacheScope", json!("private")));
    }
    if let Some(stamped) = crate::jsonrpc::with_default_keys(raw, &defaults) {
        m.result = Some(stamped);
    }
}

pub(super) fn server_info() -> Value {
    json!({"name": "stowage", "title": "Stowage MCP gateway", "version": env!("CARGO_PKG_VERSION")})
}
