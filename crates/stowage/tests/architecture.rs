//! ARCHITECTURE.md's crate table against the code: every workspace crate has a row, and the
//! crates a row says it depends on are exactly those its `Cargo.toml` names (the workspace's
//! own crates; for a row that lists its external dependencies too, all of them). A table that
//! allows what the code no longer uses, or misses what it now uses, fails here. And inside each
//! crate, modules import each other in one direction only ("Who may import whom"). And the
//! document stays a map: at most 40,000 bytes, and every repository path its "Entry points"
//! name exists, so a newcomer who follows one lands on a file.

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

/// The most ARCHITECTURE.md may weigh, in bytes: past it the map turns back into a copy of
/// the code, which each file's `//!` doc already describes.
const MAX_ARCHITECTURE_BYTES: usize = 40_000;

#[test]
fn the_architecture_map_is_at_most_forty_kilobytes() {
    let len = std::fs::read(root().join("ARCHITECTURE.md")).unwrap().len();
    assert!(
        len <= MAX_ARCHITECTURE_BYTES,
        "ARCHITECTURE.md is {len} bytes, over {MAX_ARCHITECTURE_BYTES}: keep it a map and move per-file detail into that file's doc"
    );
}

/// The repository paths written in backticks in ARCHITECTURE.md's "Entry points" section:
/// those under one of the repository's top-level directories, patterns with a `<placeholder>`
/// aside.
fn entry_point_paths() -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = doc.split_once("\n## Entry points\n").expect("ARCHITECTURE.md has a `## Entry points` section").1;
    let section = section.split("\n## ").next().unwrap();
    let tops = ["crates/", "examples/", "scripts/", "docs/", "fuzz/", ".ci/"];
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| tops.iter().any(|top| t.starts_with(top)) && !t.contains('<'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_path_the_entry_points_name_exists() {
    let paths = entry_point_paths();
    assert!(paths.len() >= 20, "ARCHITECTURE.md's entry points name only {} repository paths: {paths:?}", paths.len());
    let missing: Vec<&String> = paths.iter().filter(|p| !root().join(p).exists()).collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md's entry points name paths that do not exist (moved or renamed?): {missing:?}");
}

/// A crate's modules, one per file (`a/mod.rs` and `a.rs` are `a`, `lib.rs` and `main.rs` the
/// root), each with its source up to its unit tests.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, src, out);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|l| l == "mod") || parts == ["lib"] || parts == ["main"] {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            let code: String = text.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n");
            out.insert(parts.join("::"), code);
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The paths `code` names through `crate::`, `super::` or `self::`, with `{a, b::c}` groups
/// expanded (to their first segment: enough to find the module).
fn paths(code: &str) -> Vec<Vec<String>> {
    fn ident(s: &[u8], mut i: usize) -> usize {
        while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
            i += 1;
        }
        i
    }
    /// Reads `seg::seg::…` from `i` into `prefix`; a `{…}` group adds one path per item.
    fn read(s: &[u8], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        loop {
            if s.get(i) == Some(&b'{') {
                let (mut depth, mut start) = (0, i + 1);
                for j in i..s.len() {
                    match s[j] {
                        b'{' => depth += 1,
                        b'}' | b',' if depth == 1 => {
                            let item = std::str::from_utf8(&s[start..j]).unwrap().trim();
                            let first = item.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("");
                            if !first.is_empty() && first != "self" {
                                out.push([prefix.clone(), vec![first.to_owned()]].concat());
                            }
                            start = j + 1;
                            if s[j] == b'}' {
                                return;
                            }
                        }
                        b'}' => depth -= 1,
                        _ => {}
                    }
                }
                return;
            }
            let end = ident(s, i);
            if end == i {
                break;
            }
            prefix.push(std::str::from_utf8(&s[i..end]).unwrap().to_owned());
            i = end;
            if s[i..].starts_with(b"::") {
                i += 2;
            } else {
                break;
            }
        }
        out.push(prefix);
    }
    let s = code.as_bytes();
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if at > 0 && (s[at - 1].is_ascii_alphanumeric() || s[at - 1] == b'_' || s[at - 1] == b':') {
                continue;
            }
            read(s, at + start.len(), vec![start.trim_end_matches(':').to_owned()], &mut out);
        }
    }
    out
}

