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
//! - **One store, one server.** Its state lives in the store's directory (`links/`, 0700): a
//!   lock the server holds while it lives (`server.lock`; a lock that can be taken means its
//!   state file is stale), the state file (`server.json`, 0600: pid, port, a random id and the
//!   control secret), a lock held while a gateway checks or starts the server (`start.lock`),
//!   and its log (`server.log`, 0600).
//! - **It answers its owner only.** Its control routes (who it is, a lease, stop) take only
//!   requests signed with the control secret, which only the store's owner can read and which
//!   is never sent or served: a request carries an HMAC of its method, path, time and a nonce
//!   ([`sign`]), and the server proves itself by answering with an HMAC of that nonce, so a
//!   program that took its port learns nothing and is not trusted. Every route refuses a
//!   `Host` the gateway would refuse (DNS rebinding), and the control routes any request a web
//!   page could send (an `Origin`, a body that is not JSON). A gateway reuses a server only
//!   when it proves itself so and accepts a link signed with the gateway's keys (a server
//!   started under another configuration does not).
//! - **Loopback only.** It binds 127.0.0.1; the port is the configured one, else one the system
//!   picks (different every start: a port derived from the store could be taken in advance by
//!   another local user waiting for the links).
//! - **Never left running for nothing.** Its lease ends [`RENEW_EVERY`] × 3 after the last
//!   renewal plus the links' TTL; then it exits and removes its state file.
//! - **Never a dead address.** A gateway checks, before each link for people it mints, that
//!   its server still runs ([`Supervisor::base_url`]), and starts a new one (or serves the
//!   links itself, saying so) when it does not.
//!
//! Upload links (blob chaining) and links minted for tools during a call stay with the
//! gateway's own in-process listener: their slots live in that process.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stowage_core::ErrorCode;

