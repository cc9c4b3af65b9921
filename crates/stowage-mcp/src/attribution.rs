//! Who hears what an upstream says: the calls in flight per connection, the progress tokens
//! the gateway substituted for the clients' own, and the rules that attribute every message
//! an upstream initiates to exactly one client, or to nobody.
//!
//! A message goes to a client only when it can be attributed to it; one that cannot is
//! dropped and counted (`stowage_messages_dropped_total{reason="unattributed"}`), or, for a
//! request, answered with an error. It is never delivered to someone else. The rules, first
//! match wins:
//! 1. progress: by the gateway's own progress token, to the call that owns it;
//! 2. a message on a request's SSE stream (HTTP upstreams): that request's call;
//! 3. sampling and elicitation requests and log messages on a stream-less transport (stdio,
//!    in-process): the call, when exactly one call is in flight on that connection;
//! 4. anything else is session-level: a client's own upstream session belongs to that client;
//!    a pristine session, or one several sessions share, belongs to nobody;
//!    a shared connection belongs to a client only while it is the gateway's only client
//!    that is present (an HTTP client with no stream open, nothing in flight and no request
//!    for `gateway.absent_after_secs` has most likely left without `DELETE`, and does not
//!    count).
//!
//! `roots/list` is never attributed to a call by guesswork (rule 3): upstreams ask for roots
//! when they start, not as part of a call, and attaching that request to whatever call was in
//! flight made the call fail for a client without roots.
//!
//! Upstream readers consult this table directly (not through the gateway's event queue), so a
//! call's progress and log notifications reach the client before that call's response, in
//! the order the upstream sent them.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use serde_json::Value;

use crate::inputs::InputTx;
use crate::jsonrpc::Message;
use crate::outbox::Outbox;
use crate::session::{Session, Sessions};
use crate::upstream::{Conn, ConnRole, Origin};

struct ActiveCall {
    session: Weak<Session>,
    outbox: Outbox,
    /// Set for a 2026-07-28 client's call: its input requests go back as `input_required`.
    inputs: Option<InputTx>,
}

/// The call a message belongs to.
#[derive(Clone)]
pub(crate) struct CallTarget {
    pub session: Arc<Session>,
    pub outbox: Outbox,
    pub inputs: Option<InputTx>,
}

/// Where an upstream-initiated message goes.
pub(crate) enum Attribution {
    Call(CallTarget),
    Session(Arc<Session>),
    Nobody,
}

/// Takes the heavy parts out of a payload an upstream sends outside a result (log data,
/// progress messages, error data) before it reaches a client: the same pipeline as results,
/// under the receiving client's scope. Set by the gateway once it has its shaper.
pub(crate) trait Scrubber: Send + Sync {
    fn scrub<'a>(&'a self, session: &'a Session, upstream: &'a str, payload: Value) -> Pin<Box<dyn Future<Output = Value> + Send + 'a>>;
}

/// Payloads smaller than this cannot hold base64 over the inline threshold or a string past
/// the size net: they go through untouched, on the fast path.
pub(crate) const SCRUB_FROM: usize = 1024;

pub(crate) struct CallRoutes {
    /// Set once at start (the gateway builds its shaper before its upstreams connect).
    pub scrubber: OnceLock<Arc<dyn Scrubber>>,
    sessions: Arc<Sessions>,
    calls: Mutex<HashMap<(u64, u64), ActiveCall>>,
    progress: Mutex<HashMap<String, (Value, Outbox)>>,
    /// URL-mode elicitations relayed to a client, by `elicitationId`, for the completion
    /// notification that follows.
    elicitations: Mutex<HashMap<String, Weak<Session>>>,
}

impl CallRoutes {
    pub(crate) fn new(sessions: Arc<Sessions>) -> CallRoutes {
        CallRoutes {
            scrubber: OnceLock::new(),
            sessions,
            calls: Mutex::default(),
            progress: Mutex::default(),
            elicitations: Mutex::default(),
        }
    }

    /// Registers the gateway's request `request` on connection `conn` as `session`'s call.
    pub(crate) fn begin_call(&self, conn: u64, request: u64, session: &Arc<Session>, outbox: &Outbox, inputs: Option<InputTx>) {
        self.calls.lock().insert((conn, request), ActiveCall { session: Arc::downgrade(session), outbox: outbox.clone(), inputs });
    }

    pub(crate) fn end_call(&self, conn: u64, request: u64) {
        self.calls.lock().remove(&(conn, request));
    }

    /// Registers the gateway's token `mine` for the client's `original` token.
    pub(crate) fn map_progress(&self, mine: String, original: Value, outbox: &Outbox) {
        self.progress.lock().insert(mine, (original, outbox.clone()));
    }

    pub(crate) fn unmap_progress(&self, mine: &str) {
        self.progress.lock().remove(mine);
    }

    /// Remembers that `session` was asked the URL-mode elicitation `id`.
    pub(crate) fn elicitation_sent(&self, id: &str, session: &Arc<Session>) {
        let mut e = self.elicitations.lock();
        e.retain(|_, s| s.strong_count() > 0);
        e.insert(id.to_owned(), Arc::downgrade(session));
    }

    /// The session that was asked elicitation `id`; forgets it.
    pub(crate) fn elicitation_owner(&self, id: &str) -> Option<Arc<Session>> {
        self.elicitations.lock().remove(id)?.upgrade()
    }

