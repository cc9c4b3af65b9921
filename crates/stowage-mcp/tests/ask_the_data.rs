//! Asking the data instead of paging it, through the gateway as a client calls it (its stdio
//! downstream, the fixture upstream over stdio, a memory store): `artifact_collect` gathering a
//! 30-page listing into one artifact (and every way a listing can stop early), then
//! `artifact_query` with jq over it, over a log read as lines and over a CSV, `artifact_read`'s
//! grep count, `artifact_describe`, and the one-line errors of each bad input.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Client, fast_config, fixture_spec};
use serde_json::{Value, json};
use stowage_core::{ArtifactScope, PutOptions};
use stowage_store::ArtifactStore;

const T: Duration = Duration::from_secs(20);

/// A gateway whose pipeline and reader tools use one memory store, in front of the fixture.
async fn with_store() -> (Client, Arc<dyn ArtifactStore>) {
    let store: Arc<dyn ArtifactStore> = Arc::new(stowage_store::MemoryStore::new(stowage_store::RetentionConfig::default()));
    let rw = common::shaper(stowage_store::into_sink(store.clone()));
    let b = common::builder(vec![fixture_spec("fx", None, T)], rw, fast_config(), stowage_mcp::SessionMode::Shared);
    let gateway = common::started(b.store(store.clone())).await;
    (Client::connect(gateway, None, json!({})).await, store)
}

fn scope_of(user: &str) -> ArtifactScope {
    ArtifactScope { user_id: Some(user.into()), ..Default::default() }
}

/// Stores `body` as `user`'s artifact of type `mime`; its id.
async fn put(store: &Arc<dyn ArtifactStore>, user: &str, body: String, mime: &str) -> String {
    let r = store.put_bytes(bytes::Bytes::from(body), PutOptions::scoped(scope_of(user)).mime(mime)).await.unwrap();
    r.id.to_string()
}

/// The header line of a reader answer.
fn head(r: &Value) -> String {
    assert_ne!(r["result"]["isError"], true, "{r}");
    r["result"]["content"][0]["text"].as_str().unwrap().to_owned()
}

/// The page of a reader answer, as JSON (a string result is written as it is).
fn page(r: &Value) -> Value {
    assert_ne!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][1]["text"].as_str().unwrap_or_else(|| panic!("no page in {r}"));
    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
}

/// The one line of an `isError` answer.
fn error_line(r: &Value) -> String {
    assert_eq!(r["result"]["isError"], true, "{r}");
    let content = r["result"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "{r}");
    let text = content[0]["text"].as_str().unwrap().to_owned();
    assert!(!text.contains('\n'), "more than one line: {text}");
    text
}

fn collected_id(r: &Value) -> String {
    r["result"]["structuredContent"]["id"].as_str().unwrap_or_else(|| panic!("no id in {r}")).to_owned()
}

