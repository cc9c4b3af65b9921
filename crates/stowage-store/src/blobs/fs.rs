//! Blobs as files: `<dir>/blobs/<first 2 hex>/<sha256>`, written through `<dir>/tmp/`.
//!
//! Crash safety comes from the order of steps: the bytes go to a fresh temp file, which is
//! fsynced, then renamed to its content address, then the directory is fsynced; only after
//! that does the engine insert the index row. A crash at any step leaves at worst a temp file
//! or an unreferenced blob, both invisible and both removed by gc. File names are sha256
//! digests only: nothing a user chose ever reaches a path.
//!
//! Whose temp files are whose: each open store holds an exclusive lock on a file of its own,
//! `tmp/owner-<id>.lock` (an OS file lock, released by the kernel when the process dies,
//! however it dies), and names its temp files `put-o<id>-<n>.tmp`. A temp file whose owner's
//! lock is free belongs to a process that is gone and is removed at once, by gc and when a
//! store opens; a live owner's is left alone for the grace period (it may be writing it).

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use stowage_core::StoreError;
use tokio::task::spawn_blocking;

use super::{
    BlobInfo, Blobs, BoxReader, Limit, Staged, TempSweep, check_range, extend_head, read_chunk, read_stream_error, sha256_hex,
    stream_too_large,
};
use crate::Result;
use crate::failpoint::{Crash, Failpoints, PutStep};

/// Below this size hashing and writing run one after the other on one thread; above it they
/// run on two threads at once (hashing 100 MB and writing it cost about the same).
const PARALLEL_MIN: usize = 1 << 20;

/// Chunks a streaming read hands over; a few in flight keep the disk busy while the consumer
/// works, and bound the memory a reader holds to `READ_AHEAD * READ_CHUNK`. Kept small so
/// that many concurrent downloads stay in constant memory (64 readers x 2 MiB chunks peaked at
/// 474 MiB of server RSS; the HTTP layer re-chunks anyway).
const READ_CHUNK: usize = 256 << 10;
const READ_AHEAD: usize = 2;

type InFlight = Arc<Mutex<HashSet<PathBuf>>>;

#[derive(Debug)]
pub(crate) struct FsBlobs {
    blobs_dir: PathBuf,
    tmp_dir: PathBuf,
    /// Temp files of puts running in this process, which gc must leave alone however old.
    in_flight: InFlight,
    counter: AtomicU64,
    failpoints: Failpoints,
    temp_grace: Duration,
    /// This store's owner id, in its temp file names and its lock file's.
    owner: String,
    /// `tmp/owner-<id>.lock`, locked for as long as the store is open.
    _owner_lock: File,
}

/// A temp file owned by a put: removed when dropped, unless the put "crashed" (failpoint) or
/// the file was renamed into place.
#[derive(Debug)]
pub(crate) struct TempFile {
    path: PathBuf,
    in_flight: InFlight,
    remove_on_drop: bool,
}

impl TempFile {
    /// Leaves the file where it is, as a crash would.
    fn abandon(&mut self) {
        self.remove_on_drop = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = std::fs::remove_file(&self.path);
        }
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.path);
    }
}

/// Why writing a temp file stopped.
enum WriteFail {
    Io(std::io::Error),
    Crash(Crash),
    Aborted,
}

impl From<std::io::Error> for WriteFail {
    fn from(e: std::io::Error) -> Self {
        WriteFail::Io(e)
    }
}

impl From<Crash> for WriteFail {
    fn from(c: Crash) -> Self {
        WriteFail::Crash(c)
    }
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let target = path.display().to_string();
    move |e| StoreError::backend(op, target, e)
}

/// Runs `f` on a new thread at a lower priority (nice 10 on Unix) and waits for it. A new
/// thread, not one of tokio's blocking pool: lowering a pooled thread's priority could not be
/// undone without privileges, and the pool also runs latency-bound work (stdin reads). For
/// puts of a megabyte or more, where a thread start (~30 µs) is noise.
async fn in_background<T: Send + 'static>(op: &'static str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("stowage-put".into())
        .spawn(move || {
            lower_priority();
            let _ = tx.send(f());
        })
        .map_err(|e| StoreError::backend(op, "background thread", e))?;
    // The sender is dropped without a value only if `f` panicked.
    rx.await.map_err(|e| StoreError::backend(op, "background thread", e))
}

