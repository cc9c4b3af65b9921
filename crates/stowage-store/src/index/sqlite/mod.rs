//! An index in an embedded SQLite database (`index.sqlite`), in WAL mode so readers do not
//! block the writer and several processes (the server and the CLI) can share one store.
//!
//! rusqlite is synchronous: each call takes the connection's mutex inside `spawn_blocking`,
//! holding it only for one statement or transaction.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::{Map, Value};
use stowage_core::{ArtifactId, ArtifactScope, StoreError};

use super::{BlobUse, EvictOrder, Index, ListFilter, Usage};
use crate::Result;
use crate::record::Record;

/// The schema this code writes; a newer file is refused rather than misread.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
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
";

const COLUMNS: &str = "seq, owner_key, id, sha256, size, tenant_id, user_id, session_id, trace_id, \
                       mime_type, filename, source, created_at, expires_at, last_access";

pub(crate) struct SqliteIndex {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

impl std::fmt::Debug for SqliteIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteIndex").field("path", &self.path).finish()
    }
}

impl SqliteIndex {
    /// Opens (creating if needed) the index at `path`. A file that is not a SQLite database,
    /// or one written by a newer Stowage, is refused with a one-line error naming it.
    pub fn open(path: &Path) -> Result<Self> {
        let target = path.display().to_string();
        let fail = |e: rusqlite::Error| StoreError::backend("open index", target.clone(), e);
        let conn = Connection::open(path).map_err(fail)?;
        // The first statement is what reads the file header, so a garbage file fails here
        // with "file is not a database".
        conn.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(fail)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::backend("open index", target, format!("cannot enable wal mode (got {mode})")));
        }
        // NORMAL is durable against process crashes in WAL mode; a power loss may drop the last
        // commits, which leaves blobs without rows — exactly what gc repairs.
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(fail)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(fail)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::backend(
                "open index",
                target,
                format!("schema version {version} is newer than this stowage understands ({SCHEMA_VERSION})"),
            ));
        }
        conn.execute_batch(SCHEMA).map_err(fail)?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(fail)?;
        Ok(SqliteIndex { conn: Arc::new(Mutex::new(conn)), path: path.to_path_buf() })
    }

    /// The largest LRU tick recorded, so that a reopened store keeps ticks increasing even if
    /// the clock went back.
    pub fn max_last_access(&self) -> Result<i64> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.query_row("SELECT COALESCE(MAX(last_access), 0) FROM artifacts", [], |r| r.get(0))
            .map_err(|e| StoreError::backend("read index", self.path.display().to_string(), e))
    }

    /// Runs `f` on the connection in a blocking thread; errors name `op` and the index file.
    async fn run<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = self.conn.clone();
        let target = self.path.display().to_string();
        let joined = tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut conn)
        })
        .await;
        match joined {
            Ok(r) => r.map_err(|e| StoreError::backend(op, target, e)),
            Err(e) => Err(StoreError::backend(op, target, e)),
        }
    }
}

fn to_sql_u64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn record_from_row(row: &Row<'_>) -> rusqlite::Result<Record> {
    let id: String = row.get(2)?;
    let id: ArtifactId = id.parse().map_err(|e| rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, Box::new(e)))?;
    let source: String = row.get(11)?;
    let source: Map<String, Value> = serde_json::from_str(&source)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(11, rusqlite::types::Type::Text, Box::new(e)))?;
    let size: i64 = row.get(4)?;
    Ok(Record {
        seq: row.get(0)?,
        owner_key: row.get(1)?,
        id,
        sha256: row.get(3)?,
        size: u64::try_from(size).unwrap_or(0),
        scope: ArtifactScope { tenant_id: row.get(5)?, user_id: row.get(6)?, session_id: row.get(7)?, trace_id: row.get(8)? },
        mime_type: row.get(9)?,
        filename: row.get(10)?,
        source,
        created_at: row.get(12)?,
        expires_at: row.get(13)?,
        last_access: row.get(14)?,
    })
}

fn query_records(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<Vec<Record>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params, record_from_row)?;
    rows.collect()
}

