//! Newline-delimited JSON framing for stdio, with no small cap on a line's length.
//!
//! MCP's stdio transport puts one message per line. Tool results of hundreds of megabytes must
//! pass (issue 4: >= 256 MB without loss or stall), so a line is read with `read_until` into a
//! buffer that grows as needed, through a 1 MiB `BufReader` so that a 50 MB line costs a few
//! dozen large copies rather than millions of small ones. The only cap is a configured safety
//! limit (default 1 GiB) that stops a runaway peer from exhausting memory.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// Default upper bound on one message, in bytes.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 30;

const READ_BUFFER_BYTES: usize = 1 << 20;

/// Why a line could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("message is over the {limit} byte limit (max_message_bytes)")]
    TooLong { limit: usize },
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one message per line.
pub struct LineReader<R> {
    inner: BufReader<R>,
    max: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(reader: R, max: usize) -> Self {
        LineReader { inner: BufReader::with_capacity(READ_BUFFER_BYTES, reader), max }
    }

    /// The next non-empty line without its terminator, or `None` at end of input.
    pub async fn next_line(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            let mut line = Vec::new();
            let n = self.read_limited(&mut line).await?;
            if n == 0 {
                return Ok(None);
            }
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Ok(Some(line));
            }
        }
    }

    /// `read_until(b'\n')` that stops (and drains the rest of the line) past the limit.
    async fn read_limited(&mut self, line: &mut Vec<u8>) -> Result<usize, FrameError> {
        let mut total = 0;
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                return Ok(total);
            }
            let (chunk, done) = match memchr(buf) {
                Some(i) => (&buf[..=i], true),
                None => (buf, false),
            };
            let len = chunk.len();
            if line.len() + len > self.max {
                self.inner.consume(len);
                if !done {
                    self.skip_line().await?;
                }
                return Err(FrameError::TooLong { limit: self.max });
            }
            line.extend_from_slice(chunk);
            self.inner.consume(len);
            total += len;
            if done {
                return Ok(total);
            }
        }
    }

    async fn skip_line(&mut self) -> Result<(), FrameError> {
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                return Ok(());
            }
            match memchr(buf) {
                Some(i) => {
                    self.inner.consume(i + 1);
                    return Ok(());
                }
                None => {
                    let n = buf.len();
                    self.inner.consume(n);
                }
            }
        }
    }
}

fn memchr(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

/// Writes `line` and a newline, then flushes: a message is visible to the peer at once.
pub async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, line: &[u8]) -> std::io::Result<()> {
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

    #[tokio::test]
    async fn an_oversize_line_is_refused_and_the_next_one_still_reads() {
        let input = format!("{}\nok\n", "y".repeat(100));
        let mut r = LineReader::new(input.as_bytes(), 10);
        assert!(matches!(r.next_line().await, Err(FrameError::TooLong { limit: 10 })));
        assert_eq!(r.next_line().await.unwrap().unwrap(), b"ok");
    }
}
