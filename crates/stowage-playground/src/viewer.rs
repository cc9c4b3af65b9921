//! The MCP Apps viewer (`ui://stowage/viewer`): one self-contained HTML document, assembled
//! from `assets/viewer/` and the playground's own preview components (`preview.js`), so both
//! pages show artifacts with the same code.
//!
//! A host renders the view in a sandboxed frame under its own CSP, with no server of ours
//! behind the frame's origin: the document must carry its code inline. `viewer.html` marks
//! where the style (`/*@STYLE@*/`: `viewer.css`, then the shared `preview.css`) and the one
//! module script (`/*@SCRIPT@*/`: `preview.js`, then `viewer.js`, in one module scope) go. The PDF renderer is too big to send every time
//! and is loaded lazily by name through the app-only `artifact_viewer_asset` tool.

use serde_json::json;
use stowage_mcp::apps::Viewer;

const TEMPLATE: &str = include_str!("../assets/viewer/viewer.html");
const STYLE: &str = include_str!("../assets/viewer/viewer.css");
/// The preview components' styles, shared with the playground.
const PREVIEW_STYLE: &str = include_str!("../assets/preview.css");
const PREVIEW: &str = include_str!("../assets/preview.js");
const SCRIPT: &str = include_str!("../assets/viewer/viewer.js");
/// pdf.js (pinned in `assets/vendor/pdfjs.sha256`): the library, and its worker, which the
/// view runs in its own thread (a host's CSP allows no worker script of ours).
const PDFJS: &str = include_str!("../assets/vendor/pdfjs/pdf.min.mjs");
const PDFJS_WORKER: &str = include_str!("../assets/vendor/pdfjs/pdf.worker.min.mjs");

/// The view's document.
pub fn viewer_document() -> String {
    // The script must not close its own element early: a literal `</script` inside it
    // would (the browser's parser does not know JavaScript strings).
    let script = format!("{PREVIEW}\n{SCRIPT}").replace("</script", "<\\/script");
    let style = format!("{STYLE}\n{PREVIEW_STYLE}");
    TEMPLATE.replacen("/*@STYLE@*/", &style, 1).replacen("/*@SCRIPT@*/", &script, 1)
}

/// The viewer as the gateway serves it. `https_links_origin` is where signed links point
/// when that is an https origin: the view's CSP then asks the host to let it fetch and load
/// from there (the fast path); otherwise it asks for nothing and uses the chunk tools.
pub fn viewer(https_links_origin: Option<&str>) -> Viewer {
    let csp = match https_links_origin {
        Some(o) => json!({"connectDomains": [o], "resourceDomains": [o]}),
        None => json!({}),
    };
    Viewer {
        html: viewer_document(),
        assets: vec![("pdfjs", PDFJS), ("pdfjs-worker", PDFJS_WORKER)],
        ui_meta: json!({"csp": csp, "prefersBorder": true}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_whole_and_small() {
        let html = viewer_document();
        assert!(!html.contains("/*@STYLE@*/") && !html.contains("/*@SCRIPT@*/"));
        assert!(html.contains("function renderPreview"), "the preview components are inlined");
        assert!(html.len() <= 300 * 1024, "the view is {} bytes", html.len());
        // Exactly one script element, closed once: nothing in the code closed it early.
        assert_eq!(html.matches("</script").count(), 1);
        let code = crate::assets::code_only(&html);
        for bad in ["eval(", "new Function(", "innerHTML", "outerHTML", "document.write", "src=\"http", "href=\"http"] {
            assert!(!code.contains(bad), "the view contains {bad:?}");
        }
    }

    #[test]
    fn the_vendored_pdfjs_is_the_pinned_one() {
        use sha2::{Digest, Sha256};
        let pin = include_str!("../assets/vendor/pdfjs.sha256");
        for (file, text) in [("pdf.min.mjs", PDFJS), ("pdf.worker.min.mjs", PDFJS_WORKER)] {
            let want = pin.lines().find(|l| l.ends_with(file)).and_then(|l| l.split_whitespace().next()).unwrap();
            assert_eq!(hex::encode(Sha256::digest(text.as_bytes())), want, "{file}: re-run scripts/vendor-playground-assets.sh");
        }
        assert!(pin.contains("pdfjs-dist@"), "{pin}");
    }

    #[test]
    fn the_csp_names_the_links_origin_only_when_https() {
        assert_eq!(viewer(None).ui_meta["csp"], json!({}));
        let v = viewer(Some("https://files.example.com"));
        assert_eq!(v.ui_meta["csp"]["connectDomains"], json!(["https://files.example.com"]));
        assert_eq!(v.ui_meta["csp"]["resourceDomains"], json!(["https://files.example.com"]));
        assert!(v.assets.iter().any(|(n, t)| *n == "pdfjs" && !t.is_empty()));
    }
}
