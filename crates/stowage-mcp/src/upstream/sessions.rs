//! An upstream's sessions besides its control connection, in `per_client` and `isolated`
//! mode: each client's own, the pristine ones a client uses until it needs its own, and
//! spare processes started ahead of need.
//!
//! Every one is a [`Slot`] in one table per upstream from the moment its process starts (or
//! its HTTP session is asked for), through its handshake, until it is closed; together with
//! the spares they are what `gateway.max_upstream_sessions` counts. Nothing is ever started
//! outside the table, so nothing outlives it: a slot is connected by a task of its own (a
//! client that goes away mid-start does not cancel it half-way), and a slot whose client
//! ended its session while it was still starting is abandoned, which stops the start and
//! kills what it had spawned.
//!
//! **Pristine sessions.** For a stdio server a session is a process (server-everything: about
//! 70 MB and a fraction of a second of two cores each), so a client that only lists, reads and
//! calls read-only tools should not need one of its own. A pristine session is an upstream
//! session that never receives a request that could change what it answers later: only
//! [`Need::Pristine`] requests go to it — lists, `resources/read`, `prompts/get`,
//! `completion/complete`, `tasks/list`, and `tools/call` of a tool the server itself marks
//! `readOnlyHint: true` (the gateway decides; see `gateway::forward`). Since nothing that
//! could change its state reaches it, it answers each client what a fresh session of its own
//! would, for as long as it lives. Everything else (a tool not marked read-only, a
//! subscription, a log level, anything unknown) is session-scoped and goes to the client's
//! own session, opened then; from then on every request of that client goes there, read-only
//! ones included, since they may depend on what it changed. Only a client that declares none
//! of sampling, elicitation and roots uses a pristine session (the server could ask one of
//! those back, and over a pipe its question would carry nothing saying whose call it belongs
//! to), and the pristine sessions are per identity, so different people's connections never
//! meet even there. HTTP upstreams and the in-process demo keep one session per client
//! throughout: their sessions cost no process. `isolated` turns pristine sessions off.
//!
//! **Spares.** A stdio server's cold start is most of what a new session costs (a Node server
//! loads for a few hundred milliseconds of CPU). `gateway.spare_upstream_processes` processes
//! are started, not initialized, as soon as the control connection is up; a new session takes
//! one and only performs its handshake (declaring its client's capabilities), and a new spare
//! starts behind it. A spare unused for `upstream_session_idle_secs` is stopped, and started
//! again at the next take.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{CallError, Conn, Link};

/// What a request to an upstream may be served by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// A request that cannot change what the session answers later (see the module's
    /// documentation): a pristine session may serve it, unless the client has its own.
    Pristine,
    /// Anything else: the client's own session, opened for it if need be.
    Own,
}

/// Where a slot stands.
#[derive(Debug, Clone)]
pub(super) enum SlotState {
    /// Its process or HTTP session is starting, or its handshake is under way.
    Starting,
    Ready(Arc<Conn>),
    /// Its start failed (the slot has left the table), or it was abandoned.
    Failed(CallError),
}

/// One upstream session besides the control connection.
pub(super) struct Slot {
    pub state: watch::Sender<SlotState>,
    /// Fired when the slot leaves the table while starting: the start is stopped and what it
    /// spawned is killed.
    pub abandoned: CancellationToken,
}

impl Slot {
    pub(super) fn new() -> Arc<Slot> {
        Arc::new(Slot { state: watch::channel(SlotState::Starting).0, abandoned: CancellationToken::new() })
    }

    pub(super) fn conn(&self) -> Option<Arc<Conn>> {
        match &*self.state.borrow() {
            SlotState::Ready(c) => Some(c.clone()),
            _ => None,
        }
    }

    /// Ready, and its connection still open.
    pub(super) fn open_conn(&self) -> Option<Arc<Conn>> {
        self.conn().filter(|c| !c.is_closed())
    }