/// Best effort: without the right, the work still runs, at normal priority.
fn lower_priority() {
    #[cfg(unix)]
    {
        use thread_priority::{ThreadPriority, ThreadPriorityValue};
        // thread-priority's 0–99 scale; 25 is nice 10.
        if let Ok(p) = ThreadPriorityValue::try_from(25u8) {
            let _ = thread_priority::set_current_thread_priority(ThreadPriority::Crossplatform(p));
        }
    }
}

fn join_err(op: &'static str) -> impl FnOnce(tokio::task::JoinError) -> StoreError {
    move |e| StoreError::backend(op, "blocking task", e)
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Time since the file was last modified; zero when unknown or in the future, which errs on
/// the side of keeping it.
fn age(meta: &std::fs::Metadata) -> Duration {
    meta.modified().ok().and_then(|m| SystemTime::now().duration_since(m).ok()).unwrap_or_default()
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Drop for FsBlobs {
    /// The store closes: its lock file goes (while still locked, so nobody takes it for a gone
    /// owner's in between); the lock itself goes with the file handle.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.tmp_dir.join(owner_lock_name(&self.owner)));
    }
}

/// The lock file of an owner id.
fn owner_lock_name(owner: &str) -> String {
    format!("owner-{owner}.lock")
}

/// The owner id in a temp file's name (`put-o<id>-<n>.tmp`); `None` for other names,
/// including those of versions before owner locks (`put-<pid>-<nanos>-<n>.tmp`).
fn temp_owner(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("put-o")?.strip_suffix(".tmp")?;
    let (owner, n) = rest.split_once('-')?;
    (!owner.is_empty() && owner.bytes().all(|b| b.is_ascii_hexdigit()) && n.bytes().all(|b| b.is_ascii_digit())).then_some(owner)
}

/// Takes a fresh owner id and its lock: creates `tmp/owner-<id>.lock`, locks it, and checks
/// that the locked file is still the one at that path (a sweeper that found it unlocked in
/// the moment between may have removed it; then another id is taken).
fn take_owner_lock(tmp_dir: &Path) -> Result<(String, File)> {
    for _ in 0..5 {
        let owner = hex::encode(super::random_bytes::<8>());
        let path = tmp_dir.join(owner_lock_name(&owner));
        let file = crate::private::new_file_options().open(&path).map_err(io_err("create owner lock", &path))?;
        file.lock().map_err(io_err("lock owner file", &path))?;
        if same_file(&file, &path) {
            return Ok((owner, file));
        }
    }
    Err(StoreError::backend("lock owner file", tmp_dir.display().to_string(), "its lock files keep disappearing"))
}

#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_: &File, path: &Path) -> bool {
    path.exists()
}

/// Whether the owner of a lock file is gone: its lock can be taken. The lock file of a gone
/// owner is removed while holding its lock, so a live owner's never is.
fn owner_is_gone(tmp_dir: &Path, owner: &str) -> bool {
    let path = tmp_dir.join(owner_lock_name(owner));
    let Ok(file) = File::options().read(true).write(true).open(&path) else {
        // No lock file: an owner creates it before any temp file and it goes only once the
        // owner is gone.
        return true;
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = std::fs::remove_file(&path);
            true
        }
        Err(_) => false,
    }
}

