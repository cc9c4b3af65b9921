//! What each built-in host profile's host does with a tool result, as the host publishes it
//! (not as our profile says), and a result as the Python client dumped it: shared by the tests
//! that drive `stowage serve` as each host (`hosts.rs`, `reading_loop.rs`).
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

    /// The text the host's model reads: only `structuredContent` for a host that reads only
    /// it (when there is one), else the text of the content blocks (a link as its JSON) and
    /// `structuredContent`, a value carried twice read once.
    pub(crate) fn text(&self, structured_only: bool) -> String {
        if structured_only && let Some(s) = self.structured() {
            return s.to_string();
        }
        let mut parts: Vec<String> = Vec::new();
        for b in self.blocks() {
            match b["type"].as_str() {
                Some("text") => parts.push(b["text"].as_str().unwrap().to_owned()),
                Some("resource_link") => parts.push(b.to_string()),
                Some("resource") => parts.push(b["resource"].to_string()),
                _ => {}
            }
        }
        if !structured_only
            && !self.structured_repeats_content()
            && let Some(s) = self.structured()
        {
            parts.push(s.to_string());
        }
        parts.join("\n")
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

    pub(crate) fn tokens(&self, structured_only: bool) -> u64 {
        stowage_transform::tokens::count_exact(&self.text(structured_only)) + self.image_tokens()
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

/// What each built-in profile's host does, as it publishes it (not as our profile says).
pub(crate) struct Host {
    pub client: &'static str,
    pub profile: &'static str,
    /// The host's own hard limits.
    pub max_result_bytes: Option<usize>,
    pub max_text_bytes: Option<usize>,
    pub max_lines: Option<usize>,
    pub max_tokens: Option<u64>,
    pub max_error_chars: Option<usize>,
    pub structured_only: bool,
    pub takes_links: bool,
    pub previews: bool,
    pub max_images: usize,
    pub max_image_tokens: Option<u64>,
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
        structured_only: false,
        takes_links: true,
        previews: true,
        max_images: 20,
        max_image_tokens: None,
    },
    Host {
        client: "claude-code",
        profile: "claude-code",
        max_result_bytes: None,
        max_text_bytes: Some(50_000),
        max_lines: None,
        max_tokens: Some(10_000),
        max_error_chars: Some(11_000),
        structured_only: false,
        takes_links: true,
        previews: true,
        max_images: 8,
        max_image_tokens: Some(6_000),
    },
    Host {
        client: "codex-mcp-client",
        profile: "codex",
        max_result_bytes: None,
        max_text_bytes: Some(10 * 1024),
        max_lines: Some(256),
        max_tokens: None,
        max_error_chars: Some(10 * 1024),
        structured_only: true,
        takes_links: false,
        previews: true,
        max_images: 8,
        max_image_tokens: None,
    },
    Host {
        client: "Visual Studio Code",
        profile: "vscode",
        max_result_bytes: None,
        max_text_bytes: None,
        max_lines: None,
        max_tokens: Some(16_000),
        max_error_chars: None,
        structured_only: false,
        takes_links: true,
        previews: true,
        max_images: 8,
        max_image_tokens: None,
    },
    Host {
        client: "cursor-vscode",
        profile: "connectors",
        max_result_bytes: None,
        max_text_bytes: None,
        max_lines: None,
        max_tokens: None,
        max_error_chars: None,
        structured_only: false,
        takes_links: true,
        previews: true,
        max_images: 8,
        max_image_tokens: None,
    },
    Host {
        client: "mcp",
        profile: "sdk",
        max_result_bytes: None,
        max_text_bytes: None,
        max_lines: None,
        max_tokens: None,
        max_error_chars: None,
        structured_only: false,
        takes_links: false,
        previews: false,
        max_images: usize::MAX,
        max_image_tokens: None,
    },
    Host {
        client: "some-agent",
        profile: "default",
        max_result_bytes: None,
        max_text_bytes: None,
        max_lines: None,
        max_tokens: None,
        max_error_chars: None,
        structured_only: false,
        takes_links: true,
        previews: false,
        max_images: usize::MAX,
        max_image_tokens: None,
    },
];

/// Asserts that what `host`'s model sees of `r` (the answer of `name`) is within its limits.
pub(crate) fn fits(host: &Host, name: &str, r: &Value) {
    let seen = Seen(r);
    let structured_only = host.structured_only;
    let text = seen.text(structured_only);
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
        assert!(seen.tokens(structured_only) <= max, "{ctx}: {} tokens", seen.tokens(structured_only));
    }
    if is_error && let Some(max) = host.max_error_chars {
        assert!(text.chars().count() <= max, "{ctx}: {} characters of error text", text.chars().count());
    }
    assert!(host.takes_links || !seen.has_links(), "{ctx}: a resource_link went to a host that cannot take it");
    let images = seen.images();
    assert!(images.len() <= host.max_images, "{ctx}: {} images", images.len());
    if let Some(max) = host.max_image_tokens {
        assert!(seen.image_tokens() <= max, "{ctx}: {} image tokens", seen.image_tokens());
    }
    for (w, h, bytes) in &images {
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
