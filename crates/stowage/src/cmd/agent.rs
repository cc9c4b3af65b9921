//! `stowage agent "question"`: one planner run over the configured MCP servers (or the
//! bundled demo), in process. The answer goes to stdout (`--json`: the whole FinalPayload);
//! steps go to stderr as progress. A missing or unreachable model fails at once, in one line.
//!
//! Before the question is asked, every configured server must have listed its tools: one
//! still starting is waited for (as long as its own start may take: the gateway gives each
//! step of a start the server's request timeout, at most a minute), one that is down fails
//! the command with its reason, in one line: a run without a server's tools would answer
//! from less than the user configured, and say nothing.
//!
//! Exit status: 0 with the model's answer; 3 with a partial payload (`route: "partial"`: the
//! run ended early, it is printed all the same, and the last stderr line says why); 1 when
//! there is no payload (a configuration, model or server error, one line on stderr); 2 for a
//! usage error.
//!
//! Payload links point at `links.public_url`: they work while `stowage serve` runs on the
//! same store (the command says so on stderr when nothing answers there); `artifact://` URIs
//! always work with `stowage artifacts get`. `--json` prints the payload with a `run` object
//! (why it ended, steps, token usage), as the `done` event carries it.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use stowage_agent::events::StepStatus;
use stowage_agent::{AgentConfig, AgentEvent, Model, Planner, RunRequest};
use stowage_links::LinkSigner;
use stowage_mcp::{Caller, Gateway};
use stowage_store::ArtifactStore;

use crate::config::Config;

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The question to answer.
    pub question: String,
    /// A Claude Desktop / Cursor style JSON file with an "mcpServers" object (added to
    /// [gateway.servers]).
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// Print the whole FinalPayload as JSON instead of the answer text.
    #[arg(long)]
    pub json: bool,
}

/// The configured model, or `None` when `[agent]` names none. A configuration that cannot
/// work (half of it, a bad URL, an unset key variable) is an error here, for `serve`,
/// `check-config` and `agent` alike; whether the model answers is [`Model::check`]'s.
pub(crate) fn configured_model(config: &AgentConfig) -> anyhow::Result<Option<Arc<dyn Model>>> {
    if config.base_url.trim().is_empty() && config.model.trim().is_empty() {
        return Ok(None);
    }
    Ok(Some(stowage_agent::model::from_config(config)?))
}

async fn checked_model(config: &AgentConfig) -> anyhow::Result<Arc<dyn Model>> {
    let model = stowage_agent::model::from_config(config)?;
    model.check().await?;
    Ok(model)
}

pub(crate) async fn run(config: &Config, store: Arc<dyn ArtifactStore>, keys: &crate::wiring::Keys, args: AgentArgs) -> anyhow::Result<()> {
    let model = checked_model(&config.agent).await?;
    let upstreams = stowage_mcp::config::collect_upstreams(&config.gateway, args.mcp_config.as_deref(), &[])?;
    let start_limit = start_limit(&upstreams);
    config.links.validate().map_err(anyhow::Error::msg)?;
    let signer = Arc::new(LinkSigner::new(keys.ring()?, &config.links));
    let links_base = config.links.public_url.clone();
    // Built as `serve` builds its gateway; payload links point at `links.public_url`.
    let parts = crate::wiring::GatewayParts {
        gateway: config.gateway.clone(),
        upstreams,
        store: Some(store.clone()),
        links: Some(stowage_http::Links::new(stowage_http::LinkService::new(store.clone(), signer))),
        hosts: Some(Arc::new(stowage_mcp::hosts::Hosts::new(&config.hosts, &config.transform.image_preview)?)),
        state_dir: None,
        apps: None,
    };
    let gw = crate::wiring::gateway(config, parts).start();
    if let Err(e) = wait_for_upstreams(&gw, start_limit).await {
        gw.shutdown();
        return Err(e);
    }
    let planner = Planner::new(gw.clone(), model, config.agent.clone(), Some(store));
    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
    let progress = tokio::spawn(async move {
        let mut err = std::io::stderr();
        while let Some(e) = rx.recv().await {
            let line = match e {
                AgentEvent::Step { node, status: StepStatus::Started, .. } => format!("→ {node}"),
                AgentEvent::Step { node, status: StepStatus::Ok, latency_ms, .. } => format!("✓ {node} ({latency_ms:.0} ms)"),
                AgentEvent::Step { node, status: StepStatus::Error, latency_ms, .. } => format!("✗ {node} failed ({latency_ms:.0} ms)"),
                AgentEvent::ArtifactChunk { stream_id, seq, done, .. } => {
                    format!("  artifact {stream_id} #{seq}{}", if done { " (done)" } else { "" })
                }
                _ => continue,
            };
            let _ = writeln!(err, "{line}");
        }
    });
    let req = RunRequest::new(args.question, Caller::local());
    let outcome = planner.run(req, tx).await;
    let _ = progress.await;
    gw.shutdown();
    let outcome = outcome?;
    let partial = outcome.payload.route.as_deref() == Some("partial");
    if !outcome.payload.artifacts.is_empty() && !serving(&links_base).await {
        eprintln!(
            "note: the payload's download links point at {links_base}, where nothing answers now: run `stowage serve` on the same store, or fetch artifact:// URIs with `stowage artifacts get`"
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stowage_agent::events::done_json(&outcome.payload, &outcome.run))?);
    } else {
        println!("{}", outcome.payload.raw_answer);
        for w in &outcome.payload.warnings {
            eprintln!("warning: {w}");
        }
    }
    if partial {
        let why = outcome.payload.warnings.last().map_or("the run ended early", String::as_str);
        return Err(PartialAnswer(format!("the answer is partial ({}): {why}", outcome.run.finish_reason)).into());
    }
    Ok(())
}

