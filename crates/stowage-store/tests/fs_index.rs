//! FsStore's SQLite index over a store's life: a file written by the first schema (version 1,
//! session-level owner keys) is migrated on open; switching `isolation` on an existing store
//! re-keys it without losing a blob; reads recorded for LRU survive closing the store.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, params};
use stowage_store::{
    Access, ArtifactRef, ArtifactScope, ArtifactStore, FsStore, Isolation, ListQuery, PutOptions, RetentionConfig, StoreError,
};

/// The version-1 schema exactly as the first release wrote it (its `artifacts_by_trace` index
/// included), so the migration meets the real old layout.
const V1_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS artifacts (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_key   TEXT NOT NULL,
    id          TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    size        INTEGER NOT NULL,
    tenant_id   TEXT,
    user_id     TEXT,
    session_id  TEXT,
    trace_id    TEXT,
    mime_type   TEXT,
    filename    TEXT,
    source      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER,
    last_access INTEGER NOT NULL,
    UNIQUE (owner_key, id)
);
CREATE INDEX IF NOT EXISTS artifacts_by_id ON artifacts (id);
CREATE INDEX IF NOT EXISTS artifacts_by_sha ON artifacts (sha256);
CREATE INDEX IF NOT EXISTS artifacts_by_trace ON artifacts (owner_key, trace_id);
CREATE INDEX IF NOT EXISTS artifacts_by_expiry ON artifacts (expires_at);
PRAGMA user_version = 1;
";

fn scope(user: &str, session: &str) -> ArtifactScope {
    ArtifactScope::session(session).with_tenant("acme").with_user(user)
}

fn as_owner(user: &str, session: &str) -> Access {
    Access::owner_of(&scope(user, session))
}

fn open(dir: &Path, isolation: Isolation) -> FsStore {
    FsStore::builder(dir).isolation(isolation).gc_grace(Duration::ZERO).open().unwrap()
}

/// The key version 1 computed: length-prefixed tenant, user and session, `-` for unset.
fn v1_key(user: &str, session: &str) -> String {
    format!("4:acme|{}:{user}|{}:{session}|", user.len(), session.len())
}

fn nanos(t: time::OffsetDateTime) -> i64 {
    t.unix_timestamp_nanos() as i64
}

/// Writes a version-1 index row for `r` under (`user`, `session`).
fn insert_v1(conn: &Connection, r: &ArtifactRef, user: &str, session: &str, filename: &str, expires_at: i64, last_access: i64) {
    conn.execute(
        "INSERT INTO artifacts (owner_key, id, sha256, size, tenant_id, user_id, session_id, trace_id, mime_type, filename, \
         source, created_at, expires_at, last_access) VALUES (?1, ?2, ?3, ?4, 'acme', ?5, ?6, NULL, 'text/plain', ?7, '{}', ?8, ?9, ?10)",
        params![
            v1_key(user, session),
            r.id.as_str(),
            r.sha256,
            r.size_bytes as i64,
            user,
            session,
            filename,
            nanos(r.created_at),
            expires_at,
            last_access
        ],
    )
    .unwrap();
}

fn user_version(dir: &Path) -> i64 {
    Connection::open(dir.join("index.sqlite")).unwrap().pragma_query_value(None, "user_version", |r| r.get(0)).unwrap()
}

async fn listed(store: &FsStore) -> Vec<(String, Option<String>, Option<String>)> {
    let items = store.list(ListQuery::default()).await.unwrap().items;
    items.into_iter().map(|r| (r.id.to_string(), r.scope.user_id, r.scope.session_id)).collect()
}

