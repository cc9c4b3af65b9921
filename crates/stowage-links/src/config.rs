//! `[links]` in stowage.toml: where links point, how long they live, and which keys sign them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};

use crate::keys::{KeyError, KeyRing};

/// Shortest link lifetime accepted (the default is 15 minutes; one minute is the floor that
/// still survives a slow client).
pub const MIN_TTL: Duration = Duration::from_secs(60);
/// Longest link lifetime accepted: links are bearer credentials, so they stay short.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// `[links]`: see the fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinksConfig {
    /// Base URL that links are built on; what clients can reach the gateway at.
    pub public_url: String,
    /// Lifetime of a signed link, between 1 and 60 minutes.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Signing keys, newest first: the first signs, all verify. Empty means the embedded
    /// default: a random key kept in `<store dir>/links.key`.
    pub keys: Vec<KeySource>,
    /// What `resource_link.uri` holds in rewritten tool results served over HTTP: the signed
    /// download link, or the permanent `artifact://` URI (`assets[].artifactUri` always holds
    /// the permanent URI either way).
    pub resource_link_uri: ResourceLinkUri,
}

/// The `links.resource_link_uri` switch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceLinkUri {
    /// The signed download link (works without an MCP client, expires).
    #[default]
    Signed,
    /// The permanent `artifact://` URI (read through the gateway, never expires).
    Artifact,
}

impl Default for LinksConfig {
    fn default() -> Self {
        LinksConfig {
            public_url: "http://127.0.0.1:8787".into(),
            ttl: Duration::from_secs(15 * 60),
            keys: Vec::new(),
            resource_link_uri: ResourceLinkUri::Signed,
        }
    }
}

/// Where one signing key's secret comes from. Secrets never sit in the config file itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySource {
    /// Key id, carried in every token it signs (1-32 of `[A-Za-z0-9_-]`).
    pub id: String,
    /// Name of an environment variable holding the secret, base64url (unpadded or padded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// A file holding the secret, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
}

/// What [`LinksConfig::validate`] finds wrong; each message names the key and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinksConfigError {
    /// `links.ttl` outside [`MIN_TTL`]..=[`MAX_TTL`].
    #[error("links.ttl is {}; it must be between 1m and 60m", humantime::format_duration(*ttl))]
    Ttl {
        /// The configured lifetime.
        ttl: Duration,
    },
    /// `links.public_url` is not an http(s) URL.
    #[error("links.public_url {url:?} must start with http:// or https://")]
    PublicUrl {
        /// The configured URL.
        url: String,
    },
    /// A `[[links.keys]]` entry with both or neither of `secret_env` and `secret_file`.
    #[error("links.keys {id:?}: set exactly one of secret_env and secret_file")]
    KeySource {
        /// The key's id.
        id: String,
    },
}

impl LinksConfig {
    /// Checks what serde cannot: the TTL range and the URL's shape.
    pub fn validate(&self) -> Result<(), LinksConfigError> {
        if self.ttl < MIN_TTL || self.ttl > MAX_TTL {
            return Err(LinksConfigError::Ttl { ttl: self.ttl });
        }
        if !(self.public_url.starts_with("http://") || self.public_url.starts_with("https://")) {
            return Err(LinksConfigError::PublicUrl { url: self.public_url.clone() });
        }
        for k in &self.keys {
            if k.secret_env.is_some() == k.secret_file.is_some() {
                return Err(LinksConfigError::KeySource { id: k.id.clone() });
            }
        }
        Ok(())
    }

    /// The key ring: the configured keys, or the embedded default in `store_dir`.
    pub fn key_ring(&self, store_dir: &Path) -> Result<KeyRing, KeyError> {
        self.key_ring_with_env(store_dir, |var| std::env::var(var).ok())
    }

