//! JSON-RPC 2.0 messages as the gateway relays them: the envelope is parsed, payloads are not.
//!
//! `params`, `result` and `error` stay [`Raw`] JSON text so that a relayed message keeps every
//! field the peer sent (typed MCP models drop unknown ones) and a large result is moved, not
//! re-parsed, on its way through. Only the few payloads the gateway must read or change
//! (initialize, tools/call results, progress tokens) are parsed into `serde_json::Value`.
//! [`Message::parse_owned`] goes further for big messages: the largest payload keeps the
//! line's own memory, so a 50 MB result is never copied into a second 50 MB allocation.
//!
//! [`Raw`] rather than serde_json's `RawValue`: building a `RawValue` from owned text
//! re-validates all of it (a second full scan of a 50 MB result) unless `unsafe` code vouches
//! for it, and this crate forbids `unsafe`. A `Raw` is valid by construction instead: it is
//! only made from text a parser has just accepted or from a serialised value, and messages
//! are written out by [`Message::to_line`], which splices the payloads in verbatim.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// Standard JSON-RPC error codes, and the MCP ones the gateway produces.
pub(crate) mod code {
    pub(crate) const PARSE_ERROR: i64 = -32700;
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
    /// MCP: the requested resource does not exist.
    pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;
    /// Implementation-defined range: the upstream server failed or is unreachable.
    pub(crate) const UPSTREAM_UNAVAILABLE: i64 = -32000;
    /// Implementation-defined range: the request timed out waiting for the upstream.
    pub(crate) const REQUEST_TIMEOUT: i64 = -32001;
}

/// A request id: a number or a string, kept exactly as the peer sent it.
pub(crate) type Id = Value;

/// One JSON value kept as its compact-or-not text, valid by construction (see the module
/// docs): made only by [`to_raw`], from a parser's accepted slice, or by [`Raw::parse`].
#[derive(Clone, PartialEq, Eq)]
pub struct Raw(Box<str>);

impl Raw {
    /// The JSON text.
    pub fn get(&self) -> &str {
        &self.0
    }

    /// Validates `text` as one JSON value.
    pub fn parse(text: String) -> Result<Raw, serde_json::Error> {
        let len = serde_json::from_str::<&RawValue>(&text)?.get().len();
        if len == text.len() { Ok(Raw(text.into_boxed_str())) } else { Ok(Raw(text.trim().into())) }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_string(self) -> String {
        self.0.into_string()
    }

    /// Text a parser has just accepted as one JSON value.
    fn accepted(text: &RawValue) -> Raw {
        Raw(text.get().into())
    }
}

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.get();
        if text.len() <= 200 {
            return write!(f, "Raw({text})");
        }
        let cut = (0..=200).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        write!(f, "Raw({}… {} bytes)", &text[..cut], text.len())
    }
}

/// One JSON-RPC message with its payloads left raw.
#[derive(Debug, Default)]
pub struct Message {
    pub jsonrpc: &'static str,
    pub id: Option<Id>,
    pub method: Option<String>,
    pub params: Option<Raw>,
    pub result: Option<Raw>,
    pub error: Option<Raw>,
}

/// Lines at least this long are parsed by [`Message::parse_owned`] without a copy of their
/// largest payload.
pub(crate) const IN_PLACE_FROM: usize = 1 << 20;

/// [`Message`] with its payloads borrowed from the line: same fields, same rules.
#[derive(Deserialize)]
struct Borrowed<'a> {
    #[serde(default)]
    id: Option<Id>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// What a message is, by the fields it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
    Invalid,
}

/// What a client sent: one message, or a batch (JSON-RPC arrays; MCP removed them in
/// 2025-06-18, so each element is answered with an error of its own).
#[derive(Debug)]
pub(crate) enum Incoming {
    One(Message),
    Batch(Vec<Value>),
}

