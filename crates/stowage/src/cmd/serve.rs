//! `stowage serve`: the MCP gateway in front of the user's MCP servers.
//!
//! Wiring only: it runs the [`crate::plan::Plan`] (the upstreams merged from
//! `[gateway.servers]`, `--mcp-config` and a trailing `-- CMD ARGS…`, or the bundled demo
//! server when there are none; entries that cannot be served are named and left out), builds
//! the gateway on the configured store ([`crate::wiring::gateway`], as `agent` does), and hands
//! over to [`stowage_mcp::run::run`]. Over
//! HTTP, `resource_link`s are signed download links served on the same listener
//! (`/artifacts/{id}?token=…`). Over stdio the same routes get a loopback listener of their
//! own (`links.public_url`'s port, or a free one when that is taken), so hosts that spawn
//! `stowage serve --stdio` still hand their users links; `--no-links` turns that off and
//! leaves `artifact://` URIs (fetch with `stowage artifacts get`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use stowage_links::LinkSigner;
use stowage_mcp::run::RunOptions;
use stowage_store::ArtifactStore;

use crate::plan::{LinksPlan, Plan};
use crate::wiring::StoreLocation;

// The arguments are the plan's input: defined beside it, so `plan` needs nothing of `cmd`.
pub(crate) use crate::plan::ServeArgs;

/// What `serve` needs besides its plan.
pub(crate) struct ServeContext<'a> {
    /// `[transform]`, `[agent]` (with a model, `POST /agent/runs` runs the planner), `[apps]`
    /// (the MCP Apps viewer and uploader), `[links]` and `[[hosts]]`.
    pub config: &'a crate::config::Config,
    pub store: Arc<dyn ArtifactStore>,
    /// The link-signing keys, read once.
    pub keys: &'a crate::wiring::Keys,
    /// Where the store lives (the default link-signing key is kept there too).
    pub store_location: &'a StoreLocation,
    pub store_backend: crate::config::Backend,
    /// How often the store is garbage-collected while serving (`retention.gc_interval`).
    pub gc_interval: std::time::Duration,
    /// Where `stowage.toml` came from, for the banner.
    pub config_source: &'a crate::config::ConfigSource,
}

pub(crate) async fn run(ctx: ServeContext<'_>, plan: Plan) -> anyhow::Result<()> {
    let store_dir = ctx.store_location.dir.clone();
    // Walking a big store takes a while; serving does not wait for it.
    tokio::spawn(warn_if_store_is_loose(store_dir.clone()));
    tokio::spawn(collect_garbage(ctx.store.clone(), ctx.gc_interval));
    announce(&plan);
    // A configuration that cannot work fails here; a model that does not answer fails only the
    // agent's routes (503 with its error until it does), never the gateway.
    let agent_model = crate::cmd::agent::configured_model(&ctx.config.agent)?;
    let agent_check = match &agent_model {
        Some(m) => {
            let checked = m.check().await;
            if let Err(e) = &checked {
                eprintln!("stowage: warning: the agent's model is not available, /agent/runs answers 503 until it is: {e}");
            }
            Some(checked)
        }
        None => None,
    };
    let LinkParts { links, links_listener, link_server, mut extra_routes, signed, readiness } = link_parts(&ctx, &plan).await?;
    let own = signed.as_ref().map(|l| l.for_tools().clone());
    let (http_routes, on_gateway, playground) = http_parts(&ctx, &plan, &links, own, agent_model, agent_check);
    if let Some(routes) = http_routes {
        extra_routes = Some(match extra_routes {
            Some(r) => r.merge(routes),
            None => routes,
        });
    }
    // MCP Apps: the viewer (built by the playground crate, which owns the page components it
    // shares) for hosts that render it; it reads and writes the store, so not with noop.
    let apps = (ctx.store_backend != crate::config::Backend::Noop).then(|| {
        let https_origin =
            (plan.links != LinksPlan::Off).then(|| origin_of(&links.public_url)).flatten().filter(|o| o.starts_with("https://"));
        stowage_mcp::apps::Apps::new(ctx.config.apps.clone(), stowage_playground::viewer(https_origin.as_deref()))
    });
    let parts = crate::wiring::GatewayParts {
        gateway: plan.gateway,
        upstreams: plan.upstreams,
        store: Some(ctx.store.clone()),
        links: signed,
        hosts: Some(plan.hosts.clone()),
        // An fs store's directory is this machine's and this user's; a shared backend's local
        // directory is not where a fleet keeps state.
        state_dir: (ctx.store_backend == crate::config::Backend::Fs).then(|| store_dir.clone()),
        apps,
    };
    let opts = RunOptions {
        gateway: crate::wiring::gateway(ctx.config, parts),
        mode: plan.mode,
        extra_routes,
        links_listener,
        readiness,
        store_label: ctx.store_location.describe(ctx.store_backend),
        config_label: ctx.config_source.to_string(),
        auth: plan.auth,
        links_banner: link_server.as_ref().map(|(_, l)| {
            format!(
                "  download links: {}/artifacts/…  (served for this store by its link server, pid {}, after this session too: stowage links status)\n",
                l.state.url(),
                l.state.pid
            )
        }),
        skipped: plan.skipped.iter().map(|s| s.to_string()).collect(),
        on_gateway,
        playground,
    };
    stowage_mcp::run::run(opts).await?;
    Ok(())
}

