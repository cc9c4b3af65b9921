//! Gateway overhead benchmark (issue 4), run with a bare JSON-RPC client over stdio on both
//! sides so the client's own cost does not hide ours, direct and through the gateway in the
//! same run:
//!
//! 1. small `tools/call` (`echo`) latency, sequential: p50/p99 direct, through
//!    `stowage serve --stdio`, and the difference (the gateway's added latency);
//! 2. throughput with requests pipelined;
//! 3. a 50 MB base64 PDF result (JSON text, the Tableau shape), from the moment the upstream
//!    has it ready to the client having the answer: end-to-end time and the gateway's peak
//!    RSS (VmHWM), `BENCH_BIG_RUNS` times (default 5) with fresh processes, and the medians.
//!
//! 4. `BENCH_CONTENTION=1` instead: small-call latency while two 50 MB results are in flight
//!    through the same gateway (from another upstream, so the small calls' own upstream is
//!    idle and what is measured is the gateway), against the same calls with nothing else in
//!    flight, `BENCH_ROUNDS` rounds (default 20).
//!
//! 5. `BENCH_BASELINE=<older stowage binary>` instead: the small calls (as an unknown client
//!    and as `claude-code`) and the 50 MB result through that build and this one, alternating.
//!
//! Reproduce: `cargo build --release -p stowage && cargo bench -p stowage-mcp --bench gateway`
//! (`STOWAGE_BIN` overrides the path of the `stowage` binary, e.g. an older build to compare;
//! `BENCH_CALLS` the call count; `BENCH_ONLY_BIG=1` runs only the 50 MB case).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Peer {
    fn spawn(cmd: &mut Command) -> Peer {
        Peer::spawn_as(cmd, "bench")
    }

    /// A peer that introduces itself as `client` (its `clientInfo.name`: the host profile).
    fn spawn_as(cmd: &mut Command, client: &str) -> Peer {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
        let mut p = Peer { child, stdin: Some(stdin), stdout, next: 1 };
        let init = format!(r#"{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"{client}","version":"0"}}}}"#);
        p.call("initialize", &init);
        writeln!(p.stdin.as_mut().unwrap(), r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#).unwrap();
        p
    }

    fn send(&mut self, method: &str, params: &str) {
        let id = self.next;
        self.next += 1;
        writeln!(self.stdin.as_mut().unwrap(), r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#).unwrap();
    }

    /// Reads lines until a response (a line with `"id"` and `"result"`/`"error"`).
    fn recv(&mut self, line: &mut String) {
        loop {
            line.clear();
            assert!(self.stdout.read_line(line).unwrap() > 0, "peer closed");
            if line.contains("\"result\"") || line.contains("\"error\"") {
                return;
            }
        }
    }

    fn call(&mut self, method: &str, params: &str) -> String {
        self.send(method, params);
        let mut line = String::new();
        self.recv(&mut line);
        line
    }

    fn peak_rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const ECHO: &str = r#"{"name":"echo","arguments":{"message":"hello"}}"#;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Sequential latency of `n` small calls (after a warm-up).
fn latency(peer: &mut Peer, n: usize) -> Vec<Duration> {
    for _ in 0..500 {
        peer.call("tools/call", ECHO);
    }
    let mut line = String::new();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        peer.send("tools/call", ECHO);
        peer.recv(&mut line);
        out.push(t.elapsed());
    }
    out.sort();
    out
}

/// Calls per second with `n` requests pipelined (a writer thread, this thread reading).
fn throughput(peer: &mut Peer, n: usize) -> f64 {
    let start = Instant::now();
    let mut stdin = peer.stdin.take().expect("stdin");
    let first = peer.next;
    peer.next += n as u64;
    let writer = std::thread::spawn(move || {
        let mut buf = Vec::with_capacity(1 << 16);
        for id in first..first + n as u64 {
            writeln!(buf, r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{ECHO}}}"#).unwrap();
            if buf.len() > 60_000 {
                stdin.write_all(&buf).unwrap();
                buf.clear();
            }
        }
        stdin.write_all(&buf).unwrap();
        stdin.flush().unwrap();
        stdin
    });
    let mut line = String::new();
    for _ in 0..n {
        peer.recv(&mut line);
    }
    let secs = start.elapsed().as_secs_f64();
    peer.stdin = Some(writer.join().unwrap());
    n as f64 / secs
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // `cargo bench` passes `--bench`. Test runners also start bench targets (`cargo test
    // --all-targets` with no flag, nextest with `--list`): there is no test in here for them.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        eprintln!("gateway benchmark: run it with `cargo bench -p stowage-mcp --bench gateway`");
        return;
    }
    let fixture = stowage_testkit::fixture_bin();
    let fixture = &fixture;
    let stowage = std::env::var_os("STOWAGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/stowage"));
    assert!(stowage.exists(), "{} is missing: run `cargo build --release -p stowage` first (or set STOWAGE_BIN)", stowage.display());
    // Builds from before stdio links existed have no --no-links (and serve no links over stdio).
    let help = Command::new(&stowage)
        .args(["serve", "--help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let no_links: &[&str] = if help.contains("--no-links") { &["--no-links"] } else { &[] };
    if std::env::var_os("BENCH_CONTENTION").is_some() {
        contention(&stowage, fixture, no_links);
        return;
    }
    if let Some(baseline) = std::env::var_os("BENCH_BASELINE") {
        against(std::path::Path::new(&baseline), &stowage, fixture, no_links);
        return;
    }
    if std::env::var_os("BENCH_HOSTS").is_some() {
        hosts(&stowage, fixture, no_links);
        return;
    }
    let only_big = std::env::var_os("BENCH_ONLY_BIG").is_some();
    let n: usize = std::env::var("BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let store = tempfile::tempdir().unwrap();
    let gateway_cmd = || {
        let mut c = Command::new(&stowage);
        c.arg("serve").arg("--stdio").args(no_links).arg("--store").arg(store.path()).arg("--").arg(fixture);
        c.env("STOWAGE_LOG", "error");
        c
    };

    if !only_big {
        println!("gateway benchmark: {n} sequential small calls, {} pipelined, stdio on both sides", n * 2);
        let mut direct = Peer::spawn(&mut Command::new(fixture));
        let mut via = Peer::spawn(&mut gateway_cmd());
        let d = latency(&mut direct, n);
        let g = latency(&mut via, n);
        let (d50, d99, g50, g99) = (percentile(&d, 0.5), percentile(&d, 0.99), percentile(&g, 0.5), percentile(&g, 0.99));
        println!("latency direct:   p50 {:8.1} us  p99 {:8.1} us", us(d50), us(d99));
        println!("latency gateway:  p50 {:8.1} us  p99 {:8.1} us", us(g50), us(g99));
        println!("added by gateway: p50 {:8.1} us  p99 {:8.1} us", us(g50) - us(d50), us(g99) - us(d99));
        let td = throughput(&mut direct, n * 2);
        let tg = throughput(&mut via, n * 2);
        println!("throughput direct: {td:8.0} calls/s   gateway: {tg:8.0} calls/s");
        drop(direct);
        drop(via);
    }

    // 50 MB of base64 (37.5 MB PDF) in JSON text, upstream -> client, `BENCH_BIG_RUNS` times
    // (default 5), each with fresh processes and a fresh store; medians are what count.
    // Each fixture builds its answer before the clock starts: the time measured runs from
    // the upstream having its result to the client having the answer.
    let runs: usize = std::env::var("BENCH_BIG_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5).max(1);
    let (big, prepare) = (BIG, PREPARE_BIG);
    let (mut directs, mut vias, mut transforms, mut rss_max) = (Vec::new(), Vec::new(), Vec::new(), 0u64);
    for run in 0..runs {
        let mut direct = Peer::spawn(&mut Command::new(fixture));
        direct.call("tools/call", prepare);
        let t = Instant::now();
        let line = direct.call("tools/call", big);
        let direct_time = t.elapsed();
        let direct_len = line.len();
        drop(direct);
        let (line, via_time, rss, rss_before) = big_run(&stowage, fixture, no_links);
        assert!(line.contains("resource_link"), "not offloaded: {}", &line[..line.len().min(500)]);
        let ms = transform_ms(&line);
        println!(
            "50 MB result, run {run}: direct {:.3} s ({direct_len} bytes to the client), gateway {:.3} s ({} bytes to the client, transform {ms:.1} ms), peak RSS {:.1} MB (before the call {:.1} MB)",
            direct_time.as_secs_f64(),
            via_time.as_secs_f64(),
            line.len(),
            rss as f64 / 1024.0,
            rss_before as f64 / 1024.0,
        );
        directs.push(direct_time);
        vias.push(via_time);
        transforms.push(ms);
        rss_max = rss_max.max(rss);
    }
    directs.sort();
    vias.sort();
    transforms.sort_by(f64::total_cmp);
    println!(
        "50 MB result, median of {runs}: direct {:.3} s, gateway {:.3} s, transform {:.1} ms; gateway peak RSS at most {:.1} MB",
        directs[runs / 2].as_secs_f64(),
        vias[runs / 2].as_secs_f64(),
        transforms[runs / 2],
        rss_max as f64 / 1024.0
    );
}

/// The 50 MB case's call, and the call that has the fixture build its answer beforehand.
const BIG: &str = r#"{"name":"get_view_pdf","arguments":{"bytes":37500000}}"#;
const PREPARE_BIG: &str = r#"{"name":"get_view_pdf","arguments":{"bytes":37500000,"prepare":true}}"#;

/// One 50 MB result through a fresh `stowage serve --stdio` of `stowage` with a fresh store:
/// the answer line, the time from the upstream having it to the client having the answer, and
/// the gateway's peak RSS after and before the call (kB).
fn big_run(stowage: &std::path::Path, fixture: &std::path::Path, no_links: &[&str]) -> (String, Duration, u64, u64) {
    let run_store = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(stowage);
    cmd.arg("serve").arg("--stdio").args(no_links).arg("--store").arg(run_store.path()).arg("--").arg(fixture);
    cmd.env("STOWAGE_LOG", "error");
    let mut via = Peer::spawn(&mut cmd);
    via.call("tools/call", PREPARE_BIG);
    let rss_before = via.peak_rss_kb();
    let t = Instant::now();
    let line = via.call("tools/call", BIG);
    let via_time = t.elapsed();
    let rss = via.peak_rss_kb();
    drop(via);
    (line, via_time, rss, rss_before)
}

/// `BENCH_BASELINE=<an older stowage binary>`: the same calls through the older build and
/// this one, in one run, rounds alternating so load drifts hit both alike: small `echo` calls
/// as an unknown client and as `claude-code` (p50/p99 each, and what this build adds), then
/// the 50 MB result `BENCH_BIG_RUNS` times each (medians of time and peak RSS).
fn against(baseline: &std::path::Path, stowage: &std::path::Path, fixture: &std::path::Path, no_links: &[&str]) {
    let n: usize = std::env::var("BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let rounds = 10;
    println!("against {}: {n} small calls per build and profile, {rounds} alternating rounds", baseline.display());
    for client in ["bench", "claude-code"] {
        let store = tempfile::tempdir().unwrap();
        let gateway = |bin: &std::path::Path| {
            let mut c = Command::new(bin);
            c.arg("serve").arg("--stdio").args(no_links).arg("--store").arg(store.path()).arg("--").arg(fixture);
            c.env("STOWAGE_LOG", "error");
            c
        };
        let mut old = Peer::spawn_as(&mut gateway(baseline), client);
        let mut new = Peer::spawn_as(&mut gateway(stowage), client);
        latency(&mut old, 500);
        latency(&mut new, 500);
        let (mut o, mut w) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            o.extend(latency(&mut old, n / rounds));
            w.extend(latency(&mut new, n / rounds));
        }
        o.sort();
        w.sort();
        let (o50, o99, w50, w99) = (percentile(&o, 0.5), percentile(&o, 0.99), percentile(&w, 0.5), percentile(&w, 0.99));
        println!(
            "small calls as {client:<12} baseline p50 {:7.1} us p99 {:7.1} us | this build p50 {:7.1} us p99 {:7.1} us | added at p50 {:+6.1} us",
            us(o50),
            us(o99),
            us(w50),
            us(w99),
            us(w50) - us(o50)
        );
    }
    let runs: usize = std::env::var("BENCH_BIG_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5).max(1);
    let (mut ot, mut wt, mut orss, mut wrss) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        for (bin, times, rsss, label) in [(baseline, &mut ot, &mut orss, "baseline"), (stowage, &mut wt, &mut wrss, "this build")] {
            let (line, t, rss, _) = big_run(bin, fixture, no_links);
            assert!(line.contains("resource_link"), "not offloaded by the {label}: {}", &line[..line.len().min(500)]);
            println!(
                "50 MB result, run {run}, {label:<10}: {:.3} s, {} bytes to the client, peak RSS {:.1} MB",
                t.as_secs_f64(),
                line.len(),
                rss as f64 / 1024.0
            );
            times.push(t);
            rsss.push(rss);
        }
    }
    for v in [&mut ot, &mut wt] {
        v.sort();
    }
    for v in [&mut orss, &mut wrss] {
        v.sort();
    }
    println!(
        "50 MB result, median of {runs}: baseline {:.3} s, {:.1} MB peak | this build {:.3} s, {:.1} MB peak | ratio {:.2}",
        ot[runs / 2].as_secs_f64(),
        orss[runs / 2] as f64 / 1024.0,
        wt[runs / 2].as_secs_f64(),
        wrss[runs / 2] as f64 / 1024.0,
        wt[runs / 2].as_secs_f64() / ot[runs / 2].as_secs_f64()
    );
}

/// `_meta["io.stowage/transform"].ms` of a gateway answer.
/// `BENCH_HOSTS=1`: what fitting a result to its host adds to a small pass-through call. Two
/// gateways of the same build, one whose client is unknown (the default profile: nothing
/// fitted, today's path) and one whose client is `claude-code` (measured against a 10k-token
/// budget on every call); rounds alternate between them so load drifts hit both alike.
fn hosts(stowage: &std::path::Path, fixture: &std::path::Path, no_links: &[&str]) {
    let n: usize = std::env::var("BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let store = tempfile::tempdir().unwrap();
    let gateway = || {
        let mut c = Command::new(stowage);
        c.arg("serve").arg("--stdio").args(no_links).arg("--store").arg(store.path()).arg("--").arg(fixture);
        c.env("STOWAGE_LOG", "error");
        c
    };
    let mut default = Peer::spawn_as(&mut gateway(), "bench");
    let mut fitted = Peer::spawn_as(&mut gateway(), "claude-code");
    let (mut d, mut f) = (Vec::new(), Vec::new());
    let rounds = 10;
    for _ in 0..rounds {
        d.extend(latency(&mut default, n / rounds));
        f.extend(latency(&mut fitted, n / rounds));
    }
    d.sort();
    f.sort();
    let (d50, d99, f50, f99) = (percentile(&d, 0.5), percentile(&d, 0.99), percentile(&f, 0.5), percentile(&f, 0.99));
    println!("host fitting benchmark: {n} small calls per profile, {rounds} alternating rounds");
    println!("default profile (unknown client): p50 {:8.1} us  p99 {:8.1} us", us(d50), us(d99));
    println!("claude-code profile (fitted):     p50 {:8.1} us  p99 {:8.1} us", us(f50), us(f99));
    println!("added by host fitting:            p50 {:8.1} us  p99 {:8.1} us", us(f50) - us(d50), us(f99) - us(d99));
}

fn transform_ms(line: &str) -> f64 {
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    v.pointer("/result/_meta/io.stowage~1transform/ms").and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN)
}

/// Small `echo` calls, one at a time, until `done` says stop; returns their latencies. Lines
/// that are not the echo's answer (the big results arriving) are counted by `other`.
fn small_calls_until(peer: &mut Peer, mut done: impl FnMut(usize) -> bool) -> Vec<Duration> {
    let mut out = Vec::new();
    let mut line = String::new();
    let mut others = 0;
    while !done(others) {
        let id = peer.next;
        let t = Instant::now();
        peer.send("tools/call", r#"{"name":"small_echo","arguments":{"message":"hello"}}"#);
        loop {
            peer.recv(&mut line);
            if line.contains(&format!("\"id\":{id},")) {
                break;
            }
            others += 1;
        }
        out.push(t.elapsed());
    }
    // The big results that arrived after the last small call.
    while !done(others) {
        peer.recv(&mut line);
        others += 1;
    }
    out
}

/// Small-call latency with two 50 MB results in flight, and with nothing else in flight.
fn contention(stowage: &std::path::Path, fixture: &std::path::Path, no_links: &[&str]) {
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    let entry = serde_json::json!({"command": fixture});
    std::fs::write(&config, serde_json::json!({"mcpServers": {"big": entry, "small": entry}}).to_string()).unwrap();
    let mut cmd = Command::new(stowage);
    cmd.arg("serve").arg("--stdio").args(no_links).arg("--store").arg(dir.path().join("store")).arg("--mcp-config").arg(&config);
    cmd.env("STOWAGE_LOG", "error");
    let mut gw = Peer::spawn(&mut cmd);
    let sizes = [37_500_000, 37_499_997];
    let (mut busy, mut idle) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        gw.call("tools/call", r#"{"name":"small_echo","arguments":{"message":"warm"}}"#);
    }
    let started = Instant::now();
    for _ in 0..rounds {
        for size in sizes {
            gw.call("tools/call", &format!(r#"{{"name":"big_get_view_pdf","arguments":{{"bytes":{size},"prepare":true}}}}"#));
        }
        for size in sizes {
            gw.send("tools/call", &format!(r#"{{"name":"big_get_view_pdf","arguments":{{"bytes":{size}}}}}"#));
        }
        busy.extend(small_calls_until(&mut gw, |big_done| big_done >= 2));
        let mut calls = 0;
        idle.extend(small_calls_until(&mut gw, |_| {
            calls += 1;
            calls > 200
        }));
    }
    let secs = started.elapsed().as_secs_f64();
    busy.sort();
    idle.sort();
    println!(
        "small calls with two 50 MB results in flight ({} calls over {rounds} rounds, {secs:.1} s): p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        busy.len(),
        percentile(&busy, 0.5).as_secs_f64() * 1e3,
        percentile(&busy, 0.99).as_secs_f64() * 1e3,
        busy.last().unwrap().as_secs_f64() * 1e3
    );
    println!(
        "small calls with nothing else in flight ({} calls): p50 {:.2} ms  p99 {:.2} ms",
        idle.len(),
        percentile(&idle, 0.5).as_secs_f64() * 1e3,
        percentile(&idle, 0.99).as_secs_f64() * 1e3
    );
}
