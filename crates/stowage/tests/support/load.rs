//! `stowage serve` as a process, and a small MCP client over Streamable HTTP, for the tests
//! and benchmarks that measure the gateway from outside (its RSS, what clients see):
//! `tests/serve_memory.rs` and `benches/serve_load.rs` include this file.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Resident memory of process `pid`, in MB.
pub(crate) fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0.0);
    kb / 1024.0
}

/// A running `stowage serve`.
pub(crate) struct Serve {
    child: tokio::process::Child,
    pub url: String,
    pub pid: u32,
    _dir: tempfile::TempDir,
}

impl Serve {
    pub(crate) async fn start(config: &str) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("stowage.toml"), config).unwrap();
        let port = free_port();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
            .current_dir(d)
            .args(["--config", d.join("stowage.toml").to_str().unwrap(), "--store", d.join("store").to_str().unwrap()])
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--no-playground"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("serve.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = child.id().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !reqwest::get(format!("{base}/readyz")).await.is_ok_and(|r| r.status() == 200) {
            assert!(Instant::now() < deadline, "stowage serve did not come up: {}", std::fs::read_to_string(d.join("serve.log")).unwrap());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Serve { child, url: format!("{base}/mcp"), pid, _dir: dir }
    }

    /// The pids of its stdio children whose command line contains `name`.
    pub(crate) fn children(&self, name: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if ppid == Some(self.pid) && cmdline.contains(name) {
                out.push(pid);
            }
        }
        out
    }
}

/// Why a call failed, as counted.
pub(crate) type Kind = String;

/// A minimal MCP client over Streamable HTTP (SSE answers) on a shared, kept-alive pool.
pub(crate) struct Mcp {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    capabilities: Value,
    next: u64,
}

impl Mcp {
    pub(crate) async fn connect(http: &reqwest::Client, url: &str, capabilities: Value) -> Result<Mcp, Kind> {
        let mut c = Mcp { http: http.clone(), url: url.to_owned(), session: None, capabilities, next: 1 };
        c.initialize().await?;
        Ok(c)
    }

    pub(crate) async fn initialize(&mut self) -> Result<(), Kind> {
        self.session = None;
        let params = json!({"protocolVersion": "2025-06-18", "capabilities": self.capabilities, "clientInfo": {"name": "serve-load", "version": "1"}});
        self.rpc("initialize", params).await?;
        self.notify("notifications/initialized").await
    }

    pub(crate) async fn notify(&mut self, method: &str) -> Result<(), Kind> {
        let body = json!({"jsonrpc": "2.0", "method": method}).to_string();
        let mut req =
            self.http.post(&self.url).header("content-type", "application/json").header("accept", "application/json, text/event-stream");
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        req.body(body).send().await.map_err(|e| format!("http: {}", short(&e.to_string())))?;
        Ok(())
    }

    pub(crate) async fn rpc(&mut self, method: &str, params: Value) -> Result<Value, Kind> {
        self.next += 1;
        let body = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}).to_string();
        let mut req =
            self.http.post(&self.url).header("content-type", "application/json").header("accept", "application/json, text/event-stream");
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s).header("mcp-protocol-version", "2025-06-18");
        }
        let resp = req.body(body).send().await.map_err(|e| format!("http: {}", short(&e.to_string())))?;
        let status = resp.status().as_u16();
        if method == "initialize"
            && let Some(s) = resp.headers().get("mcp-session-id")
        {
            self.session = s.to_str().ok().map(str::to_owned);
        }
        let text = resp.text().await.map_err(|e| format!("http body: {}", short(&e.to_string())))?;
        if status != 200 {
            return Err(format!("http {status}"));
        }
        let message: Value = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .rfind(|m| m.get("id").is_some())
            .or_else(|| serde_json::from_str(&text).ok())
            .ok_or_else(|| "no response in the answer".to_owned())?;
        if let Some(e) = message.get("error") {
            return Err(format!("json-rpc {}: {}", e["code"], short(e["message"].as_str().unwrap_or(""))));
        }
        Ok(message["result"].clone())
    }

    /// A tool call; an evicted session is initialized again once (counted by the caller).
    pub(crate) async fn call(&mut self, tool: &str, args: Value) -> Result<Value, Kind> {
        let params = json!({"name": tool, "arguments": args});
        let r = match self.rpc("tools/call", params.clone()).await {
            Err(k) if k == "http 404" => {
                self.initialize().await?;
                self.rpc("tools/call", params).await.map_err(|k| format!("after re-initialize: {k}"))?
            }
            other => other?,
        };
        if r["isError"] == true {
            let text = r["content"][0]["text"].as_str().unwrap_or("");
            return Err(format!("tool error: {}", short(text)));
        }
        Ok(r)
    }

    pub(crate) async fn tool_named(&mut self, suffix: &str) -> String {
        let tools = self.rpc("tools/list", json!({})).await.unwrap();
        let names: Vec<String> = tools["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect();
        names
            .iter()
            .find(|n| *n == suffix || n.ends_with(&format!("_{suffix}")))
            .cloned()
            .unwrap_or_else(|| panic!("no {suffix} in {names:?}"))
    }
}

/// The first words of a message: kinds are counted, so details are cut.
pub(crate) fn short(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().take(8).collect();
    words.join(" ").chars().filter(|c| !c.is_ascii_digit()).collect()
}

pub(crate) fn http_client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(256).timeout(Duration::from_secs(120)).build().unwrap()
}
