//! `/api/resources`: the upstreams' resources and templates, reads, and subscriptions, in the
//! page's session. Lists are fetched upstream by upstream ([`Gateway::resources_by_upstream`]),
//! so one upstream that cannot list (a server without `resources/templates/list`, one that is
//! down) is named under `failed` while the page shows what the others listed. Reads and
//! subscriptions are sent as the JSON-RPC request an MCP client would send, through
//! [`Gateway::handle`]. A read the gateway offloaded comes back as its artifacts, described
//! for previews; updates to subscribed resources arrive on the page's events stream.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use stowage_http::{ApiError, Identity};
use stowage_mcp::{Gateway, Session};

use crate::api::{Api, SessionQuery, caller, parse};

/// `resources/read`'s and `resources/subscribe`'s code for an unknown resource.
const RESOURCE_NOT_FOUND: i64 = -32002;

/// Sends `method` with `params` as `session`'s request; the result, or the error as an
/// [`ApiError`] that carries the upstream's message.
async fn request(gw: &Arc<Gateway>, session: &Arc<Session>, method: &str, params: Value) -> Result<Value, ApiError> {
    gw.send_request(session, method, params).await.map_err(|(code, message)| {
        let (status, name) =
            if code == RESOURCE_NOT_FOUND { (StatusCode::NOT_FOUND, "not_found") } else { (StatusCode::BAD_GATEWAY, "upstream_error") };
        ApiError::new(status, name, format!("{method}: {message}"))
    })
}

pub(crate) async fn list(
    State(api): State<Api>,
    identity: Option<Extension<Identity>>,
    Query(q): Query<SessionQuery>,
) -> Result<Json<Value>, ApiError> {
    let session = api.session(&caller(identity), q.session.as_deref())?;
    let gw = api.gateway()?;
    let (mut resources, mut templates, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for (templates_list, into) in [(false, &mut resources), (true, &mut templates)] {
        let list = if templates_list { "resources/templates/list" } else { "resources/list" };
        for (upstream, listed) in gw.resources_by_upstream(&session, templates_list).await {
            match listed {
                Ok(items) => into.extend(items),
                Err(message) => failed.push(json!({"upstream": upstream, "list": list, "message": message})),
            }
        }
    }
    Ok(Json(json!({"resources": resources, "templates": templates, "failed": failed})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UriBody {
    uri: String,
    #[serde(default)]
    session: Option<String>,
}

const URI_SHAPE: &str = "{\"uri\": \"…\", \"session\": \"id\"?}";

pub(crate) async fn read(State(api): State<Api>, identity: Option<Extension<Identity>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let body: UriBody = parse(&body, URI_SHAPE)?;
    let session = api.session(&caller(identity), body.session.as_deref())?;
    let gw = api.gateway()?;
    let result = request(&gw, &session, "resources/read", json!({"uri": body.uri})).await?;
    // The entries the gateway offloaded name their artifact in `_meta["io.stowage/artifact"]`.
    let ids: Vec<String> = result
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.pointer("/_meta/io.stowage~1artifact/id").and_then(Value::as_str).map(str::to_owned))
        .collect();
    let mut artifacts = Vec::new();
    for id in ids {
        if let Some(a) = api.artifact_json(&session, &id).await {
            artifacts.push(a);
        }
    }
    Ok(Json(json!({"result": result, "artifacts": artifacts})))
}

pub(crate) async fn subscribe(state: State<Api>, identity: Option<Extension<Identity>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    subscription(state, identity, body, "resources/subscribe").await
}

pub(crate) async fn unsubscribe(state: State<Api>, identity: Option<Extension<Identity>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    subscription(state, identity, body, "resources/unsubscribe").await
}

async fn subscription(
    State(api): State<Api>,
    identity: Option<Extension<Identity>>,
    body: Bytes,
    method: &str,
) -> Result<Json<Value>, ApiError> {
    let body: UriBody = parse(&body, "{\"uri\": \"…\", \"session\": \"id\"}")?;
    // Updates go to a stream: without the page's own session they would go nowhere.
    let Some(id) = body.session.as_deref().filter(|s| !s.is_empty()) else {
        return Err(ApiError::bad_request("session is required: open GET /api/events and pass its ready session"));
    };
    let session = api.session(&caller(identity), Some(id))?;
    let gw = api.gateway()?;
    request(&gw, &session, method, json!({"uri": body.uri})).await?;
    Ok(Json(json!({"ok": true})))
}
