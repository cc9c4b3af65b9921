//! `stowage serve` under load, measured from outside the process as a deployment sees it:
//! its resident memory (`/proc/<pid>/status`), latencies and errors as clients see them.
//!
//! - `rate [RPS] [SECS] [everything|fixture]`: small `echo` calls over Streamable HTTP (SSE
//!   answers, kept-alive connections, 8 clients) paced at RPS (default 2000) for SECS (default
//!   60). With `everything` (the default), first straight to server-everything over HTTP for a
//!   third of the time, then through the gateway in front of it; with `fixture`, through the
//!   gateway in front of `stowage-fixture` on stdio (no Node process competing for the two
//!   cores; no direct figure). The rate each reached, p50/p99 per call, and the gateway's RSS
//!   every 5 s (target: at most 150 MB, flat after the first window).
//! - `sessions [N]`: N sessions (default 1000) opened and left idle: the gateway's RSS before
//!   and after, and per session (target: under 64 KB).
//! - `soak [SECS]`: SECS (default 600; 30 is the short form) against two upstreams,
//!   server-everything over HTTP (`everything`) and `stowage-fixture` on stdio (`fx`): small
//!   calls from 64 clients on kept-alive connections (one every 100 ms each, to
//!   `everything_echo`) beside 8 clients making the same calls straight to server-everything;
//!   50 MB results from 4 clients (`fx_get_view_pdf`, each downloaded through its link and
//!   hashed); uploads from 2 clients (3 MB, by chunks and by link, alternately); one session
//!   opened and abandoned every second; `fx` killed every minute (the gateway restarts it).
//!   Per window: calls, errors by kind, p50/p99 of the small calls through the gateway and
//!   direct, RSS. At the end every artifact made is downloaded again with a fresh link and
//!   hashed: every one must be there and match (the run's retention budgets hold all it
//!   stores, so a missing one is lost, not evicted).
//! - `agent [N] [TOOL]`: questions to `POST /agent/runs` one after another, with
//!   server-everything on stdio as the only upstream (`per_client`, the default over HTTP)
//!   and the testkit's model stub as the model (OpenAI wire format, streamed): for each
//!   question it calls TOOL (default `echo`, which server-everything marks read-only;
//!   `toggle-simulated-logging` is one it does not) and answers once it has read the result.
//!   One question first (the owner's first, which starts what the planner keeps for it), then
//!   N (default 20) more, each as soon as the last one is done: per question, the time from
//!   sending the request to the stream's first event (its first `event:` line; target for the
//!   second and later questions: at most 200 ms), to the model's first request, and to the
//!   `done` event; p50 and max, and the first question's for comparison. The server-everything
//!   processes before and after tell whether a later question started one.
//!
//! Needs the peers (`scripts/gateway-peers.sh`; `STOWAGE_PEERS_DIR`) and a release build.
//! Reproduce: `cargo bench -p stowage --bench serve_load -- rate` (or `sessions`, `soak`,
//! `soak 30`, `agent`; with `SOAK_UPSTREAM=stowage` the soak's HTTP upstream is another
//! `stowage serve` in front of `stowage-fixture` instead of server-everything). Not part of the
//! test command.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

#[path = "../tests/support/load.rs"]
mod load;
use load::{Kind, Mcp, Serve, free_port, http_client, rss_mb, short};

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// server-everything's entry point in the peers.
fn everything_script() -> std::path::PathBuf {
    let peers = stowage_testkit::peers_dir();
    let script = peers.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(script.exists(), "server-everything is not installed in {}: run scripts/gateway-peers.sh", peers.display());
    script
}

/// server-everything over Streamable HTTP on a free port.
async fn everything() -> (tokio::process::Child, String) {
    let port = free_port();
    let child = tokio::process::Command::new("node")
        .arg(everything_script())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// Latencies and errors of one kind of client, per window.
#[derive(Default)]
struct Tally {
    times: Mutex<Vec<f64>>,
    errors: Mutex<BTreeMap<Kind, u64>>,
    calls: AtomicU64,
}

impl Tally {
    fn record(&self, started: Instant, result: &Result<Value, Kind>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(_) => self.times.lock().unwrap().push(started.elapsed().as_secs_f64() * 1000.0),
            Err(k) => *self.errors.lock().unwrap().entry(k.clone()).or_default() += 1,
        }
    }

    fn error(&self, kind: Kind) {
        *self.errors.lock().unwrap().entry(kind).or_default() += 1;
    }

    /// (calls, p50, p99) since the last take.
    fn take(&self) -> (u64, f64, f64) {
        let times = std::mem::take(&mut *self.times.lock().unwrap());
        (self.calls.swap(0, Ordering::Relaxed), percentile(times.clone(), 0.5), percentile(times, 0.99))
    }
}

