//! `stowage-session-fixture`: a stdio MCP server that keeps state per session, as a browser
//! automation server does (one process, one browser, one page), for the tests of how the
//! gateway gives clients sessions: which process served a request, and whether what one
//! client changed is ever seen by another.
//!
//! | tool | annotations | what it does |
//! |---|---|---|
//! | `navigate` (`url`) | none (so: may change state) | sets the page; announces `notifications/resources/updated` for `browser://page` |
//! | `snapshot` (`log`) | `readOnlyHint: true` | the process id, the page (`about:blank` until a `navigate`) and the log level; with `log`, a `notifications/message` during the call |
//! | `read_slowly` (`ms`) | `readOnlyHint: true` | sleeps, then answers like `snapshot` |
//! | `add_tool` | `readOnlyHint: false` | adds the tool `extra` to this session's list and says `notifications/tools/list_changed` |
//!
//! Resource `browser://page`: the current page, as text (subscribable). `logging/setLevel`
//! sets the level `snapshot` reports. `STOWAGE_FIXTURE_START_DELAY_MS` makes it read nothing
//! for that long after it starts (a server slow to start).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use stowage_testkit::server::{Handler, Peer, code, serve, text_result};

#[derive(Default)]
struct Browser {
    page: Mutex<Option<String>>,
    level: Mutex<Option<String>>,
    extra: std::sync::atomic::AtomicBool,
    subscribed: std::sync::atomic::AtomicBool,
}

impl Browser {
    fn describe(&self) -> String {
        let page = self.page.lock().unwrap().clone().unwrap_or_else(|| "about:blank".into());
        let level = self.level.lock().unwrap().clone().unwrap_or_else(|| "unset".into());
        format!("pid {} page {page} level {level}", std::process::id())
    }
}

fn tool(name: &str, props: Value, annotations: Option<Value>) -> Value {
    let mut t = json!({"name": name, "inputSchema": {"type": "object", "properties": props}});
    if let Some(a) = annotations {
        t["annotations"] = a;
    }
    t
}

#[async_trait]
impl Handler for Browser {
    fn server_info(&self) -> Value {
        json!({
            "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true}, "logging": {}},
            "serverInfo": {"name": "stowage-session-fixture", "version": "1"},
        })
    }

    async fn handle(&self, method: &str, params: Value, _id: &Value, peer: &Peer) -> Result<Option<Value>, (i64, String)> {
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let read_only = Some(json!({"readOnlyHint": true, "openWorldHint": false}));
        let r = match method {
            "tools/list" => {
                let mut tools = vec![
                    tool("navigate", json!({"url": {"type": "string"}}), None),
                    tool("snapshot", json!({"log": {"type": "boolean"}}), read_only.clone()),
                    tool("read_slowly", json!({"ms": {"type": "integer"}}), read_only),
                    tool("add_tool", json!({}), Some(json!({"readOnlyHint": false}))),
                ];
                if self.extra.load(std::sync::atomic::Ordering::SeqCst) {
                    tools.push(tool("extra", json!({}), None));
                }
                json!({"tools": tools})
            }
            "tools/call" => match params.get("name").and_then(Value::as_str).unwrap_or("") {
                "navigate" => {
                    let url = args.get("url").and_then(Value::as_str).unwrap_or("about:blank").to_owned();
                    *self.page.lock().unwrap() = Some(url);
                    if self.subscribed.load(std::sync::atomic::Ordering::SeqCst) {
                        peer.notify("notifications/resources/updated", json!({"uri": "browser://page"}));
                    }
                    text_result(self.describe())
                }
                "snapshot" => {
                    if args.get("log").and_then(Value::as_bool) == Some(true) {
                        peer.notify("notifications/message", json!({"level": "info", "logger": "browser", "data": self.describe()}));
                    }
                    text_result(self.describe())
                }
                "read_slowly" => {
                    tokio::time::sleep(Duration::from_millis(args.get("ms").and_then(Value::as_u64).unwrap_or(500))).await;
                    text_result(self.describe())
                }
                "add_tool" => {
                    self.extra.store(true, std::sync::atomic::Ordering::SeqCst);
                    peer.notify("notifications/tools/list_changed", json!({}));
                    text_result("added extra")
                }
                "extra" if self.extra.load(std::sync::atomic::Ordering::SeqCst) => text_result("extra"),
                other => return Err((code::INVALID_PARAMS, format!("unknown tool: {other}"))),
            },
            "resources/list" => json!({"resources": [{"uri": "browser://page", "name": "page", "mimeType": "text/plain"}]}),
            "resources/templates/list" => json!({"resourceTemplates": []}),
            "resources/read" => json!({"contents": [{"uri": "browser://page", "mimeType": "text/plain", "text": self.describe()}]}),
            "resources/subscribe" => {
                self.subscribed.store(true, std::sync::atomic::Ordering::SeqCst);
                json!({})
            }
            "resources/unsubscribe" => {
                self.subscribed.store(false, std::sync::atomic::Ordering::SeqCst);
                json!({})
            }
            "logging/setLevel" => {
                *self.level.lock().unwrap() = params.get("level").and_then(Value::as_str).map(str::to_owned);
                json!({})
            }
            _ => return Err((code::METHOD_NOT_FOUND, format!("method not found: {method}"))),
        };
        Ok(Some(r))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Some(ms) = std::env::var("STOWAGE_FIXTURE_START_DELAY_MS").ok().and_then(|v| v.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    serve(tokio::io::stdin(), tokio::io::stdout(), Arc::new(Browser::default())).await;
}
