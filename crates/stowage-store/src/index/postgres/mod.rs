//! An index in PostgreSQL, shared by every gateway instance that points at the same database:
//! the same records and queries as the SQLite index, plus the cross-process locks the engine
//! needs when several instances decide at once (advisory locks, see [`Index::lock_decisions`]).
//!
//! tokio-postgres with a deadpool pool rather than sqlx: sqlx 0.9 needs a newer Rust than this
//! workspace's MSRV, and the index needs no query macros or ORM, only a handful of
//! hand-written statements. The schema lives in its own PostgreSQL schema (default
//! `stowage`) and ships as numbered migrations ([`migrations`]) applied on open under an
//! advisory lock, so instances starting together migrate once.
//!
//! Connections use TLS as the URL's `sslmode` says ([`tls`]), always verifying the server.
//!
//! LRU accesses are written at once rather than batched as in SQLite: another instance's
//! eviction must see every read, and only what is in the database is visible to it.

mod migrations;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use serde_json::{Map, Value};
use stowage_core::{ArtifactId, ArtifactScope, Isolation, StoreError};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{BlobUse, DecisionLock, EvictOrder, Group, Index, ListFilter, Usage};
use crate::Result;
use crate::record::Record;

const COLUMNS: &str = "seq, owner_key, id, sha256, size, tenant_id, user_id, session_id, trace_id, \
                       mime_type, filename, source, created_at, expires_at, last_access";

/// The scope columns budgets compare, outermost first (see [`Group`]).
const SCOPE_COLUMNS: [&str; 4] = ["tenant_id", "user_id", "session_id", "trace_id"];

/// First key of the two-key advisory locks (the second is the schema name's hash, so stores in
/// different schemas of one database do not wait for each other).
const LOCK_DECISIONS: i32 = 0x5354_0001;
const LOCK_SWEEPER: i32 = 0x5354_0002;
/// Migrations run under this one.
const LOCK_MIGRATE: i32 = 0x5354_0003;
/// Recording the store's identity runs under this one (instances starting together claim it
/// once).
const LOCK_IDENTITY: i32 = 0x5354_0004;
/// Each instance holds the session lock `(LOCK_INSTANCE, its key)` for as long as it runs: the
/// others tell a live instance from a dead one by it (a killed process's connection closes and
/// PostgreSQL releases its locks).
const LOCK_INSTANCE: i32 = 0x5354_0005;

/// The default PostgreSQL schema the index's tables live in.
pub(crate) const DEFAULT_SCHEMA: &str = "stowage";

/// How a [`PgIndex`] connects.
#[derive(Debug, Clone)]
pub(crate) struct PgOptions {
    /// `postgres://user[:password]@host[:port]/db[?options]` (or the key=value form).
    pub url: String,
    /// PostgreSQL schema holding the tables; created if missing.
    pub schema: String,
    /// Largest number of connections this instance opens.
    pub max_connections: usize,
    /// How long to wait for a connection (to connect, or for a free one in the pool).
    pub connect_timeout: Duration,
    /// PEM certificates to trust besides Mozilla's roots (a provider's CA, a private CA).
    pub ca_file: Option<PathBuf>,
}

#[derive(Clone)]
pub(crate) struct PgIndex {
    pool: Pool,
    schema: String,
    /// `host:port/db` for error messages: never the password.
    target: String,
}

impl std::fmt::Debug for PgIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgIndex").field("target", &self.target).field("schema", &self.schema).finish()
    }
}

/// A PostgreSQL error as one line: the server's message when it sent one (tokio-postgres'
/// own `Display` says only "db error"), else the error and its causes.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        // tokio-postgres' own message often ends with its cause's: say each cause once.
        let text = s.to_string();
        if !out.contains(&text) {
            let _ = write!(out, ": {text}");
        }
        source = s.source();
    }
    out
}

/// `host:port/db` of a connection config, for messages.
fn describe_target(cfg: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match cfg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    format!("postgres://{host}:{port}/{}", cfg.get_dbname().unwrap_or(""))
}