impl Incoming {
    /// Parses what a client sent.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Incoming, serde_json::Error> {
        if first_byte(bytes) == Some(b'[') {
            return serde_json::from_slice(bytes).map(Incoming::Batch);
        }
        Message::parse(bytes).map(Incoming::One)
    }
}

/// The answers to a batch: an `invalid request` error per element that has an id (carrying
/// that element's own id), nothing for notifications. `None` when nothing needs an answer.
pub(crate) fn refuse_batch(items: &[Value]) -> Option<Vec<u8>> {
    if items.is_empty() {
        return Some(Message::error(Value::Null, code::INVALID_REQUEST, "empty batch").to_line());
    }
    let answers: Vec<Message> = items
        .iter()
        .filter_map(|item| {
            let id = match item.as_object() {
                Some(o) if o.get("method").is_some() && o.get("id").is_none() => return None,
                Some(o) => o.get("id").cloned().unwrap_or(Value::Null),
                None => Value::Null,
            };
            Some(Message::error(
                id,
                code::INVALID_REQUEST,
                "json-rpc batches are not supported (MCP removed them in 2025-06-18); send one message at a time",
            ))
        })
        .collect();
    if answers.is_empty() {
        return None;
    }
    let mut out = b"[".to_vec();
    for (i, a) in answers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&a.to_line());
    }
    out.push(b']');
    Some(out)
}

fn first_byte(bytes: &[u8]) -> Option<u8> {
    bytes.iter().copied().find(|b| !b.is_ascii_whitespace())
}

impl Message {
    /// Parses one message. Only a JSON object is a message: serde would also take an array
    /// positionally, making a whole request object the "id" of an error.
    pub fn parse(bytes: &[u8]) -> Result<Message, serde_json::Error> {
        if first_byte(bytes) != Some(b'{') {
            return Err(serde::de::Error::custom("a json-rpc message must be a json object"));
        }
        let b: Borrowed<'_> = serde_json::from_slice(bytes)?;
        Ok(Message {
            jsonrpc: "2.0",
            id: b.id,
            method: b.method,
            params: b.params.map(Raw::accepted),
            result: b.result.map(Raw::accepted),
            error: b.error.map(Raw::accepted),
        })
    }

