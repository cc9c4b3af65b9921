//! Page text from PDFs, bounded in input size, output size and time, and never a panic.
//!
//! The parser ([`lopdf`]) runs on its own thread inside [`std::panic::catch_unwind`]: PDF
//! parsers meet hostile input all day and can panic or loop on it, and the gateway must answer
//! with an error either way. A parse that outlives [`PdfLimits::timeout`] is abandoned (see
//! [`pdf_text`]).

use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lopdf::{Document, LoadOptions};

use crate::budget;
use crate::error::{MediaError, one_line};

/// The most bytes any one stream (an object stream, a page's content) may inflate to. Real
/// pages need well under a megabyte; this stops a small "zip bomb" stream from taking memory
/// the gateway shares with every other call.
const MAX_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

/// Bounds on one [`pdf_text`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PdfLimits {
    /// Larger PDFs are refused before parsing.
    pub max_input_bytes: usize,
    /// Wall-clock cap on parsing and extraction.
    pub timeout: Duration,
    /// The most characters (Unicode scalar values) of text returned, over all pages.
    pub max_chars: usize,
}

impl Default for PdfLimits {
    /// 64 MiB, 5 s, 100,000 characters (about 25,000 tokens: a generous but bounded share of a
    /// model's context).
    fn default() -> Self {
        PdfLimits { max_input_bytes: 64 * 1024 * 1024, timeout: Duration::from_secs(5), max_chars: 100_000 }
    }
}

/// The text of one page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageText {
    /// 1-based page number.
    pub number: u32,
    /// The page's text, one line per text line the PDF draws (as far as the PDF says).
    pub text: String,
}

/// The result of [`pdf_text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdfText {
    /// How many pages the PDF has.
    pub page_count: u32,
    /// The pages read, in ascending order. May stop short of the request when `truncated`.
    pub pages: Vec<PageText>,
    /// True when text was cut at [`PdfLimits::max_chars`] (the last page's text may end
    /// mid-page, and later requested pages may be missing).
    pub truncated: bool,
    /// False when none of the pages read has any visible text: an image-only (scanned) PDF,
    /// which needs OCR rather than text extraction.
    pub has_text_layer: bool,
}

/// Parses a page selection: `"2"`, `"1-3"`, `"1,3,5-7"`, or an open range `"4-"` (page 4 to
/// the end). Pages are 1-based and checked against `page_count`. The result is ascending and
/// without repeats, whatever order the selection names them in.
pub fn parse_pages(spec: &str, page_count: u32) -> Result<Vec<u32>, MediaError> {
    let bad = |message: String| MediaError::BadPages { message };
    let example = "use e.g. \"2\", \"1-3\" or \"1,3,5-7\"";
    let has = if page_count == 1 { "1 page".to_owned() } else { format!("{page_count} pages") };
    if spec.trim().is_empty() {
        return Err(bad(format!("no pages were given; {example}")));
    }
    let number = |text: &str| -> Result<u32, MediaError> {
        let text = text.trim();
        let n: u32 = text.parse().map_err(|_| bad(format!("\"{}\" is not a page number; {example}", one_line(text))))?;
        if n == 0 {
            return Err(bad("page 0 does not exist: pages are numbered from 1".to_owned()));
        }
        Ok(n)
    };
    let mut pages = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (first, last) = match part.split_once('-') {
            Some((a, b)) if b.trim().is_empty() => (number(a)?, page_count.max(1)),
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(part)?;
                (n, n)
            }
        };
        if first > last {
            return Err(bad(format!("the range {first}-{last} runs backwards; write it as {last}-{first}")));
        }
        if last > page_count {
            return Err(bad(if first == last {
                format!("page {first} is past the end: the PDF has {has}")
            } else if first > page_count {
                format!("pages {first}-{last} are past the end: the PDF has {has}")
            } else {
                format!("pages {first}-{last} go past the end: the PDF has {has}; ask for {first}-{page_count}")
            }));
        }
        pages.extend(first..=last);
    }
    pages.sort_unstable();
    pages.dedup();
    Ok(pages)
}

