//! Upstream over stdio: a child process speaking newline-delimited JSON-RPC.
//!
//! The child runs in its own process group so that everything it spawns (`npx` → `node`, a
//! shell wrapper → the real server) is killed with it; the [`ChildGuard`] sends SIGKILL to the
//! whole group when the connection is dropped, and a task waits on the child so it is always
//! reaped. Its stderr is forwarded to our log, line by line, tagged with the server name: read
//! as bytes (a line that is not UTF-8 is shown lossily), at most [`STDERR_LINE_BYTES`] of a
//! line kept, and always drained, so a chatty or binary stderr can neither stop the reader
//! nor fill the pipe and block the child. Its last lines are kept too ([`StderrTail`]): a child
//! that exits says why there (`ModuleNotFoundError`, `can't open file '//~/server.py'`), so
//! its close reason, which the stand-in tool, `unready_upstreams` and `check-config` show,
//! quotes them.
//!
//! Its stdin and stdout pipes are enlarged to 1 MiB (Linux; best effort): through the
//! default 64 KiB pipe a 50 MB result takes ~800 writer/reader wake-ups, and on the loaded
//! 2-core development machine reading it took 140-310 ms; with 1 MiB, 52-64 ms.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::process::Command;
use tokio::sync::mpsc;

use super::{Inbound, LINK_CAPACITY, Link, Origin};
use crate::framing::{FrameError, LineReader, write_line};

/// The most of one stderr line that reaches the log.
pub(crate) const STDERR_LINE_BYTES: usize = 4096;

/// How many of a child's last stderr lines its close reason quotes, and how much of each.
const TAIL_LINES: usize = 3;
const TAIL_LINE_CHARS: usize = 240;

/// The last lines a child wrote to stderr (blank ones skipped), each cut and with anything
/// that looks like a credential (a long run of letters and digits) masked: the close reason
/// reaches a model through the stand-in tool.
#[derive(Debug, Default, Clone)]
pub(crate) struct StderrTail(std::sync::Arc<parking_lot::Mutex<std::collections::VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let mut lines = self.0.lock();
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(mask_secrets(stowage_core::cut_at_char(text, TAIL_LINE_CHARS)));
    }

    /// `reason`, followed by the last stderr lines when there are any.
    pub(crate) fn explain(&self, reason: String) -> String {
        let lines = self.0.lock();
        if lines.is_empty() {
            return reason;
        }
        format!("{reason}; its stderr ended: {}", lines.iter().map(String::as_str).collect::<Vec<_>>().join(" | "))
    }
}

/// `text` with every run of 32 or more letters, digits, `-` and `_` that mixes letters and
/// digits (API keys, tokens) replaced by `[masked]`.
fn mask_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        let secret = run.len() >= 32 && run.chars().any(|c| c.is_ascii_digit()) && run.chars().any(|c| c.is_ascii_alphabetic());
        out.push_str(if secret { "[masked]" } else { run.as_str() });
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// Kills the child's whole process group when dropped.
#[derive(Debug)]
pub(crate) struct ChildGuard {
    pgid: Option<Pid>,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            // ESRCH (already gone) is the normal case after a clean exit.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// Variables of the gateway's environment a child gets by default: what a program needs to
/// find its tools, its home, its locale and a temp dir — the same kind of set MCP hosts give
/// the servers they start. Everything else (API keys, the link-signing secret, cloud
/// credentials) stays with the gateway unless the server's config passes it in `env`.
pub(crate) const BASE_ENV: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TEMP", "TMP", "TERM"];

/// The environment of a child: the base set (or, with `inherit`, all of `ours` except
/// `secrets`), then the configured `env` on top.
pub(crate) fn child_env(
    ours: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    configured: &BTreeMap<String, String>,
    inherit: bool,
    secrets: &[String],
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut out: Vec<(std::ffi::OsString, std::ffi::OsString)> = ours
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            if inherit { !secrets.iter().any(|s| *s == k) } else { BASE_ENV.contains(&k.as_ref()) }
        })
        .collect();
    out.retain(|(k, _)| !configured.contains_key(k.to_string_lossy().as_ref()));
    out.extend(configured.iter().map(|(k, v)| (k.into(), v.into())));
    out
}

/// Starts `command` and returns a link to it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn(
    name: &str,
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    inherit_env: bool,
    secrets: &[String],
    cwd: Option<&PathBuf>,
    max_message_bytes: usize,
) -> std::io::Result<Link> {
    let mut cmd = Command::new(command);
    cmd.args(args)
        .env_clear()
        .envs(child_env(std::env::vars_os(), env, inherit_env, secrets))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn()?;
    let pgid = child.id().map(|pid| Pid::from_raw(pid as i32));
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    enlarge_pipe(&stdout, name);
    enlarge_pipe(&stdin, name);

    let server = name.to_owned();
    let tail = StderrTail::default();
    let tail_in = tail.clone();
    let stderr_task = tokio::spawn(async move {
        let mut lines = LineReader::new(stderr, STDERR_LINE_BYTES);
        loop {
            match lines.next_line().await {
                Ok(Some(line)) => {
                    tracing::info!(target: "stowage::upstream", upstream = %server, "stderr: {}", String::from_utf8_lossy(&line));
                    tail_in.push(&line);
                }
                Err(FrameError::TooLong { head, .. }) => {
                    tracing::info!(target: "stowage::upstream", upstream = %server, "stderr: {}… (line cut)", String::from_utf8_lossy(&head));
                    tail_in.push(&head);
                }
                Ok(None) | Err(FrameError::Io(_)) => break,
            }
        }
    });

    let (in_tx, in_rx) = mpsc::channel(LINK_CAPACITY);
    // The exit status is the most useful close reason, so the waiter reports it after the
    // reader has seen end of output.
    let (eof_tx, eof_rx) = tokio::sync::oneshot::channel::<()>();
    let waiter_tx = in_tx.clone();
    tokio::spawn(async move {
        let status = child.wait().await;
        let _ = eof_rx.await;
        // Its last words: stderr may still be draining when stdout closed (a grandchild can
        // hold the pipe open, so the wait is short).
        let _ = tokio::time::timeout(std::time::Duration::from_millis(300), stderr_task).await;
        let reason = match status {
            Ok(s) => match s.code() {
                Some(code) => tail.explain(format!("exited with status {code}")),
                None => tail.explain(format!("was killed ({s})")),
            },
            Err(e) => format!("could not be waited on: {e}"),
        };
        let _ = waiter_tx.send(Inbound::Closed(reason)).await;
    });
    let link = pipe_link_with(stdout, stdin, in_tx, in_rx, max_message_bytes, Some(eof_tx));
    Ok(Link { guard: Some(Box::new(ChildGuard { pgid })), ..link })
}

