//! `GET|HEAD /artifacts/{id}` and `GET /artifacts/{id}/meta`: reading through a signed link.
//!
//! Order of checks, chosen so that nothing leaks: the token first (shape, signature, expiry,
//! operation, target), then the store lookup *as the token's owner*. A valid token for an id
//! its owner does not hold gets the same 404 as an id nobody holds.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use stowage_core::{ArtifactId, ArtifactRef};
use stowage_links::{Operation, TokenError};
use stowage_store::Access;
use tokio_util::io::ReaderStream;

use crate::range::{self, RangeRequest};
use crate::{ApiError, HttpState};

/// Chunk size of streamed bodies: large enough for loopback throughput, small enough that
/// many concurrent downloads stay in constant memory.
const STREAM_CHUNK: usize = 256 * 1024;

/// Types a browser would execute or render as a document on our origin: always downloaded as
/// attachments and sandboxed, whatever the artifact claims to be.
const ACTIVE_TYPES: &[&str] = &[
    "text/html",
    "application/xhtml+xml",
    "image/svg+xml",
    "text/xml",
    "application/xml",
    "text/javascript",
    "application/javascript",
    "application/ecmascript",
    "text/ecmascript",
    "application/x-javascript",
    "text/xsl",
    "application/xslt+xml",
];

pub(crate) fn is_active(mime: &str) -> bool {
    let base = mime.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    ACTIVE_TYPES.contains(&base.as_str()) || base.ends_with("+xml") || base.is_empty()
}

/// The `token` query parameter, percent-decoded.
pub(crate) fn token_param(uri: &Uri) -> Result<String, TokenError> {
    let query = uri.query().unwrap_or("");
    for pair in query.split('&') {
        if let Some(value) = pair.strip_prefix("token=") {
            let decoded = percent_decode_str(value).decode_utf8().map_err(|_| TokenError::NotAToken)?;
            return Ok(decoded.into_owned());
        }
    }
    Err(TokenError::Missing)
}

/// Verifies the link for reading `id` and returns the owner's access.
fn authorize(state: &HttpState, uri: &Uri, id: &str) -> Result<(Access, ArtifactId), ApiError> {
    let token = token_param(uri)?;
    let claims = state.signer.ring().verify_for(&token, Operation::Read, id, (state.clock)())?;
    // The token's target is an id we minted, so it parses; a hand-made path that does not is
    // simply not found.
    let id: ArtifactId = id.parse().map_err(|_| ApiError::not_found())?;
    Ok((Access::Owner(claims.owner), id))
}

pub(crate) async fn artifact(
    State(state): State<HttpState>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (access, id) = authorize(&state, &uri, &id)?;
    let meta = state.store.meta(&access, &id).await?;
    let mut common = representation_headers(&meta);

    let etag = common.get(header::ETAG).cloned();
    if let (Some(inm), Some(etag)) = (headers.get(header::IF_NONE_MATCH), etag)
        && if_none_match_hits(inm, &etag)
    {
        return Ok((StatusCode::NOT_MODIFIED, common).into_response());
    }

    let len = meta.size_bytes;
    let range_header = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, range) = match range::resolve(range_header, len) {
        RangeRequest::Full => (StatusCode::OK, None),
        RangeRequest::Partial(r) => (StatusCode::PARTIAL_CONTENT, Some(r)),
        RangeRequest::Unsatisfiable => {
            common.insert(header::CONTENT_RANGE, hv(&format!("bytes */{len}")));
            let mut resp = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "bad_request",
                format!("range not satisfiable; the artifact has {len} bytes"),
            )
            .into_response();
            resp.headers_mut().extend(common);
            return Ok(resp);
        }
    };
    let body_len = range.as_ref().map_or(len, |r| r.end - r.start);
    common.insert(header::CONTENT_LENGTH, hv(&body_len.to_string()));
    if let Some(r) = &range {
        common.insert(header::CONTENT_RANGE, hv(&format!("bytes {}-{}/{len}", r.start, r.end - 1)));
    }

    if method == Method::HEAD {
        return Ok((status, common).into_response());
    }
    let reader = state.store.open(&access, &id, range).await?;
    let body = Body::from_stream(ReaderStream::with_capacity(reader.body, STREAM_CHUNK));
    let mut resp = (status, common).into_response();
    *resp.body_mut() = body;
    Ok(resp)
}

pub(crate) async fn meta(State(state): State<HttpState>, Path(id): Path<String>, uri: Uri) -> Result<Response, ApiError> {
    let (access, id) = authorize(&state, &uri, &id)?;
    let meta = state.store.meta(&access, &id).await?;
    let mut resp = axum::Json(meta).into_response();
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    Ok(resp)
}

