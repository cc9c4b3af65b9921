//! Resumable SSE streams for the HTTP downstream (Streamable HTTP resumability, SEP-1699).
//!
//! Every SSE stream of a session — the standalone GET stream and one per POSTed request —
//! gets a number, and every event on it the id `{stream}-{seq}`. A pump task moves the
//! gateway's messages from the stream's [`Outbox`](crate::outbox::Outbox) into a bounded replay buffer and on to
//! whichever HTTP response is currently attached. When the client's connection drops, the
//! request keeps running: a `GET /mcp` with `Last-Event-ID` re-attaches, replays what the
//! client missed and continues live. A client that does not come back within the resume
//! window is taken to have gone away, and its request is cancelled (which cancels the
//! upstream call), so nothing leaks.
//!
//! What a stream costs is what it may still have to replay:
//! - a request stream whose last frame was handed to the response attached when the request
//!   finished has been delivered whole, and is forgotten at once ([`Attached::recv`] returning
//!   `None` says so); only a stream whose client went away stays replayable for the window;
//! - replay is bounded per stream (`gateway.replay_buffer_bytes`, oldest events dropped first)
//!   and over all streams of the router ([`ReplayBudget`], `gateway.resume_max_total_bytes`):
//!   past it, the buffers of the streams that started buffering longest ago are dropped first.
//!
//! A client asking for an event that is no longer buffered is told the stream cannot be
//! resumed. The queue towards the attached response is bounded too: a client that stops
//! reading its stream holds the pump, which stops taking from the stream's outbox, which then
//! drops notifications and makes responses wait (see [`crate::outbox`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio::task::AbortHandle;

use crate::outbox::OutboxRx;

/// Frames queued towards one attached response (live ones; a replay queues all it has).
const ATTACHED_CAPACITY: usize = 64;

/// One SSE event: its sequence number on its stream and its JSON text (empty for the
/// priming event).
pub(crate) type Frame = (u64, Bytes);

/// Resumption settings, from `[gateway]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResumeSettings {
    /// How long a stream waits for its client to reconnect before its request is cancelled,
    /// and how long a stream whose client went away stays replayable.
    pub window: Duration,
    /// Replay buffer per stream, in bytes of JSON.
    pub max_buffer_bytes: usize,
}

/// The bytes every stream of a router may keep for replay, together. Streams are charged in
/// the order they started buffering; over the budget, the oldest one's buffer is dropped
/// whole (resuming it is then refused as evicted) until the total fits again.
pub(crate) struct ReplayBudget {
    max_total: usize,
    total: AtomicUsize,
    /// Streams holding buffered bytes, oldest first, by their charge number.
    order: Order,
    next: AtomicU64,
}

impl ReplayBudget {
    pub(crate) fn new(max_total: usize) -> Arc<ReplayBudget> {
        Arc::new(ReplayBudget { max_total, total: AtomicUsize::new(0), order: Mutex::default(), next: AtomicU64::new(0) })
    }

    /// Bytes buffered for replay right now, over all streams.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Drops the oldest streams' buffers while the total is over the budget. Never called with
    /// a stream's lock held (it takes other streams' locks).
    fn enforce(&self) {
        while self.total.load(Ordering::Relaxed) > self.max_total {
            let Some((_, victim)) = self.order.lock().pop_first() else { break };
            if let Some(state) = victim.upgrade() {
                let freed = state.lock().drop_buffer(None);
                self.total.fetch_sub(freed, Ordering::Relaxed);
                metrics::counter!("stowage_replay_evicted_bytes_total").increment(freed as u64);
            }
        }
    }
}

/// The budget's streams, by charge number.
type Order = Mutex<BTreeMap<u64, Weak<Mutex<StreamState>>>>;

/// A session's SSE streams.
pub(crate) struct StreamHub {
    settings: ResumeSettings,
    budget: Arc<ReplayBudget>,
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
    /// Counts attachments; the current sink's receiver carries the same number.
    generation: u64,
    /// The attachment that had the stream when it finished: once its receiver has taken the
    /// last frame, everything was delivered.
    finished_with: Option<u64>,
    /// The first frame pushed while no client was attached (a fresh attach starts there).
    first_unsent: Option<u64>,
    done: bool,
    cancel: Option<AbortHandle>,
    /// This stream's place in the [`ReplayBudget`] while it holds buffered bytes.
    charge: Option<u64>,
    /// Woken when the stream is forgotten, so its pump stops waiting out the window.
    forgotten: Arc<Notify>,
}

