//! Image probes, size-bounded previews, "fit or pass through", and native-resolution crops.
//!
//! Every entry point reads the header first and refuses an image whose declared size breaks
//! [`ImageLimits`] before a single pixel is decoded: a 5 KB PNG may declare 100000×100000
//! pixels (a decompression bomb) and would otherwise ask for tens of gigabytes.
//!
//! # How a preview chooses its format
//!
//! A preview is PNG (lossless) for *graphics* — screenshots, diagrams, charts, anything with
//! transparency — and JPEG (lossy, quality 80) for *photos*. The test is cheap: if any pixel
//! is not fully opaque the image is a graphic (JPEG cannot carry alpha); otherwise up to
//! [`SAMPLE_PIXELS`] pixels are sampled on a regular grid of the original and their distinct
//! RGB colours counted. Fewer than [`GRAPHIC_COLOURS`] distinct colours means a graphic: UI
//! screenshots and charts use a few hundred colours (anti-aliased text adds some), while a
//! photo's sensor noise and gradients give thousands within the first few thousand samples.
//! The count is taken on the original because downscaling blends neighbours into new colours.
//!
//! # How a preview meets its byte budget
//!
//! The image is downscaled so its long edge is at most `max_edge` (never upscaled), then
//! encoded; while the result is over `max_bytes`: a graphic's PNG falls back to JPEG at the
//! same size (text stays legible longer that way than by shrinking; transparency is
//! flattened onto white), JPEG steps down in quality 80 → 65 → 50, and then the size shrinks
//! by at least 0.75 per step (more when the last attempt was far over: bytes scale roughly with
//! the pixel count, so the factor is the square root of budget / size). When an attempt is over
//! twice the budget the remaining quality steps are skipped, since they save at most about
//! half. Only when an image with a long edge of [`MIN_EDGE`] pixels still does not fit is the
//! answer [`MediaError::CannotFit`]. Each step resizes from the full-resolution original, so
//! repeated shrinking does not compound blur. PNG is first encoded with the fast deflate; only
//! when that is within twice the budget is the slower, smaller default level tried too.

use std::io::Cursor;

use fast_image_resize as fir;
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::metadata::Orientation;
use image::{ColorType, DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader};

use crate::budget::{self, Permit};
use crate::error::{MediaError, bytes_in_words, one_line};

/// How many pixels the graphic-or-photo test samples at most.
pub const SAMPLE_PIXELS: u64 = 64 * 1024;
/// Fewer distinct RGB colours than this among the samples makes an image a graphic (PNG).
pub const GRAPHIC_COLOURS: usize = 2048;
/// The smallest long edge a preview shrinks to before giving up with [`MediaError::CannotFit`].
pub const MIN_EDGE: u32 = 16;
/// JPEG qualities tried in turn at each size.
const JPEG_QUALITIES: [u8; 3] = [80, 65, 50];
/// The quality of a crop from a lossy original that needs no fitting: high, because the
/// point of a region read is to see detail the preview lost.
const REGION_JPEG_QUALITY: u8 = 90;

/// Decompression-bomb guard: the largest image this crate will decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// Widest image decoded, in pixels.
    pub max_width: u32,
    /// Tallest image decoded, in pixels.
    pub max_height: u32,
    /// Most pixels (width × height) decoded.
    pub max_pixels: u64,
    /// Most bytes the decoder may allocate at once (passed to `image::Limits::max_alloc`).
    pub max_alloc: u64,
}

impl Default for ImageLimits {
    /// 16384×16384, 64 megapixels, 512 MiB: a 64 MP RGBA image is 256 MiB decoded, which
    /// leaves room for the converted copy and the resize buffers.
    fn default() -> Self {
        ImageLimits { max_width: 16_384, max_height: 16_384, max_pixels: 64_000_000, max_alloc: 512 * 1024 * 1024 }
    }
}

/// What [`probe`] learns from the header alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// The MIME type, e.g. `image/png`.
    pub format: &'static str,
    /// Width in pixels as displayed (after the EXIF orientation, for JPEG and WebP).
    pub width: u32,
    /// Height in pixels as displayed.
    pub height: u32,
}

/// The size budget of a preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviewOptions {
    /// The longest edge of the result, in pixels.
    pub max_edge: u32,
    /// The most bytes the encoded result may have.
    pub max_bytes: usize,
}

impl Default for PreviewOptions {
    /// 768 px and 96 KiB: enough to read a screenshot's headings and see a photo's subject,
    /// and about 130 KB of base64, small enough for a model's context.
    fn default() -> Self {
        PreviewOptions { max_edge: 768, max_bytes: 96 * 1024 }
    }
}

