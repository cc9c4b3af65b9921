//! Gateway configuration: the `[gateway]` section of `stowage.toml` and the standard
//! `mcpServers` JSON that Claude Desktop and Cursor use.
//!
//! `[gateway]` refuses unknown keys (a misspelt limit must not silently fall back to its
//! default). The `mcpServers` file is someone else's format, shared with other hosts that add
//! their own keys (`autoApprove`, `alwaysAllow`, …), so there an unknown key is ignored,
//! unless it is a near miss of one we read (`arg`, `envv`, `header`): that is an error with
//! the suggestion, since the server would otherwise start without its arguments.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[gateway]` in stowage.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Streamable HTTP listen address (`/mcp`, `/metrics`).
    pub listen: String,
    /// Separator between server name and tool/prompt name: `{server}{separator}{tool}`.
    pub separator: String,
    /// When to prefix tool and prompt names with the server name.
    pub prefix: PrefixMode,
    /// Host header values accepted on HTTP (DNS-rebinding protection). A value without a port
    /// matches any port. Empty means the loopback names only.
    pub allowed_hosts: Vec<String>,
    /// Origin header values accepted on HTTP, e.g. `http://localhost:3000`. Requests without an
    /// Origin are accepted; loopback origins are always accepted.
    pub allowed_origins: Vec<String>,
    /// How long one request may wait for its upstream before the client gets a timeout error.
    pub request_timeout_secs: u64,
    /// Largest single JSON-RPC message accepted from a peer, in bytes.
    pub max_message_bytes: usize,
    /// HTTP: largest request body a client may POST to `/mcp`, enforced as it streams in.
    /// Requests are small (results are what is big), so this is far below
    /// `max_message_bytes`: four parallel oversized requests cost at most 4 × this much.
    pub max_request_bytes: usize,
    /// HTTP: a client must send a request's headers within this long (from its first byte,
    /// or, on a kept-alive connection, from the previous response); slower ones are cut off.
    pub http_header_timeout_secs: u64,
    /// HTTP: the longest pause allowed between two chunks of a request body.
    pub http_body_timeout_secs: u64,
    /// HTTP/2: an idle connection whose keep-alive ping goes unanswered this long is closed.
    pub http_idle_timeout_secs: u64,
    /// HTTP: sessions one identity (tenant and user) may hold open at once. At the cap, a
    /// new `initialize` ends that identity's least recently used idle session (its client
    /// gets 404 and initializes again); only when every one is busy is it refused (429).
    pub max_sessions_per_identity: usize,
    /// First delay before restarting a failed upstream; doubles up to `restart_backoff_max_ms`.
    pub restart_backoff_initial_ms: u64,
    /// The longest delay between restarts of an upstream that keeps failing.
    pub restart_backoff_max_ms: u64,
    /// Serve Prometheus metrics at `/metrics` on the HTTP listener.
    pub metrics: bool,
    /// HTTP: how long a request whose SSE stream dropped keeps running while the client may
    /// reconnect with `Last-Event-ID`; after that it is cancelled upstream. Also how long a
    /// finished stream stays replayable.
    pub resume_window_ms: u64,
    /// HTTP: the reconnection delay suggested to clients in each stream's `retry` field.
    pub sse_retry_ms: u64,
    /// HTTP: bytes of events kept per SSE stream for replay after a reconnect.
    pub replay_buffer_bytes: usize,
    /// HTTP: bytes of events kept for replay over all streams of all sessions together; past
    /// it, the buffers of the streams that started buffering first are dropped (resuming
    /// those is refused, and the client re-sends its request).
    pub resume_max_total_bytes: usize,
    /// HTTP: a session with no request, no open stream and no call in flight for this long
    /// is ended (its client gets 404 and initializes again). 0 keeps sessions forever.
    pub session_idle_timeout_secs: u64,
    /// HTTP: a session with no open stream, no request and no call in flight for this long
    /// no longer counts as a client when a shared upstream's session-level message (a log,
    /// `roots/list`, a sampling or elicitation request outside a call) is attributed: a
    /// client that left without `DELETE` does not take those messages from the one that is
    /// still there. It still exists (it is ended after `session_idle_timeout_secs`).
    pub absent_after_secs: u64,
    /// `per_client` upstreams: a client's own upstream session (or a pristine one) with
    /// nothing in flight for this long is closed (a stdio child is stopped); the next request
    /// opens a new one. A spare process unused this long is stopped too.
    pub upstream_session_idle_secs: u64,
    /// `per_client` upstreams: upstream sessions open at once per upstream besides the
    /// gateway's own, counted from the moment each process starts: clients' own, pristine
    /// ones and spares. At the cap, the least recently used idle one is closed for a new
    /// client; if none is idle, the new client's request fails at once with an error naming
    /// the cap.
    pub max_upstream_sessions: usize,
    /// `per_client` and `isolated` stdio upstreams: processes started ahead of need, not yet
    /// initialized, that the next client needing a session of its own (or a pristine one)
    /// takes instead of waiting for a cold start; one is started again when one is taken.
    /// They count against `max_upstream_sessions`. 0: none.
    pub spare_upstream_processes: usize,
    /// Blob chaining: per-tool input rules and the hosts the gateway may fetch from.
    pub chaining: crate::chaining::ChainingConfig,
    /// Upstream resource reads (`resources/read`).
    pub resources: ResourcesConfig,
    /// Upstream servers (in addition to those from `--mcp-config`).
    pub servers: BTreeMap<String, ServerConfig>,
}

