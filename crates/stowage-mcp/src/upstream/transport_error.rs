//! Why an HTTP or SSE upstream could not be set up or reached: a typed error, so that the
//! connection code, `check-config` and the model's "upstream unavailable" line all say the
//! same thing, and callers can tell a configuration fault (headers, CA file) from an upstream
//! that is down or speaks another transport.

use std::path::PathBuf;

use reqwest::StatusCode;

/// The hint given wherever an SSE upstream looks like a Streamable HTTP one.
const TRY_STREAMABLE: &str = "if it speaks Streamable HTTP, drop \"type\": \"sse\"";

/// Whether `status`, the answer to a legacy SSE transport's `GET`, is what a Streamable HTTP
/// server answers there: 400 (the TypeScript and Python SDKs, without a session id), 404 or
/// 405 (no GET stream). Such an upstream gets [`TRY_STREAMABLE`].
pub(crate) fn sse_get_looks_streamable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 400 | 404 | 405)
}

/// Why an HTTP or SSE transport could not be set up or reached.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A configured header whose name or value is not valid in HTTP.
    #[error("header {name:?}: {reason}")]
    Header {
        /// The header's name as configured.
        name: String,
        /// What the HTTP library found wrong with it.
        reason: String,
    },
    /// `tls_ca_file` could not be read.
    #[error("cannot read tls_ca_file {}: {source}", path.display())]
    CaFile {
        /// The path as configured.
        path: PathBuf,
        /// Why reading it failed.
        #[source]
        source: std::io::Error,
    },
    /// `tls_ca_file` is not a PEM bundle of certificates.
    #[error("tls_ca_file {} is not PEM certificates: {reason}", path.display())]
    CaNotPem {
        /// The path as configured.
        path: PathBuf,
        /// What the PEM parser said.
        reason: String,
    },
    /// `tls_ca_file` parses but holds no certificate.
    #[error("tls_ca_file {} holds no certificate", path.display())]
    CaEmpty {
        /// The path as configured.
        path: PathBuf,
    },
    /// The HTTP client could not be built (its TLS setup).
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// The configured URL does not parse.
    #[error("url {url:?}: {reason}")]
    Url {
        /// The URL as configured.
        url: String,
        /// What the URL parser said.
        reason: String,
    },
    /// The upstream took longer than the limit to answer `request`.
    #[error("did not answer {request} within {secs:.1}s")]
    NoAnswer {
        /// What was sent, as the message names it (`initialize`, `GET <url>` of an SSE stream).
        request: String,
        /// The limit that passed, in seconds.
        secs: f64,
    },
    /// The request could not be sent: a refused connection, DNS, TLS (with the fix when it is
    /// a certificate problem).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The upstream refused the gateway's credentials.
    #[error("refused {request} with HTTP {status}: check its headers or bearer token")]
    Refused {
        /// What was sent, as the message names it.
        request: String,
        /// 401 or 403.
        status: StatusCode,
    },
    /// Any other status that is not success; `sse_hint`: the status (400, 404, 405 to an SSE GET)
    /// suggests the server speaks Streamable HTTP instead.
    #[error("answered {request} with HTTP {status}{}", if *.sse_hint { format!(" ({TRY_STREAMABLE})") } else { String::new() })]
    Status {
        /// What was sent, as the message names it.
        request: String,
        /// The status the upstream answered with.
        status: StatusCode,
        /// Whether the status suggests a Streamable HTTP server configured as SSE (the
        /// message then says how to fix the entry).
        sse_hint: bool,
    },
    /// The SSE transport's GET answered with something that is not an event stream.
    #[error("{request} is not an SSE stream (content-type {content_type:?}); {TRY_STREAMABLE}")]
    NotSse {
        /// What was sent, as the message names it.
        request: String,
        /// The `Content-Type` the upstream answered with (empty when it sent none).
        content_type: String,
    },
    /// An SSE event before the endpoint was over `gateway.max_message_bytes`.
    #[error("sent an SSE event over the {max_bytes} byte limit (gateway.max_message_bytes) before its endpoint")]
    EventTooLong {
        /// The limit, `gateway.max_message_bytes`.
        max_bytes: usize,
    },
    /// The SSE stream broke before its `endpoint` event.
    #[error("SSE stream failed before its endpoint event: {0}")]
    StreamFailed(String),
    /// The SSE stream ended before its `endpoint` event.
    #[error("closed its SSE stream before sending the endpoint event")]
    StreamClosed,
    /// No `endpoint` event arrived within the connect timeout.
    #[error("sent no endpoint event within {secs:.1}s of opening {url} ({TRY_STREAMABLE})")]
    NoEndpoint {
        /// The SSE stream's URL.
        url: String,
        /// The connect timeout that passed, in seconds.
        secs: f64,
    },
    /// The `endpoint` event's data is not a URL.
    #[error("sent an endpoint that is not a URL ({text:?}): {reason}")]
    EndpointNotUrl {
        /// The event's data as sent.
        text: String,
        /// What the URL parser said.
        reason: String,
    },
    /// The `endpoint` event names another origin, where the gateway never posts messages (they
    /// would carry the configured headers, credentials included, to another server).
    #[error("sent an endpoint on another origin ({endpoint}); messages are only posted to the stream's own origin, {stream}")]
    EndpointOrigin {
        /// The endpoint the upstream named.
        endpoint: String,
        /// The origin of the SSE stream, the only one messages are posted to.
        stream: String,
    },
}
