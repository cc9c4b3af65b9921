//! [`SharedStore`]: blobs in an object store (S3 or an S3-compatible store; Google Cloud
//! Storage and Azure Blob Storage with the `gcs` and `azure` features), records in
//! PostgreSQL — one store that several gateway instances use at once (features `s3` and
//! `postgres`).
//!
//! Every rule is the engine's, as for [`crate::FsStore`]; what changes is that decisions are
//! serialised across instances by a PostgreSQL advisory lock rather than only within one
//! process, that one gc sweeps at a time, and that gc spares blobs younger than the grace
//! period (an instance may have staged one for a put whose row is not written yet).
//!
//! The index and the bucket location must be one store's: opening records a store id and a
//! generation in the index and in a marker object under the prefix on first use, refuses to
//! start when they disagree, and advances the generation, as every running instance does
//! every half minute, so a stale copy of the bucket is refused (`crate::identity`). The
//! link-signing keys' fingerprints are recorded too: an instance with another secret is
//! refused. Opening also takes this instance's liveness lock and cleans up after instances
//! that are gone (their unrecorded publishes and staged uploads).
//!
//! One clock for the fleet: expiry, LRU ticks, gc's grace and "confirmed missing" are decided
//! by the database's clock ([`crate::clock::DbClock`], read at open and every half minute,
//! carried forward by this machine's monotonic clock), never by an instance's own, which is
//! only compared with it ([`SharedStore::clock_skew`], warned about past [`MAX_CLOCK_SKEW`]).
//!
//! Credentials for the bucket come from each provider's standard environment, never from the
//! configuration file: the AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, …) or the instance's role for S3; `GOOGLE_SERVICE_ACCOUNT` /
//! `GOOGLE_APPLICATION_CREDENTIALS` or the metadata server for GCS;
//! `AZURE_STORAGE_ACCOUNT_NAME` with `AZURE_STORAGE_ACCOUNT_KEY`, a client secret, a workload
//! or managed identity for Azure.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::{ClientOptions, RetryConfig};
use stowage_core::{ArtifactId, Isolation, StoreError};
use tokio_util::sync::CancellationToken;

use crate::blobs::{Blobs, Bucket, Journal, MARKER, ObjectBlobs};
use crate::clock::{Clock, DbClock, SystemClock};
use crate::delegate::delegate_store;
use crate::engine::{Engine, Settings};
use crate::failpoint::Failpoints;
use crate::identity::{Decision, KeyPrints, MarkerSeen, Recorded, Seen, check_keys, decide, describe_location, new_store_id};
use crate::index::{PgIndex, PgOptions};
use crate::{Access, Result, RetentionConfig};

/// The default grace before gc removes a blob no record references, or a staged upload: far
/// longer than any put takes between staging its bytes and inserting its row.
pub const DEFAULT_SHARED_GC_GRACE: Duration = Duration::from_secs(3600);

/// Which object store holds the blobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provider {
    /// AWS S3 or an S3-compatible store (R2, MinIO).
    #[default]
    S3,
    /// Google Cloud Storage (feature `gcs`).
    Gcs,
    /// Azure Blob Storage (feature `azure`); the bucket is the container.
    Azure,
}

impl Provider {
    /// The URL scheme its buckets go by (`s3://`, `gs://`, `az://`), for messages.
    pub fn scheme(self) -> &'static str {
        match self {
            Provider::S3 => "s3",
            Provider::Gcs => "gs",
            Provider::Azure => "az",
        }
    }
}

/// Where a [`SharedStore`] keeps its blobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketLocation {
    /// Which object store.
    pub provider: Provider,
    /// Bucket name (the container, on Azure).
    pub bucket: String,
    /// Key prefix every object goes under (`<prefix>/blobs/…`, `<prefix>/tmp/…`); may be empty.
    pub prefix: String,
    /// Endpoint URL of a compatible or local service: an S3-compatible store (R2, MinIO), an
    /// Azure account URL (`https://<account>.blob.core.windows.net`, or an emulator's
    /// `http://host:port/<account>`), a GCS base URL; `None` is the provider's own.
    pub endpoint: Option<String>,
    /// S3 only: the region; `None` takes `AWS_REGION`/`AWS_DEFAULT_REGION`, else `us-east-1`
    /// (R2 wants `auto`).
    pub region: Option<String>,
}

impl BucketLocation {
    /// An S3 location with no endpoint or region set.
    pub fn s3(bucket: impl Into<String>, prefix: impl Into<String>) -> Self {
        BucketLocation { provider: Provider::S3, bucket: bucket.into(), prefix: prefix.into(), endpoint: None, region: None }
    }

    fn url(&self) -> String {
        format!("{}://{}", self.provider.scheme(), self.bucket)
    }
}

