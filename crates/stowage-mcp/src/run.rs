//! Running the gateway as a program: start the upstreams, print the banner, serve stdio or
//! HTTP until the client leaves or a signal arrives, then kill every upstream.
//!
//! Over stdio, the download routes (signed links, uploads) get a loopback listener of their
//! own when the caller binds one ([`RunOptions::links_listener`]), so hosts that run
//! `stowage serve --stdio` still give their users links they can open.
//!
//! `stowage serve` is a thin wrapper around [`run`]; it lives here so that the binary needs no
//! HTTP or process plumbing of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::SessionMode;
use crate::gateway::{Gateway, GatewayBuilder};

/// How clients reach the gateway.
#[derive(Debug, Clone)]
pub enum Mode {
    /// One client on the process's stdin/stdout (the gateway is a host's spawned server).
    Stdio,
    /// Streamable HTTP at `/mcp`, for any number of clients.
    Http {
        /// The address to bind, `host:port` (`127.0.0.1:0` picks a free port).
        listen: String,
    },
}

/// [`RunOptions::on_gateway`]: a one-time hook given the started gateway.
pub type OnGateway = Box<dyn FnOnce(&Arc<Gateway>) + Send>;

/// Everything [`run`] needs.
pub struct RunOptions {
    /// The gateway, with every collaborator given (the binary's one wiring function builds
    /// it); [`run`] adds what the transport decides: the default session mode and what
    /// control connections declare.
    pub gateway: GatewayBuilder,
    /// Which transport clients use.
    pub mode: Mode,
    /// More routes on the HTTP listener (artifact downloads, health); over stdio, served on
    /// `links_listener` when there is one.
    pub extra_routes: Option<axum::Router>,
    /// Stdio mode: a bound loopback listener for `extra_routes`, so links work over stdio.
    pub links_listener: Option<tokio::net::TcpListener>,
    /// Where `/readyz` (in `extra_routes`) learns which upstreams are down.
    pub readiness: Option<Arc<std::sync::OnceLock<stowage_http::ReadinessCheck>>>,
    /// The store for the banner: which, where, and how to list it.
    pub store_label: String,
    /// Where the configuration came from, for the banner (empty: not said).
    pub config_label: String,
    /// Bearer authentication on `/mcp` (HTTP only); `None` leaves it open.
    pub auth: Option<Arc<stowage_http::Authenticator>>,
    /// Stdio: the banner's line about where download links are served, when not on
    /// `links_listener` (the store's link server).
    pub links_banner: Option<String>,
    /// Server entries that are configured but not served, each as one line saying why
    /// ([`crate::config::SkippedServer`]); the banner names them.
    pub skipped: Vec<String>,
    /// Called once with the started gateway, before anything is served: how in-process users
    /// built before it (the agent planner behind `/agent/runs`) get hold of it.
    pub on_gateway: Option<OnGateway>,
    /// The web playground is served at `/` (HTTP): the banner says where.
    pub playground: bool,
}

/// Why the gateway could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The HTTP listen address could not be bound (taken, not local, no permission).
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address as configured.
        addr: String,
        /// What the operating system said.
        error: std::io::Error,
    },
    /// The HTTP server stopped with an I/O error after it started.
    #[error("http server failed: {0}")]
    Serve(std::io::Error),
    /// Reading stdin or writing stdout failed (stdio mode).
    #[error("stdio failed: {0}")]
    Stdio(std::io::Error),
}