/// Extracts the text of the selected pages (`pages` as in [`parse_pages`]).
///
/// With `pages: None` it reads from page 1 on, page after page, until the PDF ends or
/// `max_chars` is reached: the beginning of the document, as much as the budget allows. A
/// `truncated` result then says there is more.
///
/// Runs the parser on a new thread and waits at most `limits.timeout`. On timeout the thread
/// cannot be stopped (Rust has no safe way to kill a thread), so it is abandoned: it keeps its
/// copy of the input until the parser returns, and checks the deadline between pages so that
/// a long document stops soon after. Only a parser stuck inside one page outlives that.
pub fn pdf_text(bytes: &[u8], pages: Option<&str>, limits: &PdfLimits) -> Result<PdfText, MediaError> {
    if bytes.len() > limits.max_input_bytes {
        return Err(MediaError::PdfTooLarge { size: bytes.len(), max: limits.max_input_bytes });
    }
    // The parse's share of the decode budget, held by the thread (which may outlive this call)
    // until it is done. lopdf holds the parsed objects beside the input, a few times its size,
    // and inflates one stream at a time.
    let permit = budget::acquire(pdf_peak_bytes(bytes.len()), "the PDF")?;
    // Owned copies: the thread may outlive this call (on timeout), so it cannot borrow.
    let input = bytes.to_vec();
    let spec = pages.map(str::to_owned);
    let limits = *limits;
    let deadline = Instant::now() + limits.timeout;
    let (sender, receiver) = mpsc::sync_channel(1);
    thread::Builder::new()
        .name("stowage-pdf-text".to_owned())
        // lopdf parses recursively (nesting capped at 100 levels); a stack overflow would abort
        // the whole gateway, which catch_unwind cannot stop, so give it room beyond the 2 MiB
        // default. Only touched pages of the stack are ever committed.
        .stack_size(8 * 1024 * 1024)
        .spawn(move || {
            let _permit = permit;
            let result = panic::catch_unwind(AssertUnwindSafe(|| extract(&input, spec.as_deref(), &limits, deadline)))
                .unwrap_or_else(|payload| Err(MediaError::Pdf(format!("the parser failed on it: {}", panic_message(&*payload)))));
            // The receiver is gone after a timeout; nobody needs the result then.
            let _ = sender.send(result);
        })
        .map_err(|e| MediaError::Pdf(format!("could not start the PDF reader: {}", one_line(e))))?;
    match receiver.recv_timeout(limits.timeout) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(MediaError::Timeout { limit: limits.timeout }),
        // Only if the thread died without sending, which catch_unwind should rule out.
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(MediaError::Pdf("the parser stopped without an answer".to_owned())),
    }
}

/// What parsing a PDF of `len` bytes may hold at its peak: the input and its copy, the parsed
/// objects (about twice the input), and one inflated stream.
fn pdf_peak_bytes(len: usize) -> u64 {
    len as u64 * 4 + MAX_DECOMPRESSED_BYTES as u64
}

fn extract(bytes: &[u8], spec: Option<&str>, limits: &PdfLimits, deadline: Instant) -> Result<PdfText, MediaError> {
    if !bytes.starts_with(b"%PDF-") && !bytes.get(..1024).is_some_and(|head| contains(head, b"%PDF-")) {
        // lopdf is lenient and would try to rebuild a document out of anything; a file with
        // no PDF header at all is not worth the attempt (the spec allows junk before it, so
        // look in the first KB).
        return Err(MediaError::Pdf("it does not start with a %PDF- header".to_owned()));
    }
    let options = LoadOptions { max_decompressed_size: Some(MAX_DECOMPRESSED_BYTES), ..LoadOptions::default() };
    let doc = Document::load_mem_with_options(bytes, options).map_err(|e| MediaError::Pdf(one_line(e)))?;
    if doc.is_encrypted() && !doc.was_encrypted() {
        return Err(MediaError::Pdf("it is encrypted and needs a password".to_owned()));
    }
    let page_ids = doc.get_pages();
    let page_count = u32::try_from(page_ids.len()).unwrap_or(u32::MAX);
    if page_count == 0 {
        return Err(MediaError::Pdf("it has no pages".to_owned()));
    }
    let numbers = match spec {
        Some(spec) => parse_pages(spec, page_count)?,
        None => (1..=page_count).collect(),
    };
    let mut remaining = limits.max_chars;
    let mut out = PdfText { page_count, pages: Vec::new(), truncated: false, has_text_layer: false };
    for number in numbers {
        if remaining == 0 {
            out.truncated = true;
            break;
        }
        if Instant::now() > deadline {
            // The caller has already answered with a timeout; stop working for nobody.
            break;
        }
        let mut text = page_text(&doc, number)?;
        out.has_text_layer |= text.chars().any(|c| !c.is_whitespace());
        if let Some((cut, _)) = text.char_indices().nth(remaining) {
            text.truncate(cut);
            out.truncated = true;
        }
        remaining -= text.chars().count();
        out.pages.push(PageText { number, text });
    }
    Ok(out)
}

