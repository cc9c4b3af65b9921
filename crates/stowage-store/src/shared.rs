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
//! The index and the bucket location must be one store's: opening records a store id in the
//! index and in a marker object under the prefix on first use, and refuses to start when they
//! disagree (`crate::identity`). Opening also takes this instance's liveness lock and cleans up
//! after instances that are gone (their unrecorded publishes and staged uploads).
//!
//! Credentials for the bucket come from each provider's standard environment, never from the
//! configuration file: the AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, …) or the instance's role for S3; `GOOGLE_SERVICE_ACCOUNT` /
//! `GOOGLE_APPLICATION_CREDENTIALS` or the metadata server for GCS;
//! `AZURE_STORAGE_ACCOUNT_NAME` with `AZURE_STORAGE_ACCOUNT_KEY`, a client secret, a workload
//! or managed identity for Azure.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::{ClientOptions, RetryConfig};
use stowage_core::{ArtifactId, Isolation, StoreError};
use tokio_util::sync::CancellationToken;

use crate::blobs::{Blobs, Bucket, Journal, ObjectBlobs};
use crate::clock::{Clock, SystemClock};
use crate::delegate::delegate_store;
use crate::engine::{Engine, Settings};
use crate::failpoint::Failpoints;
use crate::identity::{Decision, Seen, decide, describe_location, new_store_id};
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
    /// Stops this instance's background tasks (its liveness lock, the settler) when dropped.
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
            clock: Arc::new(SystemClock),
            gc_grace: DEFAULT_SHARED_GC_GRACE,
            isolation: Isolation::default(),
            credentials: None,
            index_ca_file: None,
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

/// Options for opening a [`SharedStore`].
pub struct SharedStoreBuilder {
    location: BucketLocation,
    index_url: String,
    index_schema: String,
    max_connections: usize,
    connect_timeout: Duration,
    retention: RetentionConfig,
    clock: Arc<dyn Clock>,
    gc_grace: Duration,
    isolation: Isolation,
    credentials: Option<(String, String)>,
    index_ca_file: Option<std::path::PathBuf>,
    failpoints: Failpoints,
}

