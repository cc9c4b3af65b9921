//! The API's shared state and its tool routes: `/api/info`, `/api/agent`, `/api/tools`,
//! `/api/call` and `/api/calls/{call}/original`.
//!
//! A call goes through [`Gateway::call_tool`], the path every MCP client's `tools/call` takes,
//! asking it to keep the upstream's own result: the page shows both, measured the same way
//! the gateway measures every call (bytes, o200k tokens).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use stowage_http::{ApiError, Identity, LinkService};
use stowage_mcp::{CallOptions, Caller, Gateway, GatewayError, Session, SessionKind};
use stowage_store::ArtifactStore;

use crate::{GatewaySlot, PlaygroundOptions};

/// The upstream's original text shown in the page is cut here; the whole of it is a download.
pub(crate) const ORIGINAL_SHOWN_BYTES: usize = 1024 * 1024;
/// How many calls' originals are kept for download, and how many bytes in all.
const ORIGINALS_KEPT: usize = 32;
const ORIGINALS_MAX_BYTES: usize = 256 * 1024 * 1024;
/// A caller's default session (requests that name none) ends after this long unused.
const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(600);

/// What every API handler shares.
#[derive(Clone)]
pub(crate) struct Api {
    gw: GatewaySlot,
    pub(crate) store: Option<Arc<dyn ArtifactStore>>,
    pub(crate) links: Option<LinkService>,
    agent_model: Option<String>,
    store_label: Arc<str>,
    auth: bool,
    pub(crate) pages: Arc<PageSessions>,
    originals: Arc<Mutex<Originals>>,
}

impl Api {
    pub(crate) fn new(opts: &PlaygroundOptions, auth: bool) -> Api {
        Api {
            gw: opts.gateway.clone(),
            store: opts.store.clone(),
            links: opts.links.clone(),
            agent_model: opts.agent_model.clone(),
            store_label: opts.store_label.as_str().into(),
            auth,
            pages: Arc::default(),
            originals: Arc::default(),
        }
    }

    pub(crate) fn gateway(&self) -> Result<Arc<Gateway>, ApiError> {
        self.gw
            .get()
            .cloned()
            .ok_or_else(|| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the gateway is starting; try again"))
    }

    /// The session a request runs in: the page's own (`session`, opened by its events stream),
    /// which must belong to the caller, else the caller's default one.
    pub(crate) fn session(&self, caller: &Caller, id: Option<&str>) -> Result<Arc<Session>, ApiError> {
        let gw = self.gateway()?;
        match id.filter(|s| !s.is_empty()) {
            Some(id) => self.pages.get(caller, id).ok_or_else(|| {
                // Another caller's session answers exactly like one that never existed.
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("no session {id:?}: open GET /api/events and use its ready session"),
                )
            }),
            None => Ok(self.pages.default_for(&gw, caller)),
        }
    }
}

/// Who is asking: the authenticated identity, or the one local user.
pub(crate) fn caller(identity: Option<Extension<Identity>>) -> Caller {
    identity.map_or_else(Caller::local, |Extension(i)| Caller { tenant: i.tenant_id, user: i.user_id })
}

/// A JSON body, or a 400 that says what shape was expected.
pub(crate) fn parse<T: DeserializeOwned>(body: &Bytes, shape: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("the body must be {shape}: {e}")))
}

/// Sessions the page uses: one per open events stream, and one default per caller.
#[derive(Default)]
pub(crate) struct PageSessions {
    open: Mutex<HashMap<String, PageSession>>,
}

struct PageSession {
    session: Arc<Session>,
    caller: Caller,
    /// Default sessions are swept when idle; stream sessions end with their stream.
    default: bool,
    used: Instant,
}

impl PageSessions {
    pub(crate) fn add(&self, session: Arc<Session>, caller: Caller) {
        let entry = PageSession { session: session.clone(), caller, default: false, used: Instant::now() };
        self.open.lock().insert(session.id.clone(), entry);
    }

    pub(crate) fn remove(&self, id: &str) {
        self.open.lock().remove(id);
    }

    fn get(&self, caller: &Caller, id: &str) -> Option<Arc<Session>> {
        let mut open = self.open.lock();
        let p = open.get_mut(id).filter(|p| &p.caller == caller)?;
        p.used = Instant::now();
        Some(p.session.clone())
    }

