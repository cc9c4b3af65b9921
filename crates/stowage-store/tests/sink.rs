//! Every store is an `ArtifactSink`, the only thing producers (the transform pipeline) see:
//! concrete stores, `dyn ArtifactStore`, and a shared `DynStore` through `into_sink`.

use std::sync::Arc;

use bytes::Bytes;
use stowage_store::{Access, ArtifactScope, ArtifactSink, DynStore, MemoryStore, NoOpStore, PutOptions, RetentionConfig, into_sink};

/// Generic, because `&dyn ArtifactStore` does not coerce to `&dyn ArtifactSink` (not a
/// supertrait); `dyn ArtifactStore: ArtifactSink` still holds.
async fn offload<S: ArtifactSink + ?Sized>(sink: &S, scope: &ArtifactScope) -> stowage_store::ArtifactRef {
    sink.put_bytes(Bytes::from_static(b"%PDF-1.4 offloaded"), PutOptions::scoped(scope.clone())).await.unwrap()
}

#[tokio::test]
async fn stores_are_sinks_in_every_form() {
    let scope = ArtifactScope::session("sink");
    let shared: DynStore = Arc::new(MemoryStore::new(RetentionConfig::default()));

    // `dyn ArtifactStore` itself is a sink.
    let r = offload(&*shared, &scope).await;
    assert_eq!(r.mime_type.as_deref(), Some("application/pdf"));
    // The Arc<dyn ArtifactSink> the pipeline takes, backed by the same store.
    let sink: Arc<dyn ArtifactSink> = into_sink(shared.clone());
    assert!(!sink.is_noop());
    let again = offload(&*sink, &scope).await;
    assert_eq!(again.id, r.id);
    assert_eq!(&shared.get(&Access::owner_of(&scope), &r.id).await.unwrap()[..], b"%PDF-1.4 offloaded");

    // Concrete types, including the NoOp store, which says so.
    let noop = NoOpStore::new();
    let marker = offload(&noop, &scope).await;
    assert!(marker.is_truncated() && ArtifactSink::is_noop(&noop));
    let noop_shared: DynStore = Arc::new(NoOpStore::new());
    assert!(into_sink(noop_shared).is_noop());
}
