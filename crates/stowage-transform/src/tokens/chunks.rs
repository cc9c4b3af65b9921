//! Counting a long text in chunks that split where o200k's pre-tokenizer splits, with each
//! chunk's count remembered: the same page of a document is cut to a host's token budget by its
//! reader and then measured by the shaper inside the answer, and the second count should cost
//! a lookup, not a second encode (BENCHMARKS.md, "`artifact_read` pages of a 2 MB CSV").
//!
//! Why the sum of the chunks' counts is exactly the count of the whole: the vocabulary's
//! pre-tokenizer cuts a text into pieces and byte-pair encodes each piece on its own, so a
//! text's tokens are the concatenation of its pieces' tokens. A position right after `\n`
//! whose next character is neither whitespace nor `/` is always the end of a piece: of the
//! pattern's alternatives, only ` ?[^\s\p{L}\p{N}]+[\r\n/]*`, `\s*[\r\n]+`, `\s+(?!\S)` and
//! `\s+` can match a newline, and each stops there (the first can go on only over `\r`, `\n`
//! or `/`, the others only over whitespace). The pieces on either side are therefore those of
//! the whole text, and so are their tokens. A unit test checks the sum against a whole encode
//! on generated texts.
//!
//! Which of those positions end a chunk is decided by a hash of the bytes just before it, not
//! by the distance from the text's start: a page measured alone (by the reader) and inside an
//! answer (after a header line) then splits into the same chunks past its first one, so the
//! second count finds them remembered.

use std::collections::HashMap;
use std::hash::Hasher as _;
use std::sync::{LazyLock, Mutex, MutexGuard};

use tiktoken_rs::Rank;

/// Texts shorter than this are encoded whole: splitting and looking up costs more than the
/// encode (a few tens of microseconds) saves.
pub(super) const MIN_CHUNKED_BYTES: usize = 4096;

/// One boundary in this many ends a chunk: about 640 bytes for lines of 40 bytes, small enough
/// that the partial chunks at a page's two ends are cheap to encode, large enough that a
/// lookup is cheaper than the encode it saves.
const ODDS: u64 = 16;

/// How many bytes before a boundary choose it.
const WINDOW: usize = 32;

/// What the remembered counts may hold, in bytes of chunk text (plus a fixed cost per entry)
/// per generation; two generations are kept, so at most twice this.
const GENERATION_BYTES: usize = 2 << 20;
const ENTRY_COST: usize = 64;

/// Whether o200k's pre-tokenizer always ends a piece at byte `at` of `text` (see the module docs).
fn splits_at(text: &str, at: usize) -> bool {
    at > 0 && text.as_bytes()[at - 1] == b'\n' && text[at..].chars().next().is_some_and(|c| !c.is_whitespace() && c != '/')
}

/// Whether a boundary that splits is also one that ends a chunk.
fn chosen(text: &str, at: usize) -> bool {
    let mut h = std::hash::DefaultHasher::new();
    h.write(&text.as_bytes()[at.saturating_sub(WINDOW)..at]);
    h.finish().is_multiple_of(ODDS)
}

/// `text` in chunks whose o200k tokens, concatenated, are those of `text`.
pub(super) fn chunks(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= text.len() {
            return None;
        }
        let from = start;
        let end = memchr::memchr_iter(b'\n', &text.as_bytes()[from..])
            .map(|i| from + i + 1)
            .find(|&at| splits_at(text, at) && chosen(text, at))
            .unwrap_or(text.len());
        start = end;
        Some(&text[from..end])
    })
}

#[derive(Default)]
struct Memo {
    young: HashMap<Box<str>, usize>,
    old: HashMap<Box<str>, usize>,
    young_bytes: usize,
}

static MEMO: LazyLock<Mutex<Memo>> = LazyLock::new(Mutex::default);

/// The remembered counts (a panic elsewhere while holding them leaves nothing half-written:
/// every update is one map insert).
fn memo() -> MutexGuard<'static, Memo> {
    MEMO.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The count of `chunk` if it is remembered, without encoding it.
pub(super) fn known(chunk: &str) -> Option<usize> {
    let mut memo = memo();
    if let Some(&n) = memo.young.get(chunk) {
        return Some(n);
    }
    let (key, n) = memo.old.remove_entry(chunk)?;
    insert(&mut memo, key, n);
    Some(n)
}

fn remember(chunk: &str, n: usize) {
    insert(&mut memo(), chunk.into(), n);
}

/// Into the young generation; a full one becomes the old, dropping the old one's counts not
/// used since (a least-recently-used bound without a list to keep).
fn insert(memo: &mut Memo, key: Box<str>, n: usize) {
    memo.young_bytes += key.len() + ENTRY_COST;
    memo.young.insert(key, n);
    if memo.young_bytes > GENERATION_BYTES {
        memo.old = std::mem::take(&mut memo.young);
        memo.young_bytes = 0;
    }
}

/// The o200k tokens of one chunk, remembered.
pub(super) fn count(bpe: &tiktoken_rs::CoreBPE, chunk: &str) -> usize {
    known(chunk).unwrap_or_else(|| {
        let n = bpe.count_ordinary(chunk);
        remember(chunk, n);
        n
    })
}

/// The chunk's tokens when they are needed (to cut inside it), with its count remembered.
pub(super) fn encode(bpe: &tiktoken_rs::CoreBPE, chunk: &str) -> Vec<Rank> {
    let ranks = bpe.encode_ordinary(chunk);
    remember(chunk, ranks.len());
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_text_and_end_only_where_pieces_end() {
        let text: String = (0..2000).map(|i| format!("{i},x\n{}", ["/p\n", " y\n", "\tz\n", "\r\n", "w\n"][i % 5])).collect();
        let parts: Vec<&str> = chunks(&text).collect();
        assert!(parts.len() > 20, "a long text of many lines splits: {}", parts.len());
        assert_eq!(parts.concat(), text);
        let mut at = 0;
        for p in &parts[..parts.len() - 1] {
            at += p.len();
            assert!(splits_at(&text, at), "a chunk ended inside a piece at {at}: {:?}", &text[at - 5..at + 5]);
        }
        assert!(!splits_at("a\n/b", 2) && !splits_at("a\n b", 2) && !splits_at("a\n\u{a0}b", 2) && splits_at("a\nb", 2));
    }

    #[test]
    fn remembered_counts_stay_bounded() {
        for i in 0..3000 {
            remember(&format!("{i:>2000}"), 1);
        }
        let m = memo();
        let bytes: usize = m.young.keys().chain(m.old.keys()).map(|k| k.len() + ENTRY_COST).sum();
        assert!(bytes <= 2 * (GENERATION_BYTES + 2000 + ENTRY_COST), "{bytes}");
        let latest = format!("{:>2000}", 2999);
        assert_eq!(m.young.get(latest.as_str()).or(m.old.get(latest.as_str())), Some(&1), "the latest count is kept");
    }
}