    fn default_for(&self, gw: &Arc<Gateway>, caller: &Caller) -> Arc<Session> {
        let mut open = self.open.lock();
        let now = Instant::now();
        let idle: Vec<String> =
            open.iter().filter(|(_, p)| p.default && now.duration_since(p.used) > DEFAULT_SESSION_IDLE).map(|(k, _)| k.clone()).collect();
        for id in idle {
            if let Some(p) = open.remove(&id) {
                gw.close_session(&p.session);
            }
        }
        if let Some(p) = open.values_mut().find(|p| p.default && &p.caller == caller) {
            p.used = now;
            return p.session.clone();
        }
        let session = gw.open_session(SessionKind::InProcess, caller.clone(), None);
        open.insert(session.id.clone(), PageSession { session: session.clone(), caller: caller.clone(), default: true, used: now });
        session
    }
}

/// The last calls' original results, for `/api/calls/{call}/original`.
#[derive(Default)]
struct Originals {
    kept: VecDeque<(u64, Caller, Arc<str>)>,
    bytes: usize,
}

impl Originals {
    fn keep(&mut self, call: u64, caller: Caller, text: Arc<str>) {
        self.bytes += text.len();
        self.kept.push_back((call, caller, text));
        while self.kept.len() > ORIGINALS_KEPT || (self.bytes > ORIGINALS_MAX_BYTES && self.kept.len() > 1) {
            if let Some((_, _, t)) = self.kept.pop_front() {
                self.bytes -= t.len();
            }
        }
    }

    fn get(&self, call: u64, caller: &Caller) -> Option<Arc<str>> {
        self.kept.iter().find(|(c, who, _)| *c == call && who == caller).map(|(_, _, t)| t.clone())
    }
}

pub(crate) async fn info(State(api): State<Api>) -> Result<Json<Value>, ApiError> {
    let gw = api.gateway()?;
    let catalog = gw.catalog();
    let upstreams: Vec<Value> = gw
        .upstreams
        .iter()
        .map(|u| {
            let tools = catalog.tools.iter().filter(|t| t.upstream == u.index).count();
            json!({"name": u.name(), "connected": u.current().is_some(), "tools": tools})
        })
        .collect();
    Ok(Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "auth": api.auth,
        "agent": api.agent_model.is_some(),
        "links": api.links.is_some(),
        "store": &*api.store_label,
        "upstreams": upstreams,
        "hosts": gw.hosts().profiles().map(|p| json!({"name": p.name, "matches": p.matches})).collect::<Vec<_>>(),
    })))
}

pub(crate) async fn agent(State(api): State<Api>) -> Json<Value> {
    Json(match &api.agent_model {
        Some(model) => json!({"configured": true, "model": model}),
        None => json!({"configured": false}),
    })
}

#[derive(Deserialize)]
pub(crate) struct SessionQuery {
    pub(crate) session: Option<String>,
}