impl FsBlobs {
    /// Uses (creating if needed) `<dir>/blobs` and `<dir>/tmp`, takes this store's owner lock,
    /// and removes the temp files of processes that are gone (what is merely old is gc's to
    /// judge and report).
    pub(crate) fn open(dir: &Path, failpoints: Failpoints, temp_grace: Duration) -> Result<Self> {
        let blobs_dir = dir.join("blobs");
        let tmp_dir = dir.join("tmp");
        for d in [&blobs_dir, &tmp_dir] {
            crate::private::create_dir(d).map_err(io_err("create store directory", d))?;
        }
        let (owner, owner_lock) = take_owner_lock(&tmp_dir)?;
        let blobs = FsBlobs {
            blobs_dir,
            tmp_dir,
            in_flight: InFlight::default(),
            counter: AtomicU64::new(0),
            failpoints,
            temp_grace,
            owner,
            _owner_lock: owner_lock,
        };
        let swept = sweep_temp(&blobs.tmp_dir, &blobs.in_flight, None, &blobs.owner)?;
        if swept.removed > 0 {
            tracing::info!(files = swept.removed, bytes = swept.removed_bytes, "removed temp files of puts whose process is gone");
        }
        Ok(blobs)
    }

    fn blob_path(&self, sha256: &str) -> Result<PathBuf> {
        // The index is the only source of digests, but a corrupted or hand-edited index must
        // not be able to point outside the blob directory.
        if !is_sha256_hex(sha256) {
            return Err(StoreError::backend("locate blob", sha256, "not a sha256 digest"));
        }
        Ok(self.blobs_dir.join(&sha256[..2]).join(sha256))
    }

    /// Creates a new, empty temp file with a name unique within this store.
    fn new_temp(&self) -> Result<(TempFile, File)> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let path = self.tmp_dir.join(format!("put-o{}-{n}.tmp", self.owner));
        let file = crate::private::new_file_options().open(&path).map_err(io_err("create temp file", &path))?;
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(path.clone());
        let temp = TempFile { path, in_flight: self.in_flight.clone(), remove_on_drop: true };
        // The blob is this file renamed, so its mode is the blob's: owner-only, exactly.
        crate::private::set_file_mode(&file).map_err(io_err("create temp file", &temp.path))?;
        Ok((temp, file))
    }

    /// Turns a failed temp write into the put's error; a crash leaves the file behind.
    fn write_failed(temp: &mut TempFile, fail: WriteFail) -> StoreError {
        match fail {
            WriteFail::Io(e) => StoreError::backend("write temp file", temp.path.display().to_string(), e),
            WriteFail::Crash(c) => {
                temp.abandon();
                StoreError::backend("put", temp.path.display().to_string(), c)
            }
            WriteFail::Aborted => StoreError::backend("write temp file", temp.path.display().to_string(), "aborted"),
        }
    }
}

/// Removes leftovers in `tmp/`: at once the temp files of an owner that is gone (or of this
/// one with no put in flight) and the lock files of owners that are gone; other files once
/// untouched for `grace` (`None`: never, at start-up). Puts in flight here are neither
/// removed nor counted.
fn sweep_temp(dir: &Path, in_flight: &InFlight, grace: Option<Duration>, me: &str) -> Result<TempSweep> {
    let mut sweep = TempSweep::default();
    let mut gone: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    for entry in std::fs::read_dir(dir).map_err(io_err("list temp files", dir))? {
        let entry = entry.map_err(io_err("list temp files", dir))?;
        let path = entry.path();
        if in_flight.lock().unwrap_or_else(|e| e.into_inner()).contains(&path) {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(owner) = name.strip_prefix("owner-").and_then(|n| n.strip_suffix(".lock")) {
            // Another owner's lock: owner_is_gone removes it if its owner is gone.
            if owner != me && !gone.contains_key(owner) {
                gone.insert(owner.to_owned(), owner_is_gone(dir, owner));
            }
            continue;
        }
        // Gone since the listing (its writer renamed or removed it): not a leftover.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        sweep.found += 1;
        sweep.found_bytes += meta.len();
        let abandoned = match temp_owner(&name) {
            Some(owner) if owner == me => true,
            Some(owner) => *gone.entry(owner.to_owned()).or_insert_with(|| owner_is_gone(dir, owner)),
            None => false,
        };
        // Another process may be writing this file right now; only files nobody has touched
        // for the grace period are taken as abandoned, unless their owner is known to be gone.
        if !abandoned && grace.is_none_or(|g| age(&meta) < g) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                sweep.removed += 1;
                sweep.removed_bytes += meta.len();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove temp file", &path)(e)),
        }
    }
    Ok(sweep)
}