/// Runs until stdin closes (stdio) or SIGINT/SIGTERM (both), then shuts every upstream down.
pub async fn run(opts: RunOptions) -> Result<(), RunError> {
    crate::metrics::install();
    // Bind first: a taken port must fail before any upstream process is started.
    let listener = match &opts.mode {
        Mode::Http { listen } => {
            Some(tokio::net::TcpListener::bind(listen).await.map_err(|error| RunError::Bind { addr: listen.clone(), error })?)
        }
        Mode::Stdio => None,
    };
    // Every client gets its own upstream sessions, as if it had connected directly: its own
    // capabilities, roots, log level, subscriptions and catalog. A stdio gateway has exactly
    // one client: its shared sessions declare that client's capabilities, so they are its own
    // without a second process per upstream.
    let (default_session_mode, control_capabilities) = match &opts.mode {
        Mode::Http { .. } => (SessionMode::PerClient, crate::gateway::ControlCapabilities::Any),
        Mode::Stdio => (SessionMode::Shared, crate::gateway::ControlCapabilities::FirstClient),
    };
    let gw = opts.gateway.session_mode(default_session_mode).control_capabilities(control_capabilities).start();
    if let Some(f) = opts.on_gateway {
        f(&gw);
    }
    if let Some(r) = &opts.readiness {
        let weak = Arc::downgrade(&gw);
        let check: stowage_http::ReadinessCheck = Arc::new(move || {
            weak.upgrade()
                .map(|g| g.unready_upstreams().into_iter().map(|(n, why)| (format!("upstream {n}"), why)).collect())
                .unwrap_or_default()
        });
        let _ = r.set(check);
    }
    let labels = Labels { store: opts.store_label.clone(), config: opts.config_label.clone() };
    let result = match &opts.mode {
        Mode::Stdio => {
            let links_addr = match (opts.links_listener, opts.extra_routes) {
                (Some(listener), Some(routes)) => {
                    let addr = listener.local_addr().ok();
                    tokio::spawn(stowage_http::listener::serve(listener, routes, gw.config.http_timeouts(), std::future::pending()));
                    addr
                }
                _ => None,
            };
            // The banner goes to stderr once start-up has settled, before the host's first
            // answer: the upstreams connect at the host's `initialize` (declaring its
            // capabilities), which waits no longer than the start-up grace for a slow upstream
            // and not at all for a dead one (one that comes up later is announced with
            // list_changed). Without a host (someone at a terminal) it comes when the upstreams
            // stop waiting for one. The signal handler is in place from the start, so a stop
            // during start-up is clean too.
            let (mode, labels, skipped, links_banner) =
                (opts.mode.clone(), labels.clone(), opts.skipped.clone(), opts.links_banner.clone());
            gw.on_startup(move |gw| {
                let mut text = banner(gw, &mode, links_addr, &labels, &skipped);
                if let Some(line) = &links_banner {
                    text = text
                        .lines()
                        .map(|l| if l.starts_with("  download links:") { line.trim_end().to_owned() } else { l.to_owned() })
                        .collect::<Vec<_>>()
                        .join("\n")
                        + "\n";
                }
                eprint!("{text}");
            });
            let waiting = gw.clone();
            tokio::spawn(async move { waiting.wait_startup().await });
            let serve = crate::downstream::stdio::serve(gw.clone(), tokio::io::stdin(), tokio::io::stdout());
            tokio::select! {
                r = serve => r.map_err(RunError::Stdio),
                _ = shutdown_signal() => Ok(()),
            }
        }
        Mode::Http { .. } => {
            let listener = listener.expect("bound above for http");
            let addr = listener.local_addr().map_err(RunError::Serve)?;
            let mut app = crate::downstream::http::router_with_auth(gw.clone(), &addr.to_string(), opts.auth);
            if let Some(extra) = opts.extra_routes {
                app = app.merge(extra);
            }
            // Served at once (health, readiness and clients that retry need not wait for a slow
            // or dead upstream).
            spawn_banner(gw.clone(), opts.mode.clone(), Some(addr), labels.clone(), opts.skipped.clone(), opts.playground);
            stowage_http::listener::serve(listener, app, gw.config.http_timeouts(), shutdown_signal()).await.map_err(RunError::Serve)
        }
    };
    gw.shutdown();
    // Give killed children a moment to be reaped before the process exits.
    tokio::time::sleep(Duration::from_millis(50)).await;
    result
}

/// Prints the banner in the background once every upstream is listed or down (or the start-up
/// grace is over), unless the gateway is stopping by then: a banner printed at shutdown would
/// list every upstream as not connected.
fn spawn_banner(gw: Arc<Gateway>, mode: Mode, addr: Option<SocketAddr>, labels: Labels, skipped: Vec<String>, playground: bool) {
    tokio::spawn(async move {
        gw.wait_startup().await;
        if !gw.is_shutting_down() {
            let mut text = banner(&gw, &mode, addr, &labels, &skipped);
            if let (true, Some(addr)) = (playground, addr) {
                text.push_str(&format!("  playground: http://{addr}/  (in a browser; --no-playground turns it off)\n"));
            }
            eprint!("{text}");
        }
    });
}

