//! The shipped binary carries no test hooks: `Gateway::inject_panic` (a tool's calls panic on
//! purpose) and the store's failpoints (a put stops half-way, as in a crash) exist only with
//! the `test-hooks` feature of stowage-mcp and stowage-store, and the build of `stowage`
//! (`cargo build --release -p stowage`, `cargo install`) must not turn it on.
//!
//! Building a release binary here would cost minutes, and the test binaries' own build has the
//! hooks on (every crate's dev-dependencies are built together), so the check asks Cargo's
//! feature resolver instead: `cargo tree` without dev edges resolves exactly the features a
//! plain build of the `stowage` package compiles. Without the feature the hooks are not
//! compiled at all (`#[cfg(feature = "test-hooks")]`), so no flag, input or environment
//! variable can reach them.

use std::collections::BTreeMap;
use std::process::Command;

const HOOKED: [&str; 2] = ["stowage-mcp", "stowage-store"];

/// `cargo tree` of `packages` (`-p stowage`, `--workspace`) with the given edges: each
/// package's name and its enabled features.
fn features(packages: &[&str], edges: &str) -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--locked", "--offline"])
        .args(packages)
        .args(["-e", edges, "--prefix", "none", "--format", "{p}|{f}"])
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut map = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let (package, feats) = line.split_once('|').unwrap_or((line, ""));
        let name = package.split_whitespace().next().unwrap_or_default().to_owned();
        let list = feats.split(',').filter(|f| !f.is_empty()).map(str::to_owned);
        map.entry(name).or_insert_with(Vec::new).extend(list);
    }
    map
}

#[test]
fn the_stowage_binary_is_built_without_test_hooks() {
    let shipped = features(&["-p", "stowage"], "normal,build");
    for krate in HOOKED {
        let on = shipped.get(krate).unwrap_or_else(|| panic!("{krate} is not in the stowage binary's build: {shipped:?}"));
        assert!(!on.iter().any(|f| f == "test-hooks"), "the stowage binary's build turns on {krate}'s test hooks: {on:?}");
    }
    // The name checked is the one the tests use: the workspace's test build (every crate with
    // its dev-dependencies, as scripts/test builds it) turns it on.
    let tested = features(&["--workspace"], "normal,build,dev");
    for krate in HOOKED {
        assert!(tested[krate].iter().any(|f| f == "test-hooks"), "{krate}'s tests no longer turn on `test-hooks`: {:?}", tested[krate]);
    }
}
