//! What one instance of a fleet must not be able to do to the others, on a real PostgreSQL
//! cluster and moto: decide time by its own clock (one 2 h ahead or behind, one 90 s ahead
//! under a 2-minute ttl), work on a stale copy of the bucket, move the store by starting
//! somewhere else, sign with another link secret, or leave a schema behind when it is refused;
//! and `check` (what `check-config` runs) refuses all that `open` refuses, in the same words.
//! Readiness holds on a bucket that is slow but healthy.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};
use stowage_store::{
    Access, ArtifactScope, ArtifactStore, Clock, Isolation, PutOptions, RetentionConfig, SharedStore, SkewedClock, StoreCheck,
};
use support::{BucketKind, BucketProxy, BucketServer, Postgres, ProxyMode};

struct Peers {
    pg: Postgres,
    s3: BucketServer,
    url: String,
}

fn peers() -> Option<Peers> {
    let pg = Postgres::start()?;
    let s3 = BucketServer::start(BucketKind::Moto, "fleet")?;
    let url = pg.create_database("fleet");
    Some(Peers { pg, s3, url })
}

fn retention() -> RetentionConfig {
    RetentionConfig { ttl: Duration::from_secs(3600), ..stowage_store::conformance::roomy() }
}

impl Peers {
    fn builder(&self, prefix: &str) -> stowage_store::SharedStoreBuilder {
        let (id, secret) = self.s3.credentials();
        SharedStore::builder(self.s3.location(prefix), self.url.clone()).static_credentials(id, secret).retention(retention())
    }

    /// An instance whose own clock is `offset` off the real time.
    async fn skewed(&self, offset: time::Duration) -> SharedStore {
        self.builder("stowage").local_clock(Arc::new(SkewedClock::new(offset)) as Arc<dyn Clock>).open().await.unwrap()
    }

    fn sql(&self, q: &str) -> String {
        self.pg.psql("fleet", q)
    }

    fn records(&self) -> usize {
        self.sql("SELECT count(*) FROM stowage.artifacts").parse().unwrap()
    }

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

    async fn keys(&self, prefix: &str) -> Vec<String> {
        use futures::TryStreamExt;
        let listed: Vec<_> = self.client().list(Some(&object_store::path::Path::from(prefix))).try_collect().await.unwrap();
        listed.into_iter().map(|m| m.location.to_string()).collect()
    }

    async fn get(&self, key: &str) -> Option<Bytes> {
        let got = self.client().get(&object_store::path::Path::from(key)).await.ok()?;
        Some(got.bytes().await.unwrap())
    }

    async fn put(&self, key: &str, body: Bytes) {
        self.client().put(&object_store::path::Path::from(key), object_store::PutPayload::from(body)).await.unwrap();
    }

    /// Copies every object under `from/` to `to/` (what an operator's `aws s3 sync` does).
    async fn copy_prefix(&self, from: &str, to: &str) {
        for key in self.keys(from).await {
            let dest = format!("{to}{}", &key[from.len()..]);
            self.client()
                .copy(&object_store::path::Path::from(key.as_str()), &object_store::path::Path::from(dest.as_str()))
                .await
                .unwrap();
        }
    }
}

fn tenant(t: &str, session: &str) -> ArtifactScope {
    ArtifactScope::session(session).with_user("u").with_tenant(t)
}

async fn put(store: &SharedStore, scope: ArtifactScope, text: String) -> stowage_store::ArtifactRef {
    store.put_bytes(Bytes::from(text), PutOptions::scoped(scope)).await.unwrap()
}

/// The database's time now, in Unix seconds.
fn db_now(p: &Peers) -> i64 {
    p.sql("SELECT extract(epoch FROM clock_timestamp())::bigint").parse().unwrap()
}

