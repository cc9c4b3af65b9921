//! Upstream MCP servers: a supervised control connection each, and, in `per_client` session
//! mode, sessions for the clients.
//!
//! An [`Upstream`] owns a supervisor task that connects ([`stdio`], [`http`], [`sse`] or an
//! in-process server), performs the MCP handshake as a client, publishes the live control [`Conn`], and
//! when the connection dies reconnects with exponential backoff. The control connection
//! serves the catalog (tools, prompts, resources), subscriptions for listen streams of
//! `shared` upstreams, and, in `shared` mode, every client's calls.
//!
//! `per_client` mode gives each client its own upstream session, so a server that keeps
//! per-session state (resources, logs, roots) keeps clients apart exactly as it would if they
//! connected directly: a new child process per client for stdio servers, a new
//! `Mcp-Session-Id` for HTTP ones. A client session's connection is opened when the client
//! first needs it, declares the client's own capabilities, closes when the client's session
//! ends, and is closed when idle past `gateway.upstream_session_idle_secs`; at most
//! `gateway.max_upstream_sessions` exist per upstream, counted from the moment each starts.
//! For stdio servers, what cannot change session state is served by a pristine session of
//! the client's identity until the client needs its own, and spare processes make a new
//! session's start a handshake only (see [`sessions`]). Stateless (2026-07-28) clients have
//! no session: their connection is keyed by their identity instead; the planner's sessions
//! share theirs per owner.
//!
//! A call to an upstream that is down fails at once with the last reason (no waiting for the
//! request timeout); only an upstream that has not finished starting yet is waited for.

mod conn;
pub(crate) mod http;
mod sessions;
pub(crate) mod sse;
pub(crate) mod stdio;
mod transport_error;

pub use conn::CallError;
pub(crate) use conn::{Conn, ConnRole, Inbound, Initiated, LINK_CAPACITY, Link, Origin, result_value};
pub(crate) use sessions::Need;
pub use transport_error::TransportError;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use tokio_util::sync::CancellationToken;

use crate::config::{SessionMode, TransportSpec, UpstreamSpec};
use crate::jsonrpc::{Message, code};
use crate::session::Session;

/// Protocol version the gateway asks upstreams for first.
pub(crate) const UPSTREAM_PROTOCOL: &str = "2025-11-25";
/// The stateless revision, used when an upstream has no `initialize`.
pub(crate) const STATELESS_PROTOCOL: &str = "2026-07-28";

/// The pipe ends of an in-process server: (what it writes, what it reads).
pub type InProcessPipes = (Box<dyn tokio::io::AsyncRead + Send + Unpin>, Box<dyn tokio::io::AsyncWrite + Send + Unpin>);

/// How an in-process server (the bundled demo) is started, once per connection.
pub type InProcessFactory = Arc<dyn Fn() -> InProcessPipes + Send + Sync>;

/// What the upstream layer hands up to the gateway above it, besides the queue of what
/// upstreams initiate ([`Initiated`]). The gateway implements it: connections and transports
/// know nothing of routing or events, so dependencies point one way, from the gateway down.
#[async_trait::async_trait]
pub trait Uplink: Send + Sync {
    /// An in-call notification (progress, a log line) from `conn`, delivered to its client in
    /// order with the call's reply (the reader waits for it).
    async fn in_call(&self, conn: &Conn, origin: Origin, msg: Message);
    /// Upstream `upstream`'s control connection came up (`Ok`) or went down (`Err(reason)`).
    fn health_changed(&self, upstream: &str, health: Result<(), String>);
}

