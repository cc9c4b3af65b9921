//! L5 for the binary: an external command as a custom transformer. It gets the result JSON on
//! stdin (and the tool name in `STOWAGE_TOOL`), and prints the result JSON to stdout.
//!
//! Exit status 0 with empty stdout means "unchanged". Anything else that is not JSON — a
//! non-zero exit, a timeout (the child is killed), invalid JSON — is a warning and the
//! result goes on unchanged through the other layers.

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::layers::custom::{BoxError, CustomContext, CustomOutcome, CustomTransformer};

/// `[transform.hook]`: the external-command transformer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HookConfig {
    /// Program and arguments, e.g. `["python3", "hooks/tableau.py"]`. Empty: no hook. Default [].
    pub command: Vec<String>,
    /// Milliseconds the command may take before it is killed. Default 5000.
    pub timeout_ms: u64,
}

impl Default for HookConfig {
    fn default() -> Self {
        HookConfig { command: Vec::new(), timeout_ms: 5000 }
    }
}

/// Runs [`HookConfig::command`] as a [`CustomTransformer`].
#[derive(Debug, Clone)]
pub struct CommandHook {
    program: String,
    args: Vec<String>,
    timeout: Duration,
}

impl CommandHook {
    /// `None` when no command is configured.
    pub fn from_config(config: &HookConfig) -> Option<Self> {
        let (program, args) = config.command.split_first()?;
        Some(CommandHook { program: program.clone(), args: args.to_vec(), timeout: Duration::from_millis(config.timeout_ms) })
    }

    async fn run(&self, tool: &str, input: Vec<u8>) -> Result<Vec<u8>, String> {
        let mut child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .env("STOWAGE_TOOL", tool)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.program))?;
        let mut stdin = child.stdin.take().expect("piped");
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        // Write and read at once: a hook that streams its output would otherwise deadlock
        // against a full pipe.
        let writer = async move {
            // A hook that exits without reading everything is not an error by itself.
            let _ = stdin.write_all(&input).await;
            drop(stdin);
        };
        let reader = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let (a, b) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
            a.map_err(|e| format!("reading stdout: {e}"))?;
            let _ = b;
            Ok::<_, String>((out, err))
        };
        let work = async {
            let ((), read) = tokio::join!(writer, reader);
            let (out, err) = read?;
            let status = child.wait().await.map_err(|e| format!("waiting: {e}"))?;
            if !status.success() {
                let err = String::from_utf8_lossy(&err);
                let first = err.lines().next().unwrap_or("").trim();
                return Err(format!("exited with {status}: {first}"));
            }
            Ok(out)
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(format!("timed out after {} ms and was killed", self.timeout.as_millis())),
        }
    }
}

#[async_trait]
impl CustomTransformer for CommandHook {
    fn name(&self) -> &str {
        "hook"
    }

    async fn transform(&self, ctx: &CustomContext<'_>, value: &Value) -> Result<CustomOutcome, BoxError> {
        let input = serde_json::to_vec(value)?;
        let out = self.run(ctx.tool_name, input).await.map_err(|e| format!("hook {}: {e}", self.program))?;
        if out.iter().all(u8::is_ascii_whitespace) {
            return Ok(CustomOutcome::Unchanged);
        }
        let v: Value = serde_json::from_slice(&out).map_err(|e| format!("hook {}: stdout is not json: {e}", self.program))?;
        Ok(CustomOutcome::Replace(v))
    }
}
