//! ARCHITECTURE.md's crate table against the code: every workspace crate has a row, and the
//! crates a row says it depends on are exactly those its `Cargo.toml` names (the workspace's
//! own crates; for a row that lists its external dependencies too, all of them). A table that
//! allows what the code no longer uses, or misses what it now uses, fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

/// Every workspace package's name and its normal and build dependencies.
fn manifests() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for dir in ["crates", "examples"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let manifest = entry.unwrap().path().join("Cargo.toml");
            let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
            let doc: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
            let Some(name) = doc.get("package").and_then(|p| p.get("name")).and_then(|n| n.as_str()) else { continue };
            let deps = ["dependencies", "build-dependencies"]
                .iter()
                .filter_map(|k| doc.get(*k).and_then(|d| d.as_table()))
                .flat_map(|t| t.keys().cloned())
                .collect();
            out.insert(name.to_owned(), deps);
        }
    }
    out
}

/// The names in backticks in `cell`.
fn ticked(cell: &str) -> BTreeSet<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The crate table: each row's crate, what it says the crate depends on, and whether the row
/// lists external dependencies too.
fn table() -> BTreeMap<String, (BTreeSet<String>, bool)> {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut rows = doc.lines().skip_while(|l| !l.starts_with("| crate | responsibility | depends on")).skip(2);
    let mut out = BTreeMap::new();
    for line in rows.by_ref().take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        assert_eq!(cells.len(), 3, "a crate table row is `| crate | responsibility | depends on |`: {line}");
        let name = cells[0].split('`').nth(1).unwrap_or_else(|| panic!("no crate name in {line}")).to_owned();
        out.insert(name, (ticked(cells[2]), cells[2].contains("external:")));
    }
    assert!(!out.is_empty(), "ARCHITECTURE.md has no crate table headed `| crate | responsibility | depends on …`");
    out
}

#[test]
fn the_crate_table_says_what_each_crate_depends_on() {
    let manifests = manifests();
    let table = table();
    let mut wrong = Vec::new();
    for (name, deps) in &manifests {
        let Some((said, external)) = table.get(name) else {
            wrong.push(format!("{name}: no row in the crate table"));
            continue;
        };
        let actual: BTreeSet<String> =
            if *external { deps.clone() } else { deps.iter().filter(|d| d.starts_with("stowage")).cloned().collect() };
        let said: BTreeSet<String> =
            if *external { said.clone() } else { said.iter().filter(|d| d.starts_with("stowage")).cloned().collect() };
        for missing in actual.difference(&said) {
            wrong.push(format!("{name} depends on {missing}, which its row does not name"));
        }
        for gone in said.difference(&actual) {
            wrong.push(format!("{name}'s row names {gone}, which its Cargo.toml does not"));
        }
    }
    for name in table.keys().filter(|n| !manifests.contains_key(*n)) {
        wrong.push(format!("the table has a row for {name}, which is not a workspace crate"));
    }
    assert!(wrong.is_empty(), "ARCHITECTURE.md's crate table is out of date:\n{}", wrong.join("\n"));
}

#[test]
fn dependencies_point_inward() {
    // The leaves know nothing of the crates above them.
    let m = manifests();
    let uses = |a: &str, b: &str| m[a].contains(b);
    for leaf in ["stowage-core", "stowage-media", "stowage-demo"] {
        assert!(m[leaf].iter().all(|d| !d.starts_with("stowage")), "{leaf} is a leaf: {:?}", m[leaf]);
    }
    for lower in ["stowage-store", "stowage-transform", "stowage-links", "stowage-http"] {
        for upper in ["stowage-mcp", "stowage-agent", "stowage-playground", "stowage"] {
            assert!(!uses(lower, upper), "{lower} must not depend on {upper}");
        }
    }
    assert!(
        !uses("stowage-store", "stowage-transform") && !uses("stowage-transform", "stowage-store"),
        "the store and the pipeline meet only in the binary"
    );
    assert!(
        !uses("stowage-mcp", "stowage-agent") && !uses("stowage-mcp", "stowage-playground"),
        "the gateway knows nothing of its callers"
    );
    for shipped in m.keys().filter(|n| *n != "stowage-testkit") {
        assert!(!uses(shipped, "stowage-testkit"), "{shipped} ships test support");
    }
}

/// The modules of `crate::…` that the code of `file` imports (comments and `#[cfg(test)]`
/// parts aside; a `tests.rs` file is all test code).
fn file_imports(file: &Path) -> BTreeSet<String> {
    if file.extension().is_none_or(|e| e != "rs") || file.file_name().is_some_and(|n| n == "tests.rs") {
        return BTreeSet::new();
    }
    let text = std::fs::read_to_string(file).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap();
    let mut out = BTreeSet::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for part in line.split("crate::").skip(1) {
            out.insert(part.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect());
        }
    }
    out
}

/// What the files at `path` (a file, or a directory read recursively) import, each module
/// with the first file that does.
fn crate_imports(path: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            for (m, p) in crate_imports(&entry.unwrap().path()) {
                out.entry(m).or_insert(p);
            }
        }
    } else {
        out.extend(file_imports(path).into_iter().map(|m| (m, path.to_owned())));
    }
    out
}

/// ARCHITECTURE.md, "Who may import whom" in the gateway crate: the upstream layer (the
/// transports and connections) knows nothing of the gateway above it. It hands what upstreams
/// say up through its own `Uplink` trait and `Initiated` queue, which the gateway implements
/// and reads, so routing, sessions' bookkeeping and events import it, never the other way.
#[test]
fn the_upstream_layer_imports_nothing_of_the_gateway_above_it() {
    let allowed = ["config", "cpu_pool", "framing", "jsonrpc", "session"];
    let imports = crate_imports(&root().join("crates/stowage-mcp/src/upstream"));
    let wrong: Vec<String> =
        imports.iter().filter(|(m, _)| !allowed.contains(&m.as_str())).map(|(m, p)| format!("crate::{m} in {}", p.display())).collect();
    assert!(wrong.is_empty(), "the upstream layer may import only {allowed:?}: {wrong:?}");
}

/// A crate's top-level modules (under `src`) and the modules of the same crate each imports.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let mut graph: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let imports = graph.entry(name.clone()).or_default();
        for (m, p) in crate_imports(&path) {
            if m != name {
                imports.entry(m).or_insert(p);
            }
        }
    }
    graph
}

/// A cycle among `graph`'s modules, if there is one, as the path around it.
fn a_cycle(graph: &BTreeMap<String, BTreeMap<String, PathBuf>>) -> Option<Vec<String>> {
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<String, BTreeMap<String, PathBuf>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == m) {
            return Some(path[at..].iter().chain([&m]).map(|s| (*s).to_owned()).collect());
        }
        if done.contains(m) {
            return None;
        }
        path.push(m);
        for next in graph[m].keys().filter(|n| graph.contains_key(*n)) {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(m);
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

/// ARCHITECTURE.md, "Who may import whom": within every crate, imports between its top-level
/// modules point one way; no module reaches back, through others, to one that imports it.
#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let graph = module_graph(&src);
        if let Some(cycle) = a_cycle(&graph) {
            let how: Vec<String> =
                cycle.windows(2).map(|w| format!("{} imports {} ({})", w[0], w[1], graph[&w[0]][&w[1]].display())).collect();
            panic!("an import circle in {}: {}", src.display(), how.join("; "));
        }
    }
}
