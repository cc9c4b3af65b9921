//! The index file's schema, its versions, and what opening a file written by another version or
//! under another isolation does to it.
//!
//! Versions (`PRAGMA user_version`):
//! - 1: `owner_key` is the (tenant, user, session) key: sessions were always isolated.
//! - 2: the `settings` table records which [`Isolation`] the owner keys were made under, and
//!   budgets select records by their scope columns (`artifacts_by_scope`).
//!
//! Opening runs in one immediate transaction, so a crash or a second process opening the same
//! file at the same moment sees either the old file or the fully migrated one. A version-1 file
//! is version 2 with `isolation = session`; when the configured isolation differs from the
//! recorded one, every record is re-keyed ([`rekey`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use stowage_core::{Isolation, Owner};

/// The schema this code writes; a newer file is refused rather than misread.
pub(super) const SCHEMA_VERSION: i64 = 2;

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
-- Every budget is a prefix of the scope columns (tenant; tenant+user; …+session; …+trace);
-- with the size, a budget's usage is summed from the index alone.
CREATE INDEX IF NOT EXISTS artifacts_by_scope ON artifacts (tenant_id, user_id, session_id, trace_id, size);
CREATE INDEX IF NOT EXISTS artifacts_by_expiry ON artifacts (expires_at);
CREATE TABLE IF NOT EXISTS settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- Blobs gc found missing, and since when (unix ns): their records are dropped only when a
-- later sweep, past the grace period, still finds them missing. Created by every open (so no
-- version bump: an older Stowage opening the file ignores it).
CREATE TABLE IF NOT EXISTS missing_blobs (
    sha256           TEXT PRIMARY KEY,
    first_missing_at INTEGER NOT NULL
);
";

/// Why an index file could not be opened as this version.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SchemaError {
    #[error("schema version {found} is newer than this stowage understands ({SCHEMA_VERSION})")]
    Newer { found: i64 },
    #[error("settings record isolation {0:?}, which this stowage does not know")]
    UnknownIsolation(String),
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

/// What opening changed, for the log.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Opened {
    pub migrated_from: Option<i64>,
    pub rekeyed: Option<Rekeyed>,
}

/// Brings the file to [`SCHEMA_VERSION`] with owner keys made under `isolation`.
pub(super) fn prepare(conn: &mut Connection, isolation: Isolation) -> Result<Opened, SchemaError> {
    // Immediate: take the write lock before reading the version, so two processes opening an
    // old file at once migrate it once, one after the other.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(SchemaError::Newer { found: version });
    }
    let has_artifacts: bool =
        tx.query_row("SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'artifacts')", [], |r| r.get(0))?;
    let mut opened = Opened::default();
    // Version 1 wrote its tables and then its version number, not atomically, so a version-1
    // file may also say 0: the table is what tells.
    if has_artifacts && version < 2 {
        // The index budgets used before is replaced by artifacts_by_scope.
        tx.execute_batch("DROP INDEX IF EXISTS artifacts_by_trace;")?;
        tx.execute_batch(SCHEMA)?;
        tx.execute("INSERT OR REPLACE INTO settings (name, value) VALUES ('isolation', ?1)", params![Isolation::Session.as_str()])?;
        opened.migrated_from = Some(version.max(1));
    } else {
        tx.execute_batch(SCHEMA)?;
    }
    let recorded: Option<String> = tx.query_row("SELECT value FROM settings WHERE name = 'isolation'", [], |r| r.get(0)).optional()?;
    let recorded = match recorded {
        Some(name) => Some(name.parse::<Isolation>().map_err(|_| SchemaError::UnknownIsolation(name))?),
        None => None,
    };
    if recorded.is_some_and(|r| r != isolation) {
        opened.rekeyed = Some(rekey(&tx, isolation)?);
    }
    if recorded != Some(isolation) {
        tx.execute("INSERT OR REPLACE INTO settings (name, value) VALUES ('isolation', ?1)", params![isolation.as_str()])?;
    }
    if version != SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    tx.commit()?;
    Ok(opened)
}

/// What re-keying did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Rekeyed {
    /// Records whose key changed.
    pub records: u64,
    /// Records folded into another one with the same new key and id.
    pub merged: u64,
}

