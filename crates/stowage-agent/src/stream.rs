//! The answer text inside a streaming reply: `chunk` events carry what the model writes as
//! `raw_answer`, as it arrives, never the JSON around it (`{"raw_answer": "`, the other
//! fields), never a thought.
//!
//! [`AnswerText`] is fed the reply's text pieces and gives back the decoded characters of the
//! first string value under a `raw_answer` key, at any depth (the JSON-only action nests the
//! answer in `args`). It is a small JSON tokenizer that keeps only its position (in a string
//! or not, after a backslash, in a `\u` escape, the last key): no crate reads one string
//! field out of a JSON document that is still arriving, and a full parse per piece would be
//! quadratic in the reply's length. A reply that is not JSON gives nothing here; the planner
//! sends prose answers whole once it knows they are the answer.

/// State of the scan over one reply.
#[derive(Debug, Default)]
pub(crate) struct AnswerText {
    in_string: bool,
    escaped: bool,
    /// Hex digits of a `\u` escape read so far.
    unicode: Option<String>,
    /// A high surrogate waiting for its low half.
    high: Option<u16>,
    /// The string being read (a key, until we know).
    current: String,
    /// The last complete string: a key when a `:` follows.
    last_string: Option<String>,
    /// The next value is `raw_answer`'s.
    after_key: bool,
    /// Reading `raw_answer`'s string: its characters are emitted.
    emitting: bool,
    /// `raw_answer` was read whole: nothing more is emitted.
    done: bool,
}

impl AnswerText {
    pub(crate) fn new() -> Self {
        AnswerText::default()
    }

    /// Feeds one piece of the reply; returns the answer text it completes.
    pub(crate) fn push(&mut self, piece: &str) -> String {
        let mut out = String::new();
        for c in piece.chars() {
            if self.done {
                break;
            }
            if self.in_string {
                self.string_char(c, &mut out);
                continue;
            }
            match c {
                '"' => {
                    self.in_string = true;
                    self.current.clear();
                    if self.after_key {
                        self.emitting = true;
                    }
                }
                ':' => {
                    self.after_key = self.last_string.as_deref() == Some("raw_answer");
                }
                c if c.is_whitespace() => {}
                _ => {
                    // Any other token: a value that is not a string, or structure.
                    self.after_key = false;
                    self.last_string = None;
                }
            }
        }
        out
    }

    fn string_char(&mut self, c: char, out: &mut String) {
        if let Some(hex) = &mut self.unicode {
            hex.push(c);
            if hex.len() == 4 {
                let code = u16::from_str_radix(hex, 16).unwrap_or(0xFFFD);
                self.unicode = None;
                self.unit(code, out);
            }
            return;
        }
        if self.escaped {
            self.escaped = false;
            let decoded = match c {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                'b' => '\u{8}',
                'f' => '\u{c}',
                'u' => {
                    self.unicode = Some(String::new());
                    return;
                }
                other => other, // \" \\ \/
            };
            self.emit(decoded, out);
            return;
        }
        match c {
            '\\' => self.escaped = true,
            '"' => {
                self.in_string = false;
                if self.emitting {
                    self.emitting = false;
                    self.done = true;
                }
                self.after_key = false;
                self.last_string = Some(std::mem::take(&mut self.current));
            }
            c => self.emit(c, out),
        }
    }

    /// One UTF-16 unit of a `\u` escape.
    fn unit(&mut self, code: u16, out: &mut String) {
        if (0xD800..0xDC00).contains(&code) {
            self.high = Some(code);
            return;
        }
        let c = match self.high.take() {
            Some(high) if (0xDC00..0xE000).contains(&code) => {
                char::from_u32(0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(code) - 0xDC00)).unwrap_or('\u{FFFD}')
            }
            _ => char::from_u32(u32::from(code)).unwrap_or('\u{FFFD}'),
        };
        self.emit(c, out);
    }

    fn emit(&mut self, c: char, out: &mut String) {
        if self.emitting {
            out.push(c);
        } else if self.current.len() < 64 {
            // Keys worth remembering are short; a long string is a value.
            self.current.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `reply` in pieces of `n` characters.
    fn stream(reply: &str, n: usize) -> String {
        let mut a = AnswerText::new();
        let chars: Vec<char> = reply.chars().collect();
        chars.chunks(n).map(|c| a.push(&c.iter().collect::<String>())).collect()
    }

    #[test]
    fn only_the_raw_answer_streams_whatever_the_pieces() {
        let reply = r#"{"thought": "the \"raw_answer\": \"no\"", "raw_answer": "Q4 2024: \u00e9t\u00e9 \ud83d\ude00 \"up\"\n15%", "confidence": 0.9}"#;
        for n in [1, 2, 3, 5, 7, 100] {
            assert_eq!(stream(reply, n), "Q4 2024: été 😀 \"up\"\n15%", "pieces of {n}");
        }
        let nested = r#"{"thought": "done", "next_node": null, "args": {"raw_answer": "Up 15%.", "confidence": 0.8}}"#;
        assert_eq!(stream(nested, 4), "Up 15%.");
        assert_eq!(stream("Let me look that up.", 3), "", "prose is no answer field");
        assert_eq!(stream(r#"{"raw_answer": 42}"#, 3), "");
        assert_eq!(stream(r#"{"raw_answer": "a", "x": {"raw_answer": "b"}}"#, 2), "a", "the first one only");
        assert_eq!(stream(r#"{"note": "raw_answer", "v": "x"}"#, 2), "", "a value named raw_answer is no key");
    }
}
