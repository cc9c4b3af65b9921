//! Owner-only permissions for a store on disk, and the check that finds looser ones.
//!
//! A store holds other people's documents and, in its index, tenants, users and session ids
//! (with a session id, a loopback gateway hands out links). So everything the store creates
//! is for its owner alone: directories 0700, files 0600 (blobs, temp files, the SQLite index
//! and, because SQLite gives them the database file's mode, its `-wal` and `-shm` files).
//!
//! The modes are set explicitly, never left to the umask: a file or directory is created
//! with the owner-only mode (the umask can only take bits away, so it is never more open than
//! that, even for a moment) and then set to exactly that mode, so a umask that strips the
//! owner's own bits cannot break the store either. What already exists is left alone (an
//! operator may have chosen to share it); [`check`] reports it instead, and the binary warns.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Mode of every directory the store creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file the store creates.
pub const FILE_MODE: u32 = 0o600;

/// How many loose entries a [`PermissionReport`] names; the rest are only counted (a store
/// made by an older version may have a hundred thousand 0644 blobs).
const MAX_NAMED: usize = 10;

/// Creates `dir` (not its parents) owner-only. Returns whether it was created; an existing
/// directory keeps its mode.
pub(crate) fn create_dir(dir: &Path) -> io::Result<bool> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    match builder.create(dir) {
        Ok(()) => {
            set_mode(dir, DIR_MODE)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Creates `dir` owner-only, and its missing parents the usual way (they are not the store's:
/// `/srv/data` in `/srv/data/.stowage` may well be shared).
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<bool> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    create_dir(dir)
}

/// Options that create a new file owner-only (`create_new`, write).
pub(crate) fn new_file_options() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    options
}

/// Sets a file the store just created to exactly [`FILE_MODE`], whatever the umask did.
pub(crate) fn set_file_mode(file: &File) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

/// Creates `path` as an empty owner-only file unless it exists. SQLite then opens the file we
/// made instead of creating one with its default 0644, and gives its `-wal` and `-shm` files
/// the same mode as this one.
pub(crate) fn precreate_file(path: &Path) -> io::Result<()> {
    match new_file_options().open(path) {
        Ok(file) => set_file_mode(&file),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
    Ok(())
}

/// A store entry whose mode gives its group or other users some access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LooseEntry {
    /// The entry, inside the store directory.
    pub path: PathBuf,
    /// The permission bits (`0o644`).
    pub mode: u32,
}

/// What [`crate::FsStore::check_permissions`] found: every entry of the store (the directory
/// itself, the index and its WAL files, `links.key`, blob and temp directories and files)
/// whose mode lets group or others read, write or enter it.
///
/// A loose file inside an owner-only directory cannot be reached by others today, but it is
/// still reported: it is exposed the moment the directory is opened up, and it says the store
/// was made by an older version or copied with its modes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermissionReport {
    /// The store directory checked.
    pub dir: PathBuf,
    /// The first loose entries found (at most ten), the store directory first.
    pub loose: Vec<LooseEntry>,
    /// How many loose entries there are in all.
    pub loose_count: u64,
    /// Whether the store directory itself lets group or others in (read or search), so that
    /// loose files inside are readable by other local users right now.
    pub dir_open: bool,
}

impl PermissionReport {
    /// True when nothing in the store gives group or others any access.
    pub fn is_private(&self) -> bool {
        self.loose_count == 0
    }
}

/// One line for a log or a terminal: what is loose and the command that fixes it.
impl std::fmt::Display for PermissionReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_private() {
            return write!(f, "store {} is private to its owner", self.dir.display());
        }
        let reach = if self.dir_open { "readable by other local users" } else { "not owner-only" };
        write!(f, "store {} is {reach}: {} entries give group or others access", self.dir.display(), self.loose_count)?;
        if let Some(first) = self.loose.first() {
            write!(f, " (e.g. {} is {:04o})", first.path.display(), first.mode)?;
        }
        write!(f, "; run `chmod -R go= {}` to make it private", self.dir.display())
    }
}