/// An artifact store shared by several instances: object-store blobs, a PostgreSQL index.
pub struct SharedStore {
    engine: Engine<PgIndex, ObjectBlobs>,
    target: String,
    location: BucketLocation,
    store_id: String,
    /// This machine's clock less the database's at the last reading, in milliseconds.
    skew_ms: Arc<AtomicI64>,
    /// Stops this instance's background tasks (its liveness lock, the settler, the watch) when
    /// dropped.
    stop: CancellationToken,
}

impl Drop for SharedStore {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// How often an instance resolves unrecorded publishes (its own failed puts', and those of
/// instances that are gone) when no failed put woke it sooner.
const SETTLE_EVERY: Duration = Duration::from_secs(60);
/// Newest records whose blobs the identity check looks for at a location.
const IDENTITY_SAMPLE: i64 = 8;
/// How often a running instance reads the database's clock again, checks that its location
/// is still the store's, and advances the store's generation.
const WATCH_EVERY: Duration = Duration::from_secs(30);

/// How far this machine's clock may be from the database's before the instance is warned
/// about (at start, by `check-config`, and whenever it is found so). The store decides by the
/// database's clock whatever the difference; download links and logs go by this machine's.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5);

/// What `check-config` learns about a shared store without changing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreCheck {
    /// No instance has started on this index yet: the first one creates its schema and
    /// records this location.
    Fresh,
    /// The index records no store yet (made by an older version), and this location holds its
    /// blobs: the next start records it.
    Unclaimed,
    /// The index and this location's marker name the same store.
    Matches {
        /// The store's id.
        store_id: String,
    },
    /// The index's location is this one and holds its blobs, but the marker is missing: the
    /// next start writes it again.
    MarkerMissing {
        /// The store's id, as the index records it.
        store_id: String,
    },
}

impl std::fmt::Display for StoreCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreCheck::Fresh => write!(f, "new: the first start creates the index schema and records this bucket location"),
            StoreCheck::Unclaimed => write!(f, "not recorded yet: the next start records this bucket location as the store's"),
            StoreCheck::Matches { store_id } => write!(f, "store {store_id} (the index and the bucket's marker agree)"),
            StoreCheck::MarkerMissing { store_id } => {
                write!(f, "store {store_id}; the bucket's marker is missing and the next start writes it again")
            }
        }
    }
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore").field("target", &self.target).finish_non_exhaustive()
    }
}

impl SharedStore {
    /// A builder for the store over this bucket location and this PostgreSQL URL.
    pub fn builder(location: BucketLocation, index_url: impl Into<String>) -> SharedStoreBuilder {
        SharedStoreBuilder {
            location,
            index_url: index_url.into(),
            index_schema: crate::index::DEFAULT_PG_SCHEMA.to_owned(),
            max_connections: 16,
            connect_timeout: Duration::from_secs(5),
            retention: RetentionConfig::default(),
            clock: None,
            local_clock: test_local_clock(),
            gc_grace: DEFAULT_SHARED_GC_GRACE,
            isolation: Isolation::default(),
            credentials: None,
            index_ca_file: None,
            link_keys: None,
            watch_every: WATCH_EVERY,
            failpoints: Failpoints::default(),
        }
    }

    /// The retention the store was opened with.
    pub fn retention(&self) -> &RetentionConfig {
        self.engine.config()
    }

    /// Which owner ids decide access.
    pub fn isolation(&self) -> Isolation {
        self.engine.isolation()
    }

    /// The store id the index and the bucket's marker record.
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    /// How far this machine's clock ([`SharedStoreBuilder::local_clock`]) was from the
    /// database's at the last reading (at open, then every half minute): positive when this
    /// machine's runs ahead. The store decides by the database's clock whatever this is; past
    /// [`MAX_CLOCK_SKEW`] the instance is warned (its download links expire by its own).
    pub fn clock_skew(&self) -> time::Duration {
        time::Duration::milliseconds(self.skew_ms.load(Ordering::Relaxed))
    }

    /// Checks that the database answers and the bucket takes a write; the error names
    /// whichever does not.
    pub async fn check_ready(&self) -> std::result::Result<(), crate::NotReady> {
        crate::ArtifactStore::ready(self).await
    }

    /// A URL the object store itself serves the artifact's bytes at, presigned with this
    /// instance's credentials and valid for `expires_in` (at most seven days on S3 and GCS), after the
    /// same access and expiry checks as a read. For tool-to-tool chaining (`presign_direct`):
    /// the bytes then bypass the gateway. Never hand one to a person: it names the bucket.
    pub async fn presigned_url(&self, access: &Access, id: &ArtifactId, expires_in: Duration) -> Result<String> {
        let rec = self.engine.resolve_for_presign(access, id).await?;
        self.engine.blobs().presign_get(&rec.sha256, expires_in).await
    }
}