/// Headers every response about this artifact carries (200, 206, 304, 416).
fn representation_headers(meta: &ArtifactRef) -> HeaderMap {
    let mime = meta.mime_type.as_deref().unwrap_or("application/octet-stream");
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_str(mime).unwrap_or(HeaderValue::from_static("application/octet-stream")));
    h.insert(header::ETAG, hv(&format!("\"{}\"", meta.sha256)));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // The URL holds a bearer token: keep it out of shared caches and Referer headers.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-cache"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Nothing served from here may run script on the gateway's origin.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'"),
    );
    let disposition = if is_active(mime) { "attachment" } else { "inline" };
    h.insert(header::CONTENT_DISPOSITION, hv(&content_disposition(disposition, meta)));
    h
}

/// `attachment; filename="safe.pdf"; filename*=UTF-8''s%C3%A4fe.pdf` — an ASCII fallback with
/// anything risky replaced, plus the exact name percent-encoded (RFC 6266, RFC 8187).
pub(crate) fn content_disposition(kind: &str, meta: &ArtifactRef) -> String {
    let name = meta.filename.as_deref().unwrap_or(meta.id.as_str());
    // Path separators and control characters never survive, even encoded.
    let cleaned: String = name.chars().map(|c| if c.is_control() || c == '/' || c == '\\' { '_' } else { c }).take(200).collect();
    let cleaned = cleaned.trim_start_matches('.').trim();
    let cleaned = if cleaned.is_empty() { meta.id.as_str() } else { cleaned };
    let ascii: String = cleaned.chars().map(|c| if c.is_ascii_alphanumeric() || " ._-()".contains(c) { c } else { '_' }).collect();
    const ATTR: &AsciiSet = &NON_ALPHANUMERIC.remove(b'.').remove(b'-').remove(b'_');
    format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{}", utf8_percent_encode(cleaned, ATTR))
}

fn if_none_match_hits(inm: &HeaderValue, etag: &HeaderValue) -> bool {
    let Ok(inm) = inm.to_str() else { return false };
    let etag = etag.to_str().unwrap_or("");
    inm.split(',').map(str::trim).any(|t| t == "*" || t == etag || t.strip_prefix("W/") == Some(etag))
}

fn hv(s: &str) -> HeaderValue {
    // Every value built here is ASCII (numbers, hex digests, sanitised names).
    HeaderValue::from_str(s).expect("ascii header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta_named(name: Option<&str>) -> ArtifactRef {
        let sha = "a".repeat(64);
        let id = ArtifactId::from_content(None, &sha);
        ArtifactRef {
            uri: id.uri(),
            id,
            mime_type: None,
            size_bytes: 1,
            filename: name.map(str::to_owned),
            sha256: sha,
            scope: Default::default(),
            source: Default::default(),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
            expires_at: None,
        }
    }

    #[test]
    fn dispositions_are_safe() {
        for (name, want) in [
            (Some("report.pdf"), "attachment; filename=\"report.pdf\"; filename*=UTF-8''report.pdf"),
            (Some("../../etc/passwd"), "attachment; filename=\"_.._etc_passwd\"; filename*=UTF-8''_.._etc_passwd"),
            (Some("a\"b\r\nX-Evil: 1.txt"), "attachment; filename=\"a_b__X-Evil_ 1.txt\"; filename*=UTF-8''a%22b__X-Evil%3A%201.txt"),
            (Some("säfe.png"), "attachment; filename=\"s_fe.png\"; filename*=UTF-8''s%C3%A4fe.png"),
            (Some("..."), "attachment; filename=\"art_aaaaaaaaaaaaaaaa\"; filename*=UTF-8''art_aaaaaaaaaaaaaaaa"),
            (None, "attachment; filename=\"art_aaaaaaaaaaaaaaaa\"; filename*=UTF-8''art_aaaaaaaaaaaaaaaa"),
        ] {
            assert_eq!(content_disposition("attachment", &meta_named(name)), want, "{name:?}");
        }
    }

    #[test]
    fn active_types() {
        for m in
            ["text/html", "TEXT/HTML; charset=utf-8", "image/svg+xml", "application/xml", "application/atom+xml", "text/javascript", ""]
        {
            assert!(is_active(m), "{m}");
        }
        for m in ["image/png", "text/plain", "application/json", "audio/wav", "application/zip"] {
            assert!(!is_active(m), "{m}");
        }
    }

    #[test]
    fn tokens_from_queries() {
        let uri: Uri = "/artifacts/x?a=1&token=v1.abc%2Ddef&b=2".parse().unwrap();
        assert_eq!(token_param(&uri).unwrap(), "v1.abc-def");
        let uri: Uri = "/artifacts/x".parse().unwrap();
        assert_eq!(token_param(&uri), Err(TokenError::Missing));
    }
}
