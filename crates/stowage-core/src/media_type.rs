//! Media types as Stowage records and serves them: exactly one `type/subtype`, lowercased,
//! with at most a `charset` parameter; anything else a producer claimed is dropped or refused.
//!
//! The type of an artifact usually comes from an upstream MCP server (`mimeType` of a content
//! block), which is not trusted: a value such as `image/png,text/html` was stored as given,
//! sent back verbatim as `Content-Type`, and a browser, which takes the last type of a list,
//! rendered the bytes as a page on the gateway's origin. So a claimed type is parsed (with the
//! `mime` crate, as hyper and reqwest do) and rebuilt from its parts: the output is always a
//! single, well-formed type, and parameters that browsers or tools act on (`boundary`,
//! `name`, `codecs`, ...) never come through.

/// Longest media type accepted, in bytes, before any parsing: RFC 6838 caps type and subtype
/// names at 127 characters each, and nothing legitimate needs more.
pub const MAX_MEDIA_TYPE_LEN: usize = 255;

/// Longest `charset` value kept (IANA charset names are at most 40 characters).
const MAX_CHARSET_LEN: usize = 40;

/// Why a claimed media type was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaTypeError {
    /// Longer than [`MAX_MEDIA_TYPE_LEN`] bytes.
    #[error("media type is {len} bytes, over the limit of {MAX_MEDIA_TYPE_LEN}; send a single short type/subtype")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Several types separated by commas.
    #[error("media type {0:?} is a list; send exactly one type/subtype")]
    List(String),
    /// `*/*` or `image/*`: a pattern, not the content's type.
    #[error("media type {0:?} is a wildcard; send the concrete type of the content")]
    Wildcard(String),
    /// Not `type/subtype` with valid parameters.
    #[error("media type {value:?} is not a valid type/subtype ({reason}); send one such as application/pdf")]
    Invalid {
        /// The value as claimed.
        value: String,
        /// What the parser found wrong.
        reason: String,
    },
}