/// Instances whose own clocks are 2 h ahead and 2 h behind share the store with one whose clock
/// is right: each stores, puts into the same tenant and sweeps, and nothing of anyone's goes;
/// every record's expiry is the database's time plus the ttl; each instance knows how far off
/// it is. Before the store decided by the database's clock, the one ahead deleted the tenant's
/// artifacts on its first put, and the others deleted what the one behind stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_two_hours_off_either_way_deletes_nothing() {
    let Some(p) = peers() else { return };
    let right = p.builder("stowage").open().await.unwrap();
    let ahead = p.skewed(time::Duration::hours(2)).await;
    let behind = p.skewed(time::Duration::hours(-2)).await;
    let t = tenant("t", "s");
    let mut all = Vec::new();
    for i in 0..10 {
        all.push(put(&right, t.clone(), format!("stored by the instance that is right, {i}")).await);
    }
    // The one ahead puts into the same tenant (a put purges the tenant's expired records) and
    // sweeps the whole store.
    all.push(put(&ahead, t.clone(), "stored by the instance 2 h ahead".to_owned()).await);
    let swept = ahead.gc().await.unwrap();
    assert_eq!((swept.expired_records, swept.dangling_records, swept.orphan_blobs), (0, 0, 0), "{swept:?}");
    for i in 0..10 {
        all.push(put(&behind, tenant("t", "b"), format!("stored by the instance 2 h behind, {i}")).await);
    }
    // The one that is right, and the one ahead, put and sweep after it.
    all.push(put(&right, t.clone(), "another".to_owned()).await);
    all.push(put(&ahead, tenant("t", "b"), "and another".to_owned()).await);
    for store in [&right, &ahead, &behind] {
        let swept = store.gc().await.unwrap();
        assert_eq!(swept.expired_records, 0, "{swept:?}");
    }
    assert_eq!(p.records(), all.len(), "nothing of anyone's was deleted");
    let me = Access::Operator;
    for r in &all {
        assert!(right.exists(&me, &r.id).await.unwrap(), "{} is gone", r.id);
    }
    // Every expiry is the database's time plus the hour, whoever stored it.
    let now = db_now(&p);
    for r in &all {
        let left = r.expires_at.unwrap().unix_timestamp() - now;
        assert!((3540..=3600).contains(&left), "{} expires in {left}s, not about 3600s", r.id);
    }
    // Each knows how far off it is; the one that is right is within the bound.
    let two_hours = time::Duration::hours(2);
    assert!((ahead.clock_skew() - two_hours).abs() < time::Duration::seconds(5), "{}", ahead.clock_skew());
    assert!((behind.clock_skew() + two_hours).abs() < time::Duration::seconds(5), "{}", behind.clock_skew());
    assert!(right.clock_skew().unsigned_abs() < stowage_store::MAX_CLOCK_SKEW, "{}", right.clock_skew());
    let warning = stowage_store::skew_warning(ahead.clock_skew());
    assert!(warning.starts_with("this machine's clock is 720") && warning.contains("s ahead of the database's"), "{warning}");
    assert!(stowage_store::skew_warning(behind.clock_skew()).contains("s behind the database's"));
    // What `check-config` measures agrees.
    let measured = p.builder("stowage").local_clock(Arc::new(SkewedClock::new(-two_hours)) as Arc<dyn Clock>).clock_skew().await.unwrap();
    assert!((measured + two_hours).abs() < time::Duration::seconds(5), "{measured}");
}

/// A 2-minute ttl and an instance 90 s ahead: what the others stored a moment ago is not
/// expired for it (it used to be, 30 s in); a blob written a moment ago is not old enough for
/// its gc to remove as unreferenced (its grace is judged by the database's clock too), and a
/// blob it finds missing is noted at the database's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_ninety_seconds_ahead_keeps_a_two_minute_ttl() {
    let Some(p) = peers() else { return };
    let short = RetentionConfig { ttl: Duration::from_secs(120), ..retention() };
    let right = p.builder("stowage").retention(short.clone()).open().await.unwrap();
    let (id, secret) = p.s3.credentials();
    let ahead = SharedStore::builder(p.s3.location("stowage"), p.url.clone())
        .static_credentials(id, secret)
        .retention(short)
        .gc_grace(Duration::from_secs(60))
        .local_clock(Arc::new(SkewedClock::new(time::Duration::seconds(90))) as Arc<dyn Clock>)
        .open()
        .await
        .unwrap();
    let t = tenant("t", "s");
    let stored: Vec<_> = futures::future::join_all((0..5).map(|i| put(&right, t.clone(), format!("short-lived {i}")))).await;
    tokio::time::sleep(Duration::from_secs(31)).await;
    put(&ahead, t.clone(), "a put into the same tenant 31 s later".to_owned()).await;
    // An object no record names, written just now: inside the grace by the database's clock.
    let fresh = format!("stowage/blobs/ab/ab{}", "0".repeat(62));
    p.put(&fresh, Bytes::from_static(b"just written")).await;
    // One of the records' blobs goes missing: noted at the database's time.
    let lost = &stored[0];
    p.client().delete(&object_store::path::Path::from(format!("stowage/blobs/{}/{}", &lost.sha256[..2], lost.sha256))).await.unwrap();
    let swept = ahead.gc().await.unwrap();
    assert_eq!((swept.expired_records, swept.orphan_blobs, swept.dangling_records), (0, 0, 0), "{swept:?}");
    for r in &stored {
        assert!(right.exists(&Access::Operator, &r.id).await.unwrap(), "{} is gone after 31 s", r.id);
    }
    assert!(p.get(&fresh).await.is_some(), "a fresh object was taken for an old orphan");
    let noted: i64 = p.sql("SELECT first_missing_at / 1000000000 FROM stowage.missing_blobs").parse().unwrap();
    assert!((noted - db_now(&p)).abs() <= 5, "noted at {noted}, the database's time is {}", db_now(&p));
}