/// `[gateway.resources]`: how upstream resource reads reach the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourcesConfig {
    /// Text contents of a `resources/read` up to this many characters stay inline; longer
    /// text becomes an artifact (blobs follow `transform.inline_binary_max_bytes`).
    pub inline_text_if_under_chars: usize,
    /// `resources/read` of an `artifact://` URI returns the bytes up to this size; a larger
    /// artifact answers with its metadata and a fresh signed link.
    pub artifact_inline_max_bytes: u64,
    /// The most bytes a read returns inline when the client asks for them explicitly
    /// (`_meta["io.stowage/inline"]: true`).
    pub artifact_inline_cap_bytes: u64,
    /// Every upstream with resources gets `{server}_resources_list`, `_resources_read` and
    /// `_resources_templates_list` tools, for hosts that never show resources to the model.
    pub generated_tools: bool,
    /// The longest an upstream resource read is answered from the cache (per owner). Only
    /// reads the upstream gave a `ttlMs` are cached, for that long and at most this long; an
    /// update notification ends it. 0 turns the cache off.
    pub cache_ttl_secs: u64,
    /// Upstream resources (or templates) per `resources/list` page at most; past it the
    /// answer has a `nextCursor` naming the upstream and position that come next.
    pub list_page_size: usize,
    /// A `resource_link` in a tool result whose `size` is under this many bytes is read
    /// (through the cache) and inlined as an embedded resource; 0 (the default) keeps links
    /// lazy. A failed read leaves the link, noting the error.
    pub auto_read_if_size_under_bytes: u64,
}

impl ResourcesConfig {
    /// `cache_ttl_secs` as a duration (zero: no caching).
    pub(crate) fn cache_ttl(&self) -> Duration {
        Duration::from_secs(self.cache_ttl_secs)
    }
}

impl Default for ResourcesConfig {
    fn default() -> Self {
        ResourcesConfig {
            inline_text_if_under_chars: 10_000,
            artifact_inline_max_bytes: 64 << 10,
            artifact_inline_cap_bytes: 8 << 20,
            generated_tools: true,
            cache_ttl_secs: 300,
            list_page_size: 1000,
            auto_read_if_size_under_bytes: 0,
        }
    }
}

/// Default HTTP listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: DEFAULT_LISTEN.to_owned(),
            separator: "_".to_owned(),
            prefix: PrefixMode::Auto,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            request_timeout_secs: 300,
            max_message_bytes: crate::framing::DEFAULT_MAX_LINE_BYTES,
            max_request_bytes: 16 << 20,
            max_sessions_per_identity: 64,
            http_header_timeout_secs: 10,
            http_body_timeout_secs: 30,
            http_idle_timeout_secs: 120,
            restart_backoff_initial_ms: 200,
            restart_backoff_max_ms: 30_000,
            metrics: true,
            resume_window_ms: 30_000,
            sse_retry_ms: 1_000,
            replay_buffer_bytes: 8 << 20,
            resume_max_total_bytes: 64 << 20,
            session_idle_timeout_secs: 1_800,
            absent_after_secs: 10,
            upstream_session_idle_secs: 600,
            max_upstream_sessions: 64,
            spare_upstream_processes: 1,
            chaining: Default::default(),
            resources: Default::default(),
            servers: BTreeMap::new(),
        }
    }
}

impl GatewayConfig {
    /// `request_timeout_secs` as a duration, at least a second (0 would fail every call).
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs.max(1))
    }

    /// The HTTP listener's timeouts (`http_header_timeout_secs`, `http_body_timeout_secs`,
    /// `http_idle_timeout_secs`): for `/mcp`, and for the link server that reads this table.
    pub fn http_timeouts(&self) -> stowage_http::listener::HttpTimeouts {
        stowage_http::listener::HttpTimeouts::from_secs(
            self.http_header_timeout_secs,
            self.http_body_timeout_secs,
            self.http_idle_timeout_secs,
        )
    }
}

/// When tool and prompt names get the `{server}{separator}` prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefixMode {
    /// Prefix only when more than one upstream is configured (a single wrapped server stays
    /// transparent).
    Auto,
    /// Always prefix, so names stay the same when a second server is added.
    Always,
    /// Never prefix; a name a later upstream also lists gets a `{separator}2` suffix there (logged).
    Never,
}

/// Whether clients share one upstream session or each gets its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// One upstream session (one child, one `Mcp-Session-Id`) for every client: the
    /// configuration says the server keeps nothing per session that clients could see of each
    /// other. Cheapest; what the server keeps per session is shared by all clients.
    Shared,
    /// Each client gets its own upstream session, as if it had connected directly: a session
    /// per client for HTTP servers; for stdio servers, where a session is a process, a client
    /// that declares nothing the server could ask back is served by a pristine session of its
    /// identity for what cannot change session state (lists, reads, tools the server marks
    /// `readOnlyHint`) until its first request that can, which opens its own. The default of
    /// `stowage serve` over HTTP.
    PerClient,
    /// Each client gets its own upstream session from its first request on, nothing served
    /// by a pristine one: for a stdio server whose read-only tools still answer differently
    /// per session (one that makes up an identity per session, say).
    Isolated,
}

impl SessionMode {
    /// Whether every client goes through the one control connection.
    pub(crate) fn is_shared(self) -> bool {
        self == SessionMode::Shared
    }
}

/// How a server is reached, when its entry says (`type`): by default, `command` means stdio
/// and `url` means Streamable HTTP; `sse` picks the 2024-11-05 HTTP+SSE transport for a url.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerType {
    /// A child process speaking JSON-RPC lines on stdin/stdout.
    Stdio,
    /// Streamable HTTP (also spelt `streamable_http`, `streamable-http`, `streamableHttp`).
    #[serde(alias = "streamable_http", alias = "streamable-http", alias = "streamableHttp")]
    Http,
    /// The legacy HTTP+SSE transport: `url` is the SSE stream; messages are POSTed to the
    /// endpoint it announces.
    Sse,
}

