//! [`ToolError`]: a tool call's error as the model reads it (a code and a message that says
//! what to fix), shared by the gateway's own tools and blob chaining, which refuses a call's
//! inputs with it.

use serde_json::{Value, json};
use stowage_http::ApiError;

/// A tool error: its stable wire code (`artifact_not_found`, `bad_request`, …) and a message
/// that says what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub(crate) struct ToolError {
    pub code: &'static str,
    pub message: String,
}

impl ToolError {
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ToolError { code: stowage_core::ErrorCode::BadRequest.as_str(), message: message.into() }
    }

    /// The CallToolResult: `isError`, one text block naming the code, no `structuredContent`
    /// (which would have to match the tool's `outputSchema`).
    pub(crate) fn into_result(self) -> Value {
        json!({"content": [{"type": "text", "text": self.to_string()}], "isError": true})
    }
}

impl From<ApiError> for ToolError {
    /// The HTTP layer's mapping: another owner's id, an expired one and a missing one are the
    /// same `artifact_not_found`, and storage failures carry no internals.
    fn from(e: ApiError) -> Self {
        ToolError { code: e.code, message: e.message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_no_structured_content() {
        let e = ToolError::bad_request("x is wrong").into_result();
        assert_eq!(e, json!({"content": [{"type": "text", "text": "bad_request: x is wrong"}], "isError": true}));
    }
}
