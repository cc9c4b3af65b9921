//! What each built-in host profile's host does with a tool result, as measured from the hosts
//! themselves (docs/results.md's host table; Claude Code and Codex CLI are driven for real in
//! `real_hosts.rs`), not as our profile says, and a result as the Python client dumped it:
//! shared by the tests that drive `stowage serve` as each host (`hosts.rs`, `reading_loop.rs`).
#![allow(dead_code)]

use base64::Engine as _;
use serde_json::Value;

pub(crate) fn b64d(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// A result as the Python client dumped it (camelCase aliases).
pub(crate) struct Seen<'a>(pub &'a Value);

impl Seen<'_> {
    pub(crate) fn blocks(&self) -> Vec<&Value> {
        self.0["content"].as_array().map(|a| a.iter().collect()).unwrap_or_default()
    }

    pub(crate) fn structured(&self) -> Option<&Value> {
        self.0.get("structuredContent").filter(|s| !s.is_null())
    }

    /// Whether `structuredContent` repeats a text block (FastMCP sends a `-> str` tool's text
    /// as both, a `-> dict` tool's value as JSON text too): one value, read once.
    pub(crate) fn structured_repeats_content(&self) -> bool {
        let Some(s) = self.structured() else { return false };
        self.blocks().iter().filter_map(|b| b["text"].as_str()).any(|t| {
            s.get("result").and_then(Value::as_str) == Some(t)
                || serde_json::from_str::<Value>(t)
                    .is_ok_and(|v| &v == s || s.as_object().is_some_and(|m| m.len() == 1 && m.get("result") == Some(&v)))
        })
    }

    /// The text of every block and of `structuredContent` (a value carried twice read once):
    /// what a host that shows everything reads.
    pub(crate) fn all_text(&self) -> String {
        self.text_as(Shows::Both, false)
    }

    /// The text `host`'s model reads of this result, by the host's measured rules.
    pub(crate) fn text(&self, host: &Host) -> String {
        self.text_as(host.shows, host.errors_as_json)
    }

    fn is_error(&self) -> bool {
        self.0["isError"] == true
    }

    /// Whether `host` shows this result's text blocks, images (and links), and
    /// `structuredContent`.
    fn parts(&self, shows: Shows, errors_as_json: bool) -> (bool, bool, bool) {
        if self.is_error() && errors_as_json {
            return (false, false, false);
        }
        if self.is_error() && shows == Shows::StructuredAndMedia {
            return (true, false, false);
        }
        match (shows, self.structured().is_some()) {
            (_, false) | (Shows::Content, true) => (true, true, false),
            (Shows::Both, true) => (true, true, true),
            (Shows::Structured, true) => (false, false, true),
            (Shows::StructuredAndMedia, true) => (false, true, true),
        }
    }

    fn text_as(&self, shows: Shows, errors_as_json: bool) -> String {
        if self.is_error() && errors_as_json {
            return self.0.to_string();
        }
        let (text, media, structured) = self.parts(shows, errors_as_json);
        let mut parts: Vec<String> = Vec::new();
        for b in self.blocks() {
            match b["type"].as_str() {
                Some("text") if text => parts.push(b["text"].as_str().unwrap().to_owned()),
                Some("resource_link") if text || media => parts.push(b.to_string()),
                Some("resource") if media => parts.push(b["resource"].to_string()),
                _ => {}
            }
        }
        if structured
            && !(text && self.structured_repeats_content())
            && let Some(s) = self.structured()
        {
            parts.push(s.to_string());
        }
        parts.join("\n")
    }

    /// The images `host`'s model sees: none beside structuredContent for Codex, none in an
    /// error for Claude Code.
    pub(crate) fn shown_images(&self, host: &Host) -> Vec<(u32, u32, usize)> {
        if self.parts(host.shows, host.errors_as_json).1 { self.images() } else { Vec::new() }
    }

    /// (width, height, encoded bytes) of each image block.
    pub(crate) fn images(&self) -> Vec<(u32, u32, usize)> {
        self.blocks()
            .into_iter()
            .filter(|b| b["type"] == "image")
            .map(|b| {
                let bytes = b64d(b["data"].as_str().unwrap());
                let size = imagesize::blob_size(&bytes).unwrap();
                (size.width as u32, size.height as u32, bytes.len())
            })
            .collect()
    }

    pub(crate) fn image_tokens(&self) -> u64 {
        self.images().iter().map(|&(w, h, _)| u64::from(w.div_ceil(28)) * u64::from(h.div_ceil(28))).sum()
    }

    pub(crate) fn tokens(&self, host: &Host) -> u64 {
        let images: u64 = self.shown_images(host).iter().map(|&(w, h, _)| u64::from(w.div_ceil(28)) * u64::from(h.div_ceil(28))).sum();
        stowage_transform::tokens::count_exact(&self.text(host)) + images
    }

    pub(crate) fn has_links(&self) -> bool {
        self.blocks().iter().any(|b| b["type"] == "resource_link")
    }

    /// Every asset entry, wherever the gateway put it.
    pub(crate) fn assets(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for a in [self.0.pointer("/structuredContent/assets"), self.0.pointer("/_meta/io.stowage~1assets")].into_iter().flatten() {
            out.extend(a.as_array().unwrap().iter().cloned());
        }
        out
    }
}