/// This machine's clock: the system's, or, in builds with the `test-hooks` feature (tests
/// only; see `crates/stowage/tests/test_hooks.rs`), the system's moved by
/// `STOWAGE_TEST_CLOCK_SKEW_SECS` seconds, so a test can run a `stowage` process whose clock is
/// off.
fn test_local_clock() -> Arc<dyn Clock> {
    #[cfg(feature = "test-hooks")]
    if let Some(secs) = std::env::var("STOWAGE_TEST_CLOCK_SKEW_SECS").ok().and_then(|s| s.parse::<i64>().ok()) {
        return Arc::new(crate::SkewedClock::new(time::Duration::seconds(secs)));
    }
    Arc::new(SystemClock)
}

/// Options for opening a [`SharedStore`].
pub struct SharedStoreBuilder {
    location: BucketLocation,
    index_url: String,
    index_schema: String,
    max_connections: usize,
    connect_timeout: Duration,
    retention: RetentionConfig,
    /// `None`: the database's clock.
    clock: Option<Arc<dyn Clock>>,
    local_clock: Arc<dyn Clock>,
    gc_grace: Duration,
    isolation: Isolation,
    credentials: Option<(String, String)>,
    index_ca_file: Option<std::path::PathBuf>,
    link_keys: Option<Vec<(String, String)>>,
    watch_every: Duration,
    failpoints: Failpoints,
}

/// What opening found about time: the fleet's clock, and this machine's distance from it.
struct Times {
    fleet: Arc<dyn Clock>,
    /// `Some` when the fleet's clock is the database's (kept fresh by the watch).
    db: Option<Arc<DbClock>>,
    skew_ms: i64,
}

