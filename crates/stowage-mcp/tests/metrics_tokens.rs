//! `stowage_tokens_saved_total{upstream,tool}` on `/metrics`: per call, the o200k tokens a
//! model would read of the result as the upstream sent it minus those it reads of the result
//! the client got, summed by upstream and tool. Checked against counts made here,
//! independently, with the same tokenizer: what a model reads is the text of `content` (a
//! `resource_link` as its JSON) and `structuredContent` as JSON, for a client that reads both.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Client, MemSink, RpcClient, fast_config, fixture_spec, shaper};
use serde_json::{Value, json};
use stowage_mcp::SessionMode;
use stowage_transform::tokens::{TokensConfig, count};

/// The value of `name{labels…}` in a Prometheus text page (labels in any order).
fn sample(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    page.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, ""));
        let all = labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        (n == name && all && rest.matches('=').count() == labels.len()).then(|| value.parse().ok())?
    })
}

/// o200k tokens of `text`, always exact.
fn o200k(text: &str) -> u64 {
    count(text, &TokensConfig { enabled: true, exact_max_bytes: usize::MAX }).0
}

/// The text a model reads of `result` (see the module docs).
fn read_by_model(result: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    for b in result["content"].as_array().into_iter().flatten() {
        match b["type"].as_str() {
            Some("text") => parts.push(b["text"].as_str().unwrap_or("").to_owned()),
            Some("resource_link") => parts.push(b.to_string()),
            _ => {}
        }
    }
    if let Some(sc) = result.get("structuredContent").filter(|s| !s.is_null()) {
        parts.push(sc.to_string());
    }
    parts.join("\n")
}

/// What the fixture itself answers to `tool`, as the text a model reads (the gateway's
/// "before").
async fn raw_result(tool: &str, args: Value) -> String {
    let mut child = tokio::process::Command::new(common::fixture_bin())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let rpc = RpcClient::connect(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None);
    rpc.initialize("2025-06-18", json!({})).await;
    let r = rpc.call(tool, args).await;
    read_by_model(&r["result"])
}

#[tokio::test]
async fn tokens_saved_is_o200k_before_minus_after_per_upstream_and_tool() {
    let gw = common::start_gateway(
        vec![fixture_spec("fx", None, Duration::from_secs(30)), fixture_spec("other", None, Duration::from_secs(30))],
        shaper(Arc::new(MemSink::default())),
        fast_config(),
        SessionMode::Shared,
    )
    .await;
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    let client = Client::connect(gw.clone(), None, json!({})).await;

    let pdf_args = json!({"bytes": 30_000});
    let mut expected_pdf = 0u64;
    for _ in 0..2 {
        let r = client.call("fx_get_view_pdf", pdf_args.clone()).await;
        let result = &r["result"];
        let meta = &result["_meta"]["io.stowage/transform"];
        let (tin, tout) = (meta["tokensIn"].as_u64().unwrap(), meta["tokensOut"].as_u64().unwrap());
        assert!(meta["artifacts"].as_u64().unwrap() >= 1, "the PDF was offloaded: {result}");
        // "After" is what a model reads of what the client got (`_meta` is for hosts).
        let after = o200k(&read_by_model(result));
        assert_eq!(tout, after, "tokensOut is the o200k count of what the model reads");
        assert!(tin > 10 * tout, "a 30 KB PDF in base64 is far more tokens than its stub: {tin} vs {tout}");
        expected_pdf += tin - tout;
    }
    let before = o200k(&raw_result("get_view_pdf", pdf_args).await);
    let r = client.call("fx_get_view_pdf", json!({"bytes": 30_000})).await;
    let tin = r["result"]["_meta"]["io.stowage/transform"]["tokensIn"].as_u64().unwrap();
    assert_eq!(tin, before, "tokensIn is the o200k count of what a model would read of the upstream's own result");
    expected_pdf += tin - r["result"]["_meta"]["io.stowage/transform"]["tokensOut"].as_u64().unwrap();

    // A small result passes as it is: nothing saved, and never a negative count.
    let echo = client.call("other_echo", json!({"message": "short and kept"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "short and kept");

    let page = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    let saved = |upstream: &str, tool: &str| sample(&page, "stowage_tokens_saved_total", &[("upstream", upstream), ("tool", tool)]);
    assert_eq!(saved("fx", "fx_get_view_pdf"), Some(expected_pdf as f64), "{page}");
    assert_eq!(saved("other", "other_echo"), Some(0.0), "{page}");
    assert_eq!(saved("other", "fx_get_view_pdf"), None, "counted by upstream: {page}");
    gw.shutdown();
}
