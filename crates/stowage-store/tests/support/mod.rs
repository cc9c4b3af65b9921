//! Throwaway storage peers for the shared-store tests: a PostgreSQL cluster (Debian's
//! `postgresql` package), S3 servers (moto, and s3rver where signatures and expiry must be
//! checked) and Azurite (Microsoft's Azure Blob Storage emulator), each on a free loopback
//! port, stopped and removed on drop. Installed by
//! `scripts/storage-peers.sh`; a missing peer skips the test loudly, or fails it under `CI`.
#![allow(dead_code)] // each test file uses part of this

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Skips (returns `None`) with a loud message, or panics under `CI`, where nothing may be
/// skipped.
pub(crate) fn missing<T>(what: &str) -> Option<T> {
    let msg = format!("{what} is not installed; run scripts/storage-peers.sh");
    if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") {
        panic!("{msg}");
    }
    eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    None
}

pub(crate) fn peers_dir() -> PathBuf {
    let dir = std::env::var_os("STOWAGE_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers"));
    dir.canonicalize().unwrap_or(dir)
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn wait_for_port(port: u16, child: &mut Child, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited ({status}) before listening: {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port} within 30 s: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is_root() -> bool {
    // The owner of /proc/self is this process's uid; no libc call needed.
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// A PostgreSQL cluster in a temp directory, trusting local connections, on a free port.
pub(crate) struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    /// The server options it was started with, to start it again after [`Postgres::stop`].
    opts: String,
}

impl Postgres {
    /// Finds the newest PostgreSQL under /usr/lib/postgresql and starts a cluster (as the
    /// `postgres` user when running as root: PostgreSQL refuses to run as root).
    pub(crate) fn start() -> Option<Postgres> {
        Self::start_inner(false)
    }

    /// [`Postgres::start`] with TLS on, serving a certificate for 127.0.0.1 from a fresh CA
    /// ([`Postgres::ca_file`]).
    pub(crate) fn start_tls() -> Option<Postgres> {
        Self::start_inner(true)
    }

    /// The CA that signed the TLS cluster's certificate.
    pub(crate) fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    fn start_inner(tls: bool) -> Option<Postgres> {
        let mut bins: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists())
            .collect();
        bins.sort_by_key(|b| b.parent().and_then(|v| v.file_name()).and_then(|v| v.to_str()).and_then(|v| v.parse::<u32>().ok()));
        let Some(bin) = bins.pop() else { return missing("PostgreSQL (/usr/lib/postgresql/*/bin/initdb)") };
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            let status = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()).status().unwrap();
            assert!(status.success(), "chown of the cluster directory failed");
        }
        let mut pg = Postgres { dir, bin, port: free_port(), opts: String::new() };
        let data = pg.dir.path().join("data");
        pg.run("initdb", &["-D", data.to_str().unwrap(), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]);
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
            pg.port,
            pg.dir.path().display()
        );
        if tls {
            let d = pg.dir.path();
            let (crt, key) = (d.join("server.crt"), d.join("server.key"));
            std::fs::write(d.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
            // A CA, and a server certificate for 127.0.0.1 signed by it.
            for args in [
                "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=stowage-test-ca -keyout ca.key -out ca.crt",
                "req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr",
                "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile ext.cnf -out server.crt",
            ] {
                let Ok(made) = Command::new("openssl").args(args.split(' ')).current_dir(d).output() else { return missing("openssl") };
                assert!(made.status.success(), "openssl {args}: {}", String::from_utf8_lossy(&made.stderr));
            }
            if is_root() {
                assert!(Command::new("chown").args(["postgres:postgres"]).arg(&crt).arg(&key).status().unwrap().success());
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
            opts.push_str(&format!(" -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}", crt.display(), key.display()));
        }
        pg.opts = opts;
        pg.start_again();
        Some(pg)
    }

    /// Starts the cluster again after [`Postgres::stop`] (a database outage that ends).
    pub(crate) fn start_again(&self) {
        let data = self.dir.path().join("data");
        let log = self.dir.path().join("postgres.log");
        self.run("pg_ctl", &["-D", data.to_str().unwrap(), "-o", &self.opts, "-l", log.to_str().unwrap(), "-w", "-t", "60", "start"]);
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd.args(args).current_dir(self.dir.path()).stdin(Stdio::null()).output().unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A URL to a fresh database of this cluster.
    pub(crate) fn create_database(&self, name: &str) -> String {
        self.run("createdb", &["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", name]);
        self.url(name)
    }

    pub(crate) fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Runs SQL through psql (to break things on purpose).
    pub(crate) fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "-d", db, "-At", "-c", sql])
            .output()
            .unwrap();
        assert!(out.status.success(), "psql {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub(crate) fn stop(&self) {
        self.stop_with("immediate");
    }

    /// Stops the cluster the way an operator restarting it would (`-m fast`: sessions are cut,
    /// but what was committed is written out first). The test cluster runs with
    /// `synchronous_commit=off`, so an immediate stop may also lose the last commits, which a
    /// production database does not.
    pub(crate) fn stop_fast(&self) {
        self.stop_with("fast");
    }

    fn stop_with(&self, mode: &str) {
        let data = self.dir.path().join("data");
        let out = if is_root() {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"))
                .args(["-D"])
                .arg(&data)
                .args(["-m", mode, "-w", "stop"])
                .output()
        } else {
            Command::new(self.bin.join("pg_ctl")).arg("-D").arg(&data).args(["-m", mode, "-w", "stop"]).output()
        };
        drop(out);
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Which object-store server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BucketKind {
    /// moto: the whole S3 API, no signature checks.
    Moto,
    /// s3rver: S3 that checks signatures and presigned expiry (credentials S3RVER/S3RVER).
    S3rver,
    /// Azurite: Azure Blob Storage, checking Shared Key and SAS signatures and expiry (its
    /// well-known development account).
    Azurite,
}

/// Azurite's well-known development account (public, documented by Microsoft).
pub(crate) const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub(crate) const AZURITE_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A local object-store server with one bucket (container, on Azurite).
pub(crate) struct BucketServer {
    child: Child,
    _dir: tempfile::TempDir,
    pub port: u16,
    pub bucket: String,
    pub kind: BucketKind,
}

impl BucketServer {
    pub(crate) fn start(kind: BucketKind, bucket: &str) -> Option<BucketServer> {
        let peers = peers_dir();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut cmd = match kind {
            BucketKind::Moto => {
                let exe = peers.join("venv/bin/moto_server");
                if !exe.exists() {
                    return missing(&format!("moto_server ({})", exe.display()));
                }
                let mut c = Command::new(exe);
                c.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
                c
            }
            BucketKind::S3rver => {
                let js = peers.join("node_modules/s3rver/bin/s3rver.js");
                if !js.exists() {
                    return missing(&format!("s3rver ({})", js.display()));
                }
                let mut c = Command::new("node");
                c.arg(js).arg("-d").arg(dir.path().join("data")).args([
                    "-a",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "--configure-bucket",
                    bucket,
                ]);
                c
            }
            BucketKind::Azurite => {
                let js = peers.join("node_modules/azurite/dist/src/blob/main.js");
                if !js.exists() {
                    return missing(&format!("azurite ({})", js.display()));
                }
                let mut c = Command::new("node");
                c.arg(js).args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string(), "--skipApiVersionCheck", "--silent", "-l"]);
                c.arg(dir.path().join("data"));
                c
            }
        };
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        let mut child = cmd.stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
        wait_for_port(port, &mut child, &format!("{kind:?}"), &log_path);
        let server = BucketServer { child, _dir: dir, port, bucket: bucket.to_owned(), kind };
        if kind == BucketKind::Moto {
            // moto checks no signature, so a bare PUT makes the bucket.
            let (status, body) = server.raw("PUT", &format!("/{bucket}"));
            assert!(status.starts_with("HTTP/1.1 200"), "create bucket: {status} {body}");
        }
        if kind == BucketKind::Azurite {
            // Azurite checks every signature: the container is made by Azure's own Python SDK
            // (installed beside moto), as an operator would.
            let python = peers.join("venv/bin/python");
            let script = "import sys\nfrom azure.storage.blob import BlobServiceClient\nBlobServiceClient.from_connection_string(sys.argv[1]).create_container(sys.argv[2])\n";
            let conn = format!(
                "DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={}",
                server.endpoint()
            );
            let out = Command::new(&python).args(["-c", script, &conn, bucket]).output();
            match out {
                Ok(o) if o.status.success() => {}
                Ok(o) => panic!("create container {bucket}: {}", String::from_utf8_lossy(&o.stderr)),
                Err(_) => return missing(&format!("azure-storage-blob ({})", python.display())),
            }
        }
        Some(server)
    }

    /// The endpoint the store is configured with: the server's root, or on Azurite the
    /// account's URL (the emulator puts the account in the path).
    pub(crate) fn endpoint(&self) -> String {
        match self.kind {
            BucketKind::Azurite => format!("http://127.0.0.1:{}/{AZURITE_ACCOUNT}", self.port),
            BucketKind::Moto | BucketKind::S3rver => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// Access key id and secret (account name and key, on Azurite).
    pub(crate) fn credentials(&self) -> (&'static str, &'static str) {
        match self.kind {
            BucketKind::Moto => ("testing", "testing"),
            BucketKind::S3rver => ("S3RVER", "S3RVER"),
            BucketKind::Azurite => (AZURITE_ACCOUNT, AZURITE_KEY),
        }
    }

    pub(crate) fn location(&self, prefix: &str) -> stowage_store::BucketLocation {
        let azure = self.kind == BucketKind::Azurite;
        stowage_store::BucketLocation {
            provider: if azure { stowage_store::Provider::Azure } else { stowage_store::Provider::S3 },
            bucket: self.bucket.clone(),
            prefix: prefix.to_owned(),
            endpoint: Some(self.endpoint()),
            region: (!azure).then(|| "us-east-1".into()),
        }
    }

    /// One unsigned HTTP/1.1 request; the status line and body.
    pub(crate) fn raw(&self, method: &str, path: &str) -> (String, String) {
        raw_http(self.port, method, path)
    }

    /// Stops the server (to test an unreachable bucket).
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for BucketServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One HTTP/1.1 request on loopback without a client library: the status line and body.
pub(crate) fn raw_http(port: u16, method: &str, path_and_query: &str) -> (String, String) {
    let text = raw_response(port, method, path_and_query);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.lines().next().unwrap_or("").to_owned(), body.to_owned())
}

/// One HTTP/1.1 request on loopback: the whole response, headers and body.
pub(crate) fn raw_response(port: u16, method: &str, path_and_query: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path_and_query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// What a [`BucketProxy`] does with the requests it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ProxyMode {
    /// Forwards every request to the bucket server.
    Pass = 0,
    /// Answers PUT, POST and DELETE with S3's 403 `AccessDenied` (a bucket policy or a
    /// credential that lost its write rights); forwards reads.
    RefuseWrites = 1,
    /// Reads the request and never answers (a bucket that hangs).
    Hang = 2,
    /// Forwards every request 2.5 s late (a slow but healthy bucket).
    Slow = 3,
}

/// A small HTTP proxy in front of a bucket server, switchable at run time between passing
/// requests on, refusing writes and hanging: what a real bucket does when a policy changes
/// or a load balancer in front of it stalls. One request per connection (`Connection: close`
/// both ways), which every S3 client copes with.
pub(crate) struct BucketProxy {
    pub port: u16,
    mode: std::sync::Arc<std::sync::atomic::AtomicU8>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl BucketProxy {
    pub(crate) fn start(upstream: u16) -> BucketProxy {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(ProxyMode::Pass as u8));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, st) = (mode.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (m, st) = (m.clone(), st.clone());
                std::thread::spawn(move || proxy_one(conn, upstream, &m, &st));
            }
        });
        BucketProxy { port, mode, stop }
    }

    pub(crate) fn set(&self, mode: ProxyMode) {
        self.mode.store(mode as u8, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for BucketProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// The head of an HTTP message (through the blank line) and the rest read so far.
fn read_head(conn: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
            return Some((head, buf[end + 4..].to_vec()));
        }
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The head with any `Connection` header replaced by `Connection: close`.
fn closing(head: &str) -> String {
    let mut out = String::new();
    for line in head.trim_end_matches("\r\n").split("\r\n") {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

fn proxy_one(mut client: TcpStream, upstream: u16, mode: &std::sync::atomic::AtomicU8, stop: &std::sync::atomic::AtomicBool) {
    use std::sync::atomic::Ordering;
    let Some((head, mut body)) = read_head(&mut client) else { return };
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
        .unwrap_or(0);
    let mut chunk = [0u8; 65536];
    while body.len() < length {
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let method = head.split_whitespace().next().unwrap_or("").to_owned();
    match mode.load(Ordering::SeqCst) {
        m if m == ProxyMode::Hang as u8 => {
            // Hold the connection without a word until the test ends (or the client gives up).
            while !stop.load(Ordering::SeqCst) && mode.load(Ordering::SeqCst) == ProxyMode::Hang as u8 {
                std::thread::sleep(Duration::from_millis(50));
            }
            return;
        }
        m if m == ProxyMode::RefuseWrites as u8 && matches!(method.as_str(), "PUT" | "POST" | "DELETE") => {
            let xml =
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
            let _ = write!(
                client,
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
                xml.len()
            );
            return;
        }
        m if m == ProxyMode::Slow as u8 => std::thread::sleep(Duration::from_millis(2500)),
        _ => {}
    }
    let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
    if up.write_all(closing(&head).as_bytes()).is_err() || up.write_all(&body).is_err() {
        return;
    }
    // The response: its head rewritten to close, the rest copied until the server closes.
    let Some((head, rest)) = read_head(&mut up) else { return };
    if client.write_all(closing(&head).as_bytes()).is_err() || client.write_all(&rest).is_err() {
        return;
    }
    let _ = std::io::copy(&mut up, &mut client);
}

/// The full name (as libtest filters by) of test `name` in the test module at `module` (its
/// `module_path!()`), for a child process that runs one ignored test of that file.
pub(crate) fn child_test(module: &str, name: &str) -> String {
    let module = module.split_once("::").map_or("", |(_, m)| m);
    format!("{module}::{name}")
}
