//! Shared harness for the gateway's integration tests: a gateway started in-process in front
//! of any upstreams, reached over its stdio downstream (a pipe) or its HTTP one, with the
//! testkit's client, fixtures and in-memory sink.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use stowage_core::ArtifactSink;
use stowage_mcp::config::{GatewayConfig, TransportSpec, UpstreamSpec};
use stowage_mcp::shape::{Pipelines, Shaper};
use stowage_mcp::{Gateway, GatewayBuilder, InProcessFactory, SessionMode};
// Re-exported for the test files; not every file uses every one.
#[allow(unused_imports)]
pub(crate) use stowage_testkit::{MemSink, RpcClient, ServerRequestHandler, fixture_bin};

pub(crate) fn fixture_spec(name: &str, log: Option<&std::path::Path>, timeout: Duration) -> UpstreamSpec {
    let mut env = std::collections::BTreeMap::new();
    if let Some(l) = log {
        env.insert("STOWAGE_FIXTURE_LOG".to_owned(), l.display().to_string());
    }
    let command = fixture_bin().display().to_string();
    UpstreamSpec::new(name, TransportSpec::Stdio { command, args: vec![], env, cwd: None, inherit_env: false }, timeout)
}

/// The production shaper: the transform pipeline with default settings.
pub(crate) fn shaper(sink: Arc<dyn ArtifactSink>) -> Shaper {
    let pipeline =
        stowage_transform::Pipeline::new(stowage_transform::TransformConfig::default(), stowage_mcp::shape::with_dimensions(sink));
    Shaper::new(Pipelines::new(Arc::new(pipeline)))
}

/// A tool result shaped as an unknown client (the default profile) gets it.
pub(crate) async fn shape(shaper: &Shaper, ctx: &stowage_mcp::shape::CallContext, result: &serde_json::Value) -> serde_json::Value {
    let host = stowage_mcp::hosts::HostProfile::default_profile();
    let job = stowage_mcp::shape::Job { ctx, host: &host };
    shaper.shape(job, result.to_string()).await.value
}

/// The bundled demo server, in-process.
pub(crate) fn demo() -> InProcessFactory {
    Arc::new(|| {
        let (from_server, to_server) = stowage_demo::spawn_in_process();
        (Box::new(from_server), Box::new(to_server))
    })
}

/// Logs to stderr when `STOWAGE_TEST_LOG` is set (e.g. `STOWAGE_TEST_LOG=debug`).
pub(crate) fn init_log() {
    if let Ok(filter) = std::env::var("STOWAGE_TEST_LOG") {
        let _ =
            tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::new(filter)).with_writer(std::io::stderr).try_init();
    }
}

pub(crate) fn fast_config() -> GatewayConfig {
    init_log();
    GatewayConfig { restart_backoff_initial_ms: 50, restart_backoff_max_ms: 200, resume_window_ms: 300, ..Default::default() }
}

/// Starts a gateway with `shaper` in front of `specs` and waits until every upstream listed
/// its tools.
pub(crate) async fn start_gateway(specs: Vec<UpstreamSpec>, shaper: Shaper, config: GatewayConfig, mode: SessionMode) -> Arc<Gateway> {
    started(builder(specs, shaper, config, mode)).await
}

/// The builder [`start_gateway`] starts (the bundled demo in process), for a test to add a
/// store, links, apps or host profiles to.
pub(crate) fn builder(specs: Vec<UpstreamSpec>, shaper: Shaper, config: GatewayConfig, mode: SessionMode) -> GatewayBuilder {
    Gateway::builder(config, specs, shaper).in_process(demo()).session_mode(mode)
}

/// Starts `builder`'s gateway and waits until every upstream listed its tools.
pub(crate) async fn started(builder: GatewayBuilder) -> Arc<Gateway> {
    stowage_mcp::metrics::install();
    let gw = builder.start();
    let ready = gw.wait_ready(Duration::from_secs(20)).await;
    assert_eq!(ready, gw.upstreams.len(), "upstreams did not become ready");
    gw
}

/// A client connected to an in-process gateway over a pipe (the stdio downstream).
pub(crate) struct Client {
    pub rpc: RpcClient,
    pub gateway: Arc<Gateway>,
    /// Every tool's outputSchema, as this client was told by tools/list (fetched once).
    schemas: tokio::sync::OnceCell<std::collections::HashMap<String, serde_json::Value>>,
}

impl std::ops::Deref for Client {
    type Target = RpcClient;
    fn deref(&self) -> &RpcClient {
        &self.rpc
    }
}

