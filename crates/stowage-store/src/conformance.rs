//! The conformance suite: behaviour every [`ArtifactStore`] backend must show, written once and
//! run against each (`tests/conformance.rs` runs it on [`crate::MemoryStore`] and
//! [`crate::FsStore`]; a future S3 backend runs it too).
//!
//! Each check is a public async function that panics on the first violation. Checks that need
//! particular limits or a movable clock take a [`Factory`], which must return a fresh, empty
//! store each time it is called. [`run_all`] runs everything, under each [`Isolation`].
//!
//! Scopes that stand for different owners differ in their user (or tenant), which makes them
//! different owners under either isolation; scopes that differ in their session only are one
//! user's sessions, which [`sessions_of_one_user`] checks under each isolation.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use crate::{
    Access, ArtifactId, ArtifactRef, ArtifactScope, ArtifactStore, CleanupStrategy, Clock, DynStore, Isolation, ListQuery, ManualClock,
    PutOptions, RetentionConfig, StoreError,
};

/// Makes a fresh, empty store with these limits, that reads the time from this clock and
/// decides access under this isolation.
pub type Factory<'a> = &'a (dyn Fn(RetentionConfig, Arc<dyn Clock>, Isolation) -> DynStore + Send + Sync);

/// Limits high enough that no check trips them by accident.
pub fn roomy() -> RetentionConfig {
    RetentionConfig {
        ttl: Duration::from_secs(3600),
        max_artifact_bytes: 64 << 20,
        max_session_bytes: 1 << 30,
        max_trace_bytes: 1 << 30,
        max_user_bytes: 1 << 40,
        max_tenant_bytes: 1 << 40,
        max_artifacts_per_session: 10_000,
        max_artifacts_per_trace: 10_000,
        cleanup_strategy: CleanupStrategy::Lru,
        ..RetentionConfig::default()
    }
}

/// Runs every check under each isolation, each on a fresh store from `factory`.
pub async fn run_all(factory: Factory<'_>) {
    for isolation in [Isolation::User, Isolation::Session] {
        let fresh = || factory(roomy(), Arc::new(ManualClock::fixed()), isolation);
        put_get_delete_list(&*fresh()).await;
        ranges_and_streaming_reads(&*fresh()).await;
        put_text_and_put_stream(&*fresh()).await;
        mime_types(&*fresh()).await;
        guessed_ids_are_not_found(&*fresh()).await;
        scope_isolation_with_identical_bytes(&*fresh(), isolation).await;
        sessions_of_one_user(&*fresh(), isolation).await;
        operator_sees_every_owner(&*fresh()).await;
        owners_are_those_holding_an_artifact(&*fresh()).await;
        list_pagination_and_filters(&*fresh(), isolation).await;
        concurrent_puts_and_deletes_of_shared_bytes(&*fresh()).await;
        dedup_within_an_owner(factory, isolation).await;
        ttl_expiry(factory, isolation).await;
        size_limits(factory, isolation).await;
        eviction_strategies(factory, isolation).await;
        user_and_tenant_budgets(factory, isolation).await;
        gc_removes_expired(factory, isolation).await;
    }
}

fn access(scope: &ArtifactScope) -> Access {
    Access::owner_of(scope)
}

async fn put(store: &dyn ArtifactStore, data: &[u8], scope: &ArtifactScope) -> ArtifactRef {
    store.put_bytes(Bytes::copy_from_slice(data), PutOptions::scoped(scope.clone())).await.expect("put")
}

async fn read_body(store: &dyn ArtifactStore, access: &Access, id: &ArtifactId, range: Option<std::ops::Range<u64>>) -> Vec<u8> {
    let mut reader = store.open(access, id, range).await.expect("open");
    let mut out = Vec::new();
    reader.body.read_to_end(&mut out).await.expect("read body");
    out
}

