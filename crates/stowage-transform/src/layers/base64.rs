//! L3: base64 anywhere in the result, recognised by what it decodes to.
//!
//! Every string of at least `min_size_for_detection` characters is looked at: plain base64 in
//! the standard or URL-safe alphabet, padded or not, MIME/PEM line-wrapped, or a `data:` URI.
//! The decision is made on decoded bytes: the first 4 KiB of the string are decoded and
//! handed to the `infer` crate's magic-byte matchers; only a binary type counts. Then the
//! *whole* value is decoded (no cap: the stored artifact is the complete file, whatever its
//! size) and sniffed again (a ZIP becomes DOCX/XLSX once the whole archive is visible).
//!
//! What never becomes a binary artifact, and why:
//! - JWTs, UUID lists, API keys, minified JS/CSS, prose: characters outside the alphabet
//!   (`.`, `-` mixed with `+`, spaces, punctuation) fail the shape check;
//! - hex digests and long numbers: all-hex prefixes are refused before decoding;
//! - base64 digests: shorter than the detection minimum;
//! - base64 of plain text (JSON, CSV, HTML, XML, scripts): no binary magic (infer's text
//!   matchers say text), so the string stays a string and the size net (L0) decides;
//! - malformed or truncated base64 whose prefix looked binary: the full decode fails, a warning
//!   is reported and the string is left for L0.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::GeneralPurposeConfig;
use base64::engine::{DecodePaddingMode, Simd};
use sha2::{Digest, Sha256};

use crate::TransformConfig;
use crate::layers::WalkCx as Cx;
use crate::path::{push_index, push_key};
use crate::report::{Layer, TransformReport};
use crate::stub::TemplateVars;
use crate::work::{Docs, Offload, Payload, Render};

/// `[transform.binary_detection]`: L3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BinaryDetectionConfig {
    /// Look for base64 binaries in strings at all. Default true.
    pub enabled: bool,
    /// Strings shorter than this many characters are not examined (~750 decoded bytes; below
    /// `inline_binary_max_bytes` anyway). Default 1000.
    pub min_size_for_detection: usize,
}

impl Default for BinaryDetectionConfig {
    fn default() -> Self {
        BinaryDetectionConfig { enabled: true, min_size_for_detection: 1000 }
    }
}

/// How many characters of a string are decoded to sniff its type. 4 KiB covers every magic
/// number infer knows (tar's is at 257) and the first ZIP entry name of an OOXML file.
const PROBE_CHARS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alphabet {
    Standard,
    UrlSafe,
}

/// The encoding a string appears to use, found without reading all of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape<'a> {
    /// The base64 text (after a `data:` header, surrounding whitespace trimmed).
    pub body: &'a str,
    pub alphabet: Alphabet,
    /// Line-wrapped (MIME, PEM): newlines must be removed before decoding.
    pub wrapped: bool,
    /// The media type a `data:` URI declares.
    pub declared_mime: Option<&'a str>,
    /// No `+/` or `-_` in the probed prefix: the alphabet is a guess (a SQLite file's zero
    /// pages encode as pages of `A`), so the other one is tried if the whole does not decode.
    pub ambiguous: bool,
}

fn engine(alphabet: Alphabet) -> &'static Simd {
    static STANDARD: OnceLock<Simd> = OnceLock::new();
    static URL_SAFE: OnceLock<Simd> = OnceLock::new();
    // Padding optional (many producers strip it); trailing bits tolerated because some
    // encoders do not zero them and the bytes are still the file.
    let config =
        || GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent).with_decode_allow_trailing_bits(true);
    match alphabet {
        Alphabet::Standard => STANDARD.get_or_init(|| Simd::standard(config())),
        Alphabet::UrlSafe => URL_SAFE.get_or_init(|| Simd::url_safe(config())),
    }
}

