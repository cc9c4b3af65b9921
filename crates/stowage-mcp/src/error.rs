//! [`GatewayError`]: why the gateway could not answer a request, with the JSON-RPC code each
//! reason maps onto (one mapping, here, rather than `(code, message)` pairs at every site).
//!
//! An upstream's own JSON-RPC error is not a `GatewayError`: it is relayed to the client as
//! the upstream sent it. Messages are what the client reads: they name what went wrong and,
//! where there is one, what to do about it.

use crate::jsonrpc::{Id, Message, code};
use crate::upstream::CallError;

/// Why the gateway could not answer a request; each maps to one JSON-RPC error
/// ([`GatewayError::code`]) whose message is the one line shown here.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    /// No upstream (nor the gateway itself) offers a tool by this name.
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// An in-process caller asked for a host profile no configuration names.
    #[error(
        "unknown host profile {0:?}: the built-in ones are default, claude-desktop, claude-code, codex, vscode, connectors and sdk, plus any [[hosts]] adds"
    )]
    UnknownHost(String),
    /// No upstream offers a prompt by this name.
    #[error("unknown prompt: {0}")]
    UnknownPrompt(String),
    /// No upstream (nor the artifact store) has a resource at this URI.
    #[error("resource not found: {0}")]
    ResourceNotFound(String),
    /// The method is not one the gateway answers or relays.
    #[error("method not found: {0}")]
    MethodNotFound(String),
    /// The request's params are wrong; the message says what and how to fix it.
    #[error("{0}")]
    InvalidParams(String),
    /// A retried request's `requestState` names no exchange this caller has open (it
    /// expired, was used, or belongs to someone else).
    #[error("unknown or expired requestState; send the request again without it")]
    UnknownRequestState,
    /// The upstream could not be reached or did not answer.
    #[error(transparent)]
    Upstream(#[from] CallError),
    /// The upstream answered the call with a JSON-RPC error (in-process callers; a client
    /// gets the upstream's own error message relayed).
    #[error("{tool} was refused by its server: {message} (code {code})")]
    Refused {
        /// The tool as called.
        tool: String,
        /// The upstream's JSON-RPC error code.
        code: i64,
        /// The upstream's error message.
        message: String,
    },
    /// A stateless upstream needed input from the client (elicitation, sampling) and the
    /// client did not give it.
    #[error("the client did not answer {method}: {reason}")]
    ClientDidNotAnswer {
        /// The method put to the client (`elicitation/create`).
        method: String,
        /// The client's error, or why there was no answer.
        reason: String,
    },
    /// A bug met while handling the request; the gateway and the session carry on.
    #[error("internal error while handling {method}; the gateway carries on (details are in its log)")]
    Panicked {
        /// The method whose handler panicked.
        method: String,
    },
    /// Anything else that went wrong inside the gateway (an upstream reply it cannot use).
    #[error("internal error: {0}")]
    Internal(String),
    /// An upstream's reply the gateway will not relay (content it could not store, or that is
    /// malformed); the message says which and why.
    #[error("{0}")]
    NotRelayed(String),
}

impl GatewayError {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            GatewayError::UnknownTool(_)
            | GatewayError::UnknownHost(_)
            | GatewayError::UnknownPrompt(_)
            | GatewayError::InvalidParams(_) => code::INVALID_PARAMS,
            GatewayError::UnknownRequestState => code::INVALID_PARAMS,
            GatewayError::ResourceNotFound(_) => code::RESOURCE_NOT_FOUND,
            GatewayError::MethodNotFound(_) => code::METHOD_NOT_FOUND,
            GatewayError::Upstream(e) => e.code(),
            GatewayError::Refused { code, .. } => *code,
            GatewayError::ClientDidNotAnswer { .. } | GatewayError::Panicked { .. } | GatewayError::Internal(_) => code::INTERNAL_ERROR,
            GatewayError::NotRelayed(_) => code::INTERNAL_ERROR,
        }
    }

    /// The error response to request `id`.
    pub fn to_message(&self, id: Id) -> Message {
        Message::error(id, self.code(), self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codes_and_messages() {
        let e = GatewayError::UnknownTool("nope".into());
        assert_eq!((e.code(), e.to_string()), (code::INVALID_PARAMS, "unknown tool: nope".to_owned()));
        let up = GatewayError::from(CallError::Timeout { name: "fx".into(), method: "tools/call".into(), secs: 1.5 });
        assert_eq!(up.code(), code::REQUEST_TIMEOUT);
        assert_eq!(up.to_string(), "upstream fx did not answer tools/call within 1.5s");
        let m = GatewayError::MethodNotFound("x/y".into()).to_message(json!(7));
        assert_eq!(m.error_code(), Some(code::METHOD_NOT_FOUND));
    }
}
