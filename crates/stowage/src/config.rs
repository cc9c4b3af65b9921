//! `stowage.toml`: the validated configuration, and how it is found and read.
//!
//! Each section belongs to the crate that uses it (`[retention]` to the store, `[transform]` to
//! the pipeline); this module only composes them and turns parse errors into one line that
//! names the file, the line and the offending key. Unknown keys are errors everywhere: a
//! misspelt limit that silently falls back to its default is worse than a refusal to start.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use stowage_http::AuthConfig;
use stowage_links::LinksConfig;
use stowage_store::RetentionConfig;
use stowage_transform::TransformConfig;

/// The store directory of earlier versions, relative to the working directory: still
/// worth a hint when one is found there (see [`crate::wiring::store_location`]).
pub(crate) const LEGACY_STORE_DIR: &str = ".stowage";
/// The config file's name in each place it is looked for (see [`ConfigSearch`]).
pub(crate) const DEFAULT_CONFIG_FILE: &str = "stowage.toml";

/// The whole `stowage.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub retention: RetentionConfig,
    #[serde(default)]
    pub transform: TransformConfig,
    #[serde(default)]
    pub links: LinksConfig,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub gateway: stowage_mcp::GatewayConfig,
    #[serde(default)]
    pub agent: stowage_agent::AgentConfig,
    #[serde(default)]
    pub apps: stowage_mcp::apps::AppsConfig,
    /// `[[hosts]]` (or `[hosts] adapt`): host profiles, see `stowage_mcp::hosts`.
    #[serde(default)]
    pub hosts: stowage_mcp::hosts::HostsConfig,
    #[serde(default)]
    pub index: IndexConfig,
}

/// `[store]`: where artifacts live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct StoreConfig {
    /// Which backend: `fs` (blobs on disk + embedded SQLite index); `s3`, `gcs` or `azure`
    /// (blobs in an S3, Google Cloud Storage or Azure Blob Storage bucket, records in
    /// PostgreSQL: several instances share them); `memory` (lost on exit) or `noop` (keeps
    /// nothing: offloaded content is replaced by a truncated marker).
    pub backend: Backend,
    /// Directory of the `fs` backend (and of the default link-signing key). Relative paths
    /// are relative to the working directory. Unset: `stowage` in the platform's local data
    /// directory (`$XDG_DATA_HOME/stowage`, `~/.local/share/stowage`, `~/Library/Application
    /// Support/stowage`, `%LOCALAPPDATA%\stowage`), the same for every command wherever it
    /// runs: a host starts `serve --stdio` in a directory of its choosing, often unwritable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Whether each session only sees its own artifacts. Off (the default), an artifact
    /// belongs to its tenant and user and every session of that user reaches it; on, access
    /// is per (tenant, user, session). Switching it on an existing `fs` store re-keys its
    /// index the next time the store opens.
    pub isolate_sessions: bool,
    /// `s3`, `gcs`, `azure` backends: the bucket (the container, on Azure).
    pub bucket: String,
    /// `s3`, `gcs`, `azure` backends: the key prefix objects go under (`<prefix>/blobs/…`).
    pub prefix: String,
    /// `s3`, `gcs`, `azure` backends: endpoint URL of a compatible or local service (R2, MinIO;
    /// an Azure account URL; a GCS base URL); empty is the provider's own.
    pub endpoint: String,
    /// `s3` backend: region; empty takes `AWS_REGION`/`AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: Backend::Fs,
            dir: None,
            isolate_sessions: false,
            bucket: String::new(),
            prefix: "stowage".into(),
            endpoint: String::new(),
            region: String::new(),
        }
    }
}