#[tokio::test]
async fn a_paginated_listing_is_one_collect_and_one_query() {
    let (c, store) = with_store().await;
    let tools = c.request("tools/list", json!({})).await;
    let def = tools["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "artifact_collect").expect("listed").clone();
    assert_eq!(def["inputSchema"]["required"], json!(["tool"]), "{def}");

    // 30 pages behind `cursor`, inferred from `next_cursor` and the tool's input schema.
    let r = c.call("artifact_collect", json!({"tool": "list_tickets", "arguments": {"status": "any"}})).await;
    let h = head(&r);
    assert!(h.starts_with("[collected 600 items from list_tickets in 30 pages, complete: stored as artifact://list_tickets_"), "{h}");
    assert!(h.contains("of objects with keys id, subject, status, priority"), "{h}");
    assert!(h.len() < 1_000, "a short answer: {h}");
    let s = &r["result"]["structuredContent"];
    assert_eq!((s["pages"].as_u64(), s["items"].as_u64(), s["complete"].as_bool()), (Some(30), Some(600), Some(true)), "{s}");
    let id = collected_id(&r);
    // Stored as the caller's: every ticket once, in order.
    let bytes = store.get(&stowage_store::Access::owner_of(&scope_of("local")), &stowage_core::ArtifactId::parse_loose(&id).unwrap()).await;
    let all: Vec<Value> = serde_json::from_slice(&bytes.expect("the caller's artifact")).unwrap();
    let ids: Vec<String> = all.iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids, (0..600).map(|i| format!("T-{i}")).collect::<Vec<_>>());

    // One record out of the listing: one more call.
    let r = c.call("artifact_query", json!({"id": id, "jq": ".[] | select(.subject | test(\"refund\")) | .id"})).await;
    assert_eq!(page(&r), json!("T-377"), "{r}");
    let r = c.call("artifact_query", json!({"id": id, "jq": "group_by(.status) | map({status: .[0].status, n: length})"})).await;
    assert_eq!(page(&r), json!([{"status": "closed", "n": 200}, {"status": "open", "n": 400}]), "{r}");
    let r = c.call("artifact_describe", json!({"id": id})).await;
    let shape = r["result"]["content"][1]["text"].as_str().unwrap_or_default();
    assert!(
        shape.contains(".: array ×1; length 600") && shape.contains(".[].status: string ×600; values \"open\" 400, \"closed\" 200"),
        "{r}"
    );
}

#[tokio::test]
async fn a_listing_that_cannot_be_collected_whole_stops_and_says_why() {
    let (c, _store) = with_store().await;
    let collect = |args: Value| c.call("artifact_collect", args);

    // Stopped early: incomplete, the pages before kept, and the cursor to go on from.
    for (arguments, max, pages, says, resume) in [
        (json!({"loop_at": 2}), json!(null), 3, "the cursor \"page-1\" came back again (the listing loops)", None),
        (json!({}), json!(5), 5, "stopped at max_pages=5 with more to fetch", Some("page-5")),
        (json!({"fail_at": 3}), json!(null), 3, "page 4 failed: the ticket database timed out on page 3", Some("page-3")),
        (
            json!({"stuck": true}),
            json!(null),
            1,
            "page 2 handed back the cursor it was given (\"page-1\"), so list_tickets ignores \"cursor\"",
            None,
        ),
    ] {
        let r = collect(json!({"tool": "list_tickets", "arguments": arguments, "max_pages": max})).await;
        let h = head(&r);
        let s = &r["result"]["structuredContent"];
        assert!(h.contains(&format!("items from list_tickets in {pages} pages, incomplete")) && h.contains(says), "{arguments}: {h}");
        assert_eq!(
            (s["pages"].as_u64(), s["items"].as_u64(), s["complete"].as_bool()),
            (Some(pages), Some(pages * 20), Some(false)),
            "{s}"
        );
        assert_eq!(s["resume"]["cursor"].as_str(), resume, "{s}");
        match resume {
            Some(cursor) => assert!(h.contains(&format!("collect again with arguments.cursor = \"{cursor}\"")), "{h}"),
            None => assert!(!h.contains("collect again"), "{h}"),
        }
    }
    // The time cap: no page starts after max_seconds.
    let r = collect(json!({"tool": "list_tickets", "arguments": {"delay_ms": 400}, "max_seconds": 1})).await;
    let h = head(&r);
    assert!(h.contains("incomplete") && h.contains("stopped after 1 s (max_seconds) with more to fetch"), "{h}");
    assert!(r["result"]["structuredContent"]["pages"].as_u64().unwrap() < 30, "{r}");

    // Nothing to collect: one isError line each, saying what to do.
    for (args, says) in [
        (
            json!({"tool": "list_tickets", "arguments": {"fail_at": 0}}),
            "artifact_collect: list_tickets failed on the first page: the ticket database timed out on page 0",
        ),
        (json!({"tool": "echo", "arguments": {"message": "{\"rows\": [1, 2]}"}}), "artifact_collect: echo is not a paginated listing"),
        (json!({"tool": "echo", "arguments": {"message": "plain words"}}), "artifact_collect: echo's result is not JSON"),
        (
            json!({"tool": "list_tickets", "cursor": {"from": "next_cursor", "to": "page"}}),
            "artifact_collect: list_tickets takes no argument \"page\" for the cursor",
        ),
        (
            json!({"tool": "list_tickets", "items": "/orders"}),
            "artifact_collect: list_tickets's result has no array at \"items\": \"/orders\"",
        ),
        (json!({"tool": "no_such_tool"}), "artifact_collect: there is no tool \"no_such_tool\""),
        (json!({"tool": "artifact_read"}), "artifact_read is the gateway's own"),
        (json!({}), "artifact_collect needs \"tool\""),
        (json!({"tool": "list_tickets", "arguments": "status=open"}), "\"arguments\" must be an object"),
        (json!({"tool": "list_tickets", "max_pages": 0}), "\"max_pages\" must be 1 to 1000, not 0"),
        (json!({"tool": "list_tickets", "max_seconds": 100_000}), "\"max_seconds\" must be 1 to 600"),
        (json!({"tool": "list_tickets", "cursor": {"from": "next_cursor"}}), "\"cursor\" must be {\"from\""),
    ] {
        let r = collect(args.clone()).await;
        let line = error_line(&r);
        assert!(line.contains(says), "{args}: {line}");
    }
}