    fn starting(&self) -> bool {
        matches!(&*self.state.borrow(), SlotState::Starting)
    }

    /// Its connection closed, or its start failed: it no longer serves anyone.
    pub(super) fn dead(&self) -> bool {
        match &*self.state.borrow() {
            SlotState::Starting => false,
            SlotState::Ready(c) => c.is_closed(),
            SlotState::Failed(_) => true,
        }
    }

    /// Ends the slot: a start still under way is stopped, an open connection closed.
    pub(super) fn end(&self) {
        self.abandoned.cancel();
        if let Some(c) = self.conn() {
            c.close();
        }
    }

    /// Waits until the slot is ready or failed, at most `timeout`.
    pub(super) async fn ready(&self, name: &str, timeout: Duration) -> Result<Arc<Conn>, CallError> {
        let mut rx = self.state.subscribe();
        let waited = tokio::time::timeout(timeout, rx.wait_for(|s| !matches!(s, SlotState::Starting))).await;
        match waited {
            Ok(Ok(state)) => match &*state {
                SlotState::Ready(c) if c.is_closed() => {
                    Err(CallError::Closed { name: name.to_owned(), reason: "closed right after it started".into() })
                }
                SlotState::Ready(c) => Ok(c.clone()),
                SlotState::Failed(e) => Err(e.clone()),
                SlotState::Starting => unreachable!("waited for a state other than starting"),
            },
            Ok(Err(_)) => Err(CallError::Closed { name: name.to_owned(), reason: "closed while it started".into() }),
            Err(_) => Err(CallError::StartupFailed { name: name.to_owned(), reason: "did not finish its handshake in time".into() }),
        }
    }
}

/// A process started ahead of need: spawned, not yet spoken to.
pub(super) struct Spare {
    pub link: Link,
    pub since: Instant,
}

/// An upstream's sessions besides the control connection, by key (a client's
/// `Session::upstream_key`, or a pristine key), and its spares.
#[derive(Default)]
pub(super) struct Slots {
    pub map: HashMap<String, Arc<Slot>>,
    pub spares: Vec<Spare>,
    /// Spares being spawned right now (counted, so two refills never overshoot the cap).
    pub spawning: usize,
}

impl Slots {
    /// What counts against `gateway.max_upstream_sessions`: every slot, starting or open, and
    /// every spare, including those being spawned.
    pub(super) fn count(&self) -> usize {
        self.map.len() + self.spares.len() + self.spawning
    }

    /// Makes room for one more session at the cap: a spare is stopped first (a new session
    /// would take it anyway), else the least recently used slot with nothing in flight is
    /// closed. False when every slot is busy or still starting.
    pub(super) fn make_room(&mut self) -> bool {
        if self.spares.pop().is_some() {
            return true;
        }
        let victim = self
            .map
            .iter()
            .filter_map(|(k, slot)| slot.conn().map(|c| (k, c)))
            .filter(|(_, c)| !c.busy())
            .max_by_key(|(_, c)| c.idle_for())
            .map(|(k, _)| k.clone());
        match victim.and_then(|k| self.map.remove(&k)) {
            Some(slot) => {
                tracing::debug!(target: "stowage::upstream", "closed the least recently used idle upstream session to make room");
                slot.end();
                true
            }
            None => false,
        }
    }

    /// Closes slots whose connection died, is idle past `idle` with nothing in flight, or
    /// whose session is gone (`orphaned`); stops spares unused for `idle`. Starting slots
    /// are left to finish.
    pub(super) fn sweep(&mut self, idle: Duration, orphaned: impl Fn(&Conn) -> bool) {
        self.map.retain(|_, slot| {
            if slot.starting() {
                return true;
            }
            let Some(c) = slot.conn() else { return false };
            let keep = !c.is_closed() && (c.busy() || (!orphaned(&c) && c.idle_for() < idle));
            if !keep {
                slot.end();
            }
            keep
        });
        self.spares.retain(|s| s.since.elapsed() < idle);
    }
}