impl Client {
    /// `tools/call`, checked as a validating client checks it: a result of a tool that
    /// declares an outputSchema must validate against it (see [`assert_matches_output_schema`]).
    /// Every test that calls tools through this client gets the check.
    pub(crate) async fn call(&self, tool: &str, args: serde_json::Value) -> serde_json::Value {
        let response = self.rpc.call(tool, args).await;
        let schemas = self
            .schemas
            .get_or_init(|| async {
                let list = self.rpc.request("tools/list", serde_json::json!({})).await;
                list["result"]["tools"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| Some((t["name"].as_str()?.to_owned(), t.get("outputSchema")?.clone())))
                    .collect()
            })
            .await;
        if let (Some(schema), Some(result)) = (schemas.get(tool), response.get("result")) {
            assert_matches_output_schema(schema, result);
        }
        response
    }

    pub(crate) async fn start(
        specs: Vec<UpstreamSpec>,
        sink: Arc<dyn ArtifactSink>,
        config: GatewayConfig,
        on_request: Option<ServerRequestHandler>,
    ) -> Client {
        Client::start_with_shaper_and_handler(specs, shaper(sink), config, on_request).await
    }

    pub(crate) async fn start_with_shaper(specs: Vec<UpstreamSpec>, rw: Shaper, config: GatewayConfig) -> Client {
        Client::start_with_shaper_and_handler(specs, rw, config, None).await
    }

    async fn start_with_shaper_and_handler(
        specs: Vec<UpstreamSpec>,
        rw: Shaper,
        config: GatewayConfig,
        on_request: Option<ServerRequestHandler>,
    ) -> Client {
        let gateway = start_gateway(specs, rw, config, SessionMode::Shared).await;
        Client::connect(gateway, on_request, serde_json::json!({"sampling": {}})).await
    }

    /// Connects one more stdio client to `gateway`, declaring `capabilities`.
    pub(crate) async fn connect(
        gateway: Arc<Gateway>,
        on_request: Option<ServerRequestHandler>,
        capabilities: serde_json::Value,
    ) -> Client {
        let (client_end, gw_end) = tokio::io::duplex(1 << 20);
        let (gr, gwr) = tokio::io::split(gw_end);
        tokio::spawn(stowage_mcp::serve_stdio(gateway.clone(), gr, gwr));
        let (cr, cw) = tokio::io::split(client_end);
        let rpc = RpcClient::connect(cr, cw, on_request);
        let init = rpc.initialize("2025-06-18", capabilities).await;
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
        Client { rpc, gateway, schemas: tokio::sync::OnceCell::new() }
    }
}

/// Reads a fixture log (one received method per line).
pub(crate) fn read_log(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until `cond` holds, up to `secs`.
pub(crate) async fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// `Some(path)` of a peer installed by `scripts/gateway-peers.sh`; otherwise skips loudly,
/// or panics under `CI` (see [`stowage_testkit::require_peer`]).
pub(crate) fn require_peer(rel: &str) -> Option<std::path::PathBuf> {
    stowage_testkit::require_peer(rel)
}

/// What the Python SDK and the Inspector check of a `tools/call` result whose tool declares
/// `schema` as its outputSchema: unless it is an `isError` result, it has structuredContent
/// and that validates (with the `jsonschema` crate, as the gateway itself checks).
pub(crate) fn assert_matches_output_schema(schema: &serde_json::Value, result: &serde_json::Value) {
    if result.get("isError") == Some(&serde_json::Value::Bool(true)) {
        return;
    }
    let sc =
        result.get("structuredContent").unwrap_or_else(|| panic!("a tool with an outputSchema returned no structuredContent: {result}"));
    let validator = jsonschema::validator_for(schema).expect("the tool's outputSchema compiles");
    let errors: Vec<String> = validator.iter_errors(sc).map(|e| format!("{}: {e}", e.instance_path().as_str())).collect();
    assert!(errors.is_empty(), "structuredContent does not validate against the tool's outputSchema: {errors:?}\n{sc}");
}

/// The signed-link routes over `store` on a loopback port: their base URL, and the link
/// service (sharing the routes' upload slots) to hand the gateway.
pub(crate) async fn serve_links(store: Arc<dyn stowage_store::ArtifactStore>) -> (String, stowage_http::LinkService) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let links = stowage_links::LinksConfig { public_url: base.clone(), ..Default::default() };
    let ring = stowage_links::KeyRing::new([("k1", vec![7u8; 32])]).unwrap();
    let state = stowage_http::HttpState::new(store, Arc::new(stowage_links::LinkSigner::new(ring, &links)));
    let service = state.link_service();
    tokio::spawn(async move { axum::serve(listener, stowage_http::routes(state)).await });
    (base, service)
}
