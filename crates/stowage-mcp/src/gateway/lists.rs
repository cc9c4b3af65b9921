//! The aggregated catalog: every upstream's tools, prompts, resources and templates, fetched
//! by one refresher task per upstream whenever it (re)connects or says a list changed, and
//! served to clients as one list each.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Gateway, last_seen};
use crate::catalog::{Catalog, OwnList, UpstreamLists};
use crate::error::GatewayError;
use crate::jsonrpc::Message;
use crate::local_tools::resources as local_resources;
use crate::outbox::Outbox;
use crate::output_schema::OutputSchema;
use crate::session::Session;
use crate::upstream::{Conn, ConnRole, Need, result_value};

/// Signals within this window after the first are folded into one refresh.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// After a failed list request, the refresh is tried again after this, doubling up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

impl Gateway {
    /// The tools `session` may call: every upstream's, named as exposed, plus the gateway's own.
    /// For an MCP Apps client, also the viewer's tools, and the upstream tools
    /// `[apps] attach_viewer` names marked as shown in the viewer.
    /// What it listed on its own upstream sessions so far counts (see [`Gateway::tools_for`]).
    pub fn list_tools(&self, session: &Session) -> Vec<Value> {
        let apps = self.apps_for(session);
        let mut tools: Vec<Value> = self
            .catalog_for(session)
            .tools
            .iter()
            .map(|t| {
                let mut def = t.def.clone();
                if apps.is_some_and(|a| a.attaches(&t.name)) {
                    crate::apps::attach_viewer(&mut def);
                }
                def
            })
            .collect();
        tools.extend(self.local_tools().defs());
        tools.extend(self.resource_tool_defs());
        if apps.is_some() {
            tools.extend(crate::apps::tool_defs());
        }
        tools
    }

    /// The tools `session` may call, as `tools/list` answers: listed first on the client's own
    /// session of every `per_client` upstream where it has not been (see [`Gateway::list_own`]).
    pub async fn tools_for(self: &Arc<Self>, session: &Arc<Session>) -> Vec<Value> {
        self.list_own(session).await;
        self.list_tools(session)
    }

    /// The prompts `session` may get, as their list result.
    pub(super) fn list_prompts(&self, session: &Session) -> Value {
        let prompts: Vec<Value> = self.catalog_for(session).prompts.iter().map(|p| p.def.clone()).collect();
        json!({ "prompts": prompts })
    }

