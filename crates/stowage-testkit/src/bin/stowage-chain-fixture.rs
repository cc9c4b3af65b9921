//! `stowage-chain-fixture`: a stdio MCP server whose tools chain blobs, for the gateway's blob
//! chaining tests. It speaks plain HTTP to the signed links the gateway hands it.
//!
//! | tool | why |
//! |---|---|
//! | `generate_image` | AWP: `_awp.blob.output.result`; PUTs a PNG (`bytes` long, `content_type`) to `result.url`; `upload_twice` tries the slot again, `skip_upload` writes nothing, `upload_after_ms` answers first and uploads later, `crash_mid_upload` sends half the body and exits |
//! | `remove_background` | `x-mcp-file`: GETs `image` (a URL string), checks it is a PNG, PUTs a smaller PNG to `result` |
//! | `summarize_text`, `upload_file` | declare nothing: take inline `text` / `content_base64` (the gateway's `text` and `base64` input rules) |
//! | `echo` | declares nothing: returns `message` as written (what a tool received) |
//! | `read_path` | reads the local file at `path` (the `path` input rule): its length, whether it is read-only, its text |

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use stowage_testkit::samples;
use stowage_testkit::server::{Handler, Peer, code, serve, text_result};

struct ChainFixture;

fn tool(name: &str, props: Value) -> Value {
    json!({"name": name, "description": format!("fixture tool {name}"), "inputSchema": {"type": "object", "properties": props}})
}

fn tools() -> Value {
    json!({"tools": [
        tool("echo", json!({"message": {"type": "string"}})),
        tool("read_path", json!({"path": {"type": "string"}})),
        {
            "name": "generate_image",
            "inputSchema": {"type": "object", "required": ["prompt", "result"], "properties": {
                "prompt": {"type": "string"},
                "result": {"type": "object", "required": ["url"], "properties": {
                    "url": {"type": "string", "format": "uri"}, "accept": {"type": "string", "default": "image/png"}}}
            }},
            "_awp": {"blob": {"output": {"result": "The generated image"}}}
        },
        {
            "name": "remove_background",
            "inputSchema": {"type": "object", "required": ["image", "result"], "properties": {
                "image": {"type": "string", "format": "uri", "x-mcp-file": "input", "description": "The image to clean up"},
                "result": {"type": "string", "format": "uri", "x-mcp-file": "output", "x-mcp-accept": "image/png"}
            }}
        },
        tool("summarize_text", json!({"text": {"type": "string"}})),
        tool("upload_file", json!({"content_base64": {"type": "string"}, "name": {"type": "string"}})),
    ]})
}

#[async_trait]
impl Handler for ChainFixture {
    fn server_info(&self) -> Value {
        json!({"capabilities": {"tools": {}}, "serverInfo": {"name": "stowage-chain-fixture", "version": "1"}})
    }