#[async_trait]
impl Index for SqliteIndex {
    async fn get(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>> {
        let (owner_key, id) = (owner_key.to_owned(), id.to_string());
        self.run("read index", move |c| {
            c.prepare_cached(&format!("SELECT {COLUMNS} FROM artifacts WHERE owner_key = ?1 AND id = ?2"))?
                .query_row(params![owner_key, id], record_from_row)
                .optional()
        })
        .await
    }

    async fn get_all(&self, id: &ArtifactId) -> Result<Vec<Record>> {
        let id = id.to_string();
        self.run("read index", move |c| {
            query_records(c, &format!("SELECT {COLUMNS} FROM artifacts WHERE id = ?1 ORDER BY seq"), params![id])
        })
        .await
    }

    async fn insert(&self, mut record: Record) -> Result<Record> {
        let source = serde_json::to_string(&record.source).map_err(|e| StoreError::backend("encode source", record.id.to_string(), e))?;
        self.run("insert into index", move |c| {
            c.prepare_cached(
                "INSERT INTO artifacts (owner_key, id, sha256, size, tenant_id, user_id, session_id, trace_id, \
                 mime_type, filename, source, created_at, expires_at, last_access) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            )?
            .execute(params![
                record.owner_key,
                record.id.as_str(),
                record.sha256,
                to_sql_u64(record.size),
                record.scope.tenant_id,
                record.scope.user_id,
                record.scope.session_id,
                record.scope.trace_id,
                record.mime_type,
                record.filename,
                source,
                record.created_at,
                record.expires_at,
                record.last_access,
            ])?;
            record.seq = c.last_insert_rowid();
            Ok(record)
        })
        .await
    }

    async fn touch(&self, owner_key: &str, id: &ArtifactId, last_access: i64, expires_at: Option<i64>) -> Result<()> {
        let (owner_key, id) = (owner_key.to_owned(), id.to_string());
        self.run("update index", move |c| {
            c.prepare_cached(
                "UPDATE artifacts SET last_access = ?3, expires_at = COALESCE(?4, expires_at) \
                 WHERE owner_key = ?1 AND id = ?2",
            )?
            .execute(params![owner_key, id, last_access, expires_at])?;
            Ok(())
        })
        .await
    }

    async fn delete(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>> {
        let (owner_key, id) = (owner_key.to_owned(), id.to_string());
        self.run("delete from index", move |c| {
            let tx = c.transaction()?;
            let found = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM artifacts WHERE owner_key = ?1 AND id = ?2"))?
                .query_row(params![owner_key, id], record_from_row)
                .optional()?;
            if let Some(r) = &found {
                tx.prepare_cached("DELETE FROM artifacts WHERE seq = ?1")?.execute(params![r.seq])?;
            }
            tx.commit()?;
            Ok(found)
        })
        .await
    }

    async fn usage(&self, owner_key: &str, trace_id: Option<&str>) -> Result<Usage> {
        let (owner_key, trace_id) = (owner_key.to_owned(), trace_id.map(str::to_owned));
        self.run("read index", move |c| {
            let (bytes, count): (i64, i64) = c
                .prepare_cached(
                    "SELECT COALESCE(SUM(size), 0), COUNT(*) FROM artifacts \
                     WHERE owner_key = ?1 AND (?2 IS NULL OR trace_id = ?2)",
                )?
                .query_row(params![owner_key, trace_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(Usage { bytes: u64::try_from(bytes).unwrap_or(0), count: u64::try_from(count).unwrap_or(0) })
        })
        .await
    }

    async fn eviction_order(&self, owner_key: &str, trace_id: Option<&str>, order: EvictOrder) -> Result<Vec<Record>> {
        let (owner_key, trace_id) = (owner_key.to_owned(), trace_id.map(str::to_owned));
        let order_by = match order {
            EvictOrder::LeastRecentlyUsed => "last_access, seq",
            EvictOrder::OldestFirst => "seq",
        };
        self.run("read index", move |c| {
            query_records(
                c,
                &format!(
                    "SELECT {COLUMNS} FROM artifacts WHERE owner_key = ?1 AND (?2 IS NULL OR trace_id = ?2) \
                     ORDER BY {order_by}"
                ),
                params![owner_key, trace_id],
            )
        })
        .await
    }

    async fn list(&self, filter: &ListFilter, after: i64, now: i64, limit: usize) -> Result<Vec<Record>> {
        let f = filter.clone();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run("list index", move |c| {
            query_records(
                c,
                &format!(
                    "SELECT {COLUMNS} FROM artifacts WHERE seq > ?1 \
                     AND (expires_at IS NULL OR expires_at > ?2) \
                     AND (?3 IS NULL OR owner_key = ?3) AND (?4 IS NULL OR session_id = ?4) \
                     AND (?5 IS NULL OR trace_id = ?5) ORDER BY seq LIMIT ?6"
                ),
                params![after, now, f.owner_key, f.session_id, f.trace_id, limit],
            )
        })
        .await
    }

    async fn expired(&self, now: i64, owner_key: Option<&str>) -> Result<Vec<Record>> {
        let owner_key = owner_key.map(str::to_owned);
        self.run("read index", move |c| {
            query_records(
                c,
                &format!(
                    "SELECT {COLUMNS} FROM artifacts WHERE expires_at <= ?1 AND (?2 IS NULL OR owner_key = ?2) \
                     ORDER BY seq"
                ),
                params![now, owner_key],
            )
        })
        .await
    }

    async fn sha_in_use(&self, sha256: &str) -> Result<bool> {
        let sha = sha256.to_owned();
        self.run("read index", move |c| {
            c.prepare_cached("SELECT EXISTS (SELECT 1 FROM artifacts WHERE sha256 = ?1)")?.query_row(params![sha], |r| r.get(0))
        })
        .await
    }

    async fn blob_uses(&self) -> Result<Vec<BlobUse>> {
        self.run("read index", move |c| {
            let mut stmt = c.prepare_cached("SELECT owner_key, id, sha256, size FROM artifacts ORDER BY seq")?;
            let rows = stmt.query_map([], |row| {
                let id: String = row.get(1)?;
                let size: i64 = row.get(3)?;
                Ok(BlobUse {
                    owner_key: row.get(0)?,
                    id: id.parse().map_err(|e| rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Text, Box::new(e)))?,
                    sha256: row.get(2)?,
                    size: u64::try_from(size).unwrap_or(0),
                })
            })?;
            rows.collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_file_is_a_one_line_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        std::fs::write(&path, vec![b'x'; 4096]).unwrap();
        let err = SqliteIndex::open(&path).unwrap_err().to_string();
        assert!(err.starts_with("open index ") && err.contains("not a database"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
        let err = SqliteIndex::open(&path).unwrap_err().to_string();
        assert!(err.contains("schema version 99"), "{err}");
    }
}
