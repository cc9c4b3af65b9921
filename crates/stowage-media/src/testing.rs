//! Deterministic sample inputs for tests and benchmarks, here and in other crates: a photo-like
//! PNG, a screenshot-like PNG, a decompression-bomb PNG, and real text PDFs.
//!
//! Not part of the API proper (hidden from the docs), but compiled always: the generators are
//! small and other crates' integration tests and benches need real files, not mocks.

use std::io::Cursor;

use image::{DynamicImage, ImageFormat, Rgb, RgbImage};
use lopdf::content::{Content, Operation};
use lopdf::{Document, Object, Stream, dictionary};

/// A "detailed", photo-like PNG: smooth gradients and soft discs under per-pixel noise, so it
/// compresses about as badly as a real photo saved as PNG (about 3 bytes a pixel) and has
/// thousands of distinct colours.
pub fn noisy_png(width: u32, height: u32) -> Vec<u8> {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let (w, h) = (f64::from(width.max(1)), f64::from(height.max(1)));
    // A few soft discs ("objects in the scene"), placed relative to the size.
    let discs = [(0.3, 0.4, 0.22, [200.0, 90.0, 40.0]), (0.7, 0.6, 0.3, [40.0, 120.0, 200.0]), (0.55, 0.2, 0.12, [240.0, 230.0, 120.0])];
    let image = RgbImage::from_fn(width, height, |x, y| {
        let (u, v) = (f64::from(x) / w, f64::from(y) / h);
        let mut c = [60.0 + 120.0 * u, 80.0 + 100.0 * v, 150.0 - 80.0 * u * v];
        for (cx, cy, r, colour) in discs {
            let d = ((u - cx).powi(2) + (v - cy).powi(2)).sqrt() / r;
            let weight = (1.0 - d * d).clamp(0.0, 1.0);
            for (channel, target) in c.iter_mut().zip(colour) {
                *channel += (target - *channel) * weight;
            }
        }
        let mut px = [0u8; 3];
        for (out, channel) in px.iter_mut().zip(c) {
            let noise = f64::from((rng.next() % 33) as u8) - 16.0;
            *out = (channel + noise).clamp(0.0, 255.0) as u8;
        }
        Rgb(px)
    });
    png_bytes(DynamicImage::ImageRgb8(image))
}

/// A UI-screenshot-like PNG: flat panels, a title bar, a sidebar, rows of dark "text" bars,
/// buttons with borders and rules. A few dozen colours; compresses very well.
pub fn screenshot_png(width: u32, height: u32) -> Vec<u8> {
    const BACKGROUND: Rgb<u8> = Rgb([248, 249, 250]);
    const TITLE: Rgb<u8> = Rgb([32, 33, 36]);
    const SIDEBAR: Rgb<u8> = Rgb([232, 234, 237]);
    const TEXT: Rgb<u8> = Rgb([60, 64, 67]);
    const LINK: Rgb<u8> = Rgb([26, 115, 232]);
    const RULE: Rgb<u8> = Rgb([218, 220, 224]);
    let mut image = RgbImage::from_pixel(width, height, BACKGROUND);
    let mut fill = |x0: u32, y0: u32, x1: u32, y1: u32, colour: Rgb<u8>| {
        for y in y0.min(height)..y1.min(height) {
            for x in x0.min(width)..x1.min(width) {
                image.put_pixel(x, y, colour);
            }
        }
    };
    let title_h = (height / 20).max(4);
    let sidebar_w = width / 5;
    fill(0, 0, width, title_h, TITLE);
    fill(0, title_h, sidebar_w, height, SIDEBAR);
    let mut rng = XorShift(42);
    // Sidebar entries.
    let mut y = title_h + 16;
    while y + 10 < height {
        let len = 40 + rng.next() % (u64::from(sidebar_w.max(80)) - 60);
        fill(16, y, 16 + len as u32, y + 8, TEXT);
        y += 28;
    }
    // Content: paragraphs of text bars, with a link-coloured heading and a rule between.
    let left = sidebar_w + 32;
    let mut y = title_h + 24;
    while y + 40 < height {
        fill(left, y, left + (width - left) / 3, y + 14, LINK);
        y += 30;
        for _ in 0..4 {
            let span = u64::from(width.saturating_sub(left + 40).max(2));
            let len = span / 2 + rng.next() % (span / 2);
            // Words: bars with gaps.
            let mut x = u64::from(left);
            while x < u64::from(left) + len {
                let word = 20 + rng.next() % 60;
                fill(x as u32, y, (x + word) as u32, y + 9, TEXT);
                x += word + 8;
            }
            y += 20;
        }
        // A button with a one-pixel border.
        fill(left, y, left + 120, y + 32, RULE);
        fill(left + 1, y + 1, left + 119, y + 31, Rgb([255, 255, 255]));
        fill(left + 24, y + 12, left + 96, y + 20, LINK);
        y += 48;
        fill(left, y, width.saturating_sub(24), y + 1, RULE);
        y += 24;
    }
    png_bytes(DynamicImage::ImageRgb8(image))
}

