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
    /// HTTP: sessions one identity (tenant and user) may hold open at once; past it,
    /// `initialize` is refused until one ends (DELETE, or idle expiry).
    pub max_sessions_per_identity: usize,
    /// First delay before restarting a failed upstream; doubles up to `restart_backoff_max_ms`.
    pub restart_backoff_initial_ms: u64,
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
    /// HTTP: a session with no request, no open stream and no call in flight for this long
    /// is ended (its client gets 404 and initializes again). 0 keeps sessions forever.
    pub session_idle_timeout_secs: u64,
    /// `per_client` upstreams: a client's own upstream session with nothing in flight for
    /// this long is closed (a stdio child is stopped); the next call opens a new one.
    pub upstream_session_idle_secs: u64,
    /// `per_client` upstreams: client sessions open at once per upstream. At the cap, the
    /// least recently used idle one is closed for a new client; if none is idle, the new
    /// client's call fails with a clear error.
    pub max_upstream_sessions: usize,
    /// Upstream servers (in addition to those from `--mcp-config`).
    pub servers: BTreeMap<String, ServerConfig>,
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
            session_idle_timeout_secs: 1_800,
            upstream_session_idle_secs: 600,
            max_upstream_sessions: 64,
            servers: BTreeMap::new(),
        }
    }
}

impl GatewayConfig {
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs.max(1))
    }

    /// The HTTP listener's timeouts.
    pub fn http_timeouts(&self) -> crate::downstream::listener::HttpTimeouts {
        let secs = |s: u64| Duration::from_secs(s.max(1));
        crate::downstream::listener::HttpTimeouts {
            headers: secs(self.http_header_timeout_secs),
            body: secs(self.http_body_timeout_secs),
            idle: secs(self.http_idle_timeout_secs),
        }
    }
}

/// When tool and prompt names get the `{server}{separator}` prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefixMode {
    /// Prefix only when more than one upstream is configured (a single wrapped server stays
    /// transparent).
    Auto,
    Always,
    Never,
}

/// Whether clients share one upstream session or each gets its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// One upstream session (one child, one `Mcp-Session-Id`) for every client: cheapest, and
    /// right for stateless servers. What the server keeps per session is shared by all clients.
    Shared,
    /// Each client gets its own upstream session: a child process per client for stdio
    /// servers, a session per client for HTTP ones. The default when `[auth]` is configured.
    PerClient,
}

impl SessionMode {
    pub fn is_shared(self) -> bool {
        self == SessionMode::Shared
    }
}

/// How a server is reached, when its entry says (`type`): by default, `command` means stdio
/// and `url` means Streamable HTTP; `sse` picks the 2024-11-05 HTTP+SSE transport for a url.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerType {
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
    pub command: Option<String>,
    pub args: Vec<String>,
    /// Variables added to a stdio child's environment, which is otherwise minimal: `PATH`,
    /// `HOME`, `LANG`, `TMPDIR` and the like, never the gateway's own variables.
    pub env: BTreeMap<String, String>,
    /// Give the stdio child the gateway's whole environment (still without the variables that
    /// hold link-signing or JWT secrets) instead of the minimal one.
    pub inherit_env: bool,
    pub cwd: Option<PathBuf>,
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
    /// `shared` or `per_client`; default: `per_client` when `[auth]` is configured, else
    /// `shared`.
    pub session_mode: Option<SessionMode>,
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
    #[error("cannot read {path}: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("server {name:?}: {message}")]
    Server { name: String, message: String },
    #[error("server {name:?} is defined twice (in [gateway.servers] and in {path})")]
    Duplicate { name: String, path: PathBuf },
}

/// How an upstream is reached, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum TransportSpec {
    /// A child process. It gets a minimal environment (`upstream::stdio::BASE_ENV`) plus
    /// `env`, or, with `inherit_env`, the gateway's own minus its secrets.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
        inherit_env: bool,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        ca_file: Option<PathBuf>,
    },
    /// The 2024-11-05 HTTP+SSE transport: `url` is the SSE stream, with the same headers and
    /// TLS options as `Http`.
    Sse {
        url: String,
        headers: BTreeMap<String, String>,
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
    pub name: String,
    pub transport: TransportSpec,
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

/// Everything the gateway will run, merged from `[gateway.servers]`, `--mcp-config` and a
/// trailing `-- CMD ARGS…`. With none of them, the bundled demo server.
pub fn collect_upstreams(
    gateway: &GatewayConfig,
    mcp_config: Option<&Path>,
    trailing: &[String],
) -> Result<Vec<UpstreamSpec>, ConfigError> {
    let timeout = gateway.request_timeout();
    let mut entries: Vec<(String, ServerConfig)> = gateway.servers.iter().map(|(n, s)| (n.clone(), s.clone())).collect();
    if let Some(path) = mcp_config {
        for (name, server) in read_mcp_servers(path)? {
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
        entries.push((name, ServerConfig { command: Some(command.clone()), args: args.to_vec(), ..Default::default() }));
    }
    let mut specs = Vec::new();
    for (name, server) in entries.iter().filter(|(_, s)| !s.disabled) {
        specs.push(server.resolve(name, timeout)?);
    }
    if specs.is_empty() {
        specs.push(UpstreamSpec::new("demo", TransportSpec::Demo, timeout));
    }
    Ok(specs)
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
}