/// An encoded image: a preview, a crop, or the original passed through by [`fit`].
#[derive(Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The encoded bytes.
    pub bytes: Vec<u8>,
    /// Their MIME type, e.g. `image/jpeg`.
    pub mime_type: &'static str,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

impl std::fmt::Debug for Encoded {
    // The bytes would flood a test failure or a log line; their length is what matters.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoded")
            .field("bytes", &format_args!("{} bytes", self.bytes.len()))
            .field("mime_type", &self.mime_type)
            .field("width", &self.width)
            .field("height", &self.height)
            .finish()
    }
}

/// A rectangle of an image, in pixels of the image as displayed; `x`, `y` is its top-left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Left edge, 0-based.
    pub x: u32,
    /// Top edge, 0-based.
    pub y: u32,
    /// Width in pixels (at least 1).
    pub width: u32,
    /// Height in pixels (at least 1).
    pub height: u32,
}

/// Reads the format and the dimensions from the header; decodes no pixels.
///
/// Does not apply [`ImageLimits`] (it allocates nothing that depends on the declared size), so
/// it can report a bomb's declared size; [`preview`], [`fit`] and [`region`] refuse it.
pub fn probe(bytes: &[u8]) -> Result<ImageInfo, MediaError> {
    let header = read_header(bytes)?;
    Ok(ImageInfo { format: header.format.to_mime_type(), width: header.width, height: header.height })
}

/// A downscaled, re-encoded preview within `opts` (see the module docs for the format choice
/// and the budget ladder).
pub fn preview(bytes: &[u8], opts: &PreviewOptions, limits: &ImageLimits) -> Result<Encoded, MediaError> {
    check_options(opts)?;
    let (image, _, _permit) = decode(bytes, limits)?;
    fit_pixels(image, opts)
}

/// The original bytes unchanged when they already fit `opts` (long edge ≤ `max_edge` and
/// size ≤ `max_bytes`), a [`preview`] otherwise. Passing through keeps the exact pixels, an
/// animated GIF's frames, and costs no decode.
pub fn fit(bytes: &[u8], opts: &PreviewOptions, limits: &ImageLimits) -> Result<Encoded, MediaError> {
    check_options(opts)?;
    let header = read_header(bytes)?;
    check_limits(header.width, header.height, limits)?;
    if header.width.max(header.height) <= opts.max_edge && bytes.len() <= opts.max_bytes {
        return Ok(Encoded { bytes: bytes.to_vec(), mime_type: header.format.to_mime_type(), width: header.width, height: header.height });
    }
    preview(bytes, opts, limits)
}

/// A crop of the original at native resolution. Only when the crop's long edge is over
/// `max_edge`, or its encoding over `max_bytes`, is it fitted down like a [`preview`].
///
/// A crop of a lossless original (PNG, GIF, BMP) that needs no fitting is PNG with exactly
/// the original's pixels (and colour type, 16-bit included); a crop of a lossy original (JPEG,
/// WebP) is JPEG at quality 90. The region must lie wholly inside the image.
pub fn region(bytes: &[u8], region: Region, opts: &PreviewOptions, limits: &ImageLimits) -> Result<Encoded, MediaError> {
    check_options(opts)?;
    // Check the rectangle against the header before decoding: a bad request fails in
    // microseconds, whatever the image's size.
    let header = read_header(bytes)?;
    check_region(region, header.width, header.height)?;
    let (image, format, _permit) = decode(bytes, limits)?;
    let crop = image.crop_imm(region.x, region.y, region.width, region.height);
    drop(image);
    if region.width.max(region.height) <= opts.max_edge {
        if is_lossless(format) {
            if let Ok(exact) = encode_png_exact(&crop, opts.max_bytes)? {
                return Ok(exact);
            }
        } else if crop.color().has_alpha() {
            // Lossy with alpha (WebP): JPEG would drop the transparency, so let the ladder
            // decide (it picks PNG for images with transparency).
            return fit_pixels(crop, opts);
        } else {
            let exact = encode_jpeg(&crop.to_rgb8(), REGION_JPEG_QUALITY)?;
            if exact.bytes.len() <= opts.max_bytes {
                return Ok(exact);
            }
        }
    }
    fit_pixels(crop, opts)
}

/// The header's facts, with the EXIF orientation already applied to the dimensions.
struct Header {
    format: ImageFormat,
    width: u32,
    height: u32,
    /// Bytes per decoded pixel (8 for 16-bit RGBA).
    bytes_per_pixel: u8,
}

