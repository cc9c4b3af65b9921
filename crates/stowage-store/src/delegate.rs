//! Forwards [`crate::ArtifactStore`] and [`stowage_core::ArtifactSink`] from a public store
//! newtype to the engine it wraps, so the public types stay plain structs while the engine's
//! generic parameters (private backend pairs) stay private.

/// `delegate_store!(FsStore)` for `struct FsStore { engine: Engine<..>, .. }`.
/// `delegate_store!(SharedStore, { async fn direct_url(..) .. })` adds methods a backend
/// overrides (those the engine cannot offer for every backend pair).
macro_rules! delegate_store {
    ($ty:ty) => {
        $crate::delegate::delegate_store!($ty, {});
    };
    ($ty:ty, { $($extra:tt)* }) => {
        #[async_trait::async_trait]
        impl $crate::ArtifactStore for $ty {
            $($extra)*
            async fn put_bytes(&self, data: bytes::Bytes, opts: stowage_core::PutOptions) -> $crate::Result<stowage_core::ArtifactRef> {
                self.engine.put_bytes(data, opts).await
            }
            async fn put_stream(
                &self,
                reader: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
                opts: stowage_core::PutOptions,
            ) -> $crate::Result<stowage_core::ArtifactRef> {
                self.engine.put_stream(reader, opts).await
            }
            async fn get(&self, access: &$crate::Access, id: &stowage_core::ArtifactId) -> $crate::Result<bytes::Bytes> {
                self.engine.get(access, id).await
            }
            async fn get_range(
                &self,
                access: &$crate::Access,
                id: &stowage_core::ArtifactId,
                range: std::ops::Range<u64>,
            ) -> $crate::Result<bytes::Bytes> {
                self.engine.get_range(access, id, range).await
            }
            async fn open(
                &self,
                access: &$crate::Access,
                id: &stowage_core::ArtifactId,
                range: Option<std::ops::Range<u64>>,
            ) -> $crate::Result<$crate::ArtifactReader> {
                self.engine.open(access, id, range).await
            }
            async fn meta(&self, access: &$crate::Access, id: &stowage_core::ArtifactId) -> $crate::Result<stowage_core::ArtifactRef> {
                self.engine.meta(access, id).await
            }
            async fn exists(&self, access: &$crate::Access, id: &stowage_core::ArtifactId) -> $crate::Result<bool> {
                self.engine.exists(access, id).await
            }
            async fn owners(&self, id: &stowage_core::ArtifactId) -> $crate::Result<Vec<stowage_core::Owner>> {
                self.engine.owners(id).await
            }
            async fn delete(&self, access: &$crate::Access, id: &stowage_core::ArtifactId) -> $crate::Result<bool> {
                self.engine.delete(access, id).await
            }
            async fn list(&self, query: $crate::ListQuery) -> $crate::Result<$crate::ListPage> {
                self.engine.list(query).await
            }
            async fn gc(&self) -> $crate::Result<$crate::GcReport> {
                self.engine.gc().await
            }
            async fn gc_with(&self, opts: $crate::GcOptions) -> $crate::Result<$crate::GcReport> {
                self.engine.gc_with(opts).await
            }
            async fn ready(&self) -> std::result::Result<(), $crate::NotReady> {
                self.engine.ready().await
            }
            fn isolation(&self) -> stowage_core::Isolation {
                self.engine.isolation()
            }
        }

        $crate::delegate::sink_via_store!($ty);
    };
}

/// Implements [`stowage_core::ArtifactSink`] by calling [`crate::ArtifactStore`]. A blanket
/// `impl<T: ArtifactStore> ArtifactSink for T` is what we would want, but the orphan rule
/// forbids implementing a foreign trait for an uncovered type parameter, so each store type
/// (and `dyn ArtifactStore`) gets this instead.
macro_rules! sink_via_store {
    ($ty:ty) => {
        #[async_trait::async_trait]
        impl stowage_core::ArtifactSink for $ty {
            async fn put_bytes(
                &self,
                data: bytes::Bytes,
                opts: stowage_core::PutOptions,
            ) -> Result<stowage_core::ArtifactRef, stowage_core::StoreError> {
                $crate::ArtifactStore::put_bytes(self, data, opts).await
            }
            fn is_noop(&self) -> bool {
                $crate::ArtifactStore::is_noop(self)
            }
        }
    };
}

pub(crate) use {delegate_store, sink_via_store};