impl SharedStoreBuilder {
    /// Installs a failpoint hook (crash tests only: the `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn failpoints(mut self, hook: crate::FailpointHook) -> Self {
        self.failpoints = Failpoints::new(hook);
        self
    }

    /// How often the running instance checks its location and the clock (default 30 s):
    /// tests shorten it.
    #[doc(hidden)]
    pub fn watch_every(mut self, every: Duration) -> Self {
        self.watch_every = every.max(Duration::from_millis(100));
        self
    }

    /// The retention limits and expiry.
    pub fn retention(mut self, retention: RetentionConfig) -> Self {
        self.retention = retention;
        self
    }

    /// Decides expiry, LRU order and gc's grace by `clock` instead of the database's (tests
    /// pass a [`crate::ManualClock`] to move the fleet's time). By default every instance
    /// decides by the database's clock, so that one whose own clock is off expires nothing
    /// early and keeps nothing late.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// This machine's clock (default: the system's). The store never decides by it: it is only
    /// compared with the database's ([`SharedStore::clock_skew`]). Tests skew it
    /// ([`crate::SkewedClock`]) to play an instance whose clock is off.
    pub fn local_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.local_clock = clock;
        self
    }

    /// Which owner ids decide access; every instance sharing the index must use the same
    /// (the index records it and refuses another).
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }

    /// How old an unreferenced blob or a staged upload must be before gc removes it (default
    /// [`DEFAULT_SHARED_GC_GRACE`]). Zero is safe only with one instance and no put in flight.
    pub fn gc_grace(mut self, grace: Duration) -> Self {
        self.gc_grace = grace;
        self
    }

    /// The PostgreSQL schema the index's tables live in (default `stowage`; created if
    /// missing). Lowercase letters, digits and `_`.
    pub fn index_schema(mut self, schema: impl Into<String>) -> Self {
        self.index_schema = schema.into();
        self
    }

    /// The most connections this instance opens to PostgreSQL (default 16, at least 2).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }

    /// PEM certificates to trust for the database's TLS besides Mozilla's roots (a cloud
    /// provider's or a private CA). Whether TLS is used is the URL's `sslmode`.
    pub fn index_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.index_ca_file = Some(path.into());
        self
    }

    /// How long to wait for the database to accept a connection (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The link-signing keys this instance signs with, as `(key id, fingerprint)` pairs
    /// (`stowage_links::KeyRing::fingerprints`), signing key first. The store records them, and
    /// refuses an instance with another secret under a recorded id, or with none of the
    /// fleet's keys: its links would fail on every other instance. Without this call the keys
    /// are not checked (a command that mints no link).
    pub fn link_keys(mut self, fingerprints: Vec<(String, String)>) -> Self {
        self.link_keys = Some(fingerprints);
        self
    }

    /// Static bucket credentials instead of the environment's, for embedding programs and
    /// tests: an access key id and secret on S3, an account name and key on Azure (GCS takes
    /// its service account from the environment only). The binary never calls this; its
    /// credentials come from the environment only.
    pub fn static_credentials(mut self, access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        self.credentials = Some((access_key_id.into(), secret_access_key.into()));
        self
    }

    /// Connects to the database, configures the bucket client, checks that the index and the
    /// bucket location are one store's (recording it on first use; see [`StoreCheck`]) and
    /// that this instance's link keys are the fleet's, applies the migrations, takes this
    /// instance's liveness lock and cleans up after instances that are gone. Refuses, in one
    /// line naming both sides, an index and a location that belong to different stores, a
    /// stale copy of the bucket, another link secret; a refusal leaves nothing behind (no
    /// schema in a database no instance had started on).
    pub async fn open(self) -> Result<SharedStore> {
        let (loc, prefix, here) = self.location_parts()?;
        let client = self.bucket_client()?;
        let index = PgIndex::connect(&self.pg_options()).await?;
        let stop = CancellationToken::new();
        // Cancelled if anything below fails, so the liveness lock goes with this open.
        let guard = stop.clone().drop_guard();
        let journal = Journal::start(index.clone(), stop.clone()).await?;
        let times = self.times(&index).await?;
        let blobs =
            ObjectBlobs::new(client, loc.provider.scheme(), &loc.bucket, &prefix, self.gc_grace, journal.clone(), times.fleet.clone());
        if !index.has_schema().await? {
            // Nothing is created for a location that already holds another store's blobs.
            if let Some((id, generation)) = blobs.read_marker().await? {
                let marker = MarkerSeen { id: &id, generation };
                return Err(StoreError::InvalidInput(refusal(&index, &here, None, Some(marker))));
            }
        }
        index.migrate(self.isolation).await?;
        let store_id = establish_identity(&index, &blobs, &here, self.link_keys.as_deref()).await?;
        blobs.set_store_id(store_id.clone());
        // What instances that are gone left: their unrecorded publishes and staged uploads.
        if let Err(e) = blobs.settle_publishes().await {
            tracing::warn!(error = %e, "could not clean up after instances that are gone; gc will");
        }
        if let Err(e) = blobs.clean_temp().await {
            tracing::warn!(error = %e, "could not remove staged uploads of instances that are gone; gc will");
        }
        tokio::spawn(settle_loop(blobs.clone(), journal, stop.clone()));
        // Said at start by whoever opened the store (`clock_skew`); the watch says it when a
        // later reading crosses the bound.
        let skew_ms = Arc::new(AtomicI64::new(times.skew_ms));
        let watch = Watch {
            index: index.clone(),
            blobs: blobs.clone(),
            here,
            db: times.db,
            local: self.local_clock.clone(),
            skew_ms: skew_ms.clone(),
            every: self.watch_every,
        };
        tokio::spawn(watch.run(stop.clone()));
        let last_tick = index.max_last_access().await?;
        let target = format!("{} + {}", blobs.target(), index.target());
        let settings = Settings {
            config: self.retention,
            clock: times.fleet,
            failpoints: self.failpoints,
            isolation: self.isolation,
            last_tick,
            grace: self.gc_grace,
        };
        let _ = guard.disarm();
        Ok(SharedStore { engine: Engine::new(index, blobs, settings), target, location: self.location, store_id, skew_ms, stop })
    }

    /// What opening would find about the store's identity, changing nothing: connects to the
    /// database (without migrating) and reads the bucket's marker. Whatever `open` would refuse
    /// — an index and a location of different stores, a stale copy, another isolation, a
    /// schema newer than this version, another link secret — is the same one-line error.
    pub async fn check(self) -> Result<StoreCheck> {
        let (loc, prefix, here) = self.location_parts()?;
        let client = self.bucket_client()?;
        let index = PgIndex::connect(&self.pg_options()).await?;
        let stop = CancellationToken::new();
        let _stop = stop.clone().drop_guard();
        let journal = Journal::start(index.clone(), stop).await?;
        let blobs = ObjectBlobs::new(client, loc.provider.scheme(), &loc.bucket, &prefix, self.gc_grace, journal, Arc::new(SystemClock));
        if !index.has_schema().await? {
            return match blobs.read_marker().await? {
                Some((id, generation)) => {
                    Err(StoreError::InvalidInput(refusal(&index, &here, None, Some(MarkerSeen { id: &id, generation }))))
                }
                None => Ok(StoreCheck::Fresh),
            };
        }
        index.check_schema(self.isolation).await?;
        let looked = look(&index, &blobs, &here).await?;
        let recorded_id = looked.recorded.as_ref().map(|r| r.0.clone());
        if let (Some(mine), Some(id)) = (&self.link_keys, &recorded_id) {
            check_keys(&recorded_keys(&index).await?, mine, id).map_err(StoreError::InvalidInput)?;
        }
        match looked.decision() {
            Decision::Matches => Ok(StoreCheck::Matches { store_id: recorded_id.unwrap_or_default() }),
            Decision::Claim => Ok(StoreCheck::Unclaimed),
            Decision::RestoreMarker => Ok(StoreCheck::MarkerMissing { store_id: recorded_id.unwrap_or_default() }),
            Decision::Refuse(why) => Err(StoreError::InvalidInput(why)),
        }
    }

    /// How far this machine's clock ([`SharedStoreBuilder::local_clock`]) is from the
    /// database's now (positive: ahead), for `check-config`; connects, changes nothing.
    pub async fn clock_skew(&self) -> Result<time::Duration> {
        let index = PgIndex::connect(&self.pg_options()).await?;
        let (db, when) = index.db_time().await?;
        Ok(self.local_clock.now() - (db + when.elapsed()))
    }

    /// Records the configured bucket location as the store's, after its objects were copied
    /// there (`stowage artifacts relocate`): every instance must be stopped (none holds its
    /// liveness lock), the location's marker must be the store's at the index's current
    /// generation (a copy made after the last instance stopped), and the newest records' blobs
    /// must be there. Then the generation advances at the new location, so the old one (and
    /// any other copy) is refused from now on. Returns the location moved from.
    pub async fn relocate(self) -> Result<String> {
        let (loc, prefix, here) = self.location_parts()?;
        let client = self.bucket_client()?;
        let index = PgIndex::connect(&self.pg_options()).await?;
        if !index.has_schema().await? {
            return Err(StoreError::InvalidInput(format!(
                "index {} schema {} holds no store yet: there is nothing to relocate; start an instance to create the store",
                index.target(),
                index.schema()
            )));
        }
        let running = index.live_instance_count().await?;
        if running > 0 {
            return Err(StoreError::InvalidInput(format!(
                "{running} instance(s) of this store are still running: stop (drain) every instance before relocating, so that none writes to the old location meanwhile"
            )));
        }
        let stop = CancellationToken::new();
        let _stop = stop.clone().drop_guard();
        let journal = Journal::start(index.clone(), stop).await?;
        let blobs = ObjectBlobs::new(client, loc.provider.scheme(), &loc.bucket, &prefix, self.gc_grace, journal, Arc::new(SystemClock));
        let _lock = index.lock_identity().await?;
        let looked = look(&index, &blobs, &here).await?;
        let Some((id, from, generation)) = looked.recorded.clone() else {
            return Err(StoreError::InvalidInput("the index records no store location yet: start an instance instead".into()));
        };
        if from == here {
            return Err(StoreError::InvalidInput(format!("{here} is already the store's location: nothing to relocate")));
        }
        match &looked.marker {
            Some((m, g)) if *m == id && *g == generation => {}
            Some((m, g)) if *m == id => {
                return Err(StoreError::InvalidInput(format!(
                    "{here} holds a copy of store {id} at generation {g}, but the store is at {generation}: it was copied before the last instance stopped; copy the objects again (marker included), then relocate"
                )));
            }
            Some((m, _)) => {
                return Err(StoreError::InvalidInput(format!("{here} holds the blobs of store {m}, not of this index's store {id}")));
            }
            None => {
                return Err(StoreError::InvalidInput(format!(
                    "{here} has no store marker: copy every object under the old prefix ({from}), {MARKER} included, then relocate"
                )));
            }
        }
        let sample = index.sample_blobs(IDENTITY_SAMPLE).await?;
        let mut present = 0;
        for (sha256, size) in &sample {
            present += usize::from(blobs.has_blob(sha256, *size).await?);
        }
        if present < sample.len() {
            return Err(StoreError::InvalidInput(format!(
                "only {present} of the {} newest records' blobs are at {here}: finish copying the objects from {from}, then relocate",
                sample.len()
            )));
        }
        let next = generation + 1;
        blobs.write_marker(&id, next).await?;
        index.set_setting("blob_location", &here).await?;
        index.set_setting("generation", &next.to_string()).await?;
        tracing::info!(store = %id, from = %from, to = %here, generation = next, "relocated the shared store");
        Ok(from)
    }

    /// The fleet's clock, and this machine's distance from the database's.
    async fn times(&self, index: &PgIndex) -> Result<Times> {
        let (db_now, when) = index.db_time().await?;
        let skew = self.local_clock.now() - (db_now + when.elapsed());
        let skew_ms = i64::try_from(skew.whole_milliseconds()).unwrap_or(i64::MAX);
        Ok(match &self.clock {
            Some(c) => Times { fleet: c.clone(), db: None, skew_ms },
            None => {
                let db = Arc::new(DbClock::new(db_now, when));
                Times { fleet: db.clone(), db: Some(db), skew_ms }
            }
        })
    }

    /// The location, its prefix trimmed, and its description; refuses an empty bucket name
    /// and `.`/`..` prefix segments.
    fn location_parts(&self) -> Result<(&BucketLocation, String, String)> {
        let loc = &self.location;
        if loc.bucket.trim().is_empty() {
            return Err(StoreError::InvalidInput("[store] bucket is empty: name the bucket the artifacts go to".into()));
        }
        let prefix = loc.prefix.trim_matches('/');
        if prefix.split('/').any(|p| p == "." || p == "..") {
            return Err(StoreError::InvalidInput(format!("[store] prefix {:?} has a '.' or '..' segment: use plain names", loc.prefix)));
        }
        let here = describe_location(loc.provider.scheme(), &loc.bucket, prefix, loc.endpoint.as_deref());
        Ok((loc, prefix.to_owned(), here))
    }

    fn pg_options(&self) -> PgOptions {
        PgOptions {
            url: self.index_url.clone(),
            schema: self.index_schema.clone(),
            max_connections: self.max_connections,
            connect_timeout: self.connect_timeout,
            ca_file: self.index_ca_file.clone(),
        }
    }

    /// The provider's client for the bucket, configured from the environment (and the static
    /// credentials, if given); no request is sent.
    fn bucket_client(&self) -> Result<Arc<dyn Bucket>> {
        let loc = &self.location;
        // Fail in seconds rather than object_store's default of retrying for three minutes: a
        // tool call is waiting, and an unreachable bucket should say so while it still can.
        // Each call also has a deadline of its own (blobs/object.rs). (Client options first:
        // with_allow_http below sets one of them.)
        let retry = RetryConfig { max_retries: 3, retry_timeout: Duration::from_secs(10), ..RetryConfig::default() };
        let client_options = ClientOptions::new().with_connect_timeout(self.connect_timeout);
        let plain_http = loc.endpoint.as_deref().is_some_and(|e| e.starts_with("http://"));
        let fail = |e: object_store::Error| StoreError::backend("configure bucket", loc.url(), e.to_string().replace('\n', " "));
        match loc.provider {
            Provider::S3 => {
                let mut s3 =
                    AmazonS3Builder::from_env().with_client_options(client_options).with_retry(retry).with_bucket_name(&loc.bucket);
                if let Some(region) = &loc.region {
                    s3 = s3.with_region(region);
                } else if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
                    s3 = s3.with_region("us-east-1");
                }
                if let Some(endpoint) = &loc.endpoint {
                    s3 = s3.with_endpoint(endpoint).with_allow_http(plain_http);
                }
                if let Some((id, secret)) = &self.credentials {
                    s3 = s3.with_access_key_id(id).with_secret_access_key(secret);
                }
                Ok(Arc::new(s3.build().map_err(fail)?))
            }
            #[cfg(feature = "gcs")]
            Provider::Gcs => {
                use object_store::gcp::GoogleCloudStorageBuilder;
                let mut gcs = GoogleCloudStorageBuilder::from_env()
                    .with_client_options(client_options.with_allow_http(plain_http))
                    .with_retry(retry)
                    .with_bucket_name(&loc.bucket);
                if let Some(endpoint) = &loc.endpoint {
                    gcs = gcs.with_base_url(endpoint);
                }
                if self.credentials.is_some() {
                    return Err(StoreError::InvalidInput(
                        "GCS takes its credentials from the environment (GOOGLE_SERVICE_ACCOUNT or GOOGLE_APPLICATION_CREDENTIALS), not static_credentials".into(),
                    ));
                }
                Ok(Arc::new(gcs.build().map_err(fail)?))
            }
            #[cfg(feature = "azure")]
            Provider::Azure => {
                use object_store::azure::MicrosoftAzureBuilder;
                let mut az = MicrosoftAzureBuilder::from_env()
                    .with_client_options(client_options)
                    .with_retry(retry)
                    .with_container_name(&loc.bucket);
                if let Some(endpoint) = &loc.endpoint {
                    az = az.with_endpoint(endpoint.clone()).with_allow_http(plain_http);
                }
                if let Some((account, key)) = &self.credentials {
                    az = az.with_account(account).with_access_key(key);
                }
                Ok(Arc::new(az.build().map_err(fail)?))
            }
            #[allow(unreachable_patterns)] // with every provider's feature on
            other => Err(StoreError::InvalidInput(format!(
                "this build of stowage has no {other:?} support: rebuild stowage-store with its feature (gcs, azure)"
            ))),
        }
    }
}

