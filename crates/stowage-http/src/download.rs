//! `GET|HEAD /artifacts/{id}` and `GET /artifacts/{id}/meta`: reading through a signed link.
//!
//! Order of checks, chosen so that nothing leaks: the token first (shape, signature, expiry,
//! operation, target), then the store lookup *as the token's owner*. A valid token for an id
//! its owner does not hold gets the same 404 as an id nobody holds. Then the conditional
//! request headers, in the order RFC 9110 §13.2.2 gives (`If-Match`, `If-Unmodified-Since`,
//! `If-None-Match`, `If-Modified-Since`, then `If-Range` for a `Range`), against the
//! artifact's validators: its sha256 as a strong ETag and its creation time as
//! `Last-Modified` (an artifact's bytes never change).
//!
//! What a browser may do with the bytes is decided here, not by whoever stored them: the
//! recorded media type is parsed again (records older than that rule may hold anything), only
//! a short list of passive types is ever `inline`, and even those become attachments when
//! their first bytes look like markup or script.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use stowage_core::ErrorCode;
use stowage_core::{ArtifactId, ArtifactRef, media_type_essence, normalize_media_type};
use stowage_links::{Operation, TokenError};
use stowage_store::Access;
use tokio_util::io::ReaderStream;

use crate::conditional::{self, Precondition, Validators};
use crate::range::{self, RangeRequest};
use crate::{ApiError, HttpState};

/// Chunk size of streamed bodies: large enough for loopback throughput, small enough that
/// many concurrent downloads stay in constant memory.
const STREAM_CHUNK: usize = 256 * 1024;

/// How many leading bytes are read to look for active content. Browsers that sniff look at
/// the first 512 bytes (WHATWG MIME Sniffing) and old ones at up to 1024; one small read.
const SNIFF_LEN: u64 = 1024;

/// The only types ever shown `inline`: ones a browser renders passively (raster images,
/// audio, video, PDF in its own viewer) or as plain text. Everything else — HTML, SVG, XML,
/// scripts, and every type we do not know — is an attachment, so a new or exotic active type
/// fails safe instead of needing to be on a deny list.
const INLINE_TYPES: &[&str] = &[
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "image/avif",
    "image/bmp",
    "application/pdf",
    "text/plain",
    "text/csv",
    "application/json",
];

/// Whether a media type may be shown inline, judged on its parsed essence only.
pub(crate) fn inline_type(media_type: &str) -> bool {
    let essence = media_type_essence(media_type);
    INLINE_TYPES.contains(&essence.as_str()) || ["audio/", "video/"].iter().any(|top| essence.starts_with(top))
}

/// Markup that makes a browser (or an old one that sniffs, or a viewer that guesses) treat
/// bytes as a document: HTML, SVG, XML and XSLT. Matched case-insensitively anywhere in the
/// first [`SNIFF_LEN`] bytes, because a page hidden after a valid image header is still a
/// page to a sniffer; a false alarm only turns a preview into a download.
const MARKUP: &[&[u8]] = &[
    b"<!doctype html",
    b"<html",
    b"<head",
    b"<body",
    b"<script",
    b"<iframe",
    b"<frameset",
    b"<object",
    b"<embed",
    b"<meta",
    b"<style",
    b"<link",
    b"<form",
    b"<img",
    b"<svg",
    b"<?xml",
    b"<xsl:",
    b"<!entity",
    b"<!--",
];

/// How JavaScript usually starts (after a byte order mark and whitespace).
const SCRIPT_STARTS: &[&[u8]] = &[
    b"function",
    b"(function",
    b"!function",
    b"async function",
    b"var ",
    b"let ",
    b"const ",
    b"import ",
    b"export ",
    b"'use strict'",
    b"\"use strict\"",
    b"window.",
    b"document.",
    b"globalthis.",
];