/// Writes `data` and makes it durable, stopping at failpoints.
fn write_durably(mut file: File, data: &[u8], fp: &Failpoints) -> Result<(), WriteFail> {
    file.write_all(data)?;
    fp.check(PutStep::AfterTempWrite)?;
    file.sync_all()?;
    fp.check(PutStep::AfterFsync)?;
    Ok(())
}

/// Opens a blob positioned at `range.start`, after checking the range against its size.
fn open_at(path: &Path, range: &Range<u64>) -> Result<File> {
    let mut file = File::open(path).map_err(io_err("open blob", path))?;
    let size = file.metadata().map_err(io_err("stat blob", path))?.len();
    check_range(range, size)?;
    file.seek(SeekFrom::Start(range.start)).map_err(io_err("seek blob", path))?;
    Ok(file)
}

/// Reads exactly `len` bytes, into a buffer allocated once.
fn read_len(file: File, len: u64, path: &Path) -> Result<Bytes> {
    let mut buf = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut buf).map_err(io_err("read blob", path))?;
    if buf.len() as u64 != len {
        return Err(StoreError::backend("read blob", path.display().to_string(), "blob is shorter than recorded"));
    }
    Ok(Bytes::from(buf))
}

#[async_trait]
impl Blobs for FsBlobs {
    type Pending = TempFile;
    type Receipt = ();
    const DEPENDENCY: &'static str = "disk";

    async fn stage_bytes(&self, data: Bytes) -> Result<Staged<TempFile>> {
        let (mut temp, file) = self.new_temp()?;
        let fp = self.failpoints.clone();
        let head = data.slice(..data.len().min(crate::mime::SNIFF_LEN));
        let size = data.len() as u64;
        let (sha256, written) = if data.len() >= PARALLEL_MIN {
            // Two cores: one hashes while the other copies into the page cache and waits for
            // the disk. Both borrow the same buffer (Bytes clones share it).
            // Both run on threads of their own at a lower priority: a big put is bulk work,
            // and at normal priority its two threads would take both cores from the runtime's
            // workers and stall every small request behind it.
            let to_hash = data.clone();
            let hashing = in_background("hash blob", move || sha256_hex(&to_hash));
            let writing = in_background("write blob", move || write_durably(file, &data, &fp));
            let (sha, written) = tokio::join!(hashing, writing);
            (sha?, written?)
        } else {
            spawn_blocking(move || (sha256_hex(&data), write_durably(file, &data, &fp))).await.map_err(join_err("write blob"))?
        };
        written.map_err(|f| Self::write_failed(&mut temp, f))?;
        Ok(Staged { sha256, size, head, pending: temp })
    }

    async fn stage_stream(&self, mut reader: BoxReader, limit: Limit) -> Result<Staged<TempFile>> {
        let (mut temp, mut file) = self.new_temp()?;
        let fp = self.failpoints.clone();
        let abort = Arc::new(AtomicBool::new(false));
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(2);
        // Hashing and writing happen on a blocking thread while this task reads the next
        // chunk; at most three chunks (one being read, two queued or being written) exist.
        let writer = {
            let abort = abort.clone();
            spawn_blocking(move || -> Result<String, WriteFail> {
                let mut hasher = Sha256::new();
                while let Some(chunk) = rx.blocking_recv() {
                    hasher.update(&chunk);
                    file.write_all(&chunk)?;
                }
                if abort.load(Ordering::SeqCst) {
                    return Err(WriteFail::Aborted);
                }
                fp.check(PutStep::AfterTempWrite)?;
                file.sync_all()?;
                fp.check(PutStep::AfterFsync)?;
                Ok(hex::encode(hasher.finalize()))
            })
        };
        let mut head = Vec::new();
        let mut size = 0u64;
        let read_result = loop {
            let chunk = match read_chunk(&mut reader).await {
                Ok(c) if c.is_empty() => break Ok(()),
                Ok(c) => c,
                Err(e) => break Err(read_stream_error(e)),
            };
            size += chunk.len() as u64;
            if size > limit.1 {
                break Err(stream_too_large(size, limit));
            }
            extend_head(&mut head, &chunk);
            if tx.send(chunk).await.is_err() {
                // The writer stopped early (write error); its result says why.
                break Ok(());
            }
        };
        if read_result.is_err() {
            abort.store(true, Ordering::SeqCst);
        }
        drop(tx);
        let written = writer.await.map_err(join_err("write blob"))?;
        read_result?;
        let sha256 = written.map_err(|f| Self::write_failed(&mut temp, f))?;
        Ok(Staged { sha256, size, head: Bytes::from(head), pending: temp })
    }