    /// [`Message::parse`] for a line the caller gives up. For a big line the largest payload
    /// (a 50 MB result) is moved to the front of the line's own buffer and becomes that raw
    /// value, instead of being copied into a fresh allocation: that copy, with first touches
    /// of 50 MB of new memory, cost more than parsing, and doubled the memory held. On error
    /// the line comes back unchanged.
    pub fn parse_owned(line: Vec<u8>) -> Result<Message, (Vec<u8>, serde_json::Error)> {
        if line.len() < IN_PLACE_FROM || first_byte(&line) != Some(b'{') {
            return Message::parse(&line).map_err(|e| (line, e));
        }
        let b: Borrowed<'_> = match serde_json::from_slice(&line) {
            Ok(b) => b,
            Err(e) => return Err((line, e)),
        };
        let at = |r: &RawValue| {
            let start = r.get().as_ptr() as usize - line.as_ptr() as usize;
            start..start + r.get().len()
        };
        let payloads = [b.params, b.result, b.error];
        let largest = (0..3).max_by_key(|&i| payloads[i].map_or(0, |r| r.get().len())).expect("three slots");
        let range = payloads[largest].map(at);
        let mut owned: [Option<Raw>; 3] = Default::default();
        for (i, p) in payloads.iter().enumerate() {
            if i != largest {
                owned[i] = p.map(Raw::accepted);
            }
        }
        let (id, method) = (b.id, b.method);
        if let Some(range) = range {
            let mut buf = line;
            buf.copy_within(range.clone(), 0);
            buf.truncate(range.len());
            // Valid JSON and UTF-8: serde just accepted this very slice, which came from a
            // `&str`-safe parse, so this cannot fail and keeps the allocation.
            match String::from_utf8(buf) {
                Ok(text) => owned[largest] = Some(Raw(text.into_boxed_str())),
                Err(e) => return Err((e.into_bytes(), serde::de::Error::custom("invalid utf-8"))),
            }
        }
        let [params, result, error] = owned;
        Ok(Message { jsonrpc: "2.0", id, method, params, result, error })
    }

    pub fn kind(&self) -> Kind {
        match (&self.id, &self.method, self.result.is_some() || self.error.is_some()) {
            (Some(_), Some(_), false) => Kind::Request,
            (None, Some(_), false) => Kind::Notification,
            (Some(_), None, true) => Kind::Response,
            _ => Kind::Invalid,
        }
    }

    pub fn request(id: Id, method: &str, params: Option<&Value>) -> Message {
        Message { jsonrpc: "2.0", id: Some(id), method: Some(method.to_owned()), params: params.map(to_raw), ..Default::default() }
    }

    pub fn notification(method: &str, params: Option<&Value>) -> Message {
        Message { jsonrpc: "2.0", method: Some(method.to_owned()), params: params.map(to_raw), ..Default::default() }
    }

    pub fn response(id: Id, result: &Value) -> Message {
        Message { jsonrpc: "2.0", id: Some(id), result: Some(to_raw(result)), ..Default::default() }
    }

    pub fn error(id: Id, code: i64, message: impl Into<String>) -> Message {
        let e = json!({"code": code, "message": message.into()});
        Message { jsonrpc: "2.0", id: Some(id), error: Some(to_raw(&e)), ..Default::default() }
    }

    /// The params parsed as a JSON value (`{}` when absent).
    pub fn params_value(&self) -> Value {
        self.params.as_ref().and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or_else(|| Value::Object(Default::default()))
    }

    /// The error's code, when this is an error response.
    pub fn error_code(&self) -> Option<i64> {
        let e: Value = serde_json::from_str(self.error.as_ref()?.get()).ok()?;
        e.get("code")?.as_i64()
    }

    /// Serialises to one line (no embedded newline: JSON text escapes them in strings, and
    /// payloads are spliced in as they are).
    pub fn to_line(&self) -> Vec<u8> {
        let payload = |p: &Option<Raw>| p.as_ref().map_or(0, Raw::len);
        let mut out = Vec::with_capacity(96 + payload(&self.params) + payload(&self.result) + payload(&self.error));
        out.extend_from_slice(br#"{"jsonrpc":"2.0""#);
        if let Some(id) = &self.id {
            out.extend_from_slice(br#","id":"#);
            serde_json::to_writer(&mut out, id).expect("a value serialises");
        }
        if let Some(m) = &self.method {
            out.extend_from_slice(br#","method":"#);
            serde_json::to_writer(&mut out, m).expect("a string serialises");
        }
        for (key, p) in [("params", &self.params), ("result", &self.result), ("error", &self.error)] {
            if let Some(p) = p {
                out.extend_from_slice(format!(r#","{key}":"#).as_bytes());
                out.extend_from_slice(p.get().as_bytes());
            }
        }
        out.push(b'}');
        out
    }
}

/// `raw` (a JSON object) with `defaults` added for the keys it lacks at its top level, or
/// `None` when it needs none or is not an object. The object is not parsed into values: its
/// top-level keys are found by skipping over its members, so a 50 MB result costs one fast
/// scan, and its own text is kept byte for byte.
pub(crate) fn with_default_keys(raw: &Raw, defaults: &[(&str, Value)]) -> Option<Raw> {
    let text = raw.get();
    let keys = top_level_keys(text)?;
    let missing: Vec<&(&str, Value)> = defaults.iter().filter(|(k, _)| !keys.iter().any(|have| have == k)).collect();
    if missing.is_empty() {
        return None;
    }
    let open = text.find('{')?;
    let mut out = String::with_capacity(text.len() + 64);
    out.push('{');
    for (i, (k, v)) in missing.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(k).expect("a key serialises"));
        out.push(':');
        out.push_str(&v.to_string());
    }
    if !keys.is_empty() {
        out.push(',');
    }
    out.push_str(&text[open + 1..]);
    // Valid: serialised keys and values, spliced in front of the members of a valid object.
    Some(Raw(out.into_boxed_str()))
}

/// The top-level keys of the JSON object `text`, in order; `None` if it is not an object.
/// Strings are skipped with `memchr`, so long values cost little.
fn top_level_keys(text: &str) -> Option<Vec<String>> {
    let b = text.as_bytes();
    let mut i = b.iter().position(|c| !c.is_ascii_whitespace())?;
    if b[i] != b'{' {
        return None;
    }
    i += 1;
    let mut keys = Vec::new();
    loop {
        i += b[i..].iter().position(|c| !c.is_ascii_whitespace())?;
        match b[i] {
            b'}' => return Some(keys),
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let end = string_end(b, i)?;
        keys.push(serde_json::from_str::<String>(&text[i..=end]).ok()?);
        i = end + 1;
        i += b[i..].iter().position(|c| !c.is_ascii_whitespace())?;
        if b[i] != b':' {
            return None;
        }
        i = skip_value(b, i + 1)?;
    }
}

/// The index of the quote that closes the string opening at `b[start]`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', &b[i..])?;
        if b[i] == b'"' {
            return Some(i);
        }
        i += 2;
    }
}

/// Skips one value starting at or after `i`; returns the index just past it.
fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    loop {
        let c = *b.get(i)?;
        match c {
            b'"' => i = string_end(b, i)? + 1,
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' if depth == 0 => return Some(i),
            b'}' | b']' => {
                depth -= 1;
                i += 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            b',' if depth == 0 => return Some(i),
            _ => i += 1,
        }
    }
}

/// The id of a request whose text is cut off (a message over the size limit): `"id"` near the
/// start, with a number or a simple string value.
pub(crate) fn scan_request_id(head: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(&head[..head.len().min(4096)]);
    let at = text.find("\"id\"")?;
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        let end = s.find(['"', '\\'])?;
        return (s.as_bytes()[end] == b'"').then(|| json!(&s[..end]));
    }
    let number: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect();
    serde_json::from_str::<serde_json::Number>(&number).ok().map(Value::Number)
}