/// Cheap shape check on the first [`PROBE_CHARS`] characters (and the header of a `data:`
/// URI). `None` means "certainly not base64".
pub(crate) fn shape(s: &str) -> Option<Shape<'_>> {
    let (body, declared_mime) = match strip_prefix_ci(s, "data:") {
        Some(rest) => {
            let comma = rest.find(',')?;
            let header = &rest[..comma];
            let params = strip_suffix_ci(header, ";base64")?;
            let mime = params.split(';').next().filter(|m| !m.is_empty());
            (&rest[comma + 1..], mime)
        }
        None => (s, None),
    };
    let body = body.trim_ascii();
    if body.len() < 4 {
        return None;
    }
    let probe = &body.as_bytes()[..body.len().min(PROBE_CHARS)];
    let (mut std_chars, mut url_chars, mut all_hex) = (false, false, true);
    let mut first_line: Option<usize> = None;
    let mut line_len = 0usize;
    let mut padding_seen = false;
    for &b in probe {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => {
                if padding_seen {
                    return None;
                }
                all_hex &= b.is_ascii_hexdigit();
                line_len += 1;
            }
            b'+' | b'/' => {
                std_chars = true;
                all_hex = false;
                line_len += 1;
            }
            b'-' | b'_' => {
                url_chars = true;
                all_hex = false;
                line_len += 1;
            }
            b'=' => {
                padding_seen = true;
                all_hex = false;
                line_len += 1;
            }
            b'\r' => {}
            b'\n' => {
                // MIME (76) and PEM (64) wrap every line at the same width, a multiple of 4.
                match first_line {
                    None if line_len >= 16 && line_len.is_multiple_of(4) => first_line = Some(line_len),
                    Some(w) if w == line_len => {}
                    _ => return None,
                }
                line_len = 0;
            }
            _ => return None,
        }
    }
    if (std_chars && url_chars) || all_hex {
        return None;
    }
    if let Some(w) = first_line {
        // The last line of a fully probed string may be shorter, never longer.
        if line_len > w {
            return None;
        }
    }
    let alphabet = if url_chars { Alphabet::UrlSafe } else { Alphabet::Standard };
    Some(Shape { body, alphabet, wrapped: first_line.is_some(), declared_mime, ambiguous: !std_chars && !url_chars })
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

fn strip_suffix_ci<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(suffix.len())?;
    let tail = s.get(cut..)?;
    tail.eq_ignore_ascii_case(suffix).then(|| &s[..cut])
}

fn unwrap_lines(body: &str) -> Vec<u8> {
    body.bytes().filter(|b| !matches!(b, b'\r' | b'\n')).collect()
}

/// Decodes the first [`PROBE_CHARS`] characters, for sniffing.
pub(crate) fn decode_prefix(shape: &Shape<'_>) -> Option<Vec<u8>> {
    let probe = &shape.body[..shape.body.len().min(PROBE_CHARS)];
    let mut chars: Vec<u8> = if shape.wrapped { unwrap_lines(probe) } else { probe.as_bytes().to_vec() };
    if probe.len() < shape.body.len() {
        // Mid-string: whole 4-character groups only, and no padding can be there.
        let keep = chars.len() / 4 * 4;
        chars.truncate(keep);
    }
    engine(shape.alphabet).decode(&chars).ok()
}

/// Whether `map` is an image block the user keeps inline (`keep_images_under_bytes`): an
/// `{"type": "image", "data": …}` block whose base64 decodes to fewer bytes than the limit.
/// Decided from the base64's length, without decoding; later layers and the clamp skip it.
/// Here rather than in `typed.rs` (whose setting it reads) because it is a question about
/// base64, and `typed.rs` already depends on this module.
// Every walk of every layer asks it of every object; `#[inline]` keeps the 20 KB pass-through
// bench where it was before the function moved here (BENCHMARKS.md, "Keep the map true").
#[inline]
pub(crate) fn is_kept_image(map: &Map<String, Value>, config: &TransformConfig) -> bool {
    let limit = config.typed_content.keep_images_under_bytes;
    if !config.typed_content.enabled || limit <= config.inline_binary_max_bytes.saturating_add(1) {
        // Nothing above the inline threshold is kept, and below it nothing is offloaded.
        return false;
    }
    if map.get("type").and_then(Value::as_str) != Some("image") {
        return false;
    }
    let Some(data) = map.get("data").and_then(Value::as_str) else { return false };
    // Base64 is 4 characters per 3 bytes: far over the limit is decided without a scan.
    if (data.len() as u64) / 4 * 3 > limit.saturating_mul(2) {
        return false;
    }
    shape(data).is_some_and(|sh| decoded_len(&sh) < limit)
}

/// Decodes the whole value. No size cap: a cap that is not a multiple of 4 once made a Python
/// implementation store every base64 over ~5 MB as text.
pub(crate) fn decode_all(shape: &Shape<'_>) -> Result<Vec<u8>, base64::DecodeError> {
    let unwrapped;
    let input: &[u8] = if shape.wrapped {
        unwrapped = unwrap_lines(shape.body);
        &unwrapped
    } else {
        shape.body.as_bytes()
    };
    match engine(shape.alphabet).decode(input) {
        Err(_) if shape.ambiguous => {
            let other = match shape.alphabet {
                Alphabet::Standard => Alphabet::UrlSafe,
                Alphabet::UrlSafe => Alphabet::Standard,
            };
            engine(other).decode(input)
        }
        r => r,
    }
}

