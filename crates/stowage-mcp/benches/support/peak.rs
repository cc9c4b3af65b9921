//! The peak of a measure (heap bytes live, a process tree's RSS) while a bench case runs,
//! sampled on a thread of its own so the case itself is not interrupted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Samples `probe` every `every` from [`Peak::start`] to [`Peak::stop`].
pub(crate) struct Peak {
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl Peak {
    pub(crate) fn start(every: Duration, probe: fn() -> u64) -> Peak {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(probe());
                std::thread::sleep(every);
            }
            peak
        });
        Peak { stop, sampler }
    }

    /// The highest sample.
    pub(crate) fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.sampler.join().unwrap()
    }
}
