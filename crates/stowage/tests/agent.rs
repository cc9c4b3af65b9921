//! `stowage agent` and `POST /agent/runs` through the real binary: the stdio fixture as the
//! upstream (an mcpServers file), the testkit's model stub as the model over HTTP. A missing
//! or unreachable model is a one-line error at start; the route sits behind /mcp's auth and
//! streams the run's events (docs/agent.md) ending in the payload.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stowage_testkit::model_stub::{ModelStub, Turn};

/// A private copy of the fixture binary with this checkout's tools (the target directory may
/// be shared with other checkouts that rebuild it).
fn fixture(dir: &std::path::Path) -> String {
    let copy = dir.join("stowage-fixture");
    for attempt in 0..3 {
        if attempt > 0 {
            let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["build", "-p", "stowage-testkit", "--bins"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .unwrap();
            assert!(status.success());
        }
        std::fs::copy(stowage_testkit::fixture_bin(), &copy).unwrap();
        if std::fs::read(&copy).unwrap().windows(13).any(|w| w == b"merge_results") {
            return copy.display().to_string();
        }
    }
    panic!("the fixture binary has no merge_results tool");
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(extra_config: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let servers = json!({"mcpServers": {"fx": {"command": fixture(dir.path()), "args": []}}});
        std::fs::write(dir.path().join("mcp.json"), servers.to_string()).unwrap();
        std::fs::write(dir.path().join("stowage.toml"), extra_config).unwrap();
        Setup { dir }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let d = self.dir.path();
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_stowage"));
        c.current_dir(d)
            .args(["--config", d.join("stowage.toml").to_str().unwrap(), "--store", d.join("store").to_str().unwrap()])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    fn mcp(&self) -> String {
        self.dir.path().join("mcp.json").display().to_string()
    }
}

fn agent_config(stub: &ModelStub) -> String {
    format!("[agent]\nbase_url = \"{}\"\nmodel = \"stub-model\"\nrequest_timeout = \"5s\"\n", stub.base_url())
}

#[tokio::test]
async fn the_agent_command_fails_at_start_in_one_line_without_a_reachable_model() {
    let s = Setup::new("");
    let out = s.command(&["agent", "hello"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error: no model is configured: set agent.base_url and agent.model"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let s = Setup::new(&format!("[agent]\nbase_url = \"http://{free}/v1\"\nmodel = \"m\"\n"));
    let out = s.command(&["agent", "hello"]).output().await.unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(err.starts_with(&format!("error: model at http://{free}/v1/models is unreachable")), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // check-config checks the agent as serve does: serve starts (below), so it is a warning,
    // as a down upstream is; --strict makes it fail.
    let out = s.command(&["check-config", "--mcp-config", &s.mcp()]).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("agent: warning: model at") && stdout.contains("unreachable"), "{stdout}");
    assert!(stdout.contains("serve starts, with /agent/runs answering 503"), "{stdout}");
    let out = s.command(&["check-config", "--strict", "--mcp-config", &s.mcp()]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: the agent's model is not available: model at") && err.contains("(--strict)"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // serve starts all the same: a model that is down fails the agent's routes, not /mcp.
    let srv = serve(&s).await;
    let r = post_run(&srv.base, None, json!({"query": "hi"})).await;
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_unreachable", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("unreachable"), "{body}");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = reqwest::Client::new()
        .post(format!("{}/mcp", srv.base))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "/mcp is served while the model is down");
}

#[tokio::test]
async fn the_agent_command_answers_with_progress_on_stderr_and_the_payload_with_json() {
    let stub = ModelStub::start(vec![
        Turn::tool("analyze_sales", json!({"quarter": "Q4", "year": 2024})),
        Turn::Text(json!({"raw_answer": "Q4 revenue was $1.23M.", "confidence": 0.9}).to_string()),
        Turn::Text(json!({"raw_answer": "Plain answer."}).to_string()),
    ])
    .await;
    let s = Setup::new(&agent_config(&stub));
    let out = s.command(&["agent", "How did Q4 go?", "--mcp-config", &s.mcp(), "--json"]).output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("→ analyze_sales") && err.contains("✓ analyze_sales"), "{err}");
    let payload: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(payload["raw_answer"], "Q4 revenue was $1.23M.");
    assert_eq!(payload["artifacts"]["analyze_sales"]["raw_data"].as_array().unwrap().len(), 847);
    // Without --json: the answer text alone on stdout.
    let out = s.command(&["agent", "Again", "--mcp-config", &s.mcp()]).output().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Plain answer.\n");
}

struct Serve {
    _child: tokio::process::Child,
    base: String,
}

impl Serve {
    /// The pids of the fixture processes it runs (its direct children), sorted.
    fn fixtures(&self) -> Vec<u32> {
        let me = self._child.id().unwrap();
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let mut rest = stat.rsplit_once(") ").map(|(_, r)| r.split_whitespace()).into_iter().flatten();
            let (state, ppid) = (rest.next(), rest.next().and_then(|p| p.parse::<u32>().ok()));
            let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if ppid == Some(me) && state != Some("Z") && cmdline.contains("stowage-fixture") {
                out.push(pid);
            }
        }
        out.sort_unstable();
        out
    }
}