impl ServerType {
    /// The `type` of an `mcpServers` entry; a value other hosts use that we do not know is
    /// left to `command`/`url` (`None`), as before.
    fn from_mcp(kind: &str) -> Option<ServerType> {
        serde_json::from_value(serde_json::Value::String(kind.to_owned())).ok()
    }
}

/// One upstream server: either `command` (a stdio child) or `url` (Streamable HTTP, or the
/// legacy HTTP+SSE transport with `type = "sse"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// `stdio`, `http` or `sse`; unset: stdio for `command`, Streamable HTTP for `url`.
    #[serde(rename = "type")]
    pub kind: Option<ServerType>,
    /// The program of a stdio server, found on `PATH` when not a path.
    pub command: Option<String>,
    /// Its arguments, passed as they are (no shell).
    pub args: Vec<String>,
    /// Variables added to a stdio child's environment, which is otherwise minimal: `PATH`,
    /// `HOME`, `LANG`, `TMPDIR` and the like, never the gateway's own variables.
    pub env: BTreeMap<String, String>,
    /// Give the stdio child the gateway's whole environment (still without the variables that
    /// hold link-signing or JWT secrets) instead of the minimal one.
    pub inherit_env: bool,
    /// The stdio child's working directory; unset: the gateway's.
    pub cwd: Option<PathBuf>,
    /// The endpoint of an HTTP server (`http://` or `https://`); the SSE stream for `type = "sse"`.
    pub url: Option<String>,
    /// Extra HTTP headers sent to a `url` upstream.
    pub headers: BTreeMap<String, String>,
    /// Environment variable holding a bearer token for a `url` upstream (kept out of files).
    pub bearer_token_env: Option<String>,
    /// PEM file of extra CA certificates trusted for an `https://` upstream (a private CA, a
    /// self-signed server), besides the built-in Mozilla roots.
    pub tls_ca_file: Option<PathBuf>,
    /// Overrides `request_timeout_secs` for this server.
    pub request_timeout_secs: Option<u64>,
    /// `shared`, `per_client` or `isolated`; default: `per_client` over HTTP (a stdio
    /// gateway's one client has the shared session to itself). `shared` declares the server
    /// stateless: every client shares one upstream session.
    pub session_mode: Option<SessionMode>,
    /// The largest request body this server (or a proxy in front of it) accepts, in bytes.
    /// Blob chaining refuses, before calling it, a call whose arguments would grow past it
    /// once artifacts are filled in as base64 or text. Unset: no limit of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<u64>,
    /// Keep the entry but do not start or serve it.
    pub disabled: bool,
    /// This server's own transform settings, replacing `[transform]` for its results (keys
    /// not given take their built-in defaults, not the global section's values).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transform: Option<stowage_transform::TransformConfig>,
}

/// A configuration mistake, named precisely enough to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // `error`, not `source`: the message already carries it, and a source would print twice.
    /// A configuration file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        error: std::io::Error,
    },
    /// A configuration file is not valid JSON (or not the shape it must have).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the position when the parser gave one.
        message: String,
    },
    /// One server entry is wrong (neither `command` nor `url`, an unset variable, a bad type).
    #[error("server {name:?}: {message}")]
    Server {
        /// The entry's name.
        name: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A server name appears both in `stowage.toml` and in an `mcpServers` file.
    #[error("server {name:?} is defined twice (in [gateway.servers] and in {path})")]
    Duplicate {
        /// The name both define.
        name: String,
        /// The `mcpServers` file.
        path: PathBuf,
    },
    /// Servers are configured but none can be served.
    #[error("no configured server can be served: {why}")]
    NothingToServe {
        /// Each skipped entry's reason, joined with `; `.
        why: String,
    },
}

/// How an upstream is reached, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum TransportSpec {
    /// A child process. It gets a minimal environment (`upstream::stdio::BASE_ENV`) plus
    /// `env`, or, with `inherit_env`, the gateway's own minus its secrets.
    Stdio {
        /// The program, resolved on `PATH` when not a path.
        command: String,
        /// Its arguments, as they are (no shell).
        args: Vec<String>,
        /// Variables added to the child's environment.
        env: BTreeMap<String, String>,
        /// The child's working directory; `None`: the gateway's.
        cwd: Option<PathBuf>,
        /// Start from the gateway's environment (minus its secrets) instead of the minimal one.
        inherit_env: bool,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint messages are POSTed to.
        url: String,
        /// Headers sent with every request (the bearer token included, once resolved).
        headers: BTreeMap<String, String>,
        /// Extra CA certificates (PEM) to trust besides the built-in roots.
        ca_file: Option<PathBuf>,
    },
    /// The 2024-11-05 HTTP+SSE transport: `url` is the SSE stream, with the same headers and
    /// TLS options as `Http`.
    Sse {
        /// The SSE stream to open.
        url: String,
        /// Headers sent with the stream's GET and every POST.
        headers: BTreeMap<String, String>,
        /// Extra CA certificates (PEM) to trust besides the built-in roots.
        ca_file: Option<PathBuf>,
    },
    /// The bundled demo server, run in-process.
    Demo,
}

impl TransportSpec {
    /// A stdio child with no extra environment, run where the gateway runs.
    pub fn stdio(command: impl Into<String>, args: Vec<String>) -> TransportSpec {
        TransportSpec::Stdio { command: command.into(), args, env: BTreeMap::new(), cwd: None, inherit_env: false }
    }
}

