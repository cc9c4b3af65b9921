//! `[gateway.chaining]`: per-tool input rules and the hosts the gateway may fetch from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How an `artifact://` URI found in a tool's arguments reaches a tool that declares nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputMode {
    /// A short-lived signed GET URL with a read-only token.
    Url,
    /// The bytes, base64 (standard alphabet, padded), for tools that only accept inline data.
    Base64,
    /// The UTF-8 content (an artifact that is not UTF-8 is refused).
    Text,
    /// A local file path (stdio upstreams on this machine): read-only, removed after the call.
    Path,
}

/// `[gateway.chaining]` in stowage.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChainingConfig {
    /// Exposed tool name → how `artifact://` URIs in its arguments are materialized. Tools not
    /// listed get their arguments as written.
    pub inputs: BTreeMap<String, InputMode>,
    /// Hosts the gateway fetches `https://` URLs from on the model's behalf (for `base64`,
    /// `text` and `path` tools). Exact host names, no wildcards; empty fetches from nowhere.
    pub fetch_allowed_hosts: Vec<String>,
    /// Lifetime of the signed GET links handed to tools (`url` mode), in seconds (60–3600).
    pub input_link_ttl_secs: u64,
    /// Largest artifact or fetched body materialized inline or as a file (`base64`, `text`,
    /// `path`), in bytes; larger ones are refused with a hint to use `url`.
    pub max_materialize_bytes: u64,
    /// Largest body a tool may upload to one output blob's slot, in bytes (the store's
    /// `retention.max_artifact_bytes` applies too).
    pub max_output_bytes: u64,
    /// `url` tools get the storage backend's own presigned URL instead of a gateway link, so
    /// the bytes go from the bucket to the tool without passing through the gateway. Only
    /// with `[store] backend = "s3"` (refused otherwise). Links for people always go through
    /// the gateway: a presigned URL names the bucket.
    pub presign_direct: bool,
}

impl Default for ChainingConfig {
    fn default() -> Self {
        ChainingConfig {
            inputs: BTreeMap::new(),
            fetch_allowed_hosts: Vec::new(),
            input_link_ttl_secs: 300,
            max_materialize_bytes: 16 << 20,
            max_output_bytes: 50 << 20,
            presign_direct: false,
        }
    }
}

impl ChainingConfig {
    pub fn input_link_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.input_link_ttl_secs.clamp(60, 3600))
    }

    /// Whether the gateway may fetch from `host` (compared without case, as DNS does).
    pub fn may_fetch(&self, host: &str) -> bool {
        self.fetch_allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }
}
