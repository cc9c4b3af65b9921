//! What upstreams initiate, beyond the in-call progress and logs the upstream readers deliver
//! themselves ([`crate::attribution`]): list changes, resource updates, elicitation completions,
//! and requests (sampling, elicitation, roots) for a client.
//!
//! One task reads the bounded queue every upstream reader feeds. Notifications are handled
//! inline; a request waits for its client's answer on a bounded set of tasks
//! ([`MAX_WAITING_ASKS`]), and one that would exceed it is answered with an error at once, so
//! an upstream flooding the gateway with requests costs bounded memory.

use std::sync::{Arc, Weak};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::Gateway;
use crate::attribution::Attribution;
use crate::jsonrpc::{Kind, Message, code};
use crate::upstream::{ConnRole, Initiated};

/// Upstream-initiated messages queued before the upstream readers wait.
pub(super) const QUEUE: usize = 256;

/// Upstream requests waiting for a client's answer at once.
const MAX_WAITING_ASKS: usize = 64;

/// Reads the queue until the gateway is gone.
pub(super) async fn run(gw: Weak<Gateway>, mut rx: mpsc::Receiver<Initiated>) {
    let mut asks = JoinSet::new();
    loop {
        let item = tokio::select! {
            item = rx.recv() => item,
            Some(done) = asks.join_next(), if !asks.is_empty() => {
                if let Err(e) = done && e.is_panic() {
                    tracing::error!(target: "stowage::gateway", "panic while relaying an upstream request: {e}");
                }
                continue;
            }
        };
        let Some(Initiated { conn, msg, origin }) = item else { return };
        let Some(gw) = gw.upgrade() else { return };
        let method = msg.method.clone().unwrap_or_default();
        if msg.kind() == Kind::Notification {
            gw.upstream_notification(&conn, origin, msg);
            continue;
        }
        let up_id = msg.id.clone().unwrap_or(Value::Null);
        if method == "ping" {
            conn.send(&Message::response(up_id, &json!({})));
            continue;
        }
        // Attributed now, in arrival order, while the calls it may belong to are in flight.
        let target = gw.clients.routes.attribute(&conn, origin, &method);
        if asks.len() >= MAX_WAITING_ASKS {
            conn.send(&Message::error(
                up_id,
                code::INTERNAL_ERROR,
                format!("the gateway already has {MAX_WAITING_ASKS} requests waiting for clients; try again"),
            ));
            continue;
        }
        let timeout = gw.upstreams[conn.upstream].spec.request_timeout;
        asks.spawn(async move {
            let reply = gw.ask_client(target, &method, msg.params, up_id, timeout).await;
            conn.send(&reply);
        });
    }
}

impl Gateway {
    fn upstream_notification(self: &Arc<Self>, conn: &Arc<crate::upstream::Conn>, origin: crate::upstream::Origin, msg: Message) {
        let method = msg.method.as_deref().unwrap_or_default();
        match method {
            "notifications/tools/list_changed" | "notifications/prompts/list_changed" | "notifications/resources/list_changed" => {
                match &conn.role {
                    // The catalog comes from the control connection: every client's lists follow it.
                    ConnRole::Control => self.upstreams[conn.upstream].stale.mark_changed(),
                    // A client's own upstream session changed its lists (a session resource, a
                    // tool): that client alone is told, and lists them again from its own session.
                    ConnRole::Client { session: Some(s), key } => {
                        if let Some(s) = s.upgrade() {
                            if method != "notifications/resources/list_changed" {
                                let mut own = s.own_lists.lock();
                                own.by_upstream.remove(&conn.upstream);
                                own.built = None;
                            }
                            s.notify(&msg);
                        }
                        self.tell_listeners_of(key, &msg);
                    }
                    // A stateless user's own session: their listen streams hear it.
                    ConnRole::Client { session: None, key } => {
                        self.tell_listeners_of(key, &msg);
                    }
                    // A pristine session's lists changed: every client listing from it is told.
                    ConnRole::Pool { .. } => self.pristine_lists_changed(conn.upstream, conn.id, &msg),
                }
            }
            "notifications/resources/updated" => {
                // The cached read is stale from now on, for every owner: dropped before anyone
                // hears of the update (and reads again).
                let mut msg = msg;
                let mut params = msg.params_value();
                if let Some(uri) = params.get("uri").and_then(Value::as_str).map(str::to_owned) {
                    self.parts.read_cache.invalidate(conn.upstream, &uri);
                    // A URI a collision rewrote is announced as the clients know it.
                    let exposed = self.catalog().exposed_uri(conn.upstream, &uri).to_owned();
                    if exposed != uri {
                        params["uri"] = Value::String(exposed);
                        msg = Message::notification("notifications/resources/updated", Some(&params));
                    }
                }
                match &conn.role {
                    // A client's own upstream session: its subscriptions are that client's.
                    ConnRole::Client { session: Some(s), key } => {
                        if let Some(s) = s.upgrade() {
                            s.notify(&msg);
                        }
                        self.tell_listeners_of(key, &msg);
                    }
                    // A stateless user's own session: the subscriptions are their listen streams'.
                    ConnRole::Client { session: None, key } => {
                        if !self.tell_listeners_of(key, &msg) {
                            crate::attribution::dropped(&conn.name, "a resource update no listen stream asked for")
                        }
                    }
                    // A pristine session is never subscribed to anything.
                    ConnRole::Pool { .. } => crate::attribution::dropped(&conn.name, "a resource update from a pristine session"),
                    ConnRole::Control => self.publish(&msg),
                }
            }
            // Our own listen stream to a stateless upstream opening: nothing for clients.
            "notifications/subscriptions/acknowledged" => {}
            "notifications/elicitation/complete" => {
                let id = msg.params_value().get("elicitationId").and_then(Value::as_str).map(str::to_owned);
                match id.and_then(|id| self.clients.routes.elicitation_owner(&id)) {
                    Some(s) if s.notify(&msg) => {}
                    _ => crate::attribution::dropped(&conn.name, "an elicitation completion for no client"),
                }
            }
            _ => match self.clients.routes.attribute(conn, origin, method) {
                Attribution::Call(t) => {
                    t.outbox.notify(msg.to_line());
                }
                Attribution::Session(s) => {
                    s.notify(&msg);
                }
                Attribution::Nobody => crate::attribution::dropped(&conn.name, &format!("{method} for no client")),
            },
        }
    }
}
