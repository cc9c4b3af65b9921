//! `stowage links status|stop`: the store's link server (see [`crate::link_server`]), which a
//! stdio gateway starts so that the download links it hands out keep working after the host's
//! session ends. `links serve` is the server itself, started by gateways (hidden).

use std::path::PathBuf;

use clap::Subcommand;

use crate::link_server::{self, Files};
use crate::wiring::StoreLocation;

#[derive(Debug, Subcommand)]
pub(crate) enum LinksCommand {
    /// Where this store's download links are served, by which process, and until when.
    Status,
    /// Stop this store's link server now (its links stop working; the next stdio gateway
    /// starts a new one).
    Stop,
    /// Run the link server (stdio gateways start it on their own).
    #[command(hide = true)]
    Serve {
        /// Loopback ports to try, in order (0: any free port).
        #[arg(long, value_delimiter = ',', required = true)]
        ports: Vec<u16>,
        /// The configuration the gateway that starts it read.
        #[arg(long, value_name = "FILE", conflicts_with = "no_config_file")]
        config_file: Option<PathBuf>,
        /// The gateway that starts it read no configuration file: the defaults.
        #[arg(long)]
        no_config_file: bool,
    },
}

pub(crate) async fn status(location: &StoreLocation) -> anyhow::Result<()> {
    let files = Files::of(&location.dir);
    let Some(state) = files.read_state() else {
        println!("no link server runs for the store {}", location.dir.display());
        println!("(a stdio gateway starts one when it first hands out a download link)");
        return Ok(());
    };
    if !files.server_alive() {
        println!("no link server runs for the store {}", location.dir.display());
        println!("(the one recorded, pid {} on port {}, is gone; the next stdio gateway starts a new one)", state.pid, state.port);
        return Ok(());
    }
    match link_server::identity(&state).await {
        Ok(who) if who.pid == state.pid => {
            println!("download links of the store {} are served at {}/artifacts/…", location.dir.display(), state.url());
            println!("  by pid {} (stowage {}), since {}", state.pid, state.version, rfc3339(state.started_at));
            println!(
                "  until at least {} (while a stdio gateway uses it, longer; then until the last link it could have minted expires)",
                rfc3339(who.until)
            );
            println!("  log: {}", files.log().display());
        }
        Ok(who) => anyhow::bail!("{} answers for another link server (pid {}) than this store's (pid {})", state.url(), who.pid, state.pid),
        Err(e) => anyhow::bail!("the link server of this store (pid {}, {}) does not answer: {e:#}", state.pid, state.url()),
    }
    Ok(())
}

pub(crate) async fn stop(location: &StoreLocation) -> anyhow::Result<()> {
    let files = Files::of(&location.dir);
    match files.read_state() {
        Some(state) if files.server_alive() => {
            link_server::stop(&state).await?;
            eprintln!("stopped the link server (pid {}, {})", state.pid, state.url());
        }
        _ => eprintln!("no link server runs for the store {}", location.dir.display()),
    }
    Ok(())
}

fn rfc3339(unix: u64) -> String {
    i64::try_from(unix)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| unix.to_string())
}
