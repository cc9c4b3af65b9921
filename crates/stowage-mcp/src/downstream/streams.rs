//! Resumable SSE streams for the HTTP downstream (Streamable HTTP resumability, SEP-1699).
//!
//! Every SSE stream of a session — the standalone GET stream and one per POSTed request —
//! gets a number, and every event on it the id `{stream}-{seq}`. A pump task moves the
//! gateway's messages from the stream's [`Outbox`] into a bounded replay buffer and on to
//! whichever HTTP response is currently attached. When the client's connection drops, the
//! request keeps running: a `GET /mcp` with `Last-Event-ID` re-attaches, replays what the
//! client missed and continues live. A client that does not come back within the resume
//! window is taken to have gone away, and its request is cancelled (which cancels the
//! upstream call), so nothing leaks.
//!
//! Replay is bounded per stream (oldest events are dropped first); a client asking for an
//! event that is no longer buffered is told the stream cannot be resumed. The queue towards
//! the attached response is bounded too: a client that stops reading its stream holds the
//! pump, which stops taking from the stream's outbox, which then drops notifications and
//! makes responses wait (see [`crate::outbox`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::outbox::OutboxRx;

/// Frames queued towards one attached response (live ones; a replay queues all it has).
const ATTACHED_CAPACITY: usize = 64;

/// One SSE event: its sequence number on its stream and its JSON text (empty for the
/// priming event).
pub type Frame = (u64, Bytes);

/// The receiving half handed to an HTTP response: buffered frames first, then live ones.
pub type Attached = mpsc::Receiver<Frame>;

/// Resumption settings, from `[gateway]`.
#[derive(Debug, Clone, Copy)]
pub struct ResumeSettings {
    /// How long a stream waits for its client to reconnect before its request is cancelled,
    /// and how long a finished stream stays replayable.
    pub window: Duration,
    /// Replay buffer per stream, in bytes of JSON.
    pub max_buffer_bytes: usize,
}

/// A session's SSE streams.
pub struct StreamHub {
    settings: ResumeSettings,
    next: AtomicU64,
    streams: Mutex<HashMap<u64, Arc<Mutex<StreamState>>>>,
}

#[derive(Default)]
struct StreamState {
    buffer: VecDeque<Frame>,
    buffered_bytes: usize,
    /// The highest sequence number dropped from the buffer (0: nothing dropped yet).
    dropped_through: u64,
    next_seq: u64,
    sink: Option<mpsc::Sender<Frame>>,
    /// The first frame pushed while no client was attached (a fresh attach starts there).
    first_unsent: Option<u64>,
    done: bool,
    cancel: Option<AbortHandle>,
}

/// Why a `Last-Event-ID` cannot be honoured.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    #[error("Last-Event-ID {0:?} is not an event id of this session")]
    Malformed(String),
    #[error("stream of event {0:?} has ended and its replay window has passed; re-send the request")]
    Gone(String),
    #[error("events after {0:?} are no longer buffered; re-send the request")]
    Evicted(String),
}

impl StreamHub {
    pub fn new(settings: ResumeSettings) -> StreamHub {
        StreamHub { settings, next: AtomicU64::new(0), streams: Mutex::new(HashMap::new()) }
    }

    /// Opens a stream fed by `rx` and attaches a first receiver to it. With `priming`, the
    /// first frame is the empty priming event (so the client learns an event id to resume
    /// from before anything else arrives). `cancel` is aborted if the client stays away
    /// longer than the resume window; without it (the standalone stream) the stream simply
    /// waits to be re-attached.
    pub fn open(self: &Arc<Self>, rx: OutboxRx, priming: bool, cancel: Option<AbortHandle>) -> (u64, Attached) {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(Mutex::new(StreamState { next_seq: 1, cancel: cancel.clone(), ..Default::default() }));
        let (tx, attached) = mpsc::channel(ATTACHED_CAPACITY);
        if priming {
            let _ = tx.try_send((0, Bytes::new()));
        }
        state.lock().sink = Some(tx);
        self.streams.lock().insert(number, state.clone());
        tokio::spawn(pump(Arc::downgrade(self), self.settings, number, state, rx, cancel));
        (number, attached)
    }

