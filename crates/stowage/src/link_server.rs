//! The link server: download links of a stdio gateway that outlive the host's session.
//!
//! A host spawns `stowage serve --stdio` and kills it when its session ends or restarts, but a
//! link the model handed on says "valid 15 minutes", and a person clicks it tomorrow morning
//! in yesterday's chat. So a stdio gateway does not serve the links it mints for people itself:
//! the first one on a store starts a small detached process, `stowage links serve`, that serves
//! the download routes (the same routes, keys and store) on the configured port
//! (`links.public_url`'s, 8787 by default), and every later stdio gateway on that store reuses
//! it. It runs while gateways hold a lease on it (renewed every [`RENEW_EVERY`]) and, after
//! the last one is gone, until every link it could have minted has expired.
//!
//! Rules it keeps:
//! - **One store, one server.** Its state lives in the store's directory (`links/`): a lock
//!   the server holds while it lives (`server.lock`; a lock that can be taken means its state
//!   file is stale), the state file (`server.json`: pid, port, a random id), a lock held while
//!   a gateway checks or starts the server (`start.lock`), and its log (`server.log`). A
//!   gateway reuses a server only when the server on the recorded port answers with the id in
//!   the file (a port taken over by something else, or another store's server, does not) and
//!   accepts a link signed with the gateway's keys (a server started under another
//!   configuration does not).
//! - **Loopback only.** It binds 127.0.0.1; the port is the configured one, else one derived
//!   from the store's directory (the same every time for a store, so its links keep their
//!   address across restarts), else any free port.
//! - **Never left running for nothing.** Its lease ends [`RENEW_EVERY`] × 3 after the last
//!   renewal plus the links' TTL; then it exits and removes its state file.
//!
//! Upload links (blob chaining) and links minted for tools during a call stay with the
//! gateway's own in-process listener: their slots live in that process.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// How often a gateway renews its lease on the link server.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(10);
/// How long a gateway waits for a server it started to say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a gateway waits for another gateway that is starting the server.
const LOCK_TIMEOUT: Duration = Duration::from_secs(20);
/// The control routes' prefix (never an artifact or upload path).
const CONTROL: &str = "/_stowage/link-server";
/// The log is started afresh past this size.
const MAX_LOG_BYTES: u64 = 1 << 20;

/// The files of a store's link server: `<store>/links/…`.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    pub dir: PathBuf,
}

impl Files {
    pub(crate) fn of(store_dir: &Path) -> Files {
        Files { dir: store_dir.join("links") }
    }
    fn state(&self) -> PathBuf {
        self.dir.join("server.json")
    }
    fn alive_lock(&self) -> PathBuf {
        self.dir.join("server.lock")
    }
    fn start_lock(&self) -> PathBuf {
        self.dir.join("start.lock")
    }
    pub(crate) fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The directory, owner-only like the store's own.
    fn create(&self) -> anyhow::Result<()> {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&self.dir).with_context(|| format!("cannot create {}", self.dir.display()))
    }

    fn open_lock(&self, path: &Path) -> anyhow::Result<std::fs::File> {
        private_file(path).with_context(|| format!("cannot open {}", path.display()))
    }

    /// What the state file says, if there is one that parses.
    pub(crate) fn read_state(&self) -> Option<State> {
        serde_json::from_slice(&std::fs::read(self.state()).ok()?).ok()
    }

    fn write_state(&self, state: &State) -> anyhow::Result<()> {
        let path = self.state();
        let mut tmp = tempfile::Builder::new().prefix(".server-").tempfile_in(&self.dir)?;
        tmp.write_all(&serde_json::to_vec_pretty(state)?)?;
        tmp.persist(&path).map_err(|e| e.error).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }

    /// Removes the state file if it is still `id`'s.
    fn remove_state(&self, id: &str) {
        if self.read_state().is_some_and(|s| s.id == id) {
            let _ = std::fs::remove_file(self.state());
        }
    }

    /// Whether a server holds this store's alive lock right now.
    pub(crate) fn server_alive(&self) -> bool {
        let Ok(file) = std::fs::File::options().read(true).write(true).open(self.alive_lock()) else { return false };
        match file.try_lock() {
            Ok(()) => {
                let _ = file.unlock();
                false
            }
            Err(_) => true,
        }
    }
}

fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::File::options();
    o.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

/// `server.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    /// Random, made at the server's start: what a gateway checks the server on the port by.
    pub id: String,
    pub pid: u32,
    pub port: u16,
    /// Unix seconds.
    pub started_at: u64,
    pub version: String,
}

impl State {
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// The ports a store's link server tries, in order: the configured one, then three derived
/// from the store's directory (below the Linux ephemeral range, so rarely taken by outgoing
/// connections), then any free port (0).
pub(crate) fn candidate_ports(wanted: u16, store_dir: &Path) -> Vec<u16> {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(store_dir.as_os_str().as_encoded_bytes());
    let mut ports = vec![wanted];
    for pair in digest.chunks(2).take(3) {
        let n = u16::from_be_bytes([pair[0], pair[1]]);
        let p = 20_000 + n % 10_000;
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    ports.push(0);
    ports
}

/// A server the gateway holds a lease on.
#[derive(Debug, Clone)]
pub(crate) struct Leased {
    pub state: State,
    /// Whether this gateway started it (else it reused one).
    pub started: bool,
    /// Unix seconds the server will run until at least.
    pub until: u64,
}

/// Makes sure this store's link server runs (reusing it, or starting it) and takes a lease on
/// it for `hold`. `probe_token`: a read token for `probe_id` signed with this gateway's keys;
/// the server must find it valid (and the artifact missing), else it signs with other keys.
pub(crate) async fn ensure(
    store_dir: &Path,
    config_file: Option<&Path>,
    wanted: u16,
    hold: Duration,
    probe: &Probe,
) -> anyhow::Result<Leased> {
    let files = Files::of(store_dir);
    files.create()?;
    let start_lock = files.open_lock(&files.start_lock())?;
    let start_lock = tokio::task::spawn_blocking(move || lock_within(start_lock, LOCK_TIMEOUT)).await??;
    let client = http_client();
    let result = async {
        if let Some(state) = files.read_state() {
            if files.server_alive() {
                let until = check(&client, &state, hold, probe).await?;
                return Ok(Leased { state, started: false, until });
            }
            // A server that is gone (killed, the machine restarted) left its file behind.
            eprintln!("stowage: the link server this store had (pid {}, port {}) is gone; starting a new one", state.pid, state.port);
            let _ = std::fs::remove_file(files.state());
        }
        let state = spawn(&files, store_dir, config_file, &candidate_ports(wanted, store_dir)).await?;
        let until = check(&client, &state, hold, probe).await?;
        Ok(Leased { state, started: true, until })
    }
    .await;
    drop(start_lock);
    result
}

/// A link the server must accept as signed by its own keys: a read token for an artifact
/// that does not exist, which a server with the same keys answers `artifact_not_found`.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub path_and_query: String,
}

impl Probe {
    pub(crate) fn new(ring: &stowage_links::KeyRing) -> Probe {
        let id = "linkprobe_0000000000000000";
        let owner = stowage_core::Owner { user_id: Some(stowage_mcp::LOCAL_USER.into()), ..Default::default() };
        let token = ring.mint(stowage_links::Operation::Read, id, &owner, stowage_links::unix_now() + 600);
        Probe { path_and_query: format!("/artifacts/{id}?token={token}") }
    }
}

/// Checks that the server in `state` is this store's (its id) and signs with our keys (the
/// probe), then takes a lease. Returns the lease's end.
async fn check(client: &reqwest::Client, state: &State, hold: Duration, probe: &Probe) -> anyhow::Result<u64> {
    let url = state.url();
    let who: Identity = client
        .get(format!("{url}{CONTROL}"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("the link server of this store (pid {}, {url}) does not answer", state.pid))?
        .json()
        .await
        .with_context(|| format!("{url} is not this store's link server"))?;
    anyhow::ensure!(
        who.id == state.id,
        "{url} answers for another link server than this store's (pid {}); `stowage links stop` ends this store's",
        state.pid
    );
    let status = client.get(format!("{url}{}", probe.path_and_query)).send().await.map(|r| r.status().as_u16());
    anyhow::ensure!(
        status.as_ref().is_ok_and(|s| *s == 404),
        "the link server of this store (pid {}, {url}) signs links with other keys than this configuration's (it answered {status:?}); `stowage links stop` ends it, and the next gateway starts one with these",
        state.pid
    );
    renew(client, state, hold).await
}

/// Takes (or extends) a lease of `hold` on the server; returns its end (Unix seconds).
pub(crate) async fn renew(client: &reqwest::Client, state: &State, hold: Duration) -> anyhow::Result<u64> {
    let resp: Until = client
        .post(format!("{}{CONTROL}/lease", state.url()))
        .json(&json!({"id": state.id, "hold_secs": hold.as_secs()}))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .context("the link server refused a lease")?
        .json()
        .await?;
    Ok(resp.until)
}

/// Asks the server to stop (`stowage links stop`).
pub(crate) async fn stop(state: &State) -> anyhow::Result<()> {
    http_client()
        .post(format!("{}{CONTROL}/stop", state.url()))
        .json(&json!({"id": state.id}))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("the link server (pid {}, {}) did not stop", state.pid, state.url()))?;
    Ok(())
}

/// What the server says about itself.
pub(crate) async fn identity(state: &State) -> anyhow::Result<Identity> {
    Ok(http_client().get(format!("{}{CONTROL}", state.url())).send().await?.error_for_status()?.json().await?)
}

pub(crate) fn http_client() -> reqwest::Client {
    // Loopback only, short: a server that does not answer within this is not one to rely on.
    reqwest::Client::builder().timeout(Duration::from_secs(5)).no_proxy().build().unwrap_or_default()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Identity {
    pub id: String,
    pub pid: u32,
    /// Unix seconds it runs until at least.
    pub until: u64,
}

#[derive(Debug, Deserialize)]
struct Until {
    until: u64,
}

/// Waits for `file`'s exclusive lock for at most `within`.
fn lock_within(file: std::fs::File, within: Duration) -> anyhow::Result<std::fs::File> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                anyhow::bail!("another stowage process has been starting this store's link server for {within:?}")
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e).context("cannot lock the link server's start lock"),
        }
    }
}