/// What serving says on stderr before anything starts: servers left out, the warnings
/// `check-config` gives for these entries, and a listener open to anyone.
fn announce(plan: &Plan) {
    // Said at once (the banner waits for the upstreams): a missing server is the first thing
    // a user will wonder about.
    for s in &plan.skipped {
        // Not through tracing: a quiet STOWAGE_LOG must not hide it.
        eprintln!("stowage: warning: not serving {s}");
    }
    // The same lines `check-config` prints for these entries.
    for w in &plan.warnings {
        eprintln!("stowage: warning: {w}");
    }
    if plan.unauthenticated_exposure {
        let listen = &plan.gateway.listen;
        eprintln!(
            "WARNING: stowage is listening on {listen} WITHOUT AUTHENTICATION: anyone who can reach it can call your tools and read your artifacts"
        );
        tracing::warn!(%listen, "serving without authentication on a non-loopback address");
    }
}

/// Links: where people's links are served (the store's link server over stdio, else this
/// listener), the signers (one key ring), and the routes that serve downloads and uploads.
struct LinkParts {
    links: stowage_links::LinksConfig,
    links_listener: Option<tokio::net::TcpListener>,
    link_server: Option<(crate::link_server::Want, crate::link_server::Leased)>,
    extra_routes: Option<axum::Router>,
    /// Every link the gateway mints, for tools and for people; `None` with `--no-links`.
    signed: Option<stowage_http::Links>,
    readiness: Option<Arc<std::sync::OnceLock<stowage_http::ReadinessCheck>>>,
}

async fn link_parts(ctx: &ServeContext<'_>, plan: &Plan) -> anyhow::Result<LinkParts> {
    let mut links = plan.links_config.clone();
    let mut links_listener = None;
    // Over stdio, the links people get are served by the store's link server, which outlives
    // this process (links minted for tools during a call, and upload links, stay here).
    let mut link_server = None;
    if let LinksPlan::Loopback { wanted } = &plan.links {
        link_server = ensure_link_server(ctx, &links, wanted).await;
        let (listener, url) = match &link_server {
            Some(_) => bind_loopback("127.0.0.1:0").await?,
            None => bind_links_listener(wanted).await?,
        };
        links.public_url = url;
        links_listener = Some(listener);
    }
    // The link server is watched for as long as this gateway runs: a link for people is
    // minted only for a server that is alive (a new one is started when it died), or for
    // this process's own listener when none can be.
    let supervisor = link_server.as_ref().map(|(want, leased)| {
        let s = crate::link_server::Supervisor::new(want.clone(), leased, links.public_url.clone());
        s.clone().keep_leased();
        s
    });
    let (mut extra_routes, mut signed, mut readiness) = (None, None, None);
    if plan.links != LinksPlan::Off {
        // The signer for tools and the one for people share the one key ring.
        let ring = ctx.keys.ring()?;
        let signer = Arc::new(LinkSigner::new(ring.clone(), &links));
        // One state: the link service opens the upload slots the routes accept, and /readyz
        // learns the gateway's upstreams once it runs.
        let state = stowage_http::HttpState::new(ctx.store.clone(), signer);
        let mut minted = stowage_http::Links::new(state.link_service());
        if let Some(sup) = &supervisor {
            let sup = sup.clone();
            let people = Arc::new(LinkSigner::with_base(ring, links.ttl, Arc::new(move || sup.base_url())));
            minted = minted.with_people(stowage_http::LinkService::new(ctx.store.clone(), people));
        }
        signed = Some(minted);
        readiness = Some(state.readiness.clone());
        extra_routes = Some(stowage_http::routes(state));
    }
    Ok(LinkParts { links, links_listener, link_server, extra_routes, signed, readiness })
}

