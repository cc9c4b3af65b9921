//! What keeps a shared store safe from one misconfigured, failing or dying instance,
//! on a real PostgreSQL cluster and moto: the store's identity recorded on first use and
//! checked on every start; gc slow to drop records whose blobs are missing; readiness that
//! proves a write and names what failed; puts that fail, or whose process dies, leave no blob
//! that nothing names; a hung bucket fails calls in seconds.

use crate::support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use stowage_store::{Access, ArtifactScope, ArtifactStore, Clock, GcOptions, ManualClock, PutOptions, PutStep, SharedStore, StoreCheck};
use support::{BucketKind, BucketProxy, BucketServer, Postgres, ProxyMode};

struct Peers {
    pg: Postgres,
    s3: BucketServer,
    url: String,
}

fn peers() -> Option<Peers> {
    let pg = Postgres::start()?;
    let s3 = BucketServer::start(BucketKind::Moto, "shared")?;
    let url = pg.create_database("shared");
    Some(Peers { pg, s3, url })
}

impl Peers {
    fn builder(&self, prefix: &str) -> stowage_store::SharedStoreBuilder {
        let (id, secret) = self.s3.credentials();
        SharedStore::builder(self.s3.location(prefix), self.url.clone())
            .static_credentials(id, secret)
            .retention(stowage_store::conformance::roomy())
    }

    async fn open(&self, prefix: &str) -> SharedStore {
        self.builder(prefix).open().await.expect("open shared store")
    }

    /// Keys under `prefix` in the bucket (moto's ListObjectsV2, unsigned).
    fn keys(&self, prefix: &str) -> Vec<String> {
        let (status, body) = self.s3.raw("GET", &format!("/{}?list-type=2&prefix={prefix}", self.s3.bucket));
        assert!(status.contains("200"), "{status} {body}");
        body.split("<Key>").skip(1).map(|s| s.split("</Key>").next().unwrap().to_owned()).collect()
    }