/// A validated upstream, ready to start.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSpec {
    /// The server's configured name: the tool prefix, and what logs and errors call it.
    pub name: String,
    /// How it is reached.
    pub transport: TransportSpec,
    /// How long a request to it may wait for the answer.
    pub request_timeout: Duration,
    /// `None`: the gateway's default (see [`SessionMode`]).
    pub session_mode: Option<SessionMode>,
}

impl UpstreamSpec {
    /// A spec with the defaults for everything but the transport.
    pub fn new(name: impl Into<String>, transport: TransportSpec, request_timeout: Duration) -> Self {
        UpstreamSpec { name: name.into(), transport, request_timeout, session_mode: None }
    }
}

impl UpstreamSpec {
    /// One line for banners and `check-config`.
    pub fn describe(&self) -> String {
        match &self.transport {
            TransportSpec::Stdio { command, args, .. } => {
                let mut s = format!("{}: stdio `{command}", self.name);
                for a in args {
                    s.push(' ');
                    s.push_str(a);
                }
                s.push('`');
                s
            }
            TransportSpec::Http { url, headers, ca_file } | TransportSpec::Sse { url, headers, ca_file } => {
                let kind = if matches!(self.transport, TransportSpec::Sse { .. }) { "sse" } else { "http" };
                let mut s = format!("{}: {kind} {url}", self.name);
                if let Some(ca) = ca_file {
                    s.push_str(&format!(" (trusting {})", ca.display()));
                }
                if !headers.is_empty() {
                    let names: Vec<_> = headers.keys().map(String::as_str).collect();
                    s.push_str(&format!(" (headers: {})", names.join(", ")));
                }
                s
            }
            TransportSpec::Demo => format!("{}: bundled demo server (in-process)", self.name),
        }
    }
}

impl ServerConfig {
    /// Validates and resolves this entry (reads `bearer_token_env`).
    pub fn resolve(&self, name: &str, default_timeout: Duration) -> Result<UpstreamSpec, ConfigError> {
        let err = |message: String| ConfigError::Server { name: name.to_owned(), message };
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(err("server names must be non-empty and without whitespace".into()));
        }
        let transport = match (&self.command, &self.url) {
            (Some(_), Some(_)) => return Err(err("set either command or url, not both".into())),
            (None, None) => return Err(err("set command (a stdio server) or url (a Streamable HTTP server)".into())),
            (Some(_), None) if matches!(self.kind, Some(ServerType::Http | ServerType::Sse)) => {
                return Err(err("type http and sse need a url, not a command".into()));
            }
            (None, Some(_)) if self.kind == Some(ServerType::Stdio) => {
                return Err(err("type stdio needs a command, not a url".into()));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(err("command is empty".into()));
                }
                TransportSpec::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: self.env.clone(),
                    cwd: self.cwd.clone(),
                    inherit_env: self.inherit_env,
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(err(format!("url {url:?} must start with http:// or https://")));
                }
                let mut headers = self.headers.clone();
                if let Some(var) = &self.bearer_token_env {
                    let token = std::env::var(var).map_err(|_| err(format!("bearer_token_env {var} is not set in the environment")))?;
                    headers.insert("Authorization".into(), format!("Bearer {token}"));
                }
                if self.tls_ca_file.is_some() && !url.starts_with("https://") {
                    return Err(err(format!("tls_ca_file is set but url {url:?} is not https://")));
                }
                let (url, ca_file) = (url.clone(), self.tls_ca_file.clone());
                if self.kind == Some(ServerType::Sse) {
                    TransportSpec::Sse { url, headers, ca_file }
                } else {
                    TransportSpec::Http { url, headers, ca_file }
                }
            }
        };
        let request_timeout = self.request_timeout_secs.map(Duration::from_secs).unwrap_or(default_timeout);
        Ok(UpstreamSpec { name: name.to_owned(), transport, request_timeout, session_mode: self.session_mode })
    }
}

/// Where a `${VAR}` in an entry's `env`, `headers` or `url` takes its value from.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

impl ServerConfig {
    /// This entry with `${VAR}`, `${env:VAR}` and `${VAR:-default}` in `env` values,
    /// `headers` values and `url` replaced from `lookup`, as Claude Code and Cursor do with
    /// the same files. A variable that is not set (and has no default) is an error naming the
    /// server, the key and the variable: starting the server with an empty token would fail
    /// later, further from the cause.
    pub fn expand_vars(&self, name: &str, lookup: EnvLookup<'_>) -> Result<ServerConfig, ConfigError> {
        let mut out = self.clone();
        let expand = |key: String, text: &str| {
            expand_vars(text, lookup).map_err(|var| ConfigError::Server {
                name: name.to_owned(),
                message: format!(
                    "{key} uses ${{{var}}}, which is not set in stowage's environment (set it where stowage is started, or write ${{{var}:-default}})"
                ),
            })
        };
        for (k, v) in out.env.iter_mut() {
            *v = expand(format!("env.{k}"), v)?;
        }
        for (k, v) in out.headers.iter_mut() {
            *v = expand(format!("headers.{k}"), v)?;
        }
        if let Some(url) = out.url.as_mut() {
            *url = expand("url".to_owned(), url)?;
        }
        Ok(out)
    }
}

