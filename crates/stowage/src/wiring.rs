//! Builds what the commands run on: the configured store (the one place that knows which
//! backend types exist, and where the store lives when nobody said), the link-signing keys
//! (read once per command) and the gateway (one function for `serve`, `agent` and
//! `check-config --tools`, so they cannot drift apart).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use stowage_store::{ArtifactStore, BucketLocation, FsStore, Isolation, MemoryStore, NoOpStore, SharedStore};

use crate::config::{Backend, Config, LEGACY_STORE_DIR};

/// Where the store directory (and the default link-signing key) lives, and who said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreLocation {
    /// Absolute, so that banners and `check-config` name one place whatever the working
    /// directory.
    pub dir: PathBuf,
    pub origin: StoreOrigin,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreOrigin {
    /// `--store DIR` or `STOWAGE_STORE`.
    Flag,
    /// `store.dir` in stowage.toml.
    Config,
    /// Neither: the platform's data directory.
    Default,
}

/// The default store directory: `stowage` in the platform's local data directory. Every
/// command uses the same one, so `stowage artifacts ls` finds what `stowage serve --stdio`
/// stored for a host that started it anywhere. Local rather than roaming on Windows: a store
/// of tool outputs has no business syncing between machines.
pub(crate) fn default_store_dir() -> anyhow::Result<PathBuf> {
    dirs::data_local_dir().map(|d| d.join("stowage")).context(
        "cannot find this platform's data directory for the default store (is HOME set?): pass --store DIR or set store.dir in stowage.toml",
    )
}

/// `--store` first, then `store.dir`, then [`default_store_dir`].
pub(crate) fn store_location(config: &Config, flag: Option<PathBuf>) -> anyhow::Result<StoreLocation> {
    let (dir, origin) = match (flag, &config.store.dir) {
        (Some(dir), _) => (dir, StoreOrigin::Flag),
        (None, Some(dir)) => (dir.clone(), StoreOrigin::Config),
        (None, None) => (default_store_dir()?, StoreOrigin::Default),
    };
    let dir = std::path::absolute(&dir).with_context(|| format!("cannot resolve store directory {}", dir.display()))?;
    Ok(StoreLocation { dir, origin })
}

impl StoreLocation {
    /// One line for the banner and `check-config`: which store, where, why there, and how to
    /// list it.
    pub(crate) fn describe(&self, backend: Backend) -> String {
        match backend {
            Backend::Fs => {
                let dir = self.dir.display();
                match self.origin {
                    StoreOrigin::Default => {
                        format!("fs store {dir} (the default: this platform's data directory; list: stowage artifacts ls)")
                    }
                    StoreOrigin::Flag => format!("fs store {dir} (--store; list: stowage --store {dir} artifacts ls)"),
                    StoreOrigin::Config => format!("fs store {dir} (store.dir; list: stowage artifacts ls with the same config)"),
                }
            }
            Backend::S3 | Backend::Gcs | Backend::Azure => {
                format!("{} store (blobs in the configured bucket, records in PostgreSQL; shared by every instance)", backend.name())
            }
            Backend::Memory => "memory store (lost on exit)".to_owned(),
            Backend::Noop => "noop store (keeps nothing)".to_owned(),
        }
    }

    /// Before the platform data directory was the default, the store was `./.stowage`. When
    /// the default is in use and such a store sits in the working directory, say where it
    /// went, once, on stderr: otherwise its artifacts would seem to have vanished.
    pub(crate) fn hint_about_legacy_store(&self, backend: Backend) {
        let legacy = Path::new(LEGACY_STORE_DIR);
        if backend == Backend::Fs && self.origin == StoreOrigin::Default && legacy.join("blobs").is_dir() {
            eprintln!(
                "stowage: note: the store is {}; the ./{LEGACY_STORE_DIR} here is an older default store: use it with --store {LEGACY_STORE_DIR}",
                self.dir.display()
            );
        }
    }
}

