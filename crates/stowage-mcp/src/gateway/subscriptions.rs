//! Change notifications to clients: list changes and resource updates, to legacy sessions on
//! their general stream (resource updates only to subscribers) and to 2026-07-28 clients
//! through `subscriptions/listen` streams; and the upstream subscriptions those need.
//!
//! A listen stream's resource subscriptions are made where a direct connection's would be:
//! on a `per_client` upstream, in the client's own upstream session (for a 2026-07-28 client,
//! the one of its identity and capabilities, where its calls go too), so what its calls turn
//! on there (server-everything's `toggle-subscriber-updates`) reaches it, and what its own
//! session says reaches it alone; on a `shared` upstream, on the control connection, whose
//! updates go to every stream that asked.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Gateway;
use super::handshake::is_modern_session;
use crate::error::GatewayError;
use crate::jsonrpc::Message;
use crate::outbox::Outbox;
use crate::session::Session;

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// One `subscriptions/listen` stream: what its client asked for, and where it goes.
pub(super) struct Listener {
    /// The listen request's id, stamped on every frame as the subscription id.
    id: Value,
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: HashSet<String>,
    outbox: Outbox,
    /// The upstream key of the client that opened it: what that client's own upstream
    /// sessions announce reaches this stream.
    key: String,
    /// Subscriptions made in the client's own upstream sessions for this stream: (upstream,
    /// URI as the client knows it, URI as the upstream knows it).
    own: parking_lot::Mutex<Vec<(usize, String, String)>>,
}

impl Listener {
    fn wants(&self, method: &str, uri: Option<&str>) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => uri.is_some_and(|u| self.uris.contains(u)),
            _ => false,
        }
    }

    /// Sends `msg` tagged with this stream's subscription id.
    fn send(&self, msg: &Message) {
        let mut params = msg.params_value();
        if !params.is_object() {
            params = json!({});
        }
        params["_meta"][SUBSCRIPTION_ID] = self.id.clone();
        let method = msg.method.as_deref().unwrap_or_default();
        self.outbox.notify(Message::notification(method, Some(&params)).to_line());
    }
}

/// Ends a listen stream's registration when its request finishes or is dropped, and
/// unsubscribes upstreams from resources nobody wants any more.
struct Unlisten {
    gw: Arc<Gateway>,
    listener: Arc<Listener>,
}

impl Drop for Unlisten {
    fn drop(&mut self) {
        self.gw.clients.listeners.lock().retain(|l| !Arc::ptr_eq(l, &self.listener));
        if self.gw.life.shutdown.is_cancelled() {
            return;
        }
        let own: Vec<(usize, String, String)> = std::mem::take(&mut *self.listener.own.lock());
        // Subscriptions in the client's own sessions that no other stream of its still wants.
        let own_orphaned: Vec<(usize, String)> = own
            .into_iter()
            .filter(|(_, uri, _)| !self.gw.clients.listeners.lock().iter().any(|l| l.key == self.listener.key && l.uris.contains(uri)))
            .map(|(u, _, upstream_uri)| (u, upstream_uri))
            .collect();
        let orphaned: Vec<String> =
            self.listener.uris.iter().filter(|uri| !self.gw.listens_in_own_session(uri) && !self.gw.uri_wanted(uri)).cloned().collect();
        if orphaned.is_empty() && own_orphaned.is_empty() {
            return;
        }
        let (gw, key) = (self.gw.clone(), self.listener.key.clone());
        tokio::spawn(async move {
            for uri in orphaned {
                gw.upstream_subscription(&uri, "resources/unsubscribe").await;
            }
            for (u, uri) in own_orphaned {
                let upstream = &gw.upstreams[u];
                let Some(conn) = upstream.client_conn(&key) else { continue };
                let timeout = upstream.spec.request_timeout.min(Duration::from_secs(30));
                let sent = conn.start("resources/unsubscribe", Some(crate::jsonrpc::to_raw(&json!({"uri": uri})))).await;
                if let Err(e) = match sent {
                    Ok(out) => out.wait(timeout).await.map(drop),
                    Err(e) => Err(e),
                } {
                    tracing::debug!(target: "stowage::upstream", upstream = %upstream.name(), "resources/unsubscribe {uri}: {e}");
                }
            }
        });
    }
}