    /// Lists tools and prompts on the upstream session that serves `session`'s lists on every
    /// `per_client` upstream (its own, or the pristine one it uses), where they were not
    /// listed yet on the connection that is open now, as they would be if the client
    /// connected directly. A pristine session's listing is fetched once and shared by every
    /// client that uses it. An upstream whose session cannot be had (it is down, or at its
    /// session cap) is shown as the catalog lists it; its calls then say why.
    pub(super) async fn list_own(self: &Arc<Self>, session: &Arc<Session>) {
        for (i, u) in self.upstreams.iter().enumerate() {
            if u.mode.is_shared() || u.current().is_none_or(|c| c.is_stateless()) || !(u.capability("tools") || u.capability("prompts")) {
                continue;
            }
            let conn = match u.connection_for(session, Need::Pristine, u.spec.request_timeout).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(target: "stowage::upstream", upstream = %u.name(), "no upstream session to list on: {e}");
                    continue;
                }
            };
            let pristine = matches!(conn.role, ConnRole::Pool { .. });
            let epoch = if pristine { self.pristine_epoch(i) } else { 0 };
            if session.own_lists.lock().by_upstream.get(&i).is_some_and(|l| l.conn == conn.id && l.epoch == epoch) {
                continue;
            }
            let listed =
                if pristine { self.pristine_listing(session, i, &conn, epoch).await } else { self.fetch_own(session, i, &conn).await };
            match listed {
                Ok(list) => {
                    let mut own = session.own_lists.lock();
                    own.by_upstream.insert(i, list);
                    own.built = None;
                }
                Err(e) => {
                    tracing::debug!(target: "stowage::upstream", upstream = %u.name(), "listing on a client's upstream session failed: {e}")
                }
            }
        }
    }

    /// Upstream `i`'s tools and prompts as `session`'s own upstream session `conn` lists them.
    async fn fetch_own(self: &Arc<Self>, session: &Arc<Session>, i: usize, conn: &Conn) -> Result<OwnList, GatewayError> {
        let u = &self.upstreams[i];
        // Nobody listens for the requests' own notifications.
        let outbox = Outbox::with_capacity(1).0;
        let mut list = OwnList { conn: conn.id, ..Default::default() };
        if u.capability("tools") {
            list.tools = self.forward_pages(session, i, "tools/list", "tools", &outbox).await?;
        }
        if u.capability("prompts") {
            list.prompts = self.forward_pages(session, i, "prompts/list", "prompts", &outbox).await?;
        }
        Ok(list)
    }

    /// The listing of upstream `i`'s pristine session `conn`, fetched by the first client that
    /// needs it and kept for every other (fifty clients arriving at once cost one listing).
    async fn pristine_listing(
        self: &Arc<Self>,
        session: &Arc<Session>,
        i: usize,
        conn: &Conn,
        epoch: u64,
    ) -> Result<OwnList, GatewayError> {
        let fetching = self.lists.pristine[i].fetching.clone();
        let _one_at_a_time = fetching.lock().await;
        if let Some(l) = self.lists.pristine[i].kept.lock().get(&conn.id).filter(|l| l.epoch == epoch) {
            return Ok(l.clone());
        }
        let mut list = self.fetch_own(session, i, conn).await?;
        list.epoch = epoch;
        list.pristine = true;
        // A listing that raced a change is not kept (the next client lists again).
        if self.pristine_epoch(i) == epoch {
            let mut kept = self.lists.pristine[i].kept.lock();
            // One entry per pristine session (per identity); those of sessions since closed go.
            if kept.len() >= 64 {
                kept.clear();
            }
            kept.insert(conn.id, list.clone());
        }
        Ok(list)
    }

    /// Which of upstream `i`'s pristine listings is current.
    fn pristine_epoch(&self, i: usize) -> u64 {
        self.lists.pristine[i].epoch.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A pristine session of upstream `i` said its lists changed (`conn`): its listing is
    /// fetched again, and every client that listed from it is told.
    pub(super) fn pristine_lists_changed(&self, i: usize, conn: u64, msg: &Message) {
        self.lists.pristine[i].epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.lists.pristine[i].kept.lock().clear();
        for s in self.clients.sessions.live() {
            let listed_there = s.own_lists.lock().by_upstream.get(&i).is_some_and(|l| l.conn == conn);
            if listed_there {
                s.notify(msg);
            }
        }
    }

    /// A tool or prompt name no list has, as the upstream it names would know it: with
    /// prefixed names, the upstream whose `{server}{separator}` starts it (the longest such),
    /// and the rest as its own name; without, the only upstream. `None` when no upstream is
    /// named (the gateway then answers that it knows no such name).
    pub(super) fn unlisted(&self, name: &str) -> Option<crate::catalog::Exposed> {
        let (upstream, original) = if self.lists.prefix {
            let sep = &self.config.separator;
            self.upstreams
                .iter()
                .enumerate()
                .filter_map(|(i, u)| name.strip_prefix(u.name()).and_then(|r| r.strip_prefix(sep.as_str())).map(|rest| (i, rest)))
                .filter(|(_, rest)| !rest.is_empty())
                .min_by_key(|(_, rest)| rest.len())?
        } else if self.upstreams.len() == 1 {
            (0, name)
        } else {
            return None;
        };
        Some(crate::catalog::Exposed {
            name: name.to_owned(),
            upstream,
            original: original.to_owned(),
            def: json!({"name": name}),
            output_schema: None,
            blobs: None,
            inputs: None,
        })
    }

    /// The catalog as `session` sees it: the gateway's, with what its own upstream sessions
    /// listed so far in place of their upstreams' entries (never lists anything itself). A
    /// client whose sessions list what the catalog lists shares the catalog.
    pub(super) fn catalog_for(&self, session: &Session) -> Arc<Catalog> {
        let generation = self.lists.generation.load(std::sync::atomic::Ordering::SeqCst);
        let global = self.catalog();
        let mut own = session.own_lists.lock();
        if own.by_upstream.is_empty() {
            return global;
        }
        if let Some((g, built)) = &own.built
            && *g == generation
        {
            return built.clone().unwrap_or(global);
        }
        let mut lists = self.lists.seen.lock().clone();
        let mut differs = false;
        for (&i, mine) in &own.by_upstream {
            let Some(l) = lists.get_mut(i) else { continue };
            if l.tools != mine.tools {
                l.tools = mine.tools.clone();
                l.output_schemas = compile_output_schemas(&l.name, &l.tools);
                differs = true;
            }
            if l.prompts != mine.prompts {
                l.prompts = mine.prompts.clone();
                differs = true;
            }
        }
        let built = differs.then(|| {
            let mut catalog = Catalog::build(&lists, self.lists.prefix, &self.config.separator);
            self.chain_quietly(&mut catalog);
            Arc::new(catalog)
        });
        own.built = Some((generation, built.clone()));
        built.unwrap_or(global)
    }

    /// `resources/list` or `resources/templates/list` for `session`, a page at a time: the
    /// upstreams' entries in configuration order (the catalog's, except that a `per_client`
    /// upstream is asked on the session's own upstream session, whose resources may be the
    /// session's alone), at most `gateway.resources.list_page_size` per page with a cursor
    /// naming the upstream and position that come next; then the caller's artifacts (or the
    /// `artifact://{id}` template), a page at a time with their own cursor.
    pub(super) async fn list_resources(
        self: &Arc<Self>,
        session: &Arc<Session>,
        key: &str,
        method: &str,
        params: &Value,
        outbox: &Outbox,
    ) -> Result<Message, GatewayError> {
        let unknown =
            |c: &str| GatewayError::InvalidParams(format!("{method}: unknown cursor {c:?}; pass the nextCursor of the previous page"));
        let artifacts = self.local_tools().readers().cloned();
        let mut start = (0usize, 0usize);
        if let Some(c) = params.get("cursor").and_then(Value::as_str) {
            if local_resources::is_artifact_cursor(c) {
                let Some(store) = artifacts.as_ref().filter(|_| key == "resources") else { return Err(unknown(c)) };
                let (items, next) = local_resources::list(store, &session.scope, Some(c), local_resources::PAGE)
                    .await
                    .map_err(|e| GatewayError::InvalidParams(e.to_string()))?;
                return Ok(Message::response(Value::Null, &page(key, items, next)));
            }
            start = decode_position(c).filter(|(u, _)| *u < self.upstreams.len()).ok_or_else(|| unknown(c))?;
        }
        let size = self.config.resources.list_page_size.max(1);
        let mut items = Vec::new();
        for i in start.0..self.upstreams.len() {
            let skip = if i == start.0 { start.1 } else { 0 };
            let all = self.upstream_resources(session, i, key, method, outbox).await?;
            let room = size - items.len();
            let rest = all.len().saturating_sub(skip);
            items.extend(all.into_iter().skip(skip).take(room));
            if rest > room {
                return Ok(Message::response(Value::Null, &page(key, items, Some(encode_position(i, skip + room)))));
            }
            if items.len() == size && i + 1 < self.upstreams.len() {
                return Ok(Message::response(Value::Null, &page(key, items, Some(encode_position(i + 1, 0)))));
            }
        }
        let mut next = None;
        if let Some(store) = &artifacts {
            if key == "resources" {
                if let Some(apps) = self.apps_for(session) {
                    items.push(apps.resource_entry());
                }
                let (mine, more) = local_resources::list(store, &session.scope, None, local_resources::PAGE)
                    .await
                    .map_err(|e| GatewayError::NotRelayed(format!("{method}: listing your artifacts failed: {e}")))?;
                items.extend(mine);
                next = more;
            } else {
                items.push(local_resources::template());
            }
        }
        Ok(Message::response(Value::Null, &page(key, items, next)))
    }

    /// Fetches every list of upstream `index` (following pagination) and rebuilds the catalog.
    /// Returns false when a list could not be fetched (the request failed or timed out): the
    /// refresher tries again later, so a slow start does not leave the upstream without tools.
    async fn refresh(self: &Arc<Self>, index: usize) -> bool {
        let mut complete = true;
        let u = &self.upstreams[index];
        let timeout = u.spec.request_timeout.min(Duration::from_secs(30));
        let mut fresh = UpstreamLists { name: u.name().to_owned(), ..Default::default() };
        let lists: [(&str, &str, &str, &mut Vec<Value>); 4] = [
            ("tools", "tools/list", "tools", &mut fresh.tools),
            ("prompts", "prompts/list", "prompts", &mut fresh.prompts),
            ("resources", "resources/list", "resources", &mut fresh.resources),
            ("resources", "resources/templates/list", "resourceTemplates", &mut fresh.templates),
        ];
        for (cap, method, key, into) in lists {
            if !u.capability(cap) {
                continue;
            }
            let mut cursor: Option<String> = None;
            for _page in 0..1000 {
                let params = cursor.as_ref().map(|c| json!({"cursor": c}));
                let reply = match u.request(method, params.as_ref(), timeout).await {
                    Ok(r) => r,
                    // Stopping cuts short a refresh in flight: not a failure to report.
                    Err(_) if self.life.shutdown.is_cancelled() => return true,
                    Err(e) => {
                        tracing::warn!(target: "stowage::upstream", upstream = %u.name(), "{method} failed (will retry): {e}");
                        complete = false;
                        break;
                    }
                };
                let Ok(v) = result_value(&reply) else {
                    tracing::warn!(target: "stowage::upstream", upstream = %u.name(), "{method} returned an error");
                    // A server that refuses `tools/list` (one not done starting: the Python
                    // SDK answers requests before its initialization finished with an
                    // error) is asked again; an optional list it lacks is simply empty.
                    if method == "tools/list" {
                        complete = false;
                    }
                    break;
                };
                if let Some(items) = v.get(key).and_then(Value::as_array) {
                    into.extend(items.iter().cloned());
                }
                cursor = v.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
                if cursor.is_none() {
                    break;
                }
            }
        }
        fresh.output_schemas = compile_output_schemas(u.name(), &fresh.tools);
        if complete {
            self.keep_listing(index, &fresh);
        }
        self.set_lists(index, fresh);
        complete
    }

    /// Replaces upstream `index`'s lists and rebuilds the catalog. Built, detected and
    /// published under the lists' lock: two upstreams listed at once must not publish out of
    /// order, or the later list's tools would vanish until its next refresh.
    fn set_lists(&self, index: usize, lists: UpstreamLists) {
        let catalog = {
            let mut all = self.lists.seen.lock();
            all[index] = lists;
            let mut catalog = Catalog::build(&all, self.lists.prefix, &self.config.separator);
            self.chain_detected(&mut catalog, index);
            let catalog = Arc::new(catalog);
            *self.lists.catalog.write() = catalog.clone();
            self.lists.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            catalog
        };
        for c in &catalog.collisions {
            tracing::warn!(target: "stowage::router", "name collision: {c}");
        }
        for r in &catalog.renamed_resources {
            tracing::info!(target: "stowage::router", "{r}");
        }
    }

    /// Keeps a complete listing of upstream `index` in the state directory (when it changed),
    /// off the runtime's workers: it is what the catalog shows while the upstream is down.
    fn keep_listing(&self, index: usize, lists: &UpstreamLists) {
        let Some(dir) = self.lists.state_dir.clone() else { return };
        let spec = self.upstreams[index].spec.clone();
        if matches!(spec.transport, crate::config::TransportSpec::Demo) {
            // In process: never down, so nothing to show in its place.
            return;
        }
        let bytes = last_seen::encode(&spec, lists);
        {
            let mut kept = self.lists.kept.lock();
            if kept[index].as_ref() == Some(&bytes) {
                return;
            }
            kept[index] = Some(bytes.clone());
        }
        tokio::task::spawn_blocking(move || last_seen::store(&dir, &spec, &bytes));
    }

    /// Upstream `index` went down without ever being listed (by this run or a kept catalog):
    /// one stand-in tool says so. Returns whether the catalog changed.
    fn show_standin(&self, index: usize, reason: &str) -> bool {
        let u = &self.upstreams[index];
        {
            let lists = self.lists.seen.lock();
            let l = &lists[index];
            if !(l.tools.is_empty() && l.prompts.is_empty() && l.resources.is_empty() && l.templates.is_empty()) {
                return false;
            }
        }
        tracing::info!(target: "stowage::upstream", upstream = %u.name(), "listed as unavailable until it starts: {reason}");
        self.set_lists(index, last_seen::standin(u.name(), reason, self.lists.prefix, &self.config.separator));
        true
    }
}

