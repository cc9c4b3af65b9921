//! The gateway's reader tools, `artifact_read` and `artifact_query`, through the real binary
//! and its bundled demo upstream: over HTTP with two authenticated users (paging a text
//! artifact to its end, grep, JSON Pointer and JMESPath, every unhappy path, and one user's id
//! looking exactly like a missing one to the other), and over stdio with the official Python
//! client, which checks every `structuredContent` against the tool's `outputSchema`.
//!
//! Errors of all three gateway tools are `isError` results with one text block naming the code
//! and no `structuredContent`: `error_code` checks that shape everywhere.

use crate::raw_http;

use raw_http::post_mcp;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hash(key: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stowage")).args(["hash-key", key]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

const ALICE: &str = "alice-secret-key-0123456789";
const BOB: &str = "bob-secret-key-0123456789";

fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("stowage.toml");
    let config = format!(
        "[auth]\napi_keys = [\n  {{ id = \"alice\", sha256 = \"{}\" }},\n  {{ id = \"bob\", sha256 = \"{}\" }},\n]\n",
        hash(ALICE),
        hash(BOB)
    );
    std::fs::write(&conf, config).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .current_dir(dir.path())
        .args(["--config", conf.to_str().unwrap(), "--store", dir.path().join("store").to_str().unwrap()])
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server { child, port, _dir: dir };
    let deadline = Instant::now() + Duration::from_secs(30);
    while post_mcp(port, &[], "").0 == 0 {
        assert!(Instant::now() < deadline, "stowage serve did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

struct Client {
    port: u16,
    auth: String,
    session: String,
}

impl Client {
    fn connect(port: u16, key: &str) -> Client {
        let auth = format!("Bearer {key}");
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let (status, session, v) = post_mcp(port, &[("Authorization", &auth)], &init.to_string());
        assert_eq!(status, 200, "{v}");
        Client { port, auth, session: session.expect("a session id") }
    }

    fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}).to_string();
        let (status, _, v) = post_mcp(self.port, &[("Authorization", &self.auth), ("Mcp-Session-Id", &self.session)], &body);
        assert_eq!(status, 200, "{v}");
        v["result"].clone()
    }

    fn call(&self, tool: &str, args: Value) -> Value {
        self.rpc("tools/call", json!({"name": tool, "arguments": args}))
    }
}

/// The code a tool error names, after checking its shape: `isError`, one text block
/// `code: message`, no `structuredContent`.
fn error_code(result: &Value) -> String {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "an error must not carry structuredContent: {result}");
    let content = result["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "{result}");
    content[0]["text"].as_str().unwrap().split_once(':').unwrap().0.to_owned()
}

fn message(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap().to_owned()
}

/// What a reader answer gives the model (its window, listing or selection as text): in
/// `content` after the header line for a client that reads content (these tests' is one), and
/// then not repeated in `structuredContent`.
fn payload(result: &Value) -> String {
    assert!(
        result["structuredContent"].get("text").is_none() && result["structuredContent"].get("result").is_none(),
        "written twice: {result}"
    );
    assert_eq!(result["structuredContent"]["in"], "content", "{result}");
    result["content"][1]["text"].as_str().unwrap_or("").to_owned()
}

/// A grep listing's lines as `{line, offset, text}`.
fn matches(result: &Value) -> Value {
    payload(result)
        .lines()
        .map(|l| {
            let (at, text) = l.split_once(": ").unwrap();
            let (line, offset) = at.split_once('@').unwrap();
            json!({"line": line.parse::<u64>().unwrap(), "offset": offset.parse::<u64>().unwrap(), "text": text})
        })
        .collect()
}

/// The id of the first artifact a rewritten result names.
fn artifact_id(result: &Value) -> String {
    if let Some(id) = result["_meta"]["io.stowage/assets"][0]["id"].as_str() {
        return id.to_owned();
    }
    let text = result.to_string();
    let at = text.find("artifact://").unwrap_or_else(|| panic!("no artifact in {text}")) + "artifact://".len();
    text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || "_.-".contains(*c)).collect()
}

/// Over 8000 o200k tokens in under 32000 characters: offloaded for its tokens.
fn dense_text() -> String {
    (0..4_300u64).map(|i| format!("{};{} ", i * 7919 % 1000, (i * 104_729) % 97)).collect::<String>() + "\nlast line: the end\n"
}