/// What the identity rule needs, read: the recorded identity, the marker, and (when they do
/// not already agree) how many of the newest records' blobs are at this location.
struct Looked {
    /// `(store id, location, generation)`.
    recorded: Option<(String, String, u64)>,
    /// `(store id, generation)`.
    marker: Option<(String, u64)>,
    here: String,
    index: String,
    sampled: usize,
    present: usize,
}

impl Looked {
    fn decision(&self) -> Decision {
        decide(&Seen {
            recorded: self.recorded.as_ref().map(|(id, location, generation)| Recorded { id, location, generation: *generation }),
            marker: self.marker.as_ref().map(|(id, generation)| MarkerSeen { id, generation: *generation }),
            here: &self.here,
            index: &self.index,
            sampled: self.sampled,
            present: self.present,
        })
    }
}

async fn look(index: &PgIndex, blobs: &ObjectBlobs, here: &str) -> Result<Looked> {
    let recorded_id = index.setting("store_id").await?;
    let recorded_location = index.setting("blob_location").await?.unwrap_or_default();
    let generation = recorded_generation(index).await?;
    let marker = blobs.read_marker().await?;
    let agree = recorded_id.is_some() && recorded_id.as_deref() == marker.as_ref().map(|(id, _)| id.as_str());
    let sample = if agree { Vec::new() } else { index.sample_blobs(IDENTITY_SAMPLE).await? };
    let mut present = 0;
    for (sha256, size) in &sample {
        present += usize::from(blobs.has_blob(sha256, *size).await?);
    }
    Ok(Looked {
        recorded: recorded_id.map(|id| (id, recorded_location, generation)),
        marker,
        here: here.to_owned(),
        index: index_label(index),
        sampled: sample.len(),
        present,
    })
}