use anyhow::Context;
use hmac::{KeyInit, Mac};
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
/// The header a control request is signed in, and the one the server's answer proves itself in.
const SIGNED: &str = "x-stowage-control";
const PROOF: &str = "x-stowage-control-proof";
/// How far a signed request's time may be from the server's (both read this machine's clock).
const SIGNED_WITHIN_SECS: u64 = 60;
/// The log is started afresh past this size.
const MAX_LOG_BYTES: u64 = 1 << 20;
/// After a failed attempt to start a new server, links go to the gateway's own listener for
/// this long before the next attempt (each may take seconds).
const RETRY_AFTER: Duration = Duration::from_secs(30);

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

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

    /// Written whole (temp file + rename) and owner-only: it holds the control secret.
    fn write_state(&self, state: &State) -> anyhow::Result<()> {
        let path = self.state();
        let mut tmp = tempfile::Builder::new().prefix(".server-").tempfile_in(&self.dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
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

    /// The server's log, appended to and owner-only (it names the store's paths). A log an
    /// older version left readable by others is made owner-only too.
    fn open_log(&self) -> std::io::Result<std::fs::File> {
        let path = self.log();
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
            let _ = std::fs::remove_file(&path);
        }
        let mut o = std::fs::File::options();
        o.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let file = o.open(&path)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        Ok(file)
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
    /// Random, made at the server's start: tells one server of the store from the next.
    pub id: String,
    pub pid: u32,
    pub port: u16,
    /// Unix seconds.
    pub started_at: u64,
    pub version: String,
    /// The control secret (hex): control requests are signed with it. Empty in the file of a
    /// server of an older version, which took its id instead.
    #[serde(default)]
    pub secret: String,
}

impl State {
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// The ports a store's link server tries, in order: the configured one, then one the system
/// picks (0). Never one derived from anything another user can compute: such a port can be
/// taken in advance by someone waiting for the links sent to it.
pub(crate) fn candidate_ports(wanted: u16) -> Vec<u16> {
    if wanted == 0 { vec![0] } else { vec![wanted, 0] }
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

/// What a gateway needs to start, check and lease its store's link server.
#[derive(Debug, Clone)]
pub(crate) struct Want {
    pub store_dir: PathBuf,
    /// The configuration file the gateway read (the server reads the same).
    pub config_file: Option<PathBuf>,
    /// The configured port.
    pub port: u16,
    /// The lease to ask for ([`hold_for`]).
    pub hold: Duration,
    pub probe: Probe,
}

/// Makes sure this store's link server runs (reusing it, or starting it) and takes a lease on
/// it for `hold`. The probe is a read token signed with this gateway's keys: the server must
/// find it valid (and the artifact missing), else it signs with other keys.
pub(crate) async fn ensure(want: &Want) -> anyhow::Result<Leased> {
    let files = Files::of(&want.store_dir);
    files.create()?;
    let start_lock = files.open_lock(&files.start_lock())?;
    let start_lock = tokio::task::spawn_blocking(move || lock_within(start_lock, LOCK_TIMEOUT)).await??;
    let client = http_client();
    let result = async {
        if let Some(state) = files.read_state() {
            if files.server_alive() {
                if !state.secret.is_empty() {
                    let until = check(&client, &state, want.hold, &want.probe).await?;
                    return Ok(Leased { state, started: false, until });
                }
                // A server of an older version, controlled by its id: replaced by one that
                // answers its owner only.
                stop_older(&client, &files, &state).await?;
            } else {
                // A server that is gone (killed, the machine restarted) left its file behind.
                eprintln!("stowage: the link server this store had (pid {}, port {}) is gone; starting a new one", state.pid, state.port);
                let _ = std::fs::remove_file(files.state());
            }
        }
        let state = spawn(&files, &want.store_dir, want.config_file.as_deref(), &candidate_ports(want.port)).await?;
        let until = check(&client, &state, want.hold, &want.probe).await?;
        Ok(Leased { state, started: true, until })
    }
    .await;
    drop(start_lock);
    result
}

/// Stops a server of an older version (its state file has no secret; it took its id) and
/// waits for it to be gone.
async fn stop_older(client: &reqwest::Client, files: &Files, state: &State) -> anyhow::Result<()> {
    let stopped = client.post(format!("{}{CONTROL}/stop", state.url())).json(&json!({"id": state.id})).send().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while files.server_alive() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the link server of an older stowage runs for this store (pid {}, {}) and did not stop ({stopped:?}); end it (kill {}) and start again",
            state.pid,
            state.url(),
            state.pid
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("stowage: stopped this store's link server of an older version (pid {}); starting a new one", state.pid);
    Ok(())
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

/// Checks that the server in `state` is this store's (it proves it holds the control secret)
/// and signs with our keys (the probe), then takes a lease. Returns the lease's end.
async fn check(client: &reqwest::Client, state: &State, hold: Duration, probe: &Probe) -> anyhow::Result<u64> {
    let url = state.url();
    let who: Identity = control(client, state, reqwest::Method::GET, "", None)
        .await
        .with_context(|| format!("the link server of this store (pid {}, {url}) does not answer as this store's", state.pid))?;
    anyhow::ensure!(
        who.pid == state.pid,
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
    let resp: Until = control(client, state, reqwest::Method::POST, "/lease", Some(json!({"hold_secs": hold.as_secs()})))
        .await
        .context("the link server refused a lease")?;
    Ok(resp.until)
}

/// Asks the server to stop (`stowage links stop`).
pub(crate) async fn stop(state: &State) -> anyhow::Result<()> {
    if state.secret.is_empty() {
        // A server of an older version: it took its id.
        let stopped = http_client().post(format!("{}{CONTROL}/stop", state.url())).json(&json!({"id": state.id})).send().await;
        stopped
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("the link server (pid {}, {}) did not stop", state.pid, state.url()))?;
        return Ok(());
    }
    let _: serde_json::Value = control(&http_client(), state, reqwest::Method::POST, "/stop", Some(json!({})))
        .await
        .with_context(|| format!("the link server (pid {}, {}) did not stop", state.pid, state.url()))?;
    Ok(())
}

/// What the server says about itself.
pub(crate) async fn identity(state: &State) -> anyhow::Result<Identity> {
    control(&http_client(), state, reqwest::Method::GET, "", None).await
}

/// One control request, signed with the state's secret; the answer counts only when the
/// server proves it holds the same secret.
async fn control<T: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    state: &State,
    method: reqwest::Method,
    route: &str,
    body: Option<serde_json::Value>,
) -> anyhow::Result<T> {
    anyhow::ensure!(!state.secret.is_empty(), "its state file holds no control secret (a server of an older stowage)");
    let path = format!("{CONTROL}{route}");
    let (header, nonce) = sign(&state.secret, method.as_str(), &path, stowage_links::unix_now());
    let mut req = client.request(method, format!("{}{path}", state.url())).header(SIGNED, header);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await?.error_for_status()?;
    let proof = resp.headers().get(PROOF).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    anyhow::ensure!(proves(&state.secret, &nonce, &proof), "{} did not prove it holds this store's control secret", state.url());
    Ok(resp.json().await?)
}

pub(crate) fn http_client() -> reqwest::Client {
    // Loopback only, short: a server that does not answer within this is not one to rely on.
    reqwest::Client::builder().timeout(Duration::from_secs(5)).no_proxy().build().unwrap_or_default()
}

fn mac(secret: &str, message: &str) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(secret.as_bytes()).expect("hmac takes keys of any length");
    m.update(message.as_bytes());
    m
}

/// The header a control request to `method path` at `now` (Unix seconds) carries,
/// `{now}.{nonce}.{mac}`, and its nonce (which the answer's proof covers).
fn sign(secret: &str, method: &str, path: &str, now: u64) -> (String, String) {
    let nonce = hex::encode(random::<16>());
    let tag = hex::encode(mac(secret, &format!("{method} {path} {now} {nonce}")).finalize().into_bytes());
    (format!("{now}.{nonce}.{tag}"), nonce)
}

/// The nonce of a well-signed request to `method path` at about `now`, or `None`.
fn verify(secret: &str, method: &str, path: &str, header: &str, now: u64) -> Option<String> {
    let mut parts = header.splitn(3, '.');
    let (when, nonce, tag) = (parts.next()?, parts.next()?, parts.next()?);
    let when: u64 = when.parse().ok()?;
    if when.abs_diff(now) > SIGNED_WITHIN_SECS || nonce.len() != 32 {
        return None;
    }
    let tag = hex::decode(tag).ok()?;
    // `verify_slice` compares in constant time.
    mac(secret, &format!("{method} {path} {when} {nonce}")).verify_slice(&tag).ok()?;
    Some(nonce.to_owned())
}

/// What the server answers a signed request with: the MAC of its nonce.
fn proof(secret: &str, nonce: &str) -> String {
    hex::encode(mac(secret, &format!("proof {nonce}")).finalize().into_bytes())
}

fn proves(secret: &str, nonce: &str, proof: &str) -> bool {
    hex::decode(proof).is_ok_and(|p| mac(secret, &format!("proof {nonce}")).verify_slice(&p).is_ok())
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the system's random source");
    b
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Identity {
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
    let deadline = Instant::now() + within;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
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
    let stderr = files.open_log().map(std::process::Stdio::from).unwrap_or_else(|_| std::process::Stdio::null());
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

/// A gateway's hold on its store's link server for as long as it runs: where people's links go
/// ([`Supervisor::base_url`], asked at every mint) and the lease, renewed every
/// [`RENEW_EVERY`]. A server that died (killed, crashed, stopped by hand) is replaced before the
/// next link is minted, so no link goes to a port nothing serves; when none can be started,
/// links go to the gateway's own listener (they then work while this process runs), and the
/// next attempt comes [`RETRY_AFTER`] later.
pub(crate) struct Supervisor {
    want: Want,
    /// The gateway's own loopback listener.
    fallback_url: String,
    current: std::sync::Mutex<Current>,
    /// One replacement at a time; whoever waited for it uses its result.
    replacing: std::sync::Mutex<()>,
}

#[derive(Debug)]
struct Current {
    /// `None`: no server could be started; links go to the fallback.
    state: Option<State>,
    /// No new attempt before this.
    retry_at: Option<Instant>,
}

impl Supervisor {
    pub(crate) fn new(want: Want, leased: &Leased, fallback_url: String) -> Arc<Supervisor> {
        Arc::new(Supervisor {
            want,
            fallback_url,
            current: std::sync::Mutex::new(Current { state: Some(leased.state.clone()), retry_at: None }),
            replacing: std::sync::Mutex::new(()),
        })
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The base URL of a link minted now: the server's, checked to be alive and still this
    /// store's (a lock and a small file: cheap); else a new server's, started first (this
    /// blocks the caller for the moments that takes); else the gateway's own.
    pub(crate) fn base_url(&self) -> String {
        match self.live_url() {
            Some(url) => url,
            None => self.replace_blocking(),
        }
    }

    fn live_url(&self) -> Option<String> {
        let state = self.current().state.clone()?;
        let files = Files::of(&self.want.store_dir);
        (files.server_alive() && files.read_state().is_some_and(|s| s.id == state.id)).then(|| state.url())
    }

    /// Starts (or adopts) a new server, once for every caller waiting on it.
    fn replace_blocking(&self) -> String {
        let _one = self.replacing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(url) = self.live_url() {
            return url; // another caller did it while this one waited
        }
        let (previous, retry_at) = {
            let c = self.current();
            (c.state.clone(), c.retry_at)
        };
        if retry_at.is_some_and(|t| Instant::now() < t) {
            return self.fallback_url.clone();
        }
        let want = self.want.clone();
        match run_aside(async move { ensure(&want).await }) {
            Ok(leased) => {
                let gone = previous.map_or_else(|| "could not be started before".to_owned(), |p| format!("(pid {}) is gone", p.pid));
                let line = format!(
                    "this store's link server {gone}; download links are now served by {} (pid {}, {})",
                    if leased.started { "a new one" } else { "the one another gateway started" },
                    leased.state.pid,
                    leased.state.url()
                );
                eprintln!("stowage: {line}");
                tracing::warn!(target: "stowage::links", "{line}");
                let url = leased.state.url();
                *self.current() = Current { state: Some(leased.state), retry_at: None };
                url
            }
            Err(e) => {
                let line = format!(
                    "this store's link server is gone and no new one could be started ({e:#}); download links are served by this process until it exits, and another start is tried in {}s",
                    RETRY_AFTER.as_secs()
                );
                eprintln!("stowage: warning: {line}");
                tracing::warn!(target: "stowage::links", "{line}");
                *self.current() = Current { state: None, retry_at: Some(Instant::now() + RETRY_AFTER) };
                self.fallback_url.clone()
            }
        }
    }

    /// Renews the lease every [`RENEW_EVERY`] while the gateway runs; a server that does not
    /// renew is replaced at once, before the next link asks.
    pub(crate) fn keep_leased(self: Arc<Self>) {
        tokio::spawn(async move {
            let client = http_client();
            let mut tick = tokio::time::interval(RENEW_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let state = self.current().state.clone();
                let renewed = match &state {
                    Some(s) => renew(&client, s, self.want.hold).await.map(drop),
                    None => Err(anyhow::anyhow!("no link server")),
                };
                if let Err(e) = renewed {
                    tracing::debug!(target: "stowage::links", "the link server did not renew its lease: {e:#}");
                    let me = self.clone();
                    let _ = tokio::task::spawn_blocking(move || me.replace_blocking()).await;
                }
            }
        });
    }
}

/// Runs `f` to its end on a thread of its own (with a small runtime), from sync code that may
/// itself be on the runtime: a link is minted synchronously, deep in the shaper.
fn run_aside<T: Send>(f: impl Future<Output = T> + Send) -> T {
    let run = || {
        std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime for the link server").block_on(f)
            })
            .join()
            .expect("the link server's starter panicked")
        })
    };
    match tokio::runtime::Handle::try_current() {
        // Other tasks move to other workers while this one waits.
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(run),
        _ => run(),
    }
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
    let keys = crate::wiring::Keys::new(config, location);
    let store = crate::wiring::open_store(config, location, &keys)?;
    // `[gateway]`'s HTTP timeouts, taken now: the server outlives this borrow of the config.
    let timeouts = config.gateway.http_timeouts();
    let ring = keys.ring()?;
    let mut bound = None;
    for &p in ports {
        if let Ok(l) = tokio::net::TcpListener::bind(("127.0.0.1", p)).await {
            bound = Some(l);
            break;
        }
    }
    let listener = bound.with_context(|| format!("none of the loopback ports {ports:?} is free"))?;
    let port = listener.local_addr()?.port();
    let id = hex::encode(random::<12>());
    let links = stowage_links::LinksConfig { public_url: format!("http://127.0.0.1:{port}"), ..config.links.clone() };
    let signer = Arc::new(stowage_links::LinkSigner::new(ring, &links));
    let state = State {
        id: id.clone(),
        pid: std::process::id(),
        port,
        started_at: stowage_links::unix_now(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        secret: hex::encode(random::<32>()),
    };
    files.write_state(&state)?;
    // Until the first gateway's lease: long enough for it to take one.
    let lease = Arc::new(Lease::new(hold_for(config.links.ttl), stowage_links::unix_now));
    let stopping = tokio_util::sync::CancellationToken::new();
    let browser = Arc::new(stowage_http::BrowserGuard::new(&format!("127.0.0.1:{port}"), &[], &[]));
    let app = stowage_http::routes(stowage_http::HttpState::new(store, signer))
        .merge(control_routes(&state, lease.clone(), stopping.clone(), browser.clone()))
        .layer(axum::middleware::from_fn_with_state(browser, refuse_foreign_host));
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
        let served = stowage_http::listener::serve(listener, app, timeouts, until_done).await;
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

/// Every route: a `Host` the gateway would refuse is refused here too (a page on another name
/// resolving to 127.0.0.1 reaches loopback same-origin).
async fn refuse_foreign_host(
    axum::extract::State(guard): axum::extract::State<Arc<stowage_http::BrowserGuard>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if let Some(why) = guard.refuse_host(&req) {
        return stowage_http::ApiError::new(axum::http::StatusCode::FORBIDDEN, ErrorCode::ArtifactForbidden, why).into_response();
    }
    next.run(req).await
}

/// What the control routes' guard checks against.
struct ControlGuard {
    secret: String,
    browser: Arc<stowage_http::BrowserGuard>,
}

/// The control routes: no web page (no `Origin`, JSON bodies only, the gateway's `Host` rule),
/// and only requests signed with the control secret; the answer carries the proof.
async fn control_guard(
    axum::extract::State(guard): axum::extract::State<Arc<ControlGuard>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let refuse = |why: String| stowage_http::ApiError::new(StatusCode::FORBIDDEN, ErrorCode::ArtifactForbidden, why).into_response();
    if let Some(why) = guard.browser.refuse(&req) {
        return refuse(why);
    }
    if req.headers().contains_key(axum::http::header::ORIGIN) {
        return refuse("the link server's control routes answer no web page".into());
    }
    let header = req.headers().get(SIGNED).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let Some(nonce) = verify(&guard.secret, req.method().as_str(), req.uri().path(), header, stowage_links::unix_now()) else {
        return refuse("control requests must be signed with this store's link-server secret (only its owner can read it)".into());
    };
    let json = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"));
    if req.method() != axum::http::Method::GET && !json {
        let e = stowage_http::ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::BadRequest,
            "send the body as Content-Type: application/json",
        );
        return e.into_response();
    }
    let mut resp = next.run(req).await;
    if let Ok(v) = axum::http::HeaderValue::from_str(&proof(&guard.secret, &nonce)) {
        resp.headers_mut().insert(PROOF, v);
    }
    resp
}

#[derive(Deserialize)]
struct LeaseRequest {
    hold_secs: u64,
}

/// `GET /_stowage/link-server` (who it is), `POST …/lease` and `POST …/stop`, each only for a
/// request signed with the control secret (see [`control_guard`]).
fn control_routes(
    state: &State,
    lease: Arc<Lease>,
    stop: tokio_util::sync::CancellationToken,
    browser: Arc<stowage_http::BrowserGuard>,
) -> axum::Router {
    use axum::Json;
    use axum::routing::{get, post};
    let pid = state.pid;
    let who = {
        let lease = lease.clone();
        move || {
            let lease = lease.clone();
            async move { Json(Identity { pid, until: lease.until() }) }
        }
    };
    let renew = move |Json(req): Json<LeaseRequest>| {
        let lease = lease.clone();
        async move {
            // A lease longer than the longest link (60 min) plus renewals is never needed.
            let hold = Duration::from_secs(req.hold_secs).min(hold_for(stowage_links::MAX_TTL));
            Json(json!({"until": lease.extend(hold)}))
        }
    };
    let end = move || {
        let stop = stop.clone();
        async move {
            stop.cancel();
            Json(json!({"stopping": true}))
        }
    };
    let guard = Arc::new(ControlGuard { secret: state.secret.clone(), browser });
    axum::Router::new()
        .route(CONTROL, get(who))
        .route(&format!("{CONTROL}/lease"), post(renew))
        .route(&format!("{CONTROL}/stop"), post(end))
        .route_layer(axum::middleware::from_fn_with_state(guard, control_guard))
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
    fn a_taken_port_gives_way_to_one_the_system_picks_never_a_derived_one() {
        assert_eq!(candidate_ports(8787), vec![8787, 0]);
        assert_eq!(candidate_ports(0), vec![0]);
    }

    #[test]
    fn control_requests_are_signed_for_one_route_and_time_and_answers_prove_the_secret() {
        let secret = hex::encode([7u8; 32]);
        let (header, nonce) = sign(&secret, "POST", "/_stowage/link-server/stop", 5_000);
        assert_eq!(verify(&secret, "POST", "/_stowage/link-server/stop", &header, 5_030).as_deref(), Some(nonce.as_str()));
        // Another route, method, time, secret or a changed byte: refused.
        assert!(verify(&secret, "POST", "/_stowage/link-server/lease", &header, 5_000).is_none());
        assert!(verify(&secret, "GET", "/_stowage/link-server/stop", &header, 5_000).is_none());
        assert!(verify(&secret, "POST", "/_stowage/link-server/stop", &header, 5_000 + SIGNED_WITHIN_SECS + 1).is_none());
        assert!(verify(&hex::encode([8u8; 32]), "POST", "/_stowage/link-server/stop", &header, 5_000).is_none());
        let mut forged = header.clone();
        forged.replace_range(header.len() - 1.., if header.ends_with('0') { "1" } else { "0" });
        assert!(verify(&secret, "POST", "/_stowage/link-server/stop", &forged, 5_000).is_none());
        for junk in ["", "5000", "5000.abc.def", "x.y.z"] {
            assert!(verify(&secret, "POST", "/_stowage/link-server/stop", junk, 5_000).is_none(), "{junk:?}");
        }
        // Two requests never share a nonce; only the secret's holder can answer with the proof.
        assert_ne!(sign(&secret, "GET", "/x", 1).1, sign(&secret, "GET", "/x", 1).1);
        assert!(proves(&secret, &nonce, &proof(&secret, &nonce)));
        assert!(!proves(&secret, &nonce, &proof(&hex::encode([8u8; 32]), &nonce)));
        assert!(!proves(&secret, &nonce, ""));
    }

    #[test]
    fn a_state_file_without_a_live_server_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::of(dir.path());
        files.create().unwrap();
        assert!(!files.server_alive());
        let state = State { id: "abc".into(), pid: 1, port: 9, started_at: 0, version: "x".into(), secret: "s".into() };
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

    #[cfg(unix)]
    #[test]
    fn the_state_file_and_the_log_are_the_owners_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let files = Files::of(dir.path());
        files.create().unwrap();
        let state = State { id: "abc".into(), pid: 1, port: 9, started_at: 0, version: "x".into(), secret: "s".into() };
        files.write_state(&state).unwrap();
        // A log an older version made readable by others is tightened when next opened.
        std::fs::write(files.log(), "old\n").unwrap();
        std::fs::set_permissions(files.log(), std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(files.open_log().unwrap());
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(files.dir.clone()), mode(files.state()), mode(files.log())), (0o700, 0o600, 0o600));
        std::fs::remove_file(files.log()).unwrap();
        drop(files.open_log().unwrap());
        assert_eq!(mode(files.log()), 0o600, "a new log too");
    }
}
