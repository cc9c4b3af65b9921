//! [`StoreError`]: the one error type every artifact store returns.
//!
//! Variants carry the context a person needs to act (which id, which limit, which operation).
//! Messages are single lines, lowercase, without a trailing period, so the CLI can print them
//! as they are and the HTTP layer can map them to stable error codes.

use crate::ArtifactId;

/// The stable wire codes every refusal carries: over HTTP (`{"error":{"code",…}}`), in a tool's
/// `isError` result, and from the CLI. Spelled here once; other layers add codes of their own
/// (media, agent) only for faults these five do not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request itself is wrong (an argument, a body, a token that is not one).
    BadRequest,
    /// No such artifact for this caller (also another owner's, and a deleted one).
    ArtifactNotFound,
    /// A link or token that does not grant this artifact.
    ArtifactForbidden,
    /// A link, or an artifact, past its expiry.
    ArtifactUrlExpired,
    /// The store could not take or give the bytes (full, over a limit, down).
    ArtifactStorageFailed,
}

impl ErrorCode {
    /// The code as written on the wire: `bad_request`, `artifact_not_found`, …
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::ArtifactNotFound => "artifact_not_found",
            ErrorCode::ArtifactForbidden => "artifact_forbidden",
            ErrorCode::ArtifactUrlExpired => "artifact_url_expired",
            ErrorCode::ArtifactStorageFailed => "artifact_storage_failed",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl From<ErrorCode> for &'static str {
    fn from(code: ErrorCode) -> Self {
        code.as_str()
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A boxed error from a backend (IO, SQLite, S3, …).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a store (or a sink in front of one) can fail with; [`StoreError::code`] maps each to
/// its wire code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No artifact with this id is visible to the caller's owner. Deliberately the same for
    /// "never existed", "another owner's" and "already deleted", so nothing leaks.
    #[error("artifact {id} not found")]
    NotFound {
        /// The id asked for.
        id: ArtifactId,
    },

    /// The artifact existed for this owner but its TTL has passed.
    #[error("artifact {id} expired at {expired_at}")]
    Expired {
        /// The artifact's id.
        id: ArtifactId,
        /// When it expired (RFC 3339).
        expired_at: String,
    },

    /// A single artifact is larger than a configured limit.
    #[error("{what} is {size} bytes, over the {limit_name} limit of {limit} bytes; raise {limit_name} in stowage.toml or store less")]
    TooLarge {
        /// What was too large (`"artifact"`, `"upload"`, …).
        what: String,
        /// Its size in bytes.
        size: u64,
        /// The limit in bytes.
        limit: u64,
        /// The setting that holds the limit, named so the message says what to raise.
        limit_name: &'static str,
    },

    /// A per-session or per-trace budget is full and eviction is off or cannot free enough.
    #[error("{budget} is full: {detail}; raise the limit in stowage.toml, delete artifacts or enable lru eviction")]
    QuotaExceeded {
        /// Which budget (`"session s1's budget"`, …).
        budget: String,
        /// How full it is and what the put needed.
        detail: String,
    },

    /// Two different contents produced the same id (a sha256-prefix collision). Never aliased.
    #[error("artifact id {id} already names different content (sha256 {existing} vs {incoming})")]
    IdCollision {
        /// The id both contents map to.
        id: ArtifactId,
        /// The stored content's sha256.
        existing: String,
        /// The new content's sha256.
        incoming: String,
    },

    /// The caller passed something unusable (a bad range, an empty stream when bytes were
    /// required, …).
    #[error("invalid request: {0}")]
    InvalidInput(String),

    /// The backend failed. `op` names what was being done, `target` what it was done to.
    #[error("{op} {target}: {source}")]
    Backend {
        /// What was being done (`"put"`, `"open store"`, …).
        op: &'static str,
        /// What it was done to (an id, a path, a URL without credentials).
        target: String,
        /// The backend's own error.
        #[source]
        source: BoxError,
    },
}

impl StoreError {
    /// Wraps a backend error with the operation and target it happened on.
    pub fn backend(op: &'static str, target: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Backend { op, target: target.into(), source: source.into() }
    }

    /// The stable error code for this error, as used over HTTP and in `isError` results.
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::NotFound { .. } => ErrorCode::ArtifactNotFound,
            StoreError::Expired { .. } => ErrorCode::ArtifactUrlExpired,
            StoreError::InvalidInput(_) => ErrorCode::BadRequest,
            StoreError::TooLarge { .. }
            | StoreError::QuotaExceeded { .. }
            | StoreError::IdCollision { .. }
            | StoreError::Backend { .. } => ErrorCode::ArtifactStorageFailed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_with_context() {
        let id: ArtifactId = "art_1".parse().unwrap();
        let errs = [
            StoreError::NotFound { id: id.clone() },
            StoreError::TooLarge { what: "put".into(), size: 10, limit: 5, limit_name: "max_artifact_bytes" },
            StoreError::backend("write blob", "/tmp/x", std::io::Error::other("disk full")),
        ];
        for e in &errs {
            let m = e.to_string();
            assert!(!m.contains('\n') && !m.ends_with('.'), "{m}");
        }
        assert_eq!(errs[2].to_string(), "write blob /tmp/x: disk full");
        assert_eq!(errs[0].code(), "artifact_not_found");
        assert_eq!(errs[1].code(), "artifact_storage_failed");
    }
}
