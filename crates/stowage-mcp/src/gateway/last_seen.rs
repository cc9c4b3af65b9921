//! What the model sees of an upstream that is down: its tools as last listed, or one stand-in.
//!
//! A host's model that gets "unknown tool" cannot tell a down server from a tool that never
//! existed, and one that sees nothing of a server cannot say it is down. So:
//! - every complete listing of an upstream is kept in the state directory (in the store's
//!   directory: `upstreams/<name>-<16 hex>.json`, the hex naming the entry's transport, so an
//!   edited entry does not inherit another command's tools), and read back at the next start,
//!   so a server that is down when a host starts Stowage still shows the tools it had;
//! - an upstream that is down and was never listed shows one stand-in tool,
//!   `{server}{sep}unavailable`, whose description says so;
//! - either way a call fails at once with the upstream's name and its last failure (the
//!   connection answers that, see `Upstream::connection`), and when the upstream comes up its
//!   real lists replace these and clients hear `list_changed` (see [`super::lists`]).
//!
//! The files are the gateway's own, private (0600 in a 0700 directory), written whole (a temp
//! file renamed into place), and a file that does not parse is ignored with a warning: a lost
//! catalog only means a stand-in until the server answers.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::catalog::UpstreamLists;
use crate::config::UpstreamSpec;

/// The stand-in tool's own name (prefixed like any tool of the upstream).
pub(crate) const STANDIN_TOOL: &str = "unavailable";

/// One upstream's lists as kept on disk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Saved {
    /// The entry they were listed for, as the banner describes it (for a person reading the file).
    upstream: String,
    tools: Vec<Value>,
    prompts: Vec<Value>,
    resources: Vec<Value>,
    #[serde(rename = "resourceTemplates")]
    templates: Vec<Value>,
}

/// Where upstream `spec`'s last listing is kept under `dir`.
pub(super) fn path(dir: &Path, spec: &UpstreamSpec) -> PathBuf {
    let digest = hex::encode(Sha256::digest(format!("{:?}", spec.transport).as_bytes()));
    let name: String = spec.name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    dir.join("upstreams").join(format!("{name}-{}.json", &digest[..16]))
}

/// The lists kept for `spec`, if any (tools and prompts named as the upstream names them).
pub(super) fn load(dir: &Path, spec: &UpstreamSpec) -> Option<UpstreamLists> {
    let file = path(dir, spec);
    let text = match std::fs::read(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(target: "stowage::upstream", upstream = %spec.name, "cannot read its last catalog {}: {e}", file.display());
            return None;
        }
    };
    match serde_json::from_slice::<Saved>(&text) {
        Ok(s) => Some(UpstreamLists {
            name: spec.name.clone(),
            tools: s.tools,
            prompts: s.prompts,
            resources: s.resources,
            templates: s.templates,
            ..Default::default()
        }),
        Err(e) => {
            tracing::warn!(target: "stowage::upstream", upstream = %spec.name, "ignoring its last catalog {}: {e}", file.display());
            None
        }
    }
}

/// The JSON kept for `lists` (compared with what was last written, so an unchanged listing
/// is not written again).
pub(super) fn encode(spec: &UpstreamSpec, lists: &UpstreamLists) -> Vec<u8> {
    let saved = Saved {
        upstream: spec.describe(),
        tools: lists.tools.clone(),
        prompts: lists.prompts.clone(),
        resources: lists.resources.clone(),
        templates: lists.templates.clone(),
    };
    serde_json::to_vec_pretty(&saved).unwrap_or_default()
}

/// Writes `bytes` as `spec`'s last catalog: a private temp file renamed into place, so a
/// reader never sees half a file. Failures are logged; nothing depends on the file.
pub(super) fn store(dir: &Path, spec: &UpstreamSpec, bytes: &[u8]) {
    let file = path(dir, spec);
    let result = (|| -> std::io::Result<()> {
        let parent = file.parent().expect("a file under upstreams/");
        create_private_dir(parent)?;
        let mut tmp = tempfile::Builder::new().prefix(".catalog-").tempfile_in(parent)?;
        std::io::Write::write_all(&mut tmp, bytes)?;
        tmp.as_file().sync_all()?;
        tmp.persist(&file).map_err(|e| e.error)?;
        Ok(())
    })();
    if let Err(e) = result {
        tracing::warn!(target: "stowage::upstream", upstream = %spec.name, "cannot keep its catalog in {}: {e}", file.display());
    }
}

/// Creates `dir` (and its parents) owner-only, like the store's own directories; an existing
/// one keeps its mode. (tempfile makes its files 0600.)
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// The lists of an upstream that is down and was never listed: one tool that says so.
/// `prefix`: whether tool names get the server prefix (then the stand-in's own name is
/// [`STANDIN_TOOL`]; without it, it carries the server's name itself).
pub(super) fn standin(name: &str, reason: &str, prefix: bool, separator: &str) -> UpstreamLists {
    let tool = if prefix { STANDIN_TOOL.to_owned() } else { format!("{name}{separator}{STANDIN_TOOL}") };
    let def = json!({
        "name": tool,
        "title": format!("{name} is unavailable"),
        "description": format!(
            "MCP server {name} is not connected, so its tools are not listed ({reason}). Calling this tool reports why it is down; its tools appear once it starts."
        ),
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": true, "openWorldHint": false},
    });
    UpstreamLists { name: name.to_owned(), tools: vec![def], ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TransportSpec;
    use std::time::Duration;

    fn spec(name: &str, command: &str) -> UpstreamSpec {
        UpstreamSpec::new(name, TransportSpec::stdio(command, vec!["a".into()]), Duration::from_secs(1))
    }

    #[test]
    fn a_listing_is_kept_privately_read_back_and_tied_to_its_entry() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec("fx/../x", "node");
        assert!(load(dir.path(), &s).is_none());
        let lists = UpstreamLists {
            name: "fx".into(),
            tools: vec![json!({"name": "echo", "inputSchema": {"type": "object"}})],
            templates: vec![json!({"uriTemplate": "fx://{id}"})],
            ..Default::default()
        };
        store(dir.path(), &s, &encode(&s, &lists));
        let back = load(dir.path(), &s).unwrap();
        assert_eq!((back.tools, back.templates), (lists.tools.clone(), lists.templates.clone()));
        let file = path(dir.path(), &s);
        assert!(file.starts_with(dir.path().join("upstreams")) && file.file_name().unwrap().to_str().unwrap().starts_with("fx____x-"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(std::fs::metadata(file.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        }
        // Another command under the same name is another server: it inherits nothing.
        assert!(load(dir.path(), &spec("fx/../x", "python")).is_none());
        std::fs::write(&file, b"{not json").unwrap();
        assert!(load(dir.path(), &s).is_none(), "a broken file is ignored");
    }

    #[test]
    fn the_standin_says_which_server_is_down_and_why() {
        let l = standin("fx", "cannot run fx-server: No such file or directory", true, "_");
        assert_eq!(l.tools.len(), 1);
        assert_eq!(l.tools[0]["name"], "unavailable");
        let d = l.tools[0]["description"].as_str().unwrap();
        assert!(d.contains("MCP server fx is not connected") && d.contains("No such file"), "{d}");
        assert_eq!(standin("fx", "x", false, "__").tools[0]["name"], "fx__unavailable");
    }
}