impl StreamState {
    /// Empties the buffer (what was in it can no longer be replayed); returns its bytes. With
    /// `order`, also leaves the budget's order (the caller is not the budget popping it).
    fn drop_buffer(&mut self, order: Option<&Order>) -> usize {
        let freed = std::mem::take(&mut self.buffered_bytes);
        if let Some((last, _)) = self.buffer.back() {
            self.dropped_through = self.dropped_through.max(*last);
        }
        self.buffer = VecDeque::new();
        if let (Some(key), Some(order)) = (self.charge.take(), order) {
            order.lock().remove(&key);
        }
        self.charge = None;
        freed
    }
}

/// The receiving half handed to an HTTP response: buffered frames first, then live ones.
pub(crate) struct Attached {
    rx: mpsc::Receiver<Frame>,
    /// Where to report a whole delivery.
    origin: Option<Origin>,
}

/// The stream an [`Attached`] belongs to, and which attachment it is.
struct Origin {
    hub: Weak<StreamHub>,
    number: u64,
    state: Weak<Mutex<StreamState>>,
    generation: u64,
}

impl Origin {
    fn new(hub: &Arc<StreamHub>, number: u64, state: &Arc<Mutex<StreamState>>, generation: u64) -> Option<Origin> {
        Some(Origin { hub: Arc::downgrade(hub), number, state: Arc::downgrade(state), generation })
    }
}

impl Attached {
    /// The next frame; `None` once the stream has ended or another attachment took it over.
    /// When this attachment took the stream's last frame, the stream was delivered whole and
    /// is forgotten at once: nothing is left to replay.
    pub(crate) async fn recv(&mut self) -> Option<Frame> {
        let frame = self.rx.recv().await;
        if frame.is_none()
            && let Some(origin) = self.origin.take()
            && let (Some(hub), Some(state)) = (origin.hub.upgrade(), origin.state.upgrade())
        {
            let whole = {
                let s = state.lock();
                s.done && s.finished_with == Some(origin.generation)
            };
            if whole {
                hub.forget(origin.number);
            }
        }
        frame
    }
}

/// Why a `Last-Event-ID` cannot be honoured.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResumeError {
    #[error("Last-Event-ID {0:?} is not an event id of this session")]
    Malformed(String),
    #[error("stream of event {0:?} has ended and its replay window has passed; re-send the request")]
    Gone(String),
    #[error("events after {0:?} are no longer buffered; re-send the request")]
    Evicted(String),
}

impl StreamHub {
    pub(crate) fn new(settings: ResumeSettings, budget: Arc<ReplayBudget>) -> StreamHub {
        StreamHub { settings, budget, next: AtomicU64::new(0), streams: Mutex::new(HashMap::new()) }
    }

    /// Opens a stream fed by `rx` and attaches a first receiver to it. With `priming`, the
    /// first frame is the empty priming event (so the client learns an event id to resume
    /// from before anything else arrives). `cancel` is aborted if the client stays away
    /// longer than the resume window; without it (the standalone stream) the stream simply
    /// waits to be re-attached.
    pub(crate) fn open(self: &Arc<Self>, rx: OutboxRx, priming: bool, cancel: Option<AbortHandle>) -> (u64, Attached) {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(Mutex::new(StreamState { next_seq: 1, cancel: cancel.clone(), ..Default::default() }));
        let (tx, attached) = mpsc::channel(ATTACHED_CAPACITY);
        if priming {
            let _ = tx.try_send((0, Bytes::new()));
        }
        state.lock().sink = Some(tx);
        self.streams.lock().insert(number, state.clone());
        let attached = Attached { rx: attached, origin: Origin::new(self, number, &state, 0) };
        tokio::spawn(pump(Arc::downgrade(self), self.settings, self.budget.clone(), number, state, rx, cancel));
        (number, attached)
    }

    /// Re-attaches to the stream of `last_event_id`: frames after it that are still buffered
    /// come first, then live ones. A previously attached receiver is detached.
    pub(crate) fn resume(self: &Arc<Self>, last_event_id: &str) -> Result<(u64, Attached), ResumeError> {
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
        let generation = s.attach(tx);
        drop(s);
        Ok((number, Attached { rx, origin: Origin::new(self, number, &state, generation) }))
    }

    /// Attaches a fresh receiver to stream `number` (the standalone stream, on a `GET`
    /// without `Last-Event-ID`): frames no client was attached for come first. With
    /// `priming`, an empty frame carrying the id to resume from leads.
    pub(crate) fn reattach(self: &Arc<Self>, number: u64, priming: bool) -> Option<Attached> {
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
        let generation = s.attach(tx);
        drop(s);
        Some(Attached { rx, origin: Origin::new(self, number, &state, generation) })
    }

