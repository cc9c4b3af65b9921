//! Builds the configured store: the one place that knows which backend types exist.

use std::sync::Arc;

use anyhow::{Context, bail};
use stowage_store::{ArtifactStore, FsStore, Isolation, MemoryStore, NoOpStore, S3Location, SharedStore};

use crate::config::{Backend, Config};

pub fn open_store(config: &Config) -> anyhow::Result<Arc<dyn ArtifactStore>> {
    let isolation = Isolation::from_isolate_sessions(config.store.isolate_sessions);
    check_backend_keys(config)?;
    Ok(match config.store.backend {
        Backend::Fs => {
            let dir = &config.store.dir;
            let store = FsStore::builder(dir)
                .retention(config.retention.clone())
                .isolation(isolation)
                .open()
                .with_context(|| format!("cannot open store {}", dir.display()))?;
            Arc::new(store)
        }
        Backend::S3 => Arc::new(open_shared(config, isolation)?),
        Backend::Memory => Arc::new(MemoryStore::builder().retention(config.retention.clone()).isolation(isolation).build()),
        // Keeps nothing, so there is nothing to isolate.
        Backend::Noop => Arc::new(NoOpStore::new()),
    })
}

/// Keys that only mean something with the other backend are refused rather than ignored: an
/// `[index] url` beside `backend = "fs"` is a half-done migration, not a preference.
fn check_backend_keys(config: &Config) -> anyhow::Result<()> {
    let (store, index) = (&config.store, &config.index);
    if store.backend == Backend::S3 {
        if store.bucket.trim().is_empty() {
            bail!("[store] backend = \"s3\" needs bucket = \"<name>\": the bucket the artifacts go to");
        }
        if index.url.trim().is_empty() {
            bail!(
                "[store] backend = \"s3\" needs [index] url = \"postgres://user@host:5432/db\": instances sharing a bucket must share its records too"
            );
        }
        // The embedded default key lives in each machine's own store directory: every
        // instance would sign with a different key and reject the others' links.
        if config.links.keys.is_empty() {
            bail!(
                "[store] backend = \"s3\" needs [links] keys with a shared source (secret_env or secret_file, the same on every instance): the embedded default key is per machine, so a link minted by one instance would fail on another"
            );
        }
    } else {
        let set: Vec<&str> = [("bucket", &store.bucket), ("endpoint", &store.endpoint), ("region", &store.region)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, _)| k)
            .collect();
        if !set.is_empty() {
            bail!(
                "[store] {} only apply to backend = \"s3\" (backend is {:?}): remove them or set the backend",
                set.join(", "),
                store.backend
            );
        }
        if !index.url.is_empty() || !index.ca_file.is_empty() {
            bail!(
                "[index] keys only apply to backend = \"s3\" (the fs backend keeps its own SQLite index): remove them or set the backend"
            );
        }
    }
    Ok(())
}

/// The `s3` backend. Opening it is async (it connects and migrates the database) while the
/// commands open their store synchronously; every command runs on the multi-threaded runtime,
/// where `block_in_place` may wait for it without stalling other tasks.
fn open_shared(config: &Config, isolation: Isolation) -> anyhow::Result<SharedStore> {
    let (store, index) = (&config.store, &config.index);
    let non_empty = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_owned());
    let location = S3Location {
        bucket: store.bucket.clone(),
        prefix: store.prefix.clone(),
        endpoint: non_empty(&store.endpoint),
        region: non_empty(&store.region),
    };
    let mut builder = SharedStore::builder(location, index.url.clone())
        .index_schema(index.schema.clone())
        .max_connections(index.max_connections)
        .retention(config.retention.clone())
        .isolation(isolation);
    if !index.ca_file.is_empty() {
        builder = builder.index_ca_file(&index.ca_file);
    }
    let open = builder.open();
    let handle = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| handle.block_on(open)).with_context(|| format!("cannot open the s3 store (bucket {})", store.bucket))
}

/// The store as the pipeline's sink.
pub fn sink(store: Arc<dyn ArtifactStore>) -> Arc<dyn stowage_core::ArtifactSink> {
    stowage_store::into_sink(store)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

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
        let Err(err) = open_store(&config) else { panic!("opened a store on a closed port") };
        let err = format!("{err:#}");
        assert!(err.starts_with("cannot open the s3 store (bucket b): open index postgres://127.0.0.1:"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}