/// Which modules of a crate each module imports: a path is resolved to the longest module it
/// names; imports of a module's own ancestors (its parents' items) and descendants do not
/// count, nor does anything named only through a re-export.
fn imports(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let nested =
        |a: &str, b: &str| a.is_empty() || b.is_empty() || a == b || b.starts_with(&format!("{a}::")) || a.starts_with(&format!("{b}::"));
    let mut out = BTreeMap::new();
    for (name, code) in mods {
        let here: Vec<&str> = if name.is_empty() { vec![] } else { name.split("::").collect() };
        let mut to = BTreeSet::new();
        for path in paths(code) {
            let (mut base, mut rest): (Vec<&str>, &[String]) = (vec![], &path[1..]);
            match path[0].as_str() {
                "crate" => {}
                "self" => base = here.clone(),
                _ => {
                    base = here[..here.len().saturating_sub(1)].to_vec();
                    while rest.first().is_some_and(|s| s == "super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                }
            }
            let mut found = None;
            for n in 0..=rest.len() {
                let cand: Vec<&str> = base.iter().copied().chain(rest[..n].iter().map(String::as_str)).collect();
                if mods.contains_key(&cand.join("::")) {
                    found = Some(cand.join("::"));
                }
            }
            if let Some(m) = found.filter(|m| !nested(name, m)) {
                to.insert(m);
            }
        }
        out.insert(name.clone(), to);
    }
    out
}

/// Import circles between modules that are not nested in one another: the groups of modules
/// (two or more) that reach each other.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![from.to_owned()]);
        while let Some(m) = todo.pop() {
            for n in graph.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let all: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (m, r) in &all {
        let group: BTreeSet<String> = r.iter().filter(|n| all.get(n).is_some_and(|back| back.contains(*m))).cloned().collect();
        if group.len() > 1 && !out.contains(&group) {
            out.push(group);
        }
    }
    out
}

/// The circles left on purpose, each with why; nothing else may close a circle.
const KNOWN_CIRCLES: &[(&str, &[&str], &str)] = &[];

#[test]
fn modules_import_each_other_in_one_direction() {
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let krate = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !dir.join("src").is_dir() {
            continue;
        }
        for circle in circles(&imports(&modules(&dir.join("src")))) {
            // A known circle may shrink (someone is breaking it), never grow.
            let known = KNOWN_CIRCLES.iter().any(|(k, mods, _)| *k == krate && circle.iter().all(|m| mods.contains(&m.as_str())));
            if !known {
                wrong.push(format!("{krate}: {}", circle.iter().cloned().collect::<Vec<_>>().join(" <-> ")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "modules that import each other (give the pair one direction; ARCHITECTURE.md, \"Who may import whom\"):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_import_check_sees_a_circle() {
    let mods: BTreeMap<String, String> = [
        ("".to_owned(), "mod a; mod b;".to_owned()),
        ("a".to_owned(), "use crate::b::Thing;".to_owned()),
        ("b".to_owned(), "use super::{a::Other, c};".to_owned()),
        ("c".to_owned(), "fn f() { self::x(); crate::a::y(); }".to_owned()),
    ]
    .into();
    let graph = imports(&mods);
    assert_eq!(graph["a"], ["b".to_owned()].into());
    assert_eq!(graph["b"], ["a".to_owned(), "c".to_owned()].into());
    assert_eq!(circles(&graph), vec![BTreeSet::from(["a".to_owned(), "b".to_owned(), "c".to_owned()])]);
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

/// What a reference in code must not be: a project issue number or a document outside the
/// repository (the first element names it in the failure). Built from parts so that this file
/// does not match itself.
const OUTSIDE: &[(&str, &str)] = &[
    (concat!("seed", " rfc"), "a document outside the repository"),
    (concat!("seeds", "/"), "a document outside the repository"),
    (concat!("planner", " rfc"), "a document outside the repository"),
    (concat!("peers", ".md"), "a document outside the repository"),
    (concat!("design", ".md"), "a document outside the repository"),
    (concat!("..", "/shared"), "a document outside the repository"),
];

/// Why `line` points outside the repository, if it does: a listed needle, an issue number
/// (the word, a space, an optional `#`, digits) or an appendix letter (the word, a space, one
/// letter that ends a word). Public specs (RFC 9112, SEP-1699, URLs) are not matched.
fn outside_reference(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    if let Some((_, why)) = OUTSIDE.iter().find(|(needle, _)| lower.contains(needle)) {
        return Some(why);
    }
    let starts_word = |at: usize| !lower[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
    let issue = concat!("iss", "ue ");
    for (at, _) in lower.match_indices(issue) {
        let rest = lower[at + issue.len()..].trim_start_matches('#');
        if starts_word(at) && rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Some("an issue number (say the fact, or name the README/ARCHITECTURE/BENCHMARKS section)");
        }
    }
    let appendix = concat!("appen", "dix ");
    for (at, _) in lower.match_indices(appendix) {
        let mut rest = lower[at + appendix.len()..].chars();
        if rest.next().is_some_and(|c| c.is_ascii_lowercase()) && !rest.next().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return Some("an appendix of a document outside the repository");
        }
    }
    None
}

/// The source files under `dir` a reader meets (`.rs`, `.py`, `.sh`, `.js`, `.toml`, …, and
/// extensionless scripts when `scripts` is set); build output and vendored third-party code
/// aside.
fn sources(dir: &Path, scripts: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !["target", "node_modules", "vendor"].contains(&name.as_str()) {
                sources(&path, scripts, out);
            }
            continue;
        }
        let ext = path.extension().map(|e| e.to_string_lossy().into_owned());
        let ours = match ext.as_deref() {
            Some(e) => ["rs", "py", "sh", "js", "mjs", "html", "css", "sql", "toml", "yml"].contains(&e),
            None => scripts && std::fs::read(&path).is_ok_and(|b| b.starts_with(b"#!")),
        };
        if ours {
            out.push(path);
        }
    }
}

/// ARCHITECTURE.md, "Who may import whom": references in code, tests, benches, scripts and
/// fixtures point only at files in this repository. A project issue number or a section of a
/// document kept elsewhere means nothing to a reader of a clone; say the fact, or name the
/// README, ARCHITECTURE.md or BENCHMARKS.md section that explains it.
#[test]
fn code_refers_only_to_files_in_the_repository() {
    let mut files = Vec::new();
    for (dir, scripts) in [("crates", false), ("scripts", true), ("fuzz", false), (".ci", true)] {
        sources(&root().join(dir), scripts, &mut files);
    }
    assert!(files.len() > 100, "found only {} source files under {}", files.len(), root().display());
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (n, line) in text.lines().enumerate() {
            if let Some(why) = outside_reference(line) {
                let rel = file.strip_prefix(root()).unwrap_or(file);
                wrong.push(format!("{}:{}: {why}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "references that point outside the repository:\n{}", wrong.join("\n"));
}

#[test]
fn the_reference_check_tells_outside_documents_from_public_specs() {
    let issue = concat!("Iss", "ue");
    for bad in [
        format!("/// {issue} 26: the gateway's memory"),
        format!("// ({} #14)", issue.to_lowercase()),
        format!("//! the read policy (Seed {}", "RFC §3.5)"),
        format!("# see {}", concat!("../sha", "red/DES", "IGN.md")),
        format!("\"\"\"the {} events\"\"\"", concat!("Appen", "dix B")),
    ] {
        assert!(outside_reference(&bad).is_some(), "not caught: {bad}");
    }
    for good in [
        "//! (RFC 9112 §3.2): more than one `Host` header",
        "// SEP-1699: the server may close the SSE stream",
        "fn pattern(len: usize, seed: u8) -> Vec<u8> {",
        "let tissue = 5; // reissue 3 times",
        "//! (an example is provided in the appendix below)",
        "// issues 26 and 30 are named in BENCHMARKS.md, not here",
    ] {
        assert!(outside_reference(good).is_none(), "wrongly caught: {good}");
    }
}

/// The longest a shipped function body may be, in lines: past it a reader holds too much at
/// once, and a phase with a name of its own wants to be a function (ARCHITECTURE.md,
/// "Invariants").
const MAX_FUNCTION_LINES: usize = 120;

/// `code` with string, char and comment contents blanked (newlines kept), so braces inside
/// them do not count: `"{"`, `'}'`, `r#"{"#`, `// {`. Lifetimes (`'a`) are left alone.
fn blank_literals(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    let keep_newlines = |s: &[u8], out: &mut String| s.iter().for_each(|&c| out.push(if c == b'\n' { '\n' } else { ' ' }));
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            i + 2 + rest[2..].windows(2).position(|w| w == b"*/").map_or(rest.len() - 2, |p| p + 2)
        } else if (rest.starts_with(b"r#") || rest.starts_with(b"r\"") || rest.starts_with(b"br"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let start = if rest[0] == b'b' { 2 } else { 1 };
            let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(start + hashes) != Some(&b'"') {
                out.push(b[i] as char);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let body = start + hashes + 1;
            i + body + rest[body..].windows(close.len()).position(|w| w == close.as_slice()).map_or(rest.len() - body, |p| p + close.len())
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            i + (j + 1).min(rest.len())
        } else if rest[0] == b'\'' && (rest.get(2) == Some(&b'\'') || rest.get(1) == Some(&b'\\')) {
            // A char literal ('{', '\n', '\u{7f}'); a lifetime has no closing quote this near.
            let j = rest[2..].iter().position(|&c| c == b'\'').map_or(rest.len(), |p| p + 3);
            i + j
        } else {
            out.push(b[i] as char);
            i += 1;
            continue;
        };
        keep_newlines(&b[i..end], &mut out);
        i = end;
    }
    out
}

/// Every `fn` with a body in `code` outside `#[cfg(test)]` modules: its name, first line and
/// length in lines.
fn function_lengths(code: &str) -> Vec<(String, usize, usize)> {
    let text = blank_literals(code);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut test_module_until = 0;
    for (n, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if n < test_module_until {
            continue;
        }
        if t.starts_with("#[cfg(test)]") {
            // The item after it (a test module or helper) ships in no binary.
            if let Some(end) = block_end(&lines, n + 1) {
                test_module_until = end + 1;
            }
            continue;
        }
        let Some(at) = t.find("fn ") else { continue };
        let before = &t[..at];
        let words_ok =
            before.split_whitespace().all(|w| ["pub", "async", "const", "unsafe", "extern", "\"C\""].contains(&w) || w.starts_with("pub("));
        if !words_ok {
            continue;
        }
        let name: String = t[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue;
        }
        if let Some(end) = block_end(&lines, n) {
            out.push((name, n + 1, end - n + 1));
        }
    }
    out
}

/// The line where the block opened at or after line `from` closes; None for a declaration
/// that ends in `;` before any `{`.
fn block_end(lines: &[&str], from: usize) -> Option<usize> {
    let mut depth = 0i64;
    let mut opened = false;
    for (k, line) in lines.iter().enumerate().skip(from) {
        for c in line.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                ';' if !opened && depth == 0 => return None,
                _ => {}
            }
            if opened && depth == 0 {
                return Some(k);
            }
        }
    }
    None
}

/// ARCHITECTURE.md, "Invariants": no shipped function is over `MAX_FUNCTION_LINES` lines.
#[test]
fn no_shipped_function_is_over_the_line_limit() {
    let mut files = Vec::new();
    sources(&root().join("crates"), false, &mut files);
    let shipped: Vec<_> = files
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .filter(|f| f.components().any(|c| c.as_os_str() == "src"))
        .filter(|f| !f.to_string_lossy().contains("stowage-testkit"))
        .collect();
    let mut long = Vec::new();
    for file in &shipped {
        let code = std::fs::read_to_string(file).unwrap();
        let rel = file.strip_prefix(root()).unwrap_or(file).to_string_lossy().replace('\\', "/");
        for (name, line, len) in function_lengths(&code) {
            if len > MAX_FUNCTION_LINES {
                long.push(format!("{rel}:{line}: fn {name} is {len} lines"));
            }
        }
    }
    assert!(long.is_empty(), "functions over {MAX_FUNCTION_LINES} lines (split them where a phase has a name):\n{}", long.join("\n"));
}

#[test]
fn the_length_check_counts_braces_in_code_only() {
    let code = "fn a() {\n    let s = \"{{{\";\n    let c = '{';\n    // }\n    let r = r#\"}\"#;\n    x::<'a>();\n}\nfn b();\n#[cfg(test)]\nmod tests {\n    fn t() {\n    }\n}\npub(crate) async fn c() { }\n";
    let got = function_lengths(code);
    assert_eq!(got, vec![("a".to_owned(), 1, 7), ("c".to_owned(), 14, 1)]);
}

/// The five wire codes every layer shares are spelled once, in `stowage_core::ErrorCode`:
/// shipped code names the variant, so a typo cannot become a code no client knows.
#[test]
fn each_shared_wire_code_is_spelled_once() {
    let codes = ["bad_request", "artifact_not_found", "artifact_forbidden", "artifact_url_expired", "artifact_storage_failed"];
    let mut files = Vec::new();
    sources(&root().join("crates"), false, &mut files);
    let home = root().join("crates/stowage-core/src/error.rs");
    let mut spelled = Vec::new();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "rs") && f.components().any(|c| c.as_os_str() == "src")) {
        let code = std::fs::read_to_string(file).unwrap();
        // Test modules check what the wire says, in its own words.
        let shipped = code.split("#[cfg(test)]\nmod tests").next().unwrap();
        for (n, line) in shipped.lines().enumerate() {
            let line = line.split("//").next().unwrap();
            if line.contains("assert") {
                continue; // a check states what the wire says, in its words
            }
            for c in codes {
                if line.contains(&format!("\"{c}\"")) && *file != home {
                    let rel = file.strip_prefix(root()).unwrap_or(file);
                    spelled.push(format!("{}:{}: \"{c}\" (use ErrorCode)", rel.display(), n + 1));
                }
            }
        }
    }
    assert!(spelled.is_empty(), "wire codes spelled outside stowage_core::ErrorCode:\n{}", spelled.join("\n"));
}

/// ARCHITECTURE.md, "Invariants": a gateway is built whole by `GatewayBuilder`; nothing in its
/// core is set late through a `OnceLock` (a setter that ignores its second call).
#[test]
fn the_gateway_core_sets_nothing_late() {
    let mut files = Vec::new();
    sources(&root().join("crates/stowage-mcp/src/gateway"), false, &mut files);
    assert!(files.len() > 5, "the gateway core is crates/stowage-mcp/src/gateway/");
    let late: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).unwrap().contains("OnceLock"))
        .map(|f| f.strip_prefix(root()).unwrap_or(f).display().to_string())
        .collect();
    assert!(late.is_empty(), "OnceLock in the gateway core (give it to GatewayBuilder instead): {}", late.join(", "));
}

/// ARCHITECTURE.md, "Invariants": `Gateway`'s state is a few named parts (lists, clients,
/// parts, lifecycle), each a struct with its fields documented, not one flat struct that
/// every concern reaches into.
#[test]
fn the_gateway_is_a_few_named_parts() {
    let text = std::fs::read_to_string(root().join("crates/stowage-mcp/src/gateway/mod.rs")).unwrap();
    let start = text.find("pub struct Gateway {").expect("Gateway is defined in the gateway core's mod.rs");
    let body = &text[start..start + text[start..].find("\n}\n").expect("the struct ends")];
    let fields: Vec<&str> =
        body.lines().skip(1).map(str::trim).filter(|l| !l.starts_with("//") && !l.starts_with("#[") && l.contains(':')).collect();
    assert!((2..=8).contains(&fields.len()), "Gateway has {} fields (at most 8):\n{}", fields.len(), fields.join("\n"));
}

/// ARCHITECTURE.md, "`stowage serve`'s wiring": the binary builds its gateway in one place
/// (`wiring::gateway`, for `serve`, `agent` and `check-config --tools` alike) and reads the
/// link-signing keys in one place (`wiring::Keys`), so the commands cannot drift apart.
#[test]
fn the_binary_builds_its_gateway_and_reads_its_keys_in_one_place() {
    let mut files = Vec::new();
    sources(&root().join("crates/stowage/src"), false, &mut files);
    let wiring = root().join("crates/stowage/src/wiring.rs");
    assert!(files.contains(&wiring), "the binary's wiring is crates/stowage/src/wiring.rs");
    for needle in ["Gateway::builder(", ".key_ring("] {
        let outside: Vec<String> = files
            .iter()
            .filter(|f| **f != wiring && blank_literals(&std::fs::read_to_string(f).unwrap()).contains(needle))
            .map(|f| f.strip_prefix(root()).unwrap_or(f).display().to_string())
            .collect();
        assert!(outside.is_empty(), "{needle} outside crates/stowage/src/wiring.rs: {}", outside.join(", "));
        let inside = blank_literals(&std::fs::read_to_string(&wiring).unwrap()).matches(needle).count();
        assert_eq!(inside, 1, "{needle} is written once in wiring.rs");
    }
}