pub(crate) fn open_store(config: &Config, location: &StoreLocation, keys: &Keys) -> anyhow::Result<Arc<dyn ArtifactStore>> {
    let isolation = Isolation::from_isolate_sessions(config.store.isolate_sessions);
    check_backend_keys(config)?;
    Ok(match config.store.backend {
        Backend::Fs => {
            let dir = &location.dir;
            let store = FsStore::builder(dir)
                .retention(config.retention.clone())
                .isolation(isolation)
                .open()
                .map_err(|e| one_cause(format!("cannot open store {}", dir.display()), e))?;
            Arc::new(store)
        }
        Backend::S3 | Backend::Gcs | Backend::Azure => Arc::new(open_shared(config, keys, isolation)?),
        Backend::Memory => Arc::new(MemoryStore::builder().retention(config.retention.clone()).isolation(isolation).build()),
        // Keeps nothing, so there is nothing to isolate.
        Backend::Noop => Arc::new(NoOpStore::new()),
    })
}

/// Keys that only mean something with another backend are refused rather than ignored: an
/// `[index] url` beside `backend = "fs"` is a half-done migration, not a preference.
fn check_backend_keys(config: &Config) -> anyhow::Result<()> {
    let (store, index) = (&config.store, &config.index);
    let backend = store.backend;
    let name = backend.name();
    if let Some(provider) = backend.provider() {
        if store.bucket.trim().is_empty() {
            let what = if provider == stowage_store::Provider::Azure { "the container" } else { "the bucket" };
            bail!("[store] backend = \"{name}\" needs bucket = \"<name>\": {what} the artifacts go to");
        }
        if index.url.trim().is_empty() {
            bail!(
                "[store] backend = \"{name}\" needs [index] url = \"postgres://user@host:5432/db\": instances sharing a bucket must share its records too"
            );
        }
        if provider != stowage_store::Provider::S3 && !store.region.is_empty() {
            bail!("[store] region only applies to backend = \"s3\" (backend is \"{name}\"): remove it");
        }
        // The embedded default key lives in each machine's own store directory: every
        // instance would sign with a different key and reject the others' links.
        if config.links.keys.is_empty() {
            bail!(
                "[store] backend = \"{name}\" needs [links] keys with a shared source (secret_env or secret_file, the same on every instance): the embedded default key is per machine, so a link minted by one instance would fail on another"
            );
        }
    } else {
        if config.gateway.chaining.presign_direct {
            bail!(
                "gateway.chaining.presign_direct needs an object-store backend ([store] backend = \"s3\", \"gcs\" or \"azure\"): only those serve presigned URLs; remove it or switch the backend"
            );
        }
        let set: Vec<&str> = [("bucket", &store.bucket), ("endpoint", &store.endpoint), ("region", &store.region)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, _)| k)
            .collect();
        if !set.is_empty() {
            bail!(
                "[store] {} only apply to backend = \"s3\", \"gcs\" or \"azure\" (backend is \"{name}\"): remove them or set the backend",
                set.join(", "),
            );
        }
        if !index.url.is_empty() || !index.ca_file.is_empty() {
            bail!(
                "[index] keys only apply to backend = \"s3\", \"gcs\" or \"azure\" (the fs backend keeps its own SQLite index): remove them or set the backend"
            );
        }
    }
    Ok(())
}

/// The shared backends (`s3`, `gcs`, `azure`). Opening one is async (it connects and migrates the database) while the
/// commands open their store synchronously; every command runs on the multi-threaded runtime,
/// where `block_in_place` may wait for it without stalling other tasks.
fn open_shared(config: &Config, keys: &Keys, isolation: Isolation) -> anyhow::Result<SharedStore> {
    let store = &config.store;
    let open = shared_builder(config, keys, isolation)?.open();
    let handle = tokio::runtime::Handle::current();
    let shared = tokio::task::block_in_place(|| handle.block_on(open))
        .map_err(|e| one_cause(format!("cannot open the {} store (bucket {})", store.backend.name(), store.bucket), e))?;
    // Not through tracing: a quiet STOWAGE_LOG must not hide it.
    let skew = shared.clock_skew();
    if skew.unsigned_abs() > stowage_store::MAX_CLOCK_SKEW {
        eprintln!("stowage: warning: {}", stowage_store::skew_warning(skew));
    }
    Ok(shared)
}

