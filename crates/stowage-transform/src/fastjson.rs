//! Parsing JSON that holds very long strings, fast.
//!
//! serde_json scans strings byte by byte (~0.6–1 GB/s here); a 50 MB base64 PDF inside JSON
//! text inside a text block is scanned twice that way before any layer sees it, which alone
//! would take the whole 100 ms budget. Here, strings of at least [`BIG`] bytes are *lifted*
//! out first: their ends are found with `memchr` (tens of GB/s), each is replaced in a small
//! skeleton by a placeholder, serde_json parses the skeleton, and each long string is then
//! unescaped in bulk (memcpy between escapes, SIMD UTF-8 validation) and put back. Anything
//! unusual (invalid JSON, a long object key, a lone surrogate, the placeholder text appearing
//! in the input) falls back to plain serde_json, so results and errors are exactly serde's.

use std::ops::Range;

use memchr::{memchr, memchr2, memmem};
use serde_json::Value;

/// Strings at least this long (in raw, escaped bytes) are lifted.
pub const BIG: usize = 64 * 1024;

const MARK: &str = "\u{0}stowage-lifted:";
const MARK_ESCAPED: &[u8] = b"\\u0000stowage-lifted:";

/// Parses JSON text; same result as `serde_json::from_slice`, faster when it has long strings.
pub fn parse(src: &[u8]) -> Result<Value, serde_json::Error> {
    if src.len() < BIG {
        return serde_json::from_slice(src);
    }
    match lift(src).and_then(|(skeleton, ranges)| rebuild(src, &skeleton, ranges)) {
        Some(v) => Ok(v),
        None => serde_json::from_slice(src),
    }
}

/// The skeleton (long strings replaced by numbered placeholders) and the raw ranges of the
/// long strings' contents. `None` when the text cannot be lexed or holds the placeholder.
fn lift(src: &[u8]) -> Option<(Vec<u8>, Vec<Range<usize>>)> {
    if memmem::find(src, MARK_ESCAPED).is_some() {
        return None;
    }
    let mut skeleton = Vec::new();
    let mut ranges = Vec::new();
    let (mut pos, mut copied) = (0, 0);
    // Outside strings, every '"' opens one; inside, only '"' and '\\' matter.
    while let Some(q) = memchr(b'"', &src[pos..]) {
        let start = pos + q + 1;
        let mut i = start;
        let end = loop {
            let j = i + memchr2(b'"', b'\\', src.get(i..)?)?;
            if src[j] == b'\\' {
                i = j + 2;
                continue;
            }
            break j;
        };
        if end - start >= BIG {
            skeleton.extend_from_slice(&src[copied..start]);
            skeleton.extend_from_slice(MARK_ESCAPED);
            skeleton.extend_from_slice(ranges.len().to_string().as_bytes());
            ranges.push(start..end);
            copied = end;
        }
        pos = end + 1;
    }
    if ranges.is_empty() {
        return None;
    }
    skeleton.extend_from_slice(&src[copied..]);
    Some((skeleton, ranges))
}

fn rebuild(src: &[u8], skeleton: &[u8], ranges: Vec<Range<usize>>) -> Option<Value> {
    let mut v: Value = serde_json::from_slice(skeleton).ok()?;
    let mut strings: Vec<Option<String>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        strings.push(Some(unescape(&src[r])?));
    }
    put_back(&mut v, &mut strings)?;
    strings.iter().all(Option::is_none).then_some(v)
}

fn put_back(v: &mut Value, strings: &mut [Option<String>]) -> Option<()> {
    match v {
        Value::String(s) => {
            if let Some(n) = s.strip_prefix(MARK) {
                *s = strings.get_mut(n.parse::<usize>().ok()?)?.take()?;
            }
        }
        Value::Array(items) => {
            for i in items {
                put_back(i, strings)?;
            }
        }
        Value::Object(m) => {
            for (k, i) in m.iter_mut() {
                if k.starts_with(MARK) {
                    return None;
                }
                put_back(i, strings)?;
            }
        }
        _ => {}
    }
    Some(())
}

/// JSON string unescaping in bulk. `None` for anything serde_json would refuse.
fn unescape(raw: &[u8]) -> Option<String> {
    // serde refuses raw control characters in strings; so do we (a branch-free fold per
    // chunk vectorises, unlike an early-exit `any`).
    if raw.chunks(64).any(|c| c.iter().fold(false, |acc, &b| acc | (b < 0x20))) {
        return None;
    }
    let Some(first) = memchr(b'\\', raw) else {
        return std::str::from_utf8(raw).ok().map(str::to_owned);
    };
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    let mut next = Some(first);
    while let Some(k) = next {
        out.extend_from_slice(&raw[i..k]);
        let esc = *raw.get(k + 1)?;
        i = k + 2;
        match esc {
            b'"' => out.push(b'"'),
            b'\\' => out.push(b'\\'),
            b'/' => out.push(b'/'),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'u' => {
                let hi = hex4(raw.get(i..i + 4)?)?;
                i += 4;
                let c = if (0xD800..0xDC00).contains(&hi) {
                    if raw.get(i..i + 2)? != b"\\u" {
                        return None;
                    }
                    let lo = hex4(raw.get(i + 2..i + 6)?)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return None;
                    }
                    i += 6;
                    char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                } else {
                    char::from_u32(hi)?
                };
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            _ => return None,
        }
        next = memchr(b'\\', &raw[i..]).map(|k| k + i);
    }
    out.extend_from_slice(&raw[i..]);
    String::from_utf8(out).ok()
}

fn hex4(b: &[u8]) -> Option<u32> {
    u32::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_as_serde() {
        let big = "A".repeat(BIG + 3);
        let escaped = format!("{}\"quoted\" \\ / \n\t é 😀 \u{1}", "x".repeat(BIG));
        let inner = json!({"content": big, "name": "n"}).to_string();
        let cases = vec![
            json!({"content": [{"type": "text", "text": inner}], "isError": false}),
            json!([big, escaped, {"k": big}, "small \"one\""]),
            json!(escaped),
            json!({"a": 1}),
        ];
        for v in cases {
            let text = serde_json::to_vec(&v).unwrap();
            assert_eq!(parse(&text).unwrap(), v);
            let pretty = serde_json::to_vec_pretty(&v).unwrap();
            assert_eq!(parse(&pretty).unwrap(), v);
        }
    }

    #[test]
    fn falls_back_to_serde() {
        let big = "B".repeat(BIG);
        for text in [
            format!("{{\"{big}\": 1}}"),                                   // long key
            format!("[\"{big}\", \"\\u0000stowage-lifted:0\"]"),           // placeholder in input
            format!("[\"{big}\\ud800\"]"),                                 // lone surrogate
            format!("[\"{big}\" 1]"),                                      // invalid json
            format!("[\"{big}\u{1}\"]"),                                    // raw control char
            format!("[\"{big}"),                                           // unterminated
        ] {
            let ours = parse(text.as_bytes());
            let serde = serde_json::from_slice::<Value>(text.as_bytes());
            assert_eq!(ours.is_ok(), serde.is_ok(), "{}", &text[text.len() - 30..]);
            if let (Ok(a), Ok(b)) = (ours, serde) {
                assert_eq!(a, b);
            }
        }
    }
}
