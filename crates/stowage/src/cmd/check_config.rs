//! `stowage check-config`: validates `stowage.toml` and the `mcpServers` file and prints what
//! `stowage serve` would run, without starting anything.

use std::path::{Path, PathBuf};

use clap::Args;
use stowage_mcp::GatewayConfig;
use stowage_mcp::config::TransportSpec;

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// A Claude Desktop / Cursor style JSON file with an "mcpServers" object.
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// The stdio server `serve -- CMD ARGS…` would wrap.
    #[arg(last = true, value_name = "CMD ARGS")]
    pub command: Vec<String>,
}

/// `config_file` is where `stowage.toml` came from (`None`: defaults).
pub async fn run(gateway: &GatewayConfig, config_file: Option<&Path>, args: CheckConfigArgs) -> anyhow::Result<()> {
    let upstreams = stowage_mcp::config::collect_upstreams(gateway, args.mcp_config.as_deref(), &args.command)?;
    match config_file {
        Some(p) => println!("config: {} (valid)", p.display()),
        None => println!("config: none found, using defaults"),
    }
    if let Some(p) = &args.mcp_config {
        println!("mcp servers: {} (valid)", p.display());
    }
    println!("listen: http://{}/mcp", gateway.listen);
    println!(
        "names: {} (separator {:?})",
        match gateway.prefix {
            stowage_mcp::config::PrefixMode::Auto if upstreams.len() > 1 => "prefixed with the server name",
            stowage_mcp::config::PrefixMode::Auto | stowage_mcp::config::PrefixMode::Never => "as the server names them",
            stowage_mcp::config::PrefixMode::Always => "prefixed with the server name",
        },
        gateway.separator
    );
    println!("upstreams ({}):", upstreams.len());
    let mut problems = 0;
    for u in &upstreams {
        println!("  {} (timeout {}s)", u.describe(), u.request_timeout.as_secs());
        if let TransportSpec::Stdio { command, .. } = &u.transport
            && !command_exists(command)
        {
            problems += 1;
            println!("    warning: {command} is not an executable file or on PATH");
        }
    }
    if problems > 0 {
        anyhow::bail!("{problems} upstream command(s) not found");
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