impl Header {
    /// What decoding and previewing it may hold at the peak: the decoded pixels, plus the
    /// 8-bit RGBA and RGB copies a preview converts them to (the share asked of the decode
    /// budget).
    fn peak_bytes(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height) * (u64::from(self.bytes_per_pixel) + 4 + 3)
    }
}

/// A reader over the caller's bytes.
type Reader<'a> = ImageReader<Cursor<&'a [u8]>>;

fn open(bytes: &[u8]) -> Result<(Reader<'_>, ImageFormat), MediaError> {
    let reader = ImageReader::new(Cursor::new(bytes)).with_guessed_format().map_err(|e| MediaError::NotAnImage { reason: one_line(e) })?;
    let format = reader.format().ok_or_else(|| MediaError::NotAnImage {
        reason: if bytes.is_empty() { "it is empty".to_owned() } else { "its first bytes match no known image format".to_owned() },
    })?;
    // An explicit list rather than "whatever image was compiled with": another crate in the
    // build could switch on more of image's formats (feature unification), and what the
    // gateway promises should not change with that.
    if !matches!(format, ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::Gif | ImageFormat::WebP | ImageFormat::Bmp) {
        return Err(MediaError::NotAnImage { reason: format!("{} images are not supported", format_name(format)) });
    }
    Ok((reader, format))
}

fn read_header(bytes: &[u8]) -> Result<Header, MediaError> {
    let (mut reader, format) = open(bytes)?;
    // No limits for the header: decoders check them against the declared size here, and the
    // whole point is to learn the declared size so the refusal can name it.
    reader.no_limits();
    let mut decoder = reader.into_decoder().map_err(|e| decode_error(e, None))?;
    let (width, height) = decoder.dimensions();
    let bytes_per_pixel = decoder.color_type().bytes_per_pixel();
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let (width, height) = if swaps_axes(orientation) { (height, width) } else { (width, height) };
    Ok(Header { format, width, height, bytes_per_pixel })
}

/// Decodes the whole image, refusing it first if the header breaks `limits`; applies the EXIF
/// orientation so pixels are as displayed (regions are given in displayed coordinates). The
/// permit is the image's share of the decode budget: hold it until the pixels are gone.
fn decode(bytes: &[u8], limits: &ImageLimits) -> Result<(DynamicImage, ImageFormat, Permit), MediaError> {
    let header = read_header(bytes)?;
    check_limits(header.width, header.height, limits)?;
    let permit = budget::acquire(header.peak_bytes(), "the image")?;
    let (mut reader, format) = open(bytes)?;
    // The decoder enforces these too, as a second line: the allocation cap also covers
    // decoders' own buffers (a GIF's frame, a WebP's alpha plane).
    // Both edges get the larger limit: check_limits has already applied the exact ones, and
    // an EXIF rotation may have swapped the stored width and height.
    let edge = limits.max_width.max(limits.max_height);
    let mut image_limits = image::Limits::default();
    image_limits.max_image_width = Some(edge);
    image_limits.max_image_height = Some(edge);
    image_limits.max_alloc = Some(limits.max_alloc);
    reader.limits(image_limits);
    let dims = Some((header.width, header.height, limits.max_alloc));
    let mut decoder = reader.into_decoder().map_err(|e| decode_error(e, dims))?;
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let mut image = DynamicImage::from_decoder(decoder).map_err(|e| decode_error(e, dims))?;
    image.apply_orientation(orientation);
    Ok((image, format, permit))
}

fn swaps_axes(orientation: Orientation) -> bool {
    matches!(orientation, Orientation::Rotate90 | Orientation::Rotate270 | Orientation::Rotate90FlipH | Orientation::Rotate270FlipH)
}

fn check_limits(width: u32, height: u32, limits: &ImageLimits) -> Result<(), MediaError> {
    // The width and height limits apply to the image as stored; an orientation swap is
    // allowed for (a 16384-wide image rotated is still decodable) by checking both ways.
    let fits_edges =
        (width <= limits.max_width && height <= limits.max_height) || (height <= limits.max_width && width <= limits.max_height);
    let pixels = u64::from(width) * u64::from(height);
    if fits_edges && pixels <= limits.max_pixels {
        return Ok(());
    }
    Err(MediaError::TooLarge {
        width,
        height,
        limit: format!("at most {}x{} and {} megapixels", limits.max_width, limits.max_height, limits.max_pixels as f64 / 1e6),
    })
}