/// Lists as one client sees them: a `per_client` upstream's are asked on that client's own
/// upstream session.
impl Gateway {
    /// One upstream's resources (`key` `resources`) or templates (`resourceTemplates`) as
    /// `session` sees them: the catalog's, except that a `per_client` upstream is asked on the
    /// session's own upstream session. Nothing for an upstream without resources.
    pub(super) async fn upstream_resources(
        self: &Arc<Self>,
        session: &Arc<Session>,
        i: usize,
        key: &str,
        method: &str,
        outbox: &Outbox,
    ) -> Result<Vec<Value>, GatewayError> {
        let u = &self.upstreams[i];
        if !u.capability("resources") {
            return Ok(Vec::new());
        }
        if u.mode.is_shared() || u.is_stateless() {
            let catalog = self.catalog();
            let entries = if key == "resources" { &catalog.resources } else { &catalog.templates };
            return Ok(entries.iter().filter(|(k, _)| *k == i).map(|(_, v)| v.clone()).collect());
        }
        let items = self.forward_pages(session, i, method, key, outbox).await?;
        let mut routes = session.resource_routes.lock();
        for uri in items.iter().filter_map(|item| item.get("uri").and_then(Value::as_str)) {
            routes.insert(uri.to_owned(), i);
        }
        drop(routes);
        Ok(items)
    }

