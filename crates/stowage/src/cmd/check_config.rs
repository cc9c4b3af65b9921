//! `stowage check-config [SERVE FLAGS]`: runs the validation `stowage serve` runs (the same
//! [`crate::plan::plan`], with the same flags) and prints what it would run: upstreams, the
//! entries it would not serve and why, where links point and which store it would use. For
//! the shared backends it also connects to the database and the bucket, read-only, and checks
//! that they are one store's, as `serve` does when it opens the store.
//! Starts nothing and creates nothing (except with `--tools`, which starts the upstreams, lists
//! their tools and prints which inputs blob chaining detected as taking file bytes). Upstreams
//! are probed (`--no-probe` skips it): an HTTP one gets an `initialize` within a few seconds,
//! a command is started as a host would start it and asked the same, then stopped, so one that
//! fails says why (its exit status and the last lines of its stderr) before a host meets it.
//! Arguments a host would resolve wrongly (a `~`, a relative path, a missing file) are warnings.
//!
//! Errors (exit 1) are what `serve` refuses or leaves out; warnings (exit 0, or 1 with
//! `--strict`) are what `serve` serves as unavailable: the same entries, in the same words, as
//! `serve` prints at start.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use stowage_mcp::config::PrefixMode;
use stowage_mcp::run::Mode;

use super::serve::ServeArgs;
use crate::config::{Config, ConfigSource};
use crate::plan::LinksPlan;
use crate::wiring::StoreLocation;

/// How long the probe of one HTTP upstream may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a command may take to answer `initialize`: what a host no profile names is given
/// by `serve` for its upstreams to start.
const STDIO_PROBE_TIMEOUT: Duration = Duration::from_millis(stowage_mcp::hosts::DEFAULT_STARTUP_WAIT_MS);

#[derive(Debug, Args)]
pub(crate) struct CheckConfigArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Answer as `serve` would when started in DIR (as a host starts it, often in /): the
    /// stowage.toml there and every relative path are looked up from it.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Do not probe upstreams (by default each HTTP one gets an initialize request, 3 s at
    /// most, and each command is started and asked the same, 8 s at most, then stopped).
    #[arg(long)]
    pub no_probe: bool,
    /// Exit non-zero on warnings too (upstreams that are unreachable or whose command is
    /// missing, an agent model that does not answer).
    #[arg(long)]
    pub strict: bool,
    /// Also start the upstreams, list their tools and print, for each, the inputs that take
    /// file bytes (where a model may pass an artifact:// URI) and how each was detected;
    /// override a guess in [gateway.chaining.inputs].
    #[arg(long)]
    pub tools: bool,
}

/// `source` is where `stowage.toml` came from. Exits non-zero when `serve` would refuse to
/// start, or would start without an entry of the configuration (and, with `--strict`, when an
/// upstream would start as unavailable).
pub(crate) async fn run(
    config: &Config,
    source: &ConfigSource,
    store: &StoreLocation,
    keys: &crate::wiring::Keys,
    cli: CheckConfigArgs,
) -> anyhow::Result<()> {
    let plan = crate::plan::plan(config, keys, &cli.serve)?;
    print_plan(config, source, store, &cli, &plan);
    // The check serve runs when it opens a shared store: a mismatch refuses to start there.
    let store_check = crate::wiring::check_shared_store(config, keys).await;
    let clock_off = print_store_check(&store_check);
    print_names(&plan);
    let (mut problems, warnings) = print_upstreams(&plan, cli.no_probe).await;
    if cli.tools {
        problems += print_tools(config, &plan).await;
    }
    let agent_down = print_agent(config).await?;
    store_check?;
    anyhow::ensure!(problems == 0, "{problems} server entr{} cannot be served as configured", if problems == 1 { "y" } else { "ies" });
    if warnings > 0 {
        let what = format!("{warnings} upstream{} would start as unavailable", if warnings == 1 { "" } else { "s" });
        anyhow::ensure!(!cli.strict, "{what} (--strict)");
        println!("{what}: serve starts, lists them as unavailable and keeps trying");
    }
    if let Some(e) = agent_down {
        anyhow::ensure!(!cli.strict, "the agent's model is not available: {e} (--strict)");
    }
    if let Some(w) = clock_off {
        anyhow::ensure!(!cli.strict, "{w} (--strict)");
    }
    Ok(())
}

