//! `stowage artifacts …`: put, get, meta, ls, rm and gc on the configured store.
//!
//! These run as the local operator ([`Access::Operator`]): whoever can run the CLI on the
//! store directory can read its files anyway, so scoping would only get in the way.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use stowage_core::{ArtifactId, ArtifactRef, PutOptions, human_size};
use stowage_store::{Access, ArtifactStore, ListQuery};
use tokio::io::AsyncWriteExt;

#[derive(Debug, Subcommand)]
pub(crate) enum ArtifactsCommand {
    /// Store a file and print its ArtifactRef as JSON.
    Put(PutArgs),
    /// Write an artifact's bytes to stdout, or to a file with -o.
    Get {
        /// Artifact id or artifact:// URI.
        id: String,
        /// Write to this file instead of stdout (written whole or not at all).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Print an artifact's ArtifactRef as JSON.
    Meta {
        /// Artifact id or artifact:// URI.
        id: String,
    },
    /// List artifacts (a table, or JSON lines with --json).
    Ls {
        /// Only this session's artifacts.
        #[arg(long)]
        session: Option<String>,
        /// Only this trace's artifacts.
        #[arg(long)]
        trace: Option<String>,
        /// One ArtifactRef JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete an artifact (every owner's record of that id).
    Rm {
        /// Artifact id or artifact:// URI.
        id: String,
    },
    /// Remove expired artifacts and unreferenced blobs, and repair what a crash left behind.
    Gc {
        /// Also drop, now, every record whose blob is missing, however many: gc alone drops
        /// one only when it is still missing on a later sweep, and never more than a small
        /// share of the store at once (a wrong bucket or prefix looks just like lost blobs).
        /// Check the store's location first.
        #[arg(long)]
        drop_dangling: bool,
    },
    /// Shared stores: record the configured bucket location as the store's, after every
    /// object (the store's marker included) was copied there and every instance stopped; the
    /// old location is refused from then on (docs/deploy.md, moving a bucket).
    Relocate,
}

#[derive(Debug, Args)]
pub(crate) struct PutArgs {
    /// The file to store.
    pub file: PathBuf,
    /// Media type; sniffed from the bytes when not given.
    #[arg(long)]
    pub mime: Option<String>,
    /// File name recorded with the artifact (default: the file's own name).
    #[arg(long)]
    pub filename: Option<String>,
    /// Id namespace: ids look like `{namespace}_{sha256 prefix}` (default `art`).
    #[arg(long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub owner: super::OwnerArgs,
    /// Trace id (per-trace limits apply to it).
    #[arg(long)]
    pub trace: Option<String>,
    /// Time to live, e.g. `30m`, `2h`, `7d` (default: retention.ttl from the config).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Option<Duration>,
}

pub(crate) async fn run(store: &dyn ArtifactStore, cmd: ArtifactsCommand) -> anyhow::Result<()> {
    match cmd {
        ArtifactsCommand::Put(args) => put(store, args).await,
        ArtifactsCommand::Get { id, output } => get(store, &parse_id(&id)?, output.as_deref()).await,
        ArtifactsCommand::Meta { id } => {
            let meta = store.meta(&Access::Operator, &parse_id(&id)?).await?;
            print_json(&meta)
        }
        ArtifactsCommand::Ls { session, trace, json } => ls(store, session, trace, json).await,
        ArtifactsCommand::Rm { id } => {
            let id = parse_id(&id)?;
            if !store.delete(&Access::Operator, &id).await? {
                bail!("artifact {id} not found");
            }
            eprintln!("deleted {id}");
            Ok(())
        }
        ArtifactsCommand::Gc { drop_dangling } => {
            let opts = if drop_dangling { stowage_store::GcOptions::drop_dangling() } else { stowage_store::GcOptions::default() };
            let report = store.gc_with(opts).await?;
            if report.dangling_held > 0 {
                eprintln!(
                    "gc: kept {} record(s) whose blobs are missing: more than gc drops on its own; check that [store] bucket, prefix and endpoint are right, then run stowage artifacts gc --drop-dangling to drop them",
                    report.dangling_held
                );
            } else if report.dangling_suspected > 0 {
                eprintln!(
                    "gc: {} record(s) whose blobs are missing are kept until a later gc, past the grace period, finds them still missing (--drop-dangling drops them now)",
                    report.dangling_suspected
                );
            }
            // Temp files inside the grace period may belong to a put another process is
            // running; say that they were seen and kept, so a full tmp/ is never a mystery.
            let kept = report.temp_files.saturating_sub(report.temp_files_removed);
            if kept > 0 {
                let bytes = human_size(report.temp_bytes.saturating_sub(report.temp_bytes_removed));
                // The CLI opens the store with the default grace (wiring.rs sets none).
                let grace = humantime::format_duration(stowage_store::DEFAULT_GC_GRACE);
                eprintln!(
                    "gc: kept {kept} recent temp file(s) ({bytes}) that another process may still be writing; run gc again once they are older than the grace period ({grace}) to remove them"
                );
            }
            print_json(&report)
        }
        ArtifactsCommand::Relocate => unreachable!("relocate opens no store (main.rs runs it)"),
    }
}

fn parse_id(s: &str) -> anyhow::Result<ArtifactId> {
    ArtifactId::parse_loose(s).with_context(|| format!("{s:?} is not an artifact id"))
}

async fn put(store: &dyn ArtifactStore, args: PutArgs) -> anyhow::Result<()> {
    let file = tokio::fs::File::open(&args.file).await.with_context(|| format!("cannot open {}", args.file.display()))?;
    let scope = args.owner.scope(args.trace);
    let filename = args.filename.or_else(|| args.file.file_name().map(|n| n.to_string_lossy().into_owned()));
    let opts = PutOptions { mime_type: args.mime, filename, namespace: args.namespace, scope, ttl: args.ttl, ..Default::default() };
    // Streamed, so a file larger than memory (or than the limit) is handled without loading it.
    let r = store.put_stream(Box::pin(file), opts).await?;
    print_json(&r)
}

async fn get(store: &dyn ArtifactStore, id: &ArtifactId, output: Option<&Path>) -> anyhow::Result<()> {
    let mut reader = store.open(&Access::Operator, id, None).await?;
    match output {
        None => {
            let mut stdout = tokio::io::stdout();
            tokio::io::copy(&mut reader.body, &mut stdout).await.context("cannot write to stdout")?;
            stdout.flush().await.context("cannot write to stdout")?;
        }
        Some(path) => {
            // Write beside the target and rename, so an interrupted get never leaves a
            // truncated file under the requested name.
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let tmp = tempfile::Builder::new()
                .prefix(".stowage-get-")
                .tempfile_in(dir)
                .with_context(|| format!("cannot create a file in {}", dir.display()))?;
            let mut file = tokio::fs::File::from_std(tmp.reopen()?);
            tokio::io::copy(&mut reader.body, &mut file).await.with_context(|| format!("cannot write {}", path.display()))?;
            file.sync_all().await?;
            tmp.persist(path).with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {} ({}) to {}", id, human_size(reader.meta.size_bytes), path.display());
        }
    }
    Ok(())
}

async fn ls(store: &dyn ArtifactStore, session: Option<String>, trace: Option<String>, json: bool) -> anyhow::Result<()> {
    let mut query = ListQuery { owner: None, session_id: session, trace_id: trace, ..Default::default() };
    let mut all = Vec::new();
    loop {
        let page = store.list(query.clone()).await?;
        all.extend(page.items);
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => break,
        }
    }
    let mut out = std::io::stdout().lock();
    if json {
        for r in &all {
            serde_json::to_writer(&mut out, r)?;
            writeln!(out)?;
        }
    } else {
        write!(out, "{}", render_table(&all))?;
    }
    Ok(())
}

/// A plain aligned table, oldest first; `-` for absent values.
fn render_table(refs: &[ArtifactRef]) -> String {
    const HEADER: [&str; 7] = ["ID", "SIZE", "MIME", "FILENAME", "SESSION", "CREATED", "EXPIRES"];
    let rows: Vec<[String; 7]> = refs
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                human_size(r.size_bytes),
                r.mime_type.clone().unwrap_or_else(|| "-".into()),
                r.filename.clone().unwrap_or_else(|| "-".into()),
                r.scope.session_id.clone().unwrap_or_else(|| "-".into()),
                fmt_time(Some(r.created_at)),
                fmt_time(r.expires_at),
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut push_row = |cells: &[&str]| {
        let line: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    };
    push_row(&HEADER);
    for row in &rows {
        push_row(&row.each_ref().map(String::as_str));
    }
    if refs.is_empty() {
        out.push_str("(no artifacts)\n");
    }
    out
}

fn fmt_time(t: Option<stowage_core::Timestamp>) -> String {
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    t.and_then(|t| t.format(&format).ok()).unwrap_or_else(|| "-".into())
}

fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}