fn assert_not_found<T: std::fmt::Debug>(r: Result<T, StoreError>, what: &str) {
    assert!(matches!(r, Err(StoreError::NotFound { .. })), "{what}: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_index_is_migrated_and_isolation_switches_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Blobs written by the store itself, so their layout is the real one; then the index is
    // replaced by a version-1 file describing them as the first release would have.
    let (shared, only_b) = {
        let store = open(dir, Isolation::Session);
        let shared = store.put_bytes(Bytes::from_static(b"shared bytes"), PutOptions::scoped(scope("u", "a"))).await.unwrap();
        let only_b = store.put_bytes(Bytes::from_static(b"only in b"), PutOptions::scoped(scope("u", "b"))).await.unwrap();
        (shared, only_b)
    };
    for f in ["index.sqlite", "index.sqlite-wal", "index.sqlite-shm"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let hour = nanos(time::OffsetDateTime::now_utc()) + 3_600_000_000_000;
    {
        let conn = Connection::open(dir.join("index.sqlite")).unwrap();
        conn.execute_batch(V1_SCHEMA).unwrap();
        // User u stored the same bytes from sessions a and b (two records under version 1),
        // b's copy living longer; user v stored them too.
        insert_v1(&conn, &shared, "u", "a", "from-a.txt", hour, 100);
        insert_v1(&conn, &shared, "u", "b", "from-b.txt", hour + 60_000_000_000, 300);
        insert_v1(&conn, &only_b, "u", "b", "only-b.txt", hour, 200);
        insert_v1(&conn, &shared, "v", "a", "v.txt", hour, 150);
    }
    assert_eq!(user_version(dir), 1);

    // Opened under the default user isolation: migrated, and u's two records are one.
    let store = open(dir, Isolation::User);
    assert_eq!(user_version(dir), 2);
    let id = |r: &ArtifactRef| r.id.to_string();
    let u = |s: &str| (Some("u".to_owned()), Some(s.to_owned()));
    let mut rows = listed(&store).await;
    rows.sort();
    let mut want =
        vec![(id(&shared), u("a").0, u("a").1), (id(&only_b), u("b").0, u("b").1), (id(&shared), Some("v".into()), Some("a".into()))];
    want.sort();
    assert_eq!(rows, want, "the oldest of u's copies stays");
    let merged = store.meta(&as_owner("u", "b"), &shared.id).await.unwrap();
    assert_eq!(merged.filename.as_deref(), Some("from-a.txt"));
    assert_eq!(nanos(merged.expires_at.unwrap()), hour + 60_000_000_000, "the merged record keeps the latest expiry");
    // Links minted before the migration carry (tenant, user, session): every session of u,
    // and any new one, reads every artifact of u.
    for session in ["a", "b", "c"] {
        assert_eq!(&store.get(&as_owner("u", session), &shared.id).await.unwrap()[..], b"shared bytes", "{session}");
        assert_eq!(&store.get(&as_owner("u", session), &only_b.id).await.unwrap()[..], b"only in b", "{session}");
    }
    assert_eq!(&store.get(&as_owner("v", "zz"), &shared.id).await.unwrap()[..], b"shared bytes");
    assert_not_found(store.get(&as_owner("w", "a"), &shared.id).await, "another user");
    let report = store.gc().await.unwrap();
    assert_eq!((report.orphan_blobs, report.dangling_records, report.expired_records), (0, 0, 0), "{report:?}");
    drop(store);

    // Switched to session isolation: re-keyed; u's merged artifact belongs to session a now.
    let store = open(dir, Isolation::Session);
    assert_eq!(&store.get(&as_owner("u", "a"), &shared.id).await.unwrap()[..], b"shared bytes");
    assert_not_found(store.get(&as_owner("u", "b"), &shared.id).await, "session b's copy was merged into a's");
    assert_eq!(&store.get(&as_owner("u", "b"), &only_b.id).await.unwrap()[..], b"only in b");
    assert_not_found(store.get(&as_owner("u", "a"), &only_b.id).await, "sessions are walled off again");
    assert_eq!(&store.get(&as_owner("v", "a"), &shared.id).await.unwrap()[..], b"shared bytes");
    assert_not_found(store.get(&as_owner("v", "b"), &shared.id).await, "v's other session");
    // Session b stores the same bytes again: a record of its own.
    let again = store.put_bytes(Bytes::from_static(b"shared bytes"), PutOptions::scoped(scope("u", "b"))).await.unwrap();
    assert_eq!(again.scope, scope("u", "b"));
    assert_eq!(listed(&store).await.len(), 4);
    drop(store);

    // And back: the two copies collapse again and every blob is still there for whoever uses it.
    let store = open(dir, Isolation::User);
    assert_eq!(listed(&store).await.len(), 3);
    let report = store.gc().await.unwrap();
    assert_eq!((report.orphan_blobs, report.dangling_records), (0, 0), "{report:?}");
    for (user, session) in [("u", "a"), ("u", "b"), ("v", "a")] {
        assert_eq!(&store.get(&as_owner(user, session), &shared.id).await.unwrap()[..], b"shared bytes", "{user} {session}");
    }
    assert_eq!(&store.get(&as_owner("u", "a"), &only_b.id).await.unwrap()[..], b"only in b");
    // Deleting u's artifact keeps v's bytes.
    assert!(store.delete(&as_owner("u", "b"), &shared.id).await.unwrap());
    assert_eq!(&store.get(&as_owner("v", "a"), &shared.id).await.unwrap()[..], b"shared bytes");
}

/// The reads before a store was closed still decide what LRU evicts after it is reopened: the
/// deferred accesses are written when the store is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_count_for_lru_across_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let limits = RetentionConfig { max_artifacts_per_session: 3, ..RetentionConfig::default() };
    let open = || FsStore::builder(tmp.path()).retention(limits.clone()).open().unwrap();
    let s = ArtifactScope::session("lru");
    let me = Access::owner_of(&s);
    let (a, b) = {
        let store = open();
        let a = store.put_bytes(Bytes::from_static(b"a"), PutOptions::scoped(s.clone())).await.unwrap();
        let b = store.put_bytes(Bytes::from_static(b"b"), PutOptions::scoped(s.clone())).await.unwrap();
        store.put_bytes(Bytes::from_static(b"c"), PutOptions::scoped(s.clone())).await.unwrap();
        // `a` is now the most recently used; closing at once leaves no time for the timer.
        store.meta(&me, &a.id).await.unwrap();
        (a, b)
    };
    let store = open();
    store.put_bytes(Bytes::from_static(b"d"), PutOptions::scoped(s.clone())).await.unwrap();
    assert!(store.exists(&me, &a.id).await.unwrap(), "the read kept `a`");
    assert!(!store.exists(&me, &b.id).await.unwrap(), "`b` was the least recently used");
}
