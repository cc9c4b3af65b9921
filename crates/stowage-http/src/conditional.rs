//! Conditional requests on an artifact (RFC 9110 §13): `If-Match`, `If-Unmodified-Since`,
//! `If-None-Match`, `If-Modified-Since` and `If-Range`, evaluated in the order §13.2.2 gives.
//!
//! An artifact's bytes never change, so its validators are fixed: the sha256 as a strong
//! ETag and the record's creation time, to the second, as `Last-Modified`. Dates are parsed
//! by `httpdate` (the crate hyper uses), which accepts the three formats HTTP allows; a value
//! that is not a valid date is ignored, as the RFC says.

use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderName, header};
use stowage_core::ArtifactRef;

/// What a request's preconditions say to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Serve the request (200, 206 or 416).
    Proceed,
    /// 304: the client's copy is current.
    NotModified,
    /// 412, with a message saying which precondition failed and what to send instead.
    Failed(String),
}

/// An artifact's validators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Validators {
    /// `"<sha256>"`, quoted: a strong entity tag.
    pub etag: String,
    /// When the record was created, to the whole second (HTTP dates have no finer unit).
    pub last_modified: SystemTime,
}

impl Validators {
    pub(crate) fn of(meta: &ArtifactRef) -> Validators {
        let secs = u64::try_from(meta.created_at.unix_timestamp()).unwrap_or(0);
        Validators { etag: format!("\"{}\"", meta.sha256), last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(secs) }
    }
}

