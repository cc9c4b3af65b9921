//! The gateway core: one [`Gateway`] per process, shared by every transport and by callers
//! inside the process.
//!
//! Transports ([`crate::downstream`]) call [`Gateway::handle`] for every client message, with
//! an [`Outbox`] for what belongs to that request (progress, sampling). Callers in the same
//! process (the agent planner, the playground) use the in-process API instead,
//! [`Gateway::list_tools`] and [`Gateway::call_tool`], which run the very same path. The work
//! is split by concern:
//! - [`handshake`]: `initialize`, `server/discover`, the capabilities the gateway offers, and
//!   the 2026-07-28 result envelope;
//! - [`lists`]: the aggregated lists, refreshed when an upstream (re)connects or says its
//!   lists changed;
//! - [`calls`]: `tools/call` and its rewrite, the in-process API, call events and metrics;
//! - [`forward`]: sending a request to the right upstream connection on a client's behalf,
//!   and putting an upstream's questions (sampling, elicitation, roots) to the client;
//! - [`subscriptions`]: resource subscriptions and `subscriptions/listen` streams;
//! - [`inbound`]: what upstreams initiate, attributed to exactly one client or to nobody.
//!
//! A panic while handling one message answers that message with an internal error and frees
//! its request; the process and every other session carry on (all shared state sits behind
//! locks that do not poison).

mod calls;
mod chain_hook;
mod collect;
mod forward;
mod handshake;
mod inbound;
mod last_seen;
mod lists;
mod read_cache;
mod reads;
mod resource_tools;
mod subscriptions;
mod tasks;

pub use calls::{CallOptions, CallReport, ToolOutcome};
pub use handshake::{HANDSHAKE_VERSIONS, MODERN_VERSIONS};
pub(crate) use last_seen::STANDIN_TOOL;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use futures::FutureExt;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::attribution::CallRoutes;
use crate::catalog::{Catalog, UpstreamLists};
use crate::config::{GatewayConfig, PrefixMode, SessionMode, UpstreamSpec};
use crate::error::GatewayError;
use crate::events::EventBus;
use crate::inputs::Exchanges;
use crate::jsonrpc::{Kind, Message, code};
use crate::outbox::Outbox;
use crate::session::{Caller, Session, SessionKind, Sessions};
use crate::shape::Shaper;
use crate::upstream::{InProcessFactory, Upstream, UpstreamEnv};

/// How long a [`ControlCapabilities::FirstClient`] gateway waits for its client's handshake
/// before its upstreams connect declaring every capability (someone typing at a terminal).
const FIRST_CLIENT_WAIT: Duration = Duration::from_secs(5);

/// What the upstreams' control connections declare as the client's capabilities. What a
/// server offers can depend on them (server-everything lists its sampling tool only to a
/// client that can sample), so a catalog is only exact for the client whose capabilities
/// were declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ControlCapabilities {
    /// Every capability a client may offer: the control connection serves many clients (each
    /// of a `per_client` upstream also gets its own session, declaring its own).
    #[default]
    Any,
    /// The first client's own: a stdio gateway has exactly one client, so its shared upstream
    /// sessions are that client's, as if it had connected directly, with no second process.
    /// Upstreams connect at its handshake (or after [`FIRST_CLIENT_WAIT`] with every
    /// capability, when none comes).
    FirstClient,
}

/// What runs once when start-up has settled (see [`Gateway::on_startup`]).
type StartupHook = Box<dyn FnOnce(&Gateway) + Send>;

/// What one upstream's pristine sessions listed (see `lists::pristine_listing`): fetched
/// once per session and listing, shared by every client that uses it.
#[derive(Default)]
struct PristineLists {
    /// Held while a listing is fetched, so clients arriving together fetch it once.
    fetching: Arc<tokio::sync::Mutex<()>>,
    /// By pristine connection.
    kept: Mutex<std::collections::HashMap<u64, crate::catalog::OwnList>>,
    /// Bumped when a pristine session says its lists changed.
    epoch: AtomicU64,
}

/// The gateway's side of [`crate::upstream::Uplink`]: in-call notifications go to their
/// client through the routes, health changes onto the event bus.
struct GatewayUplink {
    routes: Arc<CallRoutes>,
    events: EventBus,
}

#[async_trait::async_trait]
impl crate::upstream::Uplink for GatewayUplink {
    async fn in_call(&self, conn: &crate::upstream::Conn, origin: crate::upstream::Origin, msg: Message) {
        self.routes.deliver_scrubbed(conn, origin, msg).await;
    }

