//! Where stores get the time from: the system clock in production, a [`ManualClock`] in tests.
//!
//! Expiry and LRU order both depend on "now"; injecting it lets tests move time by hours
//! without sleeping. A store several instances share decides by one clock, the database's
//! ([`DbClock`]): an instance whose own clock is off must not expire or judge anything by it.
//! [`SkewedClock`] is such an instance's clock, for tests.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// The system clock moved by a fixed offset: a machine whose clock is off (tests).
#[derive(Debug, Clone, Copy)]
pub struct SkewedClock {
    /// How far ahead of the real time it runs (negative: behind).
    pub offset: time::Duration,
}

impl SkewedClock {
    /// A clock `offset` ahead of the system's (negative: behind).
    pub fn new(offset: time::Duration) -> Self {
        SkewedClock { offset }
    }
}

impl Clock for SkewedClock {
    fn now(&self) -> Timestamp {
        Timestamp::now_utc() + self.offset
    }
}

/// Another machine's clock (the shared store's database), read once in a while and carried
/// forward between readings by this machine's monotonic clock: steps of this machine's wall
/// clock (a late NTP correction, a wrong setting) never move it.
#[derive(Debug)]
#[cfg_attr(not(all(feature = "postgres", feature = "s3")), allow(dead_code))]
pub(crate) struct DbClock {
    /// A reading of the other clock and the monotonic instant it stands for.
    reading: Mutex<(Timestamp, Instant)>,
}

#[cfg_attr(not(all(feature = "postgres", feature = "s3")), allow(dead_code))]
impl DbClock {
    pub(crate) fn new(at: Timestamp, when: Instant) -> Self {
        DbClock { reading: Mutex::new((at, when)) }
    }

    /// A fresh reading (a few milliseconds of monotonic drift since the last one go).
    pub(crate) fn set(&self, at: Timestamp, when: Instant) {
        *self.reading.lock().unwrap_or_else(|e| e.into_inner()) = (at, when);
    }
}

impl Clock for DbClock {
    fn now(&self) -> Timestamp {
        let (at, when) = *self.reading.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if now >= when { at + now.duration_since(when) } else { at - when.duration_since(now) }
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

    #[test]
    fn a_db_clock_carries_its_reading_forward_by_the_monotonic_clock() {
        let reading = time::macros::datetime!(2030-06-01 12:00:00 UTC);
        let c = DbClock::new(reading, Instant::now() - Duration::from_secs(5));
        let now = c.now();
        assert!(now - reading >= time::Duration::seconds(5) && now - reading < time::Duration::seconds(6), "{now}");
        c.set(reading, Instant::now() + Duration::from_secs(2));
        assert!(c.now() < reading, "a reading for a later instant counts back");
        let skewed = SkewedClock::new(time::Duration::hours(-2)).now();
        assert!((Timestamp::now_utc() - skewed - time::Duration::hours(2)).abs() < time::Duration::seconds(1));
    }
}
