//! `stowage`: keeps the bytes MCP tools return out of an LLM's context.
//!
//! This binary is wiring only: it parses arguments, loads `stowage.toml`, opens the configured
//! store and hands over to the subcommand modules in [`cmd`]. Errors are printed as one line
//! (`error: …`) with exit status 1; usage errors exit with 2; `stowage agent` exits with 3 when
//! its answer is a partial payload (printed before the line that says why).
#![forbid(unsafe_code)]

mod cmd;
mod config;
mod link_server;
mod logging;
mod paths;
mod plan;
mod wiring;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::config::Config;

/// mimalloc, not the system's malloc: reading data (jq, describe) builds and frees one heap
/// node per JSON value, and glibc's allocator spent about half of such a call consolidating
/// and unlinking chunks (BENCHMARKS.md, "Asking the data").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "stowage", version, about, long_about = None)]
struct Cli {
    /// Configuration file. Default: $STOWAGE_CONFIG, else the first stowage.toml found beside
    /// the --mcp-config file, in the user config directory (~/.config/stowage/ on Linux), or in
    /// the working directory.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Store directory for the fs backend (overrides store.dir; default: `stowage` in the
    /// platform's data directory, e.g. ~/.local/share/stowage).
    #[arg(long, global = true, env = "STOWAGE_STORE", value_name = "DIR")]
    store: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

// Clap prints these comments as --help, where `[agent]` is a stowage.toml section, not a
// link: rustdoc's link checks do not apply to them.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the MCP gateway in front of your MCP servers (the bundled demo server when none is
    /// configured): heavy tool results become artifact links.
    Serve(cmd::serve::ServeArgs),
    /// Run the checks `serve` runs (give it the same flags) and print what it would run:
    /// upstreams, entries it would skip and why, the link base URL and the store.
    CheckConfig(cmd::check_config::CheckConfigArgs),
    /// Run a Tableau-style 500 KB base64 PDF tool result through the pipeline into the store,
    /// show what the model sees instead, and read the PDF back.
    Demo(cmd::demo::DemoArgs),
    /// Run one tool result (a file or stdin) through the transform pipeline; prints the result
    /// the model would see, heavy parts stored as artifacts.
    Transform(cmd::transform::TransformArgs),
    /// Store, fetch, list and clean up artifacts.
    #[command(subcommand)]
    Artifacts(cmd::artifacts::ArtifactsCommand),
    /// Print a fresh signed download link for an artifact.
    SignUrl(cmd::sign_url::SignUrlArgs),
    /// The link server that keeps a stdio gateway's download links working after the host's
    /// session ends: where it serves and until when (status), or stop it.
    #[command(subcommand)]
    Links(cmd::links::LinksCommand),
    /// Ask the agent planner a question over your MCP tools ([agent] in stowage.toml names the
    /// model); prints the answer, or with --json the whole FinalPayload. Steps go to stderr.
    Agent(cmd::agent::AgentArgs),
    /// Print the hex SHA-256 of an API key, for auth.api_keys[].sha256 in stowage.toml.
    HashKey {
        /// The API key (read from stdin when omitted, so it stays out of shell history).
        key: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(match cli.command {
        Command::Serve(_) | Command::Links(cmd::links::LinksCommand::Serve { .. }) => logging::Role::Serving,
        Command::Agent(_) => logging::Role::Agent,
        _ => logging::Role::Other,
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(anyhow::anyhow!("cannot start the async runtime: {e}")),
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    };
    // Dropping the runtime would wait for every blocking thread, and the one reading stdin
    // for `serve --stdio` returns only at EOF: a SIGTERM would leave the process hanging. What
    // had to finish did (the gateway shut down its upstreams); stragglers get half a second.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    code
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    if let Command::HashKey { key } = cli.command {
        return hash_key(key);
    }
    if let Command::Links(cmd::links::LinksCommand::Serve { ports, config_file, .. }) = &cli.command {
        // The configuration the gateway that starts it read, exactly: no search of its own.
        let config = match config_file {
            Some(f) => Config::parse(&std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?, f)?,
            None => Config::default(),
        };
        let location = wiring::store_location(&config, cli.store.clone())?;
        return link_server::serve(&config, &location, ports).await;
    }
    if let Command::CheckConfig(args) = &cli.command
        && let Some(dir) = &args.cwd
    {
        // Answer exactly as `serve` would when a host starts it there: every relative path and
        // the working directory's stowage.toml are looked up from it.
        std::env::set_current_dir(dir).with_context(|| format!("--cwd {}", dir.display()))?;
    }
    let mcp_config = match &cli.command {
        Command::Serve(a) => a.mcp_config.as_deref(),
        Command::CheckConfig(a) => a.serve.mcp_config.as_deref(),
        Command::Agent(a) => a.mcp_config.as_deref(),
        _ => None,
    };
    if let Some(p) = mcp_config {
        paths::existing_file("--mcp-config", p)?;
    }
    let search = config::ConfigSearch::from_process(cli.config.clone(), mcp_config)?;
    let (config, source) = Config::find(&search)?;
    tracing::debug!(target: "stowage::config", "config: {source}");
    if let Some(p) = &cli.store {
        paths::refuse_unexpanded("--store", p, &search.cwd)?;
    }
    let location = wiring::store_location(&config, cli.store)?;
    if !matches!(cli.command, Command::CheckConfig(_)) {
        location.hint_about_legacy_store(config.store.backend);
    }
    let keys = wiring::Keys::new(&config, &location);
    match cli.command {
        Command::Serve(args) => {
            // Everything is validated before the store is opened or anything started.
            let plan = plan::plan(&config, &keys, &args)?;
            let store = wiring::open_store(&config, &location, &keys)?;
            let ctx = cmd::serve::ServeContext {
                config: &config,
                store,
                keys: &keys,
                store_location: &location,
                store_backend: config.store.backend,
                gc_interval: config.retention.gc_interval,
                config_source: &source,
            };
            cmd::serve::run(ctx, plan).await
        }
        Command::Agent(args) => {
            let store = wiring::open_store(&config, &location, &keys)?;
            cmd::agent::run(&config, store, &keys, args).await
        }
        Command::CheckConfig(args) => cmd::check_config::run(&config, &source, &location, &keys, args).await,
        Command::Demo(args) => {
            let store = wiring::open_store(&config, &location, &keys)?;
            cmd::demo::run(store, config.transform.clone(), args).await
        }
        Command::Transform(args) => {
            let store = wiring::open_store(&config, &location, &keys)?;
            cmd::transform::run(args, config.transform.clone(), wiring::sink(store)).await
        }
        // The store is at another location than its index records: it cannot be opened.
        Command::Artifacts(cmd::artifacts::ArtifactsCommand::Relocate) => wiring::relocate_shared_store(&config, &keys).await,
        Command::Artifacts(cmd) => {
            let store = wiring::open_store(&config, &location, &keys)?;
            cmd::artifacts::run(store.as_ref(), cmd).await
        }
        Command::SignUrl(args) => {
            let store = wiring::open_store(&config, &location, &keys)?;
            cmd::sign_url::run(store.as_ref(), &config.links, &config.gateway.listen, &keys, args).await
        }
        Command::Links(cmd::links::LinksCommand::Status) => cmd::links::status(&location).await,
        Command::Links(cmd::links::LinksCommand::Stop) => cmd::links::stop(&location).await,
        Command::HashKey { .. } | Command::Links(cmd::links::LinksCommand::Serve { .. }) => unreachable!("answered above"),
    }
}

fn hash_key(key: Option<String>) -> anyhow::Result<()> {
    let key = match key {
        Some(k) => k,
        None => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            line.trim_end_matches(['\r', '\n']).to_owned()
        }
    };
    anyhow::ensure!(!key.is_empty(), "empty key: pass the API key as an argument or on stdin");
    println!("{}", stowage_http::hash_api_key(&key));
    Ok(())
}

/// Prints the error chain on one line: `error: cannot open x.pdf: No such file or directory`.
fn fail(e: anyhow::Error) -> ExitCode {
    let message = format!("{e:#}").replace('\n', " ");
    eprintln!("error: {message}");
    if e.downcast_ref::<cmd::agent::PartialAnswer>().is_some() {
        return ExitCode::from(cmd::agent::PartialAnswer::EXIT_CODE);
    }
    ExitCode::FAILURE
}