impl SharedStoreBuilder {
    /// Installs a failpoint hook (crash tests only: the `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn failpoints(mut self, hook: crate::FailpointHook) -> Self {
        self.failpoints = Failpoints::new(hook);
        self
    }

    /// The retention limits and expiry.
    pub fn retention(mut self, retention: RetentionConfig) -> Self {
        self.retention = retention;
        self
    }

    /// Where the store reads the time (tests pass a [`crate::ManualClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
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

    /// Static bucket credentials instead of the environment's, for embedding programs and
    /// tests: an access key id and secret on S3, an account name and key on Azure (GCS takes
    /// its service account from the environment only). The binary never calls this; its
    /// credentials come from the environment only.
    pub fn static_credentials(mut self, access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        self.credentials = Some((access_key_id.into(), secret_access_key.into()));
        self
    }

    /// Connects to the database (applying migrations), configures the bucket client, checks
    /// that the index and the bucket location are one store's (recording it on first use;
    /// see [`StoreCheck`]), takes this instance's liveness lock and cleans up after instances
    /// that are gone. Refuses, in one line naming both locations, an index and a location that
    /// belong to different stores.
    pub async fn open(self) -> Result<SharedStore> {
        let (loc, prefix, here) = self.location_parts()?;
        let client = self.bucket_client()?;
        let index = PgIndex::open(&self.pg_options(), self.isolation).await?;
        let stop = CancellationToken::new();
        // Cancelled if anything below fails, so the liveness lock goes with this open.
        let guard = stop.clone().drop_guard();
        let journal = Journal::start(index.clone(), stop.clone()).await?;
        let blobs = ObjectBlobs::new(client, loc.provider.scheme(), &loc.bucket, &prefix, self.gc_grace, journal.clone());
        let store_id = establish_identity(&index, &blobs, &here).await?;
        blobs.set_store_id(store_id.clone());
        // What instances that are gone left: their unrecorded publishes and staged uploads.
        if let Err(e) = blobs.settle_publishes().await {
            tracing::warn!(error = %e, "could not clean up after instances that are gone; gc will");
        }
        if let Err(e) = blobs.clean_temp().await {
            tracing::warn!(error = %e, "could not remove staged uploads of instances that are gone; gc will");
        }
        tokio::spawn(settle_loop(blobs.clone(), journal, stop.clone()));
        let last_tick = index.max_last_access().await?;
        let target = format!("{} + {}", blobs.target(), index.target());
        let settings = Settings {
            config: self.retention,
            clock: self.clock,
            failpoints: self.failpoints,
            isolation: self.isolation,
            last_tick,
            grace: self.gc_grace,
        };
        let _ = guard.disarm();
        Ok(SharedStore { engine: Engine::new(index, blobs, settings), target, location: self.location, store_id, stop })
    }

    /// What opening would find about the store's identity, changing nothing: connects to the
    /// database (without migrating) and reads the bucket's marker. An index and a location
    /// that belong to different stores are the same one-line error `open` gives.
    pub async fn check(self) -> Result<StoreCheck> {
        let (loc, prefix, here) = self.location_parts()?;
        let client = self.bucket_client()?;
        let index = PgIndex::connect(&self.pg_options()).await?;
        if !index.has_schema().await? {
            return Ok(StoreCheck::Fresh);
        }
        let stop = CancellationToken::new();
        let _stop = stop.clone().drop_guard();
        let journal = Journal::start(index.clone(), stop).await?;
        let blobs = ObjectBlobs::new(client, loc.provider.scheme(), &loc.bucket, &prefix, self.gc_grace, journal);
        let (decision, recorded_id) = look(&index, &blobs, &here).await?;
        match decision {
            Decision::Matches => Ok(StoreCheck::Matches { store_id: recorded_id.unwrap_or_default() }),
            Decision::Claim => Ok(StoreCheck::Unclaimed),
            Decision::RestoreMarker => Ok(StoreCheck::MarkerMissing { store_id: recorded_id.unwrap_or_default() }),
            Decision::Refuse(why) => Err(StoreError::InvalidInput(why)),
        }
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

/// Reads what the identity rule needs: the recorded identity, the marker, and (when they do
/// not already agree) whether the newest records' blobs are at this location.
async fn look(index: &PgIndex, blobs: &ObjectBlobs, here: &str) -> Result<(Decision, Option<String>)> {
    let recorded_id = index.setting("store_id").await?;
    let recorded_location = index.setting("blob_location").await?.unwrap_or_default();
    let marker = blobs.read_marker().await?;
    let agree = recorded_id.is_some() && recorded_id == marker;
    let sample = if agree { Vec::new() } else { index.sample_blobs(IDENTITY_SAMPLE).await? };
    let mut present = 0;
    for (sha256, size) in &sample {
        present += usize::from(blobs.has_blob(sha256, *size).await?);
    }
    let target = format!("{} schema {}", index.target(), index.schema());
    let seen = Seen {
        recorded: recorded_id.as_deref().map(|id| (id, recorded_location.as_str())),
        marker: marker.as_deref(),
        here,
        index: &target,
        sampled: sample.len(),
        present,
    };
    Ok((decide(&seen), recorded_id))
}

/// Checks the store's identity and records it on first use (under a lock, so instances
/// starting together claim it once): the index first, then the marker, so a start that stops
/// between the two leaves a state the next start completes.
async fn establish_identity(index: &PgIndex, blobs: &ObjectBlobs, here: &str) -> Result<String> {
    let _lock = index.lock_identity().await?;
    let (decision, recorded_id) = look(index, blobs, here).await?;
    match decision {
        Decision::Matches => Ok(recorded_id.unwrap_or_default()),
        Decision::RestoreMarker => {
            let id = recorded_id.unwrap_or_default();
            tracing::warn!(store = %id, location = %here, "the store's marker was missing from its bucket location; writing it again");
            blobs.write_marker(&id).await?;
            Ok(id)
        }
        Decision::Claim => {
            let id = new_store_id();
            index.set_setting("store_id", &id).await?;
            index.set_setting("blob_location", here).await?;
            blobs.write_marker(&id).await?;
            tracing::info!(store = %id, location = %here, "recorded this shared store's identity");
            Ok(id)
        }
        Decision::Refuse(why) => Err(StoreError::InvalidInput(why)),
    }
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