fn assert_not_found<T: std::fmt::Debug>(r: crate::Result<T>, id: &ArtifactId, what: &str) {
    match r {
        // Exactly the error a never-existing id gets: nothing distinguishes "someone else's".
        Err(e @ StoreError::NotFound { .. }) => assert_eq!(e.to_string(), format!("artifact {id} not found"), "{what}"),
        other => panic!("{what}: expected NotFound, got {other:?}"),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

async fn ids_listed(store: &dyn ArtifactStore, query: ListQuery) -> Vec<String> {
    let mut out = Vec::new();
    let mut query = query;
    loop {
        let page = store.list(query.clone()).await.expect("list");
        out.extend(page.items.iter().map(|r| r.id.to_string()));
        match page.next {
            Some(c) => query.cursor = Some(c),
            None => return out,
        }
    }
}

/// The basic cycle: a put is readable in every way, listed, and gone after delete.
pub async fn put_get_delete_list(store: &dyn ArtifactStore) {
    let scope = ArtifactScope::session("basic");
    let me = access(&scope);
    let data = pattern(5000, 1);
    let opts = PutOptions::scoped(scope.clone())
        .filename("report.bin")
        .namespace("get_report")
        .mime("application/x-test")
        .source_entry("tool", "get_report");
    let r = store.put_bytes(Bytes::from(data.clone()), opts).await.expect("put");
    let sha = crate::blobs::sha256_hex(&data);
    assert_eq!(r.id, ArtifactId::from_content(Some("get_report"), &sha));
    assert_eq!(r.uri, format!("artifact://{}", r.id));
    assert_eq!((r.size_bytes, r.sha256.as_str()), (5000, sha.as_str()));
    assert_eq!(r.mime_type.as_deref(), Some("application/x-test"));
    assert_eq!(r.filename.as_deref(), Some("report.bin"));
    assert_eq!(r.scope, scope);
    assert_eq!(r.source["tool"], "get_report");
    assert!(r.expires_at.is_some_and(|e| e > r.created_at), "{r:?}");
    assert!(!r.is_truncated());

    assert_eq!(&store.get(&me, &r.id).await.expect("get")[..], &data[..]);
    assert_eq!(read_body(store, &me, &r.id, None).await, data);
    let meta = store.meta(&me, &r.id).await.expect("meta");
    assert_eq!((meta.id.clone(), meta.sha256.clone(), meta.size_bytes), (r.id.clone(), sha.clone(), 5000));
    assert_eq!(meta.created_at, r.created_at);
    assert!(store.exists(&me, &r.id).await.unwrap());
    let owner_query = ListQuery { owner: Some(scope.owner()), ..Default::default() };
    let page = store.list(owner_query.clone()).await.unwrap();
    assert_eq!(page.items, vec![meta.clone()]);
    assert_eq!(page.next, None);

    assert!(store.delete(&me, &r.id).await.unwrap(), "first delete deletes");
    assert!(!store.delete(&me, &r.id).await.unwrap(), "second delete finds nothing");
    assert_not_found(store.get(&me, &r.id).await, &r.id, "get after delete");
    assert_not_found(store.meta(&me, &r.id).await, &r.id, "meta after delete");
    assert!(!store.exists(&me, &r.id).await.unwrap());
    assert!(store.list(owner_query).await.unwrap().items.is_empty());

    // An empty artifact is still an artifact.
    let empty = put(store, b"", &scope).await;
    assert_eq!(empty.size_bytes, 0);
    assert!(store.get(&me, &empty.id).await.unwrap().is_empty());
    assert!(read_body(store, &me, &empty.id, None).await.is_empty());
}

/// Ranges through get_range and open; bad ranges are InvalidInput.
pub async fn ranges_and_streaming_reads(store: &dyn ArtifactStore) {
    let scope = ArtifactScope::session("ranges");
    let me = access(&scope);
    // Larger than the 1-2 MiB chunks backends read in, so streaming crosses chunk borders.
    let data = pattern(5 * 1024 * 1024 + 123, 2);
    let r = put(store, &data, &scope).await;
    let len = data.len() as u64;
    let cases: &[(u64, u64)] = &[(0, 0), (0, 1), (10, 20), (len - 1, len), (0, len), (1 << 20, (3 << 20) + 7), (len, len)];
    for &(a, b) in cases {
        let want = &data[a as usize..b as usize];
        assert_eq!(&store.get_range(&me, &r.id, a..b).await.expect("get_range")[..], want, "get_range {a}..{b}");
        let mut reader = store.open(&me, &r.id, Some(a..b)).await.expect("open range");
        assert_eq!(reader.range, a..b);
        assert_eq!(reader.meta.id, r.id);
        let mut body = Vec::new();
        reader.body.read_to_end(&mut body).await.unwrap();
        assert!(body == want, "open {a}..{b}: {} bytes, want {}", body.len(), want.len());
    }
    let full = store.open(&me, &r.id, None).await.unwrap();
    assert_eq!(full.range, 0..len);
    #[allow(clippy::reversed_empty_ranges)]
    let bad: [std::ops::Range<u64>; 4] = [0..len + 1, len + 1..len + 2, 20..10, u64::MAX - 1..u64::MAX];
    for range in bad {
        let e = store.get_range(&me, &r.id, range.clone()).await.unwrap_err();
        assert!(matches!(e, StoreError::InvalidInput(_)), "get_range {range:?}: {e}");
        let e = store.open(&me, &r.id, Some(range.clone())).await.unwrap_err();
        assert!(matches!(e, StoreError::InvalidInput(_)), "open {range:?}: {e}");
    }
    // Ranges on someone else's artifact are NotFound, not InvalidInput: the check is access first.
    let other = access(&ArtifactScope::session("ranges").with_user("someone-else"));
    assert_not_found(store.get_range(&other, &r.id, 0..len + 1).await, &r.id, "range for another owner");
}

/// A reader that yields `total` bytes of a pattern in small pieces, counting what was read.
struct CountingReader {
    total: u64,
    sent: Arc<AtomicU64>,
}

impl AsyncRead for CountingReader {
    fn poll_read(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let sent = self.sent.load(Ordering::SeqCst);
        let n = (self.total - sent).min(buf.remaining() as u64).min(64 * 1024) as usize;
        let start = sent as usize;
        let bytes: Vec<u8> = (start..start + n).map(|i| (i % 251) as u8).collect();
        buf.put_slice(&bytes);
        self.sent.fetch_add(n as u64, Ordering::SeqCst);
        Poll::Ready(Ok(()))
    }
}

/// put_text defaults to text/plain; put_stream stores exactly what the stream yielded.
pub async fn put_text_and_put_stream(store: &dyn ArtifactStore) {
    let scope = ArtifactScope::session("text-stream");
    let me = access(&scope);
    let t = store.put_text("{\"rows\": [1, 2, 3]}".into(), PutOptions::scoped(scope.clone())).await.unwrap();
    assert_eq!(t.mime_type.as_deref(), Some("text/plain; charset=utf-8"));
    assert_eq!(&store.get(&me, &t.id).await.unwrap()[..], b"{\"rows\": [1, 2, 3]}");
    let j = store.put_text("[]".into(), PutOptions::scoped(scope.clone()).mime("application/json")).await.unwrap();
    assert_eq!(j.mime_type.as_deref(), Some("application/json"));

    let total = 3 * 1024 * 1024 + 17;
    let sent = Arc::new(AtomicU64::new(0));
    let reader = CountingReader { total, sent: sent.clone() };
    let s = store.put_stream(Box::pin(reader), PutOptions::scoped(scope.clone())).await.expect("put_stream");
    let want: Vec<u8> = (0..total as usize).map(|i| (i % 251) as u8).collect();
    assert_eq!(s.size_bytes, total);
    assert_eq!(s.sha256, crate::blobs::sha256_hex(&want));
    assert_eq!(read_body(store, &me, &s.id, None).await, want);
    // The same bytes through put_bytes are the same artifact.
    let b = store.put_bytes(Bytes::from(want), PutOptions::scoped(scope.clone())).await.unwrap();
    assert_eq!(b.id, s.id);
}

/// Given mime types are kept; otherwise magic numbers, then UTF-8, then octet-stream.
pub async fn mime_types(store: &dyn ArtifactStore) {
    let scope = ArtifactScope::session("mime");
    let cases: &[(&[u8], Option<&str>, &str)] = &[
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3 body", None, "application/pdf"),
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01", None, "image/png"),
        (b"GIF89a\x01\0\x01\0", None, "image/gif"),
        ("plain t\u{e9}xt".as_bytes(), None, "text/plain; charset=utf-8"),
        (b"\xff\xfe\x00\x01\x80binary", None, "application/octet-stream"),
        (b"%PDF-1.7 but told otherwise", Some("application/x-custom"), "application/x-custom"),
    ];
    for (bytes, given, want) in cases {
        let mut opts = PutOptions::scoped(scope.clone());
        opts.mime_type = given.map(str::to_owned);
        let r = store.put_bytes(Bytes::copy_from_slice(bytes), opts).await.unwrap();
        assert_eq!(r.mime_type.as_deref(), Some(*want), "{bytes:?}");
    }
}

/// Ids that were never stored, and malformed-looking guesses, are NotFound for everyone.
pub async fn guessed_ids_are_not_found(store: &dyn ArtifactStore) {
    let scope = ArtifactScope::session("guess");
    let real = put(store, b"something real", &scope).await;
    let me = access(&scope);
    let guesses = ["art_0000000000000000", "art_ffffffffffffffff", "truncated_0123456789abcdef", "x", "art_..x"];
    for g in guesses {
        let id: ArtifactId = g.parse().unwrap();
        for who in [&me, &Access::Operator] {
            assert_not_found(store.get(who, &id).await, &id, g);
            assert_not_found(store.get_range(who, &id, 0..1).await, &id, g);
            assert_not_found(store.open(who, &id, None).await, &id, g);
            assert_not_found(store.meta(who, &id).await, &id, g);
            assert!(!store.exists(who, &id).await.unwrap(), "{g}");
            assert!(!store.delete(who, &id).await.unwrap(), "{g}");
        }
    }
    // A near miss of a real id (same namespace, one digit off).
    let mut near = real.id.to_string();
    let last = near.pop().unwrap();
    near.push(if last == '0' { '1' } else { '0' });
    let near: ArtifactId = near.parse().unwrap();
    assert_not_found(store.get(&me, &near).await, &near, "near miss");
}

/// The same bytes stored by different owners: one id, separate records, no crossing over.
pub async fn scope_isolation_with_identical_bytes(store: &dyn ArtifactStore, isolation: Isolation) {
    let data = pattern(4096, 3);
    // Owners that differ in one part each, including set vs unset and set-but-empty.
    let mut scopes = vec![
        ArtifactScope::session("s1"),
        ArtifactScope::session("s1").with_tenant("t1"),
        ArtifactScope::session("s1").with_user("u1"),
        ArtifactScope::session("s1").with_tenant("t1").with_user("u1"),
        ArtifactScope::session("s1").with_user(""),
        ArtifactScope::default().with_user("u2"),
    ];
    if isolation == Isolation::Session {
        scopes.push(ArtifactScope::session("s2"));
    }
    let mut refs = Vec::new();
    for s in &scopes {
        refs.push(put(store, &data, s).await);
    }
    let id = refs[0].id.clone();
    assert!(refs.iter().all(|r| r.id == id), "identical bytes share one content id");
    for (s, r) in scopes.iter().zip(&refs) {
        assert_eq!(&r.scope, s, "each owner gets its own record");
        let me = access(s);
        assert_eq!(store.meta(&me, &id).await.unwrap().scope, *s);
        let listed = store.list(ListQuery { owner: Some(s.owner()), ..Default::default() }).await.unwrap();
        assert_eq!(listed.items.len(), 1, "{s:?} lists only its own record");
        assert_eq!(listed.items[0].scope, *s);
    }
    // A trace is not an owner: the same session with a trace id sees the session's artifacts.
    let traced = ArtifactScope::session("s1").with_trace("t-9");
    assert!(store.exists(&access(&traced), &id).await.unwrap());

    // An owner that never stored it learns nothing, in every operation.
    let stranger = ArtifactScope::session("s1").with_user("u3");
    let them = access(&stranger);
    assert_not_found(store.get(&them, &id).await, &id, "stranger get");
    assert_not_found(store.get_range(&them, &id, 0..10).await, &id, "stranger get_range");
    assert_not_found(store.open(&them, &id, None).await, &id, "stranger open");
    assert_not_found(store.meta(&them, &id).await, &id, "stranger meta");
    assert!(!store.exists(&them, &id).await.unwrap());
    assert!(!store.delete(&them, &id).await.unwrap());
    assert!(store.list(ListQuery { owner: Some(stranger.owner()), ..Default::default() }).await.unwrap().items.is_empty());

    // Deleting one owner's record leaves every other owner's readable.
    assert!(store.delete(&access(&scopes[0]), &id).await.unwrap());
    assert_not_found(store.get(&access(&scopes[0]), &id).await, &id, "deleted owner");
    for s in &scopes[1..] {
        assert_eq!(&store.get(&access(s), &id).await.unwrap()[..], &data[..], "{s:?} still reads");
        assert_eq!(read_body(store, &access(s), &id, None).await, data);
    }
    // Delete all but the last, then the last: the bytes stay readable until the very end.
    for s in &scopes[1..scopes.len() - 1] {
        assert!(store.delete(&access(s), &id).await.unwrap());
    }
    let last = access(&scopes[scopes.len() - 1]);
    assert_eq!(&store.get(&last, &id).await.unwrap()[..], &data[..]);
    assert!(store.delete(&last, &id).await.unwrap());
    assert_not_found(store.get(&Access::Operator, &id).await, &id, "after every owner deleted");

    // And it can be stored again afterwards.
    put(store, &data, &scopes[1]).await;
    assert_eq!(&store.get(&access(&scopes[1]), &id).await.unwrap()[..], &data[..]);
}

/// The operator reads any owner's artifact, lists everything, and deletes every owner's record.
pub async fn operator_sees_every_owner(store: &dyn ArtifactStore) {
    let data = pattern(1000, 4);
    let a = ArtifactScope::session("op-a");
    let b = ArtifactScope::session("op-b").with_tenant("t");
    let r = put(store, &data, &a).await;
    put(store, &data, &b).await;
    let only_b = put(store, b"only b has this", &b).await;
    let op = Access::Operator;
    assert_eq!(&store.get(&op, &r.id).await.unwrap()[..], &data[..]);
    assert_eq!(store.meta(&op, &r.id).await.unwrap().sha256, r.sha256);
    assert_eq!(&store.get(&op, &only_b.id).await.unwrap()[..], b"only b has this");
    assert_eq!(store.list(ListQuery::default()).await.unwrap().items.len(), 3);
    let by_session = ListQuery { session_id: Some("op-b".into()), ..Default::default() };
    assert_eq!(store.list(by_session).await.unwrap().items.len(), 2);
    assert!(store.delete(&op, &r.id).await.unwrap());
    for s in [&a, &b] {
        assert_not_found(store.get(&access(s), &r.id).await, &r.id, "operator delete removes every owner's");
    }
    assert!(store.exists(&access(&b), &only_b.id).await.unwrap());
}

/// `owners` names every owner with a live record of an id (what a compact link is checked
/// against), and nobody for an id nobody holds.
pub async fn owners_are_those_holding_an_artifact(store: &dyn ArtifactStore) {
    let data = pattern(1000, 5);
    let alice = ArtifactScope::session("own-a").with_user("alice");
    let bob = ArtifactScope::session("own-b").with_user("bob");
    let r = put(store, &data, &alice).await;
    put(store, &data, &bob).await;
    let mut users: Vec<Option<String>> = store.owners(&r.id).await.unwrap().into_iter().map(|o| o.user_id).collect();
    users.sort();
    assert_eq!(users, [Some("alice".to_owned()), Some("bob".to_owned())]);
    assert!(store.delete(&access(&alice), &r.id).await.unwrap());
    let left: Vec<_> = store.owners(&r.id).await.unwrap().into_iter().map(|o| o.user_id).collect();
    assert_eq!(left, [Some("bob".to_owned())]);
    let ghost: ArtifactId = "nobody_0000000000000000".parse().unwrap();
    assert!(store.owners(&ghost).await.unwrap().is_empty());
}

/// Listing is oldest first, paginated with an opaque cursor, filtered by owner and trace.
pub async fn list_pagination_and_filters(store: &dyn ArtifactStore, isolation: Isolation) {
    let scope = ArtifactScope::session("list");
    let owner = Some(scope.owner());
    let mut ids = Vec::new();
    for i in 0..7u8 {
        let s = if i % 2 == 0 { scope.clone().with_trace("even") } else { scope.clone() };
        ids.push(put(store, &[i; 10], &s).await.id.to_string());
    }
    put(store, b"other owner", &ArtifactScope::session("list").with_user("other")).await;
    // Another session of the same owner: listed with the owner's under user isolation, but not
    // with this session's.
    let other_session = ArtifactScope::session("list-2");

    let mut seen = Vec::new();
    let mut query = ListQuery { owner: owner.clone(), limit: 3, ..Default::default() };
    let mut pages = 0;
    loop {
        let page = store.list(query.clone()).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 3);
        seen.extend(page.items.iter().map(|r| r.id.to_string()));
        match page.next {
            Some(c) => query.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ids, "every item once, oldest first");
    assert_eq!(pages, 3);
    let from_other_session = put(store, b"from another session", &other_session).await.id.to_string();
    let this_session = ListQuery { owner: owner.clone(), session_id: Some("list".into()), ..Default::default() };
    assert_eq!(ids_listed(store, this_session).await, ids, "listing by session within an owner");
    let all = ids_listed(store, ListQuery { owner: owner.clone(), ..Default::default() }).await;
    let mut want = ids.clone();
    if isolation == Isolation::User {
        want.push(from_other_session);
    }
    assert_eq!(all, want, "default limit fits all; the owner's other session counts under user isolation only");
    let even = ids_listed(store, ListQuery { owner: owner.clone(), trace_id: Some("even".into()), limit: 2, ..Default::default() }).await;
    assert_eq!(even, ids.iter().step_by(2).cloned().collect::<Vec<_>>());
    assert_eq!(ids_listed(store, ListQuery::default()).await.len(), 9, "operator listing spans owners");

    let e = store.list(ListQuery { cursor: Some("not-a-cursor".into()), ..Default::default() }).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidInput(_)), "{e}");
}