/// What every upstream of one gateway shares.
#[derive(Clone)]
pub struct UpstreamEnv {
    /// Where upstream-initiated messages go.
    pub initiated: mpsc::Sender<Initiated>,
    /// In-call notifications and health changes go up through this.
    pub uplink: Arc<dyn Uplink>,
    pub shutdown: CancellationToken,
    pub max_message_bytes: usize,
    /// (first delay, longest delay) between restarts.
    pub backoff: (Duration, Duration),
    pub in_process: Option<InProcessFactory>,
    /// Environment variables holding the gateway's secrets: never passed to a child.
    pub secret_env: Vec<String>,
    /// Client-session connections: idle time before one is closed, and how many per upstream.
    pub client_idle: Duration,
    pub max_client_sessions: usize,
    /// Spare processes kept started per stdio upstream with client sessions.
    pub spares: usize,
    /// The capabilities control connections declare, once known: every capability a client
    /// may offer, or (a gateway with exactly one client, over stdio) that client's own, set at
    /// its handshake. Supervisors do not connect before it is set.
    pub control_caps: watch::Receiver<Option<Value>>,
}

/// Why a connection to an upstream could not be made. Its message is the reason a client's
/// call, `/readyz` and the banner give for a down upstream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// A stdio server's command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP or SSE transport could not be set up or reached (a CA file that does not
    /// parse, a refused connection, an endpoint on another origin).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The bundled demo server was configured in a build that has none.
    #[error("no in-process demo server in this build")]
    NoInProcess,
    /// The transport is up but the MCP handshake failed (`initialize` or `server/discover`).
    #[error("{0}")]
    Handshake(String),
}

/// Where the control connection stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Health {
    /// Not connected yet, and no attempt has failed.
    Starting,
    /// Connected and initialized: calls are forwarded.
    Up,
    /// The last attempt failed or the connection died; the supervisor keeps retrying.
    Down {
        /// One line on why: the transport's or the handshake's error.
        reason: String,
    },
}

/// Tells the gateway's catalog refresher that an upstream's lists are stale: it
/// (re)connected, or said a list changed. Many signals before the refresher runs are one
/// refresh (a storm of `list_changed` costs one refetch).
#[derive(Default)]
pub struct ListsStale {
    notify: tokio::sync::Notify,
    connected: std::sync::atomic::AtomicBool,
}

impl ListsStale {
    pub fn mark_connected(&self) {
        self.connected.store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_one();
    }

    pub fn mark_changed(&self) {
        self.notify.notify_one();
    }

    /// Waits for the next signal; true when it includes a (re)connection.
    pub async fn wait(&self) -> bool {
        self.notify.notified().await;
        self.connected.swap(false, std::sync::atomic::Ordering::SeqCst)
    }
}