#[tokio::test]
async fn jq_counts_filters_and_describes_and_refuses_bad_input_in_one_line() {
    let (c, store) = with_store().await;

    // A log: ERROR lines counted per code, as lines through jq, and by grep's count.
    let log: String = (0..5_000)
        .map(|i| match i % 10 {
            0 | 3 => format!("2026-11-29T10:{:02}:00Z ERROR code=E{} request {i} failed\n", i % 60, 40 + i % 3),
            _ => format!("2026-11-29T10:{:02}:00Z INFO request {i} ok\n", i % 60),
        })
        .collect();
    let expected = {
        let mut m = std::collections::BTreeMap::new();
        for l in log.lines().filter(|l| l.contains(" ERROR ")) {
            *m.entry(l.split("code=").nth(1).unwrap().split(' ').next().unwrap().to_owned()).or_insert(0u64) += 1;
        }
        m
    };
    let log_id = put(&store, "local", log, "text/plain").await;
    let program =
        "map(select(test(\" ERROR \")) | capture(\"code=(?<c>\\\\S+)\").c) | group_by(.) | map({key: .[0], value: length}) | from_entries";
    let r = c.call("artifact_query", json!({"id": log_id, "as": "lines", "jq": program})).await;
    assert_eq!(page(&r), serde_json::to_value(&expected).unwrap(), "{r}");
    let r = c.call("artifact_read", json!({"id": log_id, "grep": " ERROR ", "count": true})).await;
    assert!(r.to_string().contains("1000"), "a count, not the lines: {r}");
    assert!(r.to_string().len() < 2_000, "{r}");

    // A CSV: a filtered count and the top row in one call.
    let csv: String = std::iter::once("id,region,amount\n".to_owned())
        .chain((0..30_000).map(|i| format!("{i},{},{}\n", ["north", "south", "east"][i % 3], (i * 37) % 1000)))
        .collect();
    let csv_id = put(&store, "local", csv, "text/csv").await;
    let r = c
        .call(
            "artifact_query",
            json!({"id": csv_id, "jq": "map(select(.region == \"north\" and .amount > 900)) | {n: length, top: max_by(.amount)}"}),
        )
        .await;
    let v = page(&r);
    let north: Vec<usize> = (0..30_000).filter(|i| i % 3 == 0 && (i * 37) % 1000 > 900).collect();
    assert_eq!(v["n"], json!(north.len()), "{r}");
    assert_eq!(v["top"]["amount"], json!(999), "{r}");

    // A big selection is cut with its true total; the offset continues exactly there.
    let r = c.call("artifact_query", json!({"id": csv_id, "jq": "map(.id)"})).await;
    let s = &r["result"]["structuredContent"];
    assert_eq!(s["total"], 30_000, "{s}");
    let first = page(&r);
    let next = s["nextOffset"].as_u64().expect("cut");
    assert_eq!(first.as_array().unwrap().len() as u64, next);
    let r = c.call("artifact_query", json!({"id": csv_id, "jq": "map(.id)", "offset": next})).await;
    assert_eq!(page(&r)[0], json!(next), "{r}");

    // Several artifacts, seen as one array.
    let a = put(&store, "local", json!({"n": 1}).to_string(), "application/json").await;
    let b = put(&store, "local", json!({"n": 2}).to_string(), "application/json").await;
    let r = c.call("artifact_query", json!({"ids": [a, b], "jq": "map(.n) | add"})).await;
    assert_eq!(page(&r), json!(3), "{r}");

    // A nested document's shape.
    let doc = json!({"warehouses": (0..40).map(|w| json!({"name": format!("w{w}"), "bins": (0..50).map(|b| json!({"sku": format!("S{b}"), "qty": b})).collect::<Vec<_>>()})).collect::<Vec<_>>(), "notes": "x".repeat(4_500)});
    let doc_id = put(&store, "local", doc.to_string(), "application/json").await;
    let r = c.call("artifact_describe", json!({"id": doc_id})).await;
    let text = r["result"]["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect::<String>();
    assert!(text.contains(".warehouses[].bins[].qty") && text.contains("2000"), "{text}");
    assert!(text.len() < 4_000, "{text}");

    // Bad input: one isError line naming the fault.
    let theirs = put(&store, "bob", json!([1]).to_string(), "application/json").await;
    let not_csv = put(&store, "local", "a,b\n1,2\n3,4,5\n".to_owned(), "text/plain").await;
    for (args, says) in [
        (json!({"id": a, "jq": ".n |"}), "artifact_query: jq program does not parse at character"),
        (json!({"id": a, "jq": "map(.x"}), "does not parse"),
        (json!({"id": a, "jq": "nosuchfn(1)"}), "undefined"),
        (json!({"id": a, "jq": ".n | ascii_downcase"}), "artifact_query: the jq program failed:"),
        (json!({"id": a, "jmespath": "[?"}), "does not parse"),
        (json!({"id": log_id, "jq": "length"}), "is not JSON"),
        (json!({"id": not_csv, "as": "csv", "jq": "length"}), "is not CSV at line 3: a record has 3 fields where the header has 2"),
        (json!({"id": a, "as": "xml", "jq": "."}), "\"as\""),
        (json!({"id": a, "jq": ".", "pointer": ""}), "takes one of \"jq\", \"jmespath\" and \"pointer\""),
    ] {
        let r = c.call("artifact_query", args.clone()).await;
        let line = error_line(&r);
        assert!(line.contains(says), "{args}: {line}");
    }
    // Another owner's id, and one that never existed: the same answer, here and in ids.
    for tool in ["artifact_query", "artifact_describe"] {
        let mut args = json!({"jq": "."});
        if tool == "artifact_describe" {
            args = json!({});
        }
        args["id"] = json!(theirs);
        let r1 = c.call(tool, args.clone()).await;
        args["id"] = json!("echo_0000000000000000");
        let r2 = c.call(tool, args).await;
        assert!(error_line(&r1).contains("not found"), "{r1}");
        assert_eq!(r1["result"], r2["result"], "{tool}: another owner's artifact must look missing");
    }
    let r1 = c.call("artifact_query", json!({"ids": [a, theirs], "jq": "length"})).await;
    let r2 = c.call("artifact_query", json!({"ids": [a, "echo_0000000000000000"], "jq": "length"})).await;
    assert!(error_line(&r1).contains("not found"), "{r1}");
    assert_eq!(r1["result"], r2["result"]);

    // A program that builds too much stops at the documented output limit and says so.
    let r = c.call("artifact_query", json!({"id": a, "jq": "range(1e9)"})).await;
    let h = head(&r);
    assert!(h.contains("stopped after 1000000 results"), "{h}");
}
