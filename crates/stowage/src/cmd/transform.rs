//! `stowage transform [--tool NAME] [--report FILE] [INPUT|-]`: runs one tool result through
//! the transform pipeline and writes the rewritten result to stdout.
//!
//! The store comes from the global `--store DIR` / `--config F` (wired by the caller): heavy
//! parts land there and the output holds `artifact://` references. `--report FILE` writes the
//! pipeline's report (every artifact with the JSON Pointer where it was found, its mime type,
//! size and sha256; token counts; warnings; whether the clamp fired).
//!
//! Exit status: 0 with the result on stdout; 1 with `error: artifact_storage_failed: …` when a
//! binary could not be stored (nothing is printed on stdout then: the caller must not forward
//! base64 instead), or `error: bad_request: …` when the input is not JSON.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use stowage_core::ArtifactSink;
use stowage_transform::{Pipeline, TransformConfig, TransformInput};

#[derive(Debug, Args)]
pub(crate) struct TransformArgs {
    /// The tool's name, plain or namespaced (selects field rules and presets, and names the
    /// artifacts: `artifact://<tool>_<sha256 prefix>`).
    #[arg(long, value_name = "NAME", default_value = "")]
    pub tool: String,
    /// Write the report (artifacts with JSON Pointers, tokens, warnings) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// The tool's outputSchema as a JSON file: properties marked "artifact": true are always
    /// extracted.
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
    /// Session id recorded with the artifacts (their owner).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Trace id recorded with the artifacts (per-trace limits apply to it).
    #[arg(long, value_name = "ID")]
    pub trace: Option<String>,
    /// Pretty-print the result instead of compact JSON.
    #[arg(long)]
    pub pretty: bool,
    /// The tool result (a CallToolResult or any JSON); `-` or nothing reads stdin.
    #[arg(value_name = "INPUT", default_value = "-")]
    pub input: String,
}

/// Runs `stowage transform`. `sink` is the configured store (`wiring::sink(store)`), `config`
/// the `[transform]` section of `stowage.toml`.
pub(crate) async fn run(args: TransformArgs, mut config: TransformConfig, sink: Arc<dyn ArtifactSink>) -> anyhow::Result<()> {
    // Token counts only appear in the report; without one, skip loading the o200k vocabulary
    // (~165 ms, more than the transform of a 50 MB result). With one, the pipeline starts
    // loading it on a background thread now, while the input is read.
    if args.report.is_none() {
        config.tokens.enabled = false;
    }
    let pipeline = Pipeline::new(config, sink);
    let started = std::time::Instant::now();
    let json = read_input(&args.input)?;
    tracing::debug!(step = "read", ms = started.elapsed().as_secs_f64() * 1e3, bytes = json.len(), "transform step");
    let schema = match &args.output_schema {
        Some(path) => {
            let text = std::fs::read(path).with_context(|| format!("cannot read output schema {}", path.display()))?;
            Some(
                serde_json::from_slice::<serde_json::Value>(&text)
                    .with_context(|| format!("output schema {} is not json", path.display()))?,
            )
        }
        None => None,
    };
    // The local user's, as the gateway's: what this stores, the model can read.
    let scope = super::local_scope(args.session.clone(), args.trace.clone());
    let mut input = TransformInput::new(&args.tool, &scope);
    input.output_schema = schema.as_ref();

    let out = pipeline.transform_json(&input, json).await.map_err(|e| anyhow::anyhow!("{}: {e}", e.code()))?;

    if let Some(path) = &args.report {
        let text = serde_json::to_vec_pretty(&out.report).context("serialising the report")?;
        std::fs::write(path, text).with_context(|| format!("cannot write report {}", path.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    if args.pretty { serde_json::to_writer_pretty(&mut stdout, &out.value) } else { serde_json::to_writer(&mut stdout, &out.value) }
        .context("writing the result")?;
    stdout.write_all(b"\n").and_then(|()| stdout.flush()).context("writing the result")?;
    Ok(())
}

fn read_input(input: &str) -> anyhow::Result<Vec<u8>> {
    if input == "-" {
        let mut buf = Vec::new();
        std::io::stdin().lock().read_to_end(&mut buf).context("cannot read stdin")?;
        Ok(buf)
    } else {
        read_file(input).with_context(|| format!("cannot read {input}"))
    }
}

/// Files at least this large are read by two threads, each into its half of one buffer.
const SPLIT_READ_MIN: u64 = 8 << 20;

/// `std::fs::read`, faster for big files: reading 50 MB here is mostly the kernel faulting in
/// the fresh buffer's pages (~20 ms, against ~5 ms of copying), and two threads fault their
/// halves in parallel (21 → 12 ms measured). Not a regular file, small, or changed while
/// read: `std::fs::read`'s answer.
fn read_file(path: &str) -> std::io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    let len = meta.len();
    let Ok(size) = usize::try_from(len) else { return std::fs::read(path) };
    if !meta.is_file() || len < SPLIT_READ_MIN {
        return std::fs::read(path);
    }
    // Zeroed lazily by the allocator (fresh pages), so only the reads touch it.
    let mut buf = vec![0u8; size];
    let (first, second) = buf.split_at_mut(size / 2);
    let read = std::thread::scope(|s| {
        let (file, at) = (&file, first.len() as u64);
        let other = s.spawn(move || file.read_exact_at(second, at));
        let mine = file.read_exact_at(first, 0);
        mine.and(other.join().unwrap_or_else(|_| Err(std::io::Error::other("reader thread panicked"))))
    });
    match read {
        Ok(()) => {
            // A file that grew meanwhile: the rest too, as `std::fs::read` would.
            let mut f = &file;
            f.seek(SeekFrom::Start(len))?;
            f.read_to_end(&mut buf)?;
            Ok(buf)
        }
        // It shrank meanwhile: read it again, the plain way.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => std::fs::read(path),
        Err(e) => Err(e),
    }
}