fn check_options(opts: &PreviewOptions) -> Result<(), MediaError> {
    if opts.max_edge == 0 || opts.max_bytes == 0 {
        return Err(MediaError::BadOptions {
            message: format!(
                "a preview needs a positive size budget, got max_edge {} and max_bytes {}; ask for at least {} pixels and a few KB",
                opts.max_edge, opts.max_bytes, MIN_EDGE
            ),
        });
    }
    Ok(())
}

fn check_region(region: Region, width: u32, height: u32) -> Result<(), MediaError> {
    let Region { x, y, width: w, height: h } = region;
    if w == 0 || h == 0 {
        return Err(MediaError::BadRegion {
            message: format!(
                "region {x},{y} {w}x{h} is empty; give a width and a height of at least 1 pixel (the image is {width}x{height} pixels)"
            ),
        });
    }
    // u64 so that x + width cannot overflow for hostile requests.
    if u64::from(x) + u64::from(w) > u64::from(width) || u64::from(y) + u64::from(h) > u64::from(height) {
        return Err(MediaError::BadRegion {
            message: format!(
                "region {x},{y} {w}x{h} goes past the image's {width}x{height} pixels; keep x+width ≤ {width} and y+height ≤ {height}"
            ),
        });
    }
    Ok(())
}

/// Maps a decoder's error to one of ours; `dims` is the header's size and the allocation
/// cap when known, so a memory-limit refusal can name them.
fn decode_error(error: ImageError, dims: Option<(u32, u32, u64)>) -> MediaError {
    match (error, dims) {
        (ImageError::Limits(_), Some((width, height, max_alloc))) => {
            MediaError::TooLarge { width, height, limit: format!("decoding it needs more than the {} allowed", bytes_in_words(max_alloc)) }
        }
        (ImageError::IoError(e), _) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            MediaError::NotAnImage { reason: "the data ends early; the file is truncated".to_owned() }
        }
        (e, _) => MediaError::NotAnImage { reason: one_line(e) },
    }
}

fn format_name(format: ImageFormat) -> String {
    format.extensions_str().first().map_or_else(|| format!("{format:?}"), |ext| ext.to_uppercase())
}

/// Formats whose decoded pixels are exactly what was encoded.
fn is_lossless(format: ImageFormat) -> bool {
    matches!(format, ImageFormat::Png | ImageFormat::Gif | ImageFormat::Bmp)
}

/// The budget ladder (see the module docs). Consumes the decoded image: it is converted in
/// place to 8-bit RGB or RGBA, which is all a preview needs.
fn fit_pixels(image: DynamicImage, opts: &PreviewOptions) -> Result<Encoded, MediaError> {
    let work = if image.color().has_alpha() {
        let rgba = image.into_rgba8();
        // Alpha that is 255 everywhere carries nothing; dropping it lets the image be JPEG.
        if rgba.pixels().all(|p| p.0[3] == u8::MAX) {
            DynamicImage::ImageRgb8(DynamicImage::ImageRgba8(rgba).into_rgb8())
        } else {
            DynamicImage::ImageRgba8(rgba)
        }
    } else {
        DynamicImage::ImageRgb8(image.into_rgb8())
    };
    let graphic = work.color().has_alpha() || looks_graphic(&work);
    let (mut width, mut height) = scaled_to_edge(work.width(), work.height(), opts.max_edge);
    let mut resizer = fir::Resizer::new();
    loop {
        let resized;
        let current = if (width, height) == (work.width(), work.height()) {
            &work
        } else {
            resized = resize(&mut resizer, &work, width, height)?;
            &resized
        };
        let mut last_len = usize::MAX;
        if graphic {
            match encode_png_within(current, opts.max_bytes)? {
                Ok(png) => return Ok(png),
                Err(len) => last_len = len,
            }
        }
        let rgb = flatten_to_rgb(current);
        for quality in JPEG_QUALITIES {
            let jpeg = encode_jpeg(&rgb, quality)?;
            if jpeg.bytes.len() <= opts.max_bytes {
                return Ok(jpeg);
            }
            last_len = last_len.min(jpeg.bytes.len());
            if jpeg.bytes.len() > 2 * opts.max_bytes {
                break;
            }
        }
        if width.max(height) <= MIN_EDGE {
            return Err(MediaError::CannotFit { max_bytes: opts.max_bytes, width, height });
        }
        let factor = (opts.max_bytes as f64 / last_len as f64).sqrt().min(0.75);
        let long = width.max(height);
        // long > MIN_EDGE here, so the range is not empty; every step shrinks by a pixel at least.
        let target = ((f64::from(long) * factor).floor() as u32).clamp(MIN_EDGE, long - 1);
        (width, height) = scaled_to_edge(work.width(), work.height(), target);
    }
}