/// `[index]`: where the `s3` backend keeps its records (the `fs` backend's index is the
/// SQLite file in its directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct IndexConfig {
    /// `postgres://user@host:port/database` (a password is better in `PGPASSWORD`-style
    /// secrets management than here, but the URL accepts one). Required by `backend = "s3"`.
    pub url: String,
    /// PostgreSQL schema holding the tables (created, and migrated, on start).
    pub schema: String,
    /// Most connections one instance opens.
    pub max_connections: usize,
    /// PEM file of CA certificates to trust for the database's TLS besides Mozilla's roots;
    /// empty: those roots only. Whether TLS is used is the URL's `sslmode`.
    pub ca_file: String,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig { url: String::new(), schema: "stowage".into(), max_connections: 16, ca_file: String::new() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Backend {
    Fs,
    S3,
    Gcs,
    Azure,
    Memory,
    Noop,
}

impl Backend {
    /// The object store of the shared backends (`s3`, `gcs`, `azure`: blobs in a bucket,
    /// records in PostgreSQL); `None` for the single-machine ones.
    pub(crate) fn provider(self) -> Option<stowage_store::Provider> {
        match self {
            Backend::S3 => Some(stowage_store::Provider::S3),
            Backend::Gcs => Some(stowage_store::Provider::Gcs),
            Backend::Azure => Some(stowage_store::Provider::Azure),
            Backend::Fs | Backend::Memory | Backend::Noop => None,
        }
    }

    /// Its name in `[store] backend`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Fs => "fs",
            Backend::S3 => "s3",
            Backend::Gcs => "gcs",
            Backend::Azure => "azure",
            Backend::Memory => "memory",
            Backend::Noop => "noop",
        }
    }
}

/// Where `stowage.toml` came from: said by the banner, `check-config` and the debug log, so a
/// config that is not the one a user edited is never a mystery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConfigSource {
    /// `--config FILE`.
    Flag(PathBuf),
    /// `STOWAGE_CONFIG`.
    Env(PathBuf),
    /// `stowage.toml` in the directory of the `--mcp-config` file.
    BesideMcpConfig(PathBuf),
    /// `stowage/stowage.toml` in the platform's config directory (`~/.config` on Linux).
    ConfigDir(PathBuf),
    /// `stowage.toml` in the working directory.
    WorkingDir(PathBuf),
    /// None found: the built-in defaults. The places looked in, in order.
    Defaults(Vec<PathBuf>),
}

impl ConfigSource {
    /// The file read, if any.
    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            ConfigSource::Flag(p) | ConfigSource::Env(p) | ConfigSource::BesideMcpConfig(p) | ConfigSource::ConfigDir(p) => Some(p),
            ConfigSource::WorkingDir(p) => Some(p),
            ConfigSource::Defaults(_) => None,
        }
    }
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::Flag(p) => write!(f, "{} (--config)", p.display()),
            ConfigSource::Env(p) => write!(f, "{} (STOWAGE_CONFIG)", p.display()),
            ConfigSource::BesideMcpConfig(p) => write!(f, "{} (beside the --mcp-config file)", p.display()),
            ConfigSource::ConfigDir(p) => write!(f, "{} (the user config directory)", p.display()),
            ConfigSource::WorkingDir(p) => write!(f, "{} (the working directory)", p.display()),
            ConfigSource::Defaults(looked) => {
                let places: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
                write!(f, "none found, using the defaults (looked for {})", places.join(", "))
            }
        }
    }
}

/// What [`Config::find`] searches: the explicit choices, then the places a user keeps the file.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConfigSearch {
    /// `--config FILE`: must exist.
    pub flag: Option<PathBuf>,
    /// `STOWAGE_CONFIG` (empty counts as unset): must exist.
    pub env: Option<PathBuf>,
    /// The `--mcp-config` file, whose directory is looked in.
    pub mcp_config: Option<PathBuf>,
    /// The platform's config directory (`dirs::config_dir()`), where `stowage/stowage.toml`
    /// is looked for.
    pub config_dir: Option<PathBuf>,
    /// The working directory.
    pub cwd: PathBuf,
}