/// Whether the first bytes of an artifact look like active content (HTML, SVG, XML or
/// JavaScript), whatever type it was stored as. UTF-16 text is checked too, by ignoring its
/// zero bytes.
pub(crate) fn looks_active(head: &[u8]) -> bool {
    let lower = head.to_ascii_lowercase();
    let narrow: Vec<u8> = lower.iter().copied().filter(|b| *b != 0).collect();
    [&lower, &narrow].into_iter().any(|bytes| {
        let has_markup = MARKUP.iter().any(|m| bytes.windows(m.len()).any(|w| w == *m));
        let start = trim_start(bytes);
        has_markup || SCRIPT_STARTS.iter().any(|s| start.starts_with(s))
    })
}

/// Skips byte order marks (UTF-8, UTF-16 with its zeros already gone) and whitespace.
fn trim_start(mut b: &[u8]) -> &[u8] {
    loop {
        b = if let Some(rest) = b.strip_prefix(b"\xef\xbb\xbf") {
            rest
        } else if let Some(rest) = b.strip_prefix(b"\xfe\xff").or_else(|| b.strip_prefix(b"\xff\xfe")) {
            rest
        } else if let Some((first, rest)) = b.split_first()
            && first.is_ascii_whitespace()
        {
            rest
        } else {
            return b;
        };
    }
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

/// Verifies the link for reading `id` and returns the owner's access. A compact token binds an
/// owner without carrying it: it is checked against the owners the store says hold `id` (an
/// id that does not parse, or that nobody holds, has none, so its token is forbidden).
async fn authorize(state: &HttpState, uri: &Uri, id: &str) -> Result<(Access, ArtifactId), ApiError> {
    let token = token_param(uri)?;
    let now = (state.clock)();
    if stowage_links::is_compact(&token) {
        let Ok(parsed) = id.parse::<ArtifactId>() else {
            return Err(TokenError::Forbidden.into());
        };
        let holders = state.store.owners(&parsed).await?;
        let owner = state.signer.ring().verify_compact(&token, id, &holders, now)?;
        return Ok((Access::Owner(owner), parsed));
    }
    let claims = state.signer.ring().verify_for(&token, Operation::Read, id, now)?;
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
    let (access, id) = authorize(&state, &uri, &id).await?;
    let meta = state.store.meta(&access, &id).await?;
    let validators = Validators::of(&meta);
    let mut common = response_headers(&validators);

    match conditional::evaluate(&headers, &validators) {
        Precondition::Failed(why) => {
            let mut resp = ApiError::new(StatusCode::PRECONDITION_FAILED, ErrorCode::BadRequest, why).into_response();
            resp.headers_mut().extend(common);
            return Ok(resp);
        }
        Precondition::NotModified => {
            // No body and no representation metadata (RFC 9110 §15.4.5). Axum would label
            // the empty body `Content-Length: 0`, which a HEAD response sends as is and which
            // claims the artifact is empty: state the real length, as a 200 would.
            if method == Method::HEAD {
                common.insert(header::CONTENT_LENGTH, hv(&meta.size_bytes.to_string()));
            }
            return Ok((StatusCode::NOT_MODIFIED, common).into_response());
        }
        Precondition::Proceed => {}
    }

    let len = meta.size_bytes;
    let range_header = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    // A Range sent with an If-Range that no longer matches asks for the whole, current
    // representation rather than a piece of a different one (RFC 9110 §13.1.5).
    let range_header = range_header.filter(|_| conditional::if_range_holds(&headers, &validators));
    let (status, range) = match range::resolve(range_header, len) {
        RangeRequest::Full => (StatusCode::OK, None),
        RangeRequest::Partial(r) => (StatusCode::PARTIAL_CONTENT, Some(r)),
        RangeRequest::Unsatisfiable => {
            // The body is a JSON error, so it is labelled as one, not as the artifact.
            let mut resp = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                ErrorCode::BadRequest,
                format!("range not satisfiable; the artifact has {len} bytes, ask for bytes 0-{}", len.saturating_sub(1)),
            )
            .into_response();
            common.insert(header::CONTENT_RANGE, hv(&format!("bytes */{len}")));
            resp.headers_mut().extend(common);
            return Ok(resp);
        }
    };

    let media_type = served_type(&meta);
    let inline = inline_type(&media_type) && !head_looks_active(&state, &access, &id, len).await?;
    common.insert(header::CONTENT_TYPE, HeaderValue::from_str(&media_type).unwrap_or(HeaderValue::from_static("application/octet-stream")));
    common.insert(header::CONTENT_DISPOSITION, hv(&content_disposition(if inline { "inline" } else { "attachment" }, &meta)));
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

/// The artifact's recorded media type, parsed again: a record written before the store
/// normalized types may hold a list or garbage, which is served as octet-stream.
fn served_type(meta: &ArtifactRef) -> String {
    meta.mime_type.as_deref().and_then(|m| normalize_media_type(m).ok()).unwrap_or_else(|| "application/octet-stream".to_owned())
}

/// Reads the first bytes of an artifact that would be shown inline and looks for active
/// content in them.
async fn head_looks_active(state: &HttpState, access: &Access, id: &ArtifactId, len: u64) -> Result<bool, ApiError> {
    if len == 0 {
        return Ok(false);
    }
    let head = state.store.get_range(access, id, 0..len.min(SNIFF_LEN)).await?;
    Ok(looks_active(&head))
}

pub(crate) async fn meta(State(state): State<HttpState>, Path(id): Path<String>, uri: Uri) -> Result<Response, ApiError> {
    let (access, id) = authorize(&state, &uri, &id).await?;
    let meta = state.store.meta(&access, &id).await?;
    let mut resp = axum::Json(meta).into_response();
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    Ok(resp)
}

/// Headers every response about this artifact carries (200, 206, 304, 412, 416): its
/// validators and the rules that keep it off shared caches and away from script.
fn response_headers(validators: &Validators) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::ETAG, hv(&validators.etag));
    h.insert(header::LAST_MODIFIED, hv(&httpdate::fmt_http_date(validators.last_modified)));
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
    h
}