/// All values of a header, joined as one comma-separated list (a list header may be sent on
/// several lines); `None` when it is absent. A value that is not visible ASCII becomes an
/// empty string, which matches nothing.
fn list(headers: &HeaderMap, name: HeaderName) -> Option<String> {
    let values: Vec<&str> = headers.get_all(name).iter().map(|v| v.to_str().unwrap_or("")).collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// A date header's value, when present and a valid HTTP-date.
fn date(headers: &HeaderMap, name: HeaderName) -> Option<SystemTime> {
    headers.get(name)?.to_str().ok().and_then(|v| httpdate::parse_http_date(v.trim()).ok())
}

/// Whether an entity-tag list names `etag`: `*`, or the tag itself; with `weak`, also its
/// `W/` form (weak comparison, for `If-None-Match`). Strong comparison (for `If-Match`)
/// never matches a weak tag.
fn names(list: &str, etag: &str, weak: bool) -> bool {
    list.split(',').map(str::trim).any(|t| t == "*" || t == etag || (weak && t.strip_prefix("W/") == Some(etag)))
}

/// Evaluates the preconditions of a GET or HEAD (RFC 9110 §13.2.2, steps 1 to 4).
pub(crate) fn evaluate(headers: &HeaderMap, v: &Validators) -> Precondition {
    if let Some(im) = list(headers, header::IF_MATCH) {
        if !names(&im, &v.etag, false) {
            return Precondition::Failed(format!(
                "If-Match names none of this artifact's entity tags; its ETag is {}: send that or drop If-Match",
                v.etag
            ));
        }
    } else if let Some(since) = date(headers, header::IF_UNMODIFIED_SINCE)
        && v.last_modified > since
    {
        return Precondition::Failed(format!(
            "the artifact was stored after If-Unmodified-Since (it is from {}); send a later date or drop the header",
            httpdate::fmt_http_date(v.last_modified)
        ));
    }
    if let Some(inm) = list(headers, header::IF_NONE_MATCH) {
        if names(&inm, &v.etag, true) {
            return Precondition::NotModified;
        }
    } else if let Some(since) = date(headers, header::IF_MODIFIED_SINCE)
        && v.last_modified <= since
    {
        return Precondition::NotModified;
    }
    Precondition::Proceed
}

/// Whether a `Range` may be honoured: true without `If-Range`, or when `If-Range` holds the
/// artifact's strong ETag or exactly its `Last-Modified` date (RFC 9110 §13.1.5). A weak tag,
/// another tag, another date or garbage mean the client's piece belongs to something else:
/// it gets the whole artifact.
pub(crate) fn if_range_holds(headers: &HeaderMap, v: &Validators) -> bool {
    let Some(value) = headers.get(header::IF_RANGE) else { return true };
    let Ok(value) = value.to_str().map(str::trim) else { return false };
    if value.starts_with('"') || value.starts_with("W/") {
        return value == v.etag;
    }
    httpdate::parse_http_date(value).is_ok_and(|d| d == v.last_modified)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const ETAG: &str = "\"abc\"";
    const MODIFIED: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const BEFORE: &str = "Sun, 06 Nov 1994 08:49:36 GMT";
    const AFTER: &str = "Sun, 06 Nov 1994 08:49:38 GMT";

    fn v() -> Validators {
        Validators { etag: ETAG.into(), last_modified: httpdate::parse_http_date(MODIFIED).unwrap() }
    }

    fn headers(pairs: &[(HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, val) in pairs {
            h.append(k.clone(), HeaderValue::from_str(val).unwrap());
        }
        h
    }

    #[test]
    fn preconditions_in_rfc_order() {
        use Precondition::*;
        let failed = |p: Precondition| matches!(p, Failed(_));
        let eval = |pairs: &[(HeaderName, &str)]| evaluate(&headers(pairs), &v());
        assert_eq!(eval(&[]), Proceed);
        // If-Match: strong comparison.
        for ok in ["\"abc\"", "*", "\"x\", \"abc\"", " \"abc\" "] {
            assert_eq!(eval(&[(header::IF_MATCH, ok)]), Proceed, "{ok}");
        }
        for bad in ["\"x\"", "W/\"abc\"", "abc", ""] {
            assert!(failed(eval(&[(header::IF_MATCH, bad)])), "{bad}");
        }
        // Sent on two lines: still one list.
        assert_eq!(eval(&[(header::IF_MATCH, "\"x\""), (header::IF_MATCH, "\"abc\"")]), Proceed);
        // If-Unmodified-Since: only when there is no If-Match; bad dates are ignored.
        assert_eq!(eval(&[(header::IF_UNMODIFIED_SINCE, MODIFIED)]), Proceed);
        assert_eq!(eval(&[(header::IF_UNMODIFIED_SINCE, AFTER)]), Proceed);
        assert!(failed(eval(&[(header::IF_UNMODIFIED_SINCE, BEFORE)])));
        assert_eq!(eval(&[(header::IF_UNMODIFIED_SINCE, "yesterday")]), Proceed);
        assert_eq!(eval(&[(header::IF_MATCH, "*"), (header::IF_UNMODIFIED_SINCE, BEFORE)]), Proceed);
        // If-None-Match: weak comparison; it wins over If-Modified-Since.
        for hit in ["\"abc\"", "W/\"abc\"", "*", "\"x\",W/\"abc\""] {
            assert_eq!(eval(&[(header::IF_NONE_MATCH, hit)]), NotModified, "{hit}");
        }
        assert_eq!(eval(&[(header::IF_NONE_MATCH, "\"x\"")]), Proceed);
        assert_eq!(eval(&[(header::IF_NONE_MATCH, "\"x\""), (header::IF_MODIFIED_SINCE, AFTER)]), Proceed);
        assert_eq!(eval(&[(header::IF_MODIFIED_SINCE, MODIFIED)]), NotModified);
        assert_eq!(eval(&[(header::IF_MODIFIED_SINCE, BEFORE)]), Proceed);
        assert_eq!(eval(&[(header::IF_MODIFIED_SINCE, "not a date")]), Proceed);
        // A failed If-Match beats a matching If-None-Match.
        assert!(failed(eval(&[(header::IF_MATCH, "\"x\""), (header::IF_NONE_MATCH, "\"abc\"")])));
        let Failed(m) = eval(&[(header::IF_MATCH, "\"x\"")]) else { unreachable!() };
        assert!(m.contains("\"abc\"") && !m.contains('\n'), "{m}");
    }

    #[test]
    fn if_range() {
        let holds = |val: &str| if_range_holds(&headers(&[(header::IF_RANGE, val)]), &v());
        assert!(if_range_holds(&HeaderMap::new(), &v()));
        assert!(holds(ETAG) && holds(MODIFIED) && holds(" \"abc\" "));
        for stale in ["\"x\"", "W/\"abc\"", BEFORE, AFTER, "garbage", "*"] {
            assert!(!holds(stale), "{stale}");
        }
    }
}