/// One page's text. A font or string the extractor cannot decode loses only its own text
/// (lopdf reports it as a failed chunk); a page whose content cannot be read at all fails
/// the call with the page named, since silently empty text would read as "no text layer".
fn page_text(doc: &Document, number: u32) -> Result<String, MediaError> {
    let chunks = doc.extract_text_chunks_with_limit(&[number], MAX_DECOMPRESSED_BYTES);
    let mut text = String::new();
    let mut first_error = None;
    let mut any_ok = false;
    for chunk in chunks {
        match chunk {
            Ok(chunk) => {
                any_ok = true;
                text.push_str(&chunk);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if !any_ok => Err(MediaError::Pdf(format!("page {number} cannot be read: {}", one_line(e)))),
        _ => Ok(tidy(&text)),
    }
}

/// Trims trailing spaces from lines and runs of blank lines: extraction emits a newline per
/// text object, and the blank lines carry nothing but tokens.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.lines().map(str::trim_end) {
        if line.is_empty() {
            blank_run += 1;
            if blank_run > 1 || out.is_empty() {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with('\n') {
        out.pop();
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "an internal error".to_owned());
    one_line(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn limits() -> PdfLimits {
        PdfLimits::default()
    }

    #[test]
    fn parse_pages_accepts_the_forms() {
        assert_eq!(parse_pages("2", 5).unwrap(), vec![2]);
        assert_eq!(parse_pages("1-3", 5).unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_pages("1,3,5-7", 7).unwrap(), vec![1, 3, 5, 6, 7]);
        assert_eq!(parse_pages(" 3 , 1 - 2 ,2", 5).unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_pages("4-", 6).unwrap(), vec![4, 5, 6]);
    }

    #[test]
    fn parse_pages_explains_mistakes() {
        let msg = |spec: &str, count| parse_pages(spec, count).unwrap_err().to_string();
        assert_eq!(msg("7", 5), "page 7 is past the end: the PDF has 5 pages");
        assert_eq!(msg("2", 1), "page 2 is past the end: the PDF has 1 page");
        assert_eq!(msg("4-9", 5), "pages 4-9 go past the end: the PDF has 5 pages; ask for 4-5");
        assert_eq!(msg("6-9", 5), "pages 6-9 are past the end: the PDF has 5 pages");
        assert_eq!(msg("3-1", 5), "the range 3-1 runs backwards; write it as 1-3");
        assert_eq!(msg("0", 5), "page 0 does not exist: pages are numbered from 1");
        assert!(msg("", 5).starts_with("no pages were given"));
        assert!(msg("two", 5).starts_with("\"two\" is not a page number"));
        assert!(msg("1,,2", 5).starts_with("\"\" is not a page number"));
        assert!(msg("-3", 5).starts_with("\"\" is not a page number"));
        for spec in ["7", "x", "3-1", ""] {
            assert!(matches!(parse_pages(spec, 5), Err(MediaError::BadPages { .. })));
        }
    }

    #[test]
    fn one_page_is_only_that_page() {
        let pdf = testing::sample_text_pdf(5);
        let out = pdf_text(&pdf, Some("2"), &limits()).unwrap();
        assert_eq!(out.page_count, 5);
        assert_eq!(out.pages.len(), 1);
        assert_eq!(out.pages[0].number, 2);
        assert!(out.pages[0].text.starts_with("This is page 2 of 5"), "{:?}", out.pages[0].text);
        assert!(!out.pages[0].text.contains("page 1 "), "{:?}", out.pages[0].text);
        assert!(!out.pages[0].text.contains("page 3 "), "{:?}", out.pages[0].text);
        assert!(out.has_text_layer);
        assert!(!out.truncated);
    }

    #[test]
    fn a_range_gives_each_page() {
        let pdf = testing::sample_text_pdf(5);
        let out = pdf_text(&pdf, Some("1-3"), &limits()).unwrap();
        assert_eq!(out.pages.iter().map(|p| p.number).collect::<Vec<_>>(), vec![1, 2, 3]);
        for page in &out.pages {
            assert!(page.text.starts_with(&format!("This is page {} of 5", page.number)), "{page:?}");
        }
        let err = pdf_text(&pdf, Some("7"), &limits()).unwrap_err();
        assert_eq!(err.to_string(), "page 7 is past the end: the PDF has 5 pages");
    }

    #[test]
    fn no_selection_reads_from_the_start_within_the_budget() {
        let pdf = testing::sample_text_pdf(10);
        let all = pdf_text(&pdf, None, &limits()).unwrap();
        assert_eq!(all.pages.len(), 10);
        assert!(!all.truncated);

        let budget = all.pages[0].text.chars().count() + 10;
        let out = pdf_text(&pdf, None, &PdfLimits { max_chars: budget, ..limits() }).unwrap();
        assert!(out.truncated);
        assert_eq!(out.pages.len(), 2);
        assert_eq!(out.pages[1].text.chars().count(), 10);
        assert_eq!(out.pages.iter().map(|p| p.text.chars().count()).sum::<usize>(), budget);
    }

    #[test]
    fn cut_respects_char_boundaries() {
        let pdf = testing::text_pdf(&["Caf\u{e9} cr\u{e8}me br\u{fb}l\u{e9}e"]);
        let full = pdf_text(&pdf, Some("1"), &limits()).unwrap();
        assert_eq!(full.pages[0].text, "Caf\u{e9} cr\u{e8}me br\u{fb}l\u{e9}e");
        let out = pdf_text(&pdf, Some("1"), &PdfLimits { max_chars: 4, ..limits() }).unwrap();
        assert_eq!(out.pages[0].text, "Caf\u{e9}");
        assert!(out.truncated);
    }

    #[test]
    fn pages_without_text_have_no_text_layer() {
        let pdf = testing::text_pdf(&["Some words", ""]);
        let blank = pdf_text(&pdf, Some("2"), &limits()).unwrap();
        assert_eq!(blank.page_count, 2);
        assert!(!blank.has_text_layer);
        assert_eq!(blank.pages[0].text, "");
        let both = pdf_text(&pdf, Some("1-2"), &limits()).unwrap();
        assert!(both.has_text_layer);
    }

    #[test]
    fn malformed_inputs_are_pdf_errors_not_panics() {
        let real = testing::sample_text_pdf(3);
        let mut noise = vec![0u8; 4096];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for b in &mut noise {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
        let mut header_then_noise = b"%PDF-1.7\n".to_vec();
        header_then_noise.extend_from_slice(&noise);
        // Deep nesting: a recursive parser must not overflow the stack (that aborts the
        // process, which catch_unwind cannot stop).
        let nested = |open: &str, close: &str| {
            let mut pdf = b"%PDF-1.7\n1 0 obj\n".to_vec();
            pdf.extend(open.repeat(100_000).bytes());
            pdf.extend(close.repeat(100_000).bytes());
            pdf.extend_from_slice(b"\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n");
            pdf
        };
        let inputs: Vec<(&str, Vec<u8>)> = vec![
            ("nested arrays", nested("[", "]")),
            ("nested dictionaries", nested("<< /A ", ">>")),
            ("nested strings", nested("(", ")")),
            ("random bytes", noise.clone()),
            ("empty", Vec::new()),
            ("truncated", real[..real.len() / 2].to_vec()),
            ("header only", b"%PDF-1.7".to_vec()),
            ("header and garbage", header_then_noise),
            ("header and text", b"%PDF-1.7\nthis is not a pdf at all\n%%EOF".to_vec()),
        ];
        for (name, input) in inputs {
            match pdf_text(&input, None, &limits()) {
                Err(MediaError::Pdf(reason)) => assert!(!reason.contains('\n'), "{name}: {reason}"),
                other => panic!("{name}: expected MediaError::Pdf, got {other:?}"),
            }
        }
    }

    #[test]
    fn deeply_nested_page_content_is_survived() {
        // A well-formed PDF whose page content nests arrays 100,000 deep: the content parser
        // runs when the page's text is extracted, not when the file loads.
        let mut doc = Document::load_mem(&testing::sample_text_pdf(1)).unwrap();
        let page = *doc.get_pages().get(&1).unwrap();
        let mut content = b"BT ".to_vec();
        content.extend("[".repeat(100_000).bytes());
        content.extend("]".repeat(100_000).bytes());
        content.extend_from_slice(b" TJ ET");
        doc.change_page_content(page, content).unwrap();
        let mut pdf = Vec::new();
        doc.save_to(&mut pdf).unwrap();
        match pdf_text(&pdf, None, &limits()) {
            Ok(out) => assert!(!out.has_text_layer, "{out:?}"),
            Err(MediaError::Pdf(_)) => {}
            Err(other) => panic!("expected text or MediaError::Pdf, got {other:?}"),
        }
    }

    #[test]
    fn too_large_is_refused_before_parsing() {
        let pdf = testing::sample_text_pdf(2);
        let err = pdf_text(&pdf, None, &PdfLimits { max_input_bytes: 100, ..limits() }).unwrap_err();
        assert!(matches!(err, MediaError::PdfTooLarge { max: 100, .. }), "{err:?}");
    }

    #[test]
    fn timeout_is_reported() {
        let pdf = testing::sample_text_pdf(200);
        let err = pdf_text(&pdf, None, &PdfLimits { timeout: Duration::ZERO, ..limits() }).unwrap_err();
        assert_eq!(err, MediaError::Timeout { limit: Duration::ZERO });
    }

    #[test]
    fn panics_become_errors() {
        let payload: Box<dyn std::any::Any + Send> = Box::new("index out of bounds\n at somewhere");
        assert_eq!(panic_message(&*payload), "index out of bounds at somewhere");
        let payload: Box<dyn std::any::Any + Send> = Box::new(42_u8);
        assert_eq!(panic_message(&*payload), "an internal error");
    }

    #[test]
    fn tidy_drops_blank_runs() {
        assert_eq!(tidy("\n\na  \n\n\n\nb\n\n"), "a\n\nb");
    }
}
