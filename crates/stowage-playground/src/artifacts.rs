//! `/api/artifacts`: the caller's artifacts, a page at a time, each described with a fresh
//! signed link the page previews and downloads through (never the bytes themselves).
//!
//! Listing asks the store for exactly the caller's artifacts ([`ListQuery::owner`]), so the
//! owner rule is the store's, not the page's. Another owner's id answers like one that never
//! existed.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use stowage_http::{ApiError, Identity, Kind, describe, kind_of};
use stowage_mcp::Session;
use stowage_store::ListQuery;

use crate::api::{Api, caller};

/// The most items one page may ask for.
pub(crate) const MAX_PAGE: usize = 500;
const DEFAULT_PAGE: usize = 50;
/// A kind filter scans at most this many records per request (its page may then come back
/// short, with a cursor to go on from).
const MAX_SCAN: usize = 5000;

impl Api {
    /// `id` described for `session`'s owner with a fresh link; `None` when it is not theirs
    /// (or there is no store).
    pub(crate) async fn artifact_json(&self, session: &Session, id: &str) -> Option<Value> {
        let store = self.store.as_ref()?;
        let parsed = stowage_core::ArtifactId::parse_loose(id.trim()).ok()?;
        let meta = store.meta(&stowage_store::Access::owner_of(&session.scope), &parsed).await.ok()?;
        let link = self.links.as_ref().map(|l| l.link_for(&meta));
        Some(describe(&meta, link.as_ref()))
    }

    fn store(&self) -> Result<&Arc<dyn stowage_store::ArtifactStore>, ApiError> {
        self.store.as_ref().ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", "no artifact store is configured"))
    }
}

#[derive(Deserialize)]
pub(crate) struct ListParams {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    cursor: Option<String>,
    /// Only artifacts stored in this session.
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    /// The page's own session (its owner is the caller's; needed only under session isolation).
    #[serde(default)]
    page: Option<String>,
}

pub(crate) async fn list(
    State(api): State<Api>,
    identity: Option<Extension<Identity>>,
    Query(q): Query<ListParams>,
) -> Result<Json<Value>, ApiError> {
    let store = api.store()?.clone();
    let session = api.session(&caller(identity), q.page.as_deref())?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    let kind = match q.kind.as_deref().filter(|k| !k.is_empty() && *k != "all") {
        Some(k) => Some(serde_json::from_value::<Kind>(Value::String(k.to_owned())).map_err(|_| {
            ApiError::bad_request(format!("unknown kind {k:?}: use image, svg, pdf, audio, video, json, csv, text, html or other"))
        })?),
        None => None,
    };
    let mut query = ListQuery {
        owner: Some(session.scope.owner()),
        session_id: q.session.filter(|s| !s.is_empty()),
        trace_id: None,
        cursor: q.cursor.filter(|c| !c.is_empty()),
        limit,
    };
    let mut items = Vec::new();
    let mut scanned = 0;
    let next = loop {
        // With a kind filter, ask only for as many as are still missing: the page never
        // overshoots, so nothing between two pages is skipped.
        query.limit = limit - items.len();
        let page = store.list(query.clone()).await.map_err(ApiError::from)?;
        scanned += page.items.len();
        for meta in page.items.iter().filter(|m| kind.is_none_or(|k| kind_of(m.mime_type.as_deref()) == k)) {
            let link = api.links.as_ref().map(|l| l.link_for(meta));
            items.push(describe(meta, link.as_ref()));
        }
        match page.next {
            Some(next) if items.len() < limit && scanned < MAX_SCAN => query.cursor = Some(next),
            next => break next,
        }
    };
    Ok(Json(json!({"items": items, "next": next})))
}

#[derive(Deserialize)]
pub(crate) struct OneParams {
    #[serde(default)]
    page: Option<String>,
}

pub(crate) async fn one(
    State(api): State<Api>,
    identity: Option<Extension<Identity>>,
    Path(id): Path<String>,
    Query(q): Query<OneParams>,
) -> Result<Json<Value>, ApiError> {
    api.store()?;
    let session = api.session(&caller(identity), q.page.as_deref())?;
    api.artifact_json(&session, &id)
        .await
        .map(Json)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no artifact {id:?}")))
}