    /// Every page of list `method` (its items under `key`) from upstream `i`, on the
    /// connection that carries `session`'s requests (its own, for a `per_client` upstream).
    async fn forward_pages(
        self: &Arc<Self>,
        session: &Arc<Session>,
        i: usize,
        method: &str,
        key: &str,
        outbox: &Outbox,
    ) -> Result<Vec<Value>, GatewayError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _page in 0..1000 {
            let params = cursor.as_ref().map_or_else(|| json!({}), |c| json!({"cursor": c}));
            let reply = self.forward(session, i, method, params, outbox).await?;
            let v = result_value(&reply)
                .map_err(|e| GatewayError::Internal(format!("{method} from upstream {}: {e}", self.upstreams[i].name())))?;
            items.extend(v.get(key).and_then(Value::as_array).into_iter().flatten().cloned());
            cursor = v.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        Ok(items)
    }
}

impl Gateway {
    /// Every upstream's resources (or, with `templates`, resource templates) as `session` sees
    /// them, upstream by upstream: its name and its entries, or why they could not be listed.
    /// For callers that show each upstream's list apart (the playground), so one upstream that
    /// fails (one without `resources/templates/list`, say) is named beside what the others
    /// listed instead of failing the whole list. Upstreams without resources are left out.
    pub async fn resources_by_upstream(
        self: &Arc<Self>,
        session: &Arc<Session>,
        templates: bool,
    ) -> Vec<(String, Result<Vec<Value>, String>)> {
        let (key, method) = if templates { ("resourceTemplates", "resources/templates/list") } else { ("resources", "resources/list") };
        // Nobody listens for the requests' own notifications.
        let outbox = Outbox::with_capacity(1).0;
        let mut out = Vec::new();
        for (i, u) in self.upstreams.iter().enumerate() {
            if !u.capability("resources") {
                continue;
            }
            let listed = self.upstream_resources(session, i, key, method, &outbox).await.map_err(|e| e.to_string());
            out.push((u.name().to_owned(), listed));
        }
        out
    }
}