impl ConfigSearch {
    /// The search as this process would run it, for a command that may name an `--mcp-config`.
    pub(crate) fn from_process(flag: Option<PathBuf>, mcp_config: Option<&Path>) -> anyhow::Result<ConfigSearch> {
        let env = std::env::var_os("STOWAGE_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from);
        let cwd = std::env::current_dir().context("cannot read the working directory")?;
        Ok(ConfigSearch { flag, env, mcp_config: mcp_config.map(Path::to_path_buf), config_dir: dirs::config_dir(), cwd })
    }

    /// The file `find` reads and where it came from: the first of `--config`,
    /// `STOWAGE_CONFIG`, beside `--mcp-config`, the config directory, the working directory
    /// that exists (the first two must exist when given).
    pub(crate) fn locate(&self) -> anyhow::Result<ConfigSource> {
        let absolute = |p: &Path| if p.is_absolute() { p.to_path_buf() } else { self.cwd.join(p) };
        if let Some(p) = &self.flag {
            return Ok(ConfigSource::Flag(existing(p, &absolute(p), "--config", &self.cwd)?));
        }
        if let Some(p) = &self.env {
            return Ok(ConfigSource::Env(existing(p, &absolute(p), "STOWAGE_CONFIG", &self.cwd)?));
        }
        let mut looked = Vec::new();
        let mut places: Vec<(PathBuf, Place)> = Vec::new();
        if let Some(dir) = self.mcp_config.as_deref().map(absolute).and_then(|m| m.parent().map(Path::to_path_buf)) {
            places.push((dir.join(DEFAULT_CONFIG_FILE), ConfigSource::BesideMcpConfig));
        }
        if let Some(dir) = &self.config_dir {
            places.push((dir.join("stowage").join(DEFAULT_CONFIG_FILE), ConfigSource::ConfigDir));
        }
        places.push((self.cwd.join(DEFAULT_CONFIG_FILE), ConfigSource::WorkingDir));
        for (path, source) in places {
            if path.is_file() {
                return Ok(source(path));
            }
            looked.push(path);
        }
        Ok(ConfigSource::Defaults(looked))
    }
}

/// One place a `stowage.toml` may be, as the source it would be.
type Place = fn(PathBuf) -> ConfigSource;

/// `path` (`given` made absolute) when it is a file; else one line saying what was given and
/// where it was looked for.
fn existing(given: &Path, path: &Path, given_as: &str, cwd: &Path) -> anyhow::Result<PathBuf> {
    crate::paths::refuse_unexpanded(given_as, given, cwd)?;
    anyhow::ensure!(
        path.is_file(),
        "{given_as} {}: no such file (the working directory is {}; hosts start stowage in a directory of their choosing, so give an absolute path)",
        given.display(),
        cwd.display()
    );
    Ok(path.to_path_buf())
}

impl Config {
    /// Finds `stowage.toml` as [`ConfigSearch::locate`] says and reads it; the defaults when
    /// there is none. Returns the config and where it came from.
    pub(crate) fn find(search: &ConfigSearch) -> anyhow::Result<(Config, ConfigSource)> {
        let source = search.locate()?;
        let Some(path) = source.path() else { return Ok((Config::default(), source)) };
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read config file {}", path.display()))?;
        let config = Config::parse(&text, path)?;
        Ok((config, source))
    }