fn index_label(index: &PgIndex) -> String {
    format!("{} schema {}", index.target(), index.schema())
}

/// The refusal for what was seen, when the rule refuses it (a fresh index: only the marker).
fn refusal(index: &PgIndex, here: &str, recorded: Option<Recorded<'_>>, marker: Option<MarkerSeen<'_>>) -> String {
    let label = index_label(index);
    match decide(&Seen { recorded, marker, here, index: &label, sampled: 0, present: 0 }) {
        Decision::Refuse(why) => why,
        other => format!("unexpected identity decision {other:?} for {here}"),
    }
}

async fn recorded_generation(index: &PgIndex) -> Result<u64> {
    Ok(index.setting("generation").await?.and_then(|g| g.parse().ok()).unwrap_or(0))
}

async fn recorded_keys(index: &PgIndex) -> Result<KeyPrints> {
    Ok(index.setting("link_keys").await?.and_then(|k| serde_json::from_str(&k).ok()).unwrap_or_default())
}

/// Checks the store's identity and records it on first use (under a lock, so instances
/// starting together claim it once): the index first, then the marker, so a start that stops
/// between the two leaves a state the next start completes. Then checks (and records) the
/// link keys, and advances the generation (marker first), which any copy made before this
/// start can no longer match.
async fn establish_identity(index: &PgIndex, blobs: &ObjectBlobs, here: &str, keys: Option<&[(String, String)]>) -> Result<String> {
    let _lock = index.lock_identity().await?;
    let looked = look(index, blobs, here).await?;
    let (id, generation) = match looked.decision() {
        Decision::Matches => {
            let (id, _, generation) = looked.recorded.clone().unwrap_or_default();
            // A marker one ahead: an advance that stopped half-way; go on from it.
            (id, looked.marker.as_ref().map_or(generation, |(_, g)| (*g).max(generation)))
        }
        Decision::RestoreMarker => {
            let (id, _, generation) = looked.recorded.clone().unwrap_or_default();
            tracing::warn!(store = %id, location = %here, "the store's marker was missing from its bucket location; writing it again");
            (id, generation)
        }
        Decision::Claim => {
            let id = new_store_id();
            index.set_setting("store_id", &id).await?;
            index.set_setting("blob_location", here).await?;
            index.set_setting("generation", "0").await?;
            tracing::info!(store = %id, location = %here, "recorded this shared store's identity");
            (id, 0)
        }
        Decision::Refuse(why) => return Err(StoreError::InvalidInput(why)),
    };
    if let Some(mine) = keys {
        let recorded = recorded_keys(index).await?;
        let keep = check_keys(&recorded, mine, &id).map_err(StoreError::InvalidInput)?;
        if keep != recorded {
            let text = serde_json::to_string(&keep).map_err(|e| StoreError::backend("record link keys", index.target().to_owned(), e))?;
            index.set_setting("link_keys", &text).await?;
        }
    }
    advance(index, blobs, &id, generation).await?;
    Ok(id)
}

