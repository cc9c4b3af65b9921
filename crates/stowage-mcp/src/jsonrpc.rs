//! JSON-RPC 2.0 messages as the gateway relays them: the envelope is parsed, payloads are not.
//!
//! `params`, `result` and `error` stay [`RawValue`]s so that a relayed message keeps every
//! field the peer sent (typed MCP models drop unknown ones) and a large result is copied, not
//! re-parsed, on its way through. Only the few payloads the gateway must read or change
//! (initialize, tools/call results, progress tokens) are parsed into `serde_json::Value`.
//! [`Message::parse_owned`] goes further for big messages: the largest payload keeps the
//! line's own memory, so a 50 MB result is never copied into a second 50 MB allocation.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// Standard JSON-RPC error codes, and the MCP ones the gateway produces.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// MCP: the requested resource does not exist.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// Implementation-defined range: the upstream server failed or is unreachable.
    pub const UPSTREAM_UNAVAILABLE: i64 = -32000;
    /// Implementation-defined range: the request timed out waiting for the upstream.
    pub const REQUEST_TIMEOUT: i64 = -32001;
}

/// A request id: a number or a string, kept exactly as the peer sent it.
pub type Id = Value;

/// One JSON-RPC message with its payloads left raw.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Message {
    #[serde(default = "two", skip_deserializing)]
    pub jsonrpc: &'static str,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Id>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<RawValue>>,
}

fn two() -> &'static str {
    "2.0"
}

/// Lines at least this long are parsed by [`Message::parse_owned`] without a copy of their
/// largest payload.
const IN_PLACE_FROM: usize = 1 << 20;

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

impl Message {
    /// Parses one message; a JSON array (a batch, removed in 2025-06-18) is refused.
    pub fn parse(bytes: &[u8]) -> Result<Message, serde_json::Error> {
        let mut m: Message = serde_json::from_slice(bytes)?;
        m.jsonrpc = "2.0";
        Ok(m)
    }

    /// [`Message::parse`] for a line the caller gives up. For a big line the largest payload
    /// (a 50 MB result) is moved to the front of the line's own buffer and becomes that raw
    /// value, instead of being copied into a fresh allocation: that copy, with first touches
    /// of 50 MB of new memory, cost more than parsing, and doubled the memory held. On error
    /// the line comes back unchanged.
    pub fn parse_owned(line: Vec<u8>) -> Result<Message, (Vec<u8>, serde_json::Error)> {
        if line.len() < IN_PLACE_FROM {
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
        let mut owned: [Option<Box<RawValue>>; 3] = Default::default();
        for (i, p) in payloads.iter().enumerate() {
            if i != largest {
                owned[i] = p.map(ToOwned::to_owned);
            }
        }
        let (id, method) = (b.id, b.method);
        if let Some(range) = range {
            let mut buf = line;
            buf.copy_within(range.clone(), 0);
            buf.truncate(range.len());
            // Valid JSON and UTF-8 (serde just checked this very slice): no error is possible,
            // and `from_string` keeps the allocation.
            let text = String::from_utf8(buf).expect("a raw value is UTF-8");
            owned[largest] = Some(RawValue::from_string(text).expect("a raw value is JSON"));
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

    pub fn response_raw(id: Id, result: Box<RawValue>) -> Message {
        Message { jsonrpc: "2.0", id: Some(id), result: Some(result), ..Default::default() }
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

    /// Serialises to one line (no embedded newline: serde_json escapes them in strings).
    pub fn to_line(&self) -> Vec<u8> {
        // A message made of valid raw parts always serialises.
        serde_json::to_vec(self).expect("a json-rpc message serialises")
    }
}

/// Converts a value into an owned raw value.
pub fn to_raw(v: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).expect("a json value serialises")
}

/// A string value from `v[key]`, if present.
pub fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
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
