//! Shared test harness: an in-memory artifact sink, a gateway started in-process on a pipe,
//! and a small JSON-RPC client that records notifications and answers server requests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactId, ArtifactRef, ArtifactSink, PutOptions, StoreError};
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::framing::{LineReader, write_line};
use stowage_mcp::pipeline::PipelineOffloader;
use stowage_mcp::rewrite::Rewriter;
use stowage_mcp::{Gateway, downstream};
use tokio::sync::{mpsc, oneshot};

/// Keeps artifacts in memory, keyed by id, with the put options (to check scopes).
#[derive(Default)]
pub struct MemSink {
    pub items: Mutex<HashMap<String, (Bytes, PutOptions)>>,
    pub fail: bool,
}

#[async_trait]
impl ArtifactSink for MemSink {
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        if self.fail {
            return Err(StoreError::backend("write blob", "/nonexistent", std::io::Error::other("disk full")));
        }
        let sha = hex::encode(Sha256::digest(&data));
        let id = ArtifactId::from_content(opts.namespace.as_deref(), &sha);
        let r = ArtifactRef {
            uri: id.uri(),
            id: id.clone(),
            mime_type: opts.mime_type.clone(),
            size_bytes: data.len() as u64,
            filename: opts.filename.clone(),
            sha256: sha,
            scope: opts.scope.clone(),
            source: opts.source.clone(),
            created_at: time::OffsetDateTime::now_utc(),
            expires_at: None,
        };
        self.items.lock().unwrap().insert(id.to_string(), (data, opts));
        Ok(r)
    }
}

pub fn fixture_bin() -> String {
    env!("CARGO_BIN_EXE_stowage-fixture").to_owned()
}

pub fn fixture_spec(name: &str, log: Option<&std::path::Path>, timeout: Duration) -> UpstreamSpec {
    let mut env = std::collections::BTreeMap::new();
    if let Some(l) = log {
        env.insert("STOWAGE_FIXTURE_LOG".to_owned(), l.display().to_string());
    }
    UpstreamSpec {
        name: name.to_owned(),
        transport: TransportSpec::Stdio { command: fixture_bin(), args: vec![], env, cwd: None },
        request_timeout: timeout,
    }
}

/// The production rewrite step: the transform pipeline with default settings.
pub fn rewriter(sink: Arc<dyn ArtifactSink>, _config: &GatewayConfig) -> Rewriter {
    let pipeline =
        stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), stowage_mcp::pipeline::with_dimensions(sink));
    Rewriter::new(Arc::new(PipelineOffloader::new(Arc::new(pipeline))))
}

/// Logs to stderr when `STOWAGE_TEST_LOG` is set (e.g. `STOWAGE_TEST_LOG=debug`).
pub fn init_log() {
    if let Ok(filter) = std::env::var("STOWAGE_TEST_LOG") {
        let _ =
            tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::new(filter)).with_writer(std::io::stderr).try_init();
    }
}

pub fn fast_config() -> GatewayConfig {
    init_log();
    GatewayConfig { restart_backoff_initial_ms: 50, restart_backoff_max_ms: 200, resume_window_ms: 300, ..Default::default() }
}

/// A client connected to an in-process gateway over a pipe (the stdio downstream).
pub struct Client {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>,
    next: AtomicU64,
    pub notifications: Arc<Mutex<Vec<Value>>>,
    pub gateway: Arc<Gateway>,
}

/// Answers server-initiated requests (sampling, elicitation, roots).
pub type ServerRequestHandler = Arc<dyn Fn(&str, &Value) -> Value + Send + Sync>;

impl Client {
    pub async fn start(
        specs: Vec<UpstreamSpec>,
        sink: Arc<dyn ArtifactSink>,
        config: GatewayConfig,
        on_request: Option<ServerRequestHandler>,
    ) -> Client {
        let rw = rewriter(sink, &config);
        Client::start_with_rewriter_and_handler(specs, rw, config, on_request).await
    }

    pub async fn start_with_rewriter(specs: Vec<UpstreamSpec>, rw: Rewriter, config: GatewayConfig) -> Client {
        Client::start_with_rewriter_and_handler(specs, rw, config, None).await
    }

    async fn start_with_rewriter_and_handler(
        specs: Vec<UpstreamSpec>,
        rw: Rewriter,
        config: GatewayConfig,
        on_request: Option<ServerRequestHandler>,
    ) -> Client {
        let gateway = Gateway::start(config, specs, rw, Some(stowage_mcp::demo::factory()));
        let ready = gateway.wait_ready(Duration::from_secs(20)).await;
        assert_eq!(ready, gateway.upstreams.len(), "upstreams did not become ready");
        let (client_end, gw_end) = tokio::io::duplex(1 << 20);
        let (gr, gwr) = tokio::io::split(gw_end);
        tokio::spawn(downstream::stdio::serve(gateway.clone(), gr, gwr));
        let (cr, mut cw) = tokio::io::split(client_end);
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if write_line(&mut cw, &line).await.is_err() {
                    break;
                }
            }
        });
        let pending: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>> = Arc::default();
        let notifications: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (p, n, back) = (pending.clone(), notifications.clone(), tx.clone());
        tokio::spawn(async move {
            let mut lines = LineReader::new(cr, usize::MAX);
            while let Ok(Some(line)) = lines.next_line().await {
                let v: Value = serde_json::from_slice(&line).expect("gateway sent valid json");
                match (v.get("id"), v.get("method")) {
                    (Some(id), None) => {
                        if let Some(tx) = p.lock().unwrap().remove(&id.to_string()) {
                            let _ = tx.send(v);
                        }
                    }
                    (Some(id), Some(m)) => {
                        let result = on_request.as_ref().map(|h| h(m.as_str().unwrap_or(""), &v["params"]));
                        let answer = match result {
                            Some(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
                            None => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}}),
                        };
                        let _ = back.send(serde_json::to_vec(&answer).unwrap());
                    }
                    _ => n.lock().unwrap().push(v),
                }
            }
        });
        let c = Client { tx, pending, next: AtomicU64::new(1), notifications, gateway };
        let init = c
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}, "clientInfo": {"name": "t", "version": "0"}}),
            )
            .await;
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
        c.notify("notifications/initialized", json!({}));
        c
    }

    pub fn send_with_id(&self, id: u64, method: &str, params: Value) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(json!(id).to_string(), tx);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.tx.send(serde_json::to_vec(&msg).unwrap()).unwrap();
        rx
    }

    /// Sends a request and waits (up to 30 s) for the whole response message.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1_000_000;
        let rx = self.send_with_id(id, method, params);
        tokio::time::timeout(Duration::from_secs(30), rx).await.expect("response in time").expect("response")
    }

    pub async fn call(&self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args})).await
    }

    pub fn notify(&self, method: &str, params: Value) {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.tx.send(serde_json::to_vec(&msg).unwrap()).unwrap();
    }
}

/// Reads a fixture log (one received method per line).
pub fn read_log(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until `cond` holds, up to `secs`.
pub async fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// `Some(path)` of a peer installed by `scripts/gateway-peers.sh` (under `STOWAGE_PEERS_DIR`,
/// default `target/peers`); otherwise skips loudly, or panics under `CI`.
pub fn require_peer(rel: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("STOWAGE_PEERS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers"));
    // The directory is canonicalised (node resolves `..` lexically), the file is not (a
    // venv's python is a symlink that must keep its venv path).
    let p = dir.canonicalize().unwrap_or(dir).join(rel);
    if p.exists() {
        return Some(p);
    }
    let msg = format!("peer {} is not installed; run scripts/gateway-peers.sh", p.display());
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    None
}