/// The decoded size, without decoding.
pub(crate) fn decoded_len(shape: &Shape<'_>) -> u64 {
    let chars = if shape.wrapped { shape.body.bytes().filter(|b| !matches!(b, b'\r' | b'\n')).count() } else { shape.body.len() };
    let pad = shape.body.bytes().rev().take(2).filter(|&b| b == b'=').count();
    ((chars - pad) as u64) * 3 / 4
}

/// What decoded bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sniff {
    /// A binary format infer recognises by its magic bytes.
    Binary { mime: &'static str, ext: &'static str },
    /// Text: infer's text matchers (HTML, XML, shell) or valid UTF-8 without binary magic.
    Text,
    /// Neither: no magic and not text.
    Unknown,
}

pub(crate) fn sniff(bytes: &[u8]) -> Sniff {
    if let Some(t) = infer::get(bytes) {
        return if t.matcher_type() == infer::MatcherType::Text {
            Sniff::Text
        } else {
            Sniff::Binary { mime: t.mime_type(), ext: t.extension() }
        };
    }
    match std::str::from_utf8(bytes) {
        Ok(_) => Sniff::Text,
        // Cut mid-character by the probe: still text.
        Err(e) if e.error_len().is_none() => Sniff::Text,
        Err(_) => Sniff::Unknown,
    }
}

/// A decoded binary found by [`detect`].
#[derive(Debug)]
pub(crate) struct Detected {
    pub bytes: Vec<u8>,
    pub mime: String,
}

/// Decides whether `s` is a base64 binary and decodes it whole (copying; the schema layer's
/// marked fields are small). `None`: not base64, base64 of text, no magic, or malformed.
pub(crate) fn detect(s: &str) -> Option<Detected> {
    let p = probe(s)?;
    let sh = shape(s)?;
    let bytes = decode_all(&sh).ok()?;
    let mime = match sniff(&bytes) {
        Sniff::Binary { mime, .. } => mime,
        _ => p.mime,
    };
    Some(Detected { bytes, mime: mime.to_owned() })
}

/// What [`probe`] learnt from a string's first 4 KiB, enough to decode the whole in place.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub mime: &'static str,
    pub ext: &'static str,
    body: std::ops::Range<usize>,
    alphabet: Alphabet,
    wrapped: bool,
    ambiguous: bool,
    pub decoded_len: u64,
    /// The type a `data:` URI declares.
    pub declared_mime: Option<String>,
}

/// Sniffs a string without decoding all of it: `Some` when its prefix decodes to a binary.
pub(crate) fn probe(s: &str) -> Option<Probe> {
    shape_probe(s).filter(|p| !p.mime.is_empty())
}

/// Like [`probe`] for any base64, binary or not (`mime` empty when the prefix has no binary
/// magic): field rules decode what they are told to.
pub(crate) fn shape_probe(s: &str) -> Option<Probe> {
    let sh = shape(s)?;
    let prefix = decode_prefix(&sh)?;
    let (mime, ext) = match sniff(&prefix) {
        Sniff::Binary { mime, ext } => (mime, ext),
        _ => ("", ""),
    };
    let start = sh.body.as_ptr() as usize - s.as_ptr() as usize;
    let decoded_len = if sh.wrapped {
        decoded_len(&sh)
    } else {
        ((sh.body.len() - sh.body.bytes().rev().take(2).filter(|&b| b == b'=').count()) as u64) * 3 / 4
    };
    Some(Probe {
        mime,
        ext,
        body: start..start + sh.body.len(),
        alphabet: sh.alphabet,
        wrapped: sh.wrapped,
        ambiguous: sh.ambiguous,
        decoded_len,
        declared_mime: sh.declared_mime.map(str::to_owned),
    })
}

/// Decoded bytes, and their sha256 when it was computed while decoding.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub bytes: Vec<u8>,
    pub sha256: Option<[u8; 32]>,
}

/// Hashing alongside decoding starts a thread (~50 µs); below this many decoded bytes the sink
/// may as well hash them itself.
const HASH_ALONGSIDE_MIN: u64 = 1 << 20;