/// A stale copy of the bucket: a copy at another location is refused however fresh (moving a
/// store is `relocate`'s), and an old copy put back at the store's own location is refused at
/// start; a running instance whose location falls behind stops taking puts and fails its
/// readiness, and takes them again once its location is the store's again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_copy_is_refused_and_an_instance_on_one_stops_taking_puts() {
    let Some(p) = peers() else { return };
    let a = p.builder("stowage").watch_every(Duration::from_millis(300)).open().await.unwrap();
    let t = tenant("t", "s");
    for i in 0..3 {
        put(&a, t.clone(), format!("before the copy {i}")).await;
    }
    let id = a.store_id().to_owned();
    p.copy_prefix("stowage/", "copy/").await;
    let err = p.builder("copy").open().await.unwrap_err().to_string();
    assert!(err.contains(&format!("holds a copy of store {id}, whose blobs are at s3://fleet/stowage")), "{err}");
    assert!(err.contains("stowage artifacts relocate") && !err.contains('\n'), "{err}");
    assert_eq!(p.builder("copy").check().await.unwrap_err().to_string(), err, "check says what open says");

    // The marker as a backup taken now holds it, then put back once the store has moved on
    // (every start and every watch advances the generation).
    let marker_key = "stowage/stowage-store.json";
    let old_marker = p.get(marker_key).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let generation = |m: &Bytes| serde_json::from_slice::<serde_json::Value>(m).unwrap()["generation"].as_u64().unwrap();
    let now_marker = p.get(marker_key).await.unwrap();
    assert!(generation(&now_marker) > generation(&old_marker), "the running instance advanced the generation");
    p.put(marker_key, old_marker.clone()).await;
    let err = p.builder("stowage").open().await.unwrap_err().to_string();
    assert!(err.contains(&format!("holds an older copy of store {id} (generation {}", generation(&old_marker))), "{err}");
    // The running instance on it: no more puts, not ready, nothing judged by gc.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match a.put_bytes(Bytes::from_static(b"after the restore"), PutOptions::scoped(t.clone())).await {
            Err(e) => break e.to_string(),
            Ok(_) => {
                assert!(Instant::now() < deadline, "the instance on the stale copy still takes puts");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(refused.contains("takes no puts") && refused.contains("older copy"), "{refused}");
    let not_ready = a.check_ready().await.unwrap_err();
    assert_eq!((not_ready.dependency, not_ready.reason.as_str()), ("bucket", "not the store's location"), "{not_ready}");
    assert!(a.gc().await.unwrap_err().to_string().contains("gc will not judge blobs here"));
    // The current marker back (the copy replaced by the real bucket): puts again.
    let current = p.sql("SELECT value FROM stowage.settings WHERE key = 'generation'");
    p.put(marker_key, Bytes::from(serde_json::json!({"store_id": id, "generation": current.parse::<u64>().unwrap()}).to_string())).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.put_bytes(Bytes::from_static(b"after the repair"), PutOptions::scoped(t.clone())).await.is_err() {
        assert!(Instant::now() < deadline, "the instance never took puts again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Moving a store to another location: refused while an instance runs, and for a copy made
/// before the last instance stopped; with every instance stopped and a fresh copy, `relocate`
/// records the new location and the old one is refused from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relocate_moves_the_store_only_when_it_is_safe() {
    let Some(p) = peers() else { return };
    let a = p.builder("stowage").open().await.unwrap();
    let t = tenant("t", "s");
    let refs: Vec<_> = futures::future::join_all((0..4).map(|i| put(&a, t.clone(), format!("moving {i}")))).await;
    p.copy_prefix("stowage/", "early/").await;
    let err = p.builder("early").relocate().await.unwrap_err().to_string();
    assert!(err.contains("1 instance(s) of this store are still running") && err.contains("stop (drain) every instance"), "{err}");
    drop(a);
    wait_for_no_instance(&p).await;
    // The copy was made before the last instance stopped (which advanced the generation).
    let b = p.builder("stowage").open().await.unwrap();
    drop(b);
    wait_for_no_instance(&p).await;
    let err = p.builder("early").relocate().await.unwrap_err().to_string();
    assert!(err.contains("it was copied before the last instance stopped; copy the objects again"), "{err}");
    p.copy_prefix("stowage/", "moved/").await;
    let from = p.builder("moved").relocate().await.unwrap();
    assert!(from.starts_with("s3://fleet/stowage at "), "{from}");
    let moved = p.builder("moved").open().await.unwrap();
    for r in &refs {
        assert_eq!(moved.get(&Access::Operator, &r.id).await.unwrap().len() as u64, r.size_bytes);
    }
    let err = p.builder("stowage").open().await.unwrap_err().to_string();
    assert!(err.contains("s3://fleet/stowage") && err.contains("whose blobs are at s3://fleet/moved"), "{err}");
    assert_eq!(p.builder("moved").check().await.unwrap(), StoreCheck::Matches { store_id: moved.store_id().to_owned() });
}

async fn wait_for_no_instance(p: &Peers) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let live = || p.sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid::bigint = 1398013957");
    while live() != "0" {
        assert!(Instant::now() < deadline, "an instance still holds its liveness lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn prints(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

/// Another link secret under the fleet's key id, or none of the fleet's keys: refused at start
/// and by check, in one line naming the key; a rotation (a new key beside the old one, then the
/// old one dropped) is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_link_secret_is_refused_and_a_rotation_is_not() {
    let Some(p) = peers() else { return };
    let first = p.builder("stowage").link_keys(prints(&[("k1", "aaaaaaaaaaaaaaaa")])).open().await.unwrap();
    let id = first.store_id().to_owned();
    let err = p.builder("stowage").link_keys(prints(&[("k1", "bbbbbbbbbbbbbbbb")])).open().await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("link-signing key \"k1\" of this instance has another secret than store {id}'s other instances")),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
    assert_eq!(p.builder("stowage").link_keys(prints(&[("k1", "bbbbbbbbbbbbbbbb")])).check().await.unwrap_err().to_string(), err);
    let err = p.builder("stowage").link_keys(prints(&[("k9", "cccccccccccccccc")])).open().await.unwrap_err().to_string();
    assert!(err.contains("none of this instance's link-signing keys (k9)") && err.contains("(k1)"), "{err}");
    // Rotation: k2 added second, then first, then k1 dropped.
    p.builder("stowage").link_keys(prints(&[("k1", "aaaaaaaaaaaaaaaa"), ("k2", "dddddddddddddddd")])).open().await.unwrap();
    p.builder("stowage").link_keys(prints(&[("k2", "dddddddddddddddd"), ("k1", "aaaaaaaaaaaaaaaa")])).open().await.unwrap();
    p.builder("stowage").link_keys(prints(&[("k2", "dddddddddddddddd")])).open().await.unwrap();
    // A command that mints no link checks no key.
    p.builder("stowage").open().await.unwrap();
    drop(first);
}

/// What `open` refuses, `check` refuses in the same words, and neither leaves a schema behind:
/// another isolation, a schema name with a typo, another database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_what_open_refuses_and_neither_leaves_a_schema() {
    let Some(p) = peers() else { return };
    let a = p.builder("stowage").open().await.unwrap();
    put(&a, tenant("t", "s"), "something".to_owned()).await;
    let id = a.store_id().to_owned();
    let schemas = |db: &str| {
        p.pg.psql(db, "SELECT string_agg(schema_name, ',' ORDER BY schema_name) FROM information_schema.schemata WHERE schema_name NOT LIKE 'pg_%' AND schema_name <> 'information_schema' AND schema_name <> 'public'")
    };

    let err = p.builder("stowage").isolation(Isolation::Session).open().await.unwrap_err().to_string();
    assert!(err.contains("keys its records by user isolation, but this store is opened with session isolation"), "{err}");
    assert_eq!(p.builder("stowage").isolation(Isolation::Session).check().await.unwrap_err().to_string(), err);

    let typo = p.builder("stowage").index_schema("stowgae");
    let err = typo.check().await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("already holds the blobs of store {id}, but index")) && err.contains("schema stowgae records no store"),
        "{err}"
    );
    assert_eq!(p.builder("stowage").index_schema("stowgae").open().await.unwrap_err().to_string(), err);
    assert_eq!(schemas("fleet"), "stowage", "no schema left behind");

    let other = p.pg.create_database("other");
    let (key, secret) = p.s3.credentials();
    let wrong_db = || SharedStore::builder(p.s3.location("stowage"), other.clone()).static_credentials(key, secret);
    let err = wrong_db().check().await.unwrap_err().to_string();
    assert!(err.contains(&format!("already holds the blobs of store {id}")) && err.contains("/other schema stowage"), "{err}");
    assert_eq!(wrong_db().open().await.unwrap_err().to_string(), err);
    assert_eq!(schemas("other"), "", "no schema left behind");
}

