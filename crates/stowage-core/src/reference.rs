//! [`ArtifactRef`]: the compact reference to a stored artifact, the only thing about an
//! artifact that may reach a model.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{ArtifactId, ArtifactScope};

/// A point in time, serialised as RFC 3339 in UTC (`2026-11-22T07:41:01Z`).
pub type Timestamp = time::OffsetDateTime;

/// A compact, JSON-safe reference to stored bytes (docs/results.md, "What an artifact reference looks
/// like").
///
/// The JSON shape is stable and documented:
///
/// ```json
/// {"id":"download_workbook_3f2a9c0d1e4b5a69","uri":"artifact://download_workbook_3f2a9c0d1e4b5a69",
///  "mime_type":"application/pdf","size_bytes":511590,"filename":"Sales.pdf",
///  "sha256":"3f2a…(64 hex)","scope":{"session_id":"s1"},
///  "created_at":"2026-11-22T07:41:01Z","expires_at":"2026-11-22T08:41:01Z"}
/// ```
///
/// Optional fields are omitted when absent. It never carries the bytes themselves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// The artifact's id.
    pub id: ArtifactId,
    /// Always `artifact://<id>`; kept in the JSON so that consumers need not build it.
    pub uri: String,
    /// The recorded media type (normalized, or sniffed from the bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The stored size in bytes.
    pub size_bytes: u64,
    /// The file name the producer gave, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// Lowercase hex sha256 of the stored bytes.
    pub sha256: String,
    /// Whose it is (tenant, user, session) and the trace it was made in.
    #[serde(default, skip_serializing_if = "is_default_scope")]
    pub scope: ArtifactScope,
    /// Where the artifact came from (tool, pointer, …) and, for the NoOp store, the
    /// `truncated` marker and warning. Free-form but small.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub source: Map<String, Value>,
    /// When it was first stored.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: Timestamp,
    /// When it expires; `None` keeps it until evicted or deleted.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

fn is_default_scope(scope: &ArtifactScope) -> bool {
    *scope == ArtifactScope::default()
}

impl ArtifactRef {
    /// True when the bytes were *not* stored (the NoOp store's marker).
    pub fn is_truncated(&self) -> bool {
        self.source.get("truncated").and_then(Value::as_bool).unwrap_or(false)
    }

    /// Whether the artifact has expired at `now`.
    pub fn is_expired_at(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn typical() -> ArtifactRef {
        let sha = "3f2a9c0d1e4b5a6978877665544332211000ffeeddccbbaa9988776655443322";
        let id = ArtifactId::from_content(Some("tableau"), sha);
        ArtifactRef {
            uri: id.uri(),
            id,
            mime_type: Some("application/pdf".into()),
            size_bytes: 511_590,
            filename: Some("Sales Dashboard.pdf".into()),
            sha256: sha.into(),
            scope: ArtifactScope::session("4b1c6d1e-92f0-4f5e-a1d2-0c9e8f7a6b5c"),
            source: Map::new(),
            created_at: datetime!(2026-11-22 07:41:01 UTC),
            expires_at: Some(datetime!(2026-11-22 08:41:01 UTC)),
        }
    }

    #[test]
    fn typical_ref_is_compact_and_round_trips() {
        // A server-named namespace, a UUID session, a filename, both timestamps: what the
        // gateway produces for an offloaded PDF. Even a 17-character tool name as namespace
        // stays under 400 bytes (390); this typical one is ~370.
        let r = typical();
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.len() <= 375, "{} bytes: {json}", json.len());
        assert!(json.contains(r#""created_at":"2026-11-22T07:41:01Z""#), "{json}");
        let back: ArtifactRef = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn absent_fields_are_omitted() {
        let mut r = typical();
        r.filename = None;
        r.mime_type = None;
        r.expires_at = None;
        r.scope = ArtifactScope::default();
        r.source.clear();
        let v: Value = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, ["created_at", "id", "sha256", "size_bytes", "uri"]);
    }

    #[test]
    fn truncation_and_expiry() {
        let mut r = typical();
        assert!(!r.is_truncated());
        r.source.insert("truncated".into(), true.into());
        assert!(r.is_truncated());
        assert!(!r.is_expired_at(datetime!(2026-11-22 08:41:00 UTC)));
        assert!(r.is_expired_at(datetime!(2026-11-22 08:41:01 UTC)));
    }
}