    /// A signed client of the bucket (moto refuses unsigned object reads and writes).
    fn client(&self) -> object_store::aws::AmazonS3 {
        let (id, secret) = self.s3.credentials();
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(&self.s3.bucket)
            .with_endpoint(self.s3.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(id)
            .with_secret_access_key(secret)
            .build()
            .unwrap()
    }

    async fn delete_key(&self, key: &str) {
        use object_store::ObjectStoreExt;
        self.client().delete(&object_store::path::Path::from(key)).await.unwrap();
    }

    async fn put_key(&self, key: &str, body: &'static [u8]) {
        use object_store::ObjectStoreExt;
        self.client().put(&object_store::path::Path::from(key), object_store::PutPayload::from_static(body)).await.unwrap();
    }

    async fn get_key(&self, key: &str) -> Option<String> {
        use object_store::ObjectStoreExt;
        let got = self.client().get(&object_store::path::Path::from(key)).await.ok()?;
        Some(String::from_utf8_lossy(&got.bytes().await.unwrap()).into_owned())
    }

    fn blob_key(sha: &str) -> String {
        format!("stowage/blobs/{}/{sha}", &sha[..2])
    }

    fn records(&self) -> usize {
        self.pg.psql("shared", "SELECT count(*) FROM stowage.artifacts").parse().unwrap()
    }

    /// Blobs under `stowage/blobs/` that no record names.
    fn unreferenced_blobs(&self) -> Vec<String> {
        let named = self.pg.psql("shared", "SELECT string_agg(sha256, ',') FROM stowage.artifacts");
        self.keys("stowage/blobs/").into_iter().filter(|k| !named.contains(k.rsplit('/').next().unwrap())).collect()
    }
}

fn scope() -> ArtifactScope {
    ArtifactScope::session("s").with_user("u")
}

async fn put(store: &SharedStore, i: u32) -> stowage_store::ArtifactRef {
    store.put_bytes(Bytes::from(format!("artifact number {i}")), PutOptions::scoped(scope())).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_is_recorded_on_first_use_and_checked_on_every_start() {
    let Some(p) = peers() else { return };
    // check-config on a database no instance has started on yet: nothing to compare.
    assert_eq!(p.builder("stowage").check().await.unwrap(), StoreCheck::Fresh);
    let first = p.open("stowage").await;
    let id = first.store_id().to_owned();
    assert_eq!(p.pg.psql("shared", "SELECT value FROM stowage.settings WHERE key = 'store_id'"), id);
    let location = p.pg.psql("shared", "SELECT value FROM stowage.settings WHERE key = 'blob_location'");
    assert_eq!(location, format!("s3://shared/stowage at {}", p.s3.endpoint()));
    let marker = p.get_key("stowage/stowage-store.json").await.expect("the marker is written");
    assert!(marker.contains(&id), "{marker}");
    for i in 0..3 {
        put(&first, i).await;
    }

    // Every later start checks it, and finds the same store.
    assert_eq!(p.open("stowage").await.store_id(), id);
    assert_eq!(p.builder("stowage").check().await.unwrap(), StoreCheck::Matches { store_id: id.clone() });

    // A wrong prefix: refused, in one line naming both locations; check-config says the same.
    let err = p.builder("stowgae").open().await.unwrap_err().to_string();
    assert!(err.contains("s3://shared/stowgae") && err.contains(&location) && err.contains(&id), "{err}");
    assert!(!err.contains('\n'), "{err}");
    assert_eq!(p.builder("stowgae").check().await.unwrap_err().to_string(), err);

    // An existing but empty other bucket: refused too.
    let (status, _) = p.s3.raw("PUT", "/empty");
    assert!(status.contains("200"));
    let (key, secret) = p.s3.credentials();
    let mut other = p.s3.location("stowage");
    other.bucket = "empty".into();
    let err = SharedStore::builder(other, p.url.clone()).static_credentials(key, secret).open().await.unwrap_err().to_string();
    assert!(err.contains("s3://empty/stowage") && err.contains(&location), "{err}");

    // Another index pointed at this prefix: the marker names another store.
    let err = p.builder("stowage").index_schema("other").open().await.unwrap_err().to_string();
    assert!(err.contains(&format!("holds the blobs of store {id}")) && err.contains("records no store"), "{err}");

    // Nothing of the fleet's was touched by the refused starts.
    assert_eq!(p.records(), 3);
    assert_eq!(p.keys("stowage/blobs/").len(), 3);

    // A marker lost from the right location (deleted by hand) is written again.
    p.delete_key("stowage/stowage-store.json").await;
    assert_eq!(p.builder("stowage").check().await.unwrap(), StoreCheck::MarkerMissing { store_id: id.clone() });
    assert_eq!(p.open("stowage").await.store_id(), id);
    let marker = p.get_key("stowage/stowage-store.json").await.expect("the marker is written again");
    assert!(marker.contains(&id), "{marker}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_from_before_identities_is_claimed_only_where_its_blobs_are() {
    let Some(p) = peers() else { return };
    let store = p.open("stowage").await;
    for i in 0..3 {
        put(&store, i).await;
    }
    drop(store);
    // As an index written before this version: no identity, no marker.
    p.pg.psql("shared", "DELETE FROM stowage.settings WHERE key IN ('store_id', 'blob_location')");
    p.delete_key("stowage/stowage-store.json").await;
    assert_eq!(p.builder("stowage").check().await.unwrap(), StoreCheck::Unclaimed);
    let err = p.builder("elsewhere").open().await.unwrap_err().to_string();
    assert!(err.contains("only 0 of the 3 newest records' blobs are at s3://shared/elsewhere"), "{err}");
    let claimed = p.open("stowage").await;
    assert_eq!(p.pg.psql("shared", "SELECT value FROM stowage.settings WHERE key = 'store_id'"), claimed.store_id());
}

/// A blob deleted behind the store's back: the first sweep only notes it, a sweep past the
/// grace checks it once more and drops its record; a blob that comes back clears the note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_drops_a_dangling_record_only_when_still_missing_past_the_grace() {
    let Some(p) = peers() else { return };
    let clock = Arc::new(ManualClock::fixed());
    let store = p.builder("stowage").clock(clock.clone() as Arc<dyn Clock>).gc_grace(Duration::from_secs(600)).open().await.unwrap();
    let refs: Vec<_> = futures::future::join_all((0..40).map(|i| put(&store, i))).await;
    let (lost, back) = (&refs[0], &refs[1]);
    p.delete_key(&Peers::blob_key(&lost.sha256)).await;
    p.delete_key(&Peers::blob_key(&back.sha256)).await;

    let report = store.gc().await.unwrap();
    assert_eq!((report.dangling_records, report.dangling_suspected), (0, 2), "{report:?}");
    assert_eq!(p.pg.psql("shared", "SELECT count(*) FROM stowage.missing_blobs"), "2");
    // One comes back (a slow replica, a restore): it is no longer suspected.
    store.put_bytes(Bytes::from("artifact number 1"), PutOptions::scoped(ArtifactScope::session("t"))).await.unwrap();
    clock.advance(Duration::from_secs(300));
    let report = store.gc().await.unwrap();
    assert_eq!((report.dangling_records, report.dangling_suspected), (0, 1), "inside the grace: {report:?}");
    clock.advance(Duration::from_secs(301));
    let report = store.gc().await.unwrap();
    assert_eq!((report.dangling_records, report.dangling_suspected), (1, 0), "past the grace: {report:?}");
    let me = Access::owner_of(&scope());
    assert!(!store.exists(&me, &lost.id).await.unwrap());
    assert!(store.exists(&me, &back.id).await.unwrap());
    assert_eq!(p.pg.psql("shared", "SELECT count(*) FROM stowage.missing_blobs"), "0");
}

/// Every blob gone at once under a matching marker (an emptied bucket): gc keeps the records
/// and says so, sweep after sweep; the operator's forced gc drops them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_that_would_drop_a_large_share_keeps_everything_until_forced() {
    let Some(p) = peers() else { return };
    let store = p.builder("stowage").gc_grace(Duration::ZERO).open().await.unwrap();
    for i in 0..10 {
        put(&store, i).await;
    }
    for key in p.keys("stowage/blobs/") {
        p.delete_key(&key).await;
    }
    let report = store.gc().await.unwrap();
    assert_eq!((report.dangling_records, report.dangling_suspected), (0, 10), "the first sweep only notes them: {report:?}");
    for _ in 0..2 {
        let report = store.gc().await.unwrap();
        assert_eq!((report.dangling_records, report.dangling_held), (0, 10), "{report:?}");
    }
    assert_eq!(p.records(), 10);
    let report = store.gc_with(GcOptions::drop_dangling()).await.unwrap();
    assert_eq!(report.dangling_records, 10, "{report:?}");
    assert_eq!(p.records(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_judges_nothing_at_a_location_whose_marker_is_not_the_stores() {
    let Some(p) = peers() else { return };
    let store = p.builder("stowage").gc_grace(Duration::ZERO).open().await.unwrap();
    put(&store, 1).await;
    // The location is repointed under the running instance (another store's marker appears).
    p.delete_key("stowage/stowage-store.json").await;
    p.put_key("stowage/stowage-store.json", br#"{"store_id":"someone-else"}"#).await;
    for key in p.keys("stowage/blobs/") {
        p.delete_key(&key).await;
    }
    let err = store.gc_with(GcOptions::drop_dangling()).await.unwrap_err().to_string();
    assert!(err.contains("names store someone-else") && err.contains(store.store_id()), "{err}");
    assert_eq!(p.records(), 1, "no record dropped");
}

/// A put whose index step fails after its blob was published: the blob goes at once (the
/// publishing journal names it), not an hour later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_that_fails_after_publishing_leaves_no_blob() {
    let Some(p) = peers() else { return };
    let fail = Arc::new(AtomicBool::new(true));
    let hook = {
        let fail = fail.clone();
        Arc::new(move |at: PutStep| at == PutStep::BeforeIndexInsert && fail.load(Ordering::SeqCst))
    };
    let store = p.builder("stowage").failpoints(hook).open().await.unwrap();
    let err = store.put_bytes(Bytes::from(vec![3u8; 3 << 20]), PutOptions::scoped(scope())).await.unwrap_err();
    assert!(err.to_string().contains("failpoint"), "{err}");
    wait_until("the failed put's blob is removed", || p.keys("stowage/blobs/").is_empty());
    wait_until("its publish is forgotten", || p.pg.psql("shared", "SELECT count(*) FROM stowage.publishing") == "0");
    fail.store(false, Ordering::SeqCst);
    let r = store.put_bytes(Bytes::from(vec![3u8; 3 << 20]), PutOptions::scoped(scope())).await.unwrap();
    assert_eq!(p.keys("stowage/blobs/"), vec![Peers::blob_key(&r.sha256)]);
    wait_until("a recorded put's publish is forgotten too", || p.pg.psql("shared", "SELECT count(*) FROM stowage.publishing") == "0");
}

/// The database stops while puts run, then comes back: whatever the puts had uploaded is
/// either recorded or removed; nothing under `blobs/` is left that no record names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_stopped_under_puts_leaves_no_unreferenced_blob() {
    let Some(p) = peers() else { return };
    let store = Arc::new(p.builder("stowage").connect_timeout(Duration::from_secs(1)).open().await.unwrap());
    let running = Arc::new(AtomicBool::new(true));
    let writers: Vec<_> = (0..4u8)
        .map(|w| {
            let (store, running) = (store.clone(), running.clone());
            tokio::spawn(async move {
                let (mut ok, mut failed, mut n) = (0, 0, 0u32);
                while running.load(Ordering::SeqCst) {
                    n += 1;
                    let data = Bytes::from(vec![w; 256 << 10 | n as usize]);
                    match store.put_bytes(data, PutOptions::scoped(scope())).await {
                        Ok(_) => ok += 1,
                        Err(_) => failed += 1,
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    p.pg.stop_fast();
    tokio::time::sleep(Duration::from_secs(2)).await;
    p.pg.start_again();
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.store(false, Ordering::SeqCst);
    let (mut ok, mut failed) = (0, 0);
    for w in writers {
        let (o, f) = w.await.unwrap();
        ok += o;
        failed += f;
    }
    assert!(ok > 0 && failed > 0, "the outage was seen: {ok} stored, {failed} failed");
    wait_until("every blob under blobs/ is named by a record", || {
        let left = p.unreferenced_blobs();
        if !left.is_empty() {
            eprintln!(
                "unreferenced: {left:?}; publishing: {}",
                p.pg.psql("shared", "SELECT string_agg(instance || '/' || put_id || '/' || sha256, ' ') FROM stowage.publishing")
            );
        }
        left.is_empty()
    });
    wait_until("no publish is left unresolved", || p.pg.psql("shared", "SELECT count(*) FROM stowage.publishing") == "0");
    assert_eq!(p.keys("stowage/blobs/").len(), p.records(), "one blob per record (all different bytes)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_proves_a_write_and_names_what_failed() {
    let Some(p) = peers() else { return };
    let proxy = BucketProxy::start(p.s3.port);
    let (key, secret) = p.s3.credentials();
    let mut location = p.s3.location("stowage");
    location.endpoint = Some(proxy.endpoint());
    let store = SharedStore::builder(location, p.url.clone()).static_credentials(key, secret).open().await.unwrap();
    store.check_ready().await.unwrap();
    put(&store, 1).await;

    // Writes refused, reads fine (what a listing-based check could not see).
    proxy.set(ProxyMode::RefuseWrites);
    let err = wait_for_not_ready(&store).await;
    assert_eq!((err.dependency, err.reason.as_str()), ("bucket", "access denied"), "{err}");
    assert!(err.detail.starts_with("probe bucket write s3://shared/stowage/tmp/"), "{err}");

    // A bucket that hangs: not ready within the readiness timeout, not the bucket's 30 s.
    proxy.set(ProxyMode::Hang);
    tokio::time::sleep(Duration::from_secs(3)).await; // the cached refusal ages out
    let started = Instant::now();
    let err = store.check_ready().await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
    assert_eq!((err.dependency, err.reason.as_str()), ("bucket", "timed out"), "{err}");

    // ... and a download fails in seconds rather than hanging.
    let me = Access::owner_of(&scope());
    let id = store.list(Default::default()).await.unwrap().items[0].id.clone();
    let started = Instant::now();
    assert!(store.get(&me, &id).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());

    proxy.set(ProxyMode::Pass);
    tokio::time::sleep(Duration::from_secs(3)).await;
    store.check_ready().await.unwrap();

    // The database down: it is named, whatever the bucket's cached state.
    p.pg.stop();
    let err = store.check_ready().await.unwrap_err();
    assert_eq!(err.dependency, "database", "{err}");
}

/// Readiness's write probe is cached: a burst of probes makes one write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_probes_in_a_burst_write_once() {
    let Some(p) = peers() else { return };
    let proxy = BucketProxy::start(p.s3.port);
    let (key, secret) = p.s3.credentials();
    let mut location = p.s3.location("stowage");
    location.endpoint = Some(proxy.endpoint());
    let store = SharedStore::builder(location, p.url.clone()).static_credentials(key, secret).open().await.unwrap();
    store.check_ready().await.unwrap();
    // Writes start failing: within the cache's life, probes still answer from the last write.
    proxy.set(ProxyMode::RefuseWrites);
    for _ in 0..20 {
        store.check_ready().await.unwrap();
    }
}

async fn wait_for_not_ready(store: &SharedStore) -> stowage_store::NotReady {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.check_ready().await {
            Err(e) => return e,
            Ok(()) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Ok(()) => panic!("still ready after 10 s"),
        }
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "within 20 s: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The child side of the kill test: opens the store named by the environment and stops a put
/// once its blob is published, before its record is written, until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_killed_instances_leftovers_are_removed_at_the_next_start as its child"]
async fn child_blocks_a_put_after_publishing() {
    let (Ok(url), Ok(endpoint)) = (std::env::var("STOWAGE_CHILD_PG"), std::env::var("STOWAGE_CHILD_S3")) else { return };
    let mut location = stowage_store::BucketLocation::s3("shared", "stowage");
    location.endpoint = Some(endpoint);
    location.region = Some("us-east-1".into());
    let hook = Arc::new(|at: PutStep| {
        if at == PutStep::Staged {
            println!("published");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        false
    });
    let store = SharedStore::builder(location, url).static_credentials("testing", "testing").failpoints(hook).open().await.unwrap();
    let marker = std::env::var("STOWAGE_CHILD_BYTES").unwrap();
    let _ = store.put_bytes(Bytes::from(marker), PutOptions::scoped(scope())).await;
}

/// `kill -9` of an instance whose put had published its blob: the next instance to start
/// removes that blob at once (its owner's liveness lock is gone), while a live instance's
/// put in the same state is left alone; a staged upload of a gone instance goes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instances_leftovers_are_removed_at_the_next_start() {
    let Some(p) = peers() else { return };
    p.open("stowage").await; // records the identity before the children start
    let spawn = |bytes: &str| {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &support::child_test(module_path!(), "child_blocks_a_put_after_publishing"),
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("STOWAGE_CHILD_PG", &p.url)
            .env("STOWAGE_CHILD_S3", p.s3.endpoint())
            .env("STOWAGE_CHILD_BYTES", bytes)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("published") {
            line.clear();
            assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0, "the child ended before publishing");
        }
        child
    };
    let mut doomed = spawn("bytes of the put that dies");
    let mut alive = spawn("bytes of the put that waits");
    assert_eq!(p.keys("stowage/blobs/").len(), 2, "both blobs published, neither recorded");
    // A staged upload left by a gone instance (key 0x0000_0001 holds no liveness lock).
    let stale = "stowage/tmp/00000001.0123456789abcdef0123456789abcdef";
    p.put_key(stale, b"half").await;
    doomed.kill().unwrap();
    doomed.wait().unwrap();

    let _next = p.open("stowage").await;
    let left: Vec<String> = p.keys("stowage/blobs/");
    assert_eq!(left.len(), 1, "only the live instance's blob: {left:?}");
    let waiting = hex_sha(b"bytes of the put that waits");
    assert_eq!(left, vec![Peers::blob_key(&waiting)]);
    assert!(!p.keys("stowage/tmp/").contains(&stale.to_owned()), "the gone instance's staged upload went");
    assert_eq!(p.pg.psql("shared", "SELECT count(*) FROM stowage.publishing"), "1", "the live put's publish stays");
    alive.kill().unwrap();
    alive.wait().unwrap();
}

fn hex_sha(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}