/// Over HTTP, the routes beside `/mcp`: `POST /agent/runs` (the planner is set once the
/// gateway exists) and the playground; with what to do once the gateway runs.
fn http_parts(
    ctx: &ServeContext<'_>,
    plan: &Plan,
    links: &stowage_links::LinksConfig,
    link_service: Option<stowage_http::LinkService>,
    agent_model: Option<Arc<dyn stowage_agent::model::Model>>,
    agent_check: Option<Result<(), stowage_agent::model::ModelError>>,
) -> (Option<axum::Router>, Option<stowage_mcp::run::OnGateway>, bool) {
    let stowage_mcp::run::Mode::Http { listen } = &plan.mode else {
        return (None, None, false);
    };
    // POST /agent/runs beside /mcp, behind the same authentication; the planner is set once
    // the gateway exists.
    let gc = &plan.gateway;
    let guard = Arc::new(stowage_http::BrowserGuard::new(listen, &gc.allowed_hosts, &gc.allowed_origins));
    let slot = stowage_agent::http::PlannerSlot::default();
    let mut routes = stowage_agent::http::router(slot.clone(), plan.auth.clone(), guard.clone());
    let agent_name = agent_model.as_ref().map(|_| ctx.config.agent.model.clone());
    let gateway_slot = stowage_playground::GatewaySlot::default();
    let playground = plan.playground;
    if playground {
        routes = routes.merge(stowage_playground::router(stowage_playground::PlaygroundOptions {
            gateway: gateway_slot.clone(),
            store: (ctx.store_backend != crate::config::Backend::Noop).then(|| ctx.store.clone()),
            links: link_service.clone(),
            agent_model: agent_name,
            store_label: ctx.store_location.describe(ctx.store_backend),
            auth: plan.auth.clone(),
            guard,
            links_origin: (plan.links != LinksPlan::Off).then(|| origin_of(&links.public_url)).flatten(),
        }));
    }
    let (config, store) = (ctx.config.agent.clone(), ctx.store.clone());
    let on_gateway: stowage_mcp::run::OnGateway = Box::new(move |gw: &Arc<stowage_mcp::Gateway>| {
        let _ = gateway_slot.set(gw.clone());
        if let Some(model) = agent_model {
            let planner = stowage_agent::Planner::new(gw.clone(), model, config, Some(store));
            if let Some(checked) = &agent_check {
                planner.note_model_check(checked);
            }
            let _ = slot.set(Arc::new(planner));
        }
    });
    (Some(routes), Some(on_gateway), playground)
}

/// `scheme://host[:port]` of a URL, as a Content-Security-Policy source.
fn origin_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let origin = u.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

/// An embedded store made by an older Stowage (or copied in with a loose umask) may be readable
/// by other local users; serving goes on, since tightening someone's directory behind their back
/// is not ours to do, but the operator is told which entries and how to fix them.
async fn warn_if_store_is_loose(dir: PathBuf) {
    if !dir.is_dir() {
        return;
    }
    match tokio::task::spawn_blocking(move || stowage_store::FsStore::check_permissions(&dir)).await {
        Ok(Ok(report)) if !report.is_private() => tracing::warn!(target: "stowage::store", "{report}"),
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(target: "stowage::store", "cannot check the store's permissions: {e}"),
        Err(e) => tracing::warn!(target: "stowage::store", "the store permission check failed: {e}"),
    }
}

