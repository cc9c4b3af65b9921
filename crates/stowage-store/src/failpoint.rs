//! Failpoints: a way for tests to stop a put at a chosen step, leaving the disk exactly as a
//! crash there would.
//!
//! The checks sit in the shipped code paths (so the crash tests exercise them), but a hook can
//! only be installed with the `test-hooks` feature, which this crate's own tests turn on and
//! release builds never do. Without it [`Failpoints`] is empty and `check` is `Ok(())`, which
//! the compiler removes: the shipped binary has no way to make a put fail on purpose.

#[cfg(feature = "test-hooks")]
use std::sync::Arc;

/// The steps of a filesystem put, in order (all but [`PutStep::Staged`], which every store
/// passes). Public for the tests' hooks; without `test-hooks` only the checks name it.
#[doc(hidden)]
#[cfg_attr(not(feature = "test-hooks"), allow(unreachable_pub))]
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

#[cfg(feature = "test-hooks")]
impl PutStep {
    /// The fs store's own steps, in order.
    pub const ALL: [PutStep; 4] = [PutStep::AfterTempWrite, PutStep::AfterFsync, PutStep::AfterRename, PutStep::BeforeIndexInsert];
}

/// Called at every step; returning `true` "crashes" the put there: it fails at once and
/// cleans nothing up.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub type FailpointHook = Arc<dyn Fn(PutStep) -> bool + Send + Sync>;

/// An optional hook; `check` is a no-op when none is installed (and always, without the
/// `test-hooks` feature).
#[derive(Clone, Default)]
pub(crate) struct Failpoints(#[cfg(feature = "test-hooks")] Option<FailpointHook>);

/// What a triggered failpoint returns: an error that the caller must not clean up after.
#[derive(Debug, thiserror::Error)]
#[error("failpoint {0:?} triggered")]
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
pub(crate) struct Crash(pub(crate) PutStep);

impl Failpoints {
    /// FsStore and SharedStore take a hook; the memory store uses `Failpoints::default()`.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn new(hook: FailpointHook) -> Self {
        Failpoints(Some(hook))
    }

    #[cfg(feature = "test-hooks")]
    pub(crate) fn check(&self, step: PutStep) -> Result<(), Crash> {
        match &self.0 {
            Some(hook) if hook(step) => Err(Crash(step)),
            _ => Ok(()),
        }
    }

    #[cfg(not(feature = "test-hooks"))]
    #[inline(always)]
    pub(crate) fn check(&self, _step: PutStep) -> Result<(), Crash> {
        Ok(())
    }

    /// Whether a hook is installed.
    fn armed(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        return self.0.is_some();
        #[cfg(not(feature = "test-hooks"))]
        false
    }
}

impl std::fmt::Debug for Failpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.armed() { "Failpoints(armed)" } else { "Failpoints(off)" })
    }
}