    async fn commit(&self, staged: Staged<TempFile>) -> Result<()> {
        let dest = self.blob_path(&staged.sha256)?;
        let blobs_dir = self.blobs_dir.clone();
        let fp = self.failpoints.clone();
        let mut temp = staged.pending;
        spawn_blocking(move || -> Result<()> {
            let shard = dest.parent().unwrap_or(&blobs_dir).to_path_buf();
            if crate::private::create_dir(&shard).map_err(io_err("create blob directory", &shard))? {
                sync_dir(&blobs_dir).map_err(io_err("sync directory", &blobs_dir))?;
            }
            // Renaming over an existing blob is fine: the content is identical (same sha256),
            // and it also repairs a blob that was truncated behind our back.
            std::fs::rename(&temp.path, &dest).map_err(io_err("publish blob", &dest))?;
            temp.abandon();
            if let Err(c) = fp.check(PutStep::AfterRename) {
                return Err(StoreError::backend("put", dest.display().to_string(), c));
            }
            sync_dir(&shard).map_err(io_err("sync directory", &shard))
        })
        .await
        .map_err(join_err("publish blob"))?
    }

    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Bytes> {
        let path = self.blob_path(sha256)?;
        spawn_blocking(move || {
            let file = open_at(&path, &range)?;
            read_len(file, range.end - range.start, &path)
        })
        .await
        .map_err(join_err("read blob"))?
    }