/// `stowage artifacts relocate`: records the configured bucket location as the shared store's
/// (see [`stowage_store::SharedStoreBuilder::relocate`]).
pub(crate) async fn relocate_shared_store(config: &Config, keys: &Keys) -> anyhow::Result<()> {
    let store = &config.store;
    if store.backend.provider().is_none() {
        bail!(
            "stowage artifacts relocate moves a shared store ([store] backend = \"s3\", \"gcs\" or \"azure\"); an fs store moves with its directory"
        );
    }
    check_backend_keys(config)?;
    let isolation = Isolation::from_isolate_sessions(store.isolate_sessions);
    let from = shared_builder(config, keys, isolation)?
        .relocate()
        .await
        .map_err(|e| one_cause(format!("cannot relocate the {} store to bucket {}", store.backend.name(), store.bucket), e))?;
    eprintln!(
        "relocated: the store's blobs are now at bucket {} prefix {:?} (they were at {from}); start the instances with this configuration, and remove the old copy once they run",
        store.bucket, store.prefix
    );
    Ok(())
}

/// The shared store's builder, as `serve` configures it. The link-signing keys' fingerprints
/// go with it when the keys load (the store refuses keys that are not the fleet's); a command
/// run without the secrets at hand (`stowage artifacts ls`) mints no link and checks none.
fn shared_builder(config: &Config, keys: &Keys, isolation: Isolation) -> anyhow::Result<stowage_store::SharedStoreBuilder> {
    let (store, index) = (&config.store, &config.index);
    let non_empty = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_owned());
    let bucket = BucketLocation {
        provider: store.backend.provider().context("not an object-store backend")?,
        bucket: store.bucket.clone(),
        prefix: store.prefix.clone(),
        endpoint: non_empty(&store.endpoint),
        region: non_empty(&store.region),
    };
    let mut builder = SharedStore::builder(bucket, index.url.clone())
        .index_schema(index.schema.clone())
        .max_connections(index.max_connections)
        .retention(config.retention.clone())
        .isolation(isolation);
    if !index.ca_file.is_empty() {
        builder = builder.index_ca_file(&index.ca_file);
    }
    if let Ok(Some(ring)) = keys.configured() {
        builder = builder.link_keys(ring.fingerprints());
    }
    Ok(builder)
}

/// What `check-config` says about the shared store: connects to its database and bucket,
/// changing nothing, and reports whether they are one store's (the same check `serve` runs
/// when it opens the store, where a mismatch refuses to start). `None` for the other backends.
pub(crate) async fn check_shared_store(
    config: &Config,
    keys: &Keys,
) -> anyhow::Result<Option<(stowage_store::StoreCheck, time::Duration)>> {
    if config.store.backend.provider().is_none() {
        return Ok(None);
    }
    check_backend_keys(config)?;
    let isolation = Isolation::from_isolate_sessions(config.store.isolate_sessions);
    let name = || format!("the {} store (bucket {})", config.store.backend.name(), config.store.bucket);
    let builder = shared_builder(config, keys, isolation)?;
    let skew = builder.clock_skew().await.map_err(|e| one_cause(name(), e))?;
    let check = builder.check().await.map_err(|e| one_cause(name(), e))?;
    Ok(Some((check, skew)))
}

/// `context: error` as one error: a store error's message already ends with its cause, so
/// anyhow's chain (which would print that cause again) is not used.
fn one_cause(context: String, e: stowage_store::StoreError) -> anyhow::Error {
    anyhow::anyhow!("{context}: {e}")
}

/// The store as the pipeline's sink.
pub(crate) fn sink(store: Arc<dyn ArtifactStore>) -> Arc<dyn stowage_core::ArtifactSink> {
    stowage_store::into_sink(store)
}

/// The link-signing key ring, read at most once per command from where `[links] keys` say, or
/// the store's default key (made on first use): the store's identity check, every signer and
/// the link server's probe share that one reading.
pub(crate) struct Keys {
    links: stowage_links::LinksConfig,
    dir: PathBuf,
    ring: std::sync::OnceLock<stowage_links::KeyRing>,
}

