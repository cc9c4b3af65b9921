//! One bare HTTP/1.1 exchange per connection, for the tests of `stowage serve` that need what
//! an HTTP library would not send or would hide (exact headers, the raw status of a refused
//! request, a server that is not up yet answering "nothing"). Shared by the test binaries that
//! include it with `mod raw_http;`.

#![allow(dead_code)] // each test binary uses a part

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::Value;

/// A bare HTTP/1.1 exchange with 127.0.0.1:`port`: (status, headers lowercased, body, chunked
/// transfer decoded). Status 0 when nothing answered (not listening yet, or the connection
/// was dropped before a response head).
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return (0, vec![], vec![]) };
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    if s.write_all(req.as_bytes()).is_err() || body.is_some_and(|b| s.write_all(b).is_err()) {
        return (0, vec![], vec![]);
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { return (0, vec![], vec![]) };
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status: u16 = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))).collect();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        body = dechunk(&body);
    }
    (status, headers, body)
}

/// One JSON POST to `/mcp` (JSON answers, not SSE): (status, `Mcp-Session-Id`, JSON body or
/// null).
pub(crate) fn post_mcp(port: u16, headers: &[(&str, &str)], body: &str) -> (u16, Option<String>, Value) {
    let mut all = vec![("Content-Type", "application/json"), ("Accept", "application/json")];
    all.extend_from_slice(headers);
    let (status, headers, body) = http(port, "POST", "/mcp", &all, Some(body.as_bytes()));
    let session = headers.into_iter().find(|(k, _)| k == "mcp-session-id").map(|(_, v)| v);
    (status, session, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// The body of a `Transfer-Encoding: chunked` response, put back together.
pub(crate) fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = b.windows(2).position(|w| w == b"\r\n") else { return out };
        let Ok(n) = usize::from_str_radix(std::str::from_utf8(&b[..end]).unwrap_or("0").trim(), 16) else { return out };
        if n == 0 || b.len() < end + 2 + n {
            return out;
        }
        out.extend_from_slice(&b[end + 2..end + 2 + n]);
        b = &b[(end + 4 + n).min(b.len())..];
    }
}
