//! The `Range` request header (RFC 9110 §14): single byte ranges only.
//!
//! Multiple ranges are answered with the whole representation (a server may ignore `Range`),
//! which keeps responses a single streamed body; syntactically invalid headers are ignored the
//! same way, as the RFC requires.

use std::ops::Range;

/// A parsed single byte-range spec, before it meets the representation's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `bytes=first-last` (inclusive) or `bytes=first-`.
    From {
        /// The first byte.
        first: u64,
        /// The last byte (inclusive), or to the end.
        last: Option<u64>,
    },
    /// `bytes=-n`: the final n bytes.
    Suffix(u64),
}

/// What to do with a request's `Range` header for a representation of `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeRequest {
    /// No usable Range header: send everything (200).
    Full,
    /// Send this half-open byte range (206).
    Partial(Range<u64>),
    /// Nothing satisfiable (416).
    Unsatisfiable,
}

/// Parses a `Range` header value; `None` when it is absent, not `bytes`, malformed or a
/// multi-range request (all of which mean "send the whole thing").
pub fn parse_range(header: &str) -> Option<ByteRange> {
    let spec = header.trim().strip_prefix("bytes=")?.trim();
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if first.is_empty() {
        return digits(last).then(|| last.parse().ok().map(ByteRange::Suffix)).flatten();
    }
    if !digits(first) || !(last.is_empty() || digits(last)) {
        return None;
    }
    let first: u64 = first.parse().ok()?;
    let last = if last.is_empty() { None } else { Some(last.parse().ok()?) };
    if last.is_some_and(|l| l < first) {
        return None;
    }
    Some(ByteRange::From { first, last })
}

impl ByteRange {
    /// Resolves against a representation of `len` bytes.
    pub fn resolve(self, len: u64) -> RangeRequest {
        match self {
            ByteRange::Suffix(0) => RangeRequest::Unsatisfiable,
            ByteRange::Suffix(n) => {
                if len == 0 {
                    RangeRequest::Unsatisfiable
                } else {
                    RangeRequest::Partial(len.saturating_sub(n)..len)
                }
            }
            ByteRange::From { first, last } => {
                if first >= len {
                    return RangeRequest::Unsatisfiable;
                }
                let end = last.map_or(len, |l| l.saturating_add(1).min(len));
                RangeRequest::Partial(first..end)
            }
        }
    }
}

/// Resolves an optional header value against `len`.
pub(crate) fn resolve(header: Option<&str>, len: u64) -> RangeRequest {
    match header.and_then(parse_range) {
        None => RangeRequest::Full,
        Some(r) => r.resolve(len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_against_ten_bytes() {
        use RangeRequest::*;
        for (header, want) in [
            ("bytes=0-0", Partial(0..1)),  // first byte
            ("bytes=9-9", Partial(9..10)), // last byte
            ("bytes=9-", Partial(9..10)),
            ("bytes=0-", Partial(0..10)),
            ("bytes=2-5", Partial(2..6)),
            ("bytes=5-100", Partial(5..10)), // last past the end is clamped
            ("bytes=-1", Partial(9..10)),    // suffix: last byte
            ("bytes=-3", Partial(7..10)),
            ("bytes=-100", Partial(0..10)), // suffix longer than the file: all of it
            ("bytes=10-", Unsatisfiable),   // starts past the end
            ("bytes=10-20", Unsatisfiable),
            ("bytes=-0", Unsatisfiable),
            ("bytes=5-2", Full),     // invalid: ignored
            ("bytes=0-1,3-4", Full), // multi-range: whole body
            ("bytes=a-b", Full),
            ("items=0-1", Full),
            ("bytes=", Full),
            ("bytes=-", Full),
            ("bytes=+1-2", Full),
            ("bytes=99999999999999999999999-", Full),
        ] {
            assert_eq!(resolve(Some(header), 10), want, "{header}");
        }
        assert_eq!(resolve(None, 10), Full);
        assert_eq!(resolve(Some("bytes=0-"), 0), Unsatisfiable);
        assert_eq!(resolve(Some("bytes=-5"), 0), Unsatisfiable);
    }
}