/// Decodes a probed string whole, reusing its memory: 4 KiB-aligned chunks are copied to a
/// small buffer and decoded to the front of the same allocation (output never overtakes
/// input). A 50 MB string thus needs no second 37 MB allocation, whose first touch alone
/// would cost ~25 ms here. On failure the string is restored exactly (full base64 groups
/// re-encode to the same characters) and returned with the error.
///
/// With `hash` (the sink prefers a digest, see `ArtifactSink::prefers_sha256`) a large value's
/// sha256 is computed on a second thread as the decoded bytes come out: hashing 37 MB takes
/// ~25 ms and decoding it ~6 ms, so the two together take as long as the hash alone.
pub(crate) fn decode_owned(s: String, p: &Probe, hash: bool) -> Result<Decoded, (String, base64::DecodeError)> {
    if p.wrapped {
        let Some(sh) = shape(&s) else { return Err((s, base64::DecodeError::InvalidLength(0))) };
        return match decode_all(&sh) {
            Ok(bytes) => Ok(Decoded { bytes, sha256: None }),
            Err(e) => Err((s, e)),
        };
    }
    let hash = hash && p.decoded_len >= HASH_ALONGSIDE_MIN;
    let mut buf = s.into_bytes();
    let header = buf[..p.body.start].to_vec();
    let mut tmp = vec![0u8; IN_PLACE_CHUNK];
    let mut result = in_place(&mut buf, &mut tmp, p.body.clone(), p.alphabet, &header, hash);
    if result.is_err() && p.ambiguous {
        let other = match p.alphabet {
            Alphabet::Standard => Alphabet::UrlSafe,
            Alphabet::UrlSafe => Alphabet::Standard,
        };
        result = in_place(&mut buf, &mut tmp, p.body.clone(), other, &header, hash);
    }
    match result {
        Ok((n, sha256)) => {
            buf.truncate(n);
            Ok(Decoded { bytes: buf, sha256 })
        }
        // Restored to the original string, so valid UTF-8 again; were it not, the lossy
        // conversion still returns a string rather than panicking.
        Err(e) => Err((String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()), e)),
    }
}

/// Input characters per in-place step (a multiple of 4).
const IN_PLACE_CHUNK: usize = 64 * 1024;

/// Decoded bytes are handed to the hashing thread in pieces of at least this size: fewer
/// wake-ups, and still small next to a 37 MB hash.
const HAND_OUT_MIN: usize = 1 << 20;

/// Where an in-place decode stopped: the chunk `r..end` did not decode; `written` bytes of
/// output came before it.
struct Stopped {
    error: base64::DecodeError,
    r: usize,
    end: usize,
    written: usize,
}

fn in_place(
    buf: &mut [u8],
    tmp: &mut [u8],
    body: std::ops::Range<usize>,
    alphabet: Alphabet,
    header: &[u8],
    hash: bool,
) -> Result<(usize, Option<[u8; 32]>), base64::DecodeError> {
    let eng = engine(alphabet);
    let outcome = if hash {
        // The hashing thread reads each finished piece of the output while this one decodes
        // the next into the rest of the buffer (disjoint borrows, see `decode_chunks`).
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::channel::<&[u8]>();
            let hasher = scope.spawn(move || {
                let mut h = Sha256::new();
                rx.iter().for_each(|piece| h.update(piece));
                <[u8; 32]>::from(h.finalize())
            });
            let outcome = decode_chunks(&mut *buf, tmp, body.clone(), eng, |piece| {
                // A send fails only if the hasher is gone, and then its digest is not used.
                let _ = tx.send(piece);
            });
            drop(tx);
            // Without a digest (the hasher cannot panic, but if it did) the sink hashes.
            let digest = hasher.join().ok();
            outcome.map(|n| (n, digest))
        })
    } else {
        decode_chunks(&mut *buf, tmp, body.clone(), eng, |_| {}).map(|n| (n, None))
    };
    outcome.map_err(|Stopped { error, r, end, written }| {
        // Put back what was consumed (re-encoding whole groups is exact), the chunk being
        // decoded (from its copy) and the data: header.
        let consumed = eng.encode(&buf[..written]);
        buf[body.start..r].copy_from_slice(consumed.as_bytes());
        buf[r..end].copy_from_slice(&tmp[..end - r]);
        buf[..header.len()].copy_from_slice(header);
        error
    })
}