/// Owners putting and deleting the same bytes at once: nobody's surviving record loses its
/// bytes (the blob is only removed when no record uses it).
pub async fn concurrent_puts_and_deletes_of_shared_bytes(store: &dyn ArtifactStore) {
    let data = Bytes::from(pattern(200_000, 5));
    let scopes: Vec<ArtifactScope> = (0..4).map(|i| ArtifactScope::session("race").with_user(format!("race-{i}"))).collect();
    for round in 0..24 {
        let putter = &scopes[round % 4];
        let deleter = &scopes[(round + 1) % 4];
        let (p, d) = tokio::join!(store.put_bytes(data.clone(), PutOptions::scoped(putter.clone())), async {
            let id = ArtifactId::from_content(None, &crate::blobs::sha256_hex(&data));
            store.delete(&access(deleter), &id).await
        });
        p.expect("put during race");
        d.expect("delete during race");
    }
    let id = ArtifactId::from_content(None, &crate::blobs::sha256_hex(&data));
    let mut survivors = 0;
    for s in &scopes {
        if store.exists(&access(s), &id).await.unwrap() {
            survivors += 1;
            assert_eq!(store.get(&access(s), &id).await.expect("a surviving record reads"), data);
        }
    }
    assert!(survivors > 0, "the last round's put survives");
}

