//! `stowage check-config [SERVE FLAGS]`: runs the validation `stowage serve` runs (the same
//! [`crate::plan::plan`], with the same flags) and prints what it would run: upstreams, the
//! entries it would not serve and why, where links point and which store it would use. For
//! the shared backends it also connects to the database and the bucket, read-only, and checks
//! that they are one store's, as `serve` does when it opens the store.
//! Starts nothing and creates nothing, except with `--tools`: then it starts the upstreams,
//! lists their tools and prints which inputs blob chaining detected as taking file bytes.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use stowage_mcp::config::{PrefixMode, TransportSpec};
use stowage_mcp::run::Mode;

use super::serve::ServeArgs;
use crate::config::Config;
use crate::plan::LinksPlan;
use crate::wiring::StoreLocation;

/// `stowage check-config`: `serve`'s flags, and what else to look at.
#[derive(Debug, clap::Args)]
pub struct CheckConfigArgs {
    /// Also start the upstreams, list their tools and print, for each, the inputs that take
    /// file bytes (where a model may pass an artifact:// URI) and how each was detected;
    /// override a guess in [gateway.chaining.inputs].
    #[arg(long)]
    pub tools: bool,
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// `config_file` is where `stowage.toml` came from (`None`: defaults). Exits non-zero when
/// `serve` would refuse to start, or would start without an entry of the configuration.
pub async fn run(config: &Config, config_file: Option<&Path>, store: &StoreLocation, args: CheckConfigArgs) -> anyhow::Result<()> {
    let (tools, args) = (args.tools, args.serve);
    let plan = crate::plan::plan(config, store, &args)?;
    match config_file {
        Some(p) => println!("config: {} (valid)", p.display()),
        None => println!("config: none found, using defaults"),
    }
    if let Some(p) = &args.mcp_config {
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
    // The check serve runs when it opens a shared store: a mismatch refuses to start there.
    let store_check = crate::wiring::check_shared_store(config).await;
    match &store_check {
        Ok(Some(check)) => println!("store identity: {check}"),
        Ok(None) => {}
        Err(e) => println!("store identity: error: {e:#}"),
    }
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
    println!("upstreams ({}):", plan.upstreams.len());
    let mut problems = 0;
    for u in &plan.upstreams {
        println!("  {} (timeout {}s)", u.describe(), u.request_timeout.as_secs());
        if let TransportSpec::Stdio { command, .. } = &u.transport
            && !command_exists(command)
        {
            problems += 1;
            println!("    warning: {command} is not an executable file or on PATH");
        }
    }
    for s in &plan.skipped {
        problems += 1;
        println!("  error: not served: {s}");
    }
    if tools {
        problems += print_tools(config, &plan).await;
    }
    store_check?;
    anyhow::ensure!(problems == 0, "{problems} server entr{} cannot be served as configured", if problems == 1 { "y" } else { "ies" });
    Ok(())
}

fn command_exists(command: &str) -> bool {
    let p = Path::new(command);
    if p.components().count() > 1 {
        return p.is_file();
    }
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(command).is_file()))
}

/// `--tools`: starts the planned upstreams (without a store: nothing is kept), waits for their
/// lists and prints each tool's detected file inputs. Returns how many upstreams could not be
/// listed.
async fn print_tools(config: &Config, plan: &crate::plan::Plan) -> usize {
    let store: Arc<dyn stowage_store::ArtifactStore> = Arc::new(stowage_store::NoOpStore::new());
    let demo: stowage_mcp::InProcessFactory = Arc::new(|| {
        let (from_server, to_server) = stowage_demo::spawn_in_process();
        (Box::new(from_server), Box::new(to_server))
    });
    let gw = stowage_mcp::Gateway::start(stowage_mcp::GatewayOptions {
        config: plan.gateway.clone(),
        upstreams: plan.upstreams.clone(),
        shaper: crate::wiring::shaper(&config.transform, &config.gateway, store),
        in_process: Some(demo),
        default_session_mode: stowage_mcp::SessionMode::Shared,
        secret_env: super::serve::secret_env_vars(plan),
    });
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
