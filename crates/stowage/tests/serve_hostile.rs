//! A hostile upstream behind `stowage serve`, over both client transports: the fixture's
//! tools that crash, hang, send garbage or non-object results, flood stderr with bad UTF-8,
//! claim odd media types, and put base64 in errors, progress and logs; plus messages over the
//! size limits in both directions. Every case must end in a clear answer (never a hang, never
//! base64 in what the client reads) and leave the gateway serving.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stowage_testkit::RpcClient;

/// The start of a base64-encoded PDF (`%PDF-`): if the client sees it, bytes leaked.
const PDF_BASE64: &str = "JVBERi0";

/// What one request brought back: the response and the notifications that came with it.
struct Exchange {
    response: Value,
    notifications: Vec<Value>,
}

impl Exchange {
    fn error_message(&self) -> String {
        self.response["error"]["message"].as_str().unwrap_or_default().to_owned()
    }
    /// What went wrong, whether it came as a JSON-RPC error or as an `isError` result.
    fn failure(&self) -> String {
        if self.response["result"]["isError"] == true {
            return self.text();
        }
        self.error_message()
    }
    fn text(&self) -> String {
        self.response["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned()
    }
    fn everything(&self) -> String {
        format!("{} {}", self.response, Value::from(self.notifications.clone()))
    }
}

enum Wire {
    Stdio(RpcClient),
    Http { client: reqwest::Client, port: u16, session: String },
}

struct Serve {
    child: tokio::process::Child,
    wire: Wire,
    next_id: u64,
    _dir: tempfile::TempDir,
}

fn config() -> String {
    format!(
        r#"
[gateway]
# Upstream replies (and stdio client messages) over 2 MiB, and HTTP request bodies over
# 1 MiB, are refused with an error naming the limit.
max_message_bytes = 2097152
max_request_bytes = 1048576
restart_backoff_initial_ms = 50

[gateway.servers.fx]
command = "{}"
request_timeout_secs = 2
"#,
        stowage_testkit::fixture_bin().display()
    )
}

impl Serve {
    async fn start(http: bool) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stowage.toml"), config()).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stowage"));
        cmd.args(["--config", dir.path().join("stowage.toml").to_str().unwrap(), "--store", dir.path().join("store").to_str().unwrap()]);
        if http {
            cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")]);
        } else {
            cmd.args(["serve", "--stdio"]);
        }
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true).spawn().unwrap();
        let wire = if http {
            // A fresh connection per request: the gateway closes a connection after some of
            // these cases (an oversized body it refused without reading, a keep-alive idle
            // past its header timeout), and a pooled client reusing one just as it closed
            // would see IncompleteMessage — a client-side race, not what this test is about.
            let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let up = client.get(format!("http://127.0.0.1:{port}/healthz")).send().await;
                if up.is_ok_and(|r| r.status() == 200) {
                    break;
                }
                assert!(Instant::now() < deadline, "stowage serve did not come up");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Wire::Http { client, port, session: String::new() }
        } else {
            Wire::Stdio(RpcClient::connect(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None))
        };
        let mut serve = Serve { child, wire, next_id: 0, _dir: dir };
        let init = serve
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
            )
            .await;
        assert!(init.response["result"]["serverInfo"].is_object(), "{}", init.response);
        serve.notify("notifications/initialized").await;
        serve
    }

    async fn request(&mut self, method: &str, params: Value) -> Exchange {
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        self.send(serde_json::to_vec(&message).unwrap(), method == "initialize").await
    }

    async fn call(&mut self, tool: &str, args: Value) -> Exchange {
        self.request("tools/call", json!({"name": tool, "arguments": args, "_meta": {"progressToken": "p"}})).await
    }

    /// Sends one message as it is (an oversized one, too) and waits for its answer.
    async fn send(&mut self, body: Vec<u8>, initialize: bool) -> Exchange {
        match &mut self.wire {
            Wire::Stdio(rpc) => {
                // Written as given (it may be oversized); the answer is found by its id among
                // everything received.
                let id: Value = serde_json::from_slice::<Value>(&body).map(|m| m["id"].clone()).unwrap_or(Value::Null);
                let seen = rpc.notifications.lock().unwrap().len();
                rpc.send_raw(body);
                let deadline = Instant::now() + Duration::from_secs(30);
                let response = loop {
                    let found = rpc.received.lock().unwrap().iter().rev().find_map(|m| match m {
                        stowage_testkit::Received::Response(r) if r["id"] == id => Some(r.clone()),
                        _ => None,
                    });
                    if let Some(r) = found {
                        break r;
                    }
                    assert!(Instant::now() < deadline, "no answer to request {id} within 30 s");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                };
                let notifications = rpc.notifications.lock().unwrap()[seen..].to_vec();
                Exchange { response, notifications }
            }
            Wire::Http { client, port, session } => {
                let mut req = client
                    .post(format!("http://127.0.0.1:{port}/mcp"))
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, text/event-stream")
                    .timeout(Duration::from_secs(30))
                    .body(body.clone());
                let sent = body;
                if !session.is_empty() {
                    req = req.header("Mcp-Session-Id", session.as_str());
                }
                let res = req.send().await.expect("an answer within 30 s");
                if initialize {
                    *session = res.headers()["mcp-session-id"].to_str().unwrap().to_owned();
                }
                let sse = res.headers().get("content-type").is_some_and(|t| t.to_str().unwrap_or("").starts_with("text/event-stream"));
                let bytes = res
                    .bytes()
                    .await
                    .unwrap_or_else(|e| panic!("{e} reading the answer to {}", String::from_utf8_lossy(&sent[..sent.len().min(200)])));
                let mut messages: Vec<Value> = if sse {
                    String::from_utf8_lossy(&bytes)
                        .split("\n\n")
                        .filter_map(|event| {
                            let data: Vec<&str> = event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
                            serde_json::from_str(&data.join("\n")).ok()
                        })
                        .collect()
                } else {
                    vec![serde_json::from_slice(&bytes).unwrap_or(Value::Null)]
                };
                let response = messages.pop().unwrap_or(Value::Null);
                Exchange { response, notifications: messages }
            }
        }
    }

    async fn notify(&mut self, method: &str) {
        let message = serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": method})).unwrap();
        match &self.wire {
            Wire::Stdio(rpc) => rpc.send_raw(message),
            Wire::Http { client, port, session } => {
                let res = client
                    .post(format!("http://127.0.0.1:{port}/mcp"))
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, text/event-stream")
                    .header("Mcp-Session-Id", session.as_str())
                    .body(message)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 202);
            }
        }
    }

    /// Calls `echo` until it answers (an upstream restarting after a crash is down for a moment).
    async fn serves_again(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let r = self.call("echo", json!({"message": "still here"})).await;
            if r.text() == "still here" {
                return;
            }
            assert!(Instant::now() < deadline, "the gateway no longer serves: {}", r.response);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Every case, in one gateway process per transport, so the next case also proves the previous
/// one left the gateway working.
async fn hostile_upstream_cases(http: bool) {
    let mut gw = Serve::start(http).await;
    gw.request("logging/setLevel", json!({"level": "debug"})).await;

    // A crash mid-call: a clear error naming the upstream, then a restart.
    let r = gw.call("crash", json!({})).await;
    assert!(r.error_message().contains("upstream fx") && r.error_message().contains("exited with status 3"), "{}", r.response);
    gw.serves_again().await;

    // A hang: the server's request timeout (2 s), not the client's patience.
    let started = Instant::now();
    let r = gw.call("hang", json!({})).await;
    assert!(r.error_message().contains("did not answer tools/call"), "{}", r.response);
    assert!(started.elapsed() < Duration::from_secs(10), "answered after {:?}", started.elapsed());
    gw.serves_again().await;

    // Garbage on the wire: a truncated JSON-RPC message.
    let started = Instant::now();
    let r = gw.call("malformed", json!({})).await;
    assert!(r.error_message().contains("malformed json-rpc"), "{}", r.response);
    assert!(started.elapsed() < Duration::from_secs(2), "answered at once, not by timeout");
    gw.serves_again().await;

    // A result that is a JSON string of base64, not an object: refused, without the base64.
    let r = gw.call("not_object", json!({"bytes": 200_000})).await;
    assert!(r.failure().contains("result that is not an object"), "{}", r.response);
    assert!(r.everything().len() < 2_000, "the refusal carries the payload: {} bytes", r.everything().len());
    gw.serves_again().await;

    // Bad UTF-8 and a 4 MiB line on stderr: drained, and the call and the next work.
    let r = gw.call("stderr_noise", json!({"bytes": 4 << 20})).await;
    assert_eq!(r.text(), format!("wrote {} bytes to stderr", 4 << 20), "{}", r.response);
    gw.serves_again().await;

    // Base64 in a log message, a progress message and an error's data leaves them as a marker.
    let r = gw.call("heavy_log", json!({})).await;
    let log = r.notifications.iter().find(|n| n["method"] == "notifications/message").expect("the log message reached the client");
    assert!(!r.everything().contains(PDF_BASE64) && log.to_string().len() < 2_000, "{log}");
    let r = gw.call("heavy_progress", json!({})).await;
    let progress = r.notifications.iter().find(|n| n["method"] == "notifications/progress").expect("progress reached the client");
    assert_eq!(progress["params"]["progressToken"], "p");
    assert!(!r.everything().contains(PDF_BASE64) && progress.to_string().len() < 2_000, "{progress}");
    let r = gw.call("heavy_error", json!({})).await;
    assert!(r.error_message().contains("failed, report attached"), "{}", r.response);
    assert!(!r.everything().contains(PDF_BASE64) && r.response.to_string().len() < 2_000, "{}", r.response);

    // Odd media types: the image claimed as `image/png,text/html` is stored and served as the
    // PNG it is; the HTML page claimed with an overlong type is only ever a download.
    let r = gw.call("odd_media", json!({})).await;
    let assets = r.response["result"]["_meta"]["io.stowage/assets"].as_array().cloned().unwrap_or_default();
    assert_eq!(assets.len(), 2, "{}", r.response);
    assert_eq!(assets[0]["mimeType"], "image/png", "{}", assets[0]);
    let client = reqwest::Client::new();
    let image = client.get(assets[0]["uri"].as_str().unwrap()).send().await.unwrap();
    assert_eq!(image.status(), 200);
    assert_eq!(image.headers()["content-type"], "image/png");
    assert!(image.headers()["content-disposition"].to_str().unwrap().starts_with("inline"));
    assert!(image.bytes().await.unwrap().starts_with(b"\x89PNG"));
    let page = client.get(assets[1]["uri"].as_str().unwrap()).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let disposition = page.headers()["content-disposition"].to_str().unwrap().to_owned();
    assert!(disposition.starts_with("attachment"), "an HTML page must never render at the gateway: {disposition}");
    assert!(page.headers()["x-content-type-options"] == "nosniff");
    assert!(page.bytes().await.unwrap().starts_with(b"<!DOCTYPE html>"));

    // An upstream reply over max_message_bytes fails its call at once, naming the limit.
    let started = Instant::now();
    let r = gw.call("get_view_pdf", json!({"bytes": 3_000_000})).await;
    assert!(r.error_message().contains("over the 2097152 byte limit (gateway.max_message_bytes)"), "{}", r.response);
    assert!(started.elapsed() < Duration::from_secs(10), "answered after {:?}", started.elapsed());
    gw.serves_again().await;

    // A client request over the limit gets an error naming it, under its own id, at once.
    let big = json!({"jsonrpc": "2.0", "id": 4242, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "m".repeat(3 << 20)}}});
    let r = gw.send(serde_json::to_vec(&big).unwrap(), false).await;
    let limit = if http { "request body over the 1048576 byte limit (gateway.max_request_bytes)" } else { "over the 2097152 byte limit" };
    assert!(r.error_message().contains(limit), "{}", r.response);
    if !http {
        assert_eq!(r.response["id"], 4242, "{}", r.response);
    }
    gw.serves_again().await;

    let _ = gw.child.kill().await;
}

#[tokio::test]
async fn a_hostile_upstream_over_stdio() {
    hostile_upstream_cases(false).await;
}

#[tokio::test]
async fn a_hostile_upstream_over_http() {
    hostile_upstream_cases(true).await;
}
