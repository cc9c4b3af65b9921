//! Benchmarks of the media helpers on generated inputs: previews of a 1600×1200 photo-like and
//! screenshot-like PNG, a 400×300 region read, the header probe, and PDF page text.
//!
//! Targets: a photo preview ≤ 40 ms, a region read ≤ 30 ms, PDF text ≤ 20 ms a page.
//! Run: `cargo bench -p stowage-media -- --warm-up-time 1 --measurement-time 5`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use stowage_media::{ImageLimits, PdfLimits, PreviewOptions, Region, pdf_text, preview, probe, region, testing};

fn images(c: &mut Criterion) {
    let photo = testing::noisy_png(1600, 1200);
    let screenshot = testing::screenshot_png(1600, 1200);
    let opts = PreviewOptions::default();
    let limits = ImageLimits::default();
    // Print what is measured, so the figures can be read against the inputs and outputs.
    for (name, png) in [("photo", &photo), ("screenshot", &screenshot)] {
        let out = preview(png, &opts, &limits).unwrap();
        eprintln!("{name}: {} bytes in, preview {} {}x{} {} bytes", png.len(), out.mime_type, out.width, out.height, out.bytes.len());
    }
    let crop = Region { x: 600, y: 450, width: 400, height: 300 };
    let out = region(&photo, crop, &opts, &limits).unwrap();
    eprintln!("region of photo: {} {}x{} {} bytes", out.mime_type, out.width, out.height, out.bytes.len());

    let mut group = c.benchmark_group("image");
    group.sample_size(30);
    group.bench_function("preview_photo_1600x1200", |b| b.iter(|| preview(black_box(&photo), &opts, &limits).unwrap()));
    group.bench_function("preview_screenshot_1600x1200", |b| b.iter(|| preview(black_box(&screenshot), &opts, &limits).unwrap()));
    group.bench_function("region_400x300_of_photo_1600x1200", |b| b.iter(|| region(black_box(&photo), crop, &opts, &limits).unwrap()));
    group.bench_function("region_400x300_of_screenshot_1600x1200", |b| {
        b.iter(|| region(black_box(&screenshot), crop, &opts, &limits).unwrap())
    });
    group.bench_function("probe_photo_1600x1200", |b| b.iter(|| probe(black_box(&photo)).unwrap()));
    // Floors: the bare decode every preview and region pays before doing anything.
    group.bench_function("floor_decode_photo_1600x1200", |b| b.iter(|| image::load_from_memory(black_box(&photo)).unwrap()));
    group.bench_function("floor_decode_screenshot_1600x1200", |b| b.iter(|| image::load_from_memory(black_box(&screenshot)).unwrap()));
    group.finish();
}

fn pdf(c: &mut Criterion) {
    let pdf = testing::sample_text_pdf(100);
    let limits = PdfLimits::default();
    eprintln!("pdf: 100 pages, {} bytes", pdf.len());
    let mut group = c.benchmark_group("pdf");
    group.sample_size(30);
    group.bench_function("text_page_50_of_100", |b| b.iter(|| pdf_text(black_box(&pdf), Some("50"), &limits).unwrap()));
    group.bench_function("text_all_100_pages", |b| b.iter(|| pdf_text(black_box(&pdf), Some("1-100"), &limits).unwrap()));
    group.finish();
}

criterion_group!(benches, images, pdf);
criterion_main!(benches);
