//! A minimal MCP server loop over a byte pipe, for the bundled demo server and the test
//! fixtures (not a general SDK: the gateway itself never uses it).
//!
//! It answers `initialize` and `ping`, hands every other request to a [`Handler`] on its own
//! task (so a slow tool does not block the next request), and lets handlers send
//! notifications and requests back to the client through [`Peer`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};

use crate::framing::{DEFAULT_MAX_LINE_BYTES, LineReader, write_line};
use crate::jsonrpc::{Kind, Message, code};

/// The client side of the pipe, as a handler sees it.
#[derive(Clone)]
pub struct Peer {
    out: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Message>>>>,
    next: Arc<AtomicU64>,
}

impl Peer {
    pub fn notify(&self, method: &str, params: Value) {
        let _ = self.out.send(Message::notification(method, Some(&params)).to_line());
    }

    /// Writes raw bytes as one line (fixtures use it to misbehave on purpose).
    pub fn send_raw(&self, line: Vec<u8>) {
        let _ = self.out.send(line);
    }

    /// Sends a request to the client and waits for the answer's result (or its error).
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let _ = self.out.send(Message::request(json!(id), method, Some(&params)).to_line());
        let m = rx.await.map_err(|_| json!({"message": "connection closed"}))?;
        match (&m.result, &m.error) {
            (Some(r), _) => Ok(serde_json::from_str(r.get()).unwrap_or(Value::Null)),
            (_, Some(e)) => Err(serde_json::from_str(e.get()).unwrap_or(Value::Null)),
            _ => Err(Value::Null),
        }
    }
}

/// What a bundled server implements.
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

/// Serves `handler` until the reader closes.
pub async fn serve<R, W, H>(reader: R, mut writer: W, handler: Arc<H>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer_task = tokio::spawn(async move {
        while let Some(line) = out_rx.recv().await {
            if write_line(&mut writer, &line).await.is_err() {
                break;
            }
        }
    });
    let peer = Peer { out: out_tx, pending: Arc::default(), next: Arc::new(AtomicU64::new(1)) };
    let mut lines = LineReader::new(reader, DEFAULT_MAX_LINE_BYTES);
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(msg) = Message::parse(&line) else {
            let _ = peer.out.send(Message::error(Value::Null, code::PARSE_ERROR, "parse error").to_line());
            continue;
        };
        match msg.kind() {
            Kind::Response => {
                if let Some(id) = msg.id.as_ref().and_then(Value::as_u64)
                    && let Some(tx) = peer.pending.lock().unwrap().remove(&id)
                {
                    let _ = tx.send(msg);
                }
            }
            Kind::Notification => handler.on_notification(msg.method.as_deref().unwrap_or(""), &msg.params_value()),
            Kind::Request => {
                let id = msg.id.clone().expect("request");
                let method = msg.method.clone().unwrap_or_default();
                let params = msg.params_value();
                if handler.stateless() && matches!(method.as_str(), "initialize" | "server/discover") {
                    let reply = if method == "initialize" {
                        Message::error(id, code::METHOD_NOT_FOUND, "method not found: initialize")
                    } else {
                        let info = handler.server_info();
                        let result = json!({
                            "resultType": "complete",
                            "supportedVersions": ["2026-07-28"],
                            "capabilities": info["capabilities"],
                            "_meta": {"io.modelcontextprotocol/serverInfo": info["serverInfo"]},
                        });
                        Message::response(id, &result)
                    };
                    let _ = peer.out.send(reply.to_line());
                    continue;
                }
                if method == "initialize" {
                    let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("2025-06-18");
                    let mut info = handler.server_info();
                    info["protocolVersion"] = json!(asked);
                    let _ = peer.out.send(Message::response(id, &info).to_line());
                    continue;
                }
                if method == "ping" {
                    let _ = peer.out.send(Message::response(id, &json!({})).to_line());
                    continue;
                }
                let handler = handler.clone();
                let peer = peer.clone();
                tokio::spawn(async move {
                    let reply = match handler.handle(&method, params, &id, &peer).await {
                        Ok(Some(v)) => Message::response(id, &v),
                        Ok(None) => return,
                        Err((c, m)) => Message::error(id, c, m),
                    };
                    let _ = peer.out.send(reply.to_line());
                });
            }
            Kind::Invalid => {}
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