    fn health_changed(&self, upstream: &str, health: Result<(), String>) {
        let upstream = upstream.to_owned();
        self.events.publish(match health {
            Ok(()) => crate::events::GatewayEvent::UpstreamUp { upstream },
            Err(reason) => crate::events::GatewayEvent::UpstreamDown { upstream, reason },
        });
    }
}

/// Everything a gateway is built from, given before it starts: there is nothing to set on a
/// running gateway, so no call can see it half-built. `Gateway::builder(config, upstreams,
/// shaper)`, the optional parts, then [`GatewayBuilder::start`].
#[must_use = "a builder does nothing until start()"]
pub struct GatewayBuilder {
    config: GatewayConfig,
    upstreams: Vec<UpstreamSpec>,
    shaper: Shaper,
    in_process: Option<InProcessFactory>,
    default_session_mode: SessionMode,
    secret_env: Vec<String>,
    state_dir: Option<std::path::PathBuf>,
    control_capabilities: ControlCapabilities,
    links: Option<stowage_http::Links>,
    store: Option<Arc<dyn stowage_store::ArtifactStore>>,
    apps: Option<Arc<crate::apps::Apps>>,
    hosts: Option<Arc<crate::hosts::Hosts>>,
}

impl GatewayBuilder {
    /// How to start in-process servers (the bundled demo), when one is configured.
    pub fn in_process(mut self, factory: InProcessFactory) -> Self {
        self.in_process = Some(factory);
        self
    }

    /// The session mode of upstreams that do not set one (default `shared`; `stowage serve`:
    /// `per_client` over HTTP, `shared` for the one client of a stdio gateway).
    pub fn session_mode(mut self, mode: SessionMode) -> Self {
        self.default_session_mode = mode;
        self
    }

    /// Environment variables that hold the gateway's secrets (link-signing keys, the JWT
    /// secret): never passed to an upstream, even one that inherits the environment.
    pub fn secret_env(mut self, names: Vec<String>) -> Self {
        self.secret_env = names;
        self
    }

    /// Where the gateway keeps what it learned across runs: each upstream's last catalog, so
    /// one that is down at start still shows its tools (see [`last_seen`]). Default: nothing
    /// is kept.
    pub fn state_dir(mut self, dir: Option<std::path::PathBuf>) -> Self {
        self.state_dir = dir;
        self
    }

    /// What control connections declare (default: any); see [`ControlCapabilities`].
    pub fn control_capabilities(mut self, caps: ControlCapabilities) -> Self {
        self.control_capabilities = caps;
        self
    }

    /// Signed links ([`stowage_http::Links`]): for tools during a call (blob chaining, upload
    /// slots) and for people (`artifact_url`, artifact resources). Without them, no
    /// `artifact_url` tool.
    pub fn links(mut self, links: stowage_http::Links) -> Self {
        self.links = Some(links);
        self
    }

