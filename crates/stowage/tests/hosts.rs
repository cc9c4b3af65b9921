//! Results fitted to each host: `stowage serve` in front of a FastMCP server (a 17 KB log, a
//! detailed 1600x1200 PNG, six of them at once, a report whose structuredContent carries a
//! base64 PDF, a long error, sixty small charts), driven by the official Python client under
//! each built-in profile's `clientInfo.name`, in both protocol eras.
//!
//! Per profile: what the model sees fits the host's own published limits (bytes, lines,
//! tokens with images counted), references are where that host looks, previews and image
//! tokens are within budget, and what was stored hashes to the originals. Also: a zoomed
//! region is the original's pixels, one page of a real text PDF comes back alone, the clamp's
//! limit holds for the final result over HTTP and stdio, and a full store, a decompression
//! bomb and a malformed PDF are clear errors.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The Python SDK from the peers directory (installed by scripts/gateway-peers.sh).
fn python() -> Option<PathBuf> {
    stowage_testkit::require_peer("venv/bin/python")
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

use crate::hosts_support;
use hosts_support::{HOSTS, Host, Seen, b64d, fits};

/// The fixture's files and the config that serves it.
struct World {
    dir: tempfile::TempDir,
    python: PathBuf,
    photo: Vec<u8>,
    pdf: Vec<u8>,
}

impl World {
    fn new(python: PathBuf) -> World {
        let dir = tempfile::tempdir().unwrap();
        let photo = stowage_media::testing::noisy_png(1600, 1200);
        let pdf = stowage_media::testing::sample_text_pdf(3);
        std::fs::write(dir.path().join("photo.png"), &photo).unwrap();
        std::fs::write(dir.path().join("report.pdf"), &pdf).unwrap();
        let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hosts_fixture.py");
        let servers = json!({"mcpServers": {"hosts": {
            "command": python, "args": [fixture], "env": {"HOSTS_FIXTURE_DIR": dir.path()},
        }}});
        std::fs::write(dir.path().join("mcp.json"), servers.to_string()).unwrap();
        World { dir, python, photo, pdf }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn serve_args(&self, config: &str) -> Vec<String> {
        std::fs::write(self.path("stowage.toml"), config).unwrap();
        let s = |p: PathBuf| p.to_str().unwrap().to_owned();
        vec![
            "--config".into(),
            s(self.path("stowage.toml")),
            "--store".into(),
            s(self.path("store")),
            "serve".into(),
            "--mcp-config".into(),
            s(self.path("mcp.json")),
        ]
    }

    /// `stowage serve` over HTTP on a free port; ready when the fixture listed its tools.
    async fn serve(&self, config: &str) -> (tokio::process::Child, String) {
        hosts_support::serve_http(self.dir.path(), self.serve_args(config), &[("STOWAGE_LOG", "info,stowage::hosts=debug")]).await
    }

    /// The Python client as `client` in `era` (`legacy` or `modern`) against `target` (an
    /// `/mcp` URL, or `--` and a command for stdio), calling `tools`.
    async fn client(&self, target: &[String], client: &str, era: &str, tools: &str) -> Value {
        hosts_support::run_client(
            &self.python,
            "hosts_client.py",
            client,
            era,
            &[tools],
            target,
            self.dir.path(),
            &[],
            Duration::from_secs(240),
        )
        .await
    }
}

const ALL_TOOLS: &str = "build_log,screenshot,photos,report,fail_loudly";

fn check_host(w: &World, host: &Host, era: &str, o: &Value) {
    for tool in ALL_TOOLS.split(',') {
        fits(host, tool, &o[tool]);
    }
    let ctx = format!("{} ({era})", host.profile);
    let photo_sha = sha256_hex(&w.photo);
    // The profile in force is reported with the result.
    for tool in ["screenshot", "report"] {
        let meta = &o[tool]["_meta"]["io.stowage/transform"];
        match host.profile {
            "default" => assert!(meta.get("host").is_none(), "{ctx}: {meta}"),
            p => assert_eq!(meta["host"]["profile"], p, "{ctx}: {tool}: {meta}"),
        }
    }

    // The screenshot: stored whole, referenced where the host looks, previewed if it shows
    // images.
    let shot = Seen(&o["screenshot"]);
    let assets = shot.assets();
    assert_eq!(assets.len(), 1, "{ctx}: {}", o["screenshot"]);
    assert_eq!(assets[0]["sha256"], photo_sha.as_str(), "{ctx}: the stored image is the original");
    let uri = assets[0]["artifactUri"].as_str().unwrap();
    assert!(shot.text(host).contains(uri), "{ctx}: the reference is not where the host looks: {}", o["screenshot"]);
    let previews = shot.images();
    if host.previews {
        assert_eq!(previews.len(), 1, "{ctx}: one preview");
        let (pw, ph, _) = previews[0];
        assert_eq!((pw, ph), (768, 576), "{ctx}: the preview keeps the aspect ratio");
    } else {
        assert!(previews.is_empty(), "{ctx}: no image for a host without previews");
    }
    assert!(
        !o["screenshot"].to_string().contains(&base64::engine::general_purpose::STANDARD.encode(&w.photo[..300])),
        "{ctx}: original bytes inline"
    );

    // Six photos: the same bytes, one artifact; previews within the host's budget.
    let photos = Seen(&o["photos"]);
    assert!(photos.assets().iter().all(|a| a["sha256"] == photo_sha.as_str()), "{ctx}");
    if host.previews {
        assert!(!photos.images().is_empty(), "{ctx}: the photos keep a preview");
    }

    // The report: the PDF left structuredContent for the store, and the reference is in
    // structuredContent (where a structured-only host looks) and in the text.
    let report = Seen(&o["report"]);
    let pdf_asset = report.assets().into_iter().find(|a| a["mimeType"] == "application/pdf").expect("the PDF is an asset");
    assert_eq!(pdf_asset["sha256"], sha256_hex(&w.pdf).as_str(), "{ctx}: the stored PDF is the original");
    let pdf_uri = pdf_asset["artifactUri"].as_str().unwrap();
    assert!(report.structured().unwrap().to_string().contains(pdf_uri), "{ctx}: {}", o["report"]);
    assert_eq!(report.structured().unwrap()["title"], "Q3 report");

    // The log: whole where it fits; else its head and tail around a reference whose id is
    // the original text's hash.
    let log = Seen(&o["build_log"]);
    let log_text = log.text(host);
    assert!(log_text.contains("INFO step 0: compiled crate number 0"), "{ctx}: the head stays");
    assert!(log_text.contains("ERROR build failed"), "{ctx}: the tail stays");
    if host.max_text_bytes.is_some_and(|m| m < 17_000) {
        assert!(log_text.contains("artifact://") && log_text.contains("artifact_read"), "{ctx}: {log_text}");
    }

    // The zoomed region is the original's pixels; the whole image fits max_edge.
    let region = &o["region"];
    assert!(region["isError"] != true, "{ctx}: {region}");
    let img = region["content"].as_array().unwrap().iter().find(|b| b["type"] == "image").expect("an image block");
    let got = image::load_from_memory(&b64d(img["data"].as_str().unwrap())).unwrap().to_rgba8();
    let original = image::load_from_memory(&w.photo).unwrap().to_rgba8();
    assert_eq!(got.dimensions(), (320, 240), "{ctx}: native resolution");
    let crop = image::imageops::crop_imm(&original, 400, 300, 320, 240).to_image();
    assert!(got == crop, "{ctx}: the region is not the original's pixels");
    let whole = Seen(&o["whole"]).images();
    assert_eq!((whole[0].0, whole[0].1), (400, 300), "{ctx}: fitted to max_edge");

    // Page 2 of the report's PDF, and only page 2.
    let page2 = &o["page2"];
    let text = Seen(page2).all_text();
    assert!(text.contains("This is page 2"), "{ctx}: {text}");
    assert!(!text.contains("This is page 1") && !text.contains("This is page 3"), "{ctx}: {text}");
    if host.drops_text_beside_structured() {
        assert!(page2.get("structuredContent").is_none(), "{ctx}: it would hide the page: {page2}");
    } else {
        assert_eq!(page2["structuredContent"]["pageCount"], 3);
    }
}

async fn every_profile(era: &str) {
    let Some(python) = python() else { return };
    let w = World::new(python);
    let (_serve, url) = w.serve("").await;
    for host in HOSTS {
        let o = w.client(std::slice::from_ref(&url), host.client, era, ALL_TOOLS).await;
        check_host(&w, host, era, &o);
    }
    let log = std::fs::read_to_string(w.path("serve.log")).unwrap();
    assert!(log.contains("host profile") && log.contains("profile=codex"), "the debug log names the profile:\n{log}");
    // The host label on the call metrics.
    let metrics = reqwest::get(url.replace("/mcp", "/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("stowage_tool_calls_total") && l.contains("host=\"claude-code\"")), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_host_gets_results_it_can_take_in_the_legacy_era() {
    every_profile("legacy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_host_gets_results_it_can_take_in_the_modern_era() {
    every_profile("modern").await;
}

/// Sixty small charts at the default limit: what the model observes of the final result stays
/// within `max_observation_chars`, over HTTP and over stdio, and every chart stays named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clamps_limit_holds_for_many_artifacts_over_http_and_stdio() {
    let Some(python) = python() else { return };
    let w = World::new(python);
    let (_serve, url) = w.serve("").await;
    let over_http = w.client(&[url], "some-agent", "legacy", "charts").await;
    let mut stdio = vec!["--".to_owned(), env!("CARGO_BIN_EXE_stowage").to_owned()];
    stdio.extend(w.serve_args(""));
    stdio.push("--stdio".into());
    let over_stdio = w.client(&stdio, "some-agent", "legacy", "charts").await;
    for (how, o) in [("http", over_http), ("stdio", over_stdio)] {
        let r = &o["charts"];
        // What a model observes: all but `_meta`, whose records are for hosts and apps.
        let mut observed = r.clone();
        observed.as_object_mut().unwrap().remove("_meta");
        let chars = observed.to_string().chars().count();
        assert!(chars <= 50_000, "{how}: {chars} characters");
        let named: std::collections::HashSet<String> =
            Seen(r).assets().iter().filter_map(|a| a["artifactUri"].as_str()).map(str::to_owned).collect();
        assert_eq!(named.len(), 60, "{how}: every chart is an asset");
        for a in Seen(r).assets() {
            assert!(r["content"].to_string().contains(a["artifactUri"].as_str().unwrap()), "{how}: every chart is named in the content");
        }
    }
}

/// A store that cannot take the photo (the user's quota is full): the text parts and a note
/// naming what was withheld reach the model, never the bytes and never a server path; once the
/// store has room again, the same call stores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_withholds_with_a_note_and_recovers() {
    let Some(python) = python() else { return };
    let w = World::new(python);
    // Room for the photo, or for the filler, not both.
    let filler: Vec<u8> = (0..w.photo.len()).map(|i| (i * 7919 % 251) as u8).collect();
    let filler_id = put(&w, "filler.bin", "application/octet-stream", &filler);
    let config = format!("[retention]\nmax_user_bytes = {}\ncleanup_strategy = \"none\"\n", w.photo.len() + 200_000);
    let (_serve, url) = w.serve(&config).await;
    let o = w.client(std::slice::from_ref(&url), "claude-code", "legacy", "screenshot,report").await;
    let shot = &o["screenshot"];
    let text = Seen(shot).all_text();
    assert!(shot["isError"] != true, "{shot}");
    assert!(text.contains("[withheld:") && text.contains("image/png"), "{text}");
    assert!(!text.contains(w.dir.path().to_str().unwrap()) && !text.contains("/tmp"), "no server path: {text}");
    assert!(!shot.to_string().contains("iVBOR"), "no inline base64");
    // The report (its PDF is small) still stores and comes back whole.
    assert_eq!(o["report"]["structuredContent"]["title"], "Q3 report");
    let metrics = reqwest::get(url.replace("/mcp", "/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("stowage_store_failures_total")), "{metrics}");

    // Room again: the same call stores the photo.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["--store", w.path("store").to_str().unwrap(), "artifacts", "rm", &filler_id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let o = w.client(&[url], "claude-code", "legacy", "screenshot").await;
    let assets = Seen(&o["screenshot"]).assets();
    assert_eq!(assets.len(), 1, "{}", o["screenshot"]);
    assert_eq!(assets[0]["sha256"], sha256_hex(&w.photo).as_str());
}

/// Puts `bytes` in the store as `mime` with the CLI; its id.
fn put(w: &World, name: &str, mime: &str, bytes: &[u8]) -> String {
    let file = w.path(name);
    std::fs::write(&file, bytes).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
        .current_dir(w.dir.path())
        .args(["--store", w.path("store").to_str().unwrap(), "artifacts", "put", file.to_str().unwrap()])
        .args(["--mime", mime, "--filename", name, "--user", stowage_mcp::LOCAL_USER])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["id"].as_str().unwrap().to_owned()
}

/// A decompression bomb and a malformed PDF are one-line tool errors; the gateway stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decompression_bomb_and_a_malformed_pdf_are_clear_errors() {
    let Some(python) = python() else { return };
    let w = World::new(python);
    let bomb = put(&w, "bomb.png", "image/png", &stowage_media::testing::bomb_png());
    let mut bad_pdf = w.pdf[..w.pdf.len() / 2].to_vec();
    bad_pdf.extend_from_slice(b"garbage");
    let broken = put(&w, "broken.pdf", "application/pdf", &bad_pdf);
    let (_serve, url) = w.serve("").await;
    let reads = json!([
        {"id": bomb, "max_edge": 512},
        {"id": broken, "pages": "1"},
        {"id": broken, "pages": "1-2", "region": {"x": 0, "y": 0, "width": 1, "height": 1}},
    ]);
    std::fs::write(w.path("reads.json"), reads.to_string()).unwrap();
    let o = w.client(&[url], "claude-code", "legacy", "@reads.json").await;
    let answers = o["reads"].as_array().unwrap();
    for (a, want) in answers.iter().zip(["100000x100000", "PDF", "does not apply"]) {
        assert_eq!(a["isError"], true, "{a}");
        let t = Seen(a).all_text();
        assert!(t.starts_with("bad_request: artifact_read:") && t.contains(want), "{t}");
        assert_eq!(t.lines().count(), 1, "one line: {t}");
    }
}