/// Storing the same bytes twice in one owner is one record, counted once.
pub async fn dedup_within_an_owner(factory: Factory<'_>, isolation: Isolation) {
    let clock = ManualClock::fixed();
    let limits =
        RetentionConfig { max_session_bytes: 50, max_artifacts_per_session: 2, cleanup_strategy: CleanupStrategy::None, ..roomy() };
    let store = factory(limits, Arc::new(clock.clone()), isolation);
    let scope = ArtifactScope::session("dedup");
    let first = put(&*store, &[9; 30], &scope).await;
    clock.advance(Duration::from_secs(600));
    // A second put of the same bytes would not fit the 50-byte budget if it counted twice.
    let again = store
        .put_bytes(Bytes::from(vec![9; 30]), PutOptions::scoped(scope.clone().with_trace("later")).filename("other-name"))
        .await
        .expect("re-put of the same bytes is not a new artifact");
    assert_eq!(again.id, first.id);
    assert_eq!(again.created_at, first.created_at, "the existing record is returned");
    assert_eq!(again.filename, first.filename, "the existing record is returned");
    assert!(again.expires_at > first.expires_at, "its expiry is refreshed");
    assert_eq!(ids_listed(&*store, ListQuery { owner: Some(scope.owner()), ..Default::default() }).await.len(), 1);
    // The same bytes under another namespace are another artifact (another id), counted on
    // their own: 60 bytes do not fit.
    let e = store.put_bytes(Bytes::from(vec![9; 30]), PutOptions::scoped(scope.clone()).namespace("tool2")).await.unwrap_err();
    assert!(matches!(e, StoreError::QuotaExceeded { .. }), "{e}");
    assert_eq!(&store.get(&access(&scope), &first.id).await.unwrap()[..], &[9; 30]);
}