async fn serve(s: &Setup) -> Serve {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = s
        .command(&["serve", "--listen", &format!("127.0.0.1:{port}"), "--mcp-config", &s.mcp()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Ready, not just alive: the fixture has listed its tools.
        if reqwest::get(format!("{base}/readyz")).await.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "stowage serve did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Serve { _child: child, base }
}

fn hash(key: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stowage")).args(["hash-key", key]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The SSE body as (event, data) pairs.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap().to_owned();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name, serde_json::from_str(data).unwrap())
        })
        .collect()
}

async fn post_run(base: &str, key: Option<&str>, body: Value) -> reqwest::Response {
    let mut req =
        reqwest::Client::new().post(format!("{base}/agent/runs")).header("content-type", "application/json").body(body.to_string());
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    req.send().await.unwrap()
}

/// The agent configuration with two API keys, alice's and bob's.
fn with_alice_and_bob(stub: &ModelStub) -> String {
    format!(
        "{}[auth]\napi_keys = [\n  {{ id = \"alice\", sha256 = \"{}\" }},\n  {{ id = \"bob\", sha256 = \"{}\" }},\n]\n",
        agent_config(stub),
        hash("alice-secret-key-0123456789"),
        hash("bob-secret-key-0123456789")
    )
}

#[tokio::test]
async fn post_agent_runs_streams_the_events_behind_the_same_auth_as_mcp() {
    let stub = ModelStub::start(vec![]).await;
    stub.push_keyed(
        "alice asks",
        [
            Turn::Tools { thought: "Checking.".into(), calls: vec![("analyze_sales".into(), json!({"quarter": "Q4"}))] },
            Turn::Text(json!({"raw_answer": "Which region?", "requires_followup": true}).to_string()),
            Turn::Text(json!({"raw_answer": "EMEA grew most."}).to_string()),
        ],
    );
    let s = Setup::new(&with_alice_and_bob(&stub));
    let srv = serve(&s).await;
    let alice = Some("alice-secret-key-0123456789");
    assert_eq!(post_run(&srv.base, None, json!({"query": "alice asks"})).await.status(), 401);
    assert_eq!(post_run(&srv.base, Some("wrong-key-0123456789012345"), json!({"query": "alice asks"})).await.status(), 401);
    // A web page cannot start runs: a foreign origin, or a body that is not JSON, is refused.
    let foreign = reqwest::Client::new()
        .post(format!("{}/agent/runs", srv.base))
        .bearer_auth("alice-secret-key-0123456789")
        .header("content-type", "application/json")
        .header("origin", "http://evil.example")
        .body(json!({"query": "alice asks"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    let plain = reqwest::Client::new()
        .post(format!("{}/agent/runs", srv.base))
        .bearer_auth("alice-secret-key-0123456789")
        .header("content-type", "text/plain")
        .body(json!({"query": "alice asks"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 415);
    let bad = post_run(&srv.base, alice, json!({"question": "typo"})).await;
    assert_eq!(bad.status(), 400);
    let bad = bad.text().await.unwrap();
    assert!(bad.contains("bad_request") && bad.contains("unknown field `question`"), "{bad}");

    let resp = post_run(&srv.base, alice, json!({"query": "alice asks about sales"})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let session = resp.headers()["stowage-agent-session"].to_str().unwrap().to_owned();
    let evs = events(&resp.text().await.unwrap());
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    let first_step = names.iter().position(|n| *n == "step").unwrap();
    assert!(names[..first_step].iter().all(|n| *n == "chunk"), "{names:?}");
    assert_eq!(evs[first_step].1["node"], "analyze_sales");
    assert_eq!(evs[first_step].1["status"], "started");
    assert!(names.contains(&"artifact_chunk"), "{names:?}");
    let (last, payload) = evs.last().unwrap();
    assert_eq!(last, "done");
    assert_eq!(payload["raw_answer"], "Which region?");
    assert_eq!(payload["requires_followup"], true);
    assert_eq!(payload["artifacts"]["analyze_sales"]["raw_data"].as_array().unwrap().len(), 847);

    // Bob cannot continue alice's session; alice can.
    let r = post_run(&srv.base, Some("bob-secret-key-0123456789"), json!({"query": "alice asks: EMEA", "session": session})).await;
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("unknown_session"));
    let r = post_run(&srv.base, alice, json!({"query": "alice asks: EMEA", "session": session})).await;
    assert_eq!(r.headers()["stowage-agent-session"].to_str().unwrap(), session);
    let evs = events(&r.text().await.unwrap());
    assert_eq!(evs.last().unwrap().1["raw_answer"], "EMEA grew most.");
    let last_request = stub.requests().last().unwrap().body.clone();
    assert!(last_request.contains("alice asks about sales") && last_request.contains("Which region?"));
}

#[tokio::test]
async fn a_model_failure_is_an_error_event_and_an_unconfigured_agent_answers_503() {
    let stub = ModelStub::start(vec![Turn::Status(500, "upstream overloaded".into())]).await;
    // No retries: the first 500 is the answer the user gets.
    let s = Setup::new(&format!("{}max_retries = 0\n", agent_config(&stub)));
    let srv = serve(&s).await;
    let evs = events(&post_run(&srv.base, None, json!({"query": "hi"})).await.text().await.unwrap());
    let (name, data) = evs.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["code"], "model_http_error");
    assert!(data["trace_id"].as_str().unwrap().starts_with("run-"));
    assert!(data["error"].as_str().unwrap().contains("upstream overloaded"));

    let s = Setup::new("");
    let srv = serve(&s).await;
    let r = post_run(&srv.base, None, json!({"query": "hi"})).await;
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap().contains("set [agent] base_url and model"));
}

/// `agent` and `serve` build their shaper from the same config, so a server's own transform
/// table applies to both: here `[gateway.servers.fx.transform] max_inline_chars = 400` makes
/// a 1.7 KB echo an artifact. The planner's model and an MCP client get the same artifact (one
/// store, content-addressed), the same head of the text and neither gets its middle; a short
/// echo stays inline for both.
#[tokio::test]
async fn agent_and_serve_shape_a_result_the_same_way_under_a_servers_own_transform_table() {
    let long = (0..60).map(|i| format!("line {i} of the echoed report")).collect::<Vec<_>>().join("\n");
    let stub = ModelStub::start(vec![
        Turn::tool("echo", json!({"message": long})),
        Turn::Text(json!({"raw_answer": "Echoed."}).to_string()),
        Turn::tool("echo", json!({"message": "short"})),
        Turn::Text(json!({"raw_answer": "Echoed again."}).to_string()),
    ])
    .await;
    let s = Setup::new("");
    let config = format!(
        "{}[gateway.servers.fx]\ncommand = {:?}\n\n[gateway.servers.fx.transform]\nmax_inline_chars = 400\n",
        agent_config(&stub),
        fixture(s.dir.path())
    );
    std::fs::write(s.dir.path().join("stowage.toml"), config).unwrap();

    // What the planner's model read: the tool message after each call.
    let tool_message = |i: usize| -> String {
        let reqs = stub.requests();
        let body = reqs[i].json();
        let msgs = body["messages"].as_array().unwrap();
        let m = msgs.iter().rev().find(|m| m["role"] == "tool").unwrap_or_else(|| panic!("no tool message in {body}"));
        m["content"].as_str().map(str::to_owned).unwrap_or_else(|| m["content"].to_string())
    };
    for question in ["Echo the report", "Echo short"] {
        let out = s.command(&["agent", question, "--json"]).output().await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let agent_long = tool_message(1);
    let agent_short = tool_message(3);

    // What an MCP client of `stowage serve` got for the same calls.
    let mut child = s.command(&["serve", "--stdio"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let rpc = stowage_testkit::client::RpcClient::connect(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None);
    rpc.initialize("2025-06-18", json!({})).await;
    let served = rpc.call("echo", json!({"message": long})).await;
    let served_text = served["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{served}")).to_owned();
    let short = rpc.call("echo", json!({"message": "short"})).await;
    let _ = child.kill().await;

    let artifact = |t: &str| {
        let start = t.find("artifact://echo").unwrap_or_else(|| panic!("no artifact in {t}"));
        t[start..].split(|c: char| c.is_whitespace() || c == ')' || c == '"' || c == ']').next().unwrap().to_owned()
    };
    assert_eq!(artifact(&agent_long), artifact(&served_text), "one artifact for both:\nagent: {agent_long}\nserve: {served_text}");
    for seen in [&agent_long, &served_text] {
        assert!(seen.contains("line 0 of the echoed report"), "the head is kept: {seen}");
        assert!(!seen.contains("line 30 of the echoed report"), "the middle is not inline: {seen}");
    }
    assert!(agent_short.contains("short") && !agent_short.contains("artifact://"), "{agent_short}");
    assert_eq!(short["result"]["content"][0]["text"], "short", "{short}");
}

/// The parallel-plan example of docs/agent.md: both halves of the year at once, merged by a join that
/// `inject` hands their results to.
fn half_year_plan() -> Value {
    json!({
        "plan": [
            {"node": "analyze_sales", "args": {"quarter": "Q3", "year": 2024}},
            {"node": "analyze_sales", "args": {"quarter": "Q4", "year": 2024}}
        ],
        "join": {"node": "merge_results", "args": {"label": "H2 2024"},
                 "inject": {"branch_outputs": "$results", "total_requests": "$expect"}}
    })
}

fn answer(text: &str) -> Turn {
    Turn::Text(json!({"raw_answer": text}).to_string())
}

#[tokio::test]
async fn the_parallel_plan_example_runs_through_the_cli_and_http_in_both_wire_formats() {
    for backend in ["openai", "anthropic"] {
        let stub = ModelStub::start(vec![Turn::tool("parallel_plan", half_year_plan()), answer("H2 2024: 1,694 rows merged.")]).await;
        let s = Setup::new(&format!("{}backend = \"{backend}\"\n", agent_config(&stub)));
        let out = s.command(&["agent", "How did H2 2024 go?", "--mcp-config", &s.mcp(), "--json"]).output().await.unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{backend}: {err}");
        assert!(err.contains("→ merge_results") && err.contains("✓ merge_results"), "{err}");
        let payload: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(payload["raw_answer"], "H2 2024: 1,694 rows merged.");
        assert_eq!(payload["artifacts"]["analyze_sales"]["chart_options#2"]["title"]["text"], "Q4 2024 sales", "{backend}");
        assert_eq!(payload["artifacts"]["analyze_sales"]["raw_data"].as_array().map(Vec::len), Some(847), "{backend}");
        assert_eq!(payload["run"]["tool_calls"], 3);
        let after = stub.requests()[1].body.clone();
        assert!(after.contains("H2 2024: 2 branches of 2 expected, 0 failed; 1694 rows"), "{backend}: {after}");
        assert!(stub.violations().is_empty(), "{backend}: {:?}", stub.violations());

        // The same over HTTP.
        let stub = ModelStub::start(vec![]).await;
        stub.push_keyed("second half", [Turn::tool("parallel_plan", half_year_plan()), answer("H2 2024: 1,694 rows merged.")]);
        let s = Setup::new(&format!("{}backend = \"{backend}\"\n", agent_config(&stub)));
        let srv = serve(&s).await;
        let evs = events(&post_run(&srv.base, None, json!({"query": "How did the second half of 2024 go?"})).await.text().await.unwrap());
        let steps: Vec<String> = evs
            .iter()
            .filter(|(n, _)| n == "step")
            .map(|(_, d)| format!("{}:{}", d["node"].as_str().unwrap(), d["status"].as_str().unwrap()))
            .collect();
        assert_eq!(
            steps,
            [
                "analyze_sales:started",
                "analyze_sales:started",
                "analyze_sales:ok",
                "analyze_sales:ok",
                "merge_results:started",
                "merge_results:ok"
            ],
            "{backend}"
        );
        let (last, payload) = evs.last().unwrap();
        assert_eq!(last, "done");
        assert_eq!(payload["raw_answer"], "H2 2024: 1,694 rows merged.");
        assert_eq!(payload["artifacts"]["analyze_sales"]["chart_options#2"]["title"]["text"], "Q4 2024 sales");
        assert!(stub.violations().is_empty(), "{backend}: {:?}", stub.violations());
    }
}

#[tokio::test]
async fn the_agent_command_exits_3_on_a_partial_payload_and_fails_in_one_line_without_a_servers_tools() {
    // A partial payload: printed, then exit status 3 with the line that says why.
    let stub = ModelStub::start(vec![
        Turn::tool("echo", json!({"message": "the total is 1234"})),
        Turn::tool("echo", json!({"message": "again"})),
        Turn::tool("echo", json!({"message": "once more"})),
        Turn::tool("echo", json!({"message": "and again"})),
    ])
    .await;
    let s = Setup::new(&format!("{}max_steps = 1\n", agent_config(&stub)));
    let out = s.command(&["agent", "Total?", "--mcp-config", &s.mcp()]).output().await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stdout.contains("The last result, from echo (call c1), was: the total is 1234"), "{stdout}");
    assert_eq!(stderr.trim_end().lines().last(), Some("error: the answer is partial (max_steps): max_steps_reached"), "{stderr}");
    let out = s.command(&["agent", "Total?", "--mcp-config", &s.mcp(), "--json"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(3));
    let payload: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(payload["route"], "partial");

    // A configured server that cannot start: its tools would be missing, so no question is asked.
    let stub = ModelStub::start(vec![answer("never")]).await;
    let s = Setup::new(&agent_config(&stub));
    let servers = json!({"mcpServers": {"fx": {"command": fixture(s.dir.path())}, "gone": {"command": "/nonexistent/mcp-server"}}});
    std::fs::write(s.dir.path().join("mcp.json"), servers.to_string()).unwrap();
    let out = s.command(&["agent", "Hello", "--mcp-config", &s.mcp()]).output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: MCP server gone is not available, so its tools are missing: "), "{err}");
    assert!(err.contains("fix its entry (command, URL) or remove it from the configuration"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(stub.requests().is_empty(), "the model was not asked");
}

#[tokio::test]
async fn the_agent_command_waits_for_a_server_that_is_still_starting() {
    // A server that takes longer to start than the old fixed wait of 10 s.
    let stub = ModelStub::start(vec![Turn::tool("echo", json!({"message": "late but here"})), answer("It answered.")]).await;
    let s = Setup::new(&agent_config(&stub));
    let fx = fixture(s.dir.path());
    let servers = json!({"mcpServers": {"fx": {"command": "/bin/sh", "args": ["-c", format!("sleep 11; exec {fx}")]}}});
    std::fs::write(s.dir.path().join("mcp.json"), servers.to_string()).unwrap();
    let out = s.command(&["agent", "Echo", "--mcp-config", &s.mcp()]).output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("waiting for fx to start"), "{err}");
    assert!(err.contains("✓ echo"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "It answered.\n");
    let offered = stub.requests()[0].body.clone();
    assert!(offered.contains("\"echo\""), "the slow server's tools were offered");
}

/// The planner over HTTP keeps its upstream session across runs of the same owner: a new
/// question (a new conversation, no `session`) from the same API key runs its tool in the
/// same upstream process as the last one, and starts no process; another owner's question
/// runs in another. (Each question once started fresh processes, left alive for minutes, and
/// waited seconds for them before its first event.) The fixture's `pid` tool says which
/// process answered; it is not marked read-only, so it runs in the planner's own session.
#[tokio::test]
async fn the_same_owners_next_question_runs_in_the_planners_upstream_session_of_the_last() {
    let stub = ModelStub::start(vec![]).await;
    for q in ["alice first", "alice second", "bob first"] {
        stub.push_keyed(
            q,
            [
                Turn::Tools { thought: "Which process?".into(), calls: vec![("pid".into(), json!({}))] },
                Turn::Text(json!({"raw_answer": "ok"}).to_string()),
            ],
        );
    }
    let s = Setup::new(&with_alice_and_bob(&stub));
    let srv = serve(&s).await;
    let (alice, bob) = (Some("alice-secret-key-0123456789"), Some("bob-secret-key-0123456789"));
    // The pid the run's `pid` call answered with: the tool result the model was shown.
    let run = |key, query: &'static str| {
        let base = srv.base.clone();
        let stub = &stub;
        async move {
            let resp = post_run(&base, key, json!({"query": query})).await;
            assert_eq!(resp.status(), 200, "{query}");
            let evs = events(&resp.text().await.unwrap());
            assert_eq!(evs.last().unwrap().0, "done", "{query}: {evs:?}");
            let body: Value = serde_json::from_str(&stub.requests().last().unwrap().body).unwrap();
            let shown =
                body["messages"].as_array().and_then(|m| m.iter().rev().find(|m| m["role"] == "tool")).map(|m| m["content"].to_string());
            let pid: String =
                shown.unwrap_or_default().chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
            pid.parse::<u32>().unwrap_or_else(|_| panic!("{query}: no pid in the tool result the model saw: {body}"))
        }
    };
    let first = run(alice, "alice first").await;
    // Once the spare started behind the one alice's session took is up, nothing changes for a
    // second.
    let (deadline, mut settled, mut since) = (Instant::now() + Duration::from_secs(10), srv.fixtures(), Instant::now());
    while since.elapsed() < Duration::from_secs(1) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = srv.fixtures();
        if now != settled {
            (settled, since) = (now, Instant::now());
        }
    }
    assert!(settled.contains(&first), "{first} is not a child: {settled:?}");
    let second = run(alice, "alice second").await;
    assert_eq!(second, first, "alice's second question ran in another upstream process");
    assert_eq!(srv.fixtures(), settled, "alice's second question started a process");
    let bobs = run(bob, "bob first").await;
    assert_ne!(bobs, first, "bob's question ran in alice's upstream session");
}
