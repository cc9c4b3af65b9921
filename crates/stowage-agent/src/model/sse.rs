//! Server-sent events from a response body: `event:` and `data:` lines, events split on a
//! blank line, `\n` or `\r\n` endings, data lines of one event joined with `\n`.
//!
//! Written here rather than taken from a crate because both APIs use a tiny subset (no ids,
//! no retry) and the parse must report a body that ends mid-event as such.

use bytes::BytesMut;
use futures::StreamExt;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// Reads events from a streamed body.
pub(crate) struct SseReader {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: BytesMut,
    ended: bool,
}

/// The body broke off (connection reset, or closed before a blank line).
#[derive(Debug)]
pub(crate) struct BodyError(pub String);

impl SseReader {
    pub(crate) fn new(resp: reqwest::Response) -> Self {
        SseReader { body: resp.bytes_stream().boxed(), buf: BytesMut::new(), ended: false }
    }

    /// The next event; `Ok(None)` at a clean end of the body.
    pub(crate) async fn next(&mut self) -> Result<Option<SseEvent>, BodyError> {
        loop {
            if let Some(ev) = self.take_event() {
                return Ok(Some(ev));
            }
            if self.ended {
                return if self.buf.iter().all(u8::is_ascii_whitespace) {
                    Ok(None)
                } else {
                    Err(BodyError("the stream ended in the middle of an event".into()))
                };
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(BodyError(e.to_string())),
                None => self.ended = true,
            }
        }
    }

    fn take_event(&mut self) -> Option<SseEvent> {
        loop {
            let end = find_blank_line(&self.buf)?;
            let raw = self.buf.split_to(end.0);
            let _ = self.buf.split_to(end.1);
            if let Some(ev) = parse_event(&String::from_utf8_lossy(&raw)) {
                return Some(ev);
            }
        }
    }
}

/// (end of the event, length of the separator).
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i + 1 < buf.len() {
        if buf[i] == b'\n' {
            if buf[i + 1] == b'\n' {
                return Some((i, 2));
            }
            if buf[i + 1] == b'\r' && buf.get(i + 2) == Some(&b'\n') {
                return Some((i, 3));
            }
        }
        i += 1;
    }
    None
}

fn parse_event(raw: &str) -> Option<SseEvent> {
    let mut event = None;
    let mut data: Option<String> = None;
    for line in raw.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    data.map(|data| SseEvent { event, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_lines_and_comments() {
        assert_eq!(
            parse_event("event: message_start\ndata: {\"a\":1}"),
            Some(SseEvent { event: Some("message_start".into()), data: "{\"a\":1}".into() })
        );
        assert_eq!(parse_event(": keep-alive"), None);
        assert_eq!(parse_event("data: a\r\ndata: b\r").unwrap().data, "a\nb");
        assert_eq!(find_blank_line(b"data: x\n\ndata: y"), Some((7, 2)));
        assert_eq!(find_blank_line(b"data: x\r\n\r\n"), Some((8, 3)));
        assert_eq!(find_blank_line(b"data: x\n"), None);
    }
}