/// Prefix of a cursor into the upstreams' entries (`up:<upstream>:<offset>`, base64url so
/// clients treat it as opaque).
const POSITION_PREFIX: &str = "up:";

fn encode_position(upstream: usize, offset: usize) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{POSITION_PREFIX}{upstream}:{offset}"))
}

fn decode_position(cursor: &str) -> Option<(usize, usize)> {
    use base64::Engine;
    let text = String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let (u, o) = text.strip_prefix(POSITION_PREFIX)?.split_once(':')?;
    Some((u.parse().ok()?, o.parse().ok()?))
}

/// A list result: the items under `key`, and `nextCursor` when there is more.
fn page(key: &str, items: Vec<Value>, next: Option<String>) -> Value {
    let mut v = json!({ key: items });
    if let Some(n) = next {
        v["nextCursor"] = Value::String(n);
    }
    v
}

/// Compiles the `outputSchema` of every tool that declares one, once per fetched list: the
/// rewrite checks each result against it (see [`crate::output_schema`]).
pub(super) fn compile_output_schemas(upstream: &str, tools: &[Value]) -> std::collections::HashMap<String, Arc<OutputSchema>> {
    let mut out = std::collections::HashMap::new();
    for t in tools {
        let (Some(name), Some(schema)) = (t.get("name").and_then(Value::as_str), t.get("outputSchema")) else { continue };
        let compiled = OutputSchema::compile(schema.clone());
        if let Some(e) = compiled.compile_error() {
            tracing::warn!(target: "stowage::upstream", upstream, tool = name, "outputSchema does not compile, results are relayed unchecked: {e}");
        }
        out.insert(name.to_owned(), Arc::new(compiled));
    }
    out
}