/// Moves the store to the next generation: the marker first, then the index (a reader between
/// the two sees the marker one ahead, which the rule accepts). Identity lock held.
async fn advance(index: &PgIndex, blobs: &ObjectBlobs, id: &str, from: u64) -> Result<u64> {
    let next = from + 1;
    blobs.write_marker(id, next).await?;
    index.set_setting("generation", &next.to_string()).await?;
    Ok(next)
}

/// What a running instance does every [`WATCH_EVERY`]: reads the database's clock again (and
/// warns when this machine's has drifted past [`MAX_CLOCK_SKEW`]), checks under the identity
/// lock that its location is still the store's at the store's generation, and advances it.
/// A location found not to be (a stale copy another location has moved past, a store
/// relocated elsewhere) is fenced: no more puts, readiness fails, gc judges nothing, until a
/// check finds it the store's again.
struct Watch {
    index: PgIndex,
    blobs: ObjectBlobs,
    here: String,
    db: Option<Arc<DbClock>>,
    local: Arc<dyn Clock>,
    skew_ms: Arc<AtomicI64>,
    every: Duration,
}

impl Watch {
    async fn run(self, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.every) => {}
            }
            if let Err(e) = self.clock().await {
                tracing::debug!(error = %e, "cannot read the database's clock now; the last reading carries on");
            }
            if let Err(e) = self.identity().await {
                // The database or the bucket not answering says nothing about whose the
                // location is: only a definite answer fences.
                tracing::debug!(error = %e, "cannot check the store's identity now");
            }
        }
    }

    async fn clock(&self) -> Result<()> {
        let (db_now, when) = self.index.db_time().await?;
        if let Some(db) = &self.db {
            db.set(db_now, when);
        }
        let skew = self.local.now() - (db_now + when.elapsed());
        let ms = i64::try_from(skew.whole_milliseconds()).unwrap_or(i64::MAX);
        let before = self.skew_ms.swap(ms, Ordering::Relaxed);
        warn_about_skew(ms, before);
        Ok(())
    }

    async fn identity(&self) -> Result<()> {
        let _lock = self.index.lock_identity().await?;
        let looked = look(&self.index, &self.blobs, &self.here).await?;
        match looked.decision() {
            Decision::Matches => {
                let (id, _, generation) = looked.recorded.clone().unwrap_or_default();
                let from = looked.marker.as_ref().map_or(generation, |(_, g)| (*g).max(generation));
                advance(&self.index, &self.blobs, &id, from).await?;
                if self.blobs_fenced() {
                    tracing::info!(location = %self.here, "this location is the store's again: taking puts");
                    self.blobs.set_fenced(None);
                }
            }
            Decision::Refuse(why) => {
                if !self.blobs_fenced() {
                    tracing::error!(location = %self.here, "this instance's bucket location is not the store's any more; it takes no puts: {why}");
                }
                self.blobs.set_fenced(Some(why));
            }
            // A marker gone from a location that still holds the store's blobs: the next start
            // writes it again; meanwhile nothing here is judged (gc verifies the marker).
            Decision::RestoreMarker | Decision::Claim => {}
        }
        Ok(())
    }

    fn blobs_fenced(&self) -> bool {
        self.blobs.is_fenced()
    }
}

