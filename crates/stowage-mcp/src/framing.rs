//! Newline-delimited JSON framing for stdio, with no small cap on a line's length.
//!
//! MCP's stdio transport puts one message per line. Tool results of hundreds of megabytes must
//! pass (>= 256 MB without loss or stall), so a line may be any length up to a
//! configured safety limit (default 1 GiB) that stops a runaway peer from exhausting memory.
//!
//! Small lines are read through a 1 MiB buffer and copied out once. A line that outgrows the
//! buffer is read straight into its own growing allocation, so a 50 MB result is copied only
//! by the kernel (pipe to line), never again through an intermediate buffer; the few bytes
//! read past its newline are kept for the next line. Newlines are found with `memchr` (SIMD),
//! so the reader keeps up with the pipe rather than scanning byte by byte.

use bytes::BufMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Default upper bound on one message, in bytes.
pub(crate) const DEFAULT_MAX_LINE_BYTES: usize = 1 << 30;

const READ_BUFFER_BYTES: usize = 1 << 20;

/// How much of a refused line is kept in [`FrameError::TooLong`].
pub(crate) const HEAD_BYTES: usize = 4096;

fn too_long(limit: usize, line: &[u8]) -> FrameError {
    FrameError::TooLong { limit, head: line[..line.len().min(HEAD_BYTES)].to_vec() }
}

/// Why a line could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("message is over the {limit} byte limit (max_message_bytes)")]
    TooLong {
        limit: usize,
        /// The line's first bytes (at most [`HEAD_BYTES`]), so a caller can find the id of the
        /// request it answered and fail that request at once instead of letting it time out.
        head: Vec<u8>,
    },
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one message per line.
pub(crate) struct LineReader<R> {
    inner: R,
    /// Read-ahead: bytes `start..end` are read but not yet returned.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    max: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(crate) fn new(reader: R, max: usize) -> Self {
        LineReader { inner: reader, buf: vec![0; READ_BUFFER_BYTES].into_boxed_slice(), start: 0, end: 0, max }
    }

    /// The next non-empty line without its terminator, or `None` at end of input.
    pub(crate) async fn next_line(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            let Some(mut line) = self.read_line().await? else { return Ok(None) };
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Ok(Some(line));
            }
        }
    }

    /// One line without its `\n`; the last line may lack one. `None` at end of input.
    async fn read_line(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let mut scanned = self.start;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[scanned..self.end]) {
                let nl = scanned + i;
                let line = self.buf[self.start..nl].to_vec();
                self.start = nl + 1;
                if line.len() > self.max {
                    return Err(too_long(self.max, &line));
                }
                return Ok(Some(line));
            }
            if self.end - self.start > self.max {
                let e = too_long(self.max, &self.buf[self.start..self.end]);
                self.start = self.end;
                self.skip_line().await?;
                return Err(e);
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                break;
            }
            scanned = self.end;
            let n = self.inner.read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                if self.end == 0 {
                    return Ok(None);
                }
                let line = self.buf[..self.end].to_vec();
                self.end = 0;
                return Ok(Some(line));
            }
            self.end += n;
        }
        self.read_long_line().await.map(Some)
    }

    /// The buffer is full and holds no newline: the line continues in an allocation of its
    /// own, read into directly.
    async fn read_long_line(&mut self) -> Result<Vec<u8>, FrameError> {
        let mut line = Vec::with_capacity(4 * READ_BUFFER_BYTES);
        line.extend_from_slice(&self.buf[..self.end]);
        (self.start, self.end) = (0, 0);
        loop {
            if line.capacity() - line.len() < READ_BUFFER_BYTES {
                // Doubling: a 300 MB line costs a handful of reallocations.
                line.reserve(line.len());
            }
            let before = line.len();
            // At most one buffer's worth per read, so whatever follows the newline fits back
            // into the read-ahead buffer.
            let n = self.inner.read_buf(&mut (&mut line).limit(READ_BUFFER_BYTES)).await?;
            if n == 0 {
                return self.checked(line);
            }
            if let Some(i) = memchr::memchr(b'\n', &line[before..]) {
                let nl = before + i;
                let rest = line.len() - (nl + 1);
                self.buf[..rest].copy_from_slice(&line[nl + 1..]);
                self.end = rest;
                line.truncate(nl);
                return self.checked(line);
            }
            if line.len() > self.max {
                let e = too_long(self.max, &line);
                drop(line);
                self.skip_line().await?;
                return Err(e);
            }
        }
    }

    fn checked(&self, line: Vec<u8>) -> Result<Vec<u8>, FrameError> {
        if line.len() > self.max { Err(too_long(self.max, &line)) } else { Ok(line) }
    }

    /// Discards input up to and including the next newline (the read-ahead is empty).
    async fn skip_line(&mut self) -> Result<(), FrameError> {
        loop {
            let n = self.inner.read(&mut self.buf).await?;
            if n == 0 {
                (self.start, self.end) = (0, 0);
                return Ok(());
            }
            if let Some(i) = memchr::memchr(b'\n', &self.buf[..n]) {
                (self.start, self.end) = (i + 1, n);
                return Ok(());
            }
        }
    }
}