    async fn open(&self, sha256: &str, range: Range<u64>) -> Result<BoxReader> {
        let path = self.blob_path(sha256)?;
        let mut remaining = range.end.saturating_sub(range.start);
        // Open before returning, so a missing blob is an error here and not mid-stream. A range
        // that fits one chunk is read right away: no reader thread, no channel.
        let opened = spawn_blocking(move || -> Result<Result<Bytes, (File, PathBuf)>> {
            let file = open_at(&path, &range)?;
            if remaining > READ_CHUNK as u64 {
                return Ok(Err((file, path)));
            }
            read_len(file, remaining, &path).map(Ok)
        })
        .await
        .map_err(join_err("open blob"))??;
        let (file, path) = match opened {
            Ok(small) => return Ok(Box::pin(std::io::Cursor::new(small))),
            Err(large) => large,
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(READ_AHEAD);
        // One blocking thread reads big chunks ahead of the consumer. It stops when the
        // reader is dropped (send fails) or the range is done.
        spawn_blocking(move || {
            let mut file = file;
            while remaining > 0 {
                let want = remaining.min(READ_CHUNK as u64);
                let mut buf = Vec::with_capacity(want as usize);
                let item = match (&mut file).take(want).read_to_end(&mut buf) {
                    Ok(0) => Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("blob {} is shorter than recorded", path.display()),
                    )),
                    Ok(n) => {
                        remaining -= n as u64;
                        Ok(Bytes::from(buf))
                    }
                    Err(e) => Err(e),
                };
                let failed = item.is_err();
                if tx.blocking_send(item).is_err() || failed {
                    return;
                }
            }
        });
        let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
        Ok(Box::pin(tokio_util::io::StreamReader::new(stream)))
    }

    async fn delete(&self, sha256: &str) -> Result<u64> {
        let path = self.blob_path(sha256)?;
        spawn_blocking(move || -> Result<u64> {
            let size = match std::fs::metadata(&path) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
                Err(e) => return Err(io_err("stat blob", &path)(e)),
            };
            match std::fs::remove_file(&path) {
                Ok(()) => Ok(size),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
                Err(e) => Err(io_err("remove blob", &path)(e)),
            }
        })
        .await
        .map_err(join_err("remove blob"))?
    }

    async fn size(&self, sha256: &str) -> Result<Option<u64>> {
        let path = self.blob_path(sha256)?;
        spawn_blocking(move || match std::fs::metadata(&path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("stat blob", &path)(e)),
        })
        .await
        .map_err(join_err("stat blob"))?
    }

    async fn list(&self) -> Result<Vec<BlobInfo>> {
        let dir = self.blobs_dir.clone();
        let grace = self.temp_grace;
        spawn_blocking(move || -> Result<Vec<BlobInfo>> {
            let mut out = Vec::new();
            for shard in std::fs::read_dir(&dir).map_err(io_err("list blobs", &dir))? {
                let shard = shard.map_err(io_err("list blobs", &dir))?;
                let shard_name = shard.file_name();
                let Some(prefix) = shard_name.to_str().filter(|n| n.len() == 2) else { continue };
                let shard_path = shard.path();
                if !shard_path.is_dir() {
                    continue;
                }
                for entry in std::fs::read_dir(&shard_path).map_err(io_err("list blobs", &shard_path))? {
                    let entry = entry.map_err(io_err("list blobs", &shard_path))?;
                    let name = entry.file_name();
                    // Only files we could have written are ours to judge; anything else in
                    // the directory is left alone.
                    let Some(name) = name.to_str().filter(|n| is_sha256_hex(n) && n.starts_with(prefix)) else {
                        continue;
                    };
                    let meta = entry.metadata().map_err(io_err("stat blob", &entry.path()))?;
                    out.push(BlobInfo { sha256: name.to_owned(), size: meta.len(), recent: age(&meta) < grace });
                }
            }
            Ok(out)
        })
        .await
        .map_err(join_err("list blobs"))?
    }

    async fn clean_temp(&self) -> Result<TempSweep> {
        let (dir, in_flight, grace, owner) = (self.tmp_dir.clone(), self.in_flight.clone(), self.temp_grace, self.owner.clone());
        spawn_blocking(move || sweep_temp(&dir, &in_flight, Some(grace), &owner)).await.map_err(join_err("clean temp files"))?
    }

    /// A small temp file written, synced and removed: the store's directory takes writes now.
    async fn probe_write(&self) -> Result<(), (String, StoreError)> {
        let (temp, mut file) = self.new_temp().map_err(|e| ("cannot create a file".to_owned(), e))?;
        let path = temp.path.clone();
        let written = spawn_blocking(move || {
            file.write_all(b"stowage readiness probe\n")?;
            file.sync_all()
        })
        .await
        .map_err(|e| ("failing".to_owned(), join_err("probe disk write")(e)))?;
        drop(temp); // removes the file
        written.map_err(|e| {
            let reason = match e.kind() {
                std::io::ErrorKind::StorageFull => "full",
                std::io::ErrorKind::ReadOnlyFilesystem => "read-only",
                std::io::ErrorKind::PermissionDenied => "access denied",
                _ => "failing",
            };
            (reason.to_owned(), io_err("probe disk write", &path)(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_carry_their_owner_and_older_names_do_not() {
        assert_eq!(temp_owner("put-o0123abcd-7.tmp"), Some("0123abcd"));
        assert_eq!(temp_owner("put-1234-99999-0.tmp"), None, "a name of the version before owner locks");
        assert_eq!(temp_owner("put-o-1.tmp"), None);
        assert_eq!(temp_owner("put-oxyz-1.tmp"), None);
        assert_eq!(temp_owner("owner-0123abcd.lock"), None);
    }

    #[test]
    fn an_owner_is_gone_once_its_lock_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let (owner, lock) = take_owner_lock(dir.path()).unwrap();
        assert!(!owner_is_gone(dir.path(), &owner), "a held lock is a live owner");
        drop(lock);
        assert!(owner_is_gone(dir.path(), &owner));
        assert!(!dir.path().join(owner_lock_name(&owner)).exists(), "a gone owner's lock file is removed");
    }
}