/// Says when a reading of this machine's clock crosses [`MAX_CLOCK_SKEW`] from the database's,
/// either way (the start's reading is the opener's to say: [`SharedStore::clock_skew`]).
fn warn_about_skew(ms: i64, before: i64) {
    let bound = i64::try_from(MAX_CLOCK_SKEW.as_millis()).unwrap_or(i64::MAX);
    let over = ms.abs() > bound;
    let was_over = before.abs() > bound;
    if over && !was_over {
        tracing::warn!(
            target: "stowage::store",
            "{}",
            skew_warning(time::Duration::milliseconds(ms))
        );
    } else if !over && was_over {
        tracing::info!(target: "stowage::store", "this machine's clock agrees with the database's again (within {}s)", MAX_CLOCK_SKEW.as_secs());
    }
}

/// The one line said about a clock that is off: by how much, what it does and does not
/// affect, and what to do.
pub fn skew_warning(skew: time::Duration) -> String {
    let secs = skew.whole_milliseconds() as f64 / 1000.0;
    let way = if secs >= 0.0 { "ahead of" } else { "behind" };
    format!(
        "this machine's clock is {:.1}s {way} the database's (more than {}s): the shared store decides expiry and gc by the database's clock, but download links and upload slots expire by this machine's; sync it (NTP)",
        secs.abs(),
        MAX_CLOCK_SKEW.as_secs()
    )
}

/// Resolves unrecorded publishes whenever a put ends without its record (and every
/// [`SETTLE_EVERY`] for instances that are gone), retrying with backoff while the database is
/// down, until the store is dropped.
async fn settle_loop(blobs: ObjectBlobs, journal: Arc<Journal>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = journal.woken() => {}
            () = tokio::time::sleep(SETTLE_EVERY) => {}
        }
        let mut backoff = Duration::from_millis(250);
        while let Err(e) = blobs.settle_publishes().await {
            tracing::debug!(error = %e, "cannot settle unrecorded publishes yet; retrying");
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }
}

delegate_store!(SharedStore, {
    fn owns_bucket(&self, bucket: &str) -> bool {
        // Only `s3://` URIs are chained by bucket name (blob chaining's scheme policy).
        self.location.provider == Provider::S3 && self.location.bucket == bucket
    }
    async fn direct_url(&self, access: &Access, id: &ArtifactId, expires_in: Duration) -> Result<Option<String>> {
        self.presigned_url(access, id, expires_in).await.map(Some)
    }
});