/// Invisible characters that change how a name reads: Unicode's format characters (bidi
/// embeddings, overrides, isolates and marks, zero-width joiners and spaces, the BOM, tag
/// characters) and the line and paragraph separators. A name such as `invoice\u{202e}fdp.exe`
/// shows as `invoiceexe.pdf`. Listed by hand from the Unicode Cf, Zl and Zp categories: a
/// table of a dozen ranges does not justify a Unicode-properties dependency.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{00ad}' | '\u{0600}'..='\u{0605}' | '\u{061c}' | '\u{06dd}' | '\u{070f}' | '\u{0890}'..='\u{0891}' | '\u{08e2}'
        | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206f}'
        | '\u{feff}' | '\u{fff9}'..='\u{fffb}' | '\u{110bd}' | '\u{110cd}' | '\u{13430}'..='\u{1343f}' | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d173}'..='\u{1d17a}' | '\u{e0001}' | '\u{e0020}'..='\u{e007f}')
}

/// `attachment; filename="safe.pdf"; filename*=UTF-8''s%C3%A4fe.pdf` — an ASCII fallback with
/// anything risky replaced, plus the exact name percent-encoded (RFC 6266, RFC 8187).
pub(crate) fn content_disposition(kind: &str, meta: &ArtifactRef) -> String {
    let name = meta.filename.as_deref().unwrap_or(meta.id.as_str());
    // Invisible format characters go; path separators and control characters never survive,
    // even encoded.
    let cleaned: String = name
        .chars()
        .filter(|c| !is_invisible_format(*c))
        .map(|c| if c.is_control() || c == '/' || c == '\\' { '_' } else { c })
        .take(200)
        .collect();
    let cleaned = cleaned.trim_start_matches('.').trim();
    let cleaned = if cleaned.is_empty() { meta.id.as_str() } else { cleaned };
    let ascii: String = cleaned.chars().map(|c| if c.is_ascii_alphanumeric() || " ._-()".contains(c) { c } else { '_' }).collect();
    const ATTR: &AsciiSet = &NON_ALPHANUMERIC.remove(b'.').remove(b'-').remove(b'_');
    format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{}", utf8_percent_encode(cleaned, ATTR))
}

