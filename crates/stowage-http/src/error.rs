//! [`ApiError`]: every refusal as `{"error":{"code","message"}}` with a stable code.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use stowage_core::ErrorCode;
use stowage_links::TokenError;
use stowage_store::StoreError;

/// An HTTP error with a stable code and a message safe to show a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable wire code (`artifact_not_found`, `bad_request`, …).
    pub code: &'static str,
    /// One line for the client; never a server path or an internal error.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: impl Into<&'static str>, message: impl Into<String>) -> Self {
        ApiError { status, code: code.into(), message: message.into() }
    }

    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, message)
    }

    /// 403 `artifact_forbidden`: a token for something else.
    pub fn forbidden() -> Self {
        ApiError::new(StatusCode::FORBIDDEN, ErrorCode::ArtifactForbidden, "this link is not valid for this artifact")
    }

    /// 404 `artifact_not_found`: the same for every reason, so nothing leaks.
    pub fn not_found() -> Self {
        ApiError::new(StatusCode::NOT_FOUND, ErrorCode::ArtifactNotFound, "artifact not found or already cleaned up")
    }
}

impl From<TokenError> for ApiError {
    fn from(e: TokenError) -> Self {
        match e {
            TokenError::NotAToken => ApiError::bad_request("the token parameter is not a link token"),
            TokenError::Missing => ApiError::new(StatusCode::FORBIDDEN, ErrorCode::ArtifactForbidden, e.to_string()),
            TokenError::Forbidden => ApiError::forbidden(),
            TokenError::Expired { .. } => ApiError::new(StatusCode::GONE, ErrorCode::ArtifactUrlExpired, e.to_string()),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::NotFound { .. } => ApiError::not_found(),
            // An artifact past its TTL is gone for good: the same 404 as never-existing, so a
            // link cannot be used to learn that something once was there.
            StoreError::Expired { .. } => ApiError::not_found(),
            StoreError::InvalidInput(m) => ApiError::bad_request(m.clone()),
            StoreError::TooLarge { .. } | StoreError::QuotaExceeded { .. } => {
                // Limits are the caller's to know about; the message names the limit only.
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::BadRequest, e.to_string())
            }
            _ => {
                tracing::error!(error = %e, "artifact storage failed");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ArtifactStorageFailed, "artifact storage failed; try again later")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        let mut resp = (self.status, Json(body)).into_response();
        resp.headers_mut().insert("cache-control", axum::http::HeaderValue::from_static("no-store"));
        resp
    }
}
