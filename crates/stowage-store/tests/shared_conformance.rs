//! The shared conformance suite on [`SharedStore`]: a real PostgreSQL cluster and a real
//! object store (moto for S3, Azurite for Azure Blob Storage), each started for the test. Every
//! store the suite asks for gets its own PostgreSQL schema and its own key prefix in one
//! bucket, so each starts empty.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use stowage_store::conformance::{self, Factory};
use stowage_store::{Clock, DynStore, Isolation, RetentionConfig, SharedStore};
use support::{BucketKind, BucketServer, Postgres};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_store_conforms_on_postgres_and_moto() {
    conforms_on(BucketKind::Moto).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_store_conforms_on_postgres_and_azurite() {
    conforms_on(BucketKind::Azurite).await;
}

async fn conforms_on(kind: BucketKind) {
    let Some(pg) = Postgres::start() else { return };
    let Some(s3) = BucketServer::start(kind, "conformance") else { return };
    let url = pg.create_database("conformance");
    let n = AtomicUsize::new(0);
    let factory = |r: RetentionConfig, c: Arc<dyn Clock>, i: Isolation| -> DynStore {
        let k = n.fetch_add(1, Ordering::SeqCst);
        let (id, secret) = s3.credentials();
        let builder = SharedStore::builder(s3.location(&format!("store{k}")), url.clone())
            .index_schema(format!("store{k}"))
            .static_credentials(id, secret)
            .retention(r)
            .clock(c)
            .isolation(i)
            .gc_grace(Duration::ZERO);
        let store = tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(builder.open())).expect("open shared store");
        Arc::new(store)
    };
    let factory: Factory<'_> = &factory;
    conformance::run_all(factory).await;
}
