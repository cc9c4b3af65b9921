//! Media helpers for the Stowage gateway: header probes, size-bounded image previews and
//! crops, and PDF page text — pure, synchronous functions (callers run them on a blocking
//! pool), each guarded against hostile input.
//!
//! - Images ([`probe`], [`preview`], [`fit`], [`region`]): the header is read first and an
//!   image whose declared size breaks [`ImageLimits`] is refused before decoding, so a
//!   decompression bomb costs microseconds. Previews are PNG for graphics and JPEG for photos,
//!   within a [`PreviewOptions`] edge and byte budget (see [`images`] for the heuristics).
//! - PDFs ([`pdf_text`], [`parse_pages`]): page text within [`PdfLimits`] (input size,
//!   characters, wall-clock time), on a separate thread under `catch_unwind`, so a malformed
//!   or hostile PDF is an error, never a panic or a hang.
//!
//! - Memory: every decode, image or PDF, runs under one process-wide budget
//!   ([`set_decode_budget`], default [`DEFAULT_DECODE_BUDGET`]) sized from the header before
//!   decoding; over it, a decode waits for room or is refused with a clear error.
//!
//! Every [`MediaError`] message is one line saying what is wrong and what to do, fit to show a
//! model as a tool error.
//!
//! ```
//! use stowage_media::{ImageLimits, PreviewOptions, preview, probe, testing};
//! let png = testing::screenshot_png(1600, 1200);
//! assert_eq!(probe(&png).unwrap().width, 1600);
//! let out = preview(&png, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
//! assert_eq!((out.mime_type, out.width, out.height), ("image/png", 768, 576));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod budget;
mod error;
pub mod images;
pub mod pdf;
#[doc(hidden)]
pub mod testing;

pub use budget::{DEFAULT_DECODE_BUDGET, Permit, decode_budget, decode_bytes_in_use, set_decode_budget};
pub use error::MediaError;
pub use images::{Encoded, ImageInfo, ImageLimits, PreviewOptions, Region, fit, preview, probe, region};
pub use pdf::{PageText, PdfLimits, PdfText, parse_pages, pdf_text};