/// The decoding loop of [`in_place`]: hands every finished piece of output to `done` as it
/// goes. The buffer is split as it fills, so a piece handed out (and read by another thread)
/// is never written again, and what is still being written was never handed out.
fn decode_chunks<'a>(
    buf: &'a mut [u8],
    tmp: &mut [u8],
    body: std::ops::Range<usize>,
    eng: &Simd,
    mut done: impl FnMut(&'a [u8]),
) -> Result<usize, Stopped> {
    // `rest` is the buffer from `flushed` on: `pending` decoded bytes, then free space, then
    // the input still to decode (at `r`, never before `flushed + pending`).
    let mut rest: &'a mut [u8] = buf;
    let (mut flushed, mut pending, mut r) = (0, 0, body.start);
    while r < body.end {
        let end = (r + IN_PLACE_CHUNK).min(body.end);
        let len = end - r;
        tmp[..len].copy_from_slice(&rest[r - flushed..end - flushed]);
        match eng.decode_slice(&tmp[..len], &mut rest[pending..]) {
            Ok(n) => {
                pending += n;
                r = end;
            }
            Err(e) => {
                let error = match e {
                    base64::DecodeSliceError::DecodeError(e) => e,
                    base64::DecodeSliceError::OutputSliceTooSmall => base64::DecodeError::InvalidLength(len),
                };
                return Err(Stopped { error, r, end, written: flushed + pending });
            }
        }
        if pending >= HAND_OUT_MIN || r == body.end {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(pending);
            done(piece);
            rest = tail;
            flushed += pending;
            pending = 0;
        }
    }
    Ok(flushed + pending)
}

/// L3's pass: finds base64 binaries in every document. With `hash`, large ones are hashed as
/// they are decoded (see [`decode_owned`]).
pub(crate) fn collect(docs: &mut Docs, config: &TransformConfig, report: &mut TransformReport, hash: bool) -> Vec<Offload> {
    let mut out = Vec::new();
    if !config.binary_detection.enabled {
        return out;
    }
    for d in 0..docs.docs.len() {
        let mut ptr = String::new();
        let mut cx = Cx { config, report, doc: d, prefix: docs.docs[d].prefix.clone(), out: &mut out, hash };
        walk(&mut docs.docs[d].value, &mut ptr, &mut cx);
    }
    out
}

fn walk(value: &mut Value, ptr: &mut String, cx: &mut Cx<'_>) {
    let min = cx.config.binary_detection.min_size_for_detection.max(8);
    let len = ptr.len();
    match value {
        Value::String(s) if s.len() >= min => {
            if let Some(p) = probe_above_limit(s, cx)
                && let Some(off) = take_and_decode(value, p, TemplateVars::default(), ptr, ptr.to_owned(), Render::StringStub, cx)
            {
                cx.out.push(off);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                push_index(ptr, i);
                if let Value::Object(map) = item {
                    // A text block in a content list whose whole text is a binary becomes a
                    // text block plus a resource_link, like L2's typed blocks.
                    if map.get("type").and_then(Value::as_str) == Some("text") {
                        let probed = match map.get("text") {
                            Some(Value::String(s)) if s.len() >= min => probe_above_limit(s, cx),
                            _ => None,
                        };
                        if let Some(p) = probed {
                            let vars = TemplateVars::from_siblings(Some(map), Some("text"));
                            let slot = map.get_mut("text").expect("probed above");
                            let off = take_and_decode(slot, p, vars, ptr, format!("{ptr}/text"), Render::Blocks, cx);
                            if let Some(off) = off {
                                cx.out.push(off);
                                ptr.truncate(len);
                                continue;
                            }
                        }
                    }
                }
                walk(item, ptr, cx);
                ptr.truncate(len);
            }
        }
        // An image the user keeps inline (`keep_images_under_bytes`) is meant for the client.
        Value::Object(map) if is_kept_image(map, cx.config) => {}
        Value::Object(map) => {
            let keys: Vec<String> =
                map.iter().filter(|(_, v)| v.as_str().is_some_and(|s| s.len() >= min)).map(|(k, _)| k.clone()).collect();
            for k in keys {
                let Some(p) = probe_above_limit(map.get(&k).and_then(Value::as_str).expect("selected above"), cx) else { continue };
                push_key(ptr, &k);
                let vars = TemplateVars::from_siblings(Some(map), Some(&k));
                let slot = map.get_mut(&k).expect("selected above");
                if let Some(off) = take_and_decode(slot, p, vars, ptr, ptr.to_owned(), Render::StringStub, cx) {
                    cx.out.push(off);
                }
                ptr.truncate(len);
            }
            for (k, item) in map.iter_mut() {
                if item.is_array() || item.is_object() {
                    push_key(ptr, k);
                    walk(item, ptr, cx);
                    ptr.truncate(len);
                }
            }
        }
        _ => {}
    }
}

