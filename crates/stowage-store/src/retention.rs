//! Retention limits (README, `retention.*` keys): TTL, size and count budgets, and what to do
//! when full.
//!
//! Budgets nest: a trace lies in a session, a session in a user, a user in a tenant, and a put
//! must fit every one of them. Which owner ids decide *access* is not a retention matter but
//! the store's isolation (`FsStoreBuilder::isolation`, `[store] isolate_sessions`): budgets
//! group records by their scope ids whatever the isolation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What to do when a put would push a trace, session, user or tenant over its budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CleanupStrategy {
    /// Evict the least recently used artifacts of that budget until the put fits.
    #[default]
    Lru,
    /// Evict the oldest artifacts first.
    Fifo,
    /// Refuse the put.
    None,
}

/// Retention limits. Every limit is enforced on every put; `0` is not "unlimited" — use a
/// large number instead, so that a typo cannot switch a limit off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// How long an artifact lives after its put, e.g. `"1h"`, `"30m"`, `"7d"`.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Largest single artifact, in bytes.
    pub max_artifact_bytes: u64,
    /// Total bytes one session may hold: the artifacts recorded with that session id within
    /// one (tenant, user). For a scope without a session id, the user's session-less artifacts
    /// share this budget (and `max_artifacts_per_session`) as if they were one session; the
    /// same holds for user-less and tenant-less scopes in the budgets below.
    pub max_session_bytes: u64,
    /// Total bytes one trace may hold: the artifacts recorded with that trace id within one
    /// session.
    pub max_trace_bytes: u64,
    /// Total bytes one user may hold, over all of its sessions (within one tenant).
    pub max_user_bytes: u64,
    /// Total bytes one tenant may hold, over all of its users. Eviction for this budget may
    /// remove another user's artifacts of the same tenant: it is the tenant's space that is full.
    pub max_tenant_bytes: u64,
    /// How many artifacts one session may hold.
    pub max_artifacts_per_session: u64,
    /// How many artifacts one trace may hold.
    pub max_artifacts_per_trace: u64,
    /// Which artifacts a full budget evicts first, or none.
    pub cleanup_strategy: CleanupStrategy,
    /// How often `stowage serve` runs garbage collection (expired artifacts of every owner,
    /// orphaned blobs, crash leftovers). Puts only purge the putting owner's expired records;
    /// this is what frees the rest.
    #[serde(with = "humantime_serde")]
    pub gc_interval: Duration,
}

impl Default for RetentionConfig {
    /// The defaults: 1 h TTL, 50 MB per artifact, 500 MB per session, 100 MB per trace,
    /// 1000 artifacts per session, 100 per trace, LRU eviction; 2 GiB per user (four full
    /// sessions) and 10 GiB per tenant, which on a single-user machine (no tenant, no user)
    /// caps the whole store at 2 GiB.
    fn default() -> Self {
        RetentionConfig {
            ttl: Duration::from_secs(3600),
            max_artifact_bytes: 50 * 1024 * 1024,
            max_session_bytes: 500 * 1024 * 1024,
            max_trace_bytes: 100 * 1024 * 1024,
            max_user_bytes: 2 * 1024 * 1024 * 1024,
            max_tenant_bytes: 10 * 1024 * 1024 * 1024,
            max_artifacts_per_session: 1000,
            max_artifacts_per_trace: 100,
            gc_interval: Duration::from_secs(600),
            cleanup_strategy: CleanupStrategy::Lru,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_budgets() {
        let c = RetentionConfig::default();
        assert_eq!(c.ttl, Duration::from_secs(3600));
        assert_eq!(c.max_artifact_bytes, 52_428_800);
        assert_eq!(c.max_session_bytes, 524_288_000);
        assert_eq!(c.max_trace_bytes, 104_857_600);
        assert_eq!((c.max_user_bytes, c.max_tenant_bytes), (2_147_483_648, 10_737_418_240));
        assert_eq!((c.max_artifacts_per_session, c.max_artifacts_per_trace), (1000, 100));
        assert_eq!(c.cleanup_strategy, CleanupStrategy::Lru);
    }

    #[test]
    fn durations_parse_and_unknown_keys_fail() {
        let c: RetentionConfig = serde_json::from_str(r#"{"ttl":"90s","cleanup_strategy":"none"}"#).unwrap();
        assert_eq!(c.ttl, Duration::from_secs(90));
        assert_eq!(c.cleanup_strategy, CleanupStrategy::None);
        assert!(serde_json::from_str::<RetentionConfig>(r#"{"ttl_secs":1}"#).is_err());
        assert!(serde_json::from_str::<RetentionConfig>(r#"{"ttl":"soon"}"#).is_err());
    }
}
