//! A downstream session: one connected client, whose artifacts it stores under its owner,
//! and the requests open in each direction.
//!
//! Ownership: artifacts belong to the caller's tenant and user; the session id (and, per
//! call, a trace id) is recorded with each artifact for grouping and for its budgets. An
//! authenticated caller brings its tenant and user; without authentication every client is
//! the one local user, [`LOCAL_USER`]. Whether another session of the same user can reach an
//! artifact is the store's decision (`[store] isolate_sessions`), never the gateway's.
//!
//! A session ends ([`Session::close`]) when its transport ends: requests the gateway sent the
//! client fail at once, and its own upstream sessions are closed.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use stowage_core::ArtifactScope;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::jsonrpc::{Id, Message};
use crate::outbox::{Outbox, OutboxError};

/// The user an unauthenticated client acts as: one local user owns everything a gateway
/// without `[auth]` stores.
pub const LOCAL_USER: &str = "local";

/// How a client is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    /// One client on stdin/stdout.
    Stdio,
    /// A Streamable HTTP session (`Mcp-Session-Id`).
    Http,
    /// One stateless (2026-07-28) HTTP request: no stream outlives it.
    Stateless,
    /// A caller inside this process (the agent planner, the playground).
    InProcess,
}

/// Who is calling: the identity's tenant and user (`None`: an unauthenticated client).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Caller {
    /// The tenant the credential belongs to; artifacts are scoped to it.
    pub tenant: Option<String>,
    /// The user the credential names; owns what the caller's calls store.
    pub user: Option<String>,
}

impl Caller {
    /// The one local user of a gateway without authentication.
    pub fn local() -> Caller {
        Caller { tenant: None, user: Some(LOCAL_USER.to_owned()) }
    }
}

/// One client connection (or one in-process caller): its identity, what it negotiated, and
/// its requests in both directions. Shared by the transport and the gateway's tasks.
pub struct Session {
    /// A random UUID; also the `Mcp-Session-Id` of an HTTP session.
    pub id: String,
    /// How the client is connected.
    pub kind: SessionKind,
    /// Who owns what this session's calls store (tenant, user, this session's id).
    pub scope: ArtifactScope,
    /// Messages not tied to a request (list_changed, resource updates, session-level
    /// requests from an upstream).
    notify: Mutex<Option<Outbox>>,
    /// The protocol version agreed in `initialize`; `None` before it.
    pub(crate) protocol: Mutex<Option<String>>,
    /// The `capabilities` the client declared in `initialize` (`{}` before it).
    pub(crate) client_capabilities: Mutex<Value>,
    client_pending: Mutex<HashMap<String, oneshot::Sender<Message>>>,
    next_id: AtomicU64,
    inflight: Mutex<HashMap<String, CancellationToken>>,
    /// Resource URIs the client subscribed to: their update notifications go to it.
    pub(crate) subscriptions: Mutex<HashSet<String>>,
    /// The client's `clientInfo.name` and the host profile it picked (see [`crate::hosts`]);
    /// `None` until the client says who it is (in-process callers never do).
    pub host: Mutex<Option<(String, Arc<crate::hosts::HostProfile>)>>,
    /// Resources this client's own upstream sessions listed, by URI: where to read them.
    pub resource_routes: Mutex<HashMap<String, usize>>,
    /// Tools and prompts this client's own upstream sessions listed (see
    /// [`crate::catalog::OwnLists`]).
    pub own_lists: Mutex<crate::catalog::OwnLists>,
    /// Whether the client is still there, as its transport can tell (see [`Session::present`]).
    presence: std::sync::OnceLock<Box<dyn Fn() -> bool + Send + Sync>>,
    /// Set for sessions that share their upstream sessions with the other sessions of the
    /// same owner opened under the same host profile (the planner's: see
    /// [`Session::set_upstream_group`]).
    upstream_group: std::sync::OnceLock<String>,
    closed: CancellationToken,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).field("kind", &self.kind).finish_non_exhaustive()
    }
}

/// A stable map key for a JSON-RPC id (1 and "1" stay distinct).
pub(crate) fn id_key(id: &Id) -> String {
    id.to_string()
}

impl Session {
    /// A session for `caller` (its tenant and user; an unauthenticated caller is the local user).
    pub fn new(kind: SessionKind, caller: Caller, notify: Option<Outbox>) -> Session {
        let id = uuid::Uuid::new_v4().to_string();
        let caller = if caller.user.is_none() && caller.tenant.is_none() { Caller::local() } else { caller };
        let scope = ArtifactScope { tenant_id: caller.tenant, user_id: caller.user, session_id: Some(id.clone()), trace_id: None };
        Session {
            id,
            kind,
            scope,
            notify: Mutex::new(notify),
            protocol: Mutex::new(None),
            client_capabilities: Mutex::new(json!({})),
            client_pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            inflight: Mutex::new(HashMap::new()),
            subscriptions: Mutex::new(HashSet::new()),
            host: Mutex::new(None),
            resource_routes: Mutex::new(HashMap::new()),
            own_lists: Mutex::default(),
            presence: std::sync::OnceLock::new(),
            upstream_group: std::sync::OnceLock::new(),
            closed: CancellationToken::new(),
        }
    }