/// Artifacts expire after their TTL: invisible, reported as expired to their owner, refreshed
/// by a re-put, removed by gc.
pub async fn ttl_expiry(factory: Factory<'_>, isolation: Isolation) {
    let clock = ManualClock::fixed();
    let store = factory(RetentionConfig { ttl: Duration::from_secs(60), ..roomy() }, Arc::new(clock.clone()), isolation);
    let scope = ArtifactScope::session("ttl");
    let me = access(&scope);
    let long = put(&*store, b"default ttl", &scope).await;
    let short = store
        .put_bytes(Bytes::from_static(b"short ttl"), PutOptions { ttl: Some(Duration::from_secs(10)), ..PutOptions::scoped(scope.clone()) })
        .await
        .unwrap();
    assert_eq!(long.expires_at.unwrap() - long.created_at, time::Duration::seconds(60));
    assert_eq!(short.expires_at.unwrap() - short.created_at, time::Duration::seconds(10));

    clock.advance(Duration::from_secs(10));
    for (r, what) in [(&short, "short")] {
        let e = store.get(&me, &r.id).await.unwrap_err();
        assert!(matches!(e, StoreError::Expired { .. }), "{what} get: {e}");
        assert_eq!(e.code(), "artifact_url_expired");
        assert!(matches!(store.meta(&me, &r.id).await, Err(StoreError::Expired { .. })));
        assert!(matches!(store.open(&me, &r.id, None).await, Err(StoreError::Expired { .. })));
        assert!(matches!(store.get(&Access::Operator, &r.id).await, Err(StoreError::Expired { .. })));
        assert!(!store.exists(&me, &r.id).await.unwrap());
    }
    // Another owner is told nothing, not even that it expired.
    assert_not_found(store.get(&access(&ArtifactScope::session("ttl").with_user("other")), &short.id).await, &short.id, "other owner");
    let listed = ids_listed(&*store, ListQuery { owner: Some(scope.owner()), ..Default::default() }).await;
    assert_eq!(listed, vec![long.id.to_string()]);

    // A re-put of live bytes pushes their expiry out.
    clock.advance(Duration::from_secs(40));
    let refreshed = put(&*store, b"default ttl", &scope).await;
    assert_eq!(refreshed.expires_at.unwrap() - long.created_at, time::Duration::seconds(110));
    clock.advance(Duration::from_secs(30));
    assert_eq!(&store.get(&me, &long.id).await.expect("refreshed artifact still readable")[..], b"default ttl");

    // A re-put of expired bytes makes a fresh artifact.
    let reborn = put(&*store, b"short ttl", &scope).await;
    assert_eq!(reborn.id, short.id);
    assert!(reborn.created_at > short.created_at);
    assert_eq!(&store.get(&me, &short.id).await.unwrap()[..], b"short ttl");
}

