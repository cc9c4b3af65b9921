//! Property: whatever sequence of puts and reads happens, with eviction on, every budget (trace,
//! session, user, tenant) holds after every operation and everything listed is readable with
//! the bytes its sha256 names, under either isolation.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use sha2::Digest;
use stowage_store::{
    Access, ArtifactScope, ArtifactStore, CleanupStrategy, Isolation, ListQuery, ManualClock, MemoryStore, PutOptions, RetentionConfig,
};

#[derive(Debug, Clone)]
enum Op {
    /// Put `len` bytes of `fill` into tenant `tenant`, user `user`, session `session`, trace `trace`.
    Put { tenant: u8, user: u8, session: u8, trace: u8, fill: u8, len: usize },
    /// Read the `n`th listed artifact (modulo the listing's length).
    Get { n: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2u8, 0..2u8, 0..2u8, 0..3u8, 0..6u8, 1..25usize)
            .prop_map(|(tenant, user, session, trace, fill, len)| Op::Put { tenant, user, session, trace, fill, len }),
        1 => (0..64usize).prop_map(|n| Op::Get { n }),
    ]
}

fn strategy() -> impl Strategy<Value = CleanupStrategy> {
    prop_oneof![Just(CleanupStrategy::Lru), Just(CleanupStrategy::Fifo), Just(CleanupStrategy::None)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn budgets_hold_after_every_operation(
        ops in proptest::collection::vec(op(), 1..40),
        cleanup in strategy(),
        isolate_sessions in any::<bool>(),
    ) {
        let limits = RetentionConfig {
            max_artifact_bytes: 24,
            max_session_bytes: 60,
            max_trace_bytes: 30,
            max_user_bytes: 80,
            max_tenant_bytes: 120,
            max_artifacts_per_session: 5,
            max_artifacts_per_trace: 3,
            cleanup_strategy: cleanup,
            ..RetentionConfig::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = MemoryStore::builder()
                .retention(limits.clone())
                .clock(Arc::new(ManualClock::fixed()))
                .isolation(Isolation::from_isolate_sessions(isolate_sessions))
                .build();
            for op in ops {
                match op {
                    Op::Put { tenant, user, session, trace, fill, len } => {
                        let scope = ArtifactScope::session(format!("s{session}"))
                            .with_tenant(format!("T{tenant}"))
                            .with_user(format!("u{user}"))
                            .with_trace(format!("t{trace}"));
                        // With eviction a put that passes the per-artifact checks always fits;
                        // with `none` it may be refused, and then nothing changes.
                        let r = store.put_bytes(Bytes::from(vec![fill; len]), PutOptions::scoped(scope)).await;
                        if cleanup != CleanupStrategy::None {
                            prop_assert!(r.is_ok(), "{r:?}");
                        }
                    }
                    Op::Get { n } => {
                        let items = store.list(ListQuery::default()).await.unwrap().items;
                        if !items.is_empty() {
                            let r = &items[n % items.len()];
                            store.get(&Access::owner_of(&r.scope), &r.id).await.unwrap();
                        }
                    }
                }
                let items = store.list(ListQuery { limit: 1000, ..Default::default() }).await.unwrap().items;
                let mut tenants: HashMap<_, u64> = HashMap::new();
                let mut users: HashMap<_, u64> = HashMap::new();
                let mut sessions: HashMap<_, (u64, u64)> = HashMap::new();
                let mut traces: HashMap<_, (u64, u64)> = HashMap::new();
                for r in &items {
                    let sc = &r.scope;
                    *tenants.entry(sc.tenant_id.clone()).or_default() += r.size_bytes;
                    *users.entry((sc.tenant_id.clone(), sc.user_id.clone())).or_default() += r.size_bytes;
                    let s = sessions.entry((sc.tenant_id.clone(), sc.user_id.clone(), sc.session_id.clone())).or_default();
                    *s = (s.0 + r.size_bytes, s.1 + 1);
                    let t = traces.entry(sc.clone()).or_default();
                    *t = (t.0 + r.size_bytes, t.1 + 1);
                    let bytes = store.get(&Access::owner_of(&r.scope), &r.id).await.unwrap();
                    prop_assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), r.sha256.clone());
                }
                for (bytes, count) in sessions.values() {
                    prop_assert!(*bytes <= limits.max_session_bytes && *count <= limits.max_artifacts_per_session);
                }
                for (bytes, count) in traces.values() {
                    prop_assert!(*bytes <= limits.max_trace_bytes && *count <= limits.max_artifacts_per_trace);
                }
                prop_assert!(users.values().all(|b| *b <= limits.max_user_bytes), "{users:?}");
                prop_assert!(tenants.values().all(|b| *b <= limits.max_tenant_bytes), "{tenants:?}");
            }
            Ok(())
        })?;
    }
}