#[test]
fn reader_tools_over_http_for_two_users() {
    let server = start();
    let alice = Client::connect(server.port, ALICE);

    // Listed with input schemas, beside artifact_url. The readers declare no outputSchema:
    // their page is written for the model in content, and hosts that show structuredContent
    // instead of text (Claude Code, Codex) get none, which a declared schema would forbid.
    let tools = alice.rpc("tools/list", json!({}));
    for name in ["artifact_read", "artifact_query", "artifact_url"] {
        let t = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("{name} not listed"));
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert_eq!(t.get("outputSchema").is_some(), name == "artifact_url", "{t}");
    }

    // A text over the budget: a preview whose stub names artifact_read.
    let text = dense_text();
    let result = alice.call("echo", json!({"message": text}));
    assert!(result.to_string().len() < 4_000, "{result}");
    assert!(result.to_string().contains("artifact_read"), "the stub names the tool: {result}");
    let id = artifact_id(&result);

    // Paged to its end, the windows are the text; the first says where the next starts.
    let mut all = String::new();
    let mut offset = 0u64;
    for page in 0.. {
        assert!(page < 10, "paging does not end");
        let r = alice.call("artifact_read", json!({"id": format!("artifact://{id}"), "offset": offset}));
        assert_ne!(r["isError"], true, "{r}");
        let s = &r["structuredContent"];
        let page_text = payload(&r);
        all.push_str(&page_text);
        assert!(page_text.len() <= 24_000);
        assert_eq!(s["length"].as_u64().unwrap() as usize, page_text.chars().count());
        match s["nextOffset"].as_u64() {
            Some(n) => {
                assert_eq!(s["truncated"], true);
                assert!(message(&r).contains(&format!("offset={n}")), "{}", &message(&r)[..200]);
                offset = n;
            }
            None => break,
        }
    }
    assert_eq!(all, text);
    // A window by offset and length, counted in characters.
    let r = alice.call("artifact_read", json!({"id": id, "offset": 4, "length": 6}));
    assert_eq!(payload(&r), text.chars().skip(4).take(6).collect::<String>());
    // A huge length is capped at the budget.
    let r = alice.call("artifact_read", json!({"id": id, "length": 1u64 << 40}));
    assert_eq!(r["structuredContent"]["truncated"], true);
    assert!(payload(&r).len() <= 24_000);
    // Grep: the matching lines with their numbers.
    let r = alice.call("artifact_read", json!({"id": id, "grep": "^last line"}));
    assert_eq!(matches(&r), json!([{"line": 2, "offset": text.find("last").unwrap(), "text": "last line: the end"}]));

    // A JSON artifact: its stub names artifact_query; pointer and JMESPath select parts.
    let rows: Vec<Value> = (0..2000).map(|i| json!({"id": i, "name": format!("row {i}"), "total": i * 3})).collect();
    let result = alice.call("echo", json!({"message": json!({"rows": rows, "count": 2000}).to_string()}));
    assert!(result.to_string().contains("artifact_query"), "{result}");
    let json_id = artifact_id(&result);
    let r = alice.call("artifact_query", json!({"id": json_id, "pointer": "/3/name"}));
    // A string is shown as its text (paged like any text), not as a JSON literal.
    assert_eq!(payload(&r), "row 3", "{r}");
    let r = alice.call("artifact_query", json!({"id": json_id, "jmespath": "[?total > `5990`].id"}));
    assert_eq!(serde_json::from_str::<Value>(&payload(&r)).unwrap(), json!([1997, 1998, 1999]), "{r}");
    let r = alice.call("artifact_query", json!({"id": json_id, "pointer": ""}));
    assert_eq!(r["structuredContent"]["truncated"], true);
    assert!(r["structuredContent"]["note"].as_str().unwrap().contains("of 2000"), "{r}");

    // Unhappy paths: each a one-line error naming its code and saying what to do.
    let pdf_id = artifact_id(&alice.call("get_report", json!({})));
    // A PDF reads as the text of its pages.
    let r = alice.call("artifact_read", json!({"id": pdf_id}));
    assert_eq!(r["structuredContent"]["pageCount"], 1, "{r}");
    assert!(payload(&r).contains("--- page 1 ---") && payload(&r).contains("Q3 report"), "{r}");
    // Grep on a PDF names the page of each hit.
    let r = alice.call("artifact_read", json!({"id": pdf_id, "grep": "Q3"}));
    assert!(payload(&r).starts_with("p1 l") && payload(&r).contains("Q3"), "{r}");
    for (tool, args, code, says) in [
        ("artifact_read", json!({"id": pdf_id, "max_edge": 100}), "bad_request", "does not apply to a PDF"),
        ("artifact_query", json!({"id": pdf_id, "pointer": ""}), "bad_request", "not text"),
        ("artifact_query", json!({"id": id, "pointer": ""}), "bad_request", "not JSON"),
        ("artifact_read", json!({"id": id, "grep": "(unclosed"}), "bad_request", "not a valid regex"),
        ("artifact_read", json!({"id": id, "offset": 1_000_000}), "bad_request", "past the end"),
        ("artifact_read", json!({"id": id, "length": 0}), "bad_request", "at least 1"),
        ("artifact_query", json!({"id": json_id, "pointer": "/5000"}), "bad_request", "array of 2000 items"),
        ("artifact_query", json!({"id": json_id, "pointer": "rows"}), "bad_request", "JSON Pointer"),
        ("artifact_query", json!({"id": json_id, "jmespath": "[?"}), "bad_request", "does not parse"),
        ("artifact_query", json!({"id": json_id}), "bad_request", "pointer"),
        ("artifact_read", json!({}), "bad_request", "needs \"id\""),
        ("artifact_read", json!({"id": "echo_0000000000000000"}), "artifact_not_found", "not found"),
        ("artifact_read", json!({"id": "../../etc/passwd"}), "artifact_not_found", "not found"),
    ] {
        let r = alice.call(tool, args.clone());
        assert_eq!(error_code(&r), code, "{tool} {args}: {r}");
        let m = message(&r);
        assert!(m.contains(says) && !m.contains('\n'), "{tool} {args}: {m}");
    }

    // Bob: alice's ids look exactly like ids that do not exist, on every gateway tool.
    let bob = Client::connect(server.port, BOB);
    for (tool, args) in [
        ("artifact_read", json!({})),
        ("artifact_read", json!({"grep": "x"})),
        ("artifact_query", json!({"pointer": ""})),
        ("artifact_url", json!({})),
    ] {
        let with = |id: &str| {
            let mut a = args.clone();
            a["id"] = json!(id);
            bob.call(tool, a)
        };
        let theirs = with(&id);
        let ghost = with("echo_0000000000000000");
        assert_eq!(error_code(&theirs), "artifact_not_found", "{tool}: {theirs}");
        assert_eq!(theirs, ghost, "{tool}: another user's artifact must be indistinguishable from a missing one");
    }
    // Alice's second session is still alice.
    let alice2 = Client::connect(server.port, ALICE);
    assert_eq!(payload(&alice2.call("artifact_read", json!({"id": id, "length": 3}))), text[..3]);
}