/// Replaces each `${NAME}`, `${env:NAME}` and `${NAME:-default}` in `text` (NAME:
/// `[A-Za-z_][A-Za-z0-9_]*`); anything else, `$NAME` without braces included, stays as
/// written, so a literal `$` in a password survives. Returns the first unset variable's
/// name. Written out rather than taken from a shell-expansion crate: those also expand bare
/// `$NAME` and `~`, which these hosts do not.
fn expand_vars(text: &str, lookup: EnvLookup<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            rest = &rest[start..];
            break;
        };
        let inner = &after[..end];
        let inner = inner.strip_prefix("env:").unwrap_or(inner);
        let (var, default) = match inner.split_once(":-") {
            Some((v, d)) => (v, Some(d)),
            None => (inner, None),
        };
        let valid = var.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            // Not a reference: keep `${` and go on after it.
            out.push_str("${");
            rest = after;
            continue;
        }
        match (lookup(var), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => return Err(var.to_owned()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether `command args` runs `stowage serve`: this very executable (by path or found on
/// `PATH`), or any program called `stowage`, with a `serve` argument. Such an entry is in
/// the list because the list is also the host's (the README's set-up points Stowage at the
/// host's own config, which then holds Stowage too); serving it would start gateways inside
/// gateways until something runs out.
pub fn runs_stowage_serve(command: &str, args: &[String], cwd: Option<&Path>) -> bool {
    if !args.iter().any(|a| a == "serve") {
        return false;
    }
    let path = Path::new(command);
    if path.file_stem().is_some_and(|s| s.eq_ignore_ascii_case("stowage")) {
        return true;
    }
    let Ok(me) = std::env::current_exe().and_then(|p| p.canonicalize()) else { return false };
    let candidates: Vec<PathBuf> = if path.components().count() > 1 {
        vec![match cwd {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        }]
    } else {
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).map(|d| d.join(command)).collect()).unwrap_or_default()
    };
    // The first match on PATH is what would run.
    candidates.into_iter().find(|c| c.is_file()).and_then(|c| c.canonicalize().ok()).is_some_and(|c| c == me)
}

/// A server entry that is not served, and why. The others are served all the same.
#[derive(Debug)]
pub struct SkippedServer {
    /// The entry's name.
    pub name: String,
    /// Why it cannot be served.
    pub error: ConfigError,
}

impl std::fmt::Display for SkippedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The errors already name the server; those about the whole file do not.
        let text = self.error.to_string();
        if text.contains(&format!("{:?}", self.name)) { f.write_str(&text) } else { write!(f, "server {:?}: {text}", self.name) }
    }
}

/// What [`collect_upstreams_reporting`] found: the upstreams to serve, and the entries that
/// cannot be served, each with its reason.
#[derive(Debug, Default)]
pub struct Upstreams {
    /// The servers to start, in configuration order.
    pub specs: Vec<UpstreamSpec>,
    /// The entries left out, each with its reason.
    pub skipped: Vec<SkippedServer>,
}

/// Reads a Claude Desktop / Cursor style `{"mcpServers": {...}}` file, in file order.
pub fn read_mcp_servers(path: &Path) -> Result<Vec<(String, ServerConfig)>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: path.into(), error })?;
    parse_mcp_servers(&text, path)
}

/// Parses `mcpServers` JSON. Entries with `"disabled": true` are kept (and skipped later) so
/// that `check-config` can show them.
pub fn parse_mcp_servers(text: &str, path: &Path) -> Result<Vec<(String, ServerConfig)>, ConfigError> {
    let parse_err = |message: String| ConfigError::Parse { path: path.into(), message };
    let root: serde_json::Value = serde_json::from_str(text).map_err(|e| parse_err(e.to_string()))?;
    let servers = root
        .get("mcpServers")
        .or_else(|| root.get("servers"))
        .and_then(|v| v.as_object())
        .ok_or_else(|| parse_err("no \"mcpServers\" object".into()))?;
    let mut out = Vec::new();
    for (name, entry) in servers {
        if let Some(obj) = entry.as_object() {
            for key in obj.keys() {
                if let Some(meant) = near_miss(key) {
                    return Err(ConfigError::Server {
                        name: name.clone(),
                        message: format!("unknown key {key:?} (did you mean {meant:?}?)"),
                    });
                }
            }
        }
        let entry: McpServerEntry = serde_json::from_value(entry.clone()).map_err(|e| parse_err(format!("server {name:?}: {e}")))?;
        let mut headers = entry.headers;
        // Some hosts put a bearer token under "auth"/"token"; only the explicit form is read.
        if let Some(t) = entry.bearer_token {
            headers.insert("Authorization".into(), format!("Bearer {t}"));
        }
        let url = entry.url.or(entry.server_url);
        out.push((
            name.clone(),
            ServerConfig {
                kind: entry.kind.as_deref().and_then(ServerType::from_mcp),
                command: entry.command,
                args: entry.args,
                env: entry.env,
                inherit_env: entry.inherit_env,
                cwd: entry.cwd,
                url,
                headers,
                bearer_token_env: None,
                tls_ca_file: None,
                request_timeout_secs: None,
                session_mode: entry.session_mode,
                max_request_bytes: None,
                disabled: entry.disabled,
                transform: None,
            },
        ));
    }
    Ok(out)
}

#[derive(Debug, Deserialize)]
struct McpServerEntry {
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default, rename = "serverUrl")]
    server_url: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default, rename = "bearerToken")]
    bearer_token: Option<String>,
    #[serde(default)]
    disabled: bool,
    #[serde(default, rename = "sessionMode")]
    session_mode: Option<SessionMode>,
    #[serde(default, rename = "inheritEnv")]
    inherit_env: bool,
}

/// The keys of an `mcpServers` entry that Stowage reads.
const MCP_SERVER_KEYS: &[&str] =
    &["command", "args", "env", "cwd", "url", "serverUrl", "type", "headers", "bearerToken", "disabled", "sessionMode", "inheritEnv"];

