//! README's host snippets (Claude Desktop, Claude Code, Cursor, VS Code), run as written.
//!
//! Each snippet is read out of README.md (so README and this test cannot drift), turned into
//! the command line its host would start, and started by the official Python client
//! (`mcp` 2.3.0, installed by scripts/gateway-peers.sh) exactly so: the built binary stands in for the `PATH`
//! lookup of `stowage`, and the test's own server list for the snippet's placeholder path
//! (VS Code fills in `${workspaceFolder}` itself, so the test does too). Like a host, it
//! starts the gateway in a working directory nobody can write to, with `HOME` (and for half
//! of them `XDG_DATA_HOME`) in a temporary directory, and the server list wraps the real
//! `@modelcontextprotocol/server-everything`, whose 4 KB PNG must come back offloaded.
//! Afterwards `stowage artifacts ls`, run elsewhere with the same environment, lists it.
//!
//! A missing peer skips a test with a loud message on a developer machine, and fails it under
//! `CI` (where the test script installs them).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const EVERYTHING: &str = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";
const PYTHON: &str = "venv/bin/python";
/// What the snippets put where the user's server list goes.
const PLACEHOLDER: &str = "/ABSOLUTE/PATH/TO/servers.json";
const VSCODE_PLACEHOLDER: &str = "${workspaceFolder}/servers.json";

/// The fenced block after `<!-- snippet: NAME -->` in README.md.
fn snippet(name: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    let marker = format!("<!-- snippet: {name} -->");
    let after = readme.split_once(&marker).unwrap_or_else(|| panic!("README.md has no {marker}")).1;
    let fence_start = after.find("```").unwrap();
    let body = &after[fence_start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_owned()
}

/// The command a host runs for a snippet: (command, args).
fn host_command(host: &str) -> (String, Vec<String>) {
    let text = snippet(host);
    let entry = |v: &Value| -> (String, Vec<String>) {
        let command = v["command"].as_str().unwrap().to_owned();
        let args = v["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
        (command, args)
    };
    match host {
        "claude-code" => {
            let line = text.lines().find(|l| l.starts_with("claude mcp add")).expect("a `claude mcp add` line");
            let words = shlex::split(line).expect("shell words");
            let sep = words.iter().position(|w| w == "--").expect("`--` before the command");
            assert_eq!(words[sep - 1], "stowage", "the server is named stowage: {line}");
            (words[sep + 1].clone(), words[sep + 2..].to_vec())
        }
        "vscode" => {
            let v: Value = serde_json::from_str(&text).unwrap();
            let s = &v["servers"]["stowage"];
            assert_eq!(s["type"], "stdio", "VS Code needs the type: {text}");
            entry(s)
        }
        _ => {
            let v: Value = serde_json::from_str(&text).unwrap();
            entry(&v["mcpServers"]["stowage"])
        }
    }
}

/// A working directory nobody can write to, as hosts often give (`/` on macOS). A 0555
/// directory does not stop root, so as root it is `/proc`, where nobody can create anything.
fn unwritable_dir(tmp: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp.join("readonly-cwd");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::create_dir(dir.join("probe")).is_ok() {
        return PathBuf::from("/proc");
    }
    dir
}

async fn run_host(host: &str, with_xdg: bool) {
    let (Some(everything), Some(python)) = (stowage_testkit::require_peer(EVERYTHING), stowage_testkit::require_peer(PYTHON)) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let workspace = tmp.path().join("workspace");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let servers = workspace.join("servers.json");
    let list = json!({"mcpServers": {"everything": {"command": "node", "args": [everything, "stdio"]}}});
    std::fs::write(&servers, list.to_string()).unwrap();

    let (command, args) = host_command(host);
    assert_eq!(command, "stowage", "{host}: the snippet runs `stowage` from PATH");
    let placeholder = if host == "vscode" { VSCODE_PLACEHOLDER } else { PLACEHOLDER };
    assert!(args.iter().any(|a| a == placeholder), "{host}: the snippet's server list is {placeholder}: {args:?}");
    let args: Vec<String> = args.iter().map(|a| if a == placeholder { servers.display().to_string() } else { a.clone() }).collect();
    let cwd = unwritable_dir(tmp.path());

    let mut env = json!({"HOME": home, "PATH": std::env::var("PATH").unwrap(), "STOWAGE_LOG": "warn"});
    let store = if with_xdg {
        let xdg = tmp.path().join("xdg-data");
        env["XDG_DATA_HOME"] = json!(xdg);
        xdg.join("stowage")
    } else {
        home.join(".local/share/stowage")
    };
    let spec = json!({
        "command": env!("CARGO_BIN_EXE_stowage"), "args": args, "env": env, "cwd": cwd,
        "tool": "get-tiny-image", "arguments": {},
    });
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/host_client.py");
    let out = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(spec.to_string()).output().unwrap()).await.unwrap();
    assert!(out.status.success(), "{host}: the Python client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();

    let tools: Vec<&str> = seen["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(tools.contains(&"get-tiny-image") && tools.contains(&"artifact_url"), "{host}: {tools:?}");
    // Offloaded: a resource_link and an asset, and no image data in what the model gets.
    let result = &seen["result"];
    let text = result.to_string();
    assert!(!text.contains("iVBORw0KGgo"), "{host}: the PNG's base64 reached the client: {text}");
    let asset = &result["_meta"]["io.stowage/assets"][0];
    assert_eq!(asset["mimeType"], "image/png", "{host}: {text}");
    let id = asset["id"].as_str().unwrap().to_owned();
    assert!(result["content"].as_array().unwrap().iter().any(|c| c["type"] == "resource_link"), "{host}: {text}");

    // The store is in the data directory, not in the working directory.
    assert!(store.join("index.sqlite").is_file(), "{host}: no store at {}", store.display());
    assert!(!cwd.join(".stowage").exists(), "{host}: a store was made in the working directory");
    // And `stowage artifacts ls`, from anywhere, with the same HOME/XDG, finds it.
    let mut ls = Command::new(env!("CARGO_BIN_EXE_stowage"));
    ls.current_dir(&workspace).env_clear().env("HOME", &home).args(["artifacts", "ls", "--json"]);
    if with_xdg {
        ls.env("XDG_DATA_HOME", tmp.path().join("xdg-data"));
    }
    let ls = ls.output().unwrap();
    assert!(ls.status.success(), "{}", String::from_utf8_lossy(&ls.stderr));
    assert!(String::from_utf8_lossy(&ls.stdout).contains(&id), "{host}: artifacts ls does not list {id}");
}

#[tokio::test]
async fn claude_desktop_snippet_runs_as_written() {
    run_host("claude-desktop", false).await;
}

#[tokio::test]
async fn claude_code_snippet_runs_as_written() {
    run_host("claude-code", true).await;
}

#[tokio::test]
async fn cursor_snippet_runs_as_written() {
    run_host("cursor", false).await;
}

#[tokio::test]
async fn vscode_snippet_runs_as_written() {
    run_host("vscode", true).await;
}

/// README names each host's config file: the paths people look for.
#[test]
fn readme_names_each_hosts_config_file() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    for path in [
        "~/Library/Application Support/Claude/claude_desktop_config.json",
        "%APPDATA%\\Claude\\claude_desktop_config.json",
        ".cursor/mcp.json",
        "~/.cursor/mcp.json",
        ".vscode/mcp.json",
        "cargo install --locked --path crates/stowage",
    ] {
        assert!(readme.contains(path), "README does not mention {path}");
    }
}