/// The Python SDK from the peers directory (installed by scripts/gateway-peers.sh).
fn python() -> Option<PathBuf> {
    stowage_testkit::require_peer("venv/bin/python")
}

/// Over stdio, as a host runs it, with the official Python client: it validates each
/// `structuredContent` against the `outputSchema` it listed, so a result or an error that broke
/// a schema would fail the script.
#[test]
fn reader_tools_over_stdio_with_the_python_sdk() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/reader_tools.py");
    let text = dense_text();
    let out = Command::new(python)
        .arg(script)
        .args(["--", env!("CARGO_BIN_EXE_stowage"), "--store", dir.path().join("store").to_str().unwrap(), "serve", "--stdio"])
        .current_dir(dir.path())
        .env("READER_TEXT", &text)
        .output()
        .unwrap();
    assert!(out.status.success(), "python client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let mut o: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(o["tools"].as_array().unwrap().iter().any(|t| t == "artifact_read"), "{}", o["tools"]);
    assert!(o["stub"].as_str().unwrap().contains("artifact_read"), "{}", o["stub"]);
    assert!(o["paged"].as_str().unwrap() == text, "paging did not give the text back");
    assert!(o["pages"].as_u64().unwrap() >= 2, "{}", o["pages"]);
    o["paged"] = Value::Null;
    assert_eq!(o["grep"], json!([{"line": 2, "offset": text.find("last").unwrap(), "text": "last line: the end"}]));
    assert_eq!(o["query"], json!(3));
    for key in ["unknown", "bad_regex", "binary", "url_unknown"] {
        let e = &o["errors"][key];
        assert_eq!(e["is_error"], true, "{key}: {e}");
        assert!(e["structured"].is_null(), "{key}: {e}");
    }
    assert!(o["errors"]["unknown"]["text"].as_str().unwrap().starts_with("artifact_not_found: "), "{o}");
    assert!(o["errors"]["url_unknown"]["text"].as_str().unwrap().starts_with("artifact_not_found: "), "{o}");
    assert!(o["errors"]["bad_regex"]["text"].as_str().unwrap().starts_with("bad_request: "), "{o}");
    assert!(o["errors"]["binary"]["text"].as_str().unwrap().contains("not text"), "{o}");
}