/// Which parts of a result a host shows its model, as measured (see `hosts::Sees` in the
/// gateway, which must agree; this copy is the tests' own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shows {
    Content,
    /// structuredContent alone when there is one (Codex; VS Code).
    Structured,
    /// structuredContent instead of text blocks, media kept; errors as text only (Claude Code).
    StructuredAndMedia,
    Both,
}

/// What each built-in profile's host does, as measured (not as our profile says): Claude Code
/// 2.1.197 and Codex CLI 0.169.0 by `real_hosts.rs`; Qwen Code, opencode and Gemini CLI as
/// docs/results.md's host table reports them.
pub(crate) struct Host {
    pub client: &'static str,
    pub profile: &'static str,
    /// The host's own hard limits.
    pub max_result_bytes: Option<usize>,
    pub max_text_bytes: Option<usize>,
    pub max_lines: Option<usize>,
    pub max_tokens: Option<u64>,
    pub max_error_chars: Option<usize>,
    pub shows: Shows,
    pub takes_links: bool,
    pub previews: bool,
    pub max_images: usize,
    pub max_image_tokens: Option<u64>,
    /// An error result is shown whole, as JSON, `_meta` included.
    pub errors_as_json: bool,
}

impl Host {
    /// Whether the host shows structuredContent instead of the text beside it.
    pub(crate) fn drops_text_beside_structured(&self) -> bool {
        matches!(self.shows, Shows::Structured | Shows::StructuredAndMedia)
    }
}

pub(crate) const HOSTS: &[Host] = &[
    Host {
        client: "claude-ai",
        profile: "claude-desktop",
        max_result_bytes: Some(1 << 20),
        max_text_bytes: None,
        max_lines: None,
        max_tokens: None,
        max_error_chars: None,
        shows: Shows::Both,
        takes_links: true,
        previews: true,
        max_images: 20,
        max_image_tokens: None,
        errors_as_json: false,
    },
    Host {
        client: "claude-code",
        profile: "claude-code",
        max_result_bytes: None,
        max_text_bytes: Some(50_000),
        max_lines: None,
        max_tokens: Some(10_000),
        max_error_chars: Some(10_000),
        shows: Shows::StructuredAndMedia,
        takes_links: true,
        previews: true,
        max_images: 8,
        max_image_tokens: Some(6_000),
        errors_as_json: false,
    },
    Host {
        client: "codex-mcp-client",
        profile: "codex",
        max_result_bytes: None,
        max_text_bytes: Some(11_950),
        max_lines: None,
        max_tokens: None,
        max_error_chars: Some(11_950),
        shows: Shows::Structured,
        takes_links: false,
        previews: true,
        max_images: 8,
        max_image_tokens: None,
        errors_as_json: false,
    },
    Host {
        client: "Visual Studio Code",
        profile: "vscode",
        max_result_bytes: None,
        max_text_bytes: None,
        max_lines: None,
        max_tokens: Some(16_000),
        max_error_chars: None,
        shows: Shows::Structured,
        takes_links: true,
        previews: true,
        max_images: 8,
        max_image_tokens: None,
        errors_as_json: false,
    },
    Host {
        client: "qwen-cli-mcp-client-stowage",
        profile: "qwen-code",
        max_result_bytes: None,
        max_text_bytes: Some(25_000),
        max_lines: Some(1_000),
        max_tokens: None,
        max_error_chars: None,
        shows: Shows::Both,
        takes_links: true,
        previews: false,
        max_images: usize::MAX,
        max_image_tokens: None,
        errors_as_json: true,
    },
    Host {
        client: "opencode",
        profile: "opencode",
        max_result_bytes: None,
        max_text_bytes: Some(50 * 1024),
        max_lines: Some(2_000),
        max_tokens: None,
        max_error_chars: None,
        shows: Shows::Both,
        takes_links: false,
        previews: false,
        max_images: usize::MAX,
        max_image_tokens: None,
        errors_as_json: false,
    },
    Host {
        client: "gemini-cli-mcp-client",
        profile: "gemini-cli",
        max_result_bytes: None,
        max_text_bytes: Some(40_000),
        max_lines: None,
        max_tokens: None,
        max_error_chars: None,
        shows: Shows::Both,
        takes_links: true,
        previews: false,
        max_images: usize::MAX,
        max_image_tokens: None,
        errors_as_json: true,
    },
    Host {
        client: "cursor-vscode",
        profile: "connectors",
        max_result_bytes: None,
        max_text_bytes: None,
        max_lines: None,
        max_tokens: None,
        max_error_chars: None,
        shows: Shows::Both,
        takes_links: true,
        previews: true,
        max_images: 8,
        max_image_tokens: None,
        errors_as_json: false,
    },
    Host {
        client: "mcp",
        profile: "sdk",
        max_result_bytes: None,
        max_text_bytes: None,
        max_lines: None,
        max_tokens: None,
        max_error_chars: None,
        shows: Shows::Both,
        takes_links: false,
        previews: false,
        max_images: usize::MAX,
        max_image_tokens: None,
        errors_as_json: false,
    },
    Host {
        client: "some-agent",
        profile: "default",
        max_result_bytes: None,
        max_text_bytes: None,
        max_lines: None,
        max_tokens: None,
        max_error_chars: None,
        shows: Shows::Both,
        takes_links: true,
        previews: false,
        max_images: usize::MAX,
        max_image_tokens: None,
        errors_as_json: false,
    },
];