/// An index from before identities is claimed only where most of its newest records' blobs
/// are: a location that holds one of them (a bucket that happens to hold the same bytes) is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_index_is_not_claimed_by_a_location_holding_one_of_its_blobs() {
    let Some(p) = peers() else { return };
    let a = p.builder("stowage").open().await.unwrap();
    let refs: Vec<_> = futures::future::join_all((0..8).map(|i| put(&a, tenant("t", "s"), format!("old {i}")))).await;
    drop(a);
    p.sql("DELETE FROM stowage.settings WHERE key IN ('store_id', 'blob_location', 'generation', 'link_keys')");
    p.client().delete(&object_store::path::Path::from("stowage/stowage-store.json")).await.unwrap();
    let one = &refs[3];
    let key = |prefix: &str| format!("{prefix}/blobs/{}/{}", &one.sha256[..2], one.sha256);
    p.put(&key("elsewhere"), p.get(&key("stowage")).await.unwrap()).await;
    let err = p.builder("elsewhere").open().await.unwrap_err().to_string();
    assert!(err.contains("only 1 of the 8 newest records' blobs are at s3://fleet/elsewhere"), "{err}");
    assert_eq!(p.builder("stowage").check().await.unwrap(), StoreCheck::Unclaimed);
    p.builder("stowage").open().await.unwrap();
}

/// A bucket that answers every request 2.5 s late, as puts still succeed: readiness answers at
/// once and ready, poll after poll (it used to fail half of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_holds_on_a_slow_but_healthy_bucket() {
    let Some(p) = peers() else { return };
    let proxy = BucketProxy::start(p.s3.port);
    let (key, secret) = p.s3.credentials();
    let mut location = p.s3.location("stowage");
    location.endpoint = Some(proxy.endpoint());
    let store = Arc::new(SharedStore::builder(location, p.url.clone()).static_credentials(key, secret).open().await.unwrap());
    store.check_ready().await.unwrap();
    proxy.set(ProxyMode::Slow);
    let putter = {
        let store = store.clone();
        tokio::spawn(async move { put(&store, tenant("t", "s"), "through a slow bucket".to_owned()).await })
    };
    for _ in 0..12 {
        let asked = Instant::now();
        store.check_ready().await.unwrap();
        assert!(asked.elapsed() < Duration::from_secs(2), "a readiness check waited {:?}", asked.elapsed());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let stored = putter.await.unwrap();
    assert!(store.exists(&Access::Operator, &stored.id).await.unwrap());
}