    /// [`LinksConfig::key_ring`] with the environment lookup injected (tests cannot set
    /// process variables safely while other tests run).
    fn key_ring_with_env(&self, store_dir: &Path, env: impl Fn(&str) -> Option<String>) -> Result<KeyRing, KeyError> {
        if self.keys.is_empty() {
            return KeyRing::load_or_create(store_dir);
        }
        let mut keys = Vec::new();
        for k in &self.keys {
            let (origin, text) = match (&k.secret_env, &k.secret_file) {
                (Some(var), _) => (format!("environment variable {var}"), env(var)),
                (None, Some(path)) => (path.display().to_string(), std::fs::read_to_string(path).ok()),
                (None, None) => (String::from("nowhere"), None),
            };
            let text = text.ok_or_else(|| KeyError::Secret { id: k.id.clone(), origin: origin.clone(), detail: "not readable".into() })?;
            let secret = B64.decode(text.trim().trim_end_matches('=')).map_err(|e| KeyError::Secret {
                id: k.id.clone(),
                origin: origin.clone(),
                detail: format!("not base64url: {e}"),
            })?;
            keys.push((k.id.clone(), secret));
        }
        KeyRing::new(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_bounds() {
        let mut c = LinksConfig::default();
        assert_eq!(c.ttl, Duration::from_secs(900));
        assert!(c.validate().is_ok());
        for (ttl, ok) in [(59, false), (60, true), (3600, true), (3601, false)] {
            c.ttl = Duration::from_secs(ttl);
            assert_eq!(c.validate().is_ok(), ok, "{ttl}s");
        }
    }

    #[test]
    fn configured_keys_from_env_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k2.secret");
        std::fs::write(&file, format!("{}\n", B64.encode([7u8; 32]))).unwrap();
        let env_secret = B64.encode([9u8; 32]);
        let env = |var: &str| (var == "STOWAGE_TEST_LINK_KEY_1").then(|| env_secret.clone());
        let c = LinksConfig {
            keys: vec![
                KeySource { id: "k2".into(), secret_env: None, secret_file: Some(file) },
                KeySource { id: "k1".into(), secret_env: Some("STOWAGE_TEST_LINK_KEY_1".into()), secret_file: None },
            ],
            ..Default::default()
        };
        assert!(c.validate().is_ok());
        let ring = c.key_ring_with_env(dir.path(), env).unwrap();
        assert_eq!(ring.key_ids(), ["k2", "k1"]);
        assert!(!dir.path().join(crate::KEY_FILE_NAME).exists(), "no default key when keys are configured");
    }

    #[test]
    fn missing_secret_is_a_clear_error() {
        let c = LinksConfig {
            keys: vec![KeySource { id: "k".into(), secret_env: Some("STOWAGE_TEST_NO_SUCH_VAR".into()), secret_file: None }],
            ..Default::default()
        };
        let err = c.key_ring(Path::new("/nonexistent")).unwrap_err().to_string();
        assert_eq!(err, r#"secret of signing key "k" in environment variable STOWAGE_TEST_NO_SUCH_VAR: not readable"#);
    }

    #[test]
    fn each_mistake_names_its_key() {
        let ttl = LinksConfig { ttl: Duration::from_secs(7200), ..Default::default() };
        assert_eq!(ttl.validate().unwrap_err().to_string(), "links.ttl is 2h; it must be between 1m and 60m");
        let url = LinksConfig { public_url: "gateway:8787".into(), ..Default::default() };
        assert_eq!(url.validate(), Err(LinksConfigError::PublicUrl { url: "gateway:8787".into() }));
        assert_eq!(url.validate().unwrap_err().to_string(), r#"links.public_url "gateway:8787" must start with http:// or https://"#);
        let both = KeySource { id: "k".into(), secret_env: Some("V".into()), secret_file: Some("f".into()) };
        let keys = LinksConfig { keys: vec![both], ..Default::default() };
        assert_eq!(keys.validate().unwrap_err().to_string(), r#"links.keys "k": set exactly one of secret_env and secret_file"#);
    }
}
