//! A store on disk is its owner's alone: directories 0700 and files 0600 (blobs, temp files,
//! the SQLite index and its WAL files) whatever the umask, another local account is refused a
//! read, and a store made with looser modes (by an older version, or by hand) is reported.
//!
//! Regression: with the usual umask 022 the store was created 0755 and its blobs and index
//! 0644, so any local account could read the PDFs and the index (tenants, users, session ids).
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use stowage_store::{ArtifactStore, FsStore, LooseEntry, PutOptions, PutStep};

/// Where the child of [`a_new_store_is_private_whatever_the_umask`] makes its store; the child
/// does nothing without it.
const CHILD_DIR_ENV: &str = "STOWAGE_PERMISSIONS_TEST_DIR";

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Every entry under `dir`, `dir` included, with its mode.
fn modes(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = vec![(dir.to_path_buf(), mode(dir))];
    if std::fs::symlink_metadata(dir).unwrap().is_dir() {
        let mut children: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        children.sort();
        for c in children {
            out.extend(modes(&c));
        }
    }
    out
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The child: makes a store under the umask its parent set, with a blob, a temp file left
/// by a "crashed" put, and the index's WAL files open, and prints every entry's mode.
#[test]
#[ignore = "the child half of a_new_store_is_private_whatever_the_umask"]
fn child_makes_a_store() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else { return };
    let dir = PathBuf::from(dir).join("nested").join("store");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let crash = Arc::new(AtomicBool::new(false));
        let hook = {
            let crash = crash.clone();
            Arc::new(move |step: PutStep| step == PutStep::AfterFsync && crash.load(Ordering::SeqCst))
        };
        let store = FsStore::builder(&dir).failpoints(hook).open().unwrap();
        store.put_bytes(Bytes::from_static(b"a private pdf"), PutOptions::default()).await.unwrap();
        crash.store(true, Ordering::SeqCst);
        store.put_bytes(Bytes::from_static(b"interrupted"), PutOptions::default()).await.unwrap_err();
        // The store is still open: index.sqlite-wal and -shm exist now.
        for (path, mode) in modes(&dir) {
            let name = path.strip_prefix(&dir).unwrap().display().to_string();
            println!("\nmode {mode:04o} {}", if name.is_empty() { "." } else { &name });
        }
        let report = FsStore::check_permissions(&dir).unwrap();
        println!("report: {report}");
    });
}

#[test]
fn a_new_store_is_private_whatever_the_umask() {
    for umask in ["022", "000", "027"] {
        let tmp = tempfile::tempdir().unwrap();
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "umask {umask} && exec \"$0\" --exact {} --ignored --nocapture --test-threads=1",
                crate::support::child_test(module_path!(), "child_makes_a_store")
            ))
            .arg(std::env::current_exe().unwrap())
            .env(CHILD_DIR_ENV, tmp.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "umask {umask}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        let entries: Vec<(&str, &str)> = stdout.lines().filter_map(|l| l.strip_prefix("mode ")?.split_once(' ')).collect();
        let names: Vec<&str> = entries.iter().map(|(_, n)| *n).collect();
        for want in [".", "blobs", "tmp", "index.sqlite", "index.sqlite-wal", "index.sqlite-shm"] {
            assert!(names.contains(&want), "umask {umask}: no {want:?} in {stdout}");
        }
        assert_eq!(names.iter().filter(|n| n.starts_with("tmp/put-")).count(), 1, "the crashed put's temp file: {stdout}");
        assert_eq!(names.iter().filter(|n| n.starts_with("tmp/owner-")).count(), 1, "the open store's owner lock: {stdout}");
        assert_eq!(names.iter().filter(|n| n.starts_with("blobs/") && n.len() > 9).count(), 1, "one blob: {stdout}");
        for (mode, name) in &entries {
            let is_dir = [".", "blobs", "tmp"].contains(name) || (name.starts_with("blobs/") && name.len() == 8);
            let want = if is_dir { "0700" } else { "0600" };
            assert_eq!(mode, &want, "umask {umask}: {name:?} in {stdout}");
        }
        assert!(stdout.contains("report: store ") && stdout.contains("is private to its owner"), "{stdout}");
    }
}

