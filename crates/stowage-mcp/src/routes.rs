//! Which client gets what an upstream says during a call: the calls in flight per upstream
//! request id, and the progress tokens the gateway substituted for the clients' own.
//!
//! Upstream readers consult this table directly (not through the gateway's event queue), so a
//! call's progress and log notifications reach the client before that call's response, in
//! the order the upstream sent them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;

use crate::inputs::InputTx;
use crate::jsonrpc::Message;
use crate::session::{Outbox, Session};

struct ActiveCall {
    session: Weak<Session>,
    outbox: Outbox,
    /// Set for a 2026-07-28 client's call: its input requests go back as `input_required`.
    inputs: Option<InputTx>,
}

/// Who answers what an upstream asks during a call.
pub struct CallTarget {
    pub session: Arc<Session>,
    pub outbox: Outbox,
    pub inputs: Option<InputTx>,
}

#[derive(Default)]
pub struct CallRoutes {
    active: Mutex<HashMap<(usize, u64), ActiveCall>>,
    progress: Mutex<HashMap<String, (Value, Outbox)>>,
}

impl CallRoutes {
    pub fn begin_call(&self, key: (usize, u64), session: &Arc<Session>, outbox: &Outbox, inputs: Option<InputTx>) {
        self.active.lock().unwrap().insert(key, ActiveCall { session: Arc::downgrade(session), outbox: outbox.clone(), inputs });
    }

    pub fn end_call(&self, key: (usize, u64)) {
        self.active.lock().unwrap().remove(&key);
    }

    /// Registers the gateway's token `mine` for the client's `original` token.
    pub fn map_progress(&self, mine: String, original: Value, outbox: &Outbox) {
        self.progress.lock().unwrap().insert(mine, (original, outbox.clone()));
    }

    pub fn unmap_progress(&self, mine: &str) {
        self.progress.lock().unwrap().remove(mine);
    }

    /// The session and stream of the most recent call in flight to upstream `index`.
    pub fn latest(&self, index: usize) -> Option<CallTarget> {
        let active = self.active.lock().unwrap();
        active
            .iter()
            .filter(|((u, _), _)| *u == index)
            .max_by_key(|((_, id), _)| *id)
            .and_then(|(_, c)| Some(CallTarget { session: c.session.upgrade()?, outbox: c.outbox.clone(), inputs: c.inputs.clone() }))
    }

    /// Delivers a notification that belongs to a call in flight. Returns false when it is not
    /// one (the gateway then routes it as a session-wide notification).
    pub fn deliver(&self, index: usize, msg: &Message) -> bool {
        match msg.method.as_deref() {
            Some("notifications/progress") => {
                let mut p = msg.params_value();
                let token = p.get("progressToken").and_then(Value::as_str).unwrap_or("").to_owned();
                let target = self.progress.lock().unwrap().get(&token).cloned();
                if let Some((original, outbox)) = target {
                    p["progressToken"] = original;
                    let _ = outbox.send(Message::notification("notifications/progress", Some(&p)).to_line());
                }
                // Progress for a finished or unknown call has nowhere to go.
                true
            }
            Some("notifications/message") => match self.latest(index) {
                Some(t) => t.outbox.send(msg.to_line()).is_ok(),
                None => false,
            },
            _ => false,
        }
    }
}
