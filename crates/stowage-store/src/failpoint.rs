//! Failpoints: a way for tests to stop a put at a chosen step, leaving the disk exactly as a
//! crash there would.
//!
//! Always compiled (so the crash tests exercise the shipped code paths) but inert unless a hook
//! is installed, which only tests do.

use std::sync::Arc;

/// The steps of a filesystem put, in order (all but [`PutStep::Staged`], which every store
/// passes).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PutStep {
    /// The bytes are staged and the engine is about to take its lock: the fs store's temp file
    /// is durable; the object store's blob is published at its content address (named in the
    /// publishing journal) without a record. Checked by the engine for every store, so it is
    /// not part of [`PutStep::ALL`], the fs store's own steps.
    Staged,
    /// The temp file holds all the bytes but has not been fsynced.
    AfterTempWrite,
    /// The temp file is durable.
    AfterFsync,
    /// The blob has been renamed to its content address; its directory is not yet fsynced.
    AfterRename,
    /// The blob is durable; the index row is not yet written.
    BeforeIndexInsert,
}

impl PutStep {
    pub const ALL: [PutStep; 4] = [PutStep::AfterTempWrite, PutStep::AfterFsync, PutStep::AfterRename, PutStep::BeforeIndexInsert];
}

/// Called at every step; returning `true` "crashes" the put there: it fails at once and
/// cleans nothing up.
#[doc(hidden)]
pub type FailpointHook = Arc<dyn Fn(PutStep) -> bool + Send + Sync>;

/// An optional hook; `check` is a no-op when none is installed.
#[derive(Clone, Default)]
pub(crate) struct Failpoints(Option<FailpointHook>);

/// What a triggered failpoint returns: an error that the caller must not clean up after.
#[derive(Debug, thiserror::Error)]
#[error("failpoint {0:?} triggered")]
pub(crate) struct Crash(pub PutStep);

impl Failpoints {
    /// FsStore and SharedStore take a hook; the memory store uses `Failpoints::default()`.
    #[cfg_attr(not(any(feature = "sqlite", all(feature = "postgres", feature = "s3"))), allow(dead_code))]
    pub fn new(hook: Option<FailpointHook>) -> Self {
        Failpoints(hook)
    }

    pub fn check(&self, step: PutStep) -> Result<(), Crash> {
        match &self.0 {
            Some(hook) if hook(step) => Err(Crash(step)),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Debug for Failpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Failpoints(armed)" } else { "Failpoints(off)" })
    }
}
