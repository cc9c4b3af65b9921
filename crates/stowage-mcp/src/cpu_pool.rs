//! The pool the gateway's heavy CPU work runs on: parsing big upstream messages and
//! transforming results of 64 KiB or more.
//!
//! Not the runtime's workers, which must stay free for small calls, and not tokio's blocking
//! pool either: that pool grows a thread per job, so two 50 MB results would be two more
//! CPU-bound threads than there are cores on a small machine, and the scheduler would then
//! slice the runtime's workers too (measured: small-call p99 rose from 4 to 10 ms while two
//! 50 MB results were in flight). Instead, `cores - 1` threads (at least one) at a lower
//! priority (nice 10) take jobs from a bounded queue: heavy work never holds more than all but
//! one core, and when a runtime worker wakes for a small call the kernel runs it first.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

type Job = Box<dyn FnOnce() + Send>;

/// Jobs waiting for a pool thread; a caller past this waits (asynchronously) for room.
const QUEUE: usize = 64;

/// Niceness of the pool's threads on Unix (thread-priority's 0–99 scale, 25 ≈ nice 10).
const PRIORITY: u8 = 25;

static POOL: OnceLock<mpsc::Sender<Job>> = OnceLock::new();

fn pool() -> &'static mpsc::Sender<Job> {
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1));
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new().name(format!("stowage-cpu-{i}")).spawn(move || {
                lower_priority();
                loop {
                    // One thread waits for the next job at a time; the others wait for the lock.
                    let job = rx.lock().blocking_recv();
                    match job {
                        Some(job) => job(),
                        None => return,
                    }
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(target: "stowage::gateway", "cannot start a cpu pool thread: {e}");
            }
        }
        tx
    })
}

/// Best effort: without the right, the pool still works, at normal priority.
fn lower_priority() {
    #[cfg(unix)]
    {
        use thread_priority::{ThreadPriority, ThreadPriorityValue};
        if let Ok(p) = ThreadPriorityValue::try_from(PRIORITY)
            && let Err(e) = thread_priority::set_current_thread_priority(ThreadPriority::Crossplatform(p))
        {
            tracing::debug!(target: "stowage::gateway", "cpu pool thread keeps its priority: {e:?}");
        }
    }
}

/// Runs `f` on the pool and waits for it. A panic in `f` is resumed here, in the caller,
/// where the gateway's per-request guard turns it into that request's error.
pub(crate) async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(f)));
    });
    if let Err(mpsc::error::SendError(job)) = pool().send(job).await {
        // The pool is gone (its threads could not start): do the work here rather than fail.
        job();
    }
    match rx.await {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("a cpu pool job was dropped unrun"),
    }
}

/// Frees `value` on the pool, after the jobs queued before it: a job done with a big parsed
/// tree hands it over here and answers at once, instead of making its caller wait for a
/// million frees. With the queue full it is freed here, now.
pub(crate) fn drop_later<T: Send + 'static>(value: T) {
    if let Err(e) = pool().try_send(Box::new(move || drop(value))) {
        drop(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_off_the_runtime_and_panics_come_back_to_the_caller() {
        let name = run(|| std::thread::current().name().map(str::to_owned)).await;
        assert!(name.is_some_and(|n| n.starts_with("stowage-cpu-")));
        let caught = tokio::spawn(run(|| -> u8 { panic!("boom") })).await.unwrap_err();
        assert!(caught.is_panic());
        // The pool survives a panicking job.
        assert_eq!(run(|| 7).await, 7);
    }

    #[tokio::test]
    async fn a_value_dropped_later_is_freed_on_the_pool() {
        struct Tells(Option<std::sync::mpsc::Sender<Option<String>>>);
        impl Drop for Tells {
            fn drop(&mut self) {
                let _ = self.0.take().unwrap().send(std::thread::current().name().map(str::to_owned));
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        drop_later(Tells(Some(tx)));
        let name = tokio::task::spawn_blocking(move || rx.recv_timeout(std::time::Duration::from_secs(10))).await.unwrap().unwrap();
        assert!(name.is_some_and(|n| n.starts_with("stowage-cpu-")));
    }
}
