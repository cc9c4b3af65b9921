//! Small, valid sample files made in code (PDF, PNG, WAV) for the demo server, fixtures and
//! benchmarks: real magic numbers and headers, deterministic bytes, any size, no binary
//! fixtures in the repository.

/// A valid single-page PDF of roughly `size` bytes (the page stream is padded with comments).
pub fn pdf(size: usize, title: &str) -> Vec<u8> {
    let text = format!("BT /F1 24 Tf 72 720 Td ({title}) Tj ET\n");
    let pad = size.saturating_sub(600 + text.len());
    let mut stream = text.into_bytes();
    // Deterministic filler that does not compress to nothing and stays printable.
    let mut x: u32 = 0x1234_5678;
    let mut line = Vec::with_capacity(80);
    while stream.len() < pad {
        line.clear();
        line.extend_from_slice(b"% ");
        for _ in 0..76 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            line.push(b'!' + (x % 90) as u8);
        }
        line.push(b'\n');
        stream.extend_from_slice(&line);
    }
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>".to_owned(),
    ];
    let mut out = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{o}\nendobj\n", i + 1).as_bytes());
    }
    offsets.push(out.len());
    out.extend_from_slice(format!("4 0 obj\n<< /Length {} >>\nstream\n", stream.len()).as_bytes());
    out.extend_from_slice(&stream);
    out.extend_from_slice(b"\nendstream\nendobj\n");
    offsets.push(out.len());
    out.extend_from_slice(b"5 0 obj\n<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>\nendobj\n");
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", offsets.len() + 1).as_bytes());
    for o in &offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(format!("trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n", offsets.len() + 1).as_bytes());
    out
}

/// A valid RGB PNG of `w`×`h` pixels with a gradient, stored uncompressed (deflate "stored"
/// blocks), so its size is predictable: about `3·w·h` bytes.
pub fn png(w: u32, h: u32) -> Vec<u8> {
    let mut raw = Vec::with_capacity(((3 * w + 1) * h) as usize);
    for y in 0..h {
        raw.push(0); // filter: none
        for x in 0..w {
            raw.extend_from_slice(&[(x * 255 / w.max(1)) as u8, (y * 255 / h.max(1)) as u8, 160]);
        }
    }
    let mut z = vec![0x78, 0x01];
    let mut chunks = raw.chunks(65_535).peekable();
    while let Some(c) = chunks.next() {
        z.push(u8::from(chunks.peek().is_none()));
        z.extend_from_slice(&(c.len() as u16).to_le_bytes());
        z.extend_from_slice(&(!(c.len() as u16)).to_le_bytes());
        z.extend_from_slice(c);
    }
    z.extend_from_slice(&adler2::adler32_slice(&raw).to_be_bytes());
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    for (kind, data) in [(b"IHDR", ihdr.as_slice()), (b"IDAT", z.as_slice()), (b"IEND", &[][..])] {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    }
    out
}

/// A mono 16-bit PCM WAV with a 440 Hz tone, `ms` milliseconds at 8 kHz.
pub fn wav(ms: u32) -> Vec<u8> {
    let rate = 8000u32;
    let n = rate * ms / 1000;
    let mut data = Vec::with_capacity(n as usize * 2);
    for i in 0..n {
        let t = i as f32 / rate as f32;
        let s = ((t * 440.0 * std::f32::consts::TAU).sin() * 8000.0) as i16;
        data.extend_from_slice(&s.to_le_bytes());
    }
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_recognised_by_their_magic_numbers() {
        let p = pdf(10_000, "x");
        assert!(p.len() >= 9_000 && p.len() <= 11_000, "{}", p.len());
        assert_eq!(infer::get(&p).unwrap().mime_type(), "application/pdf");
        assert_eq!(infer::get(&png(8, 8)).unwrap().mime_type(), "image/png");
        let size = imagesize::blob_size(&png(40, 30)).unwrap();
        assert_eq!((size.width, size.height), (40, 30));
        assert_eq!(infer::get(&wav(100)).unwrap().mime_type(), "audio/x-wav");
    }
}
