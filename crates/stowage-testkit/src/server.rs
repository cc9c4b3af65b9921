//! A minimal MCP server loop over a byte pipe, for the fixture servers (not a general SDK:
//! the gateway never uses it, and the bundled demo is written with `rmcp`).
//!
//! It answers `initialize` and `ping`, hands every other request to a [`Handler`] on its own
//! task (so a slow tool does not block the next request), and lets handlers send
//! notifications, requests and raw lines back to the client through [`Peer`]. It works on
//! `serde_json::Value`s and newline framing of its own on purpose: fixtures must be able to
//! break the protocol (malformed JSON, hangs, crashes) in ways a typed SDK would not allow,
//! and they must not share code with the gateway they test.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{mpsc, oneshot};

/// JSON-RPC error codes the fixtures answer with.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
}

/// The client side of the pipe, as a handler sees it.
#[derive(Clone)]
pub struct Peer {
    out: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>,
    next: Arc<AtomicU64>,
}

impl Peer {
    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Writes raw bytes as one line (fixtures use it to misbehave on purpose).
    pub fn send_raw(&self, line: Vec<u8>) {
        let _ = self.out.send(line);
    }

    fn send(&self, msg: &Value) {
        let _ = self.out.send(serde_json::to_vec(msg).expect("a Value serialises"));
    }

    /// Sends a request to the client and waits for the answer's result (or its error).
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let m = rx.await.map_err(|_| json!({"message": "connection closed"}))?;
        match (m.get("result"), m.get("error")) {
            (Some(r), _) => Ok(r.clone()),
            (_, Some(e)) => Err(e.clone()),
            _ => Err(Value::Null),
        }
    }
}

/// What a fixture server implements.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// The `initialize` result without `protocolVersion` (added here).
    fn server_info(&self) -> Value;
    /// Sees every notification from the client (fixtures log cancellations).
    fn on_notification(&self, _method: &str, _params: &Value) {}
    /// Speak only the stateless revision: refuse `initialize` (-32601) and answer
    /// `server/discover`, as 2026-07-28-only servers do.
    fn stateless(&self) -> bool {
        false
    }

    /// Handles a request. `Ok(None)` means: send no response at all (a fixture that hangs).
    async fn handle(&self, method: &str, params: Value, id: &Value, peer: &Peer) -> Result<Option<Value>, (i64, String)>;
}

fn response(id: &Value, result: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Serves `handler` until the reader closes.
pub async fn serve<R, W, H>(reader: R, writer: W, handler: Arc<H>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let (out_tx, writer_task) = crate::spawn_line_writer(writer);
    let peer = Peer { out: out_tx, pending: Arc::default(), next: Arc::new(AtomicU64::new(1)) };
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
            peer.send(&error(&Value::Null, code::PARSE_ERROR, "parse error"));
            continue;
        };
        let id = msg.get("id").cloned();
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        match (id, method) {
            // A response to one of our requests.
            (Some(id), None) => {
                if let Some(tx) = id.as_u64().and_then(|id| peer.pending.lock().unwrap().remove(&id)) {
                    let _ = tx.send(msg);
                }
            }
            (None, Some(method)) => handler.on_notification(&method, &params),
            (Some(id), Some(method)) => {
                if handler.stateless() && matches!(method.as_str(), "initialize" | "server/discover") {
                    let reply = if method == "initialize" {
                        error(&id, code::METHOD_NOT_FOUND, "method not found: initialize")
                    } else {
                        let info = handler.server_info();
                        response(
                            &id,
                            &json!({
                                "resultType": "complete",
                                "supportedVersions": ["2026-07-28"],
                                "capabilities": info["capabilities"],
                                "_meta": {"io.modelcontextprotocol/serverInfo": info["serverInfo"]},
                            }),
                        )
                    };
                    peer.send(&reply);
                    continue;
                }
                if method == "initialize" {
                    let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("2025-06-18");
                    let mut info = handler.server_info();
                    info["protocolVersion"] = json!(asked);
                    peer.send(&response(&id, &info));
                    continue;
                }
                if method == "ping" {
                    peer.send(&response(&id, &json!({})));
                    continue;
                }
                let (handler, peer) = (handler.clone(), peer.clone());
                tokio::spawn(async move {
                    let reply = match handler.handle(&method, params, &id, &peer).await {
                        Ok(Some(v)) => response(&id, &v),
                        Ok(None) => return,
                        Err((c, m)) => error(&id, c, &m),
                    };
                    peer.send(&reply);
                });
            }
            (None, None) => {}
        }
    }
    drop(peer);
    // Handlers that never answer (fixtures) keep a sender alive: do not wait for them forever.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), writer_task).await;
}

/// A text tool result.
pub fn text_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}]})
}