/// Pipe capacity asked for the child's stdin and stdout (the unprivileged maximum by default,
/// `/proc/sys/fs/pipe-max-size`).
const PIPE_BYTES: i32 = 1 << 20;

/// Asks for a [`PIPE_BYTES`] pipe; the default size still works, only slower for big messages.
fn enlarge_pipe(pipe: &impl std::os::fd::AsFd, name: &str) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = nix::fcntl::fcntl(pipe, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES)) {
        tracing::debug!(target: "stowage::upstream", upstream = %name, "pipe kept its default size: {e}");
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (pipe, name);
}

/// A link over any byte pipe pair (an in-process duplex for the demo). With `eof`, the caller
/// reports the close itself (a child's waiter, with the exit status).
pub(crate) fn pipe_link<R, W>(reader: R, writer: W, max_message_bytes: usize, eof: Option<tokio::sync::oneshot::Sender<()>>) -> Link
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (in_tx, in_rx) = mpsc::channel(LINK_CAPACITY);
    pipe_link_with(reader, writer, in_tx, in_rx, max_message_bytes, eof)
}

fn pipe_link_with<R, W>(
    reader: R,
    mut writer: W,
    in_tx: mpsc::Sender<Inbound>,
    in_rx: mpsc::Receiver<Inbound>,
    max_message_bytes: usize,
    eof: Option<tokio::sync::oneshot::Sender<()>>,
) -> Link
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(LINK_CAPACITY);
    tokio::spawn(async move {
        while let Some(line) = out_rx.recv().await {
            if write_line(&mut writer, &line).await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut lines = LineReader::new(reader, max_message_bytes);
        let reason = loop {
            match lines.next_line().await {
                Ok(Some(line)) => {
                    if in_tx.send(Inbound::Line(line, Origin::Pipe)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => break "closed its output".to_owned(),
                Err(FrameError::TooLong { head, limit }) => {
                    if in_tx.send(Inbound::TooLong { head, limit }).await.is_err() {
                        return;
                    }
                }
                Err(e) => break e.to_string(),
            }
        };
        match eof {
            // A child: its waiter sends the close with the exit status.
            Some(eof) => {
                let _ = eof.send(());
            }
            None => {
                let _ = in_tx.send(Inbound::Closed(reason)).await;
            }
        }
    });
    Link { tx: out_tx, rx: in_rx, guard: None, http: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines_cut_and_masked() {
        let tail = StderrTail::default();
        assert_eq!(tail.explain("exited with status 1".into()), "exited with status 1");
        for line in
            ["Traceback (most recent call last):", "", "  File \"/srv/heavy.py\", line 1", "ModuleNotFoundError: No module named 'fastmcp'"]
        {
            tail.push(line.as_bytes());
        }
        assert_eq!(
            tail.explain("exited with status 1".into()),
            "exited with status 1; its stderr ended: Traceback (most recent call last): | File \"/srv/heavy.py\", line 1 | ModuleNotFoundError: No module named 'fastmcp'"
        );
        tail.push(format!("bad key sk-{}abc123 at /opt/{}", "x".repeat(40), "y".repeat(300)).as_bytes());
        let said = tail.explain(String::new());
        assert!(said.contains("bad key [masked] at /opt/yyy") && !said.contains("abc123"), "{said}");
        assert!(said.len() < 3 * (TAIL_LINE_CHARS + 10) + 40, "{said}");
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn a_child_gets_a_minimal_environment_plus_its_own_never_our_secrets() {
        let ours = vars(&[
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("STOWAGE_LINK_SECRET", "s3cret"),
            ("LANG", "C.UTF-8"),
        ]);
        let configured: BTreeMap<String, String> =
            [("API_TOKEN".to_owned(), "t".to_owned()), ("LANG".to_owned(), "de_DE.UTF-8".to_owned())].into();
        let secrets = vec!["STOWAGE_LINK_SECRET".to_owned()];
        let mut got = child_env(ours.clone().into_iter(), &configured, false, &secrets);
        got.sort();
        assert_eq!(got, vars(&[("API_TOKEN", "t"), ("HOME", "/root"), ("LANG", "de_DE.UTF-8"), ("PATH", "/bin")]));
        let mut inherited = child_env(ours.into_iter(), &configured, true, &secrets);
        inherited.sort();
        assert_eq!(
            inherited,
            vars(&[("API_TOKEN", "t"), ("AWS_SECRET_ACCESS_KEY", "aws"), ("HOME", "/root"), ("LANG", "de_DE.UTF-8"), ("PATH", "/bin")])
        );
    }
}