/// Runs the store's gc every `every` while serving: puts purge only their own owner's expired
/// artifacts, so without this another owner's expired ones (and crash leftovers) would stay.
/// A failed run is logged and tried again next time; it never stops the gateway.
async fn collect_garbage(store: Arc<dyn ArtifactStore>, every: std::time::Duration) {
    let mut tick = tokio::time::interval(every.max(std::time::Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate: the store was just opened
    loop {
        tick.tick().await;
        match store.gc().await {
            // Another instance sharing the store (s3 backend) is sweeping it right now.
            Ok(r) if r.skipped => {
                metrics::counter!("stowage_gc_runs_total", "outcome" => "skipped").increment(1);
                tracing::debug!(target: "stowage::store", "gc skipped: another instance is sweeping the shared store");
            }
            Ok(r) => {
                metrics::counter!("stowage_gc_runs_total", "outcome" => "ok").increment(1);
                tracing::info!(target: "stowage::store", expired = r.expired_records, orphans = r.orphan_blobs, dangling = r.dangling_records, dangling_suspected = r.dangling_suspected, dangling_held = r.dangling_held, temp_files = r.temp_files, temp_files_removed = r.temp_files_removed, temp_bytes = r.temp_bytes, bytes_freed = r.bytes_freed, "gc");
            }
            Err(e) => {
                metrics::counter!("stowage_gc_runs_total", "outcome" => "error").increment(1);
                tracing::warn!(target: "stowage::store", "gc failed, will retry: {e}");
            }
        }
    }
}

/// Makes sure the store's link server runs and takes a lease on it (see
/// [`crate::link_server`]). `None` (said on stderr) when the store lives in this process
/// only, or the server cannot be started or reused: links are then served by this process.
async fn ensure_link_server(
    ctx: &ServeContext<'_>,
    links: &stowage_links::LinksConfig,
    wanted: &str,
) -> Option<(crate::link_server::Want, crate::link_server::Leased)> {
    use crate::config::Backend;
    if matches!(ctx.store_backend, Backend::Memory | Backend::Noop) {
        // Its artifacts live in this process: its links cannot outlive it either.
        return None;
    }
    let port = loopback_port(wanted).unwrap_or(8787);
    let store_dir = &ctx.store_location.dir;
    let attempt = async {
        let ring = ctx.keys.ring()?;
        let want = crate::link_server::Want {
            store_dir: store_dir.clone(),
            config_file: ctx.config_source.path().map(std::path::Path::to_path_buf),
            port,
            hold: crate::link_server::hold_for(links.ttl),
            probe: crate::link_server::Probe::new(&ring),
        };
        crate::link_server::ensure(&want).await.map(|leased| (want, leased))
    };
    match attempt.await {
        Ok((want, leased)) => {
            if leased.state.port != port {
                eprintln!(
                    "stowage: 127.0.0.1:{port} is taken by another program; this store's download links are served on {} instead (a port the system picked, another each time the link server starts)",
                    leased.state.url()
                );
            }
            tracing::debug!(target: "stowage::links", pid = leased.state.pid, port = leased.state.port, started = leased.started, until = leased.until, "link server");
            Some((want, leased))
        }
        Err(e) => {
            eprintln!("stowage: warning: download links are served by this process only and stop working when it exits: {e:#}");
            None
        }
    }
}

/// The port of a loopback `http://` URL.
fn loopback_port(url: &str) -> Option<u16> {
    let u = url::Url::parse(url).ok()?;
    let loopback = match u.host()? {
        url::Host::Domain(d) => d == "localhost",
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    };
    (u.scheme() == "http" && loopback).then(|| u.port_or_known_default()).flatten()
}

async fn bind_loopback(addr: &str) -> anyhow::Result<(tokio::net::TcpListener, String)> {
    let listener = tokio::net::TcpListener::bind(addr).await.context("cannot bind a loopback port for download links")?;
    let addr = listener.local_addr()?;
    Ok((listener, format!("http://{addr}")))
}

/// The loopback listener for download links over stdio: `public_url`'s port when it is a
/// loopback URL and the port is free, else a free port. Returns it with the base URL links
/// must then use. Said on stderr, since stdout belongs to the MCP client.
async fn bind_links_listener(public_url: &str) -> anyhow::Result<(tokio::net::TcpListener, String)> {
    let wanted = public_url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .filter(|hostport| hostport.starts_with("127.0.0.1:") || hostport.starts_with("localhost:"))
        .map(|hostport| format!("127.0.0.1:{}", hostport.rsplit_once(':').map_or("0", |(_, p)| p)));
    let listener = match wanted {
        Some(addr) => match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("stowage: {addr} is taken ({e}); download links use a free loopback port instead");
                tokio::net::TcpListener::bind("127.0.0.1:0").await.context("cannot bind a loopback port for download links")?
            }
        },
        None => tokio::net::TcpListener::bind("127.0.0.1:0").await.context("cannot bind a loopback port for download links")?,
    };
    let addr = listener.local_addr()?;
    Ok((listener, format!("http://{addr}")))
}