impl Keys {
    /// The keys `config` names for the store at `location` (not read yet).
    pub(crate) fn new(config: &Config, location: &StoreLocation) -> Keys {
        Keys { links: config.links.clone(), dir: location.dir.clone(), ring: std::sync::OnceLock::new() }
    }

    /// The key ring; the store's default key is made here when no keys are configured.
    pub(crate) fn ring(&self) -> anyhow::Result<stowage_links::KeyRing> {
        if let Some(ring) = self.ring.get() {
            return Ok(ring.clone());
        }
        let ring = self.links.key_ring(&self.dir).context("cannot load the link-signing key")?;
        Ok(self.ring.get_or_init(|| ring).clone())
    }

    /// The configured keys only (`None` without `[links] keys`): reads their files and
    /// variables, creates nothing.
    pub(crate) fn configured(&self) -> anyhow::Result<Option<stowage_links::KeyRing>> {
        if self.links.keys.is_empty() { Ok(None) } else { self.ring().map(Some) }
    }
}

/// What a command brings to its gateway besides the configuration.
pub(crate) struct GatewayParts {
    /// The `[gateway]` settings as the command runs them (`serve`'s flags applied).
    pub gateway: stowage_mcp::GatewayConfig,
    pub upstreams: Vec<stowage_mcp::config::UpstreamSpec>,
    /// Where answers are offloaded and what the reader tools read; `None`: nothing is kept
    /// (`check-config --tools` only lists).
    pub store: Option<Arc<dyn ArtifactStore>>,
    /// Signed links for tools and people; `None`: `artifact://` URIs only.
    pub links: Option<stowage_http::Links>,
    /// Host profiles (`[[hosts]]` over the built-in ones); `None`: the built-in ones.
    pub hosts: Option<Arc<stowage_mcp::hosts::Hosts>>,
    /// Where each upstream's last catalog is kept across runs; `None`: nowhere.
    pub state_dir: Option<PathBuf>,
    /// MCP Apps: the viewer and its tools.
    pub apps: Option<Arc<stowage_mcp::apps::Apps>>,
}

/// The gateway every command that runs one builds (`serve`, `agent`, `check-config --tools`):
/// the shaper from `[transform]` and every server's own table, people's signed links in
/// answers when `[links] resource_link_uri = "signed"`, the bundled demo server for an
/// in-process entry, and no secret of this configuration in any upstream's environment.
pub(crate) fn gateway(config: &Config, parts: GatewayParts) -> stowage_mcp::GatewayBuilder {
    let GatewayParts { gateway, upstreams, store, links, hosts, state_dir, apps } = parts;
    let kept: Arc<dyn ArtifactStore> = store.clone().unwrap_or_else(|| Arc::new(NoOpStore::new()));
    let mut shaper = stowage_mcp::shape::Shaper::from_config(&config.transform, &gateway, sink(kept));
    if let Some(l) = &links
        && config.links.resource_link_uri == stowage_links::ResourceLinkUri::Signed
    {
        shaper = shaper.with_links(Arc::new(l.for_people().clone()));
    }
    let demo: stowage_mcp::InProcessFactory = Arc::new(|| {
        let (from_server, to_server) = stowage_demo::spawn_in_process();
        (Box::new(from_server), Box::new(to_server))
    });
    let mut builder =
        stowage_mcp::Gateway::builder(gateway, upstreams, shaper).in_process(demo).secret_env(secret_env(config)).state_dir(state_dir);
    if let Some(l) = links {
        builder = builder.links(l);
    }
    if let Some(s) = store {
        builder = builder.store(s);
    }
    if let Some(h) = hosts {
        builder = builder.hosts(h);
    }
    if let Some(a) = apps {
        builder = builder.apps(a);
    }
    builder
}