/// A supervised upstream server.
pub struct Upstream {
    pub index: usize,
    pub spec: UpstreamSpec,
    pub mode: SessionMode,
    control: watch::Sender<Option<Arc<Conn>>>,
    health: watch::Sender<Health>,
    /// The upstream's initialize (or server/discover) result.
    info: Mutex<Option<Value>>,
    env: UpstreamEnv,
    /// For a stateless upstream: the resources to hear about and the running listen request.
    listen: Mutex<ListenState>,
    /// `per_client` mode: each client's own session, the pristine ones and the spares.
    clients: Mutex<sessions::Slots>,
    /// Set when the catalog should fetch this upstream's lists again.
    pub stale: ListsStale,
    /// Whether the catalog has this upstream's lists (from its first connection on).
    pub listed: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct ListenState {
    uris: std::collections::BTreeSet<String>,
    task: Option<tokio::task::AbortHandle>,
}

impl Upstream {
    pub fn new(index: usize, spec: UpstreamSpec, mode: SessionMode, env: UpstreamEnv) -> Arc<Self> {
        Arc::new(Upstream {
            index,
            spec,
            mode,
            control: watch::channel(None).0,
            health: watch::channel(Health::Starting).0,
            info: Mutex::new(None),
            env,
            listen: Mutex::new(ListenState::default()),
            clients: Mutex::default(),
            stale: ListsStale::default(),
            listed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn health(&self) -> Health {
        self.health.borrow().clone()
    }

    /// Follows the control connection's health (the catalog shows a stand-in for an upstream
    /// that goes down before it was ever listed).
    pub fn watch_health(&self) -> watch::Receiver<Health> {
        self.health.subscribe()
    }

    /// Whether the upstream is past starting: its lists are in the catalog, or it is down.
    pub fn settled(&self) -> bool {
        self.listed.load(std::sync::atomic::Ordering::SeqCst) || matches!(self.health(), Health::Down { .. })
    }

    /// The upstream's initialize result, once connected.
    pub fn info(&self) -> Option<Value> {
        self.info.lock().clone()
    }

    pub fn capability(&self, key: &str) -> bool {
        self.info().and_then(|i| i.get("capabilities").and_then(|c| c.get(key)).cloned()).is_some()
    }

    /// The live control connection, if any.
    pub fn current(&self) -> Option<Arc<Conn>> {
        self.control.borrow().clone().filter(|c| !c.is_closed())
    }

    /// Whether the live connection speaks only the stateless revision.
    pub fn is_stateless(&self) -> bool {
        self.current().is_some_and(|c| c.is_stateless())
    }

    /// The control connection. Fails at once while the upstream is down; waits up to
    /// `timeout` only while it is still starting.
    pub async fn connection(&self, timeout: Duration) -> Result<Arc<Conn>, CallError> {
        let deadline = Instant::now() + timeout;
        let mut health = self.health.subscribe();
        loop {
            if let Some(c) = self.current() {
                return Ok(c);
            }
            let state = health.borrow_and_update().clone();
            match state {
                Health::Down { reason } => return Err(CallError::Unavailable { name: self.spec.name.clone(), reason }),
                Health::Up | Health::Starting => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let changed = tokio::time::timeout(left, health.changed()).await;
                    if !matches!(changed, Ok(Ok(()))) {
                        let reason = if self.env.shutdown.is_cancelled() { "the gateway is shutting down" } else { "it is still starting" };
                        return Err(CallError::Unavailable { name: self.spec.name.clone(), reason: reason.into() });
                    }
                }
            }
        }
    }

    /// The connection that carries `session`'s request of kind `need`: the control connection
    /// in shared mode (and for stateless upstreams, which have no sessions); a pristine
    /// session for a [`Need::Pristine`] request of a client that may use one and has no session
    /// of its own; else the client's own session, opened for it if need be. Fails at once,
    /// naming the cap, when a new session would pass `gateway.max_upstream_sessions` and no
    /// idle one can make room.
    pub(crate) async fn connection_for(
        self: &Arc<Self>,
        session: &Arc<Session>,
        need: Need,
        timeout: Duration,
    ) -> Result<Arc<Conn>, CallError> {
        let deadline = Instant::now() + timeout;
        let control = self.connection(timeout).await?;
        if self.mode == SessionMode::Shared || control.is_stateless() {
            return Ok(control);
        }
        let own = session.upstream_key();
        let pristine = need == Need::Pristine
            && self.keeps_pristine_sessions()
            && session.asks_nothing_back()
            && self.clients.lock().map.get(&own).is_none_or(|s| s.dead());
        let (key, role, caps) = if pristine {
            let key = session.pristine_key();
            (key.clone(), ConnRole::Pool { key }, json!({}))
        } else {
            let owner = (!session.shares_upstream_sessions()).then(|| Arc::downgrade(session));
            (own.clone(), ConnRole::Client { key: own, session: owner }, session.upstream_capabilities())
        };
        let slot = self.slot(&key, role, caps)?;
        slot.ready(&self.spec.name, deadline.saturating_duration_since(Instant::now())).await
    }

    /// The slot of `key`, started (from a spare when there is one) if there is none.
    fn slot(self: &Arc<Self>, key: &str, role: ConnRole, caps: Value) -> Result<Arc<sessions::Slot>, CallError> {
        let (slot, spare) = {
            let mut slots = self.clients.lock();
            match slots.map.get(key) {
                Some(slot) if !slot.dead() => return Ok(slot.clone()),
                Some(_) => {
                    slots.map.remove(key);
                }
                None => {}
            }
            let spare = slots.spares.pop();
            if spare.is_none() && slots.count() >= self.env.max_client_sessions && !slots.make_room() {
                return Err(CallError::Busy { name: self.spec.name.clone(), cap: self.env.max_client_sessions });
            }
            let slot = sessions::Slot::new();
            slots.map.insert(key.to_owned(), slot.clone());
            (slot, spare)
        };
        let took_spare = spare.is_some();
        let (up, started, key) = (self.clone(), slot.clone(), key.to_owned());
        tokio::spawn(async move {
            let connect = up.connect_session(role, caps, spare.map(|s| s.link));
            let result = tokio::select! {
                r = connect => r,
                _ = started.abandoned.cancelled() => Err(ConnectError::Handshake("its client's session ended while it was starting".into())),
            };
            match result {
                Ok(conn) if started.abandoned.is_cancelled() => conn.close(),
                Ok(conn) => {
                    started.state.send_replace(sessions::SlotState::Ready(conn));
                }
                Err(e) => {
                    {
                        let mut slots = up.clients.lock();
                        if slots.map.get(&key).is_some_and(|s| Arc::ptr_eq(s, &started)) {
                            slots.map.remove(&key);
                        }
                    }
                    let reason = e.to_string();
                    if !started.abandoned.is_cancelled() {
                        tracing::warn!(target: "stowage::upstream", upstream = %up.spec.name, "a client session could not start: {reason}");
                    }
                    started
                        .state
                        .send_replace(sessions::SlotState::Failed(CallError::StartupFailed { name: up.spec.name.clone(), reason }));
                }
            }
        });
        if took_spare {
            self.refill_spares();
        }
        Ok(slot)
    }

    /// Whether this upstream serves what cannot change session state from pristine sessions
    /// (`per_client` stdio servers: their sessions are processes).
    fn keeps_pristine_sessions(&self) -> bool {
        self.mode == SessionMode::PerClient && matches!(self.spec.transport, TransportSpec::Stdio { .. })
    }

    /// Starts this upstream's command as its spec and the gateway's environment rules say: one
    /// place for the session's own process and the spares. `None` for an HTTP upstream.
    fn spawn_stdio(&self) -> Option<std::io::Result<Link>> {
        let TransportSpec::Stdio { command, args, env, cwd, inherit_env } = &self.spec.transport else { return None };
        Some(stdio::spawn(
            &self.spec.name,
            command,
            args,
            env,
            *inherit_env,
            &self.env.secret_env,
            cwd.as_ref(),
            self.env.max_message_bytes,
        ))
    }

    /// Whether this upstream keeps spare processes (client sessions of a stdio server).
    fn keeps_spares(&self) -> bool {
        !self.mode.is_shared() && matches!(self.spec.transport, TransportSpec::Stdio { .. }) && self.env.spares > 0
    }

    /// Starts spares until there are `gateway.spare_upstream_processes`, within the cap.
    fn refill_spares(self: &Arc<Self>) {
        if !self.keeps_spares() || self.env.shutdown.is_cancelled() || self.current().is_none_or(|c| c.is_stateless()) {
            return;
        }
        loop {
            {
                let mut slots = self.clients.lock();
                if slots.spares.len() + slots.spawning >= self.env.spares || slots.count() >= self.env.max_client_sessions {
                    return;
                }
                slots.spawning += 1;
            }
            let Some(spawned) = self.spawn_stdio() else { return };
            let mut slots = self.clients.lock();
            slots.spawning -= 1;
            match spawned {
                Ok(link) => slots.spares.push(sessions::Spare { link, since: Instant::now() }),
                Err(e) => {
                    tracing::warn!(target: "stowage::upstream", upstream = %self.spec.name, "cannot start a spare process: {e}");
                    return;
                }
            }
        }
    }

    /// `key`'s own connection, if one is open (never opens one).
    pub fn client_conn(&self, key: &str) -> Option<Arc<Conn>> {
        self.clients.lock().map.get(key).and_then(|s| s.open_conn())
    }

    /// Ends `key`'s own session, if it has one (its session ended): closed if open, stopped
    /// (and its process killed) if still starting.
    pub fn close_client(&self, key: &str) {
        let slot = self.clients.lock().map.remove(key);
        if let Some(slot) = slot {
            slot.end();
        }
    }

    /// How many client sessions (pristine ones included) are open.
    pub fn client_sessions(&self) -> usize {
        self.clients.lock().map.values().filter(|s| s.open_conn().is_some()).count()
    }

    /// What counts against `gateway.max_upstream_sessions` now: sessions open or starting,
    /// and spare processes.
    pub fn sessions_held(&self) -> usize {
        self.clients.lock().count()
    }

    /// Closes client connections that are dead, idle past the limit with nothing in flight,
    /// or whose session is gone; stops spares unused as long.
    fn sweep_clients(&self) {
        let orphaned = |c: &Conn| matches!(&c.role, ConnRole::Client { session: Some(s), .. } if s.upgrade().is_none_or(|s| s.is_closed()));
        self.clients.lock().sweep(self.env.client_idle, orphaned);
    }

    /// Sends a request on the control connection and waits for its reply.
    pub async fn request(&self, method: &str, params: Option<&Value>, timeout: Duration) -> Result<Message, CallError> {
        let deadline = Instant::now() + timeout;
        let conn = self.connection(timeout).await?;
        let out = conn.start(method, params.map(crate::jsonrpc::to_raw)).await?;
        out.wait(deadline.saturating_duration_since(Instant::now())).await
    }

    /// Adds or drops `uri` from what a stateless upstream's listen stream asks for, and
    /// reopens the stream (2026-07-28 has no `resources/subscribe`).
    pub fn set_resource_subscription(self: &Arc<Self>, uri: &str, on: bool) {
        let changed = {
            let mut l = self.listen.lock();
            if on { l.uris.insert(uri.to_owned()) } else { l.uris.remove(uri) }
        };
        if changed && let Some(conn) = self.current().filter(|c| c.is_stateless()) {
            self.start_listen(&conn);
        }
    }

    /// (Re)opens the `subscriptions/listen` request through which a stateless upstream sends
    /// list changes and resource updates; they reach the gateway like any notification. The
    /// previous request is dropped, which cancels it upstream.
    fn start_listen(self: &Arc<Self>, conn: &Arc<Conn>) {
        let caps = self.info().and_then(|i| i.get("capabilities").cloned()).unwrap_or(Value::Null);
        let flag = |p: &str| caps.pointer(p).and_then(Value::as_bool) == Some(true);
        let mut l = self.listen.lock();
        let mut filter = serde_json::Map::new();
        for (key, ptr) in [
            ("toolsListChanged", "/tools/listChanged"),
            ("promptsListChanged", "/prompts/listChanged"),
            ("resourcesListChanged", "/resources/listChanged"),
        ] {
            if flag(ptr) {
                filter.insert(key.into(), json!(true));
            }
        }
        if flag("/resources/subscribe") && !l.uris.is_empty() {
            filter.insert("resourceSubscriptions".into(), json!(l.uris.iter().collect::<Vec<_>>()));
        }
        if let Some(old) = l.task.take() {
            old.abort();
        }
        if filter.is_empty() {
            return;
        }
        let (conn, name) = (conn.clone(), self.spec.name.clone());
        let task = tokio::spawn(async move {
            // Open for as long as the server keeps it; its end (or an error) is only logged.
            let params = crate::jsonrpc::to_raw(&json!({"notifications": filter}));
            let r = match conn.start("subscriptions/listen", Some(params)).await {
                Ok(out) => out.wait(Duration::from_secs(365 * 24 * 3600)).await.map(drop),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                tracing::debug!(target: "stowage::upstream", upstream = %name, "listen stream ended: {e}");
            }
        });
        l.task = Some(task.abort_handle());
    }

    /// Runs the supervisor until shutdown: keeps the control connection up, and sweeps idle
    /// client connections.
    pub async fn supervise(self: Arc<Self>) {
        let (initial, max) = self.env.backoff;
        let mut backoff = initial;
        let sweep_every = (self.env.client_idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        let mut sweep = tokio::time::interval(sweep_every);
        let mut caps = self.env.control_caps.clone();
        let caps = tokio::select! {
            c = caps.wait_for(Option::is_some) => c.ok().and_then(|c| c.clone()),
            _ = self.env.shutdown.cancelled() => None,
        };
        let Some(caps) = caps else {
            self.health.send_replace(Health::Down { reason: "the gateway is shutting down".into() });
            return;
        };
        loop {
            if self.env.shutdown.is_cancelled() {
                break;
            }
            let started = Instant::now();
            match self.connect(ConnRole::Control, caps.clone()).await {
                Ok(conn) => {
                    tracing::info!(target: "stowage::upstream", upstream = %self.spec.name, "connected");
                    self.control.send_replace(Some(conn.clone()));
                    self.health.send_replace(Health::Up);
                    self.env.uplink.health_changed(&self.spec.name, Ok(()));
                    if conn.is_stateless() {
                        self.start_listen(&conn);
                    }
                    self.stale.mark_connected();
                    // The first client to need a session of its own finds a process started.
                    self.refill_spares();
                    let reason = loop {
                        // Shutdown first: stopping closes the connection too, and that close
                        // is not a loss to report.
                        tokio::select! {
                            biased;
                            _ = self.env.shutdown.cancelled() => break Some(()),
                            _ = conn.closed.cancelled() => break None,
                            _ = sweep.tick() => self.sweep_clients(),
                        }
                    };
                    self.control.send_replace(None);
                    // The connection may have died of the shutdown itself (a killed child, a
                    // closed stream) just before the token was seen.
                    if reason.is_some() || self.env.shutdown.is_cancelled() {
                        break;
                    }
                    // The reader records why the connection ended before it cancels it.
                    let reason = conn.end_reason().unwrap_or_else(|| "closed".into());
                    tracing::warn!(target: "stowage::upstream", upstream = %self.spec.name, "connection lost: {reason}; reconnecting");
                    self.health.send_replace(Health::Down { reason: reason.clone() });
                    self.env.uplink.health_changed(&self.spec.name, Err(reason));
                    if started.elapsed() > Duration::from_secs(30) {
                        backoff = initial;
                    }
                }
                Err(_) if self.env.shutdown.is_cancelled() => break,
                Err(e) => {
                    let e = e.to_string();
                    tracing::warn!(target: "stowage::upstream", upstream = %self.spec.name, "cannot start: {e}; retrying in {backoff:?}");
                    let was_up = self.health.send_replace(Health::Down { reason: e.clone() }) == Health::Up;
                    if was_up || backoff == initial {
                        self.env.uplink.health_changed(&self.spec.name, Err(e));
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.env.shutdown.cancelled() => break,
            }
            backoff = (backoff * 2).min(max);
        }
        self.health.send_replace(Health::Down { reason: "the gateway is shutting down".into() });
    }

    async fn open_link(&self, timeout: Duration) -> Result<Link, ConnectError> {
        match &self.spec.transport {
            TransportSpec::Stdio { command, .. } => match self.spawn_stdio() {
                Some(spawned) => spawned.map_err(|source| ConnectError::Spawn { command: command.clone(), source }),
                None => unreachable!("the transport is stdio"),
            },
            TransportSpec::Http { url, headers, ca_file } => {
                http::connect(&self.spec.name, url, headers, ca_file.as_deref(), self.env.max_message_bytes)
                    .map_err(ConnectError::Transport)
            }
            TransportSpec::Sse { url, headers, ca_file } => {
                sse::connect(&self.spec.name, url, headers, ca_file.as_deref(), self.env.max_message_bytes, timeout)
                    .await
                    .map_err(ConnectError::Transport)
            }
            TransportSpec::Demo => {
                let factory = self.env.in_process.as_ref().ok_or(ConnectError::NoInProcess)?;
                let (from_server, to_server) = factory();
                Ok(stdio::pipe_link(from_server, to_server, self.env.max_message_bytes, None))
            }
        }
    }

    /// A client session's connection: on `spare` when one was taken (a process already
    /// started), else on a new transport. A spare that died while it waited is replaced by a
    /// fresh start, once.
    async fn connect_session(&self, role: ConnRole, capabilities: Value, spare: Option<Link>) -> Result<Arc<Conn>, ConnectError> {
        if let Some(link) = spare {
            match self.connect_on(role.clone(), capabilities.clone(), Some(link)).await {
                Ok(conn) => return Ok(conn),
                Err(e) => {
                    tracing::debug!(target: "stowage::upstream", upstream = %self.spec.name, "a spare process could not be used ({e}); starting a fresh one")
                }
            }
        }
        self.connect_on(role, capabilities, None).await
    }

    /// Opens a transport, starts its reader and performs the handshake, declaring
    /// `capabilities` as the client's.
    async fn connect(&self, role: ConnRole, capabilities: Value) -> Result<Arc<Conn>, ConnectError> {
        self.connect_on(role, capabilities, None).await
    }

    /// [`Upstream::connect`] over `link` when given. Dropping the future before it returns
    /// closes what it opened (a child is killed, never left running unseen).
    async fn connect_on(&self, role: ConnRole, capabilities: Value, link: Option<Link>) -> Result<Arc<Conn>, ConnectError> {
        let timeout = self.spec.request_timeout.min(Duration::from_secs(60));
        let link = match link {
            Some(link) => link,
            None => self.open_link(timeout).await?,
        };
        let (conn, rx) = Conn::new(self.index, &self.spec.name, role, link);
        tokio::spawn(conn::read_loop(conn.clone(), rx, self.env.initiated.clone(), self.env.uplink.clone()));
        let opened = CloseUnlessKept(Some(conn.clone()));
        let fail = |e: CallError| {
            ConnectError::Handshake(match e {
                CallError::Closed { reason, .. } => format!("{reason} during start-up"),
                other => other.to_string(),
            })
        };
        let init = json!({
            "protocolVersion": UPSTREAM_PROTOCOL,
            "capabilities": capabilities,
            "clientInfo": {"name": "stowage", "title": "Stowage gateway", "version": env!("CARGO_PKG_VERSION")},
        });
        let reply = conn.start("initialize", Some(crate::jsonrpc::to_raw(&init))).await.map_err(fail)?.wait(timeout).await.map_err(fail)?;
        let info = if reply.error_code() == Some(code::METHOD_NOT_FOUND) {
            // A stateless-only server: discover it and stamp every request from now on.
            conn.set_stateless(json!({
                "io.modelcontextprotocol/protocolVersion": STATELESS_PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": capabilities,
                "io.modelcontextprotocol/clientInfo": {"name": "stowage", "version": env!("CARGO_PKG_VERSION")},
            }));
            if let Some(h) = &conn.http {
                *h.protocol_version.lock() = Some(STATELESS_PROTOCOL.into());
            }
            let reply = conn.start("server/discover", None).await.map_err(fail)?.wait(timeout).await.map_err(fail)?;
            result_value(&reply).map_err(|e| ConnectError::Handshake(format!("server/discover failed: {}", error_message(&e))))?
        } else {
            let info = result_value(&reply).map_err(|e| ConnectError::Handshake(format!("initialize failed: {}", error_message(&e))))?;
            if let (Some(h), Some(v)) = (&conn.http, info.get("protocolVersion").and_then(Value::as_str)) {
                *h.protocol_version.lock() = Some(v.to_owned());
            }
            conn.send(&Message::notification("notifications/initialized", None));
            info
        };
        if matches!(conn.role, ConnRole::Control) {
            *self.info.lock() = Some(info);
        }
        Ok(opened.keep())
    }

    /// Kills every connection (the supervisor will not restart after shutdown).
    pub fn close(&self) {
        if let Some(c) = self.control.send_replace(None) {
            c.close();
        }
        let mut slots = self.clients.lock();
        for (_, slot) in slots.map.drain() {
            slot.end();
        }
        slots.spares.clear();
    }
}

/// A connection being opened: closed if the opening stops before it is handed over.
struct CloseUnlessKept(Option<Arc<Conn>>);

impl CloseUnlessKept {
    fn keep(mut self) -> Arc<Conn> {
        self.0.take().expect("kept once")
    }
}

impl Drop for CloseUnlessKept {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.close();
        }
    }
}

/// The message of a JSON-RPC error object given as JSON text (what [`result_value`] returns),
/// or the text itself.
fn error_message(error: &str) -> String {
    serde_json::from_str::<Value>(error)
        .ok()
        .and_then(|e| e.get("message").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| error.to_owned())
}

/// Whether `spec`'s upstream answers, without starting a gateway (what `check-config` asks of
/// HTTP upstreams): `Ok` with what it said, `Err` with why not. `None` for transports that
/// have nothing to reach (stdio children, the in-process demo).
pub async fn probe(spec: &UpstreamSpec, timeout: Duration) -> Option<Result<String, TransportError>> {
    match &spec.transport {
        TransportSpec::Http { url, headers, ca_file } => Some(http::probe(url, headers, ca_file.as_deref(), false, timeout).await),
        TransportSpec::Sse { url, headers, ca_file } => Some(http::probe(url, headers, ca_file.as_deref(), true, timeout).await),
        TransportSpec::Stdio { .. } | TransportSpec::Demo => None,
    }
}

/// Starts a stdio upstream's command as the gateway would (its environment, its working
/// directory) and asks it `initialize` within `timeout`, then stops it: what `check-config`
/// says of a command before a host starts it. `None` for an upstream that is not a command.
/// The error is one line: why it could not start, its exit status and the last lines of its
/// stderr, or that it did not answer in time.
pub async fn probe_stdio(spec: &UpstreamSpec, timeout: Duration, secret_env: &[String]) -> Option<Result<String, String>> {
    let TransportSpec::Stdio { command, args, env, cwd, inherit_env } = &spec.transport else { return None };
    let mut link = match stdio::spawn(&spec.name, command, args, env, *inherit_env, secret_env, cwd.as_ref(), 16 << 20) {
        Ok(link) => link,
        Err(e) => return Some(Err(format!("cannot start {command}: {e}"))),
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": UPSTREAM_PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "stowage-check-config", "version": env!("CARGO_PKG_VERSION")}}});
    if link.tx.send(init.to_string().into_bytes()).await.is_err() {
        return Some(Err("closed its input at once".into()));
    }
    let answer = tokio::time::timeout(timeout, async {
        while let Some(inbound) = link.rx.recv().await {
            match inbound {
                Inbound::Line(line, _) => {
                    let Ok(msg) = serde_json::from_slice::<Value>(&line) else { continue };
                    if msg.get("id") != Some(&json!(1)) {
                        continue;
                    }
                    return match (msg.get("result"), msg.get("error")) {
                        (Some(r), _) => {
                            let info = r.pointer("/serverInfo/name").and_then(Value::as_str).unwrap_or("a server");
                            let version = r.pointer("/serverInfo/version").and_then(Value::as_str).unwrap_or("");
                            Ok(format!("answers initialize ({info} {version})").replace(" )", ")"))
                        }
                        (_, Some(e)) => {
                            Err(format!("refused initialize: {}", e.get("message").and_then(Value::as_str).unwrap_or("an error")))
                        }
                        _ => Err("answered initialize with neither a result nor an error".into()),
                    };
                }
                Inbound::TooLong { .. } => return Err("answered initialize with an oversized message".into()),
                Inbound::Closed(reason) => return Err(reason),
            }
        }
        Err("closed its output".into())
    })
    .await;
    Some(answer.unwrap_or_else(|_| {
        Err(format!("did not answer initialize within {} s: a host would list it as still starting, or give up on it", timeout.as_secs()))
    }))
}

/// Capabilities the control connection declares: everything a client may offer, since the
/// clients behind it may support any of them (a request one cannot serve gets an error).
pub(crate) fn client_capabilities() -> Value {
    json!({"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true}})
}