/// The key `key` was probably meant to be, when it is not one we read but is one or two edits
/// away from one (other hosts' own keys are further from ours, and stay ignored).
fn near_miss(key: &str) -> Option<&'static str> {
    if MCP_SERVER_KEYS.contains(&key) {
        return None;
    }
    let lower = key.to_ascii_lowercase();
    MCP_SERVER_KEYS
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= 2.min(k.len() / 2))
        .min()
        .map(|(_, k)| k)
}

/// One entry of a server list: its settings, or why they cannot be read.
pub type EntryResult = Result<ServerConfig, ConfigError>;

/// Reads an `mcpServers` file entry by entry: the file must be JSON with an `mcpServers`
/// object, but one bad entry is that entry's error, not the file's. Each entry goes through
/// [`parse_mcp_servers`] alone, so the rules for a good entry stay in one place.
pub fn read_mcp_servers_each(path: &Path) -> Result<Vec<(String, EntryResult)>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: path.into(), error })?;
    let root: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
    let key = if root.get("mcpServers").is_some() { "mcpServers" } else { "servers" };
    let Some(servers) = root.get(key).and_then(|v| v.as_object()) else {
        // The whole-file parser says what is wrong with the file.
        return parse_mcp_servers(&text, path).map(|_| Vec::new());
    };
    Ok(servers
        .iter()
        .map(|(name, entry)| {
            let alone = serde_json::json!({ "mcpServers": { name.clone(): entry } }).to_string();
            let parsed = parse_mcp_servers(&alone, path).and_then(|mut v| {
                v.pop().map(|(_, s)| s).ok_or_else(|| ConfigError::Server { name: name.clone(), message: "cannot be read".into() })
            });
            (name.clone(), parsed)
        })
        .collect())
}

/// Everything the gateway will run, merged from `[gateway.servers]`, `--mcp-config` and a
/// trailing `-- CMD ARGS…`; with none of them, the bundled demo server. Strict: the first
/// entry that cannot be served is the error (see [`collect_upstreams_reporting`] to serve
/// the others).
pub fn collect_upstreams(
    gateway: &GatewayConfig,
    mcp_config: Option<&Path>,
    trailing: &[String],
) -> Result<Vec<UpstreamSpec>, ConfigError> {
    let found = collect_upstreams_reporting(gateway, mcp_config, trailing, &|var| std::env::var(var).ok())?;
    match found.skipped.into_iter().next() {
        Some(skipped) => Err(skipped.error),
        None => Ok(found.specs),
    }
}

