//! An index in an embedded SQLite database (`index.sqlite`), in WAL mode so readers do not
//! block the writer and several processes (the server and the CLI) can share one store.
//!
//! rusqlite is synchronous: each call takes the connection's mutex inside `spawn_blocking`,
//! holding it only for one statement or transaction.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use serde_json::{Map, Value};
use stowage_core::{ArtifactId, ArtifactScope, Isolation, StoreError};

use super::{BlobUse, EvictOrder, Group, Index, ListFilter, Usage};
use crate::Result;
use crate::record::Record;

mod accesses;
mod schema;

use accesses::{Accesses, FLUSH_AFTER, Then};

const COLUMNS: &str = "seq, owner_key, id, sha256, size, tenant_id, user_id, session_id, trace_id, \
                       mime_type, filename, source, created_at, expires_at, last_access";

/// The scope columns budgets compare, outermost first (see [`Group`]).
const SCOPE_COLUMNS: [&str; 4] = ["tenant_id", "user_id", "session_id", "trace_id"];

pub(crate) struct SqliteIndex {
    shared: Arc<Shared>,
}

/// What the index's blocking calls and its access-flush timer share.
struct Shared {
    conn: Mutex<Connection>,
    accesses: Accesses,
    path: PathBuf,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn target(&self) -> String {
        self.path.display().to_string()
    }
}

impl Drop for Shared {
    /// The last handle is gone (the store and any flush in flight): write what is pending.
    fn drop(&mut self) {
        let conn = self.conn.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = self.accesses.flush(conn) {
            tracing::warn!(error = %e, index = %self.path.display(), "could not record the last reads' LRU accesses");
        }
    }
}

impl std::fmt::Debug for SqliteIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteIndex").field("path", &self.shared.path).finish()
    }
}

impl SqliteIndex {
    /// Opens (creating if needed) the index at `path`, migrating an older file and re-keying
    /// its records if they were made under another isolation ([`schema`]). A file that is not
    /// a SQLite database, or one written by a newer Stowage, is refused with a one-line error
    /// naming it.
    pub(crate) fn open(path: &Path, isolation: Isolation) -> Result<Self> {
        let target = path.display().to_string();
        let fail = |e: rusqlite::Error| StoreError::backend("open index", target.clone(), e);
        let mut conn = Connection::open(path).map_err(fail)?;
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
        let opened = schema::prepare(&mut conn, isolation).map_err(|e| StoreError::backend("open index", target.clone(), e))?;
        if let Some(from) = opened.migrated_from {
            tracing::info!(index = %target, from, to = schema::SCHEMA_VERSION, "migrated the artifact index");
        }
        let shared = Arc::new(Shared { conn: Mutex::new(conn), accesses: Accesses::default(), path: path.to_path_buf() });
        Ok(SqliteIndex { shared })
    }

    /// The largest LRU tick recorded, so that a reopened store keeps ticks increasing even if
    /// the clock went back.
    pub(crate) fn max_last_access(&self) -> Result<i64> {
        self.shared
            .lock()
            .query_row("SELECT COALESCE(MAX(last_access), 0) FROM artifacts", [], |r| r.get(0))
            .map_err(|e| StoreError::backend("read index", self.shared.target(), e))
    }

    /// Runs `f` on the connection in a blocking thread; errors name `op` and the index file.
    async fn run<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        run(self.shared.clone(), op, false, f).await
    }

    /// [`Self::run`], after writing the pending accesses under the same lock.
    async fn run_flushed<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        run(self.shared.clone(), op, true, f).await
    }

    /// Flushes the pending accesses after [`FLUSH_AFTER`], from a task that does not keep the
    /// index alive (dropping it flushes anyway). Without a runtime (not reachable from the
    /// async API) the accesses wait for the next flush of another kind.
    fn start_timer(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let shared: Weak<Shared> = Arc::downgrade(&self.shared);
        runtime.spawn(async move {
            tokio::time::sleep(FLUSH_AFTER).await;
            let Some(shared) = shared.upgrade() else { return };
            if let Err(e) = run(shared, "record accesses", true, |_| Ok(())).await {
                tracing::warn!(error = %e, "could not record reads' LRU accesses; retrying with the next flush");
            }
        });
    }
}