/// A run that ended with a partial payload (printed): the command exits with
/// [`PartialAnswer::EXIT_CODE`] and this one line.
#[derive(Debug)]
pub(crate) struct PartialAnswer(String);

impl std::fmt::Display for PartialAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PartialAnswer {}

impl PartialAnswer {
    /// The exit status of a partial payload (docs/agent.md).
    pub(crate) const EXIT_CODE: u8 = 3;
}

/// How long the servers' start may take at most: each step of a start (the process or
/// connection, `initialize`, the first lists) has the server's request timeout, at most a
/// minute, as the gateway's supervisor gives it.
fn start_limit(upstreams: &[stowage_mcp::config::UpstreamSpec]) -> Duration {
    let step = upstreams.iter().map(|u| u.request_timeout.min(Duration::from_secs(60))).max().unwrap_or_default();
    step * 3 + Duration::from_secs(5)
}

/// Waits while any server is starting (alive, not listed yet), saying so on stderr when it
/// takes a while; fails in one line when one is down or never got its tools listed.
async fn wait_for_upstreams(gw: &Gateway, limit: Duration) -> anyhow::Result<()> {
    // A start that takes longer than this is worth a line on stderr.
    const PATIENCE: Duration = Duration::from_secs(3);
    let settled = tokio::time::timeout(PATIENCE.min(limit), gw.wait_settled(limit)).await;
    if settled.is_err() {
        let starting: Vec<String> = gw.unready_upstreams().into_iter().filter(|(_, why)| why == "still starting").map(|(n, _)| n).collect();
        if !starting.is_empty() {
            eprintln!("waiting for {} to start (up to {}s)…", starting.join(", "), limit.as_secs());
        }
        gw.wait_settled(limit.saturating_sub(PATIENCE)).await;
    }
    // Down, or still starting when the limit ran out: its tools are not in the catalog.
    let missing: Vec<(String, String)> = gw.unready_upstreams();
    if let Some((name, why)) = missing.first() {
        let why = if why == "still starting" { format!("it did not finish starting within {}s", limit.as_secs()) } else { why.clone() };
        let more = if missing.len() > 1 {
            format!(" (and {} more: {})", missing.len() - 1, missing[1..].iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "))
        } else {
            String::new()
        };
        anyhow::bail!(
            "MCP server {name} is not available, so its tools are missing: {why}{more}; fix its entry (command, URL) or remove it from the configuration"
        );
    }
    Ok(())
}

/// Whether something answers at the links' base URL (a `serve` on the same store).
async fn serving(base: &str) -> bool {
    let Ok(url) = url::Url::parse(base) else { return false };
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    tokio::time::timeout(Duration::from_millis(500), tokio::net::TcpStream::connect((host, port))).await.is_ok_and(|r| r.is_ok())
}
