//! [`RpcClient`]: a small JSON-RPC client over any byte pipe (an in-process duplex, a child's
//! stdio), as tests use it to drive the gateway: requests with ids and timeouts, every
//! notification recorded in arrival order, and server-initiated requests (sampling,
//! elicitation, roots) answered by a handler.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{mpsc, oneshot};

/// Answers a server-initiated request: `Some(result)`, or `None` for a -32601 error.
pub type ServerRequestHandler = Arc<dyn Fn(&str, &Value) -> Option<Value> + Send + Sync>;

/// Everything the client received, in order: notifications, and responses as they came.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    Notification(Value),
    Response(Value),
    Request(Value),
}

pub struct RpcClient {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>,
    next: AtomicU64,
    /// Notifications, in arrival order.
    pub notifications: Arc<Mutex<Vec<Value>>>,
    /// Every message received, in arrival order (to check ordering).
    pub received: Arc<Mutex<Vec<Received>>>,
    closed: Arc<tokio::sync::Notify>,
    /// Dropped with the client: the reader stops and lets go of its end of the pipe, so the
    /// server sees the client go away.
    _stop: oneshot::Sender<()>,
}

impl RpcClient {
    /// Starts reading `reader` and writing `writer`; `on_request` answers what the server asks.
    pub fn connect<R, W>(reader: R, writer: W, on_request: Option<ServerRequestHandler>) -> RpcClient
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, _) = crate::spawn_line_writer(writer);
        let pending: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>> = Arc::default();
        let notifications: Arc<Mutex<Vec<Value>>> = Arc::default();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let closed = Arc::new(tokio::sync::Notify::new());
        // The reader answers server requests through a weak sender: dropping the client drops
        // the last strong one, which closes the pipe and so ends the session, as a client
        // going away does.
        let (p, n, r, back, done) = (pending.clone(), notifications.clone(), received.clone(), tx.downgrade(), closed.clone());
        let (stop_tx, mut stop) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let mut reader = BufReader::with_capacity(1 << 20, reader);
            let mut line = Vec::new();
            loop {
                line.clear();
                tokio::select! {
                    read = reader.read_until(b'\n', &mut line) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    },
                    _ = &mut stop => break,
                }
                let v: Value = serde_json::from_slice(&line).expect("the server sent valid json");
                match (v.get("id"), v.get("method")) {
                    (Some(id), None) => {
                        r.lock().unwrap().push(Received::Response(v.clone()));
                        if let Some(tx) = p.lock().unwrap().remove(&id.to_string()) {
                            let _ = tx.send(v);
                        }
                    }
                    (Some(id), Some(m)) => {
                        r.lock().unwrap().push(Received::Request(v.clone()));
                        let result = on_request.as_ref().and_then(|h| h(m.as_str().unwrap_or(""), &v["params"]));
                        let answer = match result {
                            Some(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
                            None => {
                                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "not supported by this client"}})
                            }
                        };
                        if let Some(back) = back.upgrade() {
                            let _ = back.send(serde_json::to_vec(&answer).unwrap());
                        }
                    }
                    _ => {
                        r.lock().unwrap().push(Received::Notification(v.clone()));
                        n.lock().unwrap().push(v);
                    }
                }
            }
            done.notify_waiters();
            done.notify_one();
        });
        RpcClient { tx, pending, next: AtomicU64::new(1), notifications, received, closed, _stop: stop_tx }
    }

    /// Sends a request with this id; the receiver gets the whole response message.
    pub fn send_with_id(&self, id: Value, method: &str, params: Value) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id.to_string(), tx);
        self.send_raw(serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap());
        rx
    }

    /// Writes one raw line (tests of malformed input).
    pub fn send_raw(&self, line: Vec<u8>) {
        let _ = self.tx.send(line);
    }

    /// A fresh request id.
    pub fn next_id(&self) -> Value {
        json!(self.next.fetch_add(1, Ordering::Relaxed) + 1_000_000)
    }

    /// Sends a request and waits (up to 30 s) for the whole response message.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        self.request_within(Duration::from_secs(30), method, params).await
    }

    /// Sends a request and waits up to `timeout` for the whole response message.
    pub async fn request_within(&self, timeout: Duration, method: &str, params: Value) -> Value {
        let rx = self.send_with_id(self.next_id(), method, params);
        tokio::time::timeout(timeout, rx).await.unwrap_or_else(|_| panic!("no answer to {method} within {timeout:?}")).expect("response")
    }

    pub async fn call(&self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args})).await
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.send_raw(serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": method, "params": params})).unwrap());
    }

    /// Initializes with `protocol` and the given client capabilities, then sends `initialized`.
    pub async fn initialize(&self, protocol: &str, capabilities: Value) -> Value {
        let init = self
            .request(
                "initialize",
                json!({"protocolVersion": protocol, "capabilities": capabilities, "clientInfo": {"name": "stowage-test", "version": "0"}}),
            )
            .await;
        self.notify("notifications/initialized", json!({}));
        init
    }

    /// Resolves when the server closes its output.
    pub async fn closed(&self) {
        self.closed.notified().await;
    }
}