/// The record that stays for one (new key, id), and what it takes over from the ones merged
/// into it.
struct Kept {
    seq: i64,
    sha256: String,
    expires_at: Option<i64>,
    last_access: i64,
}

/// Recomputes every record's owner key under `isolation`. Where several records end up with one
/// key and id (the sessions of one user, going from session to user isolation), the oldest
/// stays, as a put under the new isolation would have found it; it takes the latest expiry (none
/// if any had none) and the latest access, so nothing becomes shorter-lived or colder than the
/// copies it replaces. Only rows are removed, never blobs: a merged record of the same id names
/// the same bytes, and a blob that truly lost its last record (an id collision) is left for gc.
fn rekey(tx: &rusqlite::Transaction<'_>, isolation: Isolation) -> rusqlite::Result<Rekeyed> {
    let mut kept: HashMap<(String, String), Kept> = HashMap::new();
    let mut merged = Vec::new();
    {
        let mut stmt =
            tx.prepare("SELECT seq, id, sha256, tenant_id, user_id, session_id, expires_at, last_access FROM artifacts ORDER BY seq")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let owner = Owner { tenant_id: row.get(3)?, user_id: row.get(4)?, session_id: row.get(5)? };
            let this = Kept { seq: row.get(0)?, sha256: row.get(2)?, expires_at: row.get(6)?, last_access: row.get(7)? };
            match kept.entry((owner.access_key(isolation), row.get(1)?)) {
                Entry::Vacant(v) => {
                    v.insert(this);
                }
                Entry::Occupied(mut o) => {
                    let id = o.key().1.clone();
                    let k = o.get_mut();
                    if k.sha256 != this.sha256 {
                        tracing::warn!(%id, kept = %k.sha256, dropped = %this.sha256,
                            "re-keying the index: one id names two contents; keeping the older, gc removes the other's blob");
                    }
                    k.expires_at = k.expires_at.zip(this.expires_at).map(|(a, b)| a.max(b));
                    k.last_access = k.last_access.max(this.last_access);
                    merged.push(this.seq);
                }
            }
        }
    }
    for seq in &merged {
        tx.execute("DELETE FROM artifacts WHERE seq = ?1", params![seq])?;
    }
    // Park every key on a value no real key can take ('#' never starts one), so that setting
    // the new keys one by one never trips UNIQUE (owner_key, id) on a key not yet rewritten.
    tx.execute("UPDATE artifacts SET owner_key = '#' || seq", [])?;
    let mut update = tx.prepare("UPDATE artifacts SET owner_key = ?1, expires_at = ?2, last_access = ?3 WHERE seq = ?4")?;
    for ((key, _), k) in &kept {
        update.execute(params![key, k.expires_at, k.last_access, k.seq])?;
    }
    let rekeyed = Rekeyed { records: kept.len() as u64, merged: merged.len() as u64 };
    tracing::info!(isolation = isolation.as_str(), records = rekeyed.records, merged = rekeyed.merged, "re-keyed the artifact index");
    Ok(rekeyed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn a_fresh_file_records_its_isolation_and_reopening_changes_nothing() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(prepare(&mut conn, Isolation::User).unwrap(), Opened::default());
        assert_eq!(prepare(&mut conn, Isolation::User).unwrap(), Opened::default());
        let isolation: String = conn.query_row("SELECT value FROM settings WHERE name = 'isolation'", [], |r| r.get(0)).unwrap();
        assert_eq!(isolation, "user");
        assert_eq!(count(&conn, "PRAGMA user_version"), SCHEMA_VERSION);
    }

    #[test]
    fn an_unknown_recorded_isolation_is_refused_by_name() {
        let mut conn = Connection::open_in_memory().unwrap();
        prepare(&mut conn, Isolation::User).unwrap();
        conn.execute("UPDATE settings SET value = 'tenant' WHERE name = 'isolation'", []).unwrap();
        let e = prepare(&mut conn, Isolation::User).unwrap_err().to_string();
        assert_eq!(e, "settings record isolation \"tenant\", which this stowage does not know");
    }
}