/// Serialises a value into raw JSON text.
pub(crate) fn to_raw(v: &Value) -> Raw {
    Raw(serde_json::to_string(v).expect("a json value serialises").into_boxed_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let cases = [
            (r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, Kind::Request),
            (r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, Kind::Notification),
            (r#"{"jsonrpc":"2.0","id":"a","result":{}}"#, Kind::Response),
            (r#"{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}}"#, Kind::Response),
            (r#"{"jsonrpc":"2.0","id":1}"#, Kind::Invalid),
        ];
        for (text, kind) in cases {
            assert_eq!(Message::parse(text.as_bytes()).unwrap().kind(), kind, "{text}");
        }
        assert!(Message::parse(b"[1,2]").is_err());
    }

    #[test]
    fn a_batch_is_answered_element_by_element_never_with_a_request_as_the_id() {
        let text = br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":"b","method":"tools/list"},7]"#;
        let Incoming::Batch(items) = Incoming::parse(text).unwrap() else { panic!("a batch") };
        let answers: Vec<Value> = serde_json::from_slice(&refuse_batch(&items).unwrap()).unwrap();
        let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
        assert_eq!(ids, [&json!(1), &json!("b"), &Value::Null]);
        assert!(answers.iter().all(|a| a["error"]["code"] == code::INVALID_REQUEST));
        assert!(refuse_batch(&[json!({"jsonrpc":"2.0","method":"notifications/initialized"})]).is_none());
        // A lone array is never read as a positional message.
        assert!(Message::parse(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).is_err());
    }

    #[test]
    fn ids_of_cut_off_requests() {
        assert_eq!(scan_request_id(br#"{"jsonrpc":"2.0","id": 42,"method":"tools/call","params":{"x":"aaaa"#), Some(json!(42)));
        assert_eq!(scan_request_id(br#"{"id":"req-7","method":"x"#), Some(json!("req-7")));
        assert_eq!(scan_request_id(br#"{"method":"x","params":{"#), None);
    }

    #[test]
    fn default_keys_are_added_without_touching_the_rest() {
        let raw = to_raw(
            &json!({"content": [{"type": "text", "text": "a \"quoted\" } ] , string"}], "resultType": "x", "n": {"deep": [1, {"resultType": 2}]}}),
        );
        let out = with_default_keys(&raw, &[("resultType", json!("complete")), ("ttlMs", json!(0))]).unwrap();
        let v: Value = serde_json::from_str(out.get()).unwrap();
        assert_eq!(v["resultType"], "x", "an existing key is kept");
        assert_eq!(v["ttlMs"], 0);
        assert!(out.get().ends_with(&raw.get()[1..]), "the object's own text is unchanged");
        let empty = with_default_keys(&to_raw(&json!({})), &[("resultType", json!("complete"))]).unwrap();
        assert_eq!(empty.get(), r#"{"resultType":"complete"}"#);
        assert!(with_default_keys(&to_raw(&json!({"resultType": 1})), &[("resultType", json!("complete"))]).is_none());
        assert!(with_default_keys(&to_raw(&json!([1])), &[("resultType", json!("complete"))]).is_none());
        let spaced = Raw::parse(" { \"a\" : \"\\\\\" , \"b\" :[ {} ] } ".to_owned()).unwrap();
        let v: Value = serde_json::from_str(with_default_keys(&spaced, &[("c", json!(1))]).unwrap().get()).unwrap();
        assert_eq!(v, json!({"c": 1, "a": "\\", "b": [{}]}));
    }

    #[test]
    fn unknown_fields_in_payloads_survive_a_relay() {
        let text = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"x-vendor":{"deep":[1,2]}}}"#;
        let mut m = Message::parse(text.as_bytes()).unwrap();
        m.id = Some(json!(99));
        let out = String::from_utf8(m.to_line()).unwrap();
        assert_eq!(out, r#"{"jsonrpc":"2.0","id":99,"result":{"content":[],"x-vendor":{"deep":[1,2]}}}"#);
    }

    #[test]
    fn big_lines_parse_the_same_in_place() {
        let big = "A".repeat(IN_PLACE_FROM);
        let cases = [
            json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": big}], "x": [1, {"y": null}]}}),
            json!({"jsonrpc": "2.0", "id": "r", "method": "tools/call", "params": {"arguments": {"data": big}}, "extra": big}),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": big, "data": {"z": "\"q\" \u{e9}"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": big}}),
        ];
        for v in cases {
            // Spacing around the payloads must not end up inside them.
            for text in [serde_json::to_string(&v).unwrap(), serde_json::to_string_pretty(&v).unwrap()] {
                let want = Message::parse(text.as_bytes()).unwrap();
                let got = Message::parse_owned(text.clone().into_bytes()).unwrap();
                assert_eq!(got.to_line(), want.to_line());
                assert_eq!(got.kind(), want.kind());
            }
        }
        // Broken or not a message: the same error, and the line comes back as it was.
        for text in [
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":"{big}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":"{big}\q"}}"#),
            format!(r#"{{"id":1,"result":1,"result":"{big}"}}"#),
        ] {
            let want = Message::parse(text.as_bytes()).unwrap_err().to_string();
            let (line, e) = Message::parse_owned(text.clone().into_bytes()).unwrap_err();
            assert_eq!((line, e.to_string()), (text.into_bytes(), want));
        }
    }

    #[test]
    fn error_codes() {
        let m = Message::error(json!(1), code::METHOD_NOT_FOUND, "no");
        assert_eq!(m.error_code(), Some(-32601));
    }
}