/// A decompression bomb: a valid PNG header declaring 100000×100000 8-bit RGB pixels (30 GB
/// decoded) with a tiny compressed body. Under 100 bytes.
pub fn bomb_png() -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    // Bit depth 8, colour type 2 (RGB), deflate, filter method 0, no interlace.
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    // A complete zlib stream of 16 zero bytes: far short of what the header promises, which
    // a decoder would only notice after allocating for the whole image.
    chunk(&mut png, b"IDAT", &[0x78, 0xda, 0x63, 0x60, 0x40, 0x05, 0x00, 0x00, 0x10, 0x00, 0x01]);
    chunk(&mut png, b"IEND", &[]);
    png
}

/// A real, Flate-compressed PDF of `pages` pages of Helvetica text; page N starts with
/// "This is page N of `pages`".
pub fn sample_text_pdf(pages: u32) -> Vec<u8> {
    let texts: Vec<String> = (1..=pages)
        .map(|n| {
            format!(
                "This is page {n} of {pages} of the Stowage sample document.\n\
                 It has a few lines of ordinary text so that extraction has something to find.\n\
                 Line three mentions the number {} and the word stowage-{n}.\n\
                 The quick brown fox jumps over the lazy dog, and keeps jumping.",
                n * 7
            )
        })
        .collect();
    text_pdf(&texts.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A PDF with one page per entry: each line of the entry drawn as a line of Helvetica text.
/// An empty entry gives a page with a grey box and no text at all, like a scanned page.
/// Characters outside Latin-1 are drawn as '?'.
pub fn text_pdf(pages: &[&str]) -> Vec<u8> {
    let mut doc = Document::with_version("1.7");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font",
        "Subtype" => "Type1",
        "BaseFont" => "Helvetica",
        "Encoding" => "WinAnsiEncoding",
    });
    let resources_id = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font_id } });
    let mut kids = Vec::new();
    for text in pages {
        let operations = if text.is_empty() {
            vec![
                Operation::new("g", vec![0.5.into()]),
                Operation::new("re", vec![72.into(), 72.into(), 451.into(), 698.into()]),
                Operation::new("f", vec![]),
            ]
        } else {
            let mut ops = vec![
                Operation::new("BT", vec![]),
                Operation::new("Tf", vec!["F1".into(), 12.into()]),
                Operation::new("TL", vec![16.into()]),
                Operation::new("Td", vec![72.into(), 760.into()]),
            ];
            for (i, line) in text.lines().enumerate() {
                if i > 0 {
                    ops.push(Operation::new("T*", vec![]));
                }
                let latin1: Vec<u8> = line.chars().map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')).collect();
                ops.push(Operation::new("Tj", vec![Object::string_literal(latin1)]));
            }
            ops.push(Operation::new("ET", vec![]));
            ops
        };
        let content = Content { operations }.encode().expect("content of plain operators encodes");
        let content_id = doc.add_object(Stream::new(dictionary! {}, content));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page",
            "Parent" => pages_id,
            "Contents" => content_id,
        });
        kids.push(Object::from(page_id));
    }
    let count = i64::try_from(kids.len()).expect("page count fits i64");
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages",
            "Kids" => kids,
            "Count" => count,
            "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog_id);
    doc.compress();
    let mut out = Vec::new();
    doc.save_to(&mut out).expect("writing a PDF to memory cannot fail");
    out
}

fn png_bytes(image: DynamicImage) -> Vec<u8> {
    let mut out = Vec::new();
    image.write_to(&mut Cursor::new(&mut out), ImageFormat::Png).expect("encoding a PNG in memory cannot fail");
    out
}

/// Appends one PNG chunk: length, type, data, CRC-32 of type and data.
fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&u32::try_from(data.len()).expect("small chunk").to_be_bytes());
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(kind.iter().chain(data));
    png.extend_from_slice(&crc.to_be_bytes());
}

/// Bitwise CRC-32 (IEEE), plenty fast for a few bytes and no extra dependency.
fn crc32<'a>(bytes: impl Iterator<Item = &'a u8>) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// A tiny deterministic generator: the samples must be identical on every run and machine.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_png_spec_example() {
        // The CRC of an IEND chunk is the well-known AE 42 60 82.
        assert_eq!(crc32(b"IEND".iter()), 0xae42_6082);
    }

    #[test]
    fn samples_are_deterministic_and_shaped() {
        assert_eq!(noisy_png(64, 48), noisy_png(64, 48));
        let noisy = image::load_from_memory(&noisy_png(320, 240)).unwrap();
        assert_eq!((noisy.width(), noisy.height()), (320, 240));
        let shot = screenshot_png(320, 240);
        assert!(shot.len() < noisy_png(320, 240).len() / 10, "screenshots compress far better than photos");
        let pdf = sample_text_pdf(3);
        assert!(pdf.starts_with(b"%PDF-1.7"));
        assert_eq!(Document::load_mem(&pdf).unwrap().get_pages().len(), 3);
    }
}