    /// Ends every stream and cancels every request still running on one (the session ended).
    pub(crate) fn close(&self) {
        let streams: Vec<_> = self.streams.lock().drain().map(|(_, s)| s).collect();
        for state in streams {
            let mut s = state.lock();
            s.sink = None;
            if let Some(c) = s.cancel.take() {
                c.abort();
            }
            let freed = s.drop_buffer(Some(&self.budget.order));
            s.forgotten.notify_one();
            drop(s);
            self.budget.total.fetch_sub(freed, Ordering::Relaxed);
        }
    }

    /// Whether any stream has a client attached or a request still running.
    pub(crate) fn busy(&self) -> bool {
        self.streams.lock().values().any(|s| {
            let s = s.lock();
            !s.done && s.sink.as_ref().is_some_and(|t| !t.is_closed())
        })
    }

    /// How many streams are kept (running, or replayable).
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.streams.lock().len()
    }

    /// Forgets stream `number`: its buffer goes, its pump stops waiting.
    fn forget(&self, number: u64) {
        let Some(state) = self.streams.lock().remove(&number) else { return };
        let mut s = state.lock();
        let freed = s.drop_buffer(Some(&self.budget.order));
        s.forgotten.notify_one();
        drop(s);
        self.budget.total.fetch_sub(freed, Ordering::Relaxed);
    }
}

impl StreamState {
    /// Makes `tx` the stream's sink (a finished stream's replay ends once `tx` is dropped,
    /// which is right away); returns the attachment's number.
    fn attach(&mut self, tx: mpsc::Sender<Frame>) -> u64 {
        self.generation += 1;
        if self.done {
            // Everything there is is in the replay just queued: taking it all is delivery.
            self.finished_with = Some(self.generation);
            self.sink = None;
        } else {
            self.sink = Some(tx);
        }
        self.generation
    }
}

/// The SSE id of frame `seq` on stream `number`.
pub(crate) fn event_id(number: u64, seq: u64) -> String {
    format!("{number}-{seq}")
}

fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (a, b) = id.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

async fn pump(
    hub: Weak<StreamHub>,
    settings: ResumeSettings,
    budget: Arc<ReplayBudget>,
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
                let (sink, frame) = push(&state, &budget, Bytes::from(line), settings.max_buffer_bytes);
                budget.enforce();
                if let Some(sink) = sink
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
    let forgotten = {
        let mut s = state.lock();
        s.done = true;
        s.cancel = None;
        // The attached response (if any) now takes what is queued and ends: if it takes it
        // all, the stream was delivered whole and is forgotten then.
        if s.sink.take().is_some_and(|t| !t.is_closed()) {
            s.finished_with = Some(s.generation);
        }
        s.forgotten.clone()
    };
    // A client that went away may still resume within the window; then the stream goes.
    tokio::select! {
        _ = tokio::time::sleep(settings.window) => {
            if let Some(h) = hub.upgrade() {
                h.forget(number);
            }
        }
        _ = forgotten.notified() => {}
    }
}