impl Gateway {
    /// Serves one `subscriptions/listen` stream (2026-07-28): acknowledges what will be
    /// honoured, subscribes upstreams to the requested resources, then relays matching change
    /// notifications until the client goes away (the request is dropped) or the gateway shuts
    /// down (a graceful close: the result, stamped with the subscription id).
    pub(super) async fn listen(
        self: &Arc<Self>,
        session: &Arc<Session>,
        id: &Value,
        params: &Value,
        outbox: &Outbox,
    ) -> Result<Message, GatewayError> {
        let asked = params.get("notifications").cloned().unwrap_or(json!({}));
        let flag = |k: &str| asked.get(k).and_then(Value::as_bool) == Some(true);
        let caps = self.capabilities();
        let subscribable = caps.pointer("/resources/subscribe").and_then(Value::as_bool) == Some(true);
        let listener = Arc::new(Listener {
            id: id.clone(),
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged") && caps.get("prompts").is_some(),
            resources: flag("resourcesListChanged") && caps.get("resources").is_some(),
            uris: if subscribable {
                asked
                    .get("resourceSubscriptions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            } else {
                HashSet::new()
            },
            outbox: outbox.clone(),
            key: session.upstream_key(),
            own: parking_lot::Mutex::default(),
        });
        // Only what will be honoured is acknowledged; unrequested kinds are left out.
        let mut honored = serde_json::Map::new();
        for (key, on) in
            [("toolsListChanged", listener.tools), ("promptsListChanged", listener.prompts), ("resourcesListChanged", listener.resources)]
        {
            if on {
                honored.insert(key.into(), json!(true));
            }
        }
        if !listener.uris.is_empty() {
            honored.insert("resourceSubscriptions".into(), json!(listener.uris.iter().collect::<Vec<_>>()));
        }
        let meta = json!({ SUBSCRIPTION_ID: id });
        let ack = json!({"notifications": honored, "_meta": meta});
        self.clients.listeners.lock().push(listener.clone());
        let _unlisten = Unlisten { gw: self.clone(), listener: listener.clone() };
        outbox.notify(Message::notification("notifications/subscriptions/acknowledged", Some(&ack)).to_line());
        for uri in &listener.uris {
            match self.own_subscription(session, uri).await {
                Some(Ok(upstream_uri)) => {
                    let u = self.resource_route(session, uri).unwrap_or_default();
                    listener.own.lock().push((u, uri.clone(), upstream_uri));
                }
                Some(Err(e)) => tracing::warn!(target: "stowage::upstream", "resources/subscribe {uri} for a listen stream: {e}"),
                None => self.upstream_subscription(uri, "resources/subscribe").await,
            }
        }
        tokio::select! {
            _ = outbox.closed() => {}
            _ = self.life.shutdown.cancelled() => {}
        }
        Ok(Message::response(Value::Null, &json!({"_meta": meta})))
    }

    /// Subscribes `session`'s own upstream session to `uri` when the upstream serving it gives
    /// clients their own sessions (`per_client`, not stateless): the URI as the upstream knows
    /// it, or why not. `None` for an upstream whose subscriptions are the control
    /// connection's.
    async fn own_subscription(self: &Arc<Self>, session: &Arc<Session>, uri: &str) -> Option<Result<String, GatewayError>> {
        let i = self.resource_route(session, uri)?;
        let u = &self.upstreams[i];
        if u.mode.is_shared() || u.is_stateless() {
            return None;
        }
        let upstream_uri =
            crate::catalog::split_collided(uri).filter(|(name, _)| name == u.name()).map_or_else(|| uri.to_owned(), |(_, o)| o);
        // Nobody listens for the request's own notifications.
        let outbox = Outbox::with_capacity(1).0;
        let sent = self.forward(session, i, "resources/subscribe", json!({"uri": upstream_uri}), &outbox).await;
        Some(match sent {
            Ok(reply) => match crate::upstream::result_value(&reply) {
                Ok(_) => Ok(upstream_uri),
                Err(e) => Err(GatewayError::NotRelayed(format!("upstream {} refused the subscription: {e}", u.name()))),
            },
            Err(e) => Err(e),
        })
    }

    /// Whether `uri` is served by an upstream whose subscriptions are made in the clients' own
    /// sessions (what the control connection then never subscribed to).
    fn listens_in_own_session(&self, uri: &str) -> bool {
        self.catalog()
            .resource_upstream(uri, self.upstreams.len())
            .is_some_and(|i| !self.upstreams[i].mode.is_shared() && !self.upstreams[i].is_stateless())
    }

    /// Delivers `msg` (a list change or a resource update) from an upstream session with
    /// `key` to the listen streams of that session's client that asked for it. Returns
    /// whether any did.
    pub(super) fn tell_listeners_of(&self, key: &str, msg: &Message) -> bool {
        let method = msg.method.as_deref().unwrap_or_default();
        let params = msg.params_value();
        let uri = params.get("uri").and_then(Value::as_str);
        let mut told = false;
        for l in self.clients.listeners.lock().iter().filter(|l| l.key == key) {
            if l.wants(method, uri) {
                l.send(msg);
                told = true;
            }
        }
        told
    }

    /// Subscribes (or unsubscribes) the upstream serving `uri`, for listen streams, on its
    /// control connection. Failures are logged: the stream still carries list changes.
    async fn upstream_subscription(&self, uri: &str, method: &str) {
        let Some(i) = self.catalog().resource_upstream(uri, self.upstreams.len()) else { return };
        let u = &self.upstreams[i];
        if u.is_stateless() {
            u.set_resource_subscription(uri, method == "resources/subscribe");
            return;
        }
        let timeout = u.spec.request_timeout.min(Duration::from_secs(30));
        if let Err(e) = u.request(method, Some(&json!({"uri": uri})), timeout).await {
            tracing::warn!(target: "stowage::upstream", upstream = %u.name(), "{method} {uri}: {e}");
        }
    }

    /// Unsubscribes upstream `i` from `uri` when the last client that wanted it went away
    /// (a session ended). A `per_client` upstream's own session closes with the client's.
    pub(super) fn drop_upstream_subscription(&self, i: usize, uri: &str) {
        let u = self.upstreams[i].clone();
        if u.is_stateless() {
            u.set_resource_subscription(uri, false);
            return;
        }
        if !u.mode.is_shared() {
            return;
        }
        let uri = uri.to_owned();
        let timeout = u.spec.request_timeout.min(Duration::from_secs(30));
        tokio::spawn(async move {
            if let Err(e) = u.request("resources/unsubscribe", Some(&json!({"uri": uri})), timeout).await {
                tracing::warn!(target: "stowage::upstream", upstream = %u.name(), "resources/unsubscribe {uri}: {e}");
            }
        });
    }

    /// Whether any session or listen stream still wants updates of `uri`.
    pub(super) fn uri_wanted(&self, uri: &str) -> bool {
        self.clients.listeners.lock().iter().any(|l| l.uris.contains(uri))
            || self.clients.sessions.live().iter().any(|s| s.subscriptions.lock().contains(uri))
    }

    /// Delivers a change notification to every session that may hear it: legacy sessions on
    /// their standalone stream (resource updates only to subscribers), listen streams when
    /// they asked for it.
    pub(super) fn publish(&self, msg: &Message) {
        let method = msg.method.as_deref().unwrap_or_default();
        let mut params = msg.params_value();
        // An upstream's own subscription id means nothing to our clients.
        if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(SUBSCRIPTION_ID);
            if meta.is_empty() {
                params.as_object_mut().map(|p| p.remove("_meta"));
            }
        }
        let clean = Message::notification(method, (!params.is_null() && params != json!({})).then_some(&params));
        let uri = params.get("uri").and_then(Value::as_str);
        for s in self.clients.sessions.live() {
            // 2026-07-28 clients hear about changes only through listen streams.
            let subscribed = uri.is_none_or(|u| s.subscriptions.lock().contains(u));
            if !is_modern_session(&s) && !s.is_stateless() && subscribed {
                s.notify(&clean);
            }
        }
        for l in self.clients.listeners.lock().iter() {
            if l.wants(method, uri) {
                l.send(&clean);
            }
        }
    }
}