fn hv(s: &str) -> HeaderValue {
    // Every value built here is ASCII (numbers, hex digests, dates, sanitised names).
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
    fn dispositions_drop_invisible_format_characters() {
        for (name, want) in [
            // Shown as "invoiceexe.pdf" by a right-to-left override.
            ("invoice\u{202e}fdp.exe", "attachment; filename=\"invoicefdp.exe\"; filename*=UTF-8''invoicefdp.exe"),
            ("a\u{2066}b\u{2069}\u{200f}\u{200b}\u{feff}.png", "attachment; filename=\"ab.png\"; filename*=UTF-8''ab.png"),
            ("line\u{2028}sep\u{0085}.txt", "attachment; filename=\"linesep_.txt\"; filename*=UTF-8''linesep_.txt"),
            ("tag\u{e0041}s.txt", "attachment; filename=\"tags.txt\"; filename*=UTF-8''tags.txt"),
            ("\u{202e}\u{202d}", "attachment; filename=\"art_aaaaaaaaaaaaaaaa\"; filename*=UTF-8''art_aaaaaaaaaaaaaaaa"),
            // Visible non-ASCII stays, encoded.
            ("\u{05e9}\u{05dc}\u{05d5}\u{05dd}.pdf", "attachment; filename=\"____.pdf\"; filename*=UTF-8''%D7%A9%D7%9C%D7%95%D7%9D.pdf"),
        ] {
            assert_eq!(content_disposition("attachment", &meta_named(Some(name))), want, "{name:?}");
        }
    }

    #[test]
    fn only_passive_types_are_inline() {
        for m in ["image/png", "IMAGE/PNG", "text/plain; charset=utf-8", "application/pdf", "audio/wav", "video/mp4", "application/json"] {
            assert!(inline_type(m), "{m}");
        }
        for m in [
            "text/html",
            "TEXT/HTML; charset=utf-8",
            "image/svg+xml",
            "application/xml",
            "application/atom+xml",
            "text/javascript",
            "application/xhtml+xml",
            "text/xsl",
            "multipart/x-mixed-replace",
            "application/octet-stream",
            "application/x-unknown",
            "image/png,text/html",
            "",
        ] {
            assert!(!inline_type(m), "{m}");
        }
    }

    #[test]
    fn active_content_is_found_in_the_bytes() {
        let mut png_then_html = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png_then_html.extend_from_slice(b"<HTML><body onload=alert(1)>");
        let utf16: Vec<u8> = "\u{feff}<html>".encode_utf16().flat_map(u16::to_le_bytes).collect();
        for active in [
            &b"<!DOCTYPE html><p>hi"[..],
            b"  \n<script>alert(1)</script>",
            b"\xef\xbb\xbf<svg xmlns='http://www.w3.org/2000/svg'/>",
            b"<?xml version='1.0'?><x/>",
            b"<?XML-STYLESHEET href='x.xsl'?>",
            &png_then_html,
            &utf16,
            b"function f() { return document.cookie }",
            b"\n  (function(){})()",
            b"'use strict'; fetch('/')",
            b"const x = 1;",
        ] {
            assert!(looks_active(active), "{:?}", String::from_utf8_lossy(active));
        }
        for passive in [
            &b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01"[..],
            b"%PDF-1.7\n%\xe2\xe3",
            b"plain words, a < b and c > d",
            b"{\"a\": 1, \"b\": [1, 2]}",
            b"name,price\nwidget,3",
            b"",
        ] {
            assert!(!looks_active(passive), "{:?}", String::from_utf8_lossy(passive));
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