/// Keeps upstream `index`'s part of the catalog fresh, until the gateway is gone: refreshes
/// when it (re)connects or says a list changed, then tells clients. The first refresh
/// counts the upstream as ready, and is announced too when clients were already answered
/// without it (it came up after the start-up grace, or after being down): that is how a
/// client connected while an upstream was still starting learns of its tools.
pub(super) async fn refresh_loop(gw: Weak<Gateway>, index: usize) {
    let mut first = true;
    let mut retry = RETRY_FIRST;
    // Until its first listing, the upstream's going down is watched for: the catalog then shows
    // what it listed last time, or a stand-in, and clients already answered hear of it.
    let mut watch_down = true;
    loop {
        let Some(stale) = gw.upgrade().map(|g| g.upstreams[index].clone()) else { return };
        let shutdown = gw.upgrade().map(|g| g.life.shutdown.clone());
        let Some(shutdown) = shutdown else { return };
        let mut health = stale.watch_health();
        tokio::select! {
            _ = stale.stale.wait() => {}
            down = health.wait_for(|h| matches!(h, crate::upstream::Health::Down { .. })), if watch_down => {
                watch_down = false;
                let reason = match down.as_deref() {
                    Ok(crate::upstream::Health::Down { reason }) => reason.clone(),
                    _ => continue,
                };
                let Some(gw) = gw.upgrade() else { return };
                if !gw.life.shutdown.is_cancelled() && gw.show_standin(index, &reason) && gw.has_clients() {
                    gw.publish(&Message::notification("notifications/tools/list_changed", None));
                }
                continue;
            }
            _ = shutdown.cancelled() => return,
        }
        watch_down = false;
        tokio::time::sleep(DEBOUNCE).await;
        let Some(gw) = gw.upgrade() else { return };
        // It (re)connected or its lists changed: what it served before may have too.
        gw.parts.read_cache.forget_upstream(index);
        let complete = gw.refresh(index).await;
        if complete {
            retry = RETRY_FIRST;
        } else if gw.upstreams[index].current().is_some() {
            // A list request failed while the upstream is up (a slow start, a timeout): ask
            // again later, backing off, rather than serve it without those lists until it
            // happens to say a list changed.
            let (weak, delay) = (Arc::downgrade(&gw), retry);
            retry = (retry * 2).min(RETRY_MAX);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let Some(g) = weak.upgrade() {
                    g.upstreams[index].stale.mark_changed();
                }
            });
        }
        // Listed only once its tools are: a refresh that failed (a list request refused or
        // timed out while the upstream was up) leaves it starting, so clients still in their
        // start-up wait keep waiting for the retry instead of taking an empty list.
        if complete && std::mem::take(&mut first) {
            // Read before the upstream counts as listed: a client answered after that point
            // waited for its lists (or saw them), so only earlier ones need telling.
            let announce = gw.has_clients();
            gw.upstreams[index].listed.store(true, std::sync::atomic::Ordering::SeqCst);
            gw.life.ready.send_modify(|n| *n += 1);
            if !announce {
                continue;
            }
        }
        let u = &gw.upstreams[index];
        for (cap, method) in [
            ("tools", "notifications/tools/list_changed"),
            ("prompts", "notifications/prompts/list_changed"),
            ("resources", "notifications/resources/list_changed"),
        ] {
            if cap == "tools" || u.capability(cap) {
                gw.publish(&Message::notification(method, None));
            }
        }
    }
}
