//! Property: whatever sequence of puts and reads happens, with eviction on, every budget holds
//! after every operation and everything listed is readable with the bytes its sha256 names.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use sha2::Digest;
use stowage_store::{
    Access, ArtifactScope, ArtifactStore, CleanupStrategy, ListQuery, ManualClock, MemoryStore, PutOptions, RetentionConfig,
};

#[derive(Debug, Clone)]
enum Op {
    /// Put `len` bytes of `fill` into session `session`, trace `trace`.
    Put { session: u8, trace: u8, fill: u8, len: usize },
    /// Read the `n`th listed artifact (modulo the listing's length).
    Get { n: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2u8, 0..3u8, 0..6u8, 1..25usize).prop_map(|(session, trace, fill, len)| Op::Put { session, trace, fill, len }),
        1 => (0..64usize).prop_map(|n| Op::Get { n }),
    ]
}

fn strategy() -> impl Strategy<Value = CleanupStrategy> {
    prop_oneof![Just(CleanupStrategy::Lru), Just(CleanupStrategy::Fifo), Just(CleanupStrategy::None)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn budgets_hold_after_every_operation(ops in proptest::collection::vec(op(), 1..40), cleanup in strategy()) {
        let limits = RetentionConfig {
            max_artifact_bytes: 24,
            max_session_bytes: 60,
            max_trace_bytes: 30,
            max_artifacts_per_session: 5,
            max_artifacts_per_trace: 3,
            cleanup_strategy: cleanup,
            ..RetentionConfig::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = MemoryStore::with_clock(limits.clone(), Arc::new(ManualClock::fixed()));
            for op in ops {
                match op {
                    Op::Put { session, trace, fill, len } => {
                        let scope = ArtifactScope::session(format!("s{session}")).with_trace(format!("t{trace}"));
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
                let items = store.list(ListQuery::default()).await.unwrap().items;
                let mut sessions: HashMap<_, (u64, u64)> = HashMap::new();
                let mut traces: HashMap<_, (u64, u64)> = HashMap::new();
                for r in &items {
                    let s = sessions.entry(r.scope.session_id.clone()).or_default();
                    *s = (s.0 + r.size_bytes, s.1 + 1);
                    let t = traces.entry((r.scope.session_id.clone(), r.scope.trace_id.clone())).or_default();
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
            }
            Ok(())
        })?;
    }
}
