//! Where stores get the time from: the system clock in production, a [`ManualClock`] in tests.
//!
//! Expiry and LRU order both depend on "now"; injecting it lets tests move time by hours
//! without sleeping.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stowage_core::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The real wall clock, in UTC.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now_utc()
    }
}

/// A clock that only moves when told to. Clones share the same time, so a test keeps one
/// handle and gives another to the store.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<Timestamp>>);

impl ManualClock {
    /// A clock at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// A clock at a fixed, whole-second instant (2026-01-01T00:00:00Z), so tests are
    /// reproducible.
    pub fn fixed() -> Self {
        Self::new(time::macros::datetime!(2026-01-01 00:00:00 UTC))
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *t += by;
    }

    /// Sets the time to `to` (backwards too).
    pub fn set(&self, to: Timestamp) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::fixed();
        let b = a.clone();
        let start = b.now();
        a.advance(Duration::from_secs(90));
        assert_eq!(b.now() - start, time::Duration::seconds(90));
    }
}