/// Where the configuration came from, and what serving would listen on, link through and
/// store in.
fn print_plan(config: &Config, source: &ConfigSource, store: &StoreLocation, cli: &CheckConfigArgs, plan: &crate::plan::Plan) {
    match source.path() {
        Some(_) => println!("config: {source} (valid)"),
        None => println!("config: {source}"),
    }
    if let Some(dir) = &cli.cwd {
        println!("working directory: {} (--cwd)", dir.display());
    }
    if let Some(p) = &cli.serve.mcp_config {
        println!("mcp servers: {}", p.display());
    }
    match &plan.mode {
        Mode::Http { listen } => println!("listen: http://{listen}/mcp"),
        Mode::Stdio => println!("listen: stdio (one client on stdin/stdout)"),
    }
    if plan.unauthenticated_exposure {
        println!("warning: listening on {} without authentication (--allow-unauthenticated)", plan.gateway.listen);
    }
    match &plan.links {
        LinksPlan::Http(base) => println!("links: {}/artifacts/… (from {})", base.url, base.origin),
        LinksPlan::Loopback { wanted } => {
            println!("links: loopback listener at {wanted}, or a free loopback port when that one is taken")
        }
        LinksPlan::Off => println!("links: off (artifact:// URIs only)"),
    }
    println!("store: {}", store.describe(config.store.backend));
}

/// A shared store's identity and the clock against its database's; the clock warning, when
/// there is one (`--strict` fails on it).
fn print_store_check(store_check: &anyhow::Result<Option<(stowage_store::StoreCheck, time::Duration)>>) -> Option<String> {
    match store_check {
        Ok(Some((check, skew))) => {
            println!("store identity: {check}");
            if skew.unsigned_abs() > stowage_store::MAX_CLOCK_SKEW {
                println!("clock: warning: {}", stowage_store::skew_warning(*skew));
                return Some(stowage_store::skew_warning(*skew));
            }
            println!(
                "clock: {:.1}s from the database's (within {}s; the store decides expiry and gc by the database's)",
                // Rounded to tenths first, and + 0.0 so a few ms behind is "0.0s", not "-0.0s".
                (skew.whole_milliseconds() as f64 / 100.0).round() / 10.0 + 0.0,
                stowage_store::MAX_CLOCK_SKEW.as_secs()
            );
            None
        }
        Ok(None) => None,
        Err(e) => {
            println!("store identity: error: {e:#}");
            None
        }
    }
}

/// How tools are named: prefixed with their server's name or not.
fn print_names(plan: &crate::plan::Plan) {
    let prefixed = match plan.gateway.prefix {
        PrefixMode::Auto => plan.upstreams.len() > 1,
        PrefixMode::Always => true,
        PrefixMode::Never => false,
    };
    println!(
        "names: {} (separator {:?})",
        if prefixed { "prefixed with the server name" } else { "as the server names them" },
        plan.gateway.separator
    );
}

/// Each upstream with its warnings and, unless `no_probe`, whether it answers; the entries
/// left out. Returns (problems, warnings): entries that cannot be served, and upstreams that
/// would start as unavailable.
async fn print_upstreams(plan: &crate::plan::Plan, no_probe: bool) -> (usize, usize) {
    println!("upstreams ({}):", plan.upstreams.len());
    let mut problems = 0;
    let mut warnings = 0;
    let probes = if no_probe { Vec::new() } else { probe_all(plan).await };
    for (i, u) in plan.upstreams.iter().enumerate() {
        println!("  {} (timeout {}s)", u.describe(), u.request_timeout.as_secs());
        for w in plan.warnings.iter().filter(|w| w.starts_with(&format!("server {:?}:", u.name))) {
            warnings += 1;
            println!("    warning: {w}");
        }
        match probes.get(i) {
            Some(Some(Ok(what))) => println!("    probe: {what}"),
            Some(Some(Err(why))) => {
                warnings += 1;
                let what = if matches!(u.transport, stowage_mcp::config::TransportSpec::Stdio { .. }) {
                    "does not start"
                } else {
                    "cannot be reached"
                };
                println!(
                    "    warning: server {:?} {what}: {why}; serve lists its last known tools (or one stand-in) as unavailable until it answers",
                    u.name
                );
            }
            Some(None) | None => {}
        }
    }
    for s in &plan.skipped {
        problems += 1;
        println!("  error: not served: {s}");
    }
    (problems, warnings)
}