    /// The store the gateway's reader tools (`artifact_read`, `artifact_query`, …) read, the
    /// one results are offloaded to; a store that keeps nothing enables nothing.
    pub fn store(mut self, store: Arc<dyn stowage_store::ArtifactStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// MCP Apps (the viewer and its tools) for clients that declare the extension; it needs a
    /// store that keeps bytes ([`GatewayBuilder::store`]).
    pub fn apps(mut self, apps: Arc<crate::apps::Apps>) -> Self {
        self.apps = Some(apps);
        self
    }

    /// The host profiles in force (default: the built-in ones).
    pub fn hosts(mut self, hosts: Arc<crate::hosts::Hosts>) -> Self {
        self.hosts = Some(hosts);
        self
    }
}

/// The running gateway: its settings, its upstreams, and its state in four named parts.
pub struct Gateway {
    /// The `[gateway]` settings it was built with.
    pub config: GatewayConfig,
    /// One supervised connection per configured server, in configuration order.
    pub upstreams: Vec<Arc<Upstream>>,
    /// What the upstreams list, merged into one catalog ([`lists`]).
    lists: Lists,
    /// The clients: their sessions, the calls in flight, their listen streams and tasks.
    clients: Clients,
    /// The collaborators it was built with ([`GatewayBuilder`]), fixed for its life.
    parts: Parts,
    /// Start-up, readiness and shutdown.
    life: Lifecycle,
}

/// The aggregated lists (see [`lists`]).
struct Lists {
    catalog: RwLock<Arc<Catalog>>,
    /// Counts catalog rebuilds: a client's own catalog built on an older one is rebuilt.
    generation: AtomicU64,
    /// Per upstream: what it listed last (on the control connection).
    seen: Mutex<Vec<UpstreamLists>>,
    /// Per upstream: what its pristine sessions listed.
    pristine: Vec<PristineLists>,
    /// Per upstream: the catalog last written to `state_dir` (not written again unchanged).
    kept: Mutex<Vec<Option<Vec<u8>>>>,
    /// Whether names carry their upstream's prefix.
    prefix: bool,
    /// See [`GatewayBuilder::state_dir`].
    state_dir: Option<std::path::PathBuf>,
}

impl Lists {
    /// What each upstream listed last time, until it lists again: one that is down now still
    /// shows its tools (calls say why it is down).
    fn new(upstreams: &[Arc<Upstream>], state_dir: Option<std::path::PathBuf>, prefix: bool, separator: &str) -> Lists {
        let seen: Vec<UpstreamLists> = upstreams
            .iter()
            .map(|u| {
                let kept = state_dir.as_deref().and_then(|d| last_seen::load(d, &u.spec));
                let mut l = kept.unwrap_or_else(|| UpstreamLists { name: u.name().to_owned(), ..Default::default() });
                l.output_schemas = lists::compile_output_schemas(u.name(), &l.tools);
                l
            })
            .collect();
        Lists {
            catalog: RwLock::new(Arc::new(Catalog::build(&seen, prefix, separator))),
            generation: AtomicU64::new(0),
            seen: Mutex::new(seen),
            pristine: upstreams.iter().map(|_| PristineLists::default()).collect(),
            kept: Mutex::new(vec![None; upstreams.len()]),
            prefix,
            state_dir,
        }
    }
}

/// The clients and what they have in flight.
struct Clients {
    sessions: Arc<Sessions>,
    /// Which client each call, request and notification of an upstream belongs to.
    routes: Arc<CallRoutes>,
    /// Open `subscriptions/listen` streams (2026-07-28 clients).
    listeners: Mutex<Vec<Arc<subscriptions::Listener>>>,
    /// Interactive requests of 2026-07-28 clients waiting for their retry with input.
    exchanges: Arc<Exchanges>,
    /// Which upstream (and identity) each task belongs to.
    tasks: Mutex<tasks::Tasks>,
    next_token: AtomicU64,
    next_call: AtomicU64,
    /// A shared upstream asked for roots before any client was there and was told "none":
    /// the first client that declares roots makes it ask again (see `forward::ask_client`).
    roots_owed: std::sync::atomic::AtomicBool,
    /// Counts clients that finished their handshake: a roots request held until one does
    /// waits on it.
    initialized: watch::Sender<u64>,
}

/// What the gateway was built with, beside its settings and upstreams.
struct Parts {
    shaper: Shaper,
    /// Signed links, for tools and for people.
    links: Option<stowage_http::Links>,
    /// The store the reader tools (`artifact_read`, `artifact_query`) read, as the caller.
    artifacts: Option<Arc<dyn stowage_store::ArtifactStore>>,
    /// MCP Apps: the viewer and its tools, for clients that declare the extension.
    apps: Option<Arc<crate::apps::Apps>>,
    /// Host profiles (`[[hosts]]`) and image preview settings; the built-in ones unless
    /// [`GatewayBuilder::hosts`] gave others.
    hosts: Arc<crate::hosts::Hosts>,
    /// Upstream resource reads, offloaded, by upstream, URI and owner.
    read_cache: read_cache::ReadCache,
    events: EventBus,
}

/// Start-up, readiness and shutdown.
struct Lifecycle {
    shutdown: CancellationToken,
    /// How many upstreams have connected and listed once.
    ready: watch::Sender<usize>,
    /// When the gateway started.
    started: std::time::Instant,
    /// What control connections declare (see [`ControlCapabilities`]), once known; the
    /// start-up grace is counted from `upstreams_from`, when it became known.
    control_caps: watch::Sender<Option<Value>>,
    upstreams_from: Mutex<std::time::Instant>,
    /// Run once when start-up has settled, before the first handshake is answered (a stdio
    /// gateway's banner).
    on_startup: Mutex<Option<StartupHook>>,
    /// A fault injected on purpose by a test (see [`Gateway::inject_panic`]).
    #[cfg(feature = "test-hooks")]
    fault: Mutex<Option<String>>,
}

impl Gateway {
    /// A gateway in front of `upstreams` (in the order their tools are listed), with the
    /// `[gateway]` settings and the shaper of every answer; the rest is optional (see
    /// [`GatewayBuilder`]).
    pub fn builder(config: GatewayConfig, upstreams: Vec<UpstreamSpec>, shaper: Shaper) -> GatewayBuilder {
        GatewayBuilder {
            config,
            upstreams,
            shaper,
            in_process: None,
            default_session_mode: SessionMode::Shared,
            secret_env: Vec::new(),
            state_dir: None,
            control_capabilities: ControlCapabilities::Any,
            links: None,
            store: None,
            apps: None,
            hosts: None,
        }
    }
}

impl GatewayBuilder {
    /// Starts every upstream's supervisor and the gateway's own tasks.
    pub fn start(self) -> Arc<Gateway> {
        let GatewayBuilder {
            config,
            upstreams: specs,
            shaper,
            in_process,
            default_session_mode,
            secret_env,
            state_dir,
            control_capabilities,
            links,
            store: artifacts,
            apps,
            hosts,
        } = self;
        let control_caps = watch::channel(match control_capabilities {
            ControlCapabilities::Any => Some(crate::upstream::client_capabilities()),
            ControlCapabilities::FirstClient => None,
        })
        .0;
        let shutdown = CancellationToken::new();
        let (initiated_tx, initiated_rx) = mpsc::channel(inbound::QUEUE);
        let backoff = (
            Duration::from_millis(config.restart_backoff_initial_ms.max(10)),
            Duration::from_millis(config.restart_backoff_max_ms.max(config.restart_backoff_initial_ms.max(10))),
        );
        let prefix = match config.prefix {
            PrefixMode::Always => true,
            PrefixMode::Never => false,
            PrefixMode::Auto => specs.len() > 1,
        };
        let sessions = Arc::new(Sessions::default());
        let routes = Arc::new(CallRoutes::new(sessions.clone()));
        let events = EventBus::with_recorder(crate::metrics::record);
        let env = UpstreamEnv {
            initiated: initiated_tx,
            uplink: Arc::new(GatewayUplink { routes: routes.clone(), events: events.clone() }),
            shutdown: shutdown.clone(),
            max_message_bytes: config.max_message_bytes,
            backoff,
            in_process,
            secret_env,
            client_idle: Duration::from_secs(config.upstream_session_idle_secs.max(1)),
            max_client_sessions: config.max_upstream_sessions.max(1),
            spares: config.spare_upstream_processes,
            control_caps: control_caps.subscribe(),
        };
        let upstreams: Vec<_> = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let mode = spec.session_mode.unwrap_or(default_session_mode);
                Upstream::new(i, spec, mode, env.clone())
            })
            .collect();
        let lists = Lists::new(&upstreams, state_dir, prefix, &config.separator);
        let hosts = hosts.unwrap_or_default();
        // Previews read originals back from the store the gateway offloads to.
        let shaper = match &artifacts {
            Some(store) if !shaper.makes_previews() => shaper.with_previews(store.clone(), hosts.preview.clone()),
            _ => shaper,
        };
        let gw = Arc::new(Gateway {
            config,
            upstreams,
            lists,
            clients: Clients {
                sessions,
                routes,
                listeners: Mutex::new(Vec::new()),
                exchanges: Arc::default(),
                tasks: Mutex::default(),
                next_token: AtomicU64::new(1),
                next_call: AtomicU64::new(1),
                roots_owed: std::sync::atomic::AtomicBool::new(false),
                initialized: watch::channel(0).0,
            },
            parts: Parts { shaper, links, artifacts, apps, hosts, read_cache: Default::default(), events },
            life: Lifecycle {
                shutdown,
                ready: watch::channel(0).0,
                started: std::time::Instant::now(),
                control_caps,
                upstreams_from: Mutex::new(std::time::Instant::now()),
                on_startup: Mutex::new(None),
                #[cfg(feature = "test-hooks")]
                fault: Mutex::new(None),
            },
        });
        let scrubber: Arc<dyn crate::attribution::Scrubber> = Arc::new(calls::GatewayScrubber(Arc::downgrade(&gw)));
        let _ = gw.clients.routes.scrubber.set(scrubber);
        for u in &gw.upstreams {
            tokio::spawn(u.clone().supervise());
            tokio::spawn(lists::refresh_loop(Arc::downgrade(&gw), u.index));
        }
        tokio::spawn(inbound::run(Arc::downgrade(&gw), initiated_rx));
        gw
    }
}