/// Buffers a frame (charging the budget); returns it with the attached response's queue, if
/// one is attached.
fn push(state: &Arc<Mutex<StreamState>>, budget: &ReplayBudget, data: Bytes, max_bytes: usize) -> (Option<mpsc::Sender<Frame>>, Frame) {
    let mut s = state.lock();
    let seq = s.next_seq;
    s.next_seq += 1;
    let sink = s.sink.clone().filter(|t| !t.is_closed());
    if sink.is_none() {
        s.sink = None;
        s.first_unsent.get_or_insert(seq);
    }
    let before = s.buffered_bytes;
    s.buffered_bytes += data.len();
    s.buffer.push_back((seq, data.clone()));
    // Strict: a frame bigger than the whole budget is not kept either (resuming after it is
    // refused as evicted), so a session never pins more than its budget per stream.
    while s.buffered_bytes > max_bytes {
        let (q, d) = s.buffer.pop_front().expect("non-empty");
        s.buffered_bytes -= d.len();
        s.dropped_through = q;
    }
    let after = s.buffered_bytes;
    if after > 0 && s.charge.is_none() {
        let key = budget.next.fetch_add(1, Ordering::Relaxed);
        budget.order.lock().insert(key, Arc::downgrade(state));
        s.charge = Some(key);
    }
    // Under the stream's lock, so whoever empties this buffer later (under the same lock)
    // subtracts bytes that were already added.
    if after >= before {
        budget.total.fetch_add(after - before, Ordering::Relaxed);
    } else {
        budget.total.fetch_sub(before - after, Ordering::Relaxed);
    }
    (sink, (seq, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(window_ms: u64, max: usize) -> ResumeSettings {
        ResumeSettings { window: Duration::from_millis(window_ms), max_buffer_bytes: max }
    }

    fn hub(settings: ResumeSettings) -> Arc<StreamHub> {
        Arc::new(StreamHub::new(settings, ReplayBudget::new(usize::MAX)))
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
        let hub = hub(settings(5_000, 1 << 20));
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
        let hub = hub(settings(100, 1 << 20));
        let (_tx, rx) = mpsc::channel::<Vec<u8>>(16);
        let task = tokio::spawn(std::future::pending::<()>());
        let (_, attached) = hub.open(rx, false, Some(task.abort_handle()));
        drop(attached);
        let r = tokio::time::timeout(Duration::from_secs(5), task).await.expect("aborted within the window");
        assert!(r.unwrap_err().is_cancelled());
    }

    #[tokio::test]
    async fn evicted_and_unknown_ids_are_refused() {
        let hub = hub(settings(5_000, 4));
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
        let hub = hub(settings(5_000, 1 << 20));
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

    #[tokio::test]
    async fn a_stream_delivered_whole_is_forgotten_at_once() {
        let budget = ReplayBudget::new(usize::MAX);
        let hub = Arc::new(StreamHub::new(settings(60_000, 1 << 20), budget.clone()));
        let (tx, rx) = mpsc::channel(16);
        let (n, mut attached) = hub.open(rx, true, Some(tokio::spawn(std::future::pending::<()>()).abort_handle()));
        tx.send(b"progress".to_vec()).await.unwrap();
        tx.send(b"response".to_vec()).await.unwrap();
        drop(tx);
        let mut got = vec![];
        while let Some((q, _)) = attached.recv().await {
            got.push(q);
        }
        assert_eq!(got, [0, 1, 2]);
        // Not after the 60 s window: now.
        assert_eq!(hub.kept(), 0);
        assert_eq!(budget.used(), 0);
        assert!(matches!(hub.resume(&event_id(n, 1)), Err(ResumeError::Gone(_))));
    }

    #[tokio::test]
    async fn a_stream_whose_client_left_stays_replayable_for_the_window_only() {
        let budget = ReplayBudget::new(usize::MAX);
        let hub = Arc::new(StreamHub::new(settings(300, 1 << 20), budget.clone()));
        let (tx, rx) = mpsc::channel(16);
        let (n, attached) = hub.open(rx, false, None);
        drop(attached);
        tx.send(b"response".to_vec()).await.unwrap();
        drop(tx);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!((hub.kept(), budget.used()), (1, 8));
        // Resumed and replayed whole: forgotten then.
        let (_, mut again) = hub.resume(&event_id(n, 0)).unwrap();
        assert_eq!(again.recv().await.map(|f| f.0), Some(1));
        assert!(again.recv().await.is_none());
        assert_eq!((hub.kept(), budget.used()), (0, 0));
        // One nobody resumes goes after the window.
        let (tx, rx) = mpsc::channel(16);
        let (_, attached) = hub.open(rx, false, None);
        drop(attached);
        tx.send(b"response".to_vec()).await.unwrap();
        drop(tx);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(hub.kept(), 1);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!((hub.kept(), budget.used()), (0, 0));
    }

    #[tokio::test]
    async fn replay_over_all_streams_is_bounded_oldest_first() {
        let budget = ReplayBudget::new(10);
        let a = Arc::new(StreamHub::new(settings(60_000, 1 << 20), budget.clone()));
        let b = Arc::new(StreamHub::new(settings(60_000, 1 << 20), budget.clone()));
        let (ta, ra) = mpsc::channel(16);
        let (na, first) = a.open(ra, false, None);
        drop(first);
        ta.send(b"aaaaaa".to_vec()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (tb, rb) = mpsc::channel(16);
        let (nb, second) = b.open(rb, false, None);
        drop(second);
        tb.send(b"bbbbbb".to_vec()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        // 12 bytes over a budget of 10: the older stream's buffer went.
        assert_eq!(budget.used(), 6);
        assert!(matches!(a.resume(&event_id(na, 0)), Err(ResumeError::Evicted(_))));
        let (_, mut rest) = b.resume(&event_id(nb, 0)).unwrap();
        assert_eq!(rest.recv().await.map(|f| f.1), Some(Bytes::from_static(b"bbbbbb")));
        // The evicted stream still runs and buffers what comes next.
        ta.send(b"cc".to_vec()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(a.resume(&event_id(na, 1)).is_ok());
        a.close();
        b.close();
        assert_eq!(budget.used(), 0);
    }
}