/// The TLS connector: rustls with the ring provider (as everywhere else in Stowage), Mozilla's
/// roots compiled in, plus `ca_file`'s. The URL's `sslmode` decides whether TLS is used:
/// `disable`, `prefer` (the default: TLS when the server offers it) or `require`. Unlike libpq,
/// a TLS connection always verifies the server's certificate and name; a server with a private
/// CA needs that CA in `ca_file`.
fn tls(ca_file: Option<&Path>) -> Result<MakeRustlsConnect> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let bad = |why: String| StoreError::InvalidInput(format!("[index] ca_file {}: {why}", path.display()));
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(e.to_string()))?
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad(format!("not PEM certificates ({e})")))?;
        if certs.is_empty() {
            return Err(bad("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(format!("unusable certificate ({e})")))?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::backend("configure index TLS", "rustls", e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// Checks a schema name: lowercase letters, digits and `_`, not starting with a digit, at most
/// 63 bytes, so it can be spliced into SQL unquoted.
pub(crate) fn check_schema_name(schema: &str) -> Result<()> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidInput(format!(
            "index schema {schema:?} is not a plain PostgreSQL name: use lowercase letters, digits and '_' (at most 63, not starting with a digit)"
        )))
    }
}

impl PgIndex {
    /// Connects, creates the schema if needed and applies the migrations this version ships.
    /// Refuses a database whose schema is newer than this version knows, or whose records
    /// were keyed under another isolation.
    #[cfg(test)]
    pub(crate) async fn open(opts: &PgOptions, isolation: Isolation) -> Result<Self> {
        let index = Self::connect(opts).await?;
        index.migrate(isolation).await?;
        Ok(index)
    }

    /// Creates the schema if needed and applies the migrations this version ships, in one
    /// transaction (a refusal leaves nothing behind). Refuses a schema newer than this version
    /// knows, or whose records were keyed under another isolation.
    pub(crate) async fn migrate(&self, isolation: Isolation) -> Result<()> {
        let client = self.client("open index").await?;
        migrations::apply(&client, &self.schema, isolation).await.map_err(|e| StoreError::backend("migrate index", self.target.clone(), e))
    }

    /// What [`PgIndex::migrate`] would refuse about the existing schema, changing nothing: the
    /// same one-line errors.
    pub(crate) async fn check_schema(&self, isolation: Isolation) -> Result<()> {
        let client = self.client("open index").await?;
        migrations::check(&client, &self.schema, isolation).await.map_err(|e| StoreError::backend("migrate index", self.target.clone(), e))
    }

    /// The database's clock (`clock_timestamp()`, microseconds), and the monotonic instant the
    /// reading stands for: the middle of the round trip.
    pub(crate) async fn db_time(&self) -> Result<(stowage_core::Timestamp, std::time::Instant)> {
        let client = self.client("read database clock").await?;
        let sent = std::time::Instant::now();
        let row = client
            .query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::BIGINT", &[])
            .await
            .map_err(self.fail("read database clock"))?;
        let back = std::time::Instant::now();
        let micros: i64 = row.get(0);
        let at = stowage_core::Timestamp::from_unix_timestamp_nanos(i128::from(micros) * 1000)
            .map_err(|e| StoreError::backend("read database clock", self.target.clone(), e.to_string()))?;
        Ok((at, sent + (back - sent) / 2))
    }

    /// The instances holding their liveness lock now (each instance's key).
    pub(crate) async fn live_instance_count(&self) -> Result<i64> {
        let sql = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 \
                   AND classid::bigint = $1 \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
        Ok(self.query_one("read index", sql, &[&i64::from(LOCK_INSTANCE)]).await?.get(0))
    }

    /// A pool for the index, without touching its schema (`check-config` reads through it and
    /// changes nothing). Connects once, so an unreachable database fails here.
    pub(crate) async fn connect(opts: &PgOptions) -> Result<Self> {
        check_schema_name(&opts.schema)?;
        let mut cfg: tokio_postgres::Config = opts.url.parse().map_err(|e: tokio_postgres::Error| {
            StoreError::InvalidInput(format!(
                "index url is not a PostgreSQL connection string ({}); write it as postgres://user@host:port/database",
                describe(&e)
            ))
        })?;
        if cfg.get_connect_timeout().is_none() {
            cfg.connect_timeout(opts.connect_timeout);
        }
        if cfg.get_application_name().is_none() {
            cfg.application_name("stowage");
        }
        let target = describe_target(&cfg);
        let manager = Manager::from_config(cfg, tls(opts.ca_file.as_deref())?, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        // Two connections at least: the engine holds one for its lock while it queries on others.
        let pool = Pool::builder(manager)
            .max_size(opts.max_connections.max(2))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(opts.connect_timeout))
            .create_timeout(Some(opts.connect_timeout))
            .build()
            .map_err(|e| StoreError::backend("open index", target.clone(), e))?;
        let index = PgIndex { pool, schema: opts.schema.clone(), target };
        drop(index.client("open index").await?);
        Ok(index)
    }

