//! [`TransformError`]: the only ways a transform fails as a whole.
//!
//! Almost nothing is fatal: a layer that trips over its input adds a warning to the report and
//! the result still comes back. What *is* fatal is a store failure for a value that had to be
//! offloaded (a decoded binary, a rule- or schema-marked field): sending the base64 on to the
//! model instead would be exactly the incident Stowage exists to prevent.

use stowage_core::ErrorCode;
use stowage_core::StoreError;

/// Why a transform failed; a failure leaves nothing half-written in the result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransformError {
    /// The configured sink refused or failed to store a value that must not stay inline.
    #[error("cannot store {what} found at {pointer}: {source}")]
    ArtifactStorageFailed {
        /// What was being stored (`"application/pdf binary"`, `"marked field"`, …).
        what: String,
        /// RFC 6901 pointer of the value in the original result (see the report docs).
        pointer: String,
        /// Why the sink refused it.
        #[source]
        source: StoreError,
    },
    /// The input bytes are not JSON.
    #[error("input is not valid json: {0}")]
    InvalidJson(#[source] serde_json::Error),
}

impl TransformError {
    /// The stable error code: `artifact_storage_failed` or `bad_request`.
    pub fn code(&self) -> ErrorCode {
        match self {
            TransformError::ArtifactStorageFailed { .. } => ErrorCode::ArtifactStorageFailed,
            TransformError::InvalidJson(_) => ErrorCode::BadRequest,
        }
    }

    /// The MCP `CallToolResult` a gateway returns in place of the tool's result: `isError`, one
    /// text block with the message, and the code in `structuredContent` and `_meta`.
    pub fn to_call_tool_result(&self) -> serde_json::Value {
        serde_json::json!({
            "content": [{"type": "text", "text": format!("{}: {}", self.code(), self)}],
            "structuredContent": {"error": {"code": self.code(), "message": self.to_string()}},
            "isError": true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages() {
        let e = TransformError::ArtifactStorageFailed {
            what: "application/pdf binary".into(),
            pointer: "/content/0/text#/content".into(),
            source: StoreError::QuotaExceeded { budget: "trace t1".into(), detail: "100 artifacts".into() },
        };
        assert_eq!(e.code(), "artifact_storage_failed");
        let m = e.to_string();
        assert!(m.starts_with("cannot store application/pdf binary found at /content/0/text#/content: trace t1 is full"), "{m}");
        assert!(!m.contains('\n'));
        let r = e.to_call_tool_result();
        assert_eq!(r["isError"], true);
        assert_eq!(r["structuredContent"]["error"]["code"], "artifact_storage_failed");
        let bad = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        assert_eq!(TransformError::InvalidJson(bad).code(), "bad_request");
    }
}
