//! Blobs a shared store publishes before their record exists, named in the index first, and
//! this instance's liveness.
//!
//! An object-store put uploads (or copies) its bytes to their content address outside the
//! fleet-wide decision lock, so that a 100 MB upload never holds the fleet up; the record is
//! written under the lock afterwards. Between the two, a failed put, a database outage or a
//! `kill -9` would leave a blob that no record names, which gc could only judge by age. So a
//! put names the blob in the index's `publishing` table before the upload starts (a database
//! that is down fails the put before anything reaches the bucket), and the row goes when the
//! record is written. Whatever ends a put otherwise leaves a row, which [`Journal::settle`]
//! resolves under the decision lock: the blob goes unless a record uses it, then the row.
//!
//! Which rows are leftovers: this instance's that no put in flight holds, and every row of an
//! instance that is gone. An instance is alive while it holds its liveness lock, a PostgreSQL
//! session advisory lock keyed by a random number, on a connection of its own: a killed
//! process's connection closes and the lock goes with it, so the next instance to start or
//! sweep cleans up after it at once rather than after an hour. The same key names its staged
//! uploads under `tmp/`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stowage_core::StoreError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::Result;
use crate::index::{Index, PgIndex};
use crate::record::to_nanos;

/// The publishing journal of one instance, and its liveness key.
pub(crate) struct Journal {
    index: PgIndex,
    /// This instance's liveness key (also in its `tmp/` object names).
    instance: i32,
    next_put: AtomicI64,
    /// Put ids whose put is still running here: never leftovers.
    in_flight: Mutex<HashSet<i64>>,
    /// Wakes the settler when a put ended without its record.
    wake: Notify,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("instance", &self.instance).finish_non_exhaustive()
    }
}

/// A publish named in the index. Dropped without [`Ticket::recorded`], the put did not record
/// it, and the settler decides what becomes of the blob.
pub(crate) struct Ticket {
    journal: Arc<Journal>,
    put_id: i64,
    recorded: bool,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ticket({}/{})", self.journal.instance, self.put_id)
    }
}

impl Ticket {
    /// A record names the blob now: the row only has to go, off the put's path.
    pub(crate) fn recorded(mut self) {
        self.recorded = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.journal.in_flight).remove(&self.put_id);
        if !self.recorded {
            self.journal.wake.notify_one();
            return;
        }
        let (journal, put_id) = (self.journal.clone(), self.put_id);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                // Left in place on failure: the settler finds the blob in use and drops the row.
                if let Err(e) = journal.index.end_publish(journal.instance, put_id).await {
                    tracing::debug!(error = %e, "could not clear a finished publish; the next settle will");
                }
            });
        }
    }
}

fn lock(set: &Mutex<HashSet<i64>>) -> std::sync::MutexGuard<'_, HashSet<i64>> {
    set.lock().unwrap_or_else(|e| e.into_inner())
}

/// How often the liveness connection is checked, and the longest wait between attempts to
/// reconnect it.
const LIVENESS_CHECK: Duration = Duration::from_secs(1);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

impl Journal {
    /// The index the journal writes to.
    pub(crate) fn index(&self) -> &PgIndex {
        &self.index
    }

    /// Takes a liveness key (random; another if a live instance holds it) and its lock, and
    /// keeps the lock held (reconnecting after a database outage) until `stop` is cancelled.
    pub(crate) async fn start(index: PgIndex, stop: CancellationToken) -> Result<Arc<Self>> {
        let mut tries = 0;
        let (instance, client) = loop {
            let key = random_key();
            if let Some(client) = index.hold_instance_lock(key).await? {
                break (key, client);
            }
            tries += 1;
            if tries == 5 {
                return Err(StoreError::backend("lock instance", index.target().to_owned(), "no free instance key after 5 tries"));
            }
        };
        let journal = Arc::new(Journal {
            index: index.clone(),
            instance,
            next_put: AtomicI64::new(0),
            in_flight: Mutex::default(),
            wake: Notify::new(),
        });
        tokio::spawn(keep_alive(index, instance, client, stop));
        Ok(journal)
    }

    pub(crate) fn instance(&self) -> i32 {
        self.instance
    }

    /// Names `sha256` as about to be published by a put of this instance.
    pub(crate) async fn begin(self: &Arc<Self>, sha256: &str) -> Result<Ticket> {
        let put_id = self.next_put.fetch_add(1, Ordering::Relaxed);
        lock(&self.in_flight).insert(put_id);
        // From here the ticket removes the id again however this ends.
        let ticket = Ticket { journal: self.clone(), put_id, recorded: false };
        let now = to_nanos(time::OffsetDateTime::now_utc());
        self.index.begin_publish(self.instance, put_id, sha256, now).await?;
        Ok(ticket)
    }

    /// Which of `keys` are instances still running (this one included).
    pub(crate) async fn live(&self, keys: &[i32]) -> Result<HashSet<i32>> {
        let mut live = self.index.live_instances(keys).await?;
        live.insert(self.instance);
        Ok(live)
    }

    /// Resolves every publish that did not end (this instance's not in flight, and those of
    /// instances that are gone): under the decision lock, the blob is deleted unless a record
    /// uses it, then the row goes. Returns the bytes freed.
    pub(crate) async fn settle<F, Fut>(&self, delete_blob: F) -> Result<u64>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<u64>>,
    {
        let rows = self.index.unfinished_publishes(self.instance).await?;
        let leftovers: Vec<_> = {
            let in_flight = lock(&self.in_flight);
            rows.into_iter().filter(|(instance, put_id, _)| *instance != self.instance || !in_flight.contains(put_id)).collect()
        };
        if leftovers.is_empty() {
            return Ok(0);
        }
        let _decisions = self.index.lock_decisions().await?;
        let mut freed = 0;
        for (instance, put_id, sha256) in leftovers {
            if !self.index.sha_in_use(&sha256).await? {
                let bytes = delete_blob(sha256.clone()).await?;
                if bytes > 0 {
                    tracing::info!(sha256 = %sha256, instance, bytes, "removed the blob of a put that never recorded it");
                }
                freed += bytes;
            }
            self.index.end_publish(instance, put_id).await?;
        }
        Ok(freed)
    }

    /// Waits until a put ends without its record.
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }
}

/// A liveness key: random, non-negative (it is compared as an oid in `pg_locks`).
fn random_key() -> i32 {
    let bytes = crate::blobs::random_bytes::<4>();
    i32::from_le_bytes(bytes) & i32::MAX
}

/// Holds the liveness lock: while its connection is open, the lock is held; when it closes
/// (the database restarted), a new connection takes it again.
async fn keep_alive(index: PgIndex, key: i32, mut client: deadpool_postgres::ClientWrapper, stop: CancellationToken) {
    let mut backoff = Duration::from_millis(200);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(LIVENESS_CHECK) => {}
        }
        if !client.is_closed() {
            continue;
        }
        match index.hold_instance_lock(key).await {
            Ok(Some(c)) => {
                tracing::info!(instance = key, "took this instance's liveness lock again");
                client = c;
                backoff = Duration::from_millis(200);
            }
            Ok(None) => tracing::warn!(instance = key, "another instance holds this instance's liveness key"),
            Err(e) => {
                tracing::debug!(error = %e, "cannot take the liveness lock yet");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(RECONNECT_MAX);
            }
        }
    }
}