    /// Whether the index's tables exist yet (a database no instance has started on has none).
    pub(crate) async fn has_schema(&self) -> Result<bool> {
        let row = self.query_one("read index", "SELECT to_regclass($1) IS NOT NULL", &[&format!("{}.settings", self.schema)]).await?;
        Ok(row.get(0))
    }

    /// A store-wide setting (`store_id`, `blob_location`), if recorded.
    pub(crate) async fn setting(&self, key: &str) -> Result<Option<String>> {
        let sql = format!("SELECT value FROM {}.settings WHERE key = $1", self.schema);
        Ok(self.query("read index", &sql, &[&key]).await?.first().map(|r| r.get(0)))
    }

    pub(crate) async fn set_setting(&self, key: &str, value: &str) -> Result<()> {
        let sql = format!(
            "INSERT INTO {}.settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            self.schema
        );
        self.query("update index", &sql, &[&key, &value]).await.map(drop)
    }

    /// Serialises recording the store's identity across instances starting together; held
    /// until dropped.
    pub(crate) async fn lock_identity(&self) -> Result<DecisionLock> {
        let guard = self.advisory(LOCK_IDENTITY, true).await?.expect("a waiting lock is always taken");
        Ok(Box::new(guard))
    }

    /// The blobs of the newest records (sha256, size), at most `limit`: what the identity
    /// check looks for at a location. Empty when the index holds no record.
    pub(crate) async fn sample_blobs(&self, limit: i64) -> Result<Vec<(String, u64)>> {
        let sql = format!("SELECT sha256, size FROM {} ORDER BY seq DESC LIMIT $1", self.t());
        let rows = self.query("read index", &sql, &[&limit]).await?;
        Ok(rows.iter().map(|r| (r.get(0), u64::try_from(r.get::<_, i64>(1)).unwrap_or(0))).collect())
    }

    /// Takes this instance's liveness lock on a connection of its own (taken out of the pool)
    /// and returns that connection: the lock lasts as long as it is open. `None` when another
    /// live instance holds `key`.
    pub(crate) async fn hold_instance_lock(&self, key: i32) -> Result<Option<deadpool_postgres::ClientWrapper>> {
        const OP: &str = "lock instance";
        let client = Object::take(self.client(OP).await?);
        let row = client.query_one("SELECT pg_try_advisory_lock($1, $2)", &[&LOCK_INSTANCE, &key]).await.map_err(self.fail(OP))?;
        Ok(row.get::<_, bool>(0).then_some(client))
    }

    /// Which of `keys` belong to a live instance (one holding its liveness lock now).
    pub(crate) async fn live_instances(&self, keys: &[i32]) -> Result<std::collections::HashSet<i32>> {
        if keys.is_empty() {
            return Ok(Default::default());
        }
        // Two-key advisory locks show in pg_locks as classid = key 1, objid = key 2, objsubid 2.
        let sql = "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 \
                   AND classid::bigint = $1 AND objid::bigint = ANY($2) \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
        let wanted: Vec<i64> = keys.iter().map(|&k| i64::from(k)).collect();
        let rows = self.query("read index", sql, &[&i64::from(LOCK_INSTANCE), &wanted]).await?;
        Ok(rows.iter().filter_map(|r| i32::try_from(r.get::<_, i64>(0)).ok()).collect())
    }

    /// Names a blob about to be published for a put whose record is not written yet.
    pub(crate) async fn begin_publish(&self, instance: i32, put_id: i64, sha256: &str, at: i64) -> Result<()> {
        let sql = format!("INSERT INTO {}.publishing (instance, put_id, sha256, started_at) VALUES ($1, $2, $3, $4)", self.schema);
        self.query("insert into index", &sql, &[&instance, &put_id, &sha256, &at]).await.map(drop)
    }