/// Every upstream probed at once: what it answered, why it did not, or nothing (not probed).
async fn probe_all(plan: &crate::plan::Plan) -> Vec<Option<Result<String, String>>> {
    let secrets = plan.secret_env.clone();
    futures::future::join_all(plan.upstreams.iter().map(|u| {
        let missing = plan.warnings.iter().any(|w| w.starts_with(&format!("server {:?}:", u.name)) && w.contains("not an executable"));
        let secrets = &secrets;
        async move {
            match stowage_mcp::probe_upstream(u, PROBE_TIMEOUT).await {
                Some(r) => Some(r.map_err(|e| e.to_string())),
                // A command is started as a host would start it, within the time a host
                // gives it; one already reported missing is not run.
                None if !missing => stowage_mcp::probe_stdio(u, STDIO_PROBE_TIMEOUT, secrets).await,
                None => None,
            }
        }
    }))
    .await
}

/// The agent as serve checks it: a configuration that cannot work refuses to start there (an
/// error here), a model that does not answer (or not as configured) leaves /agent/runs
/// answering 503 while the gateway serves: a warning here, as a down upstream is. Returns
/// that model error.
async fn print_agent(config: &Config) -> anyhow::Result<Option<stowage_agent::model::ModelError>> {
    Ok(match crate::cmd::agent::configured_model(&config.agent)? {
        None => {
            println!("agent: off (no [agent] base_url and model)");
            None
        }
        Some(model) => match model.check().await {
            Ok(()) => {
                println!("agent: model {} at {} answers", config.agent.model, config.agent.base_url);
                None
            }
            Err(e) => {
                println!("agent: warning: {e} (serve starts, with /agent/runs answering 503 until the model answers)");
                Some(e)
            }
        },
    })
}

/// `--tools`: starts the planned upstreams (without a store: nothing is kept), waits for their
/// lists and prints each tool's detected file inputs. Returns how many upstreams could not be
/// listed.
async fn print_tools(config: &Config, plan: &crate::plan::Plan) -> usize {
    // Nothing is kept (no store, no state dir): a listing check leaves nothing behind.
    let parts = crate::wiring::GatewayParts {
        gateway: plan.gateway.clone(),
        upstreams: plan.upstreams.clone(),
        store: None,
        links: None,
        hosts: None,
        state_dir: None,
        apps: None,
    };
    let gw = crate::wiring::gateway(config, parts).start();
    // Connected is not listed: wait for every upstream's lists too (or for it to be down).
    let wait = plan.gateway.request_timeout().min(Duration::from_secs(30));
    gw.wait_ready(wait).await;
    gw.wait_settled(wait).await;
    let catalog = gw.catalog();
    let unready = gw.unready_upstreams();
    let auto = if plan.gateway.chaining.auto { "on" } else { "off ([gateway.chaining] auto = false)" };
    println!("file inputs (a model may pass an artifact:// URI there; detection {auto}):");
    for (i, u) in plan.upstreams.iter().enumerate() {
        if let Some((_, why)) = unready.iter().find(|(n, _)| n == &u.name) {
            println!("  {}: error: not listed: {why}", u.name);
            continue;
        }
        let tools: Vec<_> = catalog.tools.iter().filter(|t| t.upstream == i).collect();
        let chained: Vec<_> = tools.iter().filter(|t| t.inputs.as_ref().is_some_and(|d| !d.inputs.is_empty())).collect();
        println!("  {}: {} tools, {} with file inputs", u.name, tools.len(), chained.len());
        for t in tools {
            if t.blobs.is_some() {
                println!("    {}: declares its blobs (_awp.blob / x-mcp-file)", t.name);
            }
            match stowage_mcp::chaining::detect::tool_rule(plan.gateway.chaining.inputs.get(&t.name)) {
                Some(rule) => println!("    {}: rule {:?} for every URI ([gateway.chaining.inputs])", t.name, rule.as_str()),
                None => {
                    let Some(found) = &t.inputs else { continue };
                    let d = stowage_mcp::chaining::DetectedTool { tool: t.name.clone(), inputs: (**found).clone() };
                    for line in d.lines() {
                        println!("    {}: {line}", t.name);
                    }
                }
            }
        }
    }
    gw.shutdown();
    unready.len()
}