/// Starts `stowage links serve` detached (its own process group, no terminal, stdin closed,
/// stderr to its log) and reads the one line it says: `ready PORT ID` or `error: …`.
async fn spawn(files: &Files, store_dir: &Path, config_file: Option<&Path>, ports: &[u16]) -> anyhow::Result<State> {
    let exe = std::env::current_exe().context("cannot find the stowage executable to start the link server")?;
    let log = files.log();
    if std::fs::metadata(&log).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let _ = std::fs::remove_file(&log);
    }
    let stderr = std::fs::File::options()
        .create(true)
        .append(true)
        .open(&log)
        .map(std::process::Stdio::from)
        .unwrap_or_else(|_| std::process::Stdio::null());
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let mut cmd = std::process::Command::new(exe);
    // Absolute: the server runs from `/`, and a relative store (`--store ./s`) must stay this one.
    let store_dir = std::path::absolute(store_dir).with_context(|| format!("cannot resolve {}", store_dir.display()))?;
    cmd.arg("--store").arg(&store_dir).args(["links", "serve", "--ports", &ports.join(",")]);
    match config_file {
        Some(f) => cmd.arg("--config-file").arg(f),
        None => cmd.arg("--no-config-file"),
    };
    // From `/`: the server must not keep a directory busy that its gateway happened to start in.
    cmd.current_dir("/").stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(stderr);
    detach(&mut cmd);
    let mut child = cmd.spawn().context("cannot start the link server")?;
    let stdout = child.stdout.take().expect("piped");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        line
    });
    let line = match tokio::time::timeout(START_TIMEOUT, line).await {
        Ok(Ok(l)) => l,
        _ => {
            let _ = child.kill();
            anyhow::bail!("the link server did not say it was ready within {START_TIMEOUT:?} (its log: {})", log.display());
        }
    };
    // Reaped in the background: a detached server outlives this process anyway.
    std::thread::spawn(move || child.wait());
    let line = line.trim();
    if let Some(err) = line.strip_prefix("error: ") {
        anyhow::bail!("the link server could not start: {err}");
    }
    let mut words = line.strip_prefix("ready ").map(str::split_whitespace).context("the link server exited before it was ready")?;
    let port: u16 = words.next().and_then(|p| p.parse().ok()).context("the link server's ready line has no port")?;
    let id = words.next().context("the link server's ready line has no id")?.to_owned();
    let state = files.read_state().filter(|s| s.id == id && s.port == port).context("the link server did not write its state file")?;
    Ok(state)
}

