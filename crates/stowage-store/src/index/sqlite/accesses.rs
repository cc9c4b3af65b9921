//! Deferred LRU accesses: every read records one, and an UPDATE per read was most of what a
//! small read cost (a blocking-pool hop and a WAL append each). Reads now only remember their
//! latest tick per record; the ticks go to SQLite in one transaction when
//! - [`FLUSH_AFTER`] has passed since the first one pending (a timer task),
//! - [`FLUSH_AT`] records are pending (the read that fills the buffer writes it),
//! - the index is about to answer an eviction-order query (so LRU order is never stale),
//! - gc runs, or the index is dropped.
//!
//! A batch is only ever taken with the connection locked and applied before the lock is
//! released, so no query can run between a batch leaving the buffer and reaching the table.
//! Another process sharing the file sees this process's accesses up to [`FLUSH_AFTER`] late,
//! which at worst makes an eviction there pick a record read a moment ago.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, params};

/// How long an access may wait in memory.
pub(super) const FLUSH_AFTER: Duration = Duration::from_millis(500);
/// How many distinct records may have an access waiting before the reader flushes them itself.
pub(super) const FLUSH_AT: usize = 1024;

/// What the caller should do after [`Accesses::record`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Then {
    Nothing,
    /// The first access since the last flush: start the timer.
    StartTimer,
    /// The buffer is full: flush now.
    Flush,
}

#[derive(Debug, Default)]
pub(super) struct Accesses {
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    /// (owner key, id) → the latest tick read.
    latest: HashMap<(String, String), i64>,
    timer_running: bool,
}

impl Accesses {
    pub(super) fn record(&self, owner_key: &str, id: &str, tick: i64) -> Then {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let latest = p.latest.entry((owner_key.to_owned(), id.to_owned())).or_insert(tick);
        *latest = (*latest).max(tick);
        if p.latest.len() >= FLUSH_AT {
            Then::Flush
        } else if !p.timer_running {
            p.timer_running = true;
            Then::StartTimer
        } else {
            Then::Nothing
        }
    }

    /// Writes every pending access to `conn` in one transaction. Call with the connection
    /// locked (see the module docs). On error the batch is put back, so a later flush retries.
    pub(super) fn flush(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        let batch = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.timer_running = false;
            std::mem::take(&mut p.latest)
        };
        if batch.is_empty() {
            return Ok(());
        }
        match apply(conn, &batch) {
            Ok(()) => Ok(()),
            Err(e) => {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                for (key, tick) in batch {
                    let latest = p.latest.entry(key).or_insert(tick);
                    *latest = (*latest).max(tick);
                }
                Err(e)
            }
        }
    }
}

/// `MAX`, because a record may have been deleted and stored again since the read: its new row
/// has a later tick than the stale access, which must not move it back in LRU order.
fn apply(conn: &mut Connection, batch: &HashMap<(String, String), i64>) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached("UPDATE artifacts SET last_access = MAX(last_access, ?3) WHERE owner_key = ?1 AND id = ?2")?;
        for ((owner_key, id), tick) in batch {
            stmt.execute(params![owner_key, id, tick])?;
        }
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_access_starts_the_timer_and_a_full_buffer_asks_for_a_flush() {
        let a = Accesses::default();
        assert_eq!(a.record("k", "id0", 5), Then::StartTimer);
        assert_eq!(a.record("k", "id0", 3), Then::Nothing, "an older tick changes nothing");
        for i in 1..FLUSH_AT - 1 {
            assert_eq!(a.record("k", &format!("id{i}"), 5), Then::Nothing);
        }
        assert_eq!(a.record("k", "last", 5), Then::Flush);
        let p = a.pending.lock().unwrap();
        assert_eq!((p.latest.len(), p.latest[&("k".to_owned(), "id0".to_owned())]), (FLUSH_AT, 5));
    }
}
