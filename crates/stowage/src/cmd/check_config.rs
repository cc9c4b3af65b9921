//! `stowage check-config [SERVE FLAGS]`: runs the validation `stowage serve` runs (the same
//! [`crate::plan::plan`], with the same flags) and prints what it would run: upstreams, the
//! entries it would not serve and why, where links point and which store it would use. For
//! the shared backends it also connects to the database and the bucket, read-only, and checks
//! that they are one store's, as `serve` does when it opens the store.
//! Starts nothing and creates nothing.

use std::path::Path;

use stowage_mcp::config::{PrefixMode, TransportSpec};
use stowage_mcp::run::Mode;

use super::serve::ServeArgs;
use crate::config::Config;
use crate::plan::LinksPlan;
use crate::wiring::StoreLocation;

/// `config_file` is where `stowage.toml` came from (`None`: defaults). Exits non-zero when
/// `serve` would refuse to start, or would start without an entry of the configuration.
pub async fn run(config: &Config, config_file: Option<&Path>, store: &StoreLocation, args: ServeArgs) -> anyhow::Result<()> {
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
    // The agent as serve checks it: a configuration that cannot work refuses to start there,
    // a model that does not answer (or not as configured) leaves /agent/runs answering 503.
    let mut agent_problem = None;
    match crate::cmd::agent::configured_model(&config.agent)? {
        None => println!("agent: off (no [agent] base_url and model)"),
        Some(model) => match model.check().await {
            Ok(()) => println!("agent: model {} at {} answers", config.agent.model, config.agent.base_url),
            Err(e) => {
                println!("agent: error: {e} (serve would start, with /agent/runs answering 503)");
                agent_problem = Some(e);
            }
        },
    }
    store_check?;
    anyhow::ensure!(problems == 0, "{problems} server entr{} cannot be served as configured", if problems == 1 { "y" } else { "ies" });
    if let Some(e) = agent_problem {
        anyhow::bail!("the agent's model is not available: {e}");
    }
    Ok(())
}

fn command_exists(command: &str) -> bool {
    let p = Path::new(command);
    if p.components().count() > 1 {
        return p.is_file();
    }
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(command).is_file()))
}