/// Parses a claimed media type and rebuilds it safely: `type/subtype` lowercased, plus
/// `; charset=<name>` when the claim had a well-formed charset. Every other parameter is
/// dropped. Lists, wildcards, malformed and overlong values are refused.
///
/// ```
/// use stowage_core::normalize_media_type;
/// assert_eq!(normalize_media_type("Text/HTML; Charset=\"UTF-8\"; q=1").unwrap(), "text/html; charset=utf-8");
/// assert_eq!(normalize_media_type("image/png; name=x.html").unwrap(), "image/png");
/// assert!(normalize_media_type("image/png,text/html").is_err());
/// ```
pub fn normalize_media_type(claimed: &str) -> Result<String, MediaTypeError> {
    if claimed.len() > MAX_MEDIA_TYPE_LEN {
        return Err(MediaTypeError::TooLong { len: claimed.len() });
    }
    // Optional whitespace around a header value is not part of it (RFC 9110 §5.5).
    let value = claimed.trim_matches([' ', '\t']);
    let parsed: mime::Mime = value.parse().map_err(|e: mime::FromStrError| {
        // A comma outside a parameter is what makes a list; `mime` refuses it as a bad
        // token, which would hide the reason.
        if value.split(';').next().is_some_and(|essence| essence.contains(',')) {
            MediaTypeError::List(value.to_owned())
        } else {
            MediaTypeError::Invalid { value: value.to_owned(), reason: e.to_string() }
        }
    })?;
    if parsed.type_() == mime::STAR || parsed.subtype() == mime::STAR {
        return Err(MediaTypeError::Wildcard(value.to_owned()));
    }
    // `mime` accepts `image/` with an empty subtype.
    if parsed.subtype().as_str().is_empty() {
        return Err(MediaTypeError::Invalid { value: value.to_owned(), reason: "the subtype is empty".into() });
    }
    let essence = parsed.essence_str();
    let charset = parsed
        .get_param(mime::CHARSET)
        .map(|c| c.as_str().trim_matches('"').to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c.len() <= MAX_CHARSET_LEN && c.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:+".contains(&b)));
    Ok(match charset {
        Some(c) => format!("{essence}; charset={c}"),
        None => essence.to_owned(),
    })
}

/// The `type/subtype` of a media type already normalized (or anything else): the part before
/// the first `;`, trimmed and lowercased.
pub fn media_type_essence(media_type: &str) -> String {
    media_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimed_types_are_rebuilt_from_their_parts() {
        for (claimed, want) in [
            ("image/png", "image/png"),
            ("IMAGE/PNG", "image/png"),
            ("  application/pdf\t", "application/pdf"),
            ("text/plain; charset=utf-8", "text/plain; charset=utf-8"),
            ("text/plain;charset=UTF-8", "text/plain; charset=utf-8"),
            ("text/plain; charset=\"iso-8859-1\"", "text/plain; charset=iso-8859-1"),
            ("application/json; charset=utf-8; profile=x", "application/json; charset=utf-8"),
            ("image/svg+xml", "image/svg+xml"),
            (
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            ),
            // Parameters a browser or a mail client would act on are dropped.
            ("image/png; name=\"evil.html\"", "image/png"),
            ("multipart/mixed; boundary=xyz", "multipart/mixed"),
            ("text/plain; charset=\"a b\"", "text/plain"),
            // A comma inside a quoted parameter is not a list; the parameter goes anyway.
            ("text/plain; note=\"a,b\"", "text/plain"),
        ] {
            assert_eq!(normalize_media_type(claimed).as_deref(), Ok(want), "{claimed:?}");
        }
        let long_charset = format!("text/plain; charset={}", "x".repeat(41));
        assert_eq!(normalize_media_type(&long_charset).unwrap(), "text/plain");
    }

    #[test]
    fn lists_wildcards_garbage_and_overlong_values_are_refused() {
        use MediaTypeError as E;
        for claimed in ["image/png,text/html", "image/png, text/html", "text/html,image/png;charset=utf-8", ",image/png"] {
            assert!(matches!(normalize_media_type(claimed), Err(E::List(_))), "{claimed:?}");
        }
        for claimed in ["*/*", "image/*", "*/png"] {
            assert!(matches!(normalize_media_type(claimed), Err(E::Wildcard(_))), "{claimed:?}");
        }
        for claimed in [
            "",
            "png",
            "image/",
            "/png",
            "image/png/x",
            "image /png",
            "image/png\r\nX-Evil: 1",
            "text/html\u{0}",
            "image/pn\u{e9}",
            "text/plain; charset",
            "text/plain; charset=\"utf-8",
            "text/plain; charset=\"\"",
            // An escaped quote inside a parameter: rare, and not worth a laxer parser.
            "text/html; charset=\"utf-8\\\"\"",
        ] {
            assert!(matches!(normalize_media_type(claimed), Err(E::Invalid { .. })), "{claimed:?}: {:?}", normalize_media_type(claimed));
        }
        let at_limit = format!("application/{}", "x".repeat(MAX_MEDIA_TYPE_LEN - "application/".len()));
        assert_eq!(normalize_media_type(&at_limit).unwrap(), at_limit);
        let over = format!("{at_limit}x");
        assert_eq!(normalize_media_type(&over), Err(E::TooLong { len: 256 }));
        let huge = format!("image/png; a={}", "b".repeat(1 << 20));
        assert!(matches!(normalize_media_type(&huge), Err(E::TooLong { .. })));
        // Every refusal is one line that says what to send instead.
        for claimed in ["image/png,text/html", "*/*", "image/png\r\nX: 1", &over] {
            let m = normalize_media_type(claimed).unwrap_err().to_string();
            assert!(m.contains("send") && !m.contains('\n') && !m.contains('\r'), "{m}");
        }
    }

    #[test]
    fn essences() {
        assert_eq!(media_type_essence("Text/HTML; charset=utf-8"), "text/html");
        assert_eq!(media_type_essence(" image/png "), "image/png");
        assert_eq!(media_type_essence(""), "");
    }
}