#[cfg(unix)]
fn detach(cmd: &mut std::process::Command) {
    // Its own process group: a host that signals the gateway's group (on close or restart)
    // does not reach it.
    std::os::unix::process::CommandExt::process_group(cmd, 0);
}

#[cfg(windows)]
fn detach(cmd: &mut std::process::Command) {
    const DETACHED_PROCESS: u32 = 0x0000_0008;
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
    std::os::windows::process::CommandExt::creation_flags(cmd, DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP);
}

#[cfg(not(any(unix, windows)))]
fn detach(_: &mut std::process::Command) {}

/// Renews the lease every [`RENEW_EVERY`] while the gateway runs. A server that stops
/// answering is said once (its links stop working); the gateway goes on.
pub(crate) fn keep_leased(state: State, hold: Duration) {
    tokio::spawn(async move {
        let client = http_client();
        let mut warned = false;
        let mut tick = tokio::time::interval(RENEW_EVERY);
        tick.tick().await;
        loop {
            tick.tick().await;
            match renew(&client, &state, hold).await {
                Ok(_) => warned = false,
                Err(e) if !warned => {
                    warned = true;
                    tracing::warn!(target: "stowage::links", "the link server (pid {}, {}) did not renew its lease: {e:#}", state.pid, state.url());
                }
                Err(_) => {}
            }
        }
    });
}

/// The server's lease: it runs until the latest end any gateway asked for.
#[derive(Debug)]
pub(crate) struct Lease {
    until: std::sync::Mutex<u64>,
    clock: fn() -> u64,
}

impl Lease {
    /// A lease until `clock() + hold`.
    pub(crate) fn new(hold: Duration, clock: fn() -> u64) -> Lease {
        Lease { until: std::sync::Mutex::new(clock() + hold.as_secs()), clock }
    }

    /// Extends the lease to at least `hold` from now; returns its end.
    pub(crate) fn extend(&self, hold: Duration) -> u64 {
        let mut until = self.until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *until = (*until).max((self.clock)() + hold.as_secs());
        *until
    }

