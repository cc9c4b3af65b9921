//! The agent's test harness: a real gateway in process in front of the testkit's
//! `stowage-fixture` (over stdio), offloading into a real memory store, with signed links
//! served by the real download routes on a loopback port, and a planner talking to the
//! testkit's model stub over HTTP.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use stowage_agent::{AgentConfig, AgentEvent, Backend, Planner, RunOutcome, RunRequest};
use stowage_links::{KeyRing, LinkSigner, LinksConfig};
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::shape::{Pipelines, Shaper};
use stowage_mcp::{Caller, Gateway};
use stowage_store::{ArtifactStore, MemoryStore};
pub(crate) use stowage_testkit::model_stub::{ModelStub, Turn};
use tokio::sync::mpsc;

pub(crate) struct Harness {
    pub gateway: Arc<Gateway>,
    pub store: Arc<dyn ArtifactStore>,
    pub stub: ModelStub,
    pub planner: Arc<Planner>,
    _fixture_dir: tempfile::TempDir,
    _links_server: tokio::task::JoinHandle<()>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.gateway.shutdown();
        self._links_server.abort();
        // Every test's requests, whatever it asserts: each must be one its API's published
        // rules accept (the model stub's `rule_violations`).
        if !std::thread::panicking() {
            let v = self.stub.violations();
            assert!(v.is_empty(), "requests the model API would refuse:\n{}", v.join("\n"));
        }
    }
}

fn init_log() {
    if let Ok(filter) = std::env::var("STOWAGE_TEST_LOG") {
        let _ =
            tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::new(filter)).with_writer(std::io::stderr).try_init();
    }
}

/// A private copy of the fixture binary that has this branch's tools: the target directory
/// is shared, and a build from another checkout may replace the binary at any time.
fn fixture_copy(dir: &std::path::Path) -> std::path::PathBuf {
    let copy = dir.join("stowage-fixture");
    for attempt in 0..3 {
        if attempt > 0 {
            let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["build", "-p", "stowage-testkit", "--bins"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo");
            assert!(status.success());
        }
        std::fs::copy(stowage_testkit::fixture_bin(), &copy).expect("copy the fixture");
        // The newest tools this crate's tests use.
        let has_tools = std::fs::read(&copy).is_ok_and(|b| b.windows(b"merge_results".len()).any(|w| w == b"merge_results"));
        if has_tools {
            return copy;
        }
    }
    panic!("the fixture binary has no merge_results tool");
}

pub(crate) async fn harness(script: Vec<Turn>, config: impl FnOnce(&mut AgentConfig)) -> Harness {
    harness_with(script, Backend::Openai, config).await
}

pub(crate) async fn harness_with(script: Vec<Turn>, backend: Backend, config: impl FnOnce(&mut AgentConfig)) -> Harness {
    harness_full(script, backend, false, config).await
}

/// The harness; `signed_links`: the shaper mints signed links as `serve`'s does (an HTTP run),
/// else answers carry `artifact://` URIs (as `stowage agent`'s).
pub(crate) async fn harness_full(
    script: Vec<Turn>,
    backend: Backend,
    signed_links: bool,
    config: impl FnOnce(&mut AgentConfig),
) -> Harness {
    harness_on(script, backend, signed_links, Upstream::Fixture, config).await
}

/// The upstream a harness runs the planner over.
pub(crate) enum Upstream {
    /// The testkit's `stowage-fixture` (Rust, stdio).
    Fixture,
    /// `tests/fixtures/rfc_tools.py` on FastMCP 4.1.2 (Python, stdio): Pydantic-marked tools as
    /// Python authors write them. The argument is its cancellation marker file.
    FastMcp(std::path::PathBuf, std::path::PathBuf),
}

/// The peers' Python with FastMCP, or `None` (the test skips loudly; under CI it fails).
pub(crate) fn fastmcp_python() -> Option<std::path::PathBuf> {
    stowage_testkit::require_peer("venv/bin/python")
}

/// A harness over the FastMCP tools of `tests/fixtures/rfc_tools.py`; `None` when the peer is missing.
pub(crate) async fn fastmcp_harness(
    script: Vec<Turn>,
    backend: Backend,
    signed_links: bool,
    config: impl FnOnce(&mut AgentConfig),
) -> Option<(Harness, std::path::PathBuf)> {
    let python = fastmcp_python()?;
    let marker = std::env::temp_dir().join(format!("stowage-agent-cancel-{}", uuid_like()));
    let h = harness_on(script, backend, signed_links, Upstream::FastMcp(python, marker.clone()), config).await;
    Some((h, marker))
}

fn uuid_like() -> String {
    format!("{}-{}", std::process::id(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos())
}

pub(crate) async fn harness_on(
    script: Vec<Turn>,
    backend: Backend,
    signed_links: bool,
    upstream: Upstream,
    config: impl FnOnce(&mut AgentConfig),
) -> Harness {
    init_log();
    let dir = tempfile::tempdir().unwrap();
    let spec = match upstream {
        Upstream::Fixture => {
            let command = fixture_copy(dir.path()).display().to_string();
            UpstreamSpec::new(
                "fx",
                TransportSpec::Stdio { command, args: vec![], env: Default::default(), cwd: None, inherit_env: false },
                Duration::from_secs(20),
            )
        }
        Upstream::FastMcp(python, marker) => {
            let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rfc_tools.py");
            UpstreamSpec::new(
                "rfc",
                TransportSpec::stdio(python.display().to_string(), vec![script.display().to_string(), marker.display().to_string()]),
                Duration::from_secs(30),
            )
        }
    };
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new(Default::default()));
    let sink = stowage_mcp::shape::with_dimensions(stowage_store::into_sink(store.clone()));
    let pipeline = stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), sink);
    let mut shaper = Shaper::new(Pipelines::new(Arc::new(pipeline)));
    // Signed links served by the real download routes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let links = LinksConfig { public_url: format!("http://{}", listener.local_addr().unwrap()), ..Default::default() };
    let signer = Arc::new(LinkSigner::new(KeyRing::new([("test", vec![7u8; 32])]).unwrap(), &links));
    let state = stowage_http::HttpState::new(store.clone(), signer);
    if signed_links {
        // Signed links in shaped answers, as `serve` mints them (what an HTTP run's model
        // would be handed without the planner's own profile).
        shaper = shaper.with_links(Arc::new(state.link_service()));
    }
    let links = stowage_http::Links::new(state.link_service());
    let gateway = Gateway::builder(GatewayConfig::default(), vec![spec], shaper).links(links).store(store.clone()).start();
    assert_eq!(gateway.wait_ready(Duration::from_secs(30)).await, 1, "the upstream did not start");
    let routes = stowage_http::routes(state);
    let links_server = tokio::spawn(async move {
        let _ = axum::serve(listener, routes).await;
    });
    let stub = ModelStub::start(script).await;
    let mut cfg = AgentConfig {
        base_url: stub.base_url(),
        model: "stub-model".into(),
        backend,
        request_timeout: Duration::from_secs(3),
        // Retries are their own test's business: a scripted error is played once.
        max_retries: 0,
        ..Default::default()
    };
    config(&mut cfg);
    let model = stowage_agent::model::from_config(&cfg).unwrap();
    let planner = Arc::new(Planner::new(gateway.clone(), model, cfg, Some(store.clone())));
    Harness { gateway, store, stub, planner, _fixture_dir: dir, _links_server: links_server }
}