/// Writes `line` and a newline, then flushes: a message is visible to the peer at once.
pub(crate) async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, line: &[u8]) -> std::io::Result<()> {
    w.write_all(line).await?;
    w.write_all(b"\n").await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_of_any_size_and_blank_lines() {
        let big = "x".repeat(3 * READ_BUFFER_BYTES + 17);
        let input = format!("a\n\n  \r\n{big}\r\nlast");
        let mut r = LineReader::new(input.as_bytes(), DEFAULT_MAX_LINE_BYTES);
        assert_eq!(r.next_line().await.unwrap().unwrap(), b"a");
        assert_eq!(r.next_line().await.unwrap().unwrap().len(), big.len());
        assert_eq!(r.next_line().await.unwrap().unwrap(), b"last");
        assert!(r.next_line().await.unwrap().is_none());
    }

    /// Hands out its bytes in reads of varying sizes, as a pipe does.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        sizes: std::iter::Cycle<std::vec::IntoIter<usize>>,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let size = self.sizes.next().unwrap();
            let n = size.min(buf.remaining()).min(self.data.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.data[at..at + n]);
            self.at += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn long_lines_across_reads_of_any_size_keep_what_follows() {
        let long = |c: char, n: usize| c.to_string().repeat(n);
        let lines = [
            long('a', 10),
            long('b', READ_BUFFER_BYTES - 1),
            long('c', READ_BUFFER_BYTES),
            long('d', 5 * READ_BUFFER_BYTES + 3),
            "e".into(),
            long('f', 2 * READ_BUFFER_BYTES),
        ];
        let mut input = lines.join("\n");
        input.push('\n');
        input.push_str("tail without newline");
        for sizes in [vec![1 << 30], vec![65536], vec![7, 100_000, 3, READ_BUFFER_BYTES + 5, 1]] {
            let reader = Trickle { data: input.clone().into_bytes(), at: 0, sizes: sizes.into_iter().cycle() };
            let mut r = LineReader::new(reader, DEFAULT_MAX_LINE_BYTES);
            for want in &lines {
                assert_eq!(r.next_line().await.unwrap().unwrap(), want.as_bytes());
            }
            assert_eq!(r.next_line().await.unwrap().unwrap(), b"tail without newline");
            assert!(r.next_line().await.unwrap().is_none());
        }
        // Over the limit, long or short: refused, and the reader carries on after it.
        let input = format!("{}\nok\n{}\nfine\n", long('x', 3 * READ_BUFFER_BYTES), long('y', 2000));
        let mut r = LineReader::new(input.as_bytes(), 1000);
        assert!(matches!(r.next_line().await, Err(FrameError::TooLong { limit: 1000, .. })));
        assert_eq!(r.next_line().await.unwrap().unwrap(), b"ok");
        assert!(matches!(r.next_line().await, Err(FrameError::TooLong { limit: 1000, .. })));
        assert_eq!(r.next_line().await.unwrap().unwrap(), b"fine");
    }

    #[tokio::test]
    async fn an_oversize_line_is_refused_and_the_next_one_still_reads() {
        let input = format!("{}\nok\n", "y".repeat(100));
        let mut r = LineReader::new(input.as_bytes(), 10);
        assert!(matches!(r.next_line().await, Err(FrameError::TooLong { limit: 10, .. })));
        assert_eq!(r.next_line().await.unwrap().unwrap(), b"ok");
    }
}