/// Like [`collect_upstreams`], but an entry that cannot be served (a bad entry, an unset
/// `${VAR}`, one that would run `stowage serve` itself) is set aside with its reason and
/// the others are served. Errors only for what spoils everything: an unreadable or
/// non-JSON `--mcp-config`, a name defined twice, or entries none of which can be served
/// (serving the demo instead would hide the mistake).
pub fn collect_upstreams_reporting(
    gateway: &GatewayConfig,
    mcp_config: Option<&Path>,
    trailing: &[String],
    lookup: EnvLookup<'_>,
) -> Result<Upstreams, ConfigError> {
    let timeout = gateway.request_timeout();
    let mut entries: Vec<(String, EntryResult)> = gateway.servers.iter().map(|(n, s)| (n.clone(), Ok(s.clone()))).collect();
    if let Some(path) = mcp_config {
        for (name, server) in read_mcp_servers_each(path)? {
            if entries.iter().any(|(n, _)| *n == name) {
                return Err(ConfigError::Duplicate { name, path: path.into() });
            }
            entries.push((name, server));
        }
    }
    if let Some((command, args)) = trailing.split_first() {
        let name = Path::new(command)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "server".into());
        let name = if entries.iter().any(|(n, _)| *n == name) { format!("{name}-cmd") } else { name };
        entries.push((name, Ok(ServerConfig { command: Some(command.clone()), args: args.to_vec(), ..Default::default() })));
    }
    let mut found = Upstreams::default();
    for (name, server) in entries {
        let spec = server.and_then(|s| if s.disabled { Ok(None) } else { s.expand_vars(&name, lookup)?.resolve(&name, timeout).map(Some) });
        match spec {
            Ok(None) => {}
            Ok(Some(spec)) => match &spec.transport {
                TransportSpec::Stdio { command, args, cwd, .. } if runs_stowage_serve(command, args, cwd.as_deref()) => {
                    let message = format!(
                        "`{command} serve …` is Stowage itself; skipped so that Stowage does not spawn itself (remove this entry from the list Stowage reads)"
                    );
                    found.skipped.push(SkippedServer { name: name.clone(), error: ConfigError::Server { name, message } });
                }
                _ => found.specs.push(spec),
            },
            Err(error) => found.skipped.push(SkippedServer { name, error }),
        }
    }
    if found.specs.is_empty() {
        if !found.skipped.is_empty() {
            let why: Vec<String> = found.skipped.iter().map(|s| s.to_string()).collect();
            return Err(ConfigError::NothingToServe { why: why.join("; ") });
        }
        found.specs.push(UpstreamSpec::new("demo", TransportSpec::Demo, timeout));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_desktop_file() {
        let text = r#"{"mcpServers":{
            "files":{"command":"npx","args":["-y","@modelcontextprotocol/server-filesystem","/tmp"],"env":{"A":"1"},"autoApprove":[]},
            "remote":{"type":"http","url":"http://127.0.0.1:9/mcp","headers":{"X-Key":"k"}},
            "off":{"command":"x","disabled":true}}}"#;
        let servers = parse_mcp_servers(text, Path::new("c.json")).unwrap();
        assert_eq!(servers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["files", "remote", "off"]);
        assert_eq!(servers[0].1.args.len(), 3);
        assert_eq!(servers[1].1.url.as_deref(), Some("http://127.0.0.1:9/mcp"));
        assert!(servers[2].1.disabled);
    }

    #[test]
    fn bad_entries_name_the_server() {
        let sse = parse_mcp_servers(r#"{"mcpServers":{"a":{"type":"sse","url":"http://x/sse"}}}"#, Path::new("c.json")).unwrap();
        let spec = sse[0].1.resolve("a", Duration::from_secs(1)).unwrap();
        assert_eq!(spec.transport, TransportSpec::Sse { url: "http://x/sse".into(), headers: BTreeMap::new(), ca_file: None });
        assert_eq!(spec.describe(), "a: sse http://x/sse");
        let http = parse_mcp_servers(r#"{"mcpServers":{"a":{"type":"streamable-http","url":"http://x/mcp"}}}"#, Path::new("c.json"));
        assert!(matches!(http.unwrap()[0].1.resolve("a", Duration::from_secs(1)).unwrap().transport, TransportSpec::Http { .. }));
        let odd = parse_mcp_servers(r#"{"mcpServers":{"a":{"type":"sse","command":"x"}}}"#, Path::new("c.json")).unwrap();
        assert_eq!(
            odd[0].1.resolve("a", Duration::from_secs(1)).unwrap_err().to_string(),
            "server \"a\": type http and sse need a url, not a command"
        );
        let toml_sse: GatewayConfig = serde_json::from_str(r#"{"servers":{"s":{"type":"sse","url":"https://h/sse"}}}"#).unwrap();
        assert!(matches!(toml_sse.servers["s"].resolve("s", Duration::from_secs(1)).unwrap().transport, TransportSpec::Sse { .. }));
        let both = ServerConfig { command: Some("x".into()), url: Some("http://y".into()), ..Default::default() };
        assert_eq!(both.resolve("s", Duration::from_secs(1)).unwrap_err().to_string(), "server \"s\": set either command or url, not both");
        assert!(parse_mcp_servers("{}", Path::new("c.json")).is_err());
    }

    #[test]
    fn trailing_command_and_demo_fallback() {
        let g = GatewayConfig::default();
        let specs = collect_upstreams(&g, None, &["/usr/bin/my-server".into(), "--flag".into()]).unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].name, "my-server");
        assert_eq!(specs[0].describe(), "my-server: stdio `/usr/bin/my-server --flag`");
        let specs = collect_upstreams(&g, None, &[]).unwrap();
        assert_eq!(specs[0].transport, TransportSpec::Demo);
    }

    #[test]
    fn a_server_can_carry_its_own_transform_section() {
        let g: GatewayConfig =
            serde_json::from_str(r#"{"servers":{"tableau":{"command":"x","transform":{"inline_binary_max_bytes":4096}}}}"#).unwrap();
        let t = g.servers["tableau"].transform.as_ref().unwrap();
        assert_eq!(t.inline_binary_max_bytes, 4096);
        assert_eq!(t.max_inline_chars, stowage_transform::TransformConfig::default().max_inline_chars);
        assert!(serde_json::from_str::<GatewayConfig>(r#"{"servers":{"a":{"command":"x","transform":{"nope":1}}}}"#).is_err());
    }

    #[test]
    fn near_misses_of_our_keys_are_errors_with_a_suggestion_and_other_hosts_keys_pass() {
        for (typo, meant) in
            [("arg", "args"), ("envv", "env"), ("header", "headers"), ("comand", "command"), ("Args", "args"), ("urll", "url")]
        {
            let text = format!(r#"{{"mcpServers":{{"fs":{{"command":"x","{typo}":["a"]}}}}}}"#);
            let e = parse_mcp_servers(&text, Path::new("c.json")).unwrap_err().to_string();
            assert_eq!(e, format!("server \"fs\": unknown key \"{typo}\" (did you mean \"{meant}\"?)"));
        }
        let fine = r#"{"mcpServers":{"fs":{"command":"x","autoApprove":[],"alwaysAllow":[],"timeout":60,"description":"d","sessionMode":"per_client"}}}"#;
        let s = parse_mcp_servers(fine, Path::new("c.json")).unwrap();
        assert_eq!(s[0].1.session_mode, Some(SessionMode::PerClient));
    }

    #[test]
    fn gateway_section_refuses_unknown_keys() {
        let ok: GatewayConfig = serde_json::from_str(r#"{"listen":"127.0.0.1:1"}"#).unwrap();
        assert_eq!(ok.separator, "_");
        assert!(serde_json::from_str::<GatewayConfig>(r#"{"lisen":"x"}"#).is_err());
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |var: &str| pairs.iter().find(|(k, _)| *k == var).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn variables_expand_like_claude_code_and_cursor() {
        let env = env_of(&[("TOKEN", "s3cr$t"), ("PORT", "3001"), ("EMPTY", "")]);
        for (text, want) in [
            ("Bearer ${TOKEN}", "Bearer s3cr$t"),
            ("${env:TOKEN}", "s3cr$t"),
            ("http://127.0.0.1:${PORT}/mcp", "http://127.0.0.1:3001/mcp"),
            ("${NOPE:-fallback}", "fallback"),
            ("${NOPE:-}", ""),
            ("${PORT:-9}", "3001"),
            ("[${EMPTY}]", "[]"),
            // Not references: left exactly as written.
            ("pa$$word $TOKEN", "pa$$word $TOKEN"),
            ("${not a var} ${", "${not a var} ${"),
            ("${TOKEN", "${TOKEN"),
            ("a${TOKEN}b${PORT}c", "as3cr$tb3001c"),
        ] {
            assert_eq!(expand_vars(text, &env).as_deref(), Ok(want), "{text}");
        }
        assert_eq!(expand_vars("x ${MISSING} ${ALSO}", &env), Err("MISSING".to_owned()));
        assert_eq!(expand_vars("${env:MISSING}", &env), Err("MISSING".to_owned()));
    }

    #[test]
    fn an_unset_variable_names_the_server_the_key_and_the_variable() {
        let env = env_of(&[("TEAM", "bi")]);
        let s = ServerConfig {
            url: Some("https://${HOST:-example.com}/mcp".into()),
            headers: [("X-Team".to_owned(), "${TEAM}".to_owned()), ("X-Key".to_owned(), "${env:API_KEY}".to_owned())].into(),
            ..Default::default()
        };
        let e = s.expand_vars("remote", &env).unwrap_err().to_string();
        assert_eq!(
            e,
            "server \"remote\": headers.X-Key uses ${API_KEY}, which is not set in stowage's environment (set it where stowage is started, or write ${API_KEY:-default})"
        );
        let env = env_of(&[("TEAM", "bi"), ("API_KEY", "k")]);
        let s = s.expand_vars("remote", &env).unwrap();
        assert_eq!(s.url.as_deref(), Some("https://example.com/mcp"));
        assert_eq!(s.headers["X-Team"], "bi");
        assert_eq!(s.headers["X-Key"], "k");
        let stdio = ServerConfig { command: Some("x".into()), env: [("A".to_owned(), "${NOPE}".to_owned())].into(), ..Default::default() };
        assert!(stdio.expand_vars("s", &env).unwrap_err().to_string().contains("env.A uses ${NOPE}"));
    }

    #[test]
    fn an_entry_that_runs_stowage_serve_is_recognised() {
        let me = std::env::current_exe().unwrap();
        let serve = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(runs_stowage_serve("stowage", &serve(&["serve", "--stdio"]), None));
        assert!(runs_stowage_serve("/opt/bin/stowage", &serve(&["--store", "/x", "serve"]), None));
        // The running executable under another name.
        assert!(runs_stowage_serve(me.to_str().unwrap(), &serve(&["serve"]), None));
        let dir = me.parent().unwrap();
        let name = me.file_name().unwrap().to_str().unwrap();
        assert!(runs_stowage_serve(&format!("./{name}"), &serve(&["serve"]), Some(dir)));
        // Not serving, or not Stowage.
        assert!(!runs_stowage_serve("stowage", &serve(&["artifacts", "ls"]), None));
        assert!(!runs_stowage_serve("node", &serve(&["server.js", "serve"]), None));
        assert!(!runs_stowage_serve(me.to_str().unwrap(), &serve(&["--stdio"]), None));
    }

    #[test]
    fn one_bad_entry_is_reported_and_the_others_are_served() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("servers.json");
        std::fs::write(
            &file,
            r#"{"mcpServers":{
                "good":{"command":"node","args":["s.js"],"env":{"K":"${HOME_DIR:-/tmp}"}},
                "typo":{"command":"x","arg":["a"]},
                "unset":{"url":"https://${NO_SUCH_HOST}/mcp"},
                "me":{"command":"stowage","args":["serve","--stdio"]},
                "shape":{"command":3},
                "off":{"command":"stowage","args":["serve"],"disabled":true}}}"#,
        )
        .unwrap();
        let env = env_of(&[]);
        let found = collect_upstreams_reporting(&GatewayConfig::default(), Some(&file), &[], &env).unwrap();
        assert_eq!(found.specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["good"]);
        let TransportSpec::Stdio { env: child_env, .. } = &found.specs[0].transport else { panic!() };
        assert_eq!(child_env["K"], "/tmp");
        let skipped: Vec<String> = found.skipped.iter().map(|s| s.to_string()).collect();
        assert_eq!(found.skipped.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["typo", "unset", "me", "shape"], "{skipped:?}");
        assert!(skipped[0].contains("did you mean \"args\""), "{skipped:?}");
        assert!(skipped[1].contains("url uses ${NO_SUCH_HOST}"), "{skipped:?}");
        assert!(skipped[2].contains("does not spawn itself"), "{skipped:?}");
        assert!(skipped[3].contains("server \"shape\""), "{skipped:?}");
        assert!(skipped.iter().all(|s| !s.contains('\n')), "{skipped:?}");
        // Strict callers get the first problem as the error.
        let strict = collect_upstreams(&GatewayConfig::default(), Some(&file), &[]).unwrap_err().to_string();
        assert!(strict.contains("did you mean \"args\""), "{strict}");
    }

    #[test]
    fn entries_none_of_which_can_be_served_are_an_error_not_the_demo() {
        let env = env_of(&[]);
        let trailing = ["stowage".to_owned(), "serve".to_owned(), "--stdio".to_owned()];
        let e = collect_upstreams_reporting(&GatewayConfig::default(), None, &trailing, &env).unwrap_err().to_string();
        assert!(e.starts_with("no configured server can be served: server \"stowage\": "), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.json");
        std::fs::write(&file, "{not json").unwrap();
        assert!(collect_upstreams_reporting(&GatewayConfig::default(), Some(&file), &[], &env).is_err(), "a broken file spoils everything");
        std::fs::write(&file, r#"{"other":{}}"#).unwrap();
        let e = collect_upstreams_reporting(&GatewayConfig::default(), Some(&file), &[], &env).unwrap_err().to_string();
        assert!(e.contains("no \"mcpServers\" object"), "{e}");
    }
}