    /// Whether this is one stateless HTTP request: nothing can be sent once it is answered.
    pub(crate) fn is_stateless(&self) -> bool {
        self.kind == SessionKind::Stateless
    }

    /// Which upstream session this client's requests use in `per_client` mode: its own; for a
    /// stateless client, one per identity and declared capabilities (a stateless request has
    /// no session to keep, and what a server offers may depend on what the client can do);
    /// for a session in an upstream group (the planner's), one per group, owner and
    /// capabilities, so that group keeps its upstream sessions from one session to the next.
    pub fn upstream_key(&self) -> String {
        let owner = || {
            let part = |p: &Option<String>| p.as_deref().map_or("-".to_owned(), |s| format!("{}:{s}", s.len()));
            format!("{}|{}", part(&self.scope.tenant_id), part(&self.scope.user_id))
        };
        let caps = || {
            let caps = self.upstream_capabilities();
            let caps: Vec<String> =
                ["sampling", "elicitation", "roots"].iter().filter_map(|k| caps.get(*k).map(|v| format!("{k}={v}"))).collect();
            caps.join(";")
        };
        match (self.kind, self.upstream_group.get()) {
            (SessionKind::Stateless, _) => format!("user|{}|{}", owner(), caps()),
            (_, Some(group)) => format!("group|{}:{group}|{}|{}", group.len(), owner(), caps()),
            _ => self.id.clone(),
        }
    }

    /// Makes this session share its upstream sessions with every other session of the same
    /// owner in `group` (the planner puts each of its conversations in one): they keep one
    /// upstream session per server between them, open until idle, instead of one each.
    /// Set once, before the first request.
    pub fn set_upstream_group(&self, group: &str) {
        let _ = self.upstream_group.set(group.to_owned());
    }

    /// Whether this session's upstream sessions are shared with other sessions of its owner
    /// (a stateless client's, or a group's): no single session owns their session-level
    /// messages, and one session ending does not end them.
    pub(crate) fn shares_upstream_sessions(&self) -> bool {
        self.is_stateless() || self.upstream_group.get().is_some()
    }

    /// The pristine upstream session this client may use for what cannot change session state
    /// (see `upstream::sessions`): one per identity, so connections of different people never
    /// meet even there.
    pub(crate) fn pristine_key(&self) -> String {
        let part = |p: &Option<String>| p.as_deref().map_or("-".to_owned(), |s| format!("{}:{s}", s.len()));
        format!("pristine|{}|{}", part(&self.scope.tenant_id), part(&self.scope.user_id))
    }

    /// Whether the client declared nothing an upstream could ask it for (sampling,
    /// elicitation, roots): only such a client may be served by a pristine session, where a
    /// question the server asked could not be told apart from another client's.
    pub(crate) fn asks_nothing_back(&self) -> bool {
        self.upstream_capabilities().as_object().is_none_or(serde_json::Map::is_empty)
    }

    /// The capabilities a client-session upstream connection declares: exactly those of the
    /// client behind it, so an upstream never asks it for what it cannot give.
    pub fn upstream_capabilities(&self) -> Value {
        upstream_capabilities(&self.client_capabilities.lock())
    }

    /// How the transport tells whether the client is still there (HTTP: a stream open, a
    /// call in flight, or a request lately). Set once, by the transport that made the session.
    pub fn set_presence(&self, present: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.presence.set(Box::new(present));
    }

    /// Whether the client is still there: a stdio or in-process client is while its session
    /// is open; an HTTP client that left without `DELETE` is not, once its transport says so.
    pub fn present(&self) -> bool {
        self.presence.get().is_none_or(|present| present())
    }

    /// Replaces the general stream (an HTTP client opened its GET stream).
    pub fn set_notify(&self, outbox: Option<Outbox>) {
        *self.notify.lock() = outbox;
    }

    /// Sends a notification on the general stream, if the client has one open (dropped when
    /// the client is not keeping up).
    pub fn notify(&self, msg: &Message) -> bool {
        let outbox = self.notify.lock().clone();
        outbox.is_some_and(|o| o.notify(msg.to_line()))
    }

    /// The general stream, for server-initiated requests outside a call.
    pub fn general_stream(&self) -> Option<Outbox> {
        self.notify.lock().clone()
    }

    /// Whether the client declared `key` (`sampling`, `elicitation`, `roots`) in its
    /// capabilities.
    pub fn has_capability(&self, key: &str) -> bool {
        self.client_capabilities.lock().get(key).is_some()
    }