    /// Re-attaches to the stream of `last_event_id`: frames after it that are still buffered
    /// come first, then live ones. A previously attached receiver is detached.
    pub fn resume(&self, last_event_id: &str) -> Result<(u64, Attached), ResumeError> {
        let (number, seq) = parse_event_id(last_event_id).ok_or_else(|| ResumeError::Malformed(last_event_id.to_owned()))?;
        let state = self.streams.lock().get(&number).cloned().ok_or_else(|| ResumeError::Gone(last_event_id.to_owned()))?;
        let mut s = state.lock();
        if seq < s.dropped_through {
            return Err(ResumeError::Evicted(last_event_id.to_owned()));
        }
        let (tx, rx) = mpsc::channel(ATTACHED_CAPACITY + s.buffer.len());
        for frame in s.buffer.iter().filter(|(q, _)| *q > seq) {
            let _ = tx.try_send(frame.clone());
        }
        // A finished stream replays and ends: the receiver closes once `tx` is dropped.
        s.sink = (!s.done).then_some(tx);
        Ok((number, rx))
    }

    /// Attaches a fresh receiver to stream `number` (the standalone stream, on a `GET`
    /// without `Last-Event-ID`): frames no client was attached for come first. With
    /// `priming`, an empty frame carrying the id to resume from leads.
    pub fn reattach(&self, number: u64, priming: bool) -> Option<Attached> {
        let state = self.streams.lock().get(&number).cloned()?;
        let mut s = state.lock();
        let (tx, rx) = mpsc::channel(ATTACHED_CAPACITY + s.buffer.len() + 1);
        let from = s.first_unsent.take().unwrap_or(s.next_seq).max(s.dropped_through + 1);
        if priming {
            let _ = tx.try_send((from - 1, Bytes::new()));
        }
        for frame in s.buffer.iter().filter(|(q, _)| *q >= from) {
            let _ = tx.try_send(frame.clone());
        }
        s.sink = (!s.done).then_some(tx);
        Some(rx)
    }

    /// Ends every stream and cancels every request still running on one (the session ended).
    pub fn close(&self) {
        for (_, state) in self.streams.lock().drain() {
            let mut s = state.lock();
            s.sink = None;
            if let Some(c) = s.cancel.take() {
                c.abort();
            }
        }
    }

    /// Whether any stream has a client attached or a request still running.
    pub fn busy(&self) -> bool {
        self.streams.lock().values().any(|s| {
            let s = s.lock();
            !s.done && s.sink.as_ref().is_some_and(|t| !t.is_closed())
        })
    }
}

/// The SSE id of frame `seq` on stream `number`.
pub fn event_id(number: u64, seq: u64) -> String {
    format!("{number}-{seq}")
}

fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (a, b) = id.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