pub(crate) fn caller(user: &str) -> Caller {
    Caller { tenant: Some("acme".into()), user: Some(user.into()) }
}

impl Harness {
    /// Runs `query` for `user`, returning the outcome and every event in order.
    pub(crate) async fn run(
        &self,
        user: &str,
        query: &str,
        session: Option<String>,
    ) -> (Result<RunOutcome, stowage_agent::AgentError>, Vec<AgentEvent>) {
        let (tx, mut rx) = mpsc::channel(4096);
        let req = RunRequest { query: query.into(), caller: caller(user), session, run_id: None };
        let out = self.planner.run(req, tx).await;
        let mut events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            events.push(e);
        }
        (out, events)
    }

    /// The bodies the model was sent, as text.
    pub(crate) fn sent(&self) -> Vec<String> {
        self.stub.requests().iter().map(|r| r.body.clone()).collect()
    }
}

/// The events' names, with consecutive `chunk`s folded into one.
pub(crate) fn names(events: &[AgentEvent]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        let n = match e {
            AgentEvent::Step { node, status, .. } => format!("step:{node}:{}", serde_json::to_value(status).unwrap().as_str().unwrap()),
            AgentEvent::ArtifactChunk { stream_id, seq, done, .. } => format!("artifact_chunk:{stream_id}:{seq}:{done}"),
            other => other.name().to_owned(),
        };
        if n == "chunk" && out.last().is_some_and(|l| l == "chunk") {
            continue;
        }
        out.push(n);
    }
    out
}

pub(crate) fn answer(raw: &str) -> Turn {
    Turn::Text(serde_json::json!({"raw_answer": raw}).to_string())
}

pub(crate) fn json_of(v: &Value) -> String {
    v.to_string()
}

/// The payload of the last event, which must be `done`.
pub(crate) fn done_payload(events: &[AgentEvent]) -> Value {
    match events.last() {
        Some(AgentEvent::Done(p, _)) => serde_json::to_value(p).unwrap(),
        other => panic!("the last event is not done: {other:?}"),
    }
}

/// The answer text a client shows after the events: what the `chunk` events carried since the
/// last `answer_reset`.
pub(crate) fn chunk_text(events: &[AgentEvent]) -> String {
    let mut shown = String::new();
    for e in events {
        match e {
            AgentEvent::Chunk { text, .. } => shown.push_str(text),
            AgentEvent::AnswerReset { .. } => shown.clear(),
            _ => {}
        }
    }
    shown
}

/// The reasons of the run's `answer_reset` events, in order.
pub(crate) fn resets(events: &[AgentEvent]) -> Vec<String> {
    events.iter().filter_map(|e| if let AgentEvent::AnswerReset { reason, .. } = e { Some(reason.clone()) } else { None }).collect()
}
