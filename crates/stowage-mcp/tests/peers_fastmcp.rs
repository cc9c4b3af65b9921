//! Clients that validate, through the gateway, against a FastMCP 4.1.2 server (scripts/gateway-peers.sh): the
//! official Python client (`mcp==2.3.0`, which checks every result's structuredContent
//! against the tool's outputSchema and raises on a mismatch) and the MCP Inspector CLI (which
//! exits non-zero on one). The server (`tests/fixtures/fastmcp_shapes.py`) returns a big
//! `list[dict]`, a big `dict`, a Pydantic model with big fields and a closed Pydantic model;
//! each is offloaded, and both clients must accept every result, typed as declared.
//!
//! A missing peer skips a test loudly on a developer machine and fails it under `CI`.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{MemSink, fast_config, require_peer as require, shaper};
use serde_json::Value;
use stowage_mcp::Gateway;
use stowage_mcp::config::{TransportSpec, UpstreamSpec};

const PYTHON: &str = "venv/bin/python";
const INSPECTOR: &str = "node_modules/.bin/inspector";
/// Big enough that every tool's result is offloaded (20,000 rows are about 1 MB of JSON).
const N: &str = "20000";

/// The gateway over HTTP in front of the FastMCP shapes server (stdio).
async fn gateway(python: &std::path::Path) -> (Arc<Gateway>, String) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fastmcp_shapes.py");
    let spec = UpstreamSpec::new(
        "shapes",
        TransportSpec::stdio(python.display().to_string(), vec![script.display().to_string()]),
        Duration::from_secs(60),
    );
    let gw = common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), fast_config(), stowage_mcp::SessionMode::Shared).await;
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    (gw, format!("http://{addr}/mcp"))
}

fn texts(result: &Value) -> String {
    result["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn python_client_accepts_fastmcp_lists_dicts_and_models_through_the_gateway() {
    let Some(python) = require(PYTHON) else { return };
    let (gw, url) = gateway(&python).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/validate_fastmcp.py");
    let out = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(url).arg(N).output().unwrap()).await.unwrap();
    // The client raised nothing: every structuredContent validated against its schema.
    assert!(out.status.success(), "the Python client rejected a result:\n{}", String::from_utf8_lossy(&out.stderr));
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The schemas are advertised as the server declared them.
    assert_eq!(o["schemas"]["rows"]["properties"]["result"]["type"], "array");
    assert_eq!(o["schemas"]["closed"]["additionalProperties"], false);

    // list[dict]: still a list of dicts, a prefix of the rows; one line says how many of how many.
    let rows = &o["rows"];
    let kept = rows["structuredContent"]["result"].as_array().expect("result is an array");
    assert!(!kept.is_empty() && kept.len() < 20_000 && kept.iter().all(Value::is_object), "{}", kept.len());
    assert!(texts(rows).contains(&format!("result keeps {} of 20000 items in place", kept.len())), "{}", texts(rows));
    assert_eq!(rows["_meta"]["io.stowage/transform"]["artifacts"], 1, "the list and its text twin are one artifact");

    // dict: still an object, a subset of its keys.
    let table = rows_of(&o["table"]);
    assert!(table.contains_key("key0") && table.len() < 20_001 && !table.contains_key("$artifact"), "{}", table.len());

    // The Pydantic model: every field typed as declared, the big ones offloaded.
    let report = rows_of(&o["report"]);
    assert_eq!(report["title"], "Quarterly");
    assert!(report["body"].as_str().unwrap().contains("artifact://"), "the long string stays a string, with its stub");
    assert!(report["rows"].as_array().unwrap().iter().all(|r| r["i"].is_i64() && r["label"].is_string()));
    assert!(report["meta"]["owner"] == "ops" && report["meta"]["tags"].is_array());
    // Two artifacts: the long text, and the model itself, whole (its cut lists in it).
    assert_eq!(o["report"]["_meta"]["io.stowage/transform"]["artifacts"], 2);

    // The closed model: no `assets` added to it (they are in _meta), values still numbers.
    let closed = rows_of(&o["closed"]);
    assert!(!closed.contains_key("assets"));
    assert!(closed["values"].as_array().unwrap().iter().all(Value::is_number));
    assert!(o["closed"]["_meta"]["io.stowage/assets"].as_array().is_some_and(|a| a.len() == 1), "{}", o["closed"]["_meta"]);

    for tool in ["rows", "table", "report", "closed"] {
        let r = &o[tool];
        assert_ne!(r["isError"], true, "{tool}: {r}");
        assert!(r.to_string().len() < 16_000, "{tool}: {} bytes reached the client", r.to_string().len());
        assert!(r["_meta"]["io.stowage/transform"].get("outputSchema").is_none(), "{tool} needed no repair: {}", r["_meta"]);
    }
    gw.shutdown();
}

fn rows_of(result: &Value) -> &serde_json::Map<String, Value> {
    result["structuredContent"].as_object().unwrap_or_else(|| panic!("no structuredContent object: {result}"))
}

#[tokio::test]
async fn inspector_cli_accepts_fastmcp_lists_dicts_and_models_through_the_gateway() {
    let (Some(python), Some(inspector)) = (require(PYTHON), require(INSPECTOR)) else { return };
    let (gw, url) = gateway(&python).await;
    for tool in ["rows", "table", "report", "closed"] {
        let (inspector, url) = (inspector.clone(), url.clone());
        let out = tokio::task::spawn_blocking(move || {
            Command::new(inspector)
                .args(["--cli", &url, "--method", "tools/call", "--tool-name", tool, "--tool-arg", &format!("n={N}")])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // Exit 0: the result validated against the tool's outputSchema (1 on a mismatch, 5 on isError).
        assert!(out.status.success(), "{tool}: exit {:?}\n{stdout}\n{}", out.status.code(), String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{tool}: {e}: {stdout}"));
        assert!(v["structuredContent"].is_object(), "{tool}: {v}");
    }
    gw.shutdown();
}