    /// Sends a request to the client on `outbox` and waits for its answer.
    pub async fn request_client(
        &self,
        method: &str,
        params: Option<crate::jsonrpc::Raw>,
        outbox: &Outbox,
        timeout: Duration,
    ) -> Result<Message, String> {
        let id = json!(format!("stowage-{}", self.next_id.fetch_add(1, Ordering::Relaxed)));
        let (tx, rx) = oneshot::channel();
        if self.closed.is_cancelled() {
            return Err("the client has disconnected".into());
        }
        self.client_pending.lock().insert(id_key(&id), tx);
        let msg = Message { jsonrpc: "2.0", id: Some(id.clone()), method: Some(method.into()), params, ..Default::default() };
        if let Err(e) = outbox.deliver(msg.to_line()).await {
            self.client_pending.lock().remove(&id_key(&id));
            return Err(e.to_string());
        }
        let answer = tokio::select! {
            r = tokio::time::timeout(timeout, rx) => match r {
                Ok(Ok(m)) => Ok(m),
                Ok(Err(_)) => Err("the client has disconnected".to_owned()),
                Err(_) => Err(format!("no answer within {}s", timeout.as_secs())),
            },
            _ = self.closed.cancelled() => Err("the client has disconnected".to_owned()),
        };
        self.client_pending.lock().remove(&id_key(&id));
        answer
    }

    /// Delivers the client's answer to a request the gateway sent it. False if unknown.
    pub fn resolve(&self, msg: Message) -> bool {
        let Some(id) = msg.id.as_ref() else { return false };
        let pending = self.client_pending.lock().remove(&id_key(id));
        pending.is_some_and(|tx| tx.send(msg).is_ok())
    }

    /// Registers a client request as in flight; the token fires on `notifications/cancelled`.
    /// Idempotent: transports register a request as soon as it is read, before handing it to
    /// a task, so a cancellation that follows right behind it is never missed.
    pub fn begin(&self, id: &Id) -> CancellationToken {
        self.inflight.lock().entry(id_key(id)).or_default().clone()
    }

    /// Forgets the client's request `id` once it is answered (see [`Session::begin`]).
    pub(crate) fn end(&self, id: &Id) {
        self.inflight.lock().remove(&id_key(id));
    }

    /// Whether a request from the client, or one to it, is still open.
    pub fn busy(&self) -> bool {
        !self.inflight.lock().is_empty() || !self.client_pending.lock().is_empty()
    }

    /// Cancels the client's request `id`, if it is still running.
    pub fn cancel(&self, id: &Id) -> bool {
        let token = self.inflight.lock().remove(&id_key(id));
        token.inspect(CancellationToken::cancel).is_some()
    }

    /// Ends the session's side towards the client: requests waiting for the client fail at
    /// once, and nothing more is sent to it. Requests the client made may still finish; the
    /// session's own upstream connections close once nothing is in flight on them (or at once
    /// through `Gateway::close_session`).
    pub fn close(&self) {
        self.closed.cancel();
        self.client_pending.lock().clear();
        self.set_notify(None);
    }

    /// Whether [`Session::close`] was called: nothing more is sent to the client.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Resolves when the session has ended.
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }
}

/// Sends `line` to `outbox`, logging (rather than failing) when the client cannot take it.
pub(crate) async fn deliver_or_log(outbox: &Outbox, line: Vec<u8>, what: &str) {
    match outbox.deliver(line).await {
        Ok(()) | Err(OutboxError::Closed) => {}
        Err(e) => tracing::warn!(target: "stowage::gateway", "could not deliver {what}: {e}"),
    }
}

/// Every live session of a gateway, for what goes to all of them (list changes) and to find
/// the single client of a shared upstream connection.
#[derive(Default)]
pub(crate) struct Sessions {
    all: Mutex<Vec<Weak<Session>>>,
}

impl Sessions {
    pub(crate) fn add(&self, s: &Arc<Session>) {
        let mut all = self.all.lock();
        all.retain(|w| w.upgrade().is_some_and(|s| !s.is_closed()));
        all.push(Arc::downgrade(s));
        metrics::gauge!("stowage_sessions").set(all.len() as f64);
    }

    pub(crate) fn live(&self) -> Vec<Arc<Session>> {
        self.all.lock().iter().filter_map(Weak::upgrade).filter(|s| !s.is_closed()).collect()
    }

    /// The one session with a stream of its own, if exactly one is live and present
    /// (stateless requests do not count: nothing can reach them outside their call; nor do
    /// clients that left without ending their session: see [`Session::present`]).
    pub(crate) fn only_one(&self) -> Option<Arc<Session>> {
        let mut live = self.live().into_iter().filter(|s| !s.is_stateless() && s.present());
        let first = live.next()?;
        live.next().is_none().then_some(first)
    }
}