/// Paced small calls from `clients` clients at `rps` together until `stop`.
async fn paced(url: &str, clients: usize, rps: f64, tally: Arc<Tally>, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
    let http = http_client();
    let mut handles = Vec::new();
    for i in 0..clients {
        let mut c = Mcp::connect(&http, url, json!({})).await.expect("connect");
        let tool = c.tool_named("echo").await;
        let (tally, stop) = (tally.clone(), stop.clone());
        let every = Duration::from_secs_f64(clients as f64 / rps);
        handles.push(tokio::spawn(async move {
            let mut next = Instant::now() + every.mul_f64(i as f64 / clients as f64);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep_until(next.into()).await;
                next += every;
                // Behind schedule (an overloaded machine): do not burst to catch up.
                if Instant::now() > next + every * 4 {
                    next = Instant::now() + every;
                }
                n += 1;
                let started = Instant::now();
                let r = c.call(&tool, json!({"message": format!("c{i} n{n}")})).await;
                tally.record(started, &r);
            }
        }));
    }
    handles
}

async fn rate(rps: f64, secs: u64, fixture: bool) {
    let clients = 8;
    println!("rate: {rps} calls/s of small echo calls from {clients} clients (SSE answers, kept-alive connections)");
    let (_server, config) = if fixture {
        let command = stowage_testkit::fixture_bin();
        println!("  upstream: stowage-fixture on stdio");
        (None, format!("[gateway.servers.fx]\ncommand = {:?}\n", command.to_str().unwrap()))
    } else {
        let (server, direct) = everything().await;
        // Straight to the upstream first: what it serves alone on this machine.
        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let handles = paced(&direct, clients, rps, tally.clone(), stop.clone()).await;
        let direct_secs = (secs / 3).max(5);
        tokio::time::sleep(Duration::from_secs(direct_secs)).await;
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.await;
        }
        let (n, p50, p99) = tally.take();
        println!(
            "  direct to server-everything: {:.0} calls/s over {direct_secs} s, p50 {p50:.2} ms, p99 {p99:.2} ms, errors {:?}",
            n as f64 / direct_secs as f64,
            tally.errors.lock().unwrap()
        );
        (Some(server), format!("[gateway.servers.everything]\nurl = \"{direct}\"\n"))
    };
    let serve = Serve::start(&config).await;
    println!("  gateway RSS at start: {:.1} MB", rss_mb(serve.pid));
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let handles = paced(&serve.url, clients, rps, tally.clone(), stop.clone()).await;
    let window = Duration::from_secs(5);
    let started = Instant::now();
    let mut all = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(window).await;
        let (n, p50, p99) = tally.take();
        let rss = rss_mb(serve.pid);
        all.push((n, rss));
        println!(
            "  through stowage  t={:>3.0}s  {:.0} calls/s  p50 {p50:.2} ms  p99 {p99:.2} ms  RSS {rss:.1} MB",
            started.elapsed().as_secs_f64(),
            n as f64 / window.as_secs_f64()
        );
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.await;
    }
    let total: u64 = all.iter().map(|(n, _)| n).sum();
    let after_first: Vec<f64> = all.iter().skip(1).map(|(_, r)| *r).collect();
    let (lo, hi) = after_first.iter().fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    println!(
        "  through stowage: {:.0} calls/s over {secs} s, errors {:?}; RSS after the first window {lo:.1}–{hi:.1} MB",
        total as f64 / started.elapsed().as_secs_f64(),
        tally.errors.lock().unwrap()
    );
    drop(serve);
}