/// Walks the store at `dir` and reports loose modes. Symbolic links are not followed (the
/// store never makes any); entries that vanish during the walk (a put or gc running) are
/// skipped.
pub(crate) fn check(dir: &Path) -> io::Result<PermissionReport> {
    let mut report = PermissionReport { dir: dir.to_path_buf(), ..Default::default() };
    #[cfg(unix)]
    {
        let meta = std::fs::symlink_metadata(dir)?;
        if !meta.is_dir() {
            return Err(io::Error::new(io::ErrorKind::NotADirectory, "not a directory"));
        }
        let mode = mode_of(&meta);
        report.dir_open = mode & 0o055 != 0;
        walk(dir, meta, &mut report)?;
    }
    Ok(report)
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777
}

#[cfg(unix)]
fn walk(path: &Path, meta: std::fs::Metadata, report: &mut PermissionReport) -> io::Result<()> {
    let mode = mode_of(&meta);
    if mode & 0o077 != 0 {
        report.loose_count += 1;
        if report.loose.len() < MAX_NAMED {
            report.loose.push(LooseEntry { path: path.to_path_buf(), mode });
        }
    }
    if !meta.is_dir() {
        return Ok(());
    }
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut children: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    // Sorted, so the entries named are the same on every run.
    children.sort();
    for child in children {
        match std::fs::symlink_metadata(&child) {
            Ok(m) if m.file_type().is_symlink() => {}
            Ok(m) => walk(&child, m, report)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn created_entries_are_owner_only_and_existing_ones_are_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/store");
        assert!(create_dir_all(&dir).unwrap());
        assert_eq!(mode(&dir), DIR_MODE);
        assert!(!create_dir(&dir).unwrap(), "already there");
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!create_dir(&shared).unwrap());
        assert_eq!(mode(&shared), 0o755, "an existing directory keeps its mode");
        let file = dir.join("index.sqlite");
        precreate_file(&file).unwrap();
        assert_eq!(mode(&file), FILE_MODE);
        std::fs::write(&file, b"kept").unwrap();
        precreate_file(&file).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"kept", "an existing file is not truncated");
        // A path whose parent is a file is an error, not a silent success.
        let under_file = file.join("x");
        assert!(create_dir_all(&under_file).is_err());
    }

    #[test]
    fn the_check_names_loose_entries_and_counts_them_all() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        create_dir(&dir).unwrap();
        let report = check(&dir).unwrap();
        assert!(report.is_private() && !report.dir_open, "{report:?}");
        assert_eq!(report.to_string(), format!("store {} is private to its owner", dir.display()));

        std::fs::create_dir(dir.join("blobs")).unwrap();
        for i in 0..12 {
            let f = dir.join("blobs").join(format!("f{i:02}"));
            std::fs::write(&f, b"x").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        }
        std::fs::set_permissions(dir.join("blobs"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        let report = check(&dir).unwrap();
        assert_eq!((report.loose_count, report.loose.len(), report.dir_open), (12, MAX_NAMED, false), "{report:?}");
        assert_eq!(report.loose[0], LooseEntry { path: dir.join("blobs/f00"), mode: 0o640 });
        let line = report.to_string();
        assert!(line.contains("not owner-only: 12 entries") && line.contains("f00 is 0640") && line.contains("chmod -R go="), "{line}");
        assert!(!line.contains('\n'));

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let report = check(&dir).unwrap();
        assert!(report.dir_open && report.loose_count == 13, "{report:?}");
        assert_eq!(report.loose[0], LooseEntry { path: dir.clone(), mode: 0o755 });
        assert!(report.to_string().contains("readable by other local users"), "{report}");

        assert_eq!(check(&tmp.path().join("missing")).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert!(check(&dir.join("blobs/f00")).is_err(), "a file is not a store");
    }
}