/// Sizes over any limit are refused, before anything is visible; streams stop being read.
pub async fn size_limits(factory: Factory<'_>, isolation: Isolation) {
    let limits = RetentionConfig { max_artifact_bytes: 100, max_session_bytes: 80, max_trace_bytes: 50, ..roomy() };
    let store = factory(limits, Arc::new(ManualClock::fixed()), isolation);
    let scope = ArtifactScope::session("limits");
    // Another session, so that the session budget does not evict the first fitting put.
    let traced = ArtifactScope::session("limits-traced").with_trace("t");
    let cases: &[(usize, &ArtifactScope, Option<&str>)] = &[
        (101, &scope, Some("max_artifact_bytes")),
        (81, &scope, Some("max_session_bytes")),
        (80, &scope, None),
        (51, &traced, Some("max_trace_bytes")),
        (50, &traced, None),
    ];
    for &(size, s, refused_by) in cases {
        let r = store.put_bytes(Bytes::from(vec![size as u8; size]), PutOptions::scoped(s.clone())).await;
        match (refused_by, r) {
            (Some(limit), Err(StoreError::TooLarge { limit_name, size: got, .. })) => {
                assert_eq!((limit_name, got), (limit, size as u64));
            }
            (None, Ok(r)) => assert_eq!(r.size_bytes, size as u64),
            (want, got) => panic!("put of {size} bytes in {s:?}: want refusal by {want:?}, got {got:?}"),
        }
    }
    let e = store.put_bytes(Bytes::from(vec![0; 101]), PutOptions::scoped(scope.clone())).await.unwrap_err();
    assert!(e.to_string().contains("max_artifact_bytes"), "the message names the limit: {e}");

    // An endless stream is refused after little more than the limit has been read.
    let sent = Arc::new(AtomicU64::new(0));
    let endless = CountingReader { total: u64::MAX, sent: sent.clone() };
    let e = store.put_stream(Box::pin(endless), PutOptions::scoped(ArtifactScope::session("stream"))).await.unwrap_err();
    assert!(matches!(e, StoreError::TooLarge { limit_name: "max_session_bytes" | "max_artifact_bytes", .. }), "{e}");
    assert!(sent.load(Ordering::SeqCst) <= 4 << 20, "read {} bytes of an endless stream", sent.load(Ordering::SeqCst));
    let listed = ids_listed(&*store, ListQuery::default()).await;
    assert_eq!(listed.len(), 2, "only the two puts that fit are visible: {listed:?}");
}

/// What a put that does not fit its budget does, for every budget and strategy: LRU evicts
/// the least recently read, FIFO the oldest, `none` refuses naming the limit; and a budget
/// never evicts outside itself.
pub async fn eviction_strategies(factory: Factory<'_>, isolation: Isolation) {
    let session = ArtifactScope::session("evict").with_tenant("t").with_user("u");
    // Each budget made tight enough that `a`, `b`, `c` and a neighbour fill it exactly, with
    // the neighbour inside that budget but outside every narrower one: it fills the budget, and
    // a narrower budget must never evict it.
    let same_session = session.clone().with_trace("t2");
    let other_session = ArtifactScope::session("evict-2").with_tenant("t").with_user("u");
    let other_user = ArtifactScope::session("evict").with_tenant("t").with_user("u-2");
    // Outside every budget under test: never evicted.
    let outsider = ArtifactScope::session("evict").with_tenant("t-2").with_user("u");
    let scope = session.clone().with_trace("t1");
    let me = access(&scope);
    type Tighten = fn(&mut RetentionConfig);
    let budgets: [(&str, Tighten, &ArtifactScope); 6] = [
        ("max_session_bytes", |l| l.max_session_bytes = 40, &same_session),
        ("max_artifacts_per_session", |l| l.max_artifacts_per_session = 4, &same_session),
        ("max_trace_bytes", |l| l.max_trace_bytes = 30, &same_session),
        ("max_artifacts_per_trace", |l| l.max_artifacts_per_trace = 3, &same_session),
        ("max_user_bytes", |l| l.max_user_bytes = 40, &other_session),
        ("max_tenant_bytes", |l| l.max_tenant_bytes = 40, &other_user),
    ];
    let strategies = [CleanupStrategy::Lru, CleanupStrategy::Fifo, CleanupStrategy::None];
    for (limit, tighten, neighbour) in budgets {
        for strategy in strategies {
            let mut limits = RetentionConfig { cleanup_strategy: strategy, ..roomy() };
            tighten(&mut limits);
            let store = factory(limits, Arc::new(ManualClock::fixed()), isolation);
            let a = put(&*store, &[b'a'; 10], &scope).await;
            let b = put(&*store, &[b'b'; 10], &scope).await;
            let c = put(&*store, &[b'c'; 10], &scope).await;
            let x = put(&*store, &[b'x'; 10], neighbour).await;
            let o = put(&*store, &[b'o'; 10], &outsider).await;
            // Re-putting `a` dedups: no eviction, nothing counted twice, and it is now the most
            // recently used. Then `b` is read, so `c` is least recently used and `a` the oldest.
            assert_eq!(put(&*store, &[b'a'; 10], &scope).await.id, a.id);
            store.get(&me, &b.id).await.unwrap();
            let name = |id: &ArtifactId| {
                [(&o, "o"), (&x, "x"), (&a, "a"), (&b, "b"), (&c, "c")].iter().find(|(r, _)| &r.id == id).map(|(_, n)| *n)
            };
            let held = |store: DynStore| async move {
                ids_listed(&*store, ListQuery::default()).await.into_iter().map(|s| s.parse::<ArtifactId>().unwrap()).collect::<Vec<_>>()
            };
            let before: BTreeSet<_> = held(store.clone()).await.iter().filter_map(name).collect();
            assert_eq!(before, BTreeSet::from(["o", "x", "a", "b", "c"]), "{limit} {strategy:?}: full but not over");

            let d = store.put_bytes(Bytes::from(vec![b'd'; 10]), PutOptions::scoped(scope.clone())).await;
            let after: BTreeSet<&str> = held(store.clone()).await.iter().map(|id| name(id).unwrap_or("d")).collect();
            let want: &[&str] = match strategy {
                CleanupStrategy::Lru => &["o", "x", "a", "b", "d"],
                CleanupStrategy::Fifo => &["o", "x", "b", "c", "d"],
                CleanupStrategy::None => &["o", "x", "a", "b", "c"],
            };
            assert_eq!(after, want.iter().copied().collect(), "{limit} {strategy:?}");
            match (strategy, d) {
                (CleanupStrategy::None, Err(e @ StoreError::QuotaExceeded { .. })) => {
                    let m = e.to_string();
                    assert!(m.contains(limit) && !m.contains('\n'), "{limit}: {m}");
                }
                (CleanupStrategy::None, other) => panic!("{limit} none: want QuotaExceeded, got {other:?}"),
                (_, r) => {
                    let d = r.expect("eviction makes room");
                    assert_eq!(&store.get(&me, &d.id).await.unwrap()[..], &[b'd'; 10]);
                }
            }
        }
    }
}

