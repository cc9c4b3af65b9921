//! [`Record`]: what an index keeps per (owner, artifact id), and how it becomes an
//! [`ArtifactRef`].
//!
//! Times are unix nanoseconds in the index so that every backend can compare and sort them as
//! plain integers. `created_at` and `expires_at` are whole seconds (refs are read by models on
//! every turn; fractional seconds would only lengthen them); `last_access` is a strictly
//! increasing tick so that LRU order is total even when the clock does not move.

use serde_json::{Map, Value};
use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, Timestamp};

/// One owner's record of one artifact.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    /// Insertion order, assigned by the index; orders listings and FIFO eviction.
    pub seq: i64,
    pub owner_key: String,
    pub id: ArtifactId,
    pub sha256: String,
    pub size: u64,
    pub scope: ArtifactScope,
    pub mime_type: Option<String>,
    pub filename: Option<String>,
    pub source: Map<String, Value>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_access: i64,
}

impl Record {
    pub(crate) fn is_expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    pub(crate) fn to_ref(&self) -> ArtifactRef {
        ArtifactRef {
            id: self.id.clone(),
            uri: self.id.uri(),
            mime_type: self.mime_type.clone(),
            size_bytes: self.size,
            filename: self.filename.clone(),
            sha256: self.sha256.clone(),
            scope: self.scope.clone(),
            source: self.source.clone(),
            created_at: from_nanos(self.created_at),
            expires_at: self.expires_at.map(from_nanos),
        }
    }

    pub(crate) fn expired_at_string(&self) -> String {
        self.expires_at.map(from_nanos).and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok()).unwrap_or_default()
    }
}

/// Unix nanoseconds of `t`, saturating (i64 nanoseconds reach the year 2262).
pub(crate) fn to_nanos(t: Timestamp) -> i64 {
    i64::try_from(t.unix_timestamp_nanos()).unwrap_or(i64::MAX)
}

pub(crate) fn from_nanos(n: i64) -> Timestamp {
    Timestamp::from_unix_timestamp_nanos(i128::from(n)).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `n` rounded down to a whole second.
pub(crate) fn floor_secs(n: i64) -> i64 {
    n - n.rem_euclid(1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanos_round_trip_and_floor() {
        let t = time::macros::datetime!(2026-11-22 07:41:01.75 UTC);
        let n = to_nanos(t);
        assert_eq!(from_nanos(n), t);
        assert_eq!(from_nanos(floor_secs(n)), time::macros::datetime!(2026-11-22 07:41:01 UTC));
    }
}
