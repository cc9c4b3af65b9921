//! A downstream session: one connected client, its artifact scope, and the requests the
//! gateway has open towards it.
//!
//! Every session gets a random id; its [`ArtifactScope`] (the session id, plus the user once
//! authentication provides one) is what artifacts from its tool calls are stored under, so one
//! client can never see another's artifacts.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use stowage_core::ArtifactScope;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::jsonrpc::{Id, Message};

/// Where messages for a client go: the session's general stream, or one HTTP response stream.
pub type Outbox = mpsc::UnboundedSender<Vec<u8>>;

pub struct Session {
    pub id: String,
    pub scope: ArtifactScope,
    /// Messages not tied to a request (list_changed, resource updates).
    notify: Mutex<Option<Outbox>>,
    pub protocol: Mutex<Option<String>>,
    pub client_capabilities: Mutex<Value>,
    client_pending: Mutex<HashMap<String, oneshot::Sender<Message>>>,
    next_id: AtomicU64,
    inflight: Mutex<HashMap<String, CancellationToken>>,
    pub subscriptions: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).finish_non_exhaustive()
    }
}

/// A stable map key for a JSON-RPC id (1 and "1" stay distinct).
pub fn id_key(id: &Id) -> String {
    id.to_string()
}

impl Session {
    pub fn new(scope: Option<ArtifactScope>, notify: Option<Outbox>) -> Session {
        let id = uuid::Uuid::new_v4().to_string();
        // An authenticated caller brings its tenant and user; the session id is always ours.
        let mut scope = scope.unwrap_or_default();
        scope.session_id.get_or_insert_with(|| id.clone());
        Session {
            id,
            scope,
            notify: Mutex::new(notify),
            protocol: Mutex::new(None),
            client_capabilities: Mutex::new(json!({})),
            client_pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            inflight: Mutex::new(HashMap::new()),
            subscriptions: Mutex::new(HashSet::new()),
        }
    }

    /// Replaces the general stream (an HTTP client opened its GET stream).
    pub fn set_notify(&self, outbox: Option<Outbox>) {
        *self.notify.lock().unwrap() = outbox;
    }

    /// Sends a message on the general stream, if the client has one open.
    pub fn notify(&self, msg: &Message) -> bool {
        match self.notify.lock().unwrap().as_ref() {
            Some(tx) => tx.send(msg.to_line()).is_ok(),
            None => false,
        }
    }

    /// The general stream, for server-initiated requests when no call is running.
    pub fn outbox_for_requests(&self) -> Option<Outbox> {
        self.notify.lock().unwrap().clone()
    }

    pub fn has_capability(&self, key: &str) -> bool {
        self.client_capabilities.lock().unwrap().get(key).is_some()
    }

    /// Sends a request to the client and waits for its answer.
    pub async fn request_client(
        &self,
        method: &str,
        params: Option<Box<serde_json::value::RawValue>>,
        outbox: &Outbox,
        timeout: Duration,
    ) -> Option<Message> {
        let id = json!(format!("stowage-{}", self.next_id.fetch_add(1, Ordering::Relaxed)));
        let (tx, rx) = oneshot::channel();
        self.client_pending.lock().unwrap().insert(id_key(&id), tx);
        let msg = Message { jsonrpc: "2.0", id: Some(id.clone()), method: Some(method.into()), params, ..Default::default() };
        if outbox.send(msg.to_line()).is_err() {
            self.client_pending.lock().unwrap().remove(&id_key(&id));
            return None;
        }
        let answer = tokio::time::timeout(timeout, rx).await.ok().and_then(Result::ok);
        self.client_pending.lock().unwrap().remove(&id_key(&id));
        answer
    }

    /// Delivers the client's answer to a request the gateway sent it. False if unknown.
    pub fn resolve(&self, msg: Message) -> bool {
        let Some(id) = msg.id.as_ref() else { return false };
        match self.client_pending.lock().unwrap().remove(&id_key(id)) {
            Some(tx) => tx.send(msg).is_ok(),
            None => false,
        }
    }

    /// Registers a client request as in flight; the token fires on `notifications/cancelled`.
    /// Idempotent: transports register a request as soon as it is read, before handing it to
    /// a task, so a cancellation that follows right behind it is never missed.
    pub fn begin(&self, id: &Id) -> CancellationToken {
        self.inflight.lock().unwrap().entry(id_key(id)).or_default().clone()
    }

    pub fn end(&self, id: &Id) {
        self.inflight.lock().unwrap().remove(&id_key(id));
    }

    /// Whether a request from the client, or one to it, is still open.
    pub fn busy(&self) -> bool {
        !self.inflight.lock().unwrap().is_empty() || !self.client_pending.lock().unwrap().is_empty()
    }

    /// Cancels the client's request `id`, if it is still running.
    pub fn cancel(&self, id: &Id) -> bool {
        match self.inflight.lock().unwrap().remove(&id_key(id)) {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }
}