pub(crate) async fn tools(
    State(api): State<Api>,
    identity: Option<Extension<Identity>>,
    Query(q): Query<SessionQuery>,
) -> Result<Json<Value>, ApiError> {
    let session = api.session(&caller(identity), q.session.as_deref())?;
    let gw = api.gateway()?;
    gw.wait_startup().await;
    Ok(Json(json!({"tools": gw.tools_for(&session).await})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallBody {
    tool: String,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(default)]
    session: Option<String>,
    /// Shape the answer for this host profile (default: the page session's).
    #[serde(default)]
    host: Option<String>,
}

pub(crate) async fn call(State(api): State<Api>, identity: Option<Extension<Identity>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let body: CallBody = parse(&body, "{\"tool\": \"name\", \"arguments\": {…}?, \"session\": \"id\"?, \"host\": \"profile\"?}")?;
    let caller = caller(identity);
    let session = api.session(&caller, body.session.as_deref())?;
    let gw = api.gateway()?;
    let arguments = body.arguments.unwrap_or_else(|| json!({}));
    if !arguments.is_object() {
        return Err(ApiError::bad_request("arguments must be a JSON object"));
    }
    let host = match body.host.as_deref() {
        Some(name) => {
            gw.hosts().by_name(name).ok_or_else(|| ApiError::bad_request(GatewayError::UnknownHost(name.to_owned()).to_string()))?
        }
        None => gw.session_host(&session),
    };
    let opts = CallOptions { keep_original: true, host: Some(host.name.clone()), ..CallOptions::default() };
    let outcome = gw.call_tool(&session, &body.tool, arguments, opts).await.map_err(|e| match e {
        GatewayError::UnknownTool(t) => {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no tool named {t:?}: GET /api/tools lists them"))
        }
        GatewayError::Refused { message, code, .. } => {
            ApiError::new(StatusCode::BAD_GATEWAY, "tool_refused", format!("the upstream refused the call ({code}): {message}"))
        }
        other => ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", other.to_string()),
    })?;
    let report = outcome.report;
    let result_text = serde_json::to_string(&outcome.result).unwrap_or_default();
    let original = report.original.map(|text| {
        let text: Arc<str> = text.into();
        let shown = stowage_core::cut_at_char(&text, ORIGINAL_SHOWN_BYTES);
        let truncated = shown.len() < text.len();
        let value = json!({
            "text": shown,
            "bytes": text.len(),
            "tokens": report.tokens_in,
            "truncated": truncated,
            "download": format!("/api/calls/{}/original", report.call),
        });
        api.originals.lock().keep(report.call, caller.clone(), text);
        value
    });
    let (bytes_in, bytes_out) = (report.bytes_in, result_text.len() as u64);
    let transform = report.transform.as_ref();
    let mut layers: Vec<String> = Vec::new();
    let mut note = |l: String| {
        if !layers.contains(&l) {
            layers.push(l);
        }
    };
    let mut artifacts = Vec::new();
    let mut listed = std::collections::HashSet::new();
    if let Some(t) = transform {
        for a in &t.artifacts {
            note(layer_name(&a.layer));
            // One artifact found twice (the same bytes in two places) is listed once.
            if !listed.insert(a.id.clone()) {
                continue;
            }
            artifacts.push(api.artifact_json(&session, &a.id).await.unwrap_or_else(
                || json!({"id": a.id, "uri": a.uri, "mime_type": a.mime_type, "size_bytes": a.size_bytes, "sha256": a.sha256, "url": null}),
            ));
        }
        for w in &t.warnings {
            note(layer_name(&w.layer));
        }
        if t.clamped {
            note("clamp".into());
        }
    }
    let saved_bytes = bytes_in.saturating_sub(bytes_out);
    let saved_tokens = report.tokens_in.saturating_sub(report.tokens_out);
    let ratio = if bytes_out > 0 { (bytes_in as f64 / bytes_out as f64 * 10.0).round() / 10.0 } else { 0.0 };
    Ok(Json(json!({
        "call": report.call,
        "tool": report.tool,
        "upstream": report.upstream,
        "latency_ms": (report.latency.as_secs_f64() * 10_000.0).round() / 10.0,
        "is_error": outcome.result.get("isError").and_then(Value::as_bool).unwrap_or(false),
        "original": original,
        "host": host.name,
        "result": {"value": outcome.result, "text": result_text, "bytes": bytes_out, "tokens": report.tokens_out,
            "visible": stowage_mcp::shape::measure::model_view(&outcome.result, &host)},
        "saved": {"bytes": saved_bytes, "tokens": saved_tokens, "ratio": ratio},
        "layers": layers,
        "artifacts": artifacts,
        "warnings": transform.map(|t| t.warnings.iter().map(|w| w.message.clone()).collect::<Vec<_>>()).unwrap_or_default(),
        "clamped": transform.is_some_and(|t| t.clamped),
    })))
}

/// A layer's name as the config spells it.
fn layer_name(layer: &impl serde::Serialize) -> String {
    serde_json::to_value(layer).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "transform".into())
}

pub(crate) async fn original(State(api): State<Api>, identity: Option<Extension<Identity>>, Path(call): Path<u64>) -> Response {
    let Some(text) = api.originals.lock().get(call, &caller(identity)) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("call {call}'s original is not kept (only the last {ORIGINALS_KEPT} calls' are)"),
        )
        .into_response();
    };
    let mut resp = Bytes::from(text.as_bytes().to_vec()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"call-{call}-original.json\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn originals_are_bounded_and_kept_per_caller() {
        let mut o = Originals::default();
        let me = Caller::local();
        let other = Caller { tenant: None, user: Some("other".into()) };
        for call in 0..40 {
            o.keep(call, me.clone(), Arc::from("x"));
        }
        assert_eq!(o.kept.len(), ORIGINALS_KEPT);
        assert!(o.get(3, &me).is_none() && o.get(39, &me).is_some());
        assert!(o.get(39, &other).is_none(), "another caller's original must not be served");
    }
}