async fn pump(
    hub: std::sync::Weak<StreamHub>,
    settings: ResumeSettings,
    number: u64,
    state: Arc<Mutex<StreamState>>,
    mut rx: OutboxRx,
    cancel: Option<AbortHandle>,
) {
    // Detaching is noticed by polling (holding a sender clone to await its closing would keep
    // a replaced receiver open), often enough that cancellation is at most a tick late.
    let tick = (settings.window / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut detached_since: Option<Instant> = None;
    loop {
        if let Some(c) = &cancel {
            let attached = state.lock().sink.as_ref().is_some_and(|t| !t.is_closed());
            if attached {
                detached_since = None;
            } else if detached_since.get_or_insert_with(Instant::now).elapsed() >= settings.window {
                // Nobody came back within the window: the client is gone.
                c.abort();
                break;
            }
        }
        let next = if cancel.is_some() { tokio::time::timeout(tick, rx.recv()).await } else { Ok(rx.recv().await) };
        match next {
            Ok(Some(line)) => {
                // Buffered (for replay) under the lock; handed to the attached response after
                // it, waiting while that response's queue is full.
                if let Some((sink, frame)) = push(&state, Bytes::from(line), settings.max_buffer_bytes)
                    && sink.send(frame).await.is_err()
                {
                    let mut s = state.lock();
                    if s.sink.as_ref().is_some_and(|t| t.same_channel(&sink)) {
                        s.sink = None;
                    }
                }
            }
            Ok(None) => break,
            Err(_) => continue,
        }
    }
    {
        let mut s = state.lock();
        s.done = true;
        s.cancel = None;
        s.sink = None; // ends the attached response, if any
    }
    // Keep the finished stream replayable for the window, then forget it.
    tokio::time::sleep(settings.window).await;
    if let Some(h) = hub.upgrade() {
        h.streams.lock().remove(&number);
    }
}

/// Buffers a frame; returns it with the attached response's queue, if one is attached.
fn push(state: &Mutex<StreamState>, data: Bytes, max_bytes: usize) -> Option<(mpsc::Sender<Frame>, Frame)> {
    let mut s = state.lock();
    let seq = s.next_seq;
    s.next_seq += 1;
    let sink = s.sink.clone().filter(|t| !t.is_closed());
    if sink.is_none() {
        s.sink = None;
        s.first_unsent.get_or_insert(seq);
    }
    s.buffered_bytes += data.len();
    s.buffer.push_back((seq, data.clone()));
    // Strict: a frame bigger than the whole budget is not kept either (resuming after it is
    // refused as evicted), so a session never pins more than its budget per stream.
    while s.buffered_bytes > max_bytes {
        let (q, d) = s.buffer.pop_front().expect("non-empty");
        s.buffered_bytes -= d.len();
        s.dropped_through = q;
    }
    sink.map(|t| (t, (seq, data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(window_ms: u64, max: usize) -> ResumeSettings {
        ResumeSettings { window: Duration::from_millis(window_ms), max_buffer_bytes: max }
    }

    async fn drain(rx: &mut Attached) -> Vec<(u64, String)> {
        let mut out = vec![];
        while let Ok(Some((q, d))) = tokio::time::timeout(Duration::from_millis(50), rx.recv()).await {
            out.push((q, String::from_utf8(d.to_vec()).unwrap()));
        }
        out
    }

    #[tokio::test]
    async fn replays_what_the_client_missed_then_continues_live() {
        let hub = Arc::new(StreamHub::new(settings(5_000, 1 << 20)));
        let (tx, rx) = mpsc::channel(16);
        let (n, mut first) = hub.open(rx, true, None);
        tx.send(b"a".to_vec()).await.unwrap();
        assert_eq!(drain(&mut first).await, [(0, String::new()), (1, "a".into())]);
        drop(first);
        tx.send(b"b".to_vec()).await.unwrap();
        tx.send(b"c".to_vec()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (m, mut again) = hub.resume(&event_id(n, 1)).unwrap();
        assert_eq!(m, n);
        assert_eq!(drain(&mut again).await, [(2, "b".into()), (3, "c".into())]);
        tx.send(b"d".to_vec()).await.unwrap();
        assert_eq!(drain(&mut again).await, [(4, "d".into())]);
        drop(tx);
        // A finished stream replays and then ends.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (_, mut last) = hub.resume(&event_id(n, 3)).unwrap();
        assert_eq!(last.recv().await.unwrap().0, 4);
        assert!(last.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_client_that_stays_away_cancels_the_request() {
        let hub = Arc::new(StreamHub::new(settings(100, 1 << 20)));
        let (_tx, rx) = mpsc::channel::<Vec<u8>>(16);
        let task = tokio::spawn(std::future::pending::<()>());
        let (_, attached) = hub.open(rx, false, Some(task.abort_handle()));
        drop(attached);
        let r = tokio::time::timeout(Duration::from_secs(5), task).await.expect("aborted within the window");
        assert!(r.unwrap_err().is_cancelled());
    }

    #[tokio::test]
    async fn evicted_and_unknown_ids_are_refused() {
        let hub = Arc::new(StreamHub::new(settings(5_000, 4)));
        let (tx, rx) = mpsc::channel(16);
        let (n, _a) = hub.open(rx, false, None);
        for s in ["aaa", "bbb", "ccc"] {
            tx.send(s.as_bytes().to_vec()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(matches!(hub.resume(&event_id(n, 0)), Err(ResumeError::Evicted(_))));
        assert!(hub.resume(&event_id(n, 2)).is_ok());
        assert!(matches!(hub.resume("junk"), Err(ResumeError::Malformed(_))));
        assert!(matches!(hub.resume(&event_id(n + 7, 0)), Err(ResumeError::Gone(_))));
    }

    #[tokio::test]
    async fn the_standalone_stream_keeps_what_arrived_while_nobody_listened() {
        let hub = Arc::new(StreamHub::new(settings(5_000, 1 << 20)));
        let (tx, rx) = mpsc::channel(16);
        let (n, first) = hub.open(rx, false, None);
        drop(first);
        tx.send(b"early".to_vec()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut get = hub.reattach(n, true).unwrap();
        assert_eq!(drain(&mut get).await, [(0, String::new()), (1, "early".into())]);
        tx.send(b"live".to_vec()).await.unwrap();
        assert_eq!(drain(&mut get).await, [(2, "live".into())]);
        // A second GET replaces the first, which ends.
        let mut second = hub.reattach(n, false).unwrap();
        assert!(get.recv().await.is_none());
        tx.send(b"x".to_vec()).await.unwrap();
        assert_eq!(drain(&mut second).await, [(3, "x".into())]);
    }
}
