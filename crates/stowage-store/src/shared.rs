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

use crate::blobs::{Bucket, ObjectBlobs};
use crate::clock::{Clock, SystemClock};
use crate::delegate::delegate_store;
use crate::engine::{Engine, Settings};
use crate::failpoint::Failpoints;
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
        }
    }

    pub fn retention(&self) -> &RetentionConfig {
        self.engine.config()
    }

    pub fn isolation(&self) -> Isolation {
        self.engine.isolation()
    }

    /// Checks that both the database and the bucket answer; the error names whichever does not.
    pub async fn check_ready(&self) -> Result<()> {
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
}

impl SharedStoreBuilder {
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

    /// Connects to the database (applying migrations) and configures the bucket client. The
    /// bucket is not contacted here: [`SharedStore::check_ready`] does that.
    pub async fn open(self) -> Result<SharedStore> {
        let loc = &self.location;
        if loc.bucket.trim().is_empty() {
            return Err(StoreError::InvalidInput("[store] bucket is empty: name the bucket the artifacts go to".into()));
        }
        let prefix = loc.prefix.trim_matches('/');
        if prefix.split('/').any(|p| p == "." || p == "..") {
            return Err(StoreError::InvalidInput(format!("[store] prefix {:?} has a '.' or '..' segment: use plain names", loc.prefix)));
        }
        let client = self.bucket_client()?;
        let blobs = ObjectBlobs::new(client, loc.provider.scheme(), &loc.bucket, prefix, self.gc_grace);
        let target = blobs.target().to_owned();
        let pg = PgOptions {
            url: self.index_url,
            schema: self.index_schema,
            max_connections: self.max_connections,
            connect_timeout: self.connect_timeout,
            ca_file: self.index_ca_file,
        };
        let index = PgIndex::open(&pg, self.isolation).await?;
        let last_tick = index.max_last_access().await?;
        let target = format!("{target} + {}", index.target());
        let settings =
            Settings { config: self.retention, clock: self.clock, failpoints: Failpoints::default(), isolation: self.isolation, last_tick };
        Ok(SharedStore { engine: Engine::new(index, blobs, settings), target, location: self.location })
    }

    /// The provider's client for the bucket, configured from the environment (and the static
    /// credentials, if given); no request is sent.
    fn bucket_client(&self) -> Result<Arc<dyn Bucket>> {
        let loc = &self.location;
        // Fail in seconds rather than object_store's default of retrying for three minutes: a
        // tool call is waiting, and an unreachable bucket should say so while it still can.
        // (Client options first: with_allow_http below sets one of them.)
        let retry = RetryConfig { max_retries: 3, retry_timeout: Duration::from_secs(20), ..RetryConfig::default() };
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

delegate_store!(SharedStore, {
    fn owns_bucket(&self, bucket: &str) -> bool {
        // Only `s3://` URIs are chained by bucket name (blob chaining's scheme policy).
        self.location.provider == Provider::S3 && self.location.bucket == bucket
    }
    async fn direct_url(&self, access: &Access, id: &ArtifactId, expires_in: Duration) -> Result<Option<String>> {
        self.presigned_url(access, id, expires_in).await.map(Some)
    }
});