    /// Parses config text; errors name `origin`, the line and the key.
    pub(crate) fn parse(text: &str, origin: &Path) -> anyhow::Result<Config> {
        match toml::from_str::<Config>(text) {
            Ok(c) => Ok(c),
            Err(e) => {
                let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
                // toml says "field"; in a config file they are keys.
                let message = e.message().replace('\n', " ").replace("unknown field", "unknown key");
                match line {
                    Some(line) => bail!("{}:{line}: {message}", origin.display()),
                    None => bail!("{}: {message}", origin.display()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_all_defaults() {
        let c = Config::parse("", Path::new("x.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.store.dir, None, "the platform data directory, decided by wiring::store_location");
    }

    #[test]
    fn unknown_keys_name_the_key_file_and_line() {
        for (text, key, line) in [
            ("[store]\nbackend = \"fs\"\ndirr = \"x\"\n", "dirr", 3),
            ("[retention]\nttl_seconds = 5\n", "ttl_seconds", 2),
            ("[stor]\n", "stor", 1),
            ("[transform]\nno_such_key = 1\n", "no_such_key", 2),
        ] {
            let err = Config::parse(text, Path::new("conf/stowage.toml")).unwrap_err().to_string();
            assert!(err.starts_with(&format!("conf/stowage.toml:{line}: ")), "{err}");
            assert!(err.contains(key), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    /// The reference file must list every key with its true default: parsing it gives the
    /// defaults, and as a table it equals the serialised defaults (so no key is missing).
    #[test]
    fn reference_file_documents_every_key_with_its_default() {
        let text = include_str!("../../../examples/stowage.toml");
        let parsed = Config::parse(text, Path::new("examples/stowage.toml")).unwrap();
        assert_eq!(parsed, Config::default());
        let file: toml::Table = toml::from_str(text).unwrap();
        let defaults = toml::Table::try_from(Config::default()).unwrap();
        assert_eq!(file, defaults, "examples/stowage.toml and the defaults differ");
    }

    /// README's configuration table names every key of the defaults, and where a row gives a
    /// plain TOML value as the default, it is the built-in one (a row that says "see file",
    /// "unset", or per profile is checked for its key only).
    #[test]
    fn readme_documents_every_key_with_its_true_default() {
        fn leaves(prefix: &str, v: &toml::Value, out: &mut Vec<(String, toml::Value)>) {
            match v {
                toml::Value::Table(t) if !t.is_empty() => {
                    for (k, x) in t {
                        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                        leaves(&key, x, out);
                    }
                }
                other => out.push((prefix.to_owned(), other.clone())),
            }
        }
        let readme = include_str!("../../../README.md");
        let table = readme.split_once("## Configuration: `stowage.toml`").expect("README's configuration section").1;
        // Rows: | `key` | default | meaning |
        let mut rows = std::collections::BTreeMap::new();
        for line in table.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split(" | ").collect();
            let key = cells[0].trim_start_matches("| ").trim_matches('`').to_owned();
            rows.insert(key, cells.get(1).copied().unwrap_or("").trim().to_owned());
        }
        let mut defaults = Vec::new();
        leaves("", &toml::Value::Table(toml::Table::try_from(Config::default()).unwrap()), &mut defaults);
        let mut problems = Vec::new();
        for (key, value) in &defaults {
            // `gateway.servers.<name>` covers the map of servers; the `[[hosts]]` rows cover the
            // list of profiles, written as an array of tables.
            let row = rows.get(key).or_else(|| {
                rows.iter()
                    .find(|(k, _)| {
                        (k.contains('<') && key.starts_with(k.split('<').next().unwrap().trim_end_matches('.')))
                            || (key == "hosts.profiles" && k.starts_with("[[hosts]]"))
                    })
                    .map(|(_, d)| d)
            });
            let Some(default) = row else {
                problems.push(format!("{key}: no row (default {value})"));
                continue;
            };
            // A cell that is one backticked TOML value is checked against the default.
            let Some(literal) = default.strip_prefix('`').and_then(|d| d.strip_suffix('`')).filter(|d| !d.contains('`')) else { continue };
            match toml::from_str::<toml::Table>(&format!("v = {literal}")) {
                Ok(t) if t["v"] == *value => {}
                Ok(t) => problems.push(format!("{key}: README says {literal}, the default is {value} ({})", t["v"])),
                Err(_) => {}
            }
        }
        assert!(problems.is_empty(), "README's configuration table is off:\n{}", problems.join("\n"));
    }

    #[test]
    fn store_isolation_and_user_and_tenant_budgets_parse() {
        let text = "[store]\nisolate_sessions = true\n[retention]\nmax_user_bytes = 10\nmax_tenant_bytes = 20\n";
        let c = Config::parse(text, Path::new("f")).unwrap();
        assert!(c.store.isolate_sessions);
        assert_eq!((c.retention.max_user_bytes, c.retention.max_tenant_bytes), (10, 20));
        let err = Config::parse("[store]\nisolate_sessions = \"yes\"\n", Path::new("f")).unwrap_err().to_string();
        assert!(err.starts_with("f:2: ") && err.contains("bool"), "{err}");
    }

    #[test]
    fn the_s3_backend_and_its_index_parse() {
        let text =
            "[store]\nbackend = \"s3\"\nbucket = \"b\"\nendpoint = \"http://127.0.0.1:9000\"\n[index]\nurl = \"postgres://u@db/stowage\"\n";
        let c = Config::parse(text, Path::new("f")).unwrap();
        assert_eq!((c.store.backend, c.store.bucket.as_str(), c.store.prefix.as_str()), (Backend::S3, "b", "stowage"));
        assert_eq!(c.index.url, "postgres://u@db/stowage");
        let err = Config::parse("[index]\nurll = \"x\"\n", Path::new("f")).unwrap_err().to_string();
        assert!(err.starts_with("f:2: ") && err.contains("urll"), "{err}");
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(Config::parse("[store]\nbackend = \"s4\"\n", Path::new("f")).is_err());
        assert!(Config::parse("[retention]\nttl = \"forever\"\n", Path::new("f")).is_err());
        assert!(Config::parse("[retention]\nmax_artifact_bytes = -1\n", Path::new("f")).is_err());
    }
}