/// A probe of a string that decodes to a binary larger than `inline_binary_max_bytes`.
fn probe_above_limit(s: &str, cx: &Cx<'_>) -> Option<Probe> {
    probe(s).filter(|p| p.decoded_len > cx.config.inline_binary_max_bytes)
}

/// Takes the string out of `slot` and decodes it whole (in place). On success the slot is
/// left empty for the stub; on failure the string goes back and a warning says why. For
/// `Render::Blocks`, `ptr` is the block's pointer, `value_ptr` its text's.
fn take_and_decode(
    slot: &mut Value,
    p: Probe,
    vars: TemplateVars,
    ptr: &str,
    value_ptr: String,
    render: Render,
    cx: &mut Cx<'_>,
) -> Option<Offload> {
    let Value::String(s) = slot else { return None };
    let s = std::mem::take(s);
    let Decoded { bytes, sha256 } = match decode_owned(s, &p, cx.hash) {
        Ok(d) => d,
        Err((original, e)) => {
            *slot = Value::String(original);
            cx.report.warn(
                Layer::Base64,
                Some(format!("{}{value_ptr}", cx.prefix)),
                format!("looks like base64 {} but does not decode: {e}", p.mime),
            );
            return None;
        }
    };
    // The whole file may say more than its first 4 KiB (DOCX/XLSX are ZIPs with a telling entry).
    let (mime, ext) = match sniff(&bytes) {
        Sniff::Binary { mime, ext } => (mime, ext),
        _ => (p.mime, p.ext),
    };
    let filename = vars.name().map(|n| with_extension(&n, ext));
    Some(Offload {
        doc: cx.doc,
        ptr: ptr.to_owned(),
        payload: Payload::new(bytes, sha256),
        mime: Some(mime.to_owned()),
        filename,
        layer: Layer::Base64,
        render,
        fatal: true,
        fallback: None,
        what: format!("{mime} binary"),
        summary_template: None,
        content_type: None,
        vars,
        source: Map::new(),
    })
}

/// `Sales Dashboard` + `pdf` → `Sales Dashboard.pdf`; a name that already has an extension is
/// kept as it is.
pub(crate) fn with_extension(name: &str, ext: &str) -> String {
    let has_ext = name
        .rsplit_once('.')
        .is_some_and(|(stem, e)| !stem.is_empty() && (1..=5).contains(&e.len()) && e.chars().all(|c| c.is_ascii_alphanumeric()));
    if has_ext || ext.is_empty() { name.to_owned() } else { format!("{name}.{ext}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdf(n: usize) -> Vec<u8> {
        let mut v = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
        let mut x: u64 = 7;
        while v.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push((x >> 24) as u8);
        }
        v
    }

    /// In-place decoding with and without the hash alongside: the same bytes, a digest that is
    /// theirs (and only when asked for, and large enough), and a string that does not decode
    /// comes back exactly, whichever piece of it is bad.
    #[test]
    fn decode_owned_hashes_alongside_and_restores() {
        let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
        for n in [1000, (HASH_ALONGSIDE_MIN as usize) + 1, 3 * HAND_OUT_MIN + 12_345] {
            let data = pdf(n);
            for s in [b64(&data), format!("data:application/pdf;base64,{}", b64(&data))] {
                let p = probe(&s).expect("a pdf");
                for hash in [false, true] {
                    let d = decode_owned(s.clone(), &p, hash).unwrap();
                    assert_eq!(d.bytes, data);
                    let want = (hash && n as u64 >= HASH_ALONGSIDE_MIN).then(|| <[u8; 32]>::from(Sha256::digest(&data)));
                    assert_eq!(d.sha256, want, "n {n} hash {hash}");
                }
                // A bad character early, in the middle, in the last chunk.
                for at in [5000.min(s.len() / 3), s.len() / 2, s.len() - 3] {
                    let mut bad = s.clone().into_bytes();
                    bad[at] = b'*';
                    let bad = String::from_utf8(bad).unwrap();
                    for hash in [false, true] {
                        let (back, _) = decode_owned(bad.clone(), &p, hash).unwrap_err();
                        assert!(back == bad, "n {n} at {at} hash {hash}: not restored");
                    }
                }
            }
        }
    }
}
