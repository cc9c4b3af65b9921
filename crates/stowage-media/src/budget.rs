//! One memory budget for every decode in the process: a byte-weighted semaphore.
//!
//! Each decode asks for what it may allocate at its peak, estimated from the header before a
//! pixel is decoded (an image: its pixels at their decoded depth, plus the 8-bit copies a
//! preview converts them to) or from the input (a PDF: a multiple of its size, plus one
//! inflated stream). Decodes run while their estimates fit in the budget together; the next
//! one waits for room, at most [`WAIT`], and then fails with [`MediaError::Busy`]. A decode
//! that alone needs more than the whole budget fails at once with
//! [`MediaError::OverBudget`]. So one 8000×8000 16-bit PNG (a few hundred KB that decode to
//! about 1 GB) no longer runs beside another on the next core, and N cores never mean N such
//! decodes at once.
//!
//! The budget is process-wide because memory is: [`set_decode_budget`] changes it (default
//! [`DEFAULT_DECODE_BUDGET`]). Callers already run decodes on blocking threads, so waiting
//! here blocks only such a thread.

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::MediaError;

/// The default budget: 1 GiB for all decodes together, enough for one image at the
/// [`ImageLimits`](crate::ImageLimits) maximum or several ordinary ones at once.
pub const DEFAULT_DECODE_BUDGET: u64 = 1 << 30;

/// How long a decode waits for room before giving up.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

struct Budget {
    state: Mutex<State>,
    room: Condvar,
}

struct State {
    total: u64,
    in_use: u64,
}

fn budget() -> &'static Budget {
    static BUDGET: OnceLock<Budget> = OnceLock::new();
    BUDGET.get_or_init(|| Budget { state: Mutex::new(State { total: DEFAULT_DECODE_BUDGET, in_use: 0 }), room: Condvar::new() })
}

fn lock() -> std::sync::MutexGuard<'static, State> {
    // Every change is a pair of additions under the lock: a panic cannot leave it half done.
    budget().state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the bytes all decodes of this process may use together (at least 1 MiB). Decodes
/// already running keep what they hold.
pub fn set_decode_budget(bytes: u64) {
    lock().total = bytes.max(1 << 20);
    budget().room.notify_all();
}

/// The bytes all decodes may use together.
pub fn decode_budget() -> u64 {
    lock().total
}

/// What running decodes hold right now.
pub fn decode_bytes_in_use() -> u64 {
    lock().in_use
}

/// A decode's share of the budget, given back when dropped.
#[derive(Debug)]
pub struct Permit {
    bytes: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        lock().in_use -= self.bytes;
        budget().room.notify_all();
    }
}

/// Takes `bytes` of the budget for one decode of `what` ("the image", "the PDF"), waiting up
/// to [`WAIT`] for room.
pub(crate) fn acquire(bytes: u64, what: &str) -> Result<Permit, MediaError> {
    acquire_within(bytes, what, WAIT)
}

fn acquire_within(bytes: u64, what: &str, wait: Duration) -> Result<Permit, MediaError> {
    let deadline = Instant::now() + wait;
    let mut state = lock();
    loop {
        if bytes > state.total {
            return Err(MediaError::OverBudget { what: what.to_owned(), needed: bytes, budget: state.total });
        }
        if state.in_use + bytes <= state.total {
            state.in_use += bytes;
            return Ok(Permit { bytes });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(MediaError::Busy { what: what.to_owned(), waited: wait });
        }
        state = budget().room.wait_timeout(state, left).unwrap_or_else(|e| e.into_inner()).0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget is process-wide: tests that change it take turns.
    pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn decodes_share_the_budget_wait_for_room_and_refuse_what_never_fits() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        set_decode_budget(100 << 20);
        let first = acquire(60 << 20, "the image").unwrap();
        assert_eq!(decode_bytes_in_use(), 60 << 20);
        // A second that does not fit beside it waits, and gives up after its wait.
        let busy = acquire_within(60 << 20, "the image", Duration::from_millis(50)).unwrap_err();
        assert_eq!(busy.code(), "media_busy");
        // One that waits gets in when the first finishes.
        let waiter = std::thread::spawn(|| acquire_within(60 << 20, "the image", Duration::from_secs(10)).map(|p| p.bytes));
        std::thread::sleep(Duration::from_millis(50));
        drop(first);
        assert_eq!(waiter.join().unwrap().unwrap(), 60 << 20);
        assert_eq!(decode_bytes_in_use(), 0, "given back when dropped");
        // More than the whole budget: refused at once, naming both.
        let over = acquire(200 << 20, "the image").unwrap_err();
        assert!(over.to_string().contains("200 MiB") && over.to_string().contains("100 MiB"), "{over}");
        set_decode_budget(DEFAULT_DECODE_BUDGET);
    }

    #[test]
    fn images_and_pdfs_reserve_their_share_from_the_header_before_decoding() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        // 1600×1200 8-bit RGB: 1.92 Mpx × (3 decoded + 7 for the 8-bit copies) ≈ 19 MiB.
        let png = crate::testing::screenshot_png(1600, 1200);
        set_decode_budget(8 << 20);
        let e = crate::preview(&png, &crate::PreviewOptions::default(), &crate::ImageLimits::default()).unwrap_err();
        assert_eq!(e.code(), "media_over_budget", "{e}");
        assert!(e.to_string().starts_with("decoding the image needs about 19 MiB, more than the 8 MiB"), "{e}");
        let pdf = crate::testing::sample_text_pdf(2);
        set_decode_budget(1 << 20);
        let e = crate::pdf_text(&pdf, None, &crate::PdfLimits::default()).unwrap_err();
        assert_eq!(e.code(), "media_over_budget", "{e}");
        // Within the budget both work, and give their share back.
        set_decode_budget(DEFAULT_DECODE_BUDGET);
        crate::preview(&png, &crate::PreviewOptions::default(), &crate::ImageLimits::default()).unwrap();
        crate::pdf_text(&pdf, None, &crate::PdfLimits::default()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(decode_bytes_in_use(), 0);
    }
}