impl Gateway {
    /// Waits until every upstream has connected and listed its tools once, or `timeout`.
    /// Returns how many did.
    pub async fn wait_ready(&self, timeout: Duration) -> usize {
        let n = self.upstreams.len();
        let mut rx = self.life.ready.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|r| *r >= n)).await;
        *rx.borrow()
    }

    /// Waits (up to `timeout`) until no upstream is still starting: each has its lists in the
    /// catalog or is down. Requests that read the catalog wait for this, so a client that
    /// connects the moment the gateway listens sees every tool, while a dead upstream holds
    /// nobody up.
    pub async fn wait_settled(&self, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        while !self.upstreams.iter().all(|u| u.settled()) && std::time::Instant::now() < deadline && !self.life.shutdown.is_cancelled() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until no upstream is still on its first attempt, or the start-up wait of a client
    /// no profile names is over ([`crate::hosts::DEFAULT_STARTUP_WAIT_MS`], counted from when
    /// the upstreams could start connecting): when the banner can say what runs, and what
    /// callers in the process (the planner, the playground) wait for.
    pub async fn wait_startup(&self) {
        self.wait_startup_within(Duration::from_millis(crate::hosts::DEFAULT_STARTUP_WAIT_MS)).await;
    }

    /// [`Gateway::wait_startup`] bounded by `bound` instead: a client's requests wait within
    /// its host's start-up wait ([`crate::hosts::HostProfile::startup_wait_ms`]), below the
    /// time that host itself waits for a server. Counted from when the upstreams could start,
    /// not per request: the gateway serves at once, a dead upstream holds nobody up, and one
    /// that comes up later is announced with `notifications/tools/list_changed` (which some
    /// hosts never act on, hence a wait at all).
    pub(crate) async fn wait_startup_within(&self, bound: Duration) {
        let from = self.upstreams_started().await;
        let grace = (from + bound).saturating_duration_since(std::time::Instant::now());
        if !grace.is_zero() {
            self.wait_settled(grace).await;
        }
        let hook = self.life.on_startup.lock().take();
        if let Some(hook) = hook {
            hook(self);
        }
    }

    /// When the upstreams could start connecting: at the gateway's start, or, for a
    /// [`ControlCapabilities::FirstClient`] gateway, at its client's handshake (or once
    /// [`FIRST_CLIENT_WAIT`] passed without one: they then declare every capability).
    async fn upstreams_started(&self) -> std::time::Instant {
        // Every request but `ping` asks: once known, no timer.
        if self.life.control_caps.borrow().is_some() {
            return *self.life.upstreams_from.lock();
        }
        let mut caps = self.life.control_caps.subscribe();
        let deadline = tokio::time::Instant::from_std(self.life.started + FIRST_CLIENT_WAIT);
        let known = tokio::select! {
            c = tokio::time::timeout_at(deadline, caps.wait_for(Option::is_some)) => c.is_ok(),
            _ = self.life.shutdown.cancelled() => true,
        };
        if !known {
            tracing::debug!(target: "stowage::gateway", "no client said what it can do: upstreams declare every capability");
            self.offer_control_capabilities(crate::upstream::client_capabilities());
        }
        *self.life.upstreams_from.lock()
    }

    /// A client's handshake said what it can do: a [`ControlCapabilities::FirstClient`]
    /// gateway's upstreams connect declaring it (later clients change nothing).
    fn offer_control_capabilities(&self, caps: Value) {
        self.life.control_caps.send_if_modified(|c| {
            if c.is_some() {
                return false;
            }
            *c = Some(caps);
            *self.life.upstreams_from.lock() = std::time::Instant::now();
            true
        });
    }

    /// Runs `hook` once start-up has settled (see [`Gateway::wait_startup`]), before the first
    /// handshake is answered.
    pub fn on_startup(&self, hook: impl FnOnce(&Gateway) + Send + 'static) {
        *self.life.on_startup.lock() = Some(Box::new(hook));
    }

    /// The host profiles in force.
    pub fn hosts(&self) -> &Arc<crate::hosts::Hosts> {
        &self.parts.hosts
    }

    /// Records who the client says it is (`clientInfo.name`) and the profile that picks.
    pub(crate) fn note_client(&self, session: &Session, client_info: Option<&Value>) {
        let Some(name) = client_info.and_then(|c| c.get("name")).and_then(Value::as_str) else { return };
        let mut host = session.host.lock();
        if host.as_ref().is_some_and(|(n, _)| n == name) {
            return;
        }
        let profile = self.hosts().profile_for(Some(name));
        tracing::debug!(target: "stowage::hosts", session = %session.id, client = %name, profile = %profile.name, "host profile");
        *host = Some((name.to_owned(), profile));
    }

    /// The host profile `session`'s answers are shaped for.
    pub fn session_host(&self, session: &Session) -> Arc<crate::hosts::HostProfile> {
        self.host_profile(session)
    }

    pub(crate) fn host_profile(&self, session: &Session) -> Arc<crate::hosts::HostProfile> {
        session.host.lock().as_ref().map_or_else(|| self.hosts().default_profile(), |(_, p)| p.clone())
    }

    /// The apps feature when it is on at all (the extension is then declared to every client).
    pub(crate) fn apps(&self) -> Option<&Arc<crate::apps::Apps>> {
        self.parts.apps.as_ref().filter(|_| self.local_tools().readers().is_some())
    }

    /// The apps feature for `session`: on, and its client declared the extension.
    pub(crate) fn apps_for(&self, session: &Session) -> Option<&Arc<crate::apps::Apps>> {
        self.apps().filter(|_| crate::apps::supports_apps(&session.client_capabilities.lock()))
    }

    /// The gateway's own tools, as far as they are enabled.
    pub(crate) fn local_tools(&self) -> crate::local_tools::LocalTools<'_> {
        crate::local_tools::LocalTools {
            links: self.parts.links.as_ref().map(stowage_http::Links::for_people),
            store: self.parts.artifacts.as_ref(),
        }
    }

    /// The signed-link service for tools, when links are on.
    pub fn link_service(&self) -> Option<&stowage_http::LinkService> {
        self.parts.links.as_ref().map(stowage_http::Links::for_tools)
    }

    /// The aggregated tools, prompts and resources as last built from every upstream's lists;
    /// a snapshot, rebuilt (not changed in place) when an upstream's lists change.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.lists.catalog.read().clone()
    }

    /// The event bus: tool calls, offloads, clamps, store failures, upstreams up and down.
    pub fn events(&self) -> &EventBus {
        &self.parts.events
    }

    /// Upstreams that are not connected, with why: what `/readyz` reports.
    pub fn unready_upstreams(&self) -> Vec<(String, String)> {
        self.upstreams
            .iter()
            .filter_map(|u| match u.health() {
                crate::upstream::Health::Up => None,
                crate::upstream::Health::Starting => Some((u.name().to_owned(), "still starting".to_owned())),
                crate::upstream::Health::Down { reason } => Some((u.name().to_owned(), reason)),
            })
            .collect()
    }

    /// Whether [`Gateway::shutdown`] was called: what happens to upstreams from then on is
    /// the stop, not a failure to report.
    pub fn is_shutting_down(&self) -> bool {
        self.life.shutdown.is_cancelled()
    }

    /// Whether any client has been answered its handshake (a 2025 session that initialized,
    /// or an open 2026-07-28 listen stream): one that may hold a list without some upstream.
    fn has_clients(&self) -> bool {
        self.clients.sessions.live().iter().any(|s| s.protocol.lock().is_some()) || !self.clients.listeners.lock().is_empty()
    }

    /// Stops supervisors and kills every upstream.
    pub fn shutdown(&self) {
        self.life.shutdown.cancel();
        for u in &self.upstreams {
            u.close();
        }
    }

    /// A new session for `caller`; `notify` is its general stream for messages not tied to a
    /// request.
    pub fn open_session(&self, kind: SessionKind, caller: Caller, notify: Option<Outbox>) -> Arc<Session> {
        let s = Arc::new(Session::new(kind, caller, notify));
        self.clients.sessions.add(&s);
        s
    }

    /// A new in-process session whose answers are shaped under the host profile called
    /// `profile` (e.g. [`crate::hosts::PLANNER_PROFILE`]), whatever `[hosts] adapt` says; the
    /// default profile when there is none of that name.
    ///
    /// The sessions one owner opens under one profile are one host to the upstreams: they
    /// share their upstream sessions (one per `per_client` server, declaring what they
    /// declare), so the planner's next run, in a new conversation or not, finds the servers it
    /// used already started. Those sessions close when the last of the owner's sessions under
    /// the profile ends, or when idle past `gateway.upstream_session_idle_secs`.
    pub fn open_session_as(&self, caller: Caller, profile: &str) -> Arc<Session> {
        let s = Arc::new(Session::new(SessionKind::InProcess, caller, None));
        s.set_upstream_group(profile);
        self.clients.sessions.add(&s);
        let p = self.hosts().by_name(profile).unwrap_or_else(|| self.hosts().default_profile());
        *s.host.lock() = Some((format!("stowage-{profile}"), p));
        s
    }

    /// Ends `session`: what waits for its client fails at once, and its own upstream sessions
    /// are closed (a session that shares them with others of its owner: when it was the last).
    pub fn close_session(&self, session: &Session) {
        session.close();
        // Its subscriptions end with it: an upstream subscription nobody else wants is dropped.
        let uris: Vec<String> = session.subscriptions.lock().drain().collect();
        for uri in uris {
            if !self.uri_wanted(&uri)
                && let Some(u) = self.catalog().resource_upstream(&uri, self.upstreams.len())
            {
                self.drop_upstream_subscription(u, &uri);
            }
        }
        if session.is_stateless() {
            return;
        }
        let key = session.upstream_key();
        if session.shares_upstream_sessions() && self.clients.sessions.live().iter().any(|s| s.upstream_key() == key) {
            return;
        }
        for u in &self.upstreams {
            u.close_client(&key);
        }
    }

    /// Makes calls to `tool` panic, to test that one panic costs one request and nothing else.
    /// Only with the `test-hooks` feature, which tests turn on and shipped builds never do.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn inject_panic(&self, tool: Option<&str>) {
        *self.life.fault.lock() = tool.map(str::to_owned);
    }

    /// Sends one request (`method` with `params`) as `session`'s, in process, exactly as a
    /// client's would be handled: its result, or the JSON-RPC error's code and message. For
    /// in-process users that list and read (the playground); tool calls have
    /// [`Gateway::call_tool`], with its report.
    pub async fn send_request(self: &Arc<Self>, session: &Arc<Session>, method: &str, params: Value) -> Result<Value, (i64, String)> {
        // Nobody listens for the request's own notifications.
        let outbox = Outbox::with_capacity(1).0;
        let msg = Message::request(Value::from(1), method, Some(&params));
        let Some(reply) = self.handle(session, msg, &outbox).await else {
            return Err((code::INTERNAL_ERROR, format!("{method} was cancelled")));
        };
        if let Some(e) = &reply.error {
            let e: Value = serde_json::from_str(e.get()).unwrap_or(Value::Null);
            let c = e.get("code").and_then(Value::as_i64).unwrap_or(code::INTERNAL_ERROR);
            return Err((c, e.get("message").and_then(Value::as_str).unwrap_or("no message").to_owned()));
        }
        Ok(reply.result.as_ref().and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or(Value::Null))
    }

    /// Handles one message from a client. Returns the response to send, if any.
    pub async fn handle(self: &Arc<Self>, session: &Arc<Session>, msg: Message, outbox: &Outbox) -> Option<Message> {
        match msg.kind() {
            Kind::Response => {
                session.resolve(msg);
                None
            }
            Kind::Notification => {
                self.notification(session, msg);
                None
            }
            Kind::Request => {
                let id = msg.id.clone().expect("a request has an id");
                let method = msg.method.clone().unwrap_or_default();
                let cancel = session.begin(&id);
                let work = std::panic::AssertUnwindSafe(self.request(session, msg, outbox)).catch_unwind();
                let out = tokio::select! {
                    r = work => Some(r),
                    _ = cancel.cancelled() => None,
                };
                session.end(&id);
                match out? {
                    Ok(Ok(mut m)) => {
                        m.id = Some(id);
                        Some(m)
                    }
                    Ok(Err(e)) => Some(e.to_message(id)),
                    Err(panic) => {
                        let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
                        tracing::error!(target: "stowage::gateway", session = %session.id, %method, "panic while handling a request: {}", what.unwrap_or_default());
                        metrics::counter!("stowage_panics_total").increment(1);
                        Some(GatewayError::Panicked { method }.to_message(id))
                    }
                }
            }
            Kind::Invalid => Some(Message::error(
                msg.id.unwrap_or(Value::Null),
                code::INVALID_REQUEST,
                "not a json-rpc 2.0 request, notification or response",
            )),
        }
    }

    fn notification(&self, session: &Arc<Session>, msg: Message) {
        match msg.method.as_deref().unwrap_or("") {
            "notifications/cancelled" => {
                if let Some(id) = msg.params_value().get("requestId") {
                    session.cancel(id);
                }
            }
            "notifications/roots/list_changed" => self.roots_changed(session, &msg),
            "notifications/initialized" => self.client_initialized(session),
            _ => {}
        }
    }

    /// A client's request: handshake and lists are answered here, the rest is forwarded.
    async fn request(self: &Arc<Self>, session: &Arc<Session>, msg: Message, outbox: &Outbox) -> Result<Message, GatewayError> {
        let method = msg.method.clone().unwrap_or_default();
        let modern = handshake::is_modern(session, &msg);
        if modern && session.is_stateless() {
            handshake::adopt_envelope(session, &msg);
        }
        if modern && msg.params.as_ref().is_some_and(|p| p.get().contains("clientInfo")) {
            self.note_client(session, msg.params_value().pointer("/_meta/io.modelcontextprotocol~1clientInfo"));
        }
        let interactive = modern && matches!(method.as_str(), "tools/call" | "prompts/get" | "resources/read");
        let mut reply =
            if interactive { self.interactive(session, msg, outbox).await? } else { self.dispatch(session, msg, outbox).await? };
        if modern {
            handshake::stamp_modern_result(&method, &mut reply);
        }
        Ok(reply)
    }

    async fn dispatch(self: &Arc<Self>, session: &Arc<Session>, msg: Message, outbox: &Outbox) -> Result<Message, GatewayError> {
        let method = msg.method.clone().unwrap_or_default();
        let params = msg.params_value();
        let id = msg.id.clone().unwrap_or(Value::Null);
        let ok = |v: Value| Ok(Message::response(Value::Null, &v));
        // Capabilities and lists come from the upstreams: a request that arrives while one is
        // on its first attempt waits for it, within what the client's host waits for a server
        // (its profile, known from the handshake on); a down one holds nobody up.
        if method != "ping" {
            if let Some(caps) = handshake::declared_capabilities(&method, &params) {
                self.offer_control_capabilities(crate::session::upstream_capabilities(&caps));
                self.note_client(session, handshake::declared_client_info(&method, &params));
            }
            self.wait_startup_within(self.host_profile(session).startup_wait()).await;
        }
        match method.as_str() {
            "initialize" => ok(self.initialize(session, &params)),
            "server/discover" => self.discover(session, &params, id),
            "ping" => ok(serde_json::json!({})),
            "subscriptions/listen" => self.listen(session, &id, &params, outbox).await,
            "tools/list" => {
                refuse_cursor(&method, &params)?;
                ok(serde_json::json!({"tools": self.tools_for(session).await}))
            }
            "prompts/list" => {
                refuse_cursor(&method, &params)?;
                self.list_own(session).await;
                ok(self.list_prompts(session))
            }
            "resources/list" => self.list_resources(session, "resources", &method, &params, outbox).await,
            "resources/templates/list" => self.list_resources(session, "resourceTemplates", &method, &params, outbox).await,
            "tools/call" => self.call_tool_message(session, params, outbox).await,
            "prompts/get" => {
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                let p = self.catalog_for(session).prompt(name).cloned().or_else(|| self.unlisted(name));
                let p = p.ok_or_else(|| GatewayError::UnknownPrompt(name.to_owned()))?;
                let mut params = params;
                params["name"] = Value::String(p.original);
                let mut reply = self.forward(session, p.upstream, &method, params, outbox).await?;
                self.shape_read(session, self.upstreams[p.upstream].name(), crate::shape::read::ReadKind::Prompt, &mut reply).await?;
                Ok(reply)
            }
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                self.resource_request(session, &method, params, outbox).await
            }
            "completion/complete" => self.complete(session, params, outbox).await,
            "logging/setLevel" => {
                for (i, u) in self.upstreams.iter().enumerate() {
                    if u.capability("logging") {
                        let _ = self.forward(session, i, &method, params.clone(), outbox).await;
                    }
                }
                ok(serde_json::json!({}))
            }
            "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/list" => self.task_request(session, &method, params, outbox).await,
            _ if self.upstreams.len() == 1 => self.forward(session, 0, &method, params, outbox).await,
            _ => Err(GatewayError::MethodNotFound(method)),
        }
    }

    /// `completion/complete`: routed by the prompt or resource it completes.
    async fn complete(self: &Arc<Self>, session: &Arc<Session>, mut params: Value, outbox: &Outbox) -> Result<Message, GatewayError> {
        let r = params.get("ref").cloned().unwrap_or(Value::Null);
        let target = match r.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                self.catalog_for(session).prompt(name).map(|p| (p.upstream, Some(p.original.clone())))
            }
            Some("ref/resource") => {
                let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
                self.catalog().resource_upstream(uri, self.upstreams.len()).map(|u| (u, None))
            }
            _ => None,
        };
        let (u, original) = target.ok_or_else(|| GatewayError::InvalidParams("completion/complete: unknown ref".into()))?;
        if let Some(o) = original {
            params["ref"]["name"] = Value::String(o);
        }
        self.forward(session, u, "completion/complete", params, outbox).await
    }
}

/// `tools/list` and `prompts/list` are answered whole, every upstream's pages gathered, so the
/// gateway never hands out a cursor for them: a client's cursor is refused (invalid params,
/// as the specification says of an invalid cursor), never silently ignored.
fn refuse_cursor(method: &str, params: &Value) -> Result<(), GatewayError> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(()),
        Some(c) => Err(GatewayError::InvalidParams(format!(
            "{method}: unknown cursor {c}: this server answers {method} in one page and gave no cursor; send the request without one"
        ))),
    }
}
