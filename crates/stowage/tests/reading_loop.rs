//! The reading loop, as each host runs it: `stowage serve` in front of a FastMCP server, driven
//! by the official Python client under each built-in profile's `clientInfo.name`, in both
//! protocol eras (tests/peers/reading_client.py walks it; fixtures/reading_fixture.py serves it).
//!
//! For every answer and every page: what the model sees fits the host's own published limits.
//! And: FastMCP text sent twice stays readable while each copy is within budget, and keeps its
//! head and tail with a pointer to artifact_read when it is not; a 2 MB CSV read back page by
//! page is the CSV, nothing lost between pages; artifact_query works on the whole structured
//! result (`length(result)`); a 39 KB error keeps its exception; twelve screenshots stay within
//! the image budget, each named, the preview count in `_meta` the number sent; a PDF page
//! longer than a page is read on from where each answer stopped; a reference costs at most 150
//! o200k tokens with links and 80 without.

use crate::hosts_support;

use std::path::PathBuf;
use std::time::Duration;

use hosts_support::{HOSTS, Host, Seen, fits};
use serde_json::{Value, json};

fn python() -> Option<PathBuf> {
    stowage_testkit::require_peer("venv/bin/python")
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reading_fixture.py")
}

/// Page 5 is about 40 KB of text: longer than any host's page.
fn page_texts() -> Vec<String> {
    (1..=6)
        .map(|p| {
            let lines = if p == 5 { 700 } else { 12 };
            (0..lines)
                .map(|i| format!("Page {p} line {i}: revenue in region {} rose by {} percent.", i % 4, (i * 7) % 31))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

struct World {
    dir: tempfile::TempDir,
    python: PathBuf,
    pdf: Vec<u8>,
}

impl World {
    fn new(python: PathBuf) -> World {
        let dir = tempfile::tempdir().unwrap();
        let texts = page_texts();
        let pdf = stowage_media::testing::text_pdf(&texts.iter().map(String::as_str).collect::<Vec<_>>());
        std::fs::write(dir.path().join("report.pdf"), &pdf).unwrap();
        let servers = json!({"mcpServers": {"reading": {
            "command": python, "args": [fixture()], "env": {"READING_FIXTURE_DIR": dir.path()},
        }}});
        std::fs::write(dir.path().join("mcp.json"), servers.to_string()).unwrap();
        World { dir, python, pdf }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn serve_args(&self) -> Vec<String> {
        let s = |p: PathBuf| p.to_str().unwrap().to_owned();
        vec!["--store".into(), s(self.path("store")), "serve".into(), "--mcp-config".into(), s(self.path("mcp.json"))]
    }

    async fn serve(&self) -> (tokio::process::Child, String) {
        hosts_support::serve_http(self.dir.path(), self.serve_args(), &[]).await
    }

    async fn client(&self, target: &[String], client: &str, era: &str) -> Value {
        let fixture = fixture();
        let env = [("READING_FIXTURE_DIR", self.dir.path().as_os_str())];
        let args = [fixture.to_str().unwrap()];
        hosts_support::run_client(
            &self.python,
            "reading_client.py",
            client,
            era,
            &args,
            target,
            self.dir.path(),
            &env,
            Duration::from_secs(300),
        )
        .await
    }
}

/// The o200k tokens a host's model reads of `r`.
fn tokens(host: &Host, r: &Value) -> u64 {
    Seen(r).tokens(host)
}

fn check(host: &Host, era: &str, o: &Value) {
    let ctx = format!("{} ({era})", host.profile);
    for (name, answer) in o["answers"].as_object().unwrap() {
        fits(host, name, answer);
    }
    for (name, pages) in o["pages"].as_object().unwrap() {
        for p in pages.as_array().unwrap() {
            fits(host, &format!("{name} page"), p);
        }
    }

    // FastMCP text sent twice: one value, read once.
    for kb in [24, 26, 32, 120] {
        let r = &o["answers"][format!("text{kb}")];
        let whole = o[format!("text{kb}_whole")].as_str().unwrap();
        let seen = Seen(r).text(host);
        let fits_as_is = host.max_text_bytes.is_none_or(|m| whole.len() <= m)
            && host.max_lines.is_none_or(|m| whole.lines().count() <= m)
            && host.max_tokens.is_none_or(|m| stowage_transform::tokens::count_exact(whole) <= m);
        // Within the 8,000-token inline budget and the 32,000-character ceiling: readable whole.
        let inline = kb <= 26;
        if inline && fits_as_is {
            assert_eq!(r["content"][0]["text"], whole, "{ctx}: text{kb} reaches the model whole");
            assert_eq!(r["structuredContent"]["result"], whole, "{ctx}: and its structured copy is the same");
        } else {
            // Head and tail, and where the whole is: never a JSON envelope of the result.
            let first = whole.lines().next().unwrap();
            let last = whole.lines().last().unwrap();
            assert!(seen.contains(first) && seen.contains(last), "{ctx}: text{kb} keeps its head and tail: {seen:.600}");
            assert!(seen.contains("artifact_read") && seen.contains("artifact://"), "{ctx}: text{kb} names the whole: {seen:.600}");
            assert!(!seen.contains("stored whole") && !seen.contains("\"content\":"), "{ctx}: text{kb} is not an envelope");
        }
    }

    // The CSV, page by page, is the CSV.
    assert_eq!(o["csv_whole"], true, "{ctx}: the pages put back together are not the CSV");
    assert!(o["csv_pages"].as_u64().unwrap() >= 2, "{ctx}");

    // The structured rows: the artifact is the whole object the tool returned.
    assert_eq!(o["rows_length"], 15_000, "{ctx}");
    assert_eq!(o["rows_filter"], json!([14996, 14997, 14998, 14999]), "{ctx}");
    let rows = &o["answers"]["rows"];
    let kept = rows["structuredContent"]["result"].as_array().unwrap();
    assert!(!kept.is_empty() && kept.len() < 15_000, "{ctx}: a typed prefix stays in place");

    // The error keeps its first line and its exception.
    let crash = &o["answers"]["crash"];
    assert_eq!(crash["isError"], true, "{ctx}");
    let text = Seen(crash).text(host);
    assert!(text.contains("Traceback (most recent call last):"), "{ctx}: {text:.300}");
    assert!(
        text.contains("ValueError: the invoice total 1,204.50 does not match its lines (1,240.50)"),
        "{ctx}: the exception is lost: …{}",
        &text[text.len().saturating_sub(400)..]
    );

    // Twelve screenshots: every one named where the host looks, within its image budget, and
    // `_meta` counts the previews actually sent.
    let shots = &o["answers"]["screenshots"];
    let seen = Seen(shots);
    let assets = seen.assets();
    assert_eq!(assets.len(), 12, "{ctx}: {}", assets.len());
    for a in &assets {
        assert!(seen.text(host).contains(a["artifactUri"].as_str().unwrap()), "{ctx}: a screenshot is not named");
    }
    let previews = seen.images().len();
    let said = shots["_meta"]["io.stowage/transform"]["host"]["previews"].as_u64().unwrap_or(0) as usize;
    assert_eq!(said, previews, "{ctx}: _meta says {said} previews, {previews} were sent");
    if host.previews {
        assert!(previews >= 1, "{ctx}: a host that shows images gets previews");
    }

    // A reference is cheap.
    let pdf = &o["answers"]["report_pdf"];
    let cost = tokens(host, pdf);
    assert!(cost <= 150, "{ctx}: the PDF's reference costs {cost} tokens: {}", Seen(pdf).text(host));
    let visible = Seen(pdf).text(host);
    assert!(visible.matches("token=").count() <= 1, "{ctx}: a signed URL written twice: {visible}");
}

/// Page 5 put back together from its answers, against the page read whole.
fn check_pdf_page(w: &World, host: &Host, era: &str, o: &Value) {
    let ctx = format!("{} ({era})", host.profile);
    let limits = stowage_media::PdfLimits { max_chars: usize::MAX, ..Default::default() };
    let whole = stowage_media::pdf_text(&w.pdf, Some("5"), &limits).unwrap().pages.remove(0).text;
    let mut got = String::new();
    let texts = o["pdf_texts"].as_array().unwrap();
    for t in texts {
        let t = t.as_str().unwrap();
        // Each answer is `--- page 5[ from character N] ---` and the text from there.
        let (header, body) = t.split_once('\n').unwrap();
        assert!(header.starts_with("--- page 5"), "{ctx}: {header}");
        if let Some(n) = header.strip_prefix("--- page 5 from character ").and_then(|r| r.strip_suffix(" ---")) {
            assert_eq!(n.parse::<usize>().unwrap(), got.chars().count(), "{ctx}: the answer goes on where the last stopped");
        }
        got.push_str(body);
    }
    assert!(texts.len() >= 2, "{ctx}: page 5 fits one answer? ({} chars)", whole.len());
    // The last answer ends with the line break that closes the page.
    assert_eq!(got.trim_end(), whole.trim_end(), "{ctx}: page 5 put back together is not page 5");
}

async fn every_profile(era: &str) {
    let Some(python) = python() else { return };
    let w = World::new(python);
    let (_serve, url) = w.serve().await;
    for host in HOSTS.iter() {
        let o = w.client(std::slice::from_ref(&url), host.client, era).await;
        check(host, era, &o);
        check_pdf_page(&w, host, era, &o);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reading_loop_fits_every_host_in_the_legacy_era() {
    every_profile("legacy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reading_loop_fits_every_host_in_the_modern_era() {
    every_profile("modern").await;
}

/// Without links (a host that spawns `stowage serve --stdio --no-links`), a reference is the
/// `artifact://` URI alone: at most 80 tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_links_a_reference_costs_at_most_80_tokens() {
    let Some(python) = python() else { return };
    let w = World::new(python);
    let mut stdio = vec!["--".to_owned(), env!("CARGO_BIN_EXE_stowage").to_owned()];
    stdio.extend(w.serve_args());
    stdio.extend(["--stdio".into(), "--no-links".into()]);
    let default = HOSTS.iter().find(|h| h.profile == "default").expect("the default profile's host");
    let o = w.client(&stdio, default.client, "modern").await;
    let pdf = &o["answers"]["report_pdf"];
    let cost = tokens(default, pdf);
    assert!(cost <= 80, "the PDF's reference costs {cost} tokens without links: {}", Seen(pdf).all_text());
    assert!(!Seen(pdf).all_text().contains("http"), "no link without links");
}