/// The size with the long edge at most `max_edge`, keeping the aspect ratio; never larger
/// than the original, never below 1 pixel.
fn scaled_to_edge(width: u32, height: u32, max_edge: u32) -> (u32, u32) {
    let long = width.max(height);
    if long <= max_edge {
        return (width, height);
    }
    let scale = f64::from(max_edge) / f64::from(long);
    let w = ((f64::from(width) * scale).round() as u32).clamp(1, max_edge);
    let h = ((f64::from(height) * scale).round() as u32).clamp(1, max_edge);
    (w, h)
}

/// Graphic (few colours) or photo: see the module docs.
fn looks_graphic(image: &DynamicImage) -> bool {
    let (width, height) = (image.width(), image.height());
    let total = u64::from(width) * u64::from(height);
    // A square grid with about SAMPLE_PIXELS points.
    let step = ((total as f64 / SAMPLE_PIXELS as f64).sqrt().ceil() as u32).max(1) as usize;
    let (bytes, channels) = match image {
        DynamicImage::ImageRgb8(buf) => (buf.as_raw(), 3),
        DynamicImage::ImageRgba8(buf) => (buf.as_raw(), 4),
        // fit_pixels only passes these two; anything else is treated as a photo.
        _ => return false,
    };
    let row_len = width as usize * channels;
    let mut seen = std::collections::HashSet::with_capacity(GRAPHIC_COLOURS);
    for row in bytes.chunks_exact(row_len).step_by(step) {
        for px in row.chunks_exact(channels).step_by(step) {
            seen.insert(u32::from_le_bytes([px[0], px[1], px[2], 0]));
            // Stop early: a photo crosses the line within its first few thousand samples.
            if seen.len() >= GRAPHIC_COLOURS {
                return false;
            }
        }
    }
    true
}

fn resize(resizer: &mut fir::Resizer, src: &DynamicImage, width: u32, height: u32) -> Result<DynamicImage, MediaError> {
    let mut dst = DynamicImage::new(width, height, src.color());
    // Catmull-Rom: as sharp as a bicubic downscale should be (text in screenshots stays
    // crisp) and, with fast_image_resize's SIMD, a few milliseconds for a 2-megapixel source.
    let options = fir::ResizeOptions::new().resize_alg(fir::ResizeAlg::Convolution(fir::FilterType::CatmullRom));
    resizer.resize(src, &mut dst, &options).map_err(|e| MediaError::Encode { reason: one_line(e) })?;
    Ok(dst)
}

/// RGB for JPEG: transparency is flattened onto white, which is what a viewer shows for a
/// transparent screenshot or logo on a light page.
fn flatten_to_rgb(image: &DynamicImage) -> image::RgbImage {
    match image {
        DynamicImage::ImageRgba8(rgba) => {
            let mut rgb = image::RgbImage::new(rgba.width(), rgba.height());
            for (out, px) in rgb.pixels_mut().zip(rgba.pixels()) {
                let [r, g, b, a] = px.0;
                let a = u16::from(a);
                let blend = |c: u8| ((u16::from(c) * a + 255 * (255 - a) + 127) / 255) as u8;
                out.0 = [blend(r), blend(g), blend(b)];
            }
            rgb
        }
        other => other.to_rgb8(),
    }
}

fn encode_png(image: &DynamicImage, compression: CompressionType) -> Result<Encoded, MediaError> {
    let mut bytes = Vec::new();
    let encoder = PngEncoder::new_with_quality(&mut bytes, compression, FilterType::Adaptive);
    image.write_with_encoder(encoder).map_err(|e| MediaError::Encode { reason: one_line(e) })?;
    Ok(Encoded { bytes, mime_type: ImageFormat::Png.to_mime_type(), width: image.width(), height: image.height() })
}

/// PNG within `max_bytes` if it can be: `Ok(Err(size))` when it is over (the size of the
/// smallest attempt, for the ladder's shrink factor).
///
/// The fast deflate (fdeflate) runs first: ten times quicker than zlib's default level and
/// about 15–45% larger. When even that is over twice the budget the default level cannot
/// bring it under, and the slow encode is skipped (it cost 9 ms of a 28 ms region read of a
/// photo-like PNG); otherwise the default level's smaller output is the one used.
fn encode_png_within(image: &DynamicImage, max_bytes: usize) -> Result<Result<Encoded, usize>, MediaError> {
    let fast = encode_png(image, CompressionType::Fast)?;
    if fast.bytes.len() > max_bytes.saturating_mul(2) {
        return Ok(Err(fast.bytes.len()));
    }
    let small = encode_png(image, CompressionType::Default)?;
    let best = if small.bytes.len() <= fast.bytes.len() { small } else { fast };
    Ok(if best.bytes.len() <= max_bytes { Ok(best) } else { Err(best.bytes.len()) })
}

