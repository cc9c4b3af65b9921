//! Builds the configured store: the one place that knows which backend types exist, and
//! where the store lives when nobody said.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use stowage_store::{ArtifactStore, FsStore, Isolation, MemoryStore, NoOpStore};

use crate::config::{Backend, Config, LEGACY_STORE_DIR};

/// Where the store directory (and the default link-signing key) lives, and who said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLocation {
    /// Absolute, so that banners and `check-config` name one place whatever the working
    /// directory.
    pub dir: PathBuf,
    pub origin: StoreOrigin,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOrigin {
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
pub fn default_store_dir() -> anyhow::Result<PathBuf> {
    dirs::data_local_dir().map(|d| d.join("stowage")).context(
        "cannot find this platform's data directory for the default store (is HOME set?): pass --store DIR or set store.dir in stowage.toml",
    )
}

/// `--store` first, then `store.dir`, then [`default_store_dir`].
pub fn store_location(config: &Config, flag: Option<PathBuf>) -> anyhow::Result<StoreLocation> {
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
    pub fn describe(&self, backend: Backend) -> String {
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
            Backend::Memory => "memory store (lost on exit)".to_owned(),
            Backend::Noop => "noop store (keeps nothing)".to_owned(),
        }
    }

    /// Before the platform data directory was the default, the store was `./.stowage`. When
    /// the default is in use and such a store sits in the working directory, say where it
    /// went, once, on stderr: otherwise its artifacts would seem to have vanished.
    pub fn hint_about_legacy_store(&self, backend: Backend) {
        let legacy = Path::new(LEGACY_STORE_DIR);
        if backend == Backend::Fs && self.origin == StoreOrigin::Default && legacy.join("blobs").is_dir() {
            eprintln!(
                "stowage: note: the store is {}; the ./{LEGACY_STORE_DIR} here is an older default store: use it with --store {LEGACY_STORE_DIR}",
                self.dir.display()
            );
        }
    }
}

pub fn open_store(config: &Config, location: &StoreLocation) -> anyhow::Result<Arc<dyn ArtifactStore>> {
    let isolation = Isolation::from_isolate_sessions(config.store.isolate_sessions);
    Ok(match config.store.backend {
        Backend::Fs => {
            let dir = &location.dir;
            let store = FsStore::builder(dir)
                .retention(config.retention.clone())
                .isolation(isolation)
                .open()
                .with_context(|| format!("cannot open store {}", dir.display()))?;
            Arc::new(store)
        }
        Backend::Memory => Arc::new(MemoryStore::builder().retention(config.retention.clone()).isolation(isolation).build()),
        // Keeps nothing, so there is nothing to isolate.
        Backend::Noop => Arc::new(NoOpStore::new()),
    })
}

/// The store as the pipeline's sink.
pub fn sink(store: Arc<dyn ArtifactStore>) -> Arc<dyn stowage_core::ArtifactSink> {
    stowage_store::into_sink(store)
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
}