/// What an upstream session opened for a client declares: the client's own capabilities of
/// those an upstream may use (sampling, elicitation, roots), so an upstream never asks it for
/// what it cannot give, and offers what it would offer it directly.
pub(crate) fn upstream_capabilities(client: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in ["sampling", "elicitation", "roots"] {
        if let Some(v) = client.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_clients_are_the_local_user_and_sessions_stay_on_the_scope() {
        let a = Session::new(SessionKind::Stdio, Caller::default(), None);
        let b = Session::new(SessionKind::Http, Caller::default(), None);
        assert_eq!(a.scope.user_id.as_deref(), Some(LOCAL_USER));
        assert_eq!((a.scope.tenant_id.clone(), a.scope.user_id.clone()), (b.scope.tenant_id.clone(), b.scope.user_id.clone()));
        assert_ne!(a.scope.session_id, b.scope.session_id);
        let alice = Session::new(SessionKind::Http, Caller { tenant: Some("t".into()), user: Some("alice".into()) }, None);
        assert_eq!(alice.scope.user_id.as_deref(), Some("alice"));
    }

    #[test]
    fn stateless_requests_of_one_identity_and_capabilities_share_an_upstream_key() {
        let who = Caller { tenant: Some("t".into()), user: Some("u".into()) };
        let a = Session::new(SessionKind::Stateless, who.clone(), None);
        let b = Session::new(SessionKind::Stateless, who.clone(), None);
        // One that can sample may be offered other tools: it has its own.
        let sampler = Session::new(SessionKind::Stateless, who, None);
        *sampler.client_capabilities.lock() = json!({"sampling": {}, "experimental": {}});
        assert_ne!(a.upstream_key(), sampler.upstream_key());
        let c = Session::new(SessionKind::Stateless, Caller { tenant: Some("t".into()), user: Some("v".into()) }, None);
        assert_eq!(a.upstream_key(), b.upstream_key());
        assert_ne!(a.upstream_key(), c.upstream_key());
        let s = Session::new(SessionKind::Http, Caller::default(), None);
        assert_eq!(s.upstream_key(), s.id);
    }

    #[test]
    fn sessions_of_one_group_and_owner_share_an_upstream_key_and_no_one_else_does() {
        let ana = Caller { tenant: None, user: Some("ana".into()) };
        let group = |caller: &Caller, group: &str| {
            let s = Session::new(SessionKind::InProcess, caller.clone(), None);
            s.set_upstream_group(group);
            s
        };
        let (a, b) = (group(&ana, "planner"), group(&ana, "planner"));
        assert_eq!(a.upstream_key(), b.upstream_key());
        assert!(a.shares_upstream_sessions());
        assert_ne!(a.upstream_key(), group(&Caller { tenant: None, user: Some("bob".into()) }, "planner").upstream_key());
        assert_ne!(a.upstream_key(), group(&ana, "other").upstream_key());
        // Neither a plain session of the same owner nor a stateless request of theirs.
        let plain = Session::new(SessionKind::InProcess, ana.clone(), None);
        assert!(!plain.shares_upstream_sessions());
        assert_ne!(a.upstream_key(), plain.upstream_key());
        assert_ne!(a.upstream_key(), Session::new(SessionKind::Stateless, ana, None).upstream_key());
    }

    #[test]
    fn only_clients_that_declare_nothing_to_ask_may_use_a_pristine_session_of_their_identity() {
        let s = Session::new(SessionKind::Http, Caller::default(), None);
        assert!(s.asks_nothing_back());
        *s.client_capabilities.lock() = json!({"experimental": {}, "extensions": {}});
        assert!(s.asks_nothing_back(), "capabilities an upstream never uses do not count");
        for caps in [json!({"roots": {}}), json!({"sampling": {}}), json!({"elicitation": {"form": {}}})] {
            *s.client_capabilities.lock() = caps.clone();
            assert!(!s.asks_nothing_back(), "{caps}");
        }
        let other = Session::new(SessionKind::Http, Caller { tenant: Some("t".into()), user: Some("u".into()) }, None);
        assert_ne!(s.pristine_key(), other.pristine_key());
        assert_eq!(s.pristine_key(), Session::new(SessionKind::Stateless, Caller::default(), None).pristine_key());
    }

    #[tokio::test]
    async fn closing_fails_what_waits_for_the_client_at_once() {
        let s = Arc::new(Session::new(SessionKind::Stdio, Caller::default(), None));
        let (out, _rx) = Outbox::channel();
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.request_client("roots/list", None, &out, Duration::from_secs(300)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.close();
        let r = tokio::time::timeout(Duration::from_secs(2), waiting).await.expect("answers at once").unwrap();
        assert_eq!(r.unwrap_err(), "the client has disconnected");
    }
}