    pub(crate) fn until(&self) -> u64 {
        *self.until.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Seconds left (0: over).
    pub(crate) fn left(&self) -> u64 {
        self.until().saturating_sub((self.clock)())
    }
}

/// The hold a gateway asks for: the links' TTL (what it may mint at its last renewal stays
/// valid that long) plus three renewal periods (a renewal may come late).
pub(crate) fn hold_for(ttl: Duration) -> Duration {
    ttl + RENEW_EVERY * 3
}

/// `stowage links serve`: the server itself. Says `ready PORT ID` (or `error: …`) on stdout,
/// then serves until its lease ends or it is told to stop.
pub(crate) async fn serve(config: &crate::config::Config, location: &crate::wiring::StoreLocation, ports: &[u16]) -> anyhow::Result<()> {
    match start(config, location, ports).await {
        Ok(running) => running.await,
        Err(e) => {
            // The gateway that started us reads this line; a person running it by hand too.
            println!("error: {}", format!("{e:#}").replace('\n', " "));
            Err(e)
        }
    }
}

async fn start(
    config: &crate::config::Config,
    location: &crate::wiring::StoreLocation,
    ports: &[u16],
) -> anyhow::Result<impl Future<Output = anyhow::Result<()>> + use<>> {
    let files = Files::of(&location.dir);
    files.create()?;
    let alive = files.open_lock(&files.alive_lock())?;
    if alive.try_lock().is_err() {
        anyhow::bail!("a link server for this store is already running (see stowage links status)");
    }
    let store = crate::wiring::open_store(config, location)?;
    let ring = config.links.key_ring(&location.dir).context("cannot load the link-signing key")?;
    let mut bound = None;
    for &p in ports {
        if let Ok(l) = tokio::net::TcpListener::bind(("127.0.0.1", p)).await {
            bound = Some(l);
            break;
        }
    }
    let listener = bound.with_context(|| format!("none of the loopback ports {ports:?} is free"))?;
    let port = listener.local_addr()?.port();
    let id = new_id(&location.dir);
    let links = stowage_links::LinksConfig { public_url: format!("http://127.0.0.1:{port}"), ..config.links.clone() };
    let signer = Arc::new(stowage_links::LinkSigner::new(ring, &links));
    let state = State {
        id: id.clone(),
        pid: std::process::id(),
        port,
        started_at: stowage_links::unix_now(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    files.write_state(&state)?;
    // Until the first gateway's lease: long enough for it to take one.
    let lease = Arc::new(Lease::new(hold_for(config.links.ttl), stowage_links::unix_now));
    let stopping = tokio_util::sync::CancellationToken::new();
    let app =
        stowage_http::routes(stowage_http::HttpState::new(store, signer)).merge(control_routes(&state, lease.clone(), stopping.clone()));
    println!("ready {port} {id}");
    let _ = std::io::stdout().flush();
    tracing::info!(target: "stowage::links", port, pid = state.pid, "link server for {} ready", location.dir.display());
    Ok(async move {
        let _alive = alive;
        let until_done = async {
            // Registered once: a SIGTERM between two checks is not lost.
            let term = terminated();
            tokio::pin!(term);
            loop {
                let left = lease.left();
                if left == 0 || stopping.is_cancelled() {
                    break;
                }
                // Its store's directory removed, or its state file taken by another server:
                // nothing here is its to serve any more.
                if files.read_state().is_none_or(|s| s.id != state.id) {
                    tracing::info!(target: "stowage::links", "its state file {} is gone or another server's: stopping", files.state().display());
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(left.min(2))) => {}
                    _ = stopping.cancelled() => {}
                    _ = &mut term => break,
                }
            }
        };
        let served = stowage_mcp::run::serve_routes(listener, app, until_done).await;
        files.remove_state(&state.id);
        tracing::info!(target: "stowage::links", "link server stopped");
        served.context("the link server failed")
    })
}

/// SIGTERM (or Ctrl-C by hand); SIGHUP is ignored, since a closing terminal or host is no
/// reason to break links that are still valid.
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut hup)) = (signal(SignalKind::terminate()), signal(SignalKind::hangup())) else {
            return std::future::pending().await;
        };
        loop {
            tokio::select! {
                _ = term.recv() => return,
                _ = tokio::signal::ctrl_c() => return,
                _ = hup.recv() => {}
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

fn new_id(store_dir: &Path) -> String {
    use sha2::Digest;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let seed = format!("{}|{}|{nanos}|{:?}", store_dir.display(), std::process::id(), std::thread::current().id());
    hex::encode(&sha2::Sha256::digest(seed.as_bytes())[..12])
}

#[derive(Deserialize)]
struct LeaseRequest {
    id: String,
    hold_secs: u64,
}

#[derive(Deserialize)]
struct StopRequest {
    id: String,
}

/// `GET /_stowage/link-server` (who it is), `POST …/lease` and `POST …/stop` (with its id:
/// only someone who can read the store's state file can keep it or end it).
fn control_routes(state: &State, lease: Arc<Lease>, stop: tokio_util::sync::CancellationToken) -> axum::Router {
    use axum::Json;
    use axum::http::StatusCode;
    use axum::routing::{get, post};
    let (id, pid) = (state.id.clone(), state.pid);
    let who = {
        let (id, lease) = (id.clone(), lease.clone());
        move || {
            let (id, lease) = (id.clone(), lease.clone());
            async move { Json(Identity { id, pid, until: lease.until() }) }
        }
    };
    let renew = {
        let (id, lease) = (id.clone(), lease.clone());
        move |Json(req): Json<LeaseRequest>| {
            let (id, lease) = (id.clone(), lease.clone());
            async move {
                if req.id != id {
                    return Err((StatusCode::CONFLICT, "another store's link server".to_owned()));
                }
                // A lease longer than the longest link (60 min) plus renewals is never needed.
                let hold = Duration::from_secs(req.hold_secs).min(hold_for(stowage_links::MAX_TTL));
                Ok(Json(json!({"until": lease.extend(hold)})))
            }
        }
    };
    let end = move |Json(req): Json<StopRequest>| {
        let (id, stop) = (id.clone(), stop.clone());
        async move {
            if req.id != id {
                return Err((StatusCode::CONFLICT, "another store's link server".to_owned()));
            }
            stop.cancel();
            Ok(Json(json!({"stopping": true})))
        }
    };
    axum::Router::new()
        .route(CONTROL, get(who))
        .route(&format!("{CONTROL}/lease"), post(renew))
        .route(&format!("{CONTROL}/stop"), post(end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static NOW: AtomicU64 = AtomicU64::new(1_000);
    fn clock() -> u64 {
        NOW.load(Ordering::SeqCst)
    }

    #[test]
    fn the_lease_ends_a_ttl_after_the_last_renewal_and_never_shrinks() {
        let ttl = Duration::from_secs(900);
        let lease = Lease::new(hold_for(ttl), clock);
        assert_eq!(lease.until(), 1_000 + 930);
        NOW.store(1_500, Ordering::SeqCst);
        assert_eq!(lease.extend(hold_for(ttl)), 1_500 + 930, "a renewal moves the end");
        assert_eq!(lease.extend(hold_for(Duration::from_secs(60))), 2_430, "a shorter hold never shortens it");
        NOW.store(2_429, Ordering::SeqCst);
        assert_eq!(lease.left(), 1);
        NOW.store(2_431, Ordering::SeqCst);
        assert_eq!(lease.left(), 0, "over: the server exits");
    }

    #[test]
    fn a_store_tries_its_own_ports_in_the_same_order_every_time() {
        let a = candidate_ports(8787, Path::new("/home/u/.local/share/stowage"));
        assert_eq!(a, candidate_ports(8787, Path::new("/home/u/.local/share/stowage")));
        assert_eq!((a[0], *a.last().unwrap()), (8787, 0));
        assert!(a[1..a.len() - 1].iter().all(|p| (20_000..30_000).contains(p)), "{a:?}");
        assert_ne!(a, candidate_ports(8787, Path::new("/srv/other-store")));
    }

    #[test]
    fn a_state_file_without_a_live_server_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::of(dir.path());
        files.create().unwrap();
        assert!(!files.server_alive());
        let state = State { id: "abc".into(), pid: 1, port: 9, started_at: 0, version: "x".into() };
        files.write_state(&state).unwrap();
        assert_eq!(files.read_state(), Some(state));
        let held = files.open_lock(&files.alive_lock()).unwrap();
        held.try_lock().unwrap();
        assert!(files.server_alive(), "the lock is held: a server lives");
        held.unlock().unwrap();
        assert!(!files.server_alive());
        files.remove_state("other");
        assert!(files.read_state().is_some(), "only its own server removes the file");
        files.remove_state("abc");
        assert!(files.read_state().is_none());
    }
}