async fn run<T, F>(shared: Arc<Shared>, op: &'static str, flush_first: bool, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
{
    let target = shared.target();
    let joined = tokio::task::spawn_blocking(move || {
        let mut conn = shared.lock();
        if flush_first {
            shared.accesses.flush(&mut conn)?;
        }
        f(&mut conn)
    })
    .await;
    match joined {
        Ok(r) => r.map_err(|e| StoreError::backend(op, target, e)),
        Err(e) => Err(StoreError::backend(op, target, e)),
    }
}

/// `tenant_id IS ?1 AND user_id IS ?2 …` up to the group's level (`IS`: NULL matches NULL),
/// and the values to bind, from `?1`.
fn group_where(group: &Group) -> (String, Vec<Option<String>>) {
    let ids: Vec<Option<String>> = group.ids().cloned().collect();
    let clause = SCOPE_COLUMNS[..ids.len()].iter().enumerate().map(|(i, c)| format!("{c} IS ?{}", i + 1)).collect::<Vec<_>>().join(" AND ");
    (clause, ids)
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

    async fn record_access(&self, owner_key: &str, id: &ArtifactId, last_access: i64) -> Result<()> {
        match self.shared.accesses.record(owner_key, id.as_str(), last_access) {
            Then::Nothing => Ok(()),
            Then::StartTimer => {
                self.start_timer();
                Ok(())
            }
            Then::Flush => self.flush_accesses().await,
        }
    }

    async fn flush_accesses(&self) -> Result<()> {
        self.run_flushed("record accesses", |_| Ok(())).await
    }

    async fn refresh(&self, owner_key: &str, id: &ArtifactId, last_access: i64, expires_at: i64) -> Result<()> {
        let (owner_key, id) = (owner_key.to_owned(), id.to_string());
        self.run("update index", move |c| {
            c.prepare_cached("UPDATE artifacts SET last_access = MAX(last_access, ?3), expires_at = ?4 WHERE owner_key = ?1 AND id = ?2")?
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

    async fn usage(&self, group: &Group) -> Result<Usage> {
        let (clause, ids) = group_where(group);
        self.run("read index", move |c| {
            let (bytes, count): (i64, i64) = c
                .prepare_cached(&format!("SELECT COALESCE(SUM(size), 0), COUNT(*) FROM artifacts WHERE {clause}"))?
                .query_row(params_from_iter(ids), |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(Usage { bytes: u64::try_from(bytes).unwrap_or(0), count: u64::try_from(count).unwrap_or(0) })
        })
        .await
    }

    async fn eviction_order(&self, group: &Group, order: EvictOrder) -> Result<Vec<Record>> {
        let (clause, ids) = group_where(group);
        let order_by = match order {
            EvictOrder::LeastRecentlyUsed => "last_access, seq",
            EvictOrder::OldestFirst => "seq",
        };
        // Flushed first: LRU order must count every read so far.
        self.run_flushed("read index", move |c| {
            query_records(c, &format!("SELECT {COLUMNS} FROM artifacts WHERE {clause} ORDER BY {order_by}"), params_from_iter(ids))
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

    async fn expired(&self, now: i64, group: Option<&Group>) -> Result<Vec<Record>> {
        let (clause, ids) = group.map(group_where).unwrap_or_else(|| ("1".to_owned(), Vec::new()));
        let now_param = ids.len() + 1;
        let mut values: Vec<rusqlite::types::Value> = ids.into_iter().map(rusqlite::types::Value::from).collect();
        values.push(now.into());
        self.run("read index", move |c| {
            query_records(
                c,
                &format!("SELECT {COLUMNS} FROM artifacts WHERE expires_at <= ?{now_param} AND {clause} ORDER BY seq"),
                params_from_iter(values),
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

    async fn missing_blobs(&self) -> Result<std::collections::HashMap<String, i64>> {
        self.run("read index", move |c| {
            let mut stmt = c.prepare_cached("SELECT sha256, first_missing_at FROM missing_blobs")?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect()
        })
        .await
    }

    async fn note_missing_blobs(&self, found: &[String], at: i64, cleared: &[String]) -> Result<()> {
        let (found, cleared) = (found.to_vec(), cleared.to_vec());
        self.run("update index", move |c| {
            let tx = c.transaction()?;
            {
                let mut add = tx.prepare_cached("INSERT OR IGNORE INTO missing_blobs (sha256, first_missing_at) VALUES (?1, ?2)")?;
                for sha in &found {
                    add.execute(params![sha, at])?;
                }
                let mut remove = tx.prepare_cached("DELETE FROM missing_blobs WHERE sha256 = ?1")?;
                for sha in &cleared {
                    remove.execute(params![sha])?;
                }
            }
            tx.commit()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Level;

    #[test]
    fn garbage_file_is_a_one_line_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        std::fs::write(&path, vec![b'x'; 4096]).unwrap();
        let err = SqliteIndex::open(&path, Isolation::User).unwrap_err().to_string();
        assert!(err.starts_with("open index ") && err.contains("not a database"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
        let err = SqliteIndex::open(&path, Isolation::User).unwrap_err().to_string();
        assert!(err.contains("schema version 99 is newer"), "{err}");
    }

    fn record(n: u8, last_access: i64) -> Record {
        let sha = format!("{n:02x}").repeat(32);
        Record {
            seq: 0,
            owner_key: "k".into(),
            id: ArtifactId::from_content(None, &sha),
            sha256: sha,
            size: 1,
            scope: ArtifactScope::session("s"),
            mime_type: None,
            filename: None,
            source: Map::new(),
            created_at: 0,
            expires_at: None,
            last_access,
        }
    }

    /// `last_access` of `id` as another connection (another process) reads it from the file.
    fn on_disk(path: &Path, id: &ArtifactId) -> i64 {
        let conn = Connection::open(path).unwrap();
        conn.query_row("SELECT last_access FROM artifacts WHERE id = ?1", params![id.as_str()], |r| r.get(0)).unwrap()
    }

    #[tokio::test]
    async fn reads_reach_the_file_on_a_timer_not_one_write_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        let index = SqliteIndex::open(&path, Isolation::User).unwrap();
        let r = index.insert(record(1, 10)).await.unwrap();
        for tick in 11..=20 {
            index.record_access("k", &r.id, tick).await.unwrap();
        }
        assert_eq!(on_disk(&path, &r.id), 10, "the reads were not written one by one");
        let deadline = std::time::Instant::now() + FLUSH_AFTER * 10;
        while on_disk(&path, &r.id) != 20 {
            assert!(std::time::Instant::now() < deadline, "the timer never flushed");
            tokio::time::sleep(FLUSH_AFTER / 5).await;
        }
    }

    #[tokio::test]
    async fn eviction_order_gc_and_drop_see_pending_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        let index = SqliteIndex::open(&path, Isolation::User).unwrap();
        let old = index.insert(record(1, 10)).await.unwrap();
        let new = index.insert(record(2, 20)).await.unwrap();
        index.record_access("k", &old.id, 30).await.unwrap();
        let group = Group { level: Level::Session, scope: ArtifactScope::session("s") };
        let order: Vec<ArtifactId> =
            index.eviction_order(&group, EvictOrder::LeastRecentlyUsed).await.unwrap().into_iter().map(|r| r.id).collect();
        assert_eq!(order, vec![new.id.clone(), old.id.clone()], "the pending read made `old` the most recent");

        index.record_access("k", &new.id, 40).await.unwrap();
        index.flush_accesses().await.unwrap();
        assert_eq!(on_disk(&path, &new.id), 40);

        index.record_access("k", &old.id, 50).await.unwrap();
        drop(index);
        assert_eq!(on_disk(&path, &old.id), 50, "dropping the index writes what is pending");
    }

    #[tokio::test]
    async fn a_stale_read_never_moves_a_newer_record_back() {
        let dir = tempfile::tempdir().unwrap();
        let index = SqliteIndex::open(&dir.path().join("index.sqlite"), Isolation::User).unwrap();
        let r = index.insert(record(1, 10)).await.unwrap();
        index.record_access("k", &r.id, 15).await.unwrap();
        // Deleted and stored again before the read was written: the new row is newer.
        index.delete("k", &r.id).await.unwrap();
        let again = index.insert(record(1, 25)).await.unwrap();
        index.flush_accesses().await.unwrap();
        assert_eq!(index.get("k", &again.id).await.unwrap().unwrap().last_access, 25);
    }
}
