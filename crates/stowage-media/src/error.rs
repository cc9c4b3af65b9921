//! The one error type of this crate, [`MediaError`].
//!
//! Every message is a single line that says what is wrong and what to do about it: the
//! gateway hands it to a model as a tool error, so it must be actionable on its own and must
//! never name a file on the server (nothing here ever reads a path, so none can leak).

use std::time::Duration;

/// Why a probe, preview, crop or PDF text extraction failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    /// The bytes are not an image in a format this crate decodes, or they are damaged.
    #[error(
        "the artifact is not an image this gateway can decode ({reason}); previews work for PNG, JPEG, GIF, WebP and BMP, so fetch the raw bytes instead"
    )]
    NotAnImage {
        /// What the decoder said, on one line.
        reason: String,
    },
    /// The image's declared size is over [`ImageLimits`](crate::ImageLimits): refused before
    /// any pixel is decoded, so a decompression bomb costs nothing.
    #[error(
        "the image is {width}x{height} pixels, more than this gateway decodes ({limit}); fetch the original bytes instead of a preview"
    )]
    TooLarge {
        /// Declared width in pixels.
        width: u32,
        /// Declared height in pixels.
        height: u32,
        /// The limit it broke, in words.
        limit: String,
    },
    /// The requested region is empty or not inside the image.
    #[error("{message}")]
    BadRegion {
        /// The full one-line message, naming the image's size.
        message: String,
    },
    /// Not even a tiny preview fits the byte budget.
    #[error(
        "the image cannot be made to fit in {max_bytes} bytes, even shrunk to {width}x{height} pixels; allow more bytes or ask for a smaller region"
    )]
    CannotFit {
        /// The byte budget that was asked for.
        max_bytes: usize,
        /// The smallest size tried.
        width: u32,
        /// The smallest size tried.
        height: u32,
    },
    /// The preview options themselves are unusable (a zero edge or byte budget).
    #[error("{message}")]
    BadOptions {
        /// The full one-line message.
        message: String,
    },
    /// Encoding the result failed; not expected for decoded pixels, kept so it is not a panic.
    #[error("encoding the preview failed ({reason}); fetch the original bytes instead")]
    Encode {
        /// What the encoder said, on one line.
        reason: String,
    },
    /// The bytes are not a PDF this crate can read (malformed, encrypted, or the parser gave up).
    #[error("the artifact is not a readable PDF ({0}); fetch the raw bytes instead")]
    Pdf(String),
    /// The PDF is over [`PdfLimits::max_input_bytes`](crate::PdfLimits::max_input_bytes);
    /// refused before parsing.
    #[error("the PDF is {size} bytes, more than the {max} bytes this gateway reads text from; fetch the raw bytes instead")]
    PdfTooLarge {
        /// The PDF's size in bytes.
        size: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The page selection is malformed or names pages the PDF does not have.
    #[error("{message}")]
    BadPages {
        /// The full one-line message, naming the page count when it matters.
        message: String,
    },
    /// The decode alone would need more memory than the budget all decodes share
    /// ([`set_decode_budget`](crate::set_decode_budget)).
    #[error(
        "decoding {what} needs about {}, more than the {} this gateway allows all decodes together; fetch the original bytes instead",
        bytes_in_words(*.needed),
        bytes_in_words(*.budget)
    )]
    OverBudget {
        /// "the image", "the PDF".
        what: String,
        /// The decode's estimated peak, in bytes.
        needed: u64,
        /// The whole budget, in bytes.
        budget: u64,
    },
    /// Other decodes held the shared memory budget for longer than a decode waits.
    #[error("other decodes are using this gateway's decode memory and {what} waited {} for room; try again in a moment", seconds(.waited))]
    Busy {
        /// "the image", "the PDF".
        what: String,
        /// How long it waited.
        waited: Duration,
    },
    /// Text extraction ran past [`PdfLimits::timeout`](crate::PdfLimits::timeout).
    #[error(
        "reading the PDF's text took longer than {} and was stopped; ask for fewer pages, e.g. pages \"1\"",
        seconds(.limit)
    )]
    Timeout {
        /// The time limit that was hit.
        limit: Duration,
    },
}

impl MediaError {
    /// A stable, machine-readable code for the error (for a tool error's `code` field).
    pub fn code(&self) -> &'static str {
        match self {
            MediaError::NotAnImage { .. } => "not_an_image",
            MediaError::TooLarge { .. } => "image_too_large",
            MediaError::BadRegion { .. } => "bad_region",
            MediaError::CannotFit { .. } => "cannot_fit",
            MediaError::BadOptions { .. } => "bad_options",
            MediaError::Encode { .. } => "encode_failed",
            MediaError::Pdf(_) => "pdf_unreadable",
            MediaError::PdfTooLarge { .. } => "pdf_too_large",
            MediaError::BadPages { .. } => "bad_pages",
            MediaError::Timeout { .. } => "pdf_timeout",
            MediaError::OverBudget { .. } => "media_over_budget",
            MediaError::Busy { .. } => "media_busy",
        }
    }
}

/// "5 s", "0.25 s": short and unambiguous in a message.
fn seconds(d: &Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 { format!("{s:.0} s") } else { format!("{s} s") }
}

/// "512 MiB", "1.5 GiB", "1024 bytes": sizes for messages.
pub(crate) fn bytes_in_words(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * MIB;
    if bytes >= GIB {
        let g = bytes as f64 / GIB as f64;
        if g.fract() == 0.0 { format!("{g:.0} GiB") } else { format!("{g:.1} GiB") }
    } else if bytes >= MIB {
        format!("{} MiB", bytes.div_ceil(MIB))
    } else {
        format!("{bytes} bytes")
    }
}

/// Squeezes a third-party error message onto one short line: messages are shown to a model,
/// and a parser's multi-line dump or a huge echoed token helps nobody.
pub(crate) fn one_line(text: impl std::fmt::Display) -> String {
    const MAX: usize = 160;
    let joined = text.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= MAX {
        return joined;
    }
    let mut cut: String = joined.chars().take(MAX).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line() {
        let errors = [
            MediaError::NotAnImage { reason: one_line("bad\nsignature") },
            MediaError::Timeout { limit: Duration::from_secs(5) },
            MediaError::Timeout { limit: Duration::from_millis(250) },
            MediaError::Pdf(one_line("x".repeat(500))),
        ];
        for e in errors {
            let text = e.to_string();
            assert!(!text.contains('\n'), "{text}");
            assert!(text.len() < 400, "{text}");
        }
        assert_eq!(
            MediaError::Timeout { limit: Duration::from_secs(5) }.to_string(),
            "reading the PDF's text took longer than 5 s and was stopped; ask for fewer pages, e.g. pages \"1\""
        );
        assert!(MediaError::Timeout { limit: Duration::from_millis(250) }.to_string().contains("0.25 s"));
    }

    #[test]
    fn codes_are_distinct() {
        let codes = [
            MediaError::NotAnImage { reason: String::new() }.code(),
            MediaError::TooLarge { width: 1, height: 1, limit: String::new() }.code(),
            MediaError::Pdf(String::new()).code(),
            MediaError::Timeout { limit: Duration::ZERO }.code(),
        ];
        let unique: std::collections::HashSet<_> = codes.iter().collect();
        assert_eq!(unique.len(), codes.len());
    }
}