/// The uid and gid of `nobody`, when this process can become it (it runs as root and has
/// `setpriv`); `None` says why not.
fn nobody() -> Result<(String, String), String> {
    let run = |args: &[&str]| Command::new(args[0]).args(&args[1..]).output().ok().filter(|o| o.status.success());
    let id = |args: &[&str]| run(args).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if id(&["id", "-u"]).as_deref() != Some("0") {
        return Err("not running as root, so cannot run a command as another user".into());
    }
    let uid = id(&["id", "-u", "nobody"]).ok_or("this machine has no user `nobody`")?;
    let gid = id(&["id", "-g", "nobody"]).ok_or("this machine has no user `nobody`")?;
    run(&["setpriv", "--version"]).ok_or("setpriv (util-linux) is not installed")?;
    Ok((uid, gid))
}

/// `cat path` as `nobody`: its output, or the error it got.
fn read_as_nobody((uid, gid): &(String, String), path: &Path) -> Result<Vec<u8>, String> {
    let out = Command::new("setpriv")
        .args([&format!("--reuid={uid}"), &format!("--regid={gid}"), "--clear-groups", "cat"])
        .arg(path)
        .output()
        .unwrap();
    if out.status.success() { Ok(out.stdout) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

#[tokio::test]
async fn another_local_user_is_refused_a_read() {
    let user = match nobody() {
        Ok(user) => user,
        Err(why) => {
            eprintln!("skipped another_local_user_is_refused_a_read: {why}; a_new_store_is_private_whatever_the_umask checks the modes");
            return;
        }
    };
    // The store sits in a directory anyone may pass through, like a home directory at 0755:
    // only the store's own modes stand between another account and the bytes.
    let tmp = tempfile::tempdir().unwrap();
    set_mode(tmp.path(), 0o755);
    let control = tmp.path().join("public.txt");
    std::fs::write(&control, b"anyone may read this").unwrap();
    set_mode(&control, 0o644);
    assert_eq!(read_as_nobody(&user, &control).unwrap(), b"anyone may read this", "the harness can read as nobody at all");

    let dir = tmp.path().join("store");
    let store = FsStore::open(&dir, Default::default()).unwrap();
    let r = store.put_bytes(Bytes::from_static(b"%PDF-1.7 payroll"), PutOptions::default()).await.unwrap();
    let blob = dir.join("blobs").join(&r.sha256[..2]).join(&r.sha256);
    for path in [&blob, &dir.join("index.sqlite")] {
        let err = read_as_nobody(&user, path).unwrap_err();
        assert!(err.contains("Permission denied"), "{}: {err}", path.display());
    }
    // Even a blob whose own mode was opened up stays out of reach behind the 0700 directory.
    set_mode(&blob, 0o644);
    assert!(read_as_nobody(&user, &blob).unwrap_err().contains("Permission denied"));
}

#[tokio::test]
async fn a_loose_store_is_reported_and_left_as_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let r = {
        let store = FsStore::open(&dir, Default::default()).unwrap();
        store.put_bytes(Bytes::from_static(b"old"), PutOptions::default()).await.unwrap()
    };
    assert!(FsStore::check_permissions(&dir).unwrap().is_private());
    // What an older version under umask 022 left behind.
    let blob = dir.join("blobs").join(&r.sha256[..2]).join(&r.sha256);
    for (path, m) in [(&dir, 0o755), (&dir.join("blobs"), 0o755), (&blob, 0o644), (&dir.join("index.sqlite"), 0o644)] {
        set_mode(path, m);
    }
    let report = FsStore::check_permissions(&dir).unwrap();
    assert!(report.dir_open && !report.is_private(), "{report:?}");
    assert_eq!(report.loose_count, 4, "{report:?}");
    assert_eq!(report.loose[0], LooseEntry { path: dir.clone(), mode: 0o755 });
    assert!(report.loose.contains(&LooseEntry { path: blob.clone(), mode: 0o644 }), "{report:?}");
    let line = report.to_string();
    assert!(line.contains("readable by other local users") && line.contains(&format!("chmod -R go= {}", dir.display())), "{line}");

    // Opening it again changes nothing that exists, but what it creates now is private.
    let store = FsStore::open(&dir, Default::default()).unwrap();
    let new = store.put_bytes(Bytes::from_static(b"new"), PutOptions::default()).await.unwrap();
    assert_eq!((mode(&dir), mode(&blob)), (0o755, 0o644));
    assert_eq!(mode(&dir.join("blobs").join(&new.sha256[..2])), 0o700);
    assert_eq!(mode(&dir.join("blobs").join(&new.sha256[..2]).join(&new.sha256)), 0o600);

    // Not a store at all: a clear error naming the path.
    let e = FsStore::check_permissions(tmp.path().join("missing")).unwrap_err().to_string();
    assert!(e.contains("check store permissions") && e.contains("missing") && !e.contains('\n'), "{e}");
}