    fn call(&self, conn: u64, request: u64) -> Option<CallTarget> {
        let calls = self.calls.lock();
        let c = calls.get(&(conn, request))?;
        Some(CallTarget { session: c.session.upgrade()?, outbox: c.outbox.clone(), inputs: c.inputs.clone() })
    }

    /// The only call in flight on `conn`, if there is exactly one.
    fn only_call(&self, conn: u64) -> Option<CallTarget> {
        let calls = self.calls.lock();
        let mut on_conn = calls.iter().filter(|((c, _), _)| *c == conn);
        let (_, c) = on_conn.next()?;
        if on_conn.next().is_some() {
            return None;
        }
        Some(CallTarget { session: c.session.upgrade()?, outbox: c.outbox.clone(), inputs: c.inputs.clone() })
    }

    /// Applies the module's rules 2–4 to a message with `method` that arrived on `conn`.
    pub(crate) fn attribute(&self, conn: &Conn, origin: Origin, method: &str) -> Attribution {
        match origin {
            Origin::Request(id) => {
                if let Some(call) = self.call(conn.id, id) {
                    return Attribution::Call(call);
                }
            }
            Origin::Pipe if matches!(method, "sampling/createMessage" | "elicitation/create" | "notifications/message") => {
                if let Some(call) = self.only_call(conn.id) {
                    return Attribution::Call(call);
                }
            }
            Origin::Pipe | Origin::Standalone => {}
        }
        let owner = match &conn.role {
            ConnRole::Client { session: Some(s), .. } => s.upgrade(),
            // A connection several sessions share (a stateless user's, a group's) has no stream
            // outside its calls, and a pristine session serves many clients.
            ConnRole::Client { session: None, .. } | ConnRole::Pool { .. } => None,
            ConnRole::Control => self.sessions.only_one(),
        };
        match owner {
            Some(s) if !s.is_closed() => Attribution::Session(s),
            _ => Attribution::Nobody,
        }
    }

    /// [`Self::deliver`], scrubbing a large payload first (see [`Scrubber`]): still in order
    /// with the connection's other messages, since the reader waits for it.
    pub(crate) async fn deliver_scrubbed(&self, conn: &Conn, origin: Origin, msg: Message) -> bool {
        let method = msg.method.as_deref().unwrap_or_default();
        let small = msg.params.as_ref().is_none_or(|p| p.len() < SCRUB_FROM);
        let scrubber = self.scrubber.get().cloned();
        let (Some(scrubber), false, "notifications/progress" | "notifications/message") = (scrubber, small, method) else {
            return self.deliver(conn, origin, &msg);
        };
        // Whose scope the artifacts go under: the client the message is for.
        let session = if method == "notifications/progress" {
            let token = msg.params_value().get("progressToken").and_then(Value::as_str).unwrap_or("").to_owned();
            self.progress_owner(&token)
        } else {
            match self.attribute(conn, origin, method) {
                Attribution::Call(t) => Some(t.session),
                Attribution::Session(s) => Some(s),
                Attribution::Nobody => None,
            }
        };
        let Some(session) = session else { return self.deliver(conn, origin, &msg) };
        let params = scrubber.scrub(&session, &conn.name, msg.params_value()).await;
        let clean = Message::notification(method, Some(&params));
        self.deliver(conn, origin, &clean)
    }

    /// The session of the call that owns the gateway's progress token `mine`.
    fn progress_owner(&self, mine: &str) -> Option<Arc<Session>> {
        let (_, outbox) = self.progress.lock().get(mine).cloned()?;
        let calls = self.calls.lock();
        calls.values().find(|c| c.outbox.same_stream(&outbox)).and_then(|c| c.session.upgrade())
    }

    /// Delivers a notification that belongs to a client's call or session: progress and log
    /// messages. Returns false for what the gateway routes itself (list changes, resource
    /// updates, elicitation completions); what cannot be attributed is dropped and counted.
    pub(crate) fn deliver(&self, conn: &Conn, origin: Origin, msg: &Message) -> bool {
        match msg.method.as_deref() {
            Some("notifications/progress") => {
                let mut p = msg.params_value();
                let token = p.get("progressToken").and_then(Value::as_str).unwrap_or("").to_owned();
                let target = self.progress.lock().get(&token).cloned();
                match target {
                    Some((original, outbox)) => {
                        p["progressToken"] = original;
                        outbox.notify(Message::notification("notifications/progress", Some(&p)).to_line());
                    }
                    // Progress for a finished or unknown call has nowhere to go.
                    None => dropped(&conn.name, "progress for no call in flight"),
                }
                true
            }
            Some("notifications/message") => {
                match self.attribute(conn, origin, "notifications/message") {
                    Attribution::Call(t) => {
                        t.outbox.notify(msg.to_line());
                    }
                    Attribution::Session(s) => {
                        s.notify(msg);
                    }
                    Attribution::Nobody => dropped(&conn.name, "a log message no client can be found for"),
                }
                true
            }
            _ => false,
        }
    }
}

/// Counts (and logs at debug level) a message that went to nobody.
pub(crate) fn dropped(upstream: &str, what: &str) {
    metrics::counter!("stowage_messages_dropped_total", "reason" => "unattributed").increment(1);
    tracing::debug!(target: "stowage::gateway", upstream = %upstream, "dropped {what}");
}
