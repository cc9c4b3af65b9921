//! The resource read cache: a `resources/read` result after the offload — its artifacts
//! already in the store — kept per upstream, URI and owner (and, for a `per_client` upstream,
//! per client session), for `gateway.resources.cache_ttl_secs` or the upstream's `ttlMs` if
//! shorter.
//!
//! What is kept is small (the bytes are artifacts; only stubs and small inline content stay),
//! and the links are minted on every answer, so a hit never hands out an expired link. Entries
//! are never shared between owners: an artifact belongs to the owner it was stored for, so an
//! upstream's `cacheScope: "public"` changes nothing here.
//!
//! An upstream's `notifications/resources/updated` drops every entry of that URI before the
//! notification is forwarded, and bumps the URI's generation, so a read that was in flight
//! when the update arrived does not put its stale result back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use stowage_core::Owner;

use crate::shape::read::OffloadedRead;

/// Entries kept at most; past it, expired ones go first, then the oldest.
const MAX_ENTRIES: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct CacheKey {
    pub upstream: usize,
    pub uri: String,
    pub owner: Owner,
    /// The client's upstream session key, for a `per_client` upstream (whose resources may be
    /// that session's alone).
    pub client: Option<String>,
}

struct Entry {
    read: OffloadedRead,
    stored: Instant,
    expires: Instant,
}

#[derive(Default)]
pub(super) struct ReadCache {
    entries: Mutex<HashMap<CacheKey, Entry>>,
    /// Per (upstream, uri): bumped by every update notification.
    generations: Mutex<HashMap<(usize, String), u64>>,
}

impl ReadCache {
    /// A fresh entry for `key`, if there is one.
    pub(super) fn get(&self, key: &CacheKey) -> Option<OffloadedRead> {
        let mut entries = self.entries.lock();
        match entries.get(key) {
            Some(e) if e.expires > Instant::now() => Some(e.read.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// The URI's generation now: pass it to [`Self::put`] with the read that starts now.
    pub(super) fn generation(&self, upstream: usize, uri: &str) -> u64 {
        self.generations.lock().get(&(upstream, uri.to_owned())).copied().unwrap_or(0)
    }

    /// Keeps `read` for `ttl`, unless an update of its URI arrived since `generation` was
    /// taken (the read may predate it) or `ttl` is zero.
    pub(super) fn put(&self, key: CacheKey, read: OffloadedRead, ttl: Duration, generation: u64) {
        if ttl.is_zero() || self.generation(key.upstream, &key.uri) != generation {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, e| e.expires > now);
            if entries.len() >= MAX_ENTRIES
                && let Some(oldest) = entries.iter().min_by_key(|(_, e)| e.stored).map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, Entry { read, stored: now, expires: now + ttl });
    }

    /// Drops every entry of `uri` on `upstream` (an update notification); returns how many.
    pub(super) fn invalidate(&self, upstream: usize, uri: &str) -> usize {
        *self.generations.lock().entry((upstream, uri.to_owned())).or_default() += 1;
        let mut entries = self.entries.lock();
        let before = entries.len();
        entries.retain(|k, _| !(k.upstream == upstream && k.uri == uri));
        before - entries.len()
    }

    /// Drops everything of `upstream` (it restarted: what it served may have changed).
    pub(super) fn forget_upstream(&self, upstream: usize) {
        self.generations.lock().retain(|(u, _), g| {
            if *u == upstream {
                *g += 1;
            }
            true
        });
        self.entries.lock().retain(|k, _| k.upstream != upstream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read() -> OffloadedRead {
        OffloadedRead::for_tests(serde_json::json!({"contents": []}))
    }

    fn key(uri: &str, user: &str) -> CacheKey {
        CacheKey { upstream: 0, uri: uri.into(), owner: Owner { user_id: Some(user.into()), ..Owner::default() }, client: None }
    }

    #[test]
    fn entries_are_per_owner_and_expire() {
        let c = ReadCache::default();
        c.put(key("a://x", "u"), read(), Duration::from_secs(60), 0);
        assert!(c.get(&key("a://x", "u")).is_some());
        assert!(c.get(&key("a://x", "v")).is_none(), "another owner's read is not shared");
        c.put(key("a://y", "u"), read(), Duration::from_millis(1), 0);
        std::thread::sleep(Duration::from_millis(5));
        assert!(c.get(&key("a://y", "u")).is_none());
        c.put(key("a://z", "u"), read(), Duration::ZERO, 0);
        assert!(c.get(&key("a://z", "u")).is_none(), "ttlMs 0 is not cached");
    }

    #[test]
    fn an_update_drops_the_uri_for_everyone_and_a_read_from_before_it_is_not_kept() {
        let c = ReadCache::default();
        c.put(key("a://x", "u"), read(), Duration::from_secs(60), 0);
        c.put(key("a://x", "v"), read(), Duration::from_secs(60), 0);
        let before = c.generation(0, "a://x");
        assert_eq!(c.invalidate(0, "a://x"), 2);
        assert!(c.get(&key("a://x", "u")).is_none());
        // A read that started before the update finishes after it: not cached.
        c.put(key("a://x", "u"), read(), Duration::from_secs(60), before);
        assert!(c.get(&key("a://x", "u")).is_none());
        c.put(key("a://x", "u"), read(), Duration::from_secs(60), c.generation(0, "a://x"));
        assert!(c.get(&key("a://x", "u")).is_some());
    }
}