/// One user's sessions: under user isolation they share every artifact (and storing the same
/// bytes again from another session is the same artifact); under session isolation each
/// session's artifacts are invisible to the others, exactly like ids that never existed.
pub async fn sessions_of_one_user(store: &dyn ArtifactStore, isolation: Isolation) {
    let a = ArtifactScope::session("sess-a").with_tenant("t").with_user("u");
    let b = ArtifactScope::session("sess-b").with_tenant("t").with_user("u");
    let data = pattern(3000, 7);
    let r = put(store, &data, &a.clone().with_trace("run-1")).await;
    let from_b = access(&b);
    let by_owner = |scope: &ArtifactScope| ListQuery { owner: Some(scope.owner()), ..Default::default() };
    match isolation {
        Isolation::User => {
            assert_eq!(&store.get(&from_b, &r.id).await.expect("another session of the user reads it")[..], &data[..]);
            assert_eq!(read_body(store, &from_b, &r.id, Some(10..20)).await, &data[10..20]);
            assert_eq!(store.meta(&from_b, &r.id).await.unwrap(), r);
            assert!(store.exists(&from_b, &r.id).await.unwrap());
            assert_eq!(ids_listed(store, by_owner(&b)).await, vec![r.id.to_string()]);
            // The record keeps the session and trace it was stored from, for grouping.
            let in_a = ListQuery { session_id: Some("sess-a".into()), ..by_owner(&b) };
            assert_eq!(ids_listed(store, in_a).await, vec![r.id.to_string()]);
            let in_b = ListQuery { session_id: Some("sess-b".into()), ..by_owner(&b) };
            assert!(ids_listed(store, in_b).await.is_empty());
            let in_run = ListQuery { trace_id: Some("run-1".into()), ..by_owner(&b) };
            assert_eq!(ids_listed(store, in_run).await, vec![r.id.to_string()]);
            // The same bytes from session b: one record, the first one.
            let again = put(store, &data, &b).await;
            assert_eq!((again.id.clone(), again.scope.clone(), again.created_at), (r.id.clone(), r.scope.clone(), r.created_at));
            assert_eq!(ids_listed(store, ListQuery::default()).await.len(), 1, "one record for the user");
            // Deleting from b deletes the user's artifact.
            assert!(store.delete(&from_b, &r.id).await.unwrap());
            assert_not_found(store.get(&access(&a), &r.id).await, &r.id, "deleted from the other session");
        }
        Isolation::Session => {
            assert_not_found(store.get(&from_b, &r.id).await, &r.id, "other session get");
            assert_not_found(store.get_range(&from_b, &r.id, 0..10).await, &r.id, "other session get_range");
            assert_not_found(store.open(&from_b, &r.id, None).await, &r.id, "other session open");
            assert_not_found(store.meta(&from_b, &r.id).await, &r.id, "other session meta");
            assert!(!store.exists(&from_b, &r.id).await.unwrap());
            assert!(!store.delete(&from_b, &r.id).await.unwrap());
            assert!(ids_listed(store, by_owner(&b)).await.is_empty());
            // The same bytes from session b: a record of its own; deleting it keeps a's.
            let again = put(store, &data, &b).await;
            assert_eq!((again.id.clone(), again.scope.clone()), (r.id.clone(), b.clone()));
            assert_eq!(ids_listed(store, ListQuery::default()).await.len(), 2);
            assert!(store.delete(&from_b, &r.id).await.unwrap());
            assert_eq!(&store.get(&access(&a), &r.id).await.unwrap()[..], &data[..]);
        }
    }
}