    /// Forgets a publish: its record was written, or its blob released.
    pub(crate) async fn end_publish(&self, instance: i32, put_id: i64) -> Result<()> {
        let sql = format!("DELETE FROM {}.publishing WHERE instance = $1 AND put_id = $2", self.schema);
        self.query("delete from index", &sql, &[&instance, &put_id]).await.map(drop)
    }

    /// Publishes that did not end: `(instance, put_id, sha256)` of instance `me` and of every
    /// instance that is not running any more.
    pub(crate) async fn unfinished_publishes(&self, me: i32) -> Result<Vec<(i32, i64, String)>> {
        let sql = format!(
            "SELECT p.instance, p.put_id, p.sha256 FROM {}.publishing p WHERE p.instance = $1 OR NOT EXISTS ( \
               SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 \
               AND l.classid::bigint = $2 AND l.objid::bigint = p.instance \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())) \
             ORDER BY p.instance, p.put_id",
            self.schema
        );
        let rows = self.query("read index", &sql, &[&me, &i64::from(LOCK_INSTANCE)]).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
    }

    /// The largest LRU tick recorded, so this instance's ticks continue from it.
    pub(crate) async fn max_last_access(&self) -> Result<i64> {
        let sql = format!("SELECT COALESCE(MAX(last_access), 0)::BIGINT FROM {}.artifacts", self.schema);
        let row = self.query_one("read index", &sql, &[]).await?;
        Ok(row.get(0))
    }

    pub(crate) fn target(&self) -> &str {
        &self.target
    }

    pub(crate) fn schema(&self) -> &str {
        &self.schema
    }

    async fn client(&self, op: &'static str) -> Result<Object> {
        self.pool.get().await.map_err(|e| {
            let why = match &e {
                deadpool_postgres::PoolError::Backend(pg) => describe(pg),
                other => other.to_string(),
            };
            StoreError::backend(op, self.target.clone(), why)
        })
    }

    fn fail(&self, op: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError + '_ {
        move |e| StoreError::backend(op, self.target.clone(), describe(&e))
    }

    fn t(&self) -> String {
        format!("{}.artifacts", self.schema)
    }

    async fn query(&self, op: &'static str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let client = self.client(op).await?;
        let stmt = client.prepare_cached(sql).await.map_err(self.fail(op))?;
        client.query(&stmt, params).await.map_err(self.fail(op))
    }

    async fn query_one(&self, op: &'static str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        let client = self.client(op).await?;
        let stmt = client.prepare_cached(sql).await.map_err(self.fail(op))?;
        client.query_one(&stmt, params).await.map_err(self.fail(op))
    }

    async fn records(&self, op: &'static str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Record>> {
        self.query(op, sql, params)
            .await?
            .iter()
            .map(|r| record_from_row(r).map_err(|e| StoreError::backend(op, self.target.clone(), e)))
            .collect()
    }

    /// Opens a transaction on a pooled connection and takes the transaction-scoped advisory
    /// lock `(class, hash of the schema)`, waiting for it or (with `wait: false`) not. The lock
    /// lives exactly as long as the transaction: the returned guard rolls it back when dropped,
    /// and a connection that dies takes its locks with it.
    async fn advisory(&self, class: i32, wait: bool) -> Result<Option<AdvisoryGuard>> {
        const OP: &str = "lock index";
        let client = self.client(OP).await?;
        client.batch_execute("BEGIN").await.map_err(self.fail(OP))?;
        let guard = AdvisoryGuard { client: Some(client) };
        let sql = if wait {
            "SELECT pg_advisory_xact_lock($1, hashtext($2)), true"
        } else {
            "SELECT NULL::text, pg_try_advisory_xact_lock($1, hashtext($2))"
        };
        let c = guard.client.as_ref().expect("just set");
        let row = c.query_one(sql, &[&class, &self.schema]).await.map_err(self.fail(OP))?;
        let got: bool = row.get(1);
        Ok(got.then_some(guard))
    }
}

/// An advisory lock held by an open transaction; dropping it rolls the transaction back, which
/// releases the lock. The rollback runs on a task (drop cannot wait); if it fails, the
/// connection is closed instead of returned to the pool, which releases the lock too.
struct AdvisoryGuard {
    client: Option<Object>,
}