async fn sessions(n: usize) {
    let config = format!("[gateway]\nmax_sessions_per_identity = {}\n", n + 16);
    let serve = Serve::start(&config).await;
    let http = http_client();
    // One session first, so what every session shares (the catalog, the pools) is in place.
    let mut kept = vec![Mcp::connect(&http, &serve.url, json!({})).await.unwrap()];
    kept[0].tool_named("get_report").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_mb(serve.pid);
    for _ in 0..n {
        kept.push(Mcp::connect(&http, &serve.url, json!({})).await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_mb(serve.pid);
    println!("sessions: {n} idle sessions: RSS {before:.1} MB → {after:.1} MB, {:.1} KB per session", (after - before) * 1024.0 / n as f64);
}

/// What the soak made, to check at the end: artifact id → sha256 expected.
type Made = Arc<Mutex<BTreeMap<String, String>>>;

async fn soak(secs: u64) {
    let fixture = stowage_testkit::fixture_bin();
    // `SOAK_UPSTREAM=stowage`: the HTTP upstream is another `stowage serve` in front of
    // `stowage-fixture` instead of server-everything, to tell the gateway's share of a latency
    // from Node's.
    let (_node, _rust_upstream, direct) = if std::env::var("SOAK_UPSTREAM").is_ok_and(|v| v == "stowage") {
        let config =
            format!("[gateway]\nmax_sessions_per_identity = 1024\n\n[gateway.servers.fx]\ncommand = {:?}\n", fixture.to_str().unwrap());
        let upstream = Serve::start(&config).await;
        let url = upstream.url.clone();
        println!("upstream `everything`: stowage serve in front of stowage-fixture at {url}");
        (None, Some(upstream), url)
    } else {
        let (node, url) = everything().await;
        (Some(node), None, url)
    };
    // 70 clients list tools, and under the per_client default each gets its own session with
    // both upstreams: the per-upstream cap is raised above that, or the least recently used
    // active client's session would be closed for every newcomer (what the cap is for, but not
    // what this run measures). The retention budgets hold everything the run stores (about
    // 4 GB of uploads), so every artifact made can be checked at the end.
    let config = format!(
        "[gateway]\nmax_sessions_per_identity = 256\nmax_upstream_sessions = 128\nrequest_timeout_secs = 120\nmax_request_bytes = 67108864\n\n\
         [retention]\nmax_session_bytes = 8589934592\nmax_user_bytes = 8589934592\nmax_tenant_bytes = 17179869184\nmax_artifacts_per_session = 100000\n\n\
         [gateway.servers.everything]\nurl = \"{direct}\"\n\n\
         [gateway.servers.fx]\ncommand = {:?}\n",
        fixture.to_str().unwrap()
    );
    let serve = Arc::new(Serve::start(&config).await);
    let stop = Arc::new(AtomicBool::new(false));
    let small = Arc::new(Tally::default());
    let straight = Arc::new(Tally::default());
    let big = Arc::new(Tally::default());
    let uploads = Arc::new(Tally::default());
    let other = Arc::new(Tally::default());
    let made: Made = Arc::default();
    let mut handles = paced(&serve.url, 64, 640.0, small.clone(), stop.clone()).await;
    handles.extend(paced(&direct, 8, 80.0, straight.clone(), stop.clone()).await);
    let http = http_client();

    // 50 MB results (37.5 MB of PDF as base64), downloaded through their links and hashed.
    for i in 0..4u64 {
        let (http, url, stop, tally, made) = (http.clone(), serve.url.clone(), stop.clone(), big.clone(), made.clone());
        handles.push(tokio::spawn(async move {
            let mut c = Mcp::connect(&http, &url, json!({})).await.unwrap();
            let tool = c.tool_named("fx_get_view_pdf").await;
            let mut n = i;
            while !stop.load(Ordering::Relaxed) {
                // Eight sizes in turn: a few distinct 37.5 MB blobs, not one per call.
                n += 1;
                let bytes = 37_500_000 + (n % 8) * 1000;
                let started = Instant::now();
                let r = c.call(&tool, json!({"bytes": bytes})).await;
                let checked = match r {
                    Ok(v) => match v["_meta"]["io.stowage/assets"].as_array().and_then(|a| a.first()).cloned() {
                        Some(asset) => {
                            let link = asset["uri"].as_str().unwrap_or_default().to_owned();
                            match http.get(&link).send().await {
                                Ok(resp) if resp.status() == 200 => {
                                    let body = resp.bytes().await.unwrap_or_default();
                                    let sha = asset["sha256"].as_str().unwrap_or_default().to_owned();
                                    made.lock().unwrap().insert(asset["id"].as_str().unwrap_or_default().to_owned(), sha.clone());
                                    if sha256_hex(&body) == sha { Ok(v) } else { Err("download: sha256 mismatch".to_owned()) }
                                }
                                Ok(resp) => Err(format!("download: http {}", resp.status().as_u16())),
                                Err(e) => Err(format!("download: {}", short(&e.to_string()))),
                            }
                        }
                        None => Err("no asset in the 50 MB result".to_owned()),
                    },
                    Err(k) => Err(k),
                };
                tally.record(started, &checked);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }));
    }

    // Uploads: 3 MB by chunks and by link, alternately.
    let apps = json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}});
    for i in 0..2u64 {
        let (http, url, stop, tally, made, apps) =
            (http.clone(), serve.url.clone(), stop.clone(), uploads.clone(), made.clone(), apps.clone());
        handles.push(tokio::spawn(async move {
            let mut c = Mcp::connect(&http, &url, apps).await.unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let file: Vec<u8> = (0..3_000_000u64).map(|k| ((k * 31 + n * 7 + i * 13) % 251) as u8).collect();
                let sha = sha256_hex(&file);
                let started = Instant::now();
                let r = upload(&mut c, &http, &file, &sha, n.is_multiple_of(2)).await;
                if let Ok(v) = &r {
                    made.lock().unwrap().insert(v["structuredContent"]["artifact"]["id"].as_str().unwrap_or_default().to_owned(), sha);
                }
                tally.record(started, &r);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }

    // Sessions opened and abandoned, one a second.
    {
        let (http, url, stop, tally) = (http.clone(), serve.url.clone(), stop.clone(), other.clone());
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Err(k) = Mcp::connect(&http, &url, json!({})).await {
                    tally.error(format!("abandoned session: {k}"));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }

    // The fx upstream killed every minute.
    let killed = Arc::new(AtomicU64::new(0));
    {
        let (serve, stop, killed) = (serve.clone(), stop.clone(), killed.clone());
        handles.push(tokio::spawn(async move {
            let mut next = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(250)).await;
                if Instant::now() < next {
                    continue;
                }
                next += Duration::from_secs(60);
                for pid in serve.children("stowage-fixture") {
                    let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
                    killed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    let window = Duration::from_secs((secs / 10).clamp(5, 60));
    let started = Instant::now();
    println!("soak: {secs} s against stowage serve (release), windows of {} s", window.as_secs());
    println!("| t (s) | small calls/s | p50 / p99 via stowage (ms) | p50 / p99 direct (ms) | 50 MB results | uploads | RSS (MB) |");
    println!("|---|---|---|---|---|---|---|");
    let mut rss_seen = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(window).await;
        let (n, p50, p99) = small.take();
        let (_, d50, d99) = straight.take();
        let (b, _, _) = big.take();
        let (u, _, _) = uploads.take();
        let rss = rss_mb(serve.pid);
        rss_seen.push(rss);
        println!(
            "| {:.0} | {:.0} | {p50:.2} / {p99:.2} | {d50:.2} / {d99:.2} | {b} | {u} | {rss:.0} |",
            started.elapsed().as_secs_f64(),
            n as f64 / window.as_secs_f64()
        );
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = tokio::time::timeout(Duration::from_secs(180), h).await;
    }
    for (label, t) in
        [("small via stowage", &small), ("small direct", &straight), ("50 MB results", &big), ("uploads", &uploads), ("other", &other)]
    {
        println!("errors, {label}: {:?}", t.errors.lock().unwrap());
    }
    println!(
        "fx killed {} times; RSS min {:.0} MB, max {:.0} MB",
        killed.load(Ordering::Relaxed),
        rss_seen.iter().cloned().fold(f64::MAX, f64::min),
        rss_seen.iter().cloned().fold(0.0, f64::max)
    );

    // Every artifact made, downloaded again with a fresh link and hashed.
    let made = made.lock().unwrap().clone();
    let mut c = Mcp::connect(&http, &serve.url, json!({})).await.unwrap();
    let (mut matched, mut missing, mut mismatched) = (0, Vec::new(), Vec::new());
    for (id, sha) in &made {
        let link = match c.call("artifact_url", json!({"id": id})).await {
            Ok(v) => v["structuredContent"]["url"].as_str().map(str::to_owned),
            Err(_) => None,
        };
        let response = match link {
            Some(l) => http.get(&l).send().await.ok().filter(|r| r.status() == 200),
            None => None,
        };
        let digest = match response {
            Some(r) => Some(r.bytes().await.map(|b| sha256_hex(&b)).unwrap_or_default()),
            None => None,
        };
        match digest {
            Some(d) if d == *sha => matched += 1,
            Some(_) => mismatched.push(id.clone()),
            None => missing.push(id.clone()),
        }
    }
    println!("artifacts hashed at the end: {matched} of {} match; missing {missing:?}; different bytes {mismatched:?}", made.len());
}

async fn upload(c: &mut Mcp, http: &reqwest::Client, file: &[u8], sha: &str, by_link: bool) -> Result<Value, Kind> {
    let begun = c
        .call(
            "artifact_upload_begin",
            json!({"name": "soak.bin", "mimeType": "application/octet-stream", "size": file.len(), "sha256": sha}),
        )
        .await?;
    let handle = begun["structuredContent"]["upload"].as_str().unwrap_or_default().to_owned();
    match begun["structuredContent"]["url"].as_str() {
        Some(url) if by_link => {
            let r = http.put(url).header("content-type", "application/octet-stream").body(file.to_vec()).send().await;
            match r {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => return Err(format!("upload PUT: http {}", r.status().as_u16())),
                Err(e) => return Err(format!("upload PUT: {}", short(&e.to_string()))),
            }
        }
        _ => {
            for (k, chunk) in file.chunks(1 << 20).enumerate() {
                let data = base64::engine::general_purpose::STANDARD.encode(chunk);
                c.call("artifact_upload_chunk", json!({"upload": handle, "offset": k << 20, "data": data})).await?;
            }
        }
    }
    c.call("artifact_upload_commit", json!({"upload": handle})).await
}

/// One `/agent/runs` question, as its client saw it (ms from sending the request).
struct Question {
    first_event: f64,
    /// The first event's name.
    first_name: String,
    /// When the model stub received the question's first request.
    model_asked: f64,
    done: f64,
}

/// Asks `query` and reads the event stream to its `done` event; `asked` is when the model
/// stub received each request.
async fn ask(http: &reqwest::Client, base: &str, query: &str, asked: &Mutex<Vec<Instant>>, tool: &str) -> Question {
    use futures::StreamExt;
    let seen = asked.lock().unwrap().len();
    let started = Instant::now();
    let resp = http
        .post(format!("{base}/agent/runs"))
        .header("content-type", "application/json")
        .body(json!({"query": query}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{query}");
    let ms = |t: Instant| t.duration_since(started).as_secs_f64() * 1000.0;
    let (mut body, mut events, mut first, mut done) = (Vec::new(), Vec::<(String, Value)>::new(), None, None);
    let mut stream = resp.bytes_stream();
    while let Some(bytes) = stream.next().await {
        let now = Instant::now();
        body.extend_from_slice(&bytes.unwrap());
        // Whole events only (a blank line ends each); `: heartbeat` comments are no event.
        while let Some(end) = body.windows(2).position(|w| w == b"\n\n") {
            let event = String::from_utf8_lossy(&body[..end]).into_owned();
            body.drain(..end + 2);
            let Some(name) = event.lines().find_map(|l| l.strip_prefix("event: ")) else { continue };
            let data = event.lines().find_map(|l| l.strip_prefix("data: ")).and_then(|d| serde_json::from_str(d).ok());
            first.get_or_insert((ms(now), name.to_owned()));
            if name == "done" {
                done = Some(ms(now));
            }
            events.push((name.to_owned(), data.unwrap_or(Value::Null)));
        }
    }
    let (Some((first_event, first_name)), Some(done)) = (first, done) else { panic!("{query}: no done event in {events:?}") };
    let ran = events.iter().any(|(n, d)| n == "step" && d["status"] == "ok" && d["node"].as_str().is_some_and(|n| n.ends_with(tool)));
    assert!(ran, "{query}: {tool} did not run: {events:?}");
    assert_eq!(events.last().map(|(_, d)| d["raw_answer"].clone()), Some(json!("Done.")), "{query}");
    let model_asked = asked.lock().unwrap().get(seen).map_or(f64::NAN, |t| ms(*t));
    Question { first_event, first_name, model_asked, done }
}

/// server-everything's processes under `serve`, once their number has not changed for 2 s
/// (a spare started behind a session taken is up).
async fn settled(serve: &Serve) -> Vec<u32> {
    let everything = || {
        let mut pids = serve.children("server-everything");
        pids.sort_unstable();
        pids
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut seen, mut since) = (everything(), Instant::now());
    while since.elapsed() < Duration::from_secs(2) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = everything();
        if now != seen {
            (seen, since) = (now, Instant::now());
        }
    }
    seen
}

async fn agent(questions: usize, tool: &str) {
    use stowage_testkit::model_stub::{ModelStub, Plan, Recorded, Turn};
    // The model: a call of `tool` first, the answer once a tool result is in the conversation.
    let asked: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let plan: Plan = {
        let (asked, tool) = (asked.clone(), tool.to_owned());
        Arc::new(move |r: &Recorded| {
            asked.lock().unwrap().push(Instant::now());
            let body = r.json();
            if body["messages"].as_array().is_some_and(|m| m.iter().any(|m| m["role"] == "tool")) {
                return Turn::Text(json!({"raw_answer": "Done."}).to_string());
            }
            let offered: Vec<&str> =
                body["tools"].as_array().into_iter().flatten().filter_map(|t| t["function"]["name"].as_str()).collect();
            let name = offered
                .iter()
                .find(|n| **n == tool || n.ends_with(&format!("_{tool}")))
                .unwrap_or_else(|| panic!("{tool} is not offered: {offered:?}"));
            let args = if tool == "echo" { json!({"message": "hello from the bench"}) } else { json!({}) };
            Turn::tool(name, args)
        })
    };
    let stub = ModelStub::planned(plan).await;
    let config = format!(
        "[agent]\nbase_url = \"{}\"\nmodel = \"stub-model\"\n\n[gateway.servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
        stub.base_url(),
        everything_script().to_str().unwrap()
    );
    let serve = Serve::start(&config).await;
    let base = serve.url.trim_end_matches("/mcp").to_owned();
    let http = http_client();
    println!(
        "agent: POST /agent/runs, one question after another; server-everything (Node, stdio, per_client) upstream; \
         the model stub calls {tool}, then answers"
    );
    let ready = settled(&serve).await;
    let first = ask(&http, &base, "question 0", &asked, tool).await;
    let after_first = settled(&serve).await;
    println!(
        "  first question: first event ({}) {:.1} ms, model asked at {:.1} ms, done {:.1} ms; server-everything processes {} → {}",
        first.first_name,
        first.first_event,
        first.model_asked,
        first.done,
        ready.len(),
        after_first.len()
    );
    let mut next = Vec::with_capacity(questions);
    for i in 1..=questions {
        next.push(ask(&http, &base, &format!("question {i}"), &asked, tool).await);
    }
    let after = settled(&serve).await;
    let column = |f: fn(&Question) -> f64| next.iter().map(f).collect::<Vec<f64>>();
    let (first_events, model_asked, done) = (column(|q| q.first_event), column(|q| q.model_asked), column(|q| q.done));
    let max = |v: &[f64]| v.iter().cloned().fold(f64::NAN, f64::max);
    let names: std::collections::BTreeSet<&str> = next.iter().map(|q| q.first_name.as_str()).collect();
    println!(
        "  next {questions}: first event {names:?} p50 {:.1} ms  max {:.1} ms | model asked p50 {:.1} ms  max {:.1} ms | done p50 {:.1} ms  max {:.1} ms",
        percentile(first_events.clone(), 0.5),
        max(&first_events),
        percentile(model_asked.clone(), 0.5),
        max(&model_asked),
        percentile(done.clone(), 0.5),
        max(&done)
    );
    println!("  first events, in order (ms): {}", first_events.iter().map(|t| format!("{t:.1}")).collect::<Vec<_>>().join(" "));
    println!(
        "  server-everything processes after: {} ({})",
        after.len(),
        if after == after_first { "the same as after the first question" } else { "not the same as after the first question" }
    );
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; the rest are ours.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let num = |i: usize| args.get(i).and_then(|v| v.parse::<u64>().ok());
    match args.first().map(String::as_str) {
        Some("rate") | None => rate(num(1).unwrap_or(2000) as f64, num(2).unwrap_or(60), args.get(3).is_some_and(|u| u == "fixture")).await,
        Some("sessions") => sessions(num(1).unwrap_or(1000) as usize).await,
        Some("soak") => soak(num(1).unwrap_or(600)).await,
        Some("agent") => agent(num(1).unwrap_or(20) as usize, args.get(2).map_or("echo", String::as_str)).await,
        Some(other) => {
            panic!("unknown mode {other:?}: rate [RPS] [SECS] [everything|fixture] | sessions [N] | soak [SECS] | agent [N] [TOOL]")
        }
    }
}