/// Binds `listen` and serves the gateway's HTTP routes in the background (tests, benches).
pub async fn spawn_http(gw: Arc<Gateway>, listen: &str) -> std::io::Result<SocketAddr> {
    spawn_http_with(gw, listen, None, None).await
}

/// [`spawn_http`] with authentication on `/mcp` and more routes beside it.
pub async fn spawn_http_with(
    gw: Arc<Gateway>,
    listen: &str,
    auth: Option<Arc<stowage_http::Authenticator>>,
    extra: Option<axum::Router>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let timeouts = gw.config.http_timeouts();
    let mut app = crate::downstream::http::router_with_auth(gw, &addr.to_string(), auth);
    if let Some(extra) = extra {
        app = app.merge(extra);
    }
    tokio::spawn(stowage_http::listener::serve(listener, app, timeouts, std::future::pending()));
    Ok(addr)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// What the banner says about where things came from.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    /// The store: which, where, and how to list it.
    pub store: String,
    /// Where the configuration came from (empty: not said).
    pub config: String,
}

/// The start-up banner: what runs, and how to connect a client and try it.
pub fn banner(gw: &Gateway, mode: &Mode, addr: Option<SocketAddr>, labels: &Labels, skipped: &[String]) -> String {
    let catalog = gw.catalog();
    let mut s = String::from("stowage: MCP gateway ready\n");
    for u in &gw.upstreams {
        let tools: Vec<_> = catalog.tools.iter().filter(|t| t.upstream == u.index).collect();
        let mut state = match (u.current().is_some(), tools.as_slice()) {
            (true, _) => format!("{} tools", tools.len()),
            (false, []) => "NOT CONNECTED (retrying)".into(),
            (false, [only]) if only.original.ends_with(crate::gateway::STANDIN_TOOL) => {
                format!("NOT CONNECTED (retrying; listed as {}, which says why)", only.name)
            }
            (false, kept) => format!("NOT CONNECTED (retrying; its {} tools from its last listing are shown, calls say why)", kept.len()),
        };
        if !u.mode.is_shared() {
            state.push_str(", one upstream session per client");
        }
        s.push_str(&format!("  upstream {} — {state}\n", u.spec.describe()));
    }
    // Said where the working upstreams are listed: a missing server is the first thing a
    // user looks for there.
    for why in skipped {
        s.push_str(&format!("  NOT SERVED: {why}\n"));
    }
    for c in catalog.collisions.iter().chain(&catalog.renamed_resources) {
        s.push_str(&format!("  renamed: {c}\n"));
    }
    if !labels.config.is_empty() {
        s.push_str(&format!("  config: {}\n", labels.config));
    }
    s.push_str(&format!("  artifacts: {}\n", labels.store));
    let first_tool = catalog
        .tools
        .iter()
        .find(|t| t.original == "get_report")
        .or(catalog.tools.first())
        .map(|t| t.name.clone())
        .unwrap_or_else(|| "TOOL".into());
    match (mode, addr) {
        (Mode::Http { .. }, Some(addr)) => {
            let url = format!("http://{addr}/mcp");
            s.push_str(&format!("  listening: {url}  (metrics: http://{addr}/metrics)\n"));
            s.push_str("  connect a client:\n");
            s.push_str(&format!("    claude mcp add --transport http stowage {url}\n"));
            s.push_str(&format!("    npx @modelcontextprotocol/inspector --cli {url} --method tools/list\n"));
            s.push_str(&format!(
                "  try it:\n    npx @modelcontextprotocol/inspector --cli {url} --method tools/call --tool-name {first_tool}\n"
            ));
        }
        _ => {
            match addr {
                Some(addr) => {
                    s.push_str(&format!("  download links: http://{addr}/artifacts/…  (loopback only; --no-links turns them off)\n"))
                }
                None => s.push_str("  download links: off (fetch artifacts with: stowage artifacts get ID)\n"),
            }
            s.push_str("  serving one client on stdin/stdout; configure your host to run:\n");
            s.push_str("    stowage serve --stdio [--mcp-config FILE | -- CMD ARGS…]\n");
        }
    }
    s
}