    async fn handle(&self, method: &str, params: Value, _id: &Value, _peer: &Peer) -> Result<Option<Value>, (i64, String)> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let r = match method {
            "tools/list" => tools(),
            "tools/call" => match name {
                "echo" => text_result(args.get("message").and_then(Value::as_str).unwrap_or("").to_owned()),
                "generate_image" => {
                    let url = args.pointer("/result/url").and_then(Value::as_str).unwrap_or("").to_owned();
                    let size = args.get("bytes").and_then(Value::as_u64);
                    let png = match size {
                        Some(n) => {
                            let mut b = samples::png(8, 8);
                            b.resize(n as usize, 0);
                            b
                        }
                        None => samples::png(64, 48),
                    };
                    if let Some(ms) = args.get("upload_after_ms").and_then(Value::as_u64) {
                        // Answers first and uploads later: the slot must be closed by then.
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            put(&url, png, "image/png").await;
                        });
                        return Ok(Some(text_result("generated; uploading later")));
                    }
                    if args.get("crash_mid_upload").and_then(Value::as_bool) == Some(true) {
                        partial_put_then_exit(&url, &png);
                    }
                    if args.get("skip_upload").and_then(Value::as_bool) != Some(true) {
                        let ct = args.get("content_type").and_then(Value::as_str).unwrap_or("image/png");
                        let status = put(&url, png.clone(), ct).await;
                        if status != 200 && status != 201 {
                            return Ok(Some(
                                json!({"content": [{"type": "text", "text": format!("upload refused: HTTP {status}")}], "isError": true}),
                            ));
                        }
                        if args.get("upload_twice").and_then(Value::as_bool) == Some(true) {
                            let again = put(&url, b"second".to_vec(), ct).await;
                            return Ok(Some(text_result(format!("generated; second upload HTTP {again}"))));
                        }
                    }
                    json!({"content": [{"type": "text", "text": "generated"}], "structuredContent": {"result": {"contentType": "image/png"}}})
                }
                "remove_background" => {
                    let image = args.get("image").and_then(Value::as_str).unwrap_or("");
                    let got = match reqwest::get(image).await {
                        Ok(r) if r.status().is_success() => r.bytes().await.map(|b| b.to_vec()).unwrap_or_default(),
                        Ok(r) => return Ok(Some(text_result(format!("cannot download the image: HTTP {}", r.status())))),
                        Err(e) => return Ok(Some(text_result(format!("cannot download the image: {e}")))),
                    };
                    if !got.starts_with(b"\x89PNG") {
                        return Ok(Some(text_result(format!("not a PNG ({} bytes)", got.len()))));
                    }
                    let url = args.get("result").and_then(Value::as_str).unwrap_or("");
                    let status = put(url, samples::png(32, 24), "image/png").await;
                    text_result(format!("removed the background of a {}-byte PNG; upload HTTP {status}", got.len()))
                }
                "summarize_text" => {
                    let t = args.get("text").and_then(Value::as_str).unwrap_or("");
                    text_result(format!("summary of {} chars: {}", t.chars().count(), t.chars().take(24).collect::<String>()))
                }
                "upload_file" => {
                    let b64 = args.get("content_base64").and_then(Value::as_str).unwrap_or("");
                    match STANDARD.decode(b64) {
                        Ok(bytes) => text_result(format!(
                            "uploaded {} bytes, sha256 {}",
                            bytes.len(),
                            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes))
                        )),
                        Err(e) => text_result(format!("content_base64 is not base64: {e}")),
                    }
                }
                "read_path" => {
                    let path = args.get("path").and_then(Value::as_str).unwrap_or("");
                    match (std::fs::read(path), std::fs::metadata(path)) {
                        (Ok(bytes), Ok(meta)) => text_result(format!(
                            "len={} readonly={} text={}",
                            bytes.len(),
                            meta.permissions().readonly(),
                            String::from_utf8_lossy(&bytes)
                        )),
                        (Err(e), _) | (_, Err(e)) => text_result(format!("cannot read {path}: {e}")),
                    }
                }
                _ => return Err((code::INVALID_PARAMS, format!("unknown tool {name}"))),
            },
            _ => return Err((code::METHOD_NOT_FOUND, format!("method not found: {method}"))),
        };
        Ok(Some(r))
    }
}

/// PUTs `body` to a signed upload link; the HTTP status (0 when nothing answered).
async fn put(url: &str, body: Vec<u8>, content_type: &str) -> u16 {
    match reqwest::Client::new().put(url).header("content-type", content_type).body(body).send().await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// Announces the whole body, sends half of it, and exits: a tool crashing mid-upload.
fn partial_put_then_exit(url: &str, body: &[u8]) -> ! {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if let Ok(mut s) = std::net::TcpStream::connect(host) {
        let head = format!("PUT /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: image/png\r\nContent-Length: {}\r\n\r\n", body.len());
        let _ = s.write_all(head.as_bytes());
        let _ = s.write_all(&body[..body.len() / 2]);
        let _ = s.flush();
        std::thread::sleep(Duration::from_millis(200));
    }
    std::process::exit(5);
}

#[tokio::main]
async fn main() {
    eprintln!("stowage-chain-fixture: serving on stdio");
    serve(tokio::io::stdin(), tokio::io::stdout(), Arc::new(ChainFixture)).await;
}