/// Asserts that what `host`'s model sees of `r` (the answer of `name`) is within its limits,
/// and that nothing it shows carries a signed link where it cannot use one.
pub(crate) fn fits(host: &Host, name: &str, r: &Value) {
    let seen = Seen(r);
    let text = seen.text(host);
    let ctx = format!("{} ({name})", host.profile);
    let is_error = r["isError"] == true;
    if let Some(max) = host.max_result_bytes {
        assert!(r.to_string().len() <= max, "{ctx}: {} bytes", r.to_string().len());
    }
    if let Some(max) = host.max_text_bytes {
        assert!(text.len() <= max, "{ctx}: {} bytes of text", text.len());
    }
    if let Some(max) = host.max_lines {
        assert!(text.lines().count() <= max, "{ctx}: {} lines", text.lines().count());
    }
    if let Some(max) = host.max_tokens {
        assert!(seen.tokens(host) <= max, "{ctx}: {} tokens", seen.tokens(host));
    }
    if is_error && let Some(max) = host.max_error_chars {
        assert!(text.chars().count() <= max, "{ctx}: {} characters of error text", text.chars().count());
    }
    if is_error && host.errors_as_json {
        assert!(!text.contains("token="), "{ctx}: a signed link in an error this host shows whole: {text}");
    }
    assert!(host.takes_links || !seen.has_links(), "{ctx}: a resource_link went to a host that cannot take it");
    let images = seen.shown_images(host);
    assert!(images.len() <= host.max_images, "{ctx}: {} images", images.len());
    if let Some(max) = host.max_image_tokens {
        let tokens: u64 = images.iter().map(|&(w, h, _)| u64::from(w.div_ceil(28)) * u64::from(h.div_ceil(28))).sum();
        assert!(tokens <= max, "{ctx}: {tokens} image tokens");
    }
    for (w, h, bytes) in &seen.images() {
        assert!(*w.max(h) <= 768 && *bytes <= 96 * 1024, "{ctx}: a preview of {w}x{h}, {bytes} bytes");
    }
}

/// `stowage serve --listen 127.0.0.1:<free port> --no-playground` from `dir` with `args` (the
/// global flags and `serve`'s), logging to `dir/serve.log`; returns it once `/readyz` answers
/// 200 (its upstreams listed their tools) and the `/mcp` URL.
pub(crate) async fn serve_http(dir: &std::path::Path, args: Vec<String>, env: &[(&str, &str)]) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = dir.join("serve.log");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
        .current_dir(dir)
        .args(args)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--no-playground"])
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !reqwest::get(format!("{base}/readyz")).await.is_ok_and(|r| r.status() == 200) {
        assert!(
            std::time::Instant::now() < deadline,
            "stowage serve did not come up:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    (child, format!("{base}/mcp"))
}

/// Runs `tests/peers/<script>` with the peers' Python as `client` in `era` (`legacy` or
/// `modern`), with `args` after those two and then `target` (an `/mcp` URL, or `--` and a
/// command for stdio), from `dir` with `env`, within `limit`; its stdout as JSON. A failure
/// shows the client's stderr and `dir/serve.log`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_client(
    python: &std::path::Path,
    script: &str,
    client: &str,
    era: &str,
    args: &[&str],
    target: &[String],
    dir: &std::path::Path,
    env: &[(&str, &std::ffi::OsStr)],
    limit: std::time::Duration,
) -> Value {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers").join(script);
    let out = tokio::process::Command::new(python)
        .arg(script)
        .args([client, era])
        .args(args)
        .args(target)
        .envs(env.iter().copied())
        .current_dir(dir)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(limit, out).await.expect("the client finished").unwrap();
    assert!(
        out.status.success(),
        "the Python client failed as {client} ({era}):\n{}\n--- serve.log ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