/// The environment variables that hold this configuration's secrets: link-signing keys, the
/// JWT secret, HTTP upstreams' bearer tokens. No upstream child ever gets them.
pub(crate) fn secret_env(config: &Config) -> Vec<String> {
    let links = config.links.keys.iter().filter_map(|k| k.secret_env.clone());
    let jwt = config.auth.jwt.as_ref().and_then(|j| j.hs256_secret_env.clone());
    let bearers = config.gateway.servers.values().filter_map(|s| s.bearer_token_env.clone());
    links.chain(jwt).chain(bearers).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_then_config_then_the_platform_data_directory() {
        let mut config = Config::default();
        let default = store_location(&config, None).unwrap();
        assert_eq!(default.origin, StoreOrigin::Default);
        assert_eq!(default.dir, default_store_dir().unwrap());
        assert!(default.dir.ends_with("stowage") && default.dir.is_absolute(), "{}", default.dir.display());
        config.store.dir = Some(PathBuf::from("rel/store"));
        let from_config = store_location(&config, None).unwrap();
        assert_eq!(from_config.origin, StoreOrigin::Config);
        assert!(from_config.dir.is_absolute() && from_config.dir.ends_with("rel/store"));
        let flag = store_location(&config, Some(PathBuf::from("/srv/s"))).unwrap();
        assert_eq!((flag.dir.as_path(), flag.origin), (Path::new("/srv/s"), StoreOrigin::Flag));
        assert!(flag.describe(Backend::Fs).contains("stowage --store /srv/s artifacts ls"));
    }

    fn err(text: &str) -> String {
        let config = Config::parse(text, Path::new("f")).unwrap();
        check_backend_keys(&config).unwrap_err().to_string()
    }

    #[test]
    fn the_s3_backend_says_what_it_is_missing() {
        assert!(err("[store]\nbackend = \"s3\"\n").contains("needs bucket"));
        assert!(err("[store]\nbackend = \"s3\"\nbucket = \"b\"\n").contains("needs [index] url"));
        let no_keys = err("[store]\nbackend = \"s3\"\nbucket = \"b\"\n[index]\nurl = \"postgres://db/x\"\n");
        assert!(no_keys.contains("[links] keys") && no_keys.contains("another"), "{no_keys}");
    }

    #[test]
    fn gcs_and_azure_need_the_same_keys_and_refuse_a_region() {
        assert!(err("[store]\nbackend = \"azure\"\n").contains("needs bucket = \"<name>\": the container"));
        assert!(err("[store]\nbackend = \"gcs\"\nbucket = \"b\"\n").starts_with("[store] backend = \"gcs\" needs [index] url"));
        let region = err("[store]\nbackend = \"gcs\"\nbucket = \"b\"\nregion = \"eu\"\n[index]\nurl = \"postgres://db/x\"\n");
        assert_eq!(region, "[store] region only applies to backend = \"s3\" (backend is \"gcs\"): remove it");
    }

    #[test]
    fn presign_direct_needs_an_object_store_backend() {
        let e = err("[gateway.chaining]\npresign_direct = true\n");
        assert!(e.starts_with("gateway.chaining.presign_direct needs an object-store backend"), "{e}");
    }

    #[test]
    fn s3_keys_beside_another_backend_are_refused_not_ignored() {
        assert!(err("[store]\nbucket = \"b\"\nregion = \"eu-west-1\"\n").starts_with("[store] bucket, region only apply"));
        assert!(err("[index]\nurl = \"postgres://db/x\"\n").starts_with("[index] keys only apply"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_database_fails_the_start_with_one_line() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let text = format!(
            "[store]\nbackend = \"s3\"\nbucket = \"b\"\nendpoint = \"http://127.0.0.1:1\"\n[index]\nurl = \"postgres://u@127.0.0.1:{port}/db\"\n[links]\nkeys = [{{ id = \"k\", secret_env = \"X\" }}]\n"
        );
        let config = Config::parse(&text, Path::new("f")).unwrap();
        let location = store_location(&config, None).unwrap();
        let Err(err) = open_store(&config, &location, &Keys::new(&config, &location)) else { panic!("opened a store on a closed port") };
        let err = format!("{err:#}");
        assert!(err.starts_with("cannot open the s3 store (bucket b): open index postgres://127.0.0.1:"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        // One cause, said once (it used to come twice: in the store's message and its chain).
        assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    }
}