/// User budgets sum a user's sessions, tenant budgets a tenant's users; a single artifact larger
/// than either is refused outright; other users and tenants are never touched.
pub async fn user_and_tenant_budgets(factory: Factory<'_>, isolation: Isolation) {
    let scope = |tenant: &str, user: &str, session: &str| ArtifactScope::session(session).with_tenant(tenant).with_user(user);

    // Refused outright, naming the limit, before anything is stored.
    let limits = RetentionConfig { max_user_bytes: 25, max_tenant_bytes: 35, ..roomy() };
    let store = factory(limits.clone(), Arc::new(ManualClock::fixed()), isolation);
    for (size, limit) in [(26, "max_user_bytes"), (36, "max_user_bytes")] {
        let e = store.put_bytes(Bytes::from(vec![1; size]), PutOptions::scoped(scope("t", "u", "s"))).await.unwrap_err();
        assert!(matches!(e, StoreError::TooLarge { limit_name, .. } if limit_name == limit), "{size}: {e}");
    }
    let limits_tenant_first = RetentionConfig { max_user_bytes: 100, max_tenant_bytes: 35, ..roomy() };
    let store = factory(limits_tenant_first, Arc::new(ManualClock::fixed()), isolation);
    let e = store.put_bytes(Bytes::from(vec![1; 36]), PutOptions::scoped(scope("t", "u", "s"))).await.unwrap_err();
    assert!(matches!(e, StoreError::TooLarge { limit_name: "max_tenant_bytes", .. }), "{e}");
    let endless = CountingReader { total: u64::MAX, sent: Arc::new(AtomicU64::new(0)) };
    let e = store.put_stream(Box::pin(endless), PutOptions::scoped(scope("t", "u", "s"))).await.unwrap_err();
    assert!(matches!(e, StoreError::TooLarge { limit_name: "max_tenant_bytes", .. }), "a stream stops at the tightest limit: {e}");
    assert!(ids_listed(&*store, ListQuery::default()).await.is_empty());

    // Without eviction: the budgets add up across sessions and users, and refuse by name.
    let store = factory(RetentionConfig { cleanup_strategy: CleanupStrategy::None, ..limits }, Arc::new(ManualClock::fixed()), isolation);
    put(&*store, &[b'1'; 10], &scope("t", "u", "s1")).await;
    put(&*store, &[b'2'; 10], &scope("t", "u", "s2")).await;
    let e = store.put_bytes(Bytes::from(vec![b'3'; 10]), PutOptions::scoped(scope("t", "u", "s3"))).await.unwrap_err();
    let m = e.to_string();
    assert!(m.starts_with("user u is full:") && m.contains("max_user_bytes = 25") && !m.contains("max_artifacts"), "{m}");
    put(&*store, &[b'4'; 10], &scope("t", "v", "s1")).await;
    let e = store.put_bytes(Bytes::from(vec![b'5'; 10]), PutOptions::scoped(scope("t", "w", "s1"))).await.unwrap_err();
    assert!(e.to_string().starts_with("tenant t is full:") && e.to_string().contains("max_tenant_bytes = 35"), "{e}");
    // Another tenant has its own budget; a scope without a tenant shares the tenant-less one.
    put(&*store, &[b'5'; 10], &scope("t2", "w", "s1")).await;
    put(&*store, &[b'6'; 10], &ArtifactScope::session("s1").with_user("w")).await;
    assert_eq!(ids_listed(&*store, ListQuery::default()).await.len(), 5);

    // With LRU, a full tenant evicts its least recently used artifact, whoever's it is, and
    // never another tenant's.
    let lru = RetentionConfig { max_tenant_bytes: 30, ..roomy() };
    let store = factory(lru, Arc::new(ManualClock::fixed()), isolation);
    let other_user = put(&*store, &[b'a'; 10], &scope("t", "v", "s1")).await;
    let mine = put(&*store, &[b'b'; 10], &scope("t", "u", "s1")).await;
    let other_tenant = put(&*store, &[b'c'; 10], &scope("t2", "v", "s1")).await;
    let read = put(&*store, &[b'd'; 10], &scope("t", "u", "s2")).await;
    store.get(&access(&scope("t", "v", "s1")), &other_user.id).await.unwrap();
    store.get(&access(&scope("t", "u", "s2")), &read.id).await.unwrap();
    let new = put(&*store, &[b'e'; 10], &scope("t", "w", "s1")).await;
    let held: BTreeSet<String> = ids_listed(&*store, ListQuery::default()).await.into_iter().collect();
    let want: BTreeSet<String> = [&other_user, &other_tenant, &read, &new].iter().map(|r| r.id.to_string()).collect();
    assert_eq!(held, want, "the least recently used of the tenant ({}) went", mine.id);
}

/// gc removes expired records and reports them; live ones are untouched.
pub async fn gc_removes_expired(factory: Factory<'_>, isolation: Isolation) {
    let clock = ManualClock::fixed();
    let store = factory(RetentionConfig { ttl: Duration::from_secs(60), ..roomy() }, Arc::new(clock.clone()), isolation);
    let a = ArtifactScope::session("gc").with_user("gc-a");
    let b = ArtifactScope::session("gc").with_user("gc-b");
    let old = put(&*store, b"old bytes", &a).await;
    put(&*store, b"old bytes", &b).await;
    clock.advance(Duration::from_secs(30));
    let fresh = put(&*store, b"fresh bytes", &a).await;
    clock.advance(Duration::from_secs(31));
    let report = store.gc().await.unwrap();
    assert_eq!(report.expired_records, 2, "{report:?}");
    assert!(report.bytes_freed >= b"old bytes".len() as u64, "{report:?}");
    assert_not_found(store.get(&access(&a), &old.id).await, &old.id, "expired and collected");
    assert_eq!(&store.get(&access(&a), &fresh.id).await.unwrap()[..], b"fresh bytes");
    assert_eq!(store.gc().await.unwrap().expired_records, 0, "a second gc finds nothing");
}
