//! Builds the configured store: the one place that knows which backend types exist.
//! (Temporary: the backends are being written; this compiles against the trait only.)

use std::sync::Arc;

use stowage_store::ArtifactStore;

use crate::config::Config;

pub fn open_store(_config: &Config) -> anyhow::Result<Arc<dyn ArtifactStore>> {
    anyhow::bail!("store backends are not built yet")
}

/// The store as the pipeline's sink. (An `Arc<dyn ArtifactStore>` cannot be upcast to
/// `Arc<dyn ArtifactSink>` because the sink is implemented by a blanket impl, not a
/// supertrait; this forwards instead.)
pub fn sink(store: Arc<dyn ArtifactStore>) -> Arc<dyn stowage_core::ArtifactSink> {
    Arc::new(StoreSink(store))
}

struct StoreSink(Arc<dyn ArtifactStore>);

#[async_trait::async_trait]
impl stowage_core::ArtifactSink for StoreSink {
    async fn put_bytes(
        &self,
        data: bytes::Bytes,
        opts: stowage_core::PutOptions,
    ) -> Result<stowage_core::ArtifactRef, stowage_core::StoreError> {
        self.0.put_bytes(data, opts).await
    }

    fn is_noop(&self) -> bool {
        self.0.is_noop()
    }
}