/// PNG keeping the colour type (16-bit, grey, alpha) so the pixels are the original's,
/// within `max_bytes` if it can be (as [`encode_png_within`]).
fn encode_png_exact(image: &DynamicImage, max_bytes: usize) -> Result<Result<Encoded, usize>, MediaError> {
    match image.color() {
        ColorType::L8
        | ColorType::La8
        | ColorType::Rgb8
        | ColorType::Rgba8
        | ColorType::L16
        | ColorType::La16
        | ColorType::Rgb16
        | ColorType::Rgba16 => encode_png_within(image, max_bytes),
        // Float pixels come only from formats we do not decode; PNG cannot hold them.
        _ => encode_png_within(&DynamicImage::ImageRgba8(image.to_rgba8()), max_bytes),
    }
}

fn encode_jpeg(rgb: &image::RgbImage, quality: u8) -> Result<Encoded, MediaError> {
    let mut bytes = Vec::new();
    JpegEncoder::new_with_quality(&mut bytes, quality).encode_image(rgb).map_err(|e| MediaError::Encode { reason: one_line(e) })?;
    Ok(Encoded { bytes, mime_type: ImageFormat::Jpeg.to_mime_type(), width: rgb.width(), height: rgb.height() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use std::time::{Duration, Instant};

    fn decode_plain(bytes: &[u8]) -> DynamicImage {
        image::load_from_memory(bytes).unwrap()
    }

    #[test]
    fn probe_reads_png_and_jpeg_headers() {
        let png = testing::screenshot_png(320, 200);
        assert_eq!(probe(&png).unwrap(), ImageInfo { format: "image/png", width: 320, height: 200 });
        let jpeg = encode_jpeg(&decode_plain(&png).to_rgb8(), 80).unwrap();
        assert_eq!(probe(&jpeg.bytes).unwrap(), ImageInfo { format: "image/jpeg", width: 320, height: 200 });
    }

    #[test]
    fn probe_refuses_non_images_in_one_line() {
        for bytes in [&b""[..], b"hello, world", b"%PDF-1.7\n1 0 obj", &[0x89, b'P', b'N', b'G', 13, 10, 26, 10, 0, 0]] {
            let err = probe(bytes).unwrap_err();
            assert!(matches!(err, MediaError::NotAnImage { .. }), "{err:?}");
            let text = err.to_string();
            assert!(text.starts_with("the artifact is not an image this gateway can decode ("), "{text}");
            assert!(!text.contains('\n'), "{text}");
        }
    }

    #[test]
    fn unsupported_formats_are_named() {
        // A TIFF header: a real format, but not one previews promise.
        let err = probe(b"II*\0\x08\0\0\0\0\0").unwrap_err();
        assert!(matches!(err, MediaError::NotAnImage { .. }), "{err:?}");
    }

    #[test]
    fn bomb_is_refused_fast_before_decoding() {
        let bomb = testing::bomb_png();
        assert!(bomb.len() < 1024, "the bomb should be tiny, it is {} bytes", bomb.len());
        assert_eq!(probe(&bomb).unwrap(), ImageInfo { format: "image/png", width: 100_000, height: 100_000 });
        let started = Instant::now();
        let limits = ImageLimits::default();
        for result in [
            preview(&bomb, &PreviewOptions::default(), &limits),
            fit(&bomb, &PreviewOptions::default(), &limits),
            region(&bomb, Region { x: 0, y: 0, width: 10, height: 10 }, &PreviewOptions::default(), &limits),
        ] {
            let err = result.unwrap_err();
            assert!(matches!(err, MediaError::TooLarge { width: 100_000, height: 100_000, .. }), "{err:?}");
            assert!(err.to_string().contains("100000x100000"), "{err}");
        }
        assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    }

    #[test]
    fn pixel_and_alloc_limits_apply() {
        let png = testing::screenshot_png(400, 300);
        let tight = ImageLimits { max_pixels: 100_000, ..ImageLimits::default() };
        assert!(matches!(preview(&png, &PreviewOptions::default(), &tight), Err(MediaError::TooLarge { width: 400, height: 300, .. })));
        let narrow = ImageLimits { max_width: 100, max_height: 100, ..ImageLimits::default() };
        assert!(matches!(preview(&png, &PreviewOptions::default(), &narrow), Err(MediaError::TooLarge { .. })));
        // The decoder's own allocation cap: 400×300×3 bytes will not fit in 1 KiB.
        let no_memory = ImageLimits { max_alloc: 1024, ..ImageLimits::default() };
        let err = preview(&png, &PreviewOptions::default(), &no_memory).unwrap_err();
        assert!(matches!(err, MediaError::TooLarge { width: 400, height: 300, .. }), "{err:?}");
        assert!(err.to_string().contains("needs more than the 1024 bytes allowed"), "{err}");
    }

    #[test]
    fn screenshot_preview_is_png_and_bounded() {
        let png = testing::screenshot_png(1600, 1200);
        let out = preview(&png, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
        assert_eq!(out.mime_type, "image/png");
        assert_eq!((out.width, out.height), (768, 576));
        assert!(out.bytes.len() <= 96 * 1024, "{out:?}");
        assert_eq!(probe(&out.bytes).unwrap().width, 768);
    }

    #[test]
    fn photo_preview_is_jpeg_and_bounded() {
        let png = testing::noisy_png(1600, 1200);
        let opts = PreviewOptions::default();
        let out = preview(&png, &opts, &ImageLimits::default()).unwrap();
        assert_eq!(out.mime_type, "image/jpeg");
        assert!(out.bytes.len() <= opts.max_bytes, "{out:?}");
        assert!(out.width <= 768 && out.height <= 576, "{out:?}");
        // Same aspect ratio, to a pixel.
        assert!((i64::from(out.width) * 1200 - i64::from(out.height) * 1600).abs() <= 1600, "{out:?}");
        let info = probe(&out.bytes).unwrap();
        assert_eq!((info.width, info.height), (out.width, out.height));
    }

    #[test]
    fn tight_budget_shrinks_and_impossible_budget_fails() {
        let png = testing::noisy_png(800, 600);
        let small = PreviewOptions { max_edge: 768, max_bytes: 8 * 1024 };
        let out = preview(&png, &small, &ImageLimits::default()).unwrap();
        assert!(out.bytes.len() <= 8 * 1024, "{out:?}");
        assert!(out.width < 768, "{out:?}");

        let impossible = PreviewOptions { max_edge: 768, max_bytes: 50 };
        let err = preview(&png, &impossible, &ImageLimits::default()).unwrap_err();
        assert!(matches!(err, MediaError::CannotFit { max_bytes: 50, .. }), "{err:?}");
        assert!(err.to_string().contains("50 bytes"), "{err}");
    }

    #[test]
    fn never_upscales() {
        let png = testing::screenshot_png(100, 50);
        let out = preview(&png, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
        assert_eq!((out.width, out.height), (100, 50));
    }

    #[test]
    fn transparency_keeps_png() {
        let mut rgba = image::RgbaImage::from_pixel(1000, 500, image::Rgba([255, 0, 0, 0]));
        for (x, y, px) in rgba.enumerate_pixels_mut() {
            if (x / 50 + y / 50) % 2 == 0 {
                *px = image::Rgba([0, 0, 255, 255]);
            }
        }
        let mut bytes = Vec::new();
        DynamicImage::ImageRgba8(rgba).write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png).unwrap();
        let out = preview(&bytes, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
        assert_eq!(out.mime_type, "image/png");
        assert!(decode_plain(&out.bytes).color().has_alpha());
    }

    #[test]
    fn fit_passes_small_originals_through_unchanged() {
        let png = testing::screenshot_png(300, 200);
        let out = fit(&png, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
        assert_eq!(out.bytes, png);
        assert_eq!((out.mime_type, out.width, out.height), ("image/png", 300, 200));

        // Too many bytes (even though small in pixels): re-encoded.
        let noisy = testing::noisy_png(700, 500);
        assert!(noisy.len() > 96 * 1024);
        let out = fit(&noisy, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
        assert_ne!(out.bytes, noisy);
        assert!(out.bytes.len() <= 96 * 1024);

        // Too many pixels: re-encoded.
        let big = testing::screenshot_png(1600, 1200);
        let out = fit(&big, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
        assert_eq!(out.width, 768);
    }

    #[test]
    fn region_of_a_png_is_pixel_identical() {
        let png = testing::noisy_png(1600, 1200);
        let original = decode_plain(&png);
        let r = Region { x: 1000, y: 700, width: 400, height: 300 };
        let opts = PreviewOptions { max_edge: 768, max_bytes: 1024 * 1024 };
        let out = region(&png, r, &opts, &ImageLimits::default()).unwrap();
        assert_eq!((out.mime_type, out.width, out.height), ("image/png", 400, 300));
        let crop = decode_plain(&out.bytes);
        assert_eq!(crop.color(), original.color());
        assert_eq!(crop.as_bytes(), original.crop_imm(1000, 700, 400, 300).as_bytes());
    }

    #[test]
    fn region_over_budget_is_fitted() {
        let png = testing::noisy_png(1600, 1200);
        // Within max_edge but its exact PNG is over the default 96 KiB: fitted down.
        let r = Region { x: 0, y: 0, width: 400, height: 300 };
        let out = region(&png, r, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
        assert!(out.bytes.len() <= 96 * 1024, "{out:?}");
        // Over max_edge: downscaled.
        let r = Region { x: 0, y: 0, width: 1600, height: 1000 };
        let out = region(&png, r, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
        assert!(out.width <= 768 && out.height <= 480, "{out:?}");
    }

    #[test]
    fn region_of_a_jpeg_is_jpeg_at_native_size() {
        let png = testing::noisy_png(640, 480);
        let jpeg = encode_jpeg(&decode_plain(&png).to_rgb8(), 85).unwrap();
        let r = Region { x: 10, y: 20, width: 100, height: 50 };
        let out = region(&jpeg.bytes, r, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
        assert_eq!((out.mime_type, out.width, out.height), ("image/jpeg", 100, 50));
    }

    #[test]
    fn bad_regions_name_the_image_size() {
        let png = testing::screenshot_png(1600, 1200);
        let opts = PreviewOptions::default();
        let limits = ImageLimits::default();
        let err = region(&png, Region { x: 1500, y: 1100, width: 200, height: 200 }, &opts, &limits).unwrap_err();
        assert_eq!(
            err.to_string(),
            "region 1500,1100 200x200 goes past the image's 1600x1200 pixels; keep x+width ≤ 1600 and y+height ≤ 1200"
        );
        let err = region(&png, Region { x: 0, y: 0, width: 0, height: 10 }, &opts, &limits).unwrap_err();
        assert!(matches!(err, MediaError::BadRegion { .. }));
        assert!(err.to_string().contains("1600x1200"), "{err}");
        let err = region(&png, Region { x: u32::MAX, y: 0, width: u32::MAX, height: 1 }, &opts, &limits).unwrap_err();
        assert!(matches!(err, MediaError::BadRegion { .. }));
    }

    #[test]
    fn zero_budgets_are_refused() {
        let png = testing::screenshot_png(10, 10);
        let err = preview(&png, &PreviewOptions { max_edge: 0, max_bytes: 10 }, &ImageLimits::default()).unwrap_err();
        assert!(matches!(err, MediaError::BadOptions { .. }));
    }

    #[test]
    fn truncated_png_is_not_an_image() {
        let png = testing::noisy_png(200, 200);
        let err = preview(&png[..png.len() / 2], &PreviewOptions::default(), &ImageLimits::default()).unwrap_err();
        assert!(matches!(err, MediaError::NotAnImage { .. }), "{err:?}");
    }

    #[test]
    fn gif_bmp_and_webp_decode() {
        let original = decode_plain(&testing::screenshot_png(900, 300));
        for (format, mime) in [(ImageFormat::Gif, "image/gif"), (ImageFormat::Bmp, "image/bmp"), (ImageFormat::WebP, "image/webp")] {
            let mut bytes = Vec::new();
            let pixels = if format == ImageFormat::Gif { DynamicImage::ImageRgba8(original.to_rgba8()) } else { original.clone() };
            pixels.write_to(&mut Cursor::new(&mut bytes), format).unwrap();
            assert_eq!(probe(&bytes).unwrap(), ImageInfo { format: mime, width: 900, height: 300 });
            let out = preview(&bytes, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
            assert_eq!((out.width, out.height), (768, 256), "{mime}");
            let r = Region { x: 10, y: 10, width: 50, height: 40 };
            let out = region(&bytes, r, &PreviewOptions::default(), &ImageLimits::default()).unwrap();
            assert_eq!((out.width, out.height), (50, 40), "{mime}");
        }
    }

    #[test]
    fn graphic_test_separates_screenshots_from_photos() {
        assert!(looks_graphic(&decode_plain(&testing::screenshot_png(800, 600))));
        assert!(!looks_graphic(&decode_plain(&testing::noisy_png(800, 600))));
    }

    #[test]
    fn scaling_keeps_aspect_and_bounds() {
        assert_eq!(scaled_to_edge(1600, 1200, 768), (768, 576));
        assert_eq!(scaled_to_edge(1200, 1600, 768), (576, 768));
        assert_eq!(scaled_to_edge(10_000, 1, 100), (100, 1));
        assert_eq!(scaled_to_edge(50, 40, 768), (50, 40));
    }
}