impl Drop for AdvisoryGuard {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = client.batch_execute("ROLLBACK").await {
                        tracing::warn!(error = %describe(&e), "index: could not release a lock cleanly; closing its connection");
                        drop(Object::take(client));
                    }
                });
            }
            Err(_) => drop(Object::take(client)),
        }
    }
}

/// `tenant_id = $n AND user_id IS NULL …` up to the group's level, numbering parameters from
/// `first`, and the values to bind. `=`/`IS NULL` rather than `IS NOT DISTINCT FROM`, which no
/// index can serve.
fn group_where(group: &Group, first: usize) -> (String, Vec<String>) {
    let mut clauses = Vec::new();
    let mut values = Vec::new();
    for (column, id) in SCOPE_COLUMNS.iter().zip(group.ids()) {
        match id {
            Some(v) => {
                values.push(v.clone());
                clauses.push(format!("{column} = ${}", first + values.len() - 1));
            }
            None => clauses.push(format!("{column} IS NULL")),
        }
    }
    (clauses.join(" AND "), values)
}

fn as_params(values: &[String]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

fn to_sql_u64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn record_from_row(row: &Row) -> std::result::Result<Record, String> {
    let id: String = row.try_get(2).map_err(|e| e.to_string())?;
    let id: ArtifactId = id.parse().map_err(|e| format!("bad artifact id {id:?} in the index: {e}"))?;
    let source: String = row.try_get(11).map_err(|e| e.to_string())?;
    let source: Map<String, Value> = serde_json::from_str(&source).map_err(|e| format!("bad source JSON in the index: {e}"))?;
    let size: i64 = row.try_get(4).map_err(|e| e.to_string())?;
    let get = |i: usize| -> std::result::Result<Option<String>, String> { row.try_get(i).map_err(|e| e.to_string()) };
    Ok(Record {
        seq: row.try_get(0).map_err(|e| e.to_string())?,
        owner_key: row.try_get(1).map_err(|e| e.to_string())?,
        id,
        sha256: row.try_get(3).map_err(|e| e.to_string())?,
        size: u64::try_from(size).unwrap_or(0),
        scope: ArtifactScope { tenant_id: get(5)?, user_id: get(6)?, session_id: get(7)?, trace_id: get(8)? },
        mime_type: get(9)?,
        filename: get(10)?,
        source,
        created_at: row.try_get(12).map_err(|e| e.to_string())?,
        expires_at: row.try_get(13).map_err(|e| e.to_string())?,
        last_access: row.try_get(14).map_err(|e| e.to_string())?,
    })
}

#[async_trait]
impl Index for PgIndex {
    const DEPENDENCY: &'static str = "database";

    async fn lock_decisions(&self) -> Result<DecisionLock> {
        let guard = self.advisory(LOCK_DECISIONS, true).await?.expect("a waiting lock is always taken");
        Ok(Box::new(guard))
    }

    async fn try_lock_sweeper(&self) -> Result<Option<DecisionLock>> {
        Ok(self.advisory(LOCK_SWEEPER, false).await?.map(|g| Box::new(g) as DecisionLock))
    }

    /// Whether the database answers (for readiness checks).
    async fn ping(&self) -> Result<()> {
        self.query_one("ping index", "SELECT 1", &[]).await.map(|_| ())
    }

    async fn get(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>> {
        let sql = format!("SELECT {COLUMNS} FROM {} WHERE owner_key = $1 AND id = $2", self.t());
        Ok(self.records("read index", &sql, &[&owner_key, &id.as_str()]).await?.pop())
    }

    async fn get_all(&self, id: &ArtifactId) -> Result<Vec<Record>> {
        let sql = format!("SELECT {COLUMNS} FROM {} WHERE id = $1 ORDER BY seq", self.t());
        self.records("read index", &sql, &[&id.as_str()]).await
    }

    async fn insert(&self, mut record: Record) -> Result<Record> {
        let source = serde_json::to_string(&record.source).map_err(|e| StoreError::backend("encode source", record.id.to_string(), e))?;
        let sql = format!(
            "INSERT INTO {} (owner_key, id, sha256, size, tenant_id, user_id, session_id, trace_id, \
             mime_type, filename, source, created_at, expires_at, last_access) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING seq",
            self.t()
        );
        let s = &record.scope;
        let row = self
            .query_one(
                "insert into index",
                &sql,
                &[
                    &record.owner_key,
                    &record.id.as_str(),
                    &record.sha256,
                    &to_sql_u64(record.size),
                    &s.tenant_id,
                    &s.user_id,
                    &s.session_id,
                    &s.trace_id,
                    &record.mime_type,
                    &record.filename,
                    &source,
                    &record.created_at,
                    &record.expires_at,
                    &record.last_access,
                ],
            )
            .await?;
        record.seq = row.get(0);
        Ok(record)
    }

    async fn record_access(&self, owner_key: &str, id: &ArtifactId, last_access: i64) -> Result<()> {
        let sql = format!("UPDATE {} SET last_access = GREATEST(last_access, $3) WHERE owner_key = $1 AND id = $2", self.t());
        self.query("record access", &sql, &[&owner_key, &id.as_str(), &last_access]).await.map(|_| ())
    }

    async fn refresh(&self, owner_key: &str, id: &ArtifactId, last_access: i64, expires_at: i64) -> Result<()> {
        let sql =
            format!("UPDATE {} SET last_access = GREATEST(last_access, $3), expires_at = $4 WHERE owner_key = $1 AND id = $2", self.t());
        self.query("update index", &sql, &[&owner_key, &id.as_str(), &last_access, &expires_at]).await.map(|_| ())
    }

    async fn delete(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>> {
        let sql = format!("DELETE FROM {} WHERE owner_key = $1 AND id = $2 RETURNING {COLUMNS}", self.t());
        Ok(self.records("delete from index", &sql, &[&owner_key, &id.as_str()]).await?.pop())
    }

    async fn usage(&self, group: &Group) -> Result<Usage> {
        let (clause, ids) = group_where(group, 1);
        let sql = format!("SELECT COALESCE(SUM(size), 0)::BIGINT, COUNT(*) FROM {} WHERE {clause}", self.t());
        let row = self.query_one("read index", &sql, &as_params(&ids)).await?;
        let (bytes, count): (i64, i64) = (row.get(0), row.get(1));
        Ok(Usage { bytes: u64::try_from(bytes).unwrap_or(0), count: u64::try_from(count).unwrap_or(0) })
    }

    async fn eviction_order(&self, group: &Group, order: EvictOrder) -> Result<Vec<Record>> {
        let (clause, ids) = group_where(group, 1);
        let order_by = match order {
            EvictOrder::LeastRecentlyUsed => "last_access, seq",
            EvictOrder::OldestFirst => "seq",
        };
        let sql = format!("SELECT {COLUMNS} FROM {} WHERE {clause} ORDER BY {order_by}", self.t());
        self.records("read index", &sql, &as_params(&ids)).await
    }

    async fn list(&self, filter: &ListFilter, after: i64, now: i64, limit: usize) -> Result<Vec<Record>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE seq > $1 AND (expires_at IS NULL OR expires_at > $2) \
             AND ($3::TEXT IS NULL OR owner_key = $3) AND ($4::TEXT IS NULL OR session_id = $4) \
             AND ($5::TEXT IS NULL OR trace_id = $5) ORDER BY seq LIMIT $6",
            self.t()
        );
        self.records("list index", &sql, &[&after, &now, &filter.owner_key, &filter.session_id, &filter.trace_id, &limit]).await
    }

    async fn expired(&self, now: i64, group: Option<&Group>) -> Result<Vec<Record>> {
        let (clause, ids) = group.map(|g| group_where(g, 2)).unwrap_or_else(|| ("TRUE".to_owned(), Vec::new()));
        let sql = format!("SELECT {COLUMNS} FROM {} WHERE expires_at <= $1 AND {clause} ORDER BY seq", self.t());
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&now];
        params.extend(as_params(&ids));
        self.records("read index", &sql, &params).await
    }

    async fn sha_in_use(&self, sha256: &str) -> Result<bool> {
        let sql = format!("SELECT EXISTS (SELECT 1 FROM {} WHERE sha256 = $1)", self.t());
        Ok(self.query_one("read index", &sql, &[&sha256]).await?.get(0))
    }

    async fn blob_uses(&self) -> Result<Vec<BlobUse>> {
        let sql = format!("SELECT owner_key, id, sha256, size FROM {} ORDER BY seq", self.t());
        let rows = self.query("read index", &sql, &[]).await?;
        rows.iter()
            .map(|row| {
                let id: String = row.get(1);
                let size: i64 = row.get(3);
                Ok(BlobUse {
                    owner_key: row.get(0),
                    id: id
                        .parse()
                        .map_err(|e| StoreError::backend("read index", self.target.clone(), format!("bad artifact id {id:?}: {e}")))?,
                    sha256: row.get(2),
                    size: u64::try_from(size).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn missing_blobs(&self) -> Result<std::collections::HashMap<String, i64>> {
        let sql = format!("SELECT sha256, first_missing_at FROM {}.missing_blobs", self.schema);
        Ok(self.query("read index", &sql, &[]).await?.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn note_missing_blobs(&self, found: &[String], at: i64, cleared: &[String]) -> Result<()> {
        if !found.is_empty() {
            let sql = format!(
                "INSERT INTO {}.missing_blobs (sha256, first_missing_at) SELECT unnest($1::text[]), $2 ON CONFLICT (sha256) DO NOTHING",
                self.schema
            );
            self.query("update index", &sql, &[&found, &at]).await?;
        }
        if !cleared.is_empty() {
            let sql = format!("DELETE FROM {}.missing_blobs WHERE sha256 = ANY($1)", self.schema);
            self.query("update index", &sql, &[&cleared]).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Level;

    #[test]
    fn group_clauses_match_nulls_with_is_null_and_number_parameters() {
        let scope = ArtifactScope { tenant_id: Some("t".into()), user_id: None, session_id: Some("s".into()), trace_id: None };
        let (clause, values) = group_where(&Group { level: Level::Session, scope: scope.clone() }, 2);
        assert_eq!(clause, "tenant_id = $2 AND user_id IS NULL AND session_id = $3");
        assert_eq!(values, ["t", "s"]);
        let (clause, _) = group_where(&Group { level: Level::Trace, scope }, 1);
        assert!(clause.ends_with("trace_id IS NULL"), "{clause}");
    }

    #[test]
    fn schema_names_are_checked_before_they_reach_sql() {
        for good in ["stowage", "s_1", "_x"] {
            check_schema_name(good).unwrap();
        }
        for bad in ["", "1abc", "Stowage", "a-b", "x; DROP TABLE y", &"a".repeat(64)] {
            let err = check_schema_name(bad).unwrap_err().to_string();
            assert!(err.contains("lowercase letters"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_ca_file_that_is_not_pem_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = tls(Some(&path)).err().unwrap().to_string();
        assert!(err.contains("ca.pem") && err.contains("no PEM certificate"), "{err}");
        let err = tls(Some(&dir.path().join("missing.pem"))).err().unwrap().to_string();
        assert!(err.contains("missing.pem"), "{err}");
    }

    #[tokio::test]
    async fn a_bad_url_is_a_one_line_error_saying_how_to_write_it() {
        let opts = PgOptions {
            url: "postgres://host:notaport/db".into(),
            schema: "s".into(),
            max_connections: 2,
            connect_timeout: Duration::from_secs(1),
            ca_file: None,
        };
        let err = PgIndex::open(&opts, Isolation::User).await.unwrap_err().to_string();
        assert!(err.contains("postgres://user@host:port/database") && !err.contains('\n'), "{err}");
    }

    #[tokio::test]
    async fn an_unreachable_database_fails_fast_naming_it_without_the_password() {
        // A port nothing listens on: the connect is refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("postgres://u:secret-pw@127.0.0.1:{port}/db");
        let opts = PgOptions { url, schema: "s".into(), max_connections: 2, connect_timeout: Duration::from_secs(2), ca_file: None };
        let err = PgIndex::open(&opts, Isolation::User).await.unwrap_err();
        assert_eq!(err.code(), "artifact_storage_failed");
        let msg = err.to_string();
        assert!(msg.contains(&format!("postgres://127.0.0.1:{port}/db")) && !msg.contains("secret-pw"), "{msg}");
    }
}
