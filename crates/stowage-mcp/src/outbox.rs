//! [`Outbox`]: the bounded queue of messages on their way to one client stream.
//!
//! Every queue between the gateway's tasks is bounded, so a client that stops reading costs a
//! fixed amount of memory, never an unbounded backlog. What happens when a queue is full
//! depends on what is sent:
//! - notifications (progress, logs, list changes) are dropped and counted
//!   (`stowage_messages_dropped_total{reason="slow_client"}`): they are advisory, and waiting
//!   for one client would stall the upstream reader every other client depends on;
//! - responses and server-initiated requests wait for room (backpressure) up to
//!   [`DELIVER_TIMEOUT`], then fail with [`OutboxError::Stalled`], which the caller turns
//!   into a clear error (an error answer to the upstream, a log line, a closed stream).
//!
//! A 2026-07-28 client's interactive call can outlive the request that started it (it waits in
//! an exchange between the client's retries), so its messages go through a relay
//! ([`Outbox::relay`]) that always points at the current attempt's stream. Sending through the
//! relay is synchronous, so a call's progress always reaches the stream before its result.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;

/// Messages queued per client stream before notifications are dropped and responses wait.
pub const OUTBOX_CAPACITY: usize = 256;

/// How long a response or request waits for a full queue before giving up.
pub const DELIVER_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a message that must arrive did not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboxError {
    /// The stream's reader is gone (the client disconnected or its stream ended): nothing
    /// sent from now on can reach it.
    #[error("the client's stream is closed")]
    Closed,
    /// The queue stayed full for [`DELIVER_TIMEOUT`]: the client is connected but stopped
    /// reading.
    #[error("the client has not read its messages for {}s", DELIVER_TIMEOUT.as_secs())]
    Stalled,
}

/// The receiving end, read by a transport's writer.
pub type OutboxRx = mpsc::Receiver<Vec<u8>>;

/// Where messages for one client stream go. Cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    target: Target,
}

#[derive(Clone)]
enum Target {
    Channel(mpsc::Sender<Vec<u8>>),
    /// The current attempt's outbox of an exchange; `None` between attempts.
    Relay(Arc<Mutex<Option<Outbox>>>),
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.target {
            Target::Channel(_) => "Outbox(channel)",
            Target::Relay(_) => "Outbox(relay)",
        })
    }
}

/// Points a relay outbox at a new stream.
#[derive(Clone)]
pub struct RelayHandle(Arc<Mutex<Option<Outbox>>>);

impl RelayHandle {
    /// Sends what follows to `outbox`; `None` between attempts, when nothing can be delivered.
    pub(crate) fn point_to(&self, outbox: Option<Outbox>) {
        *self.0.lock() = outbox;
    }
}

impl Outbox {
    /// A bounded outbox of [`OUTBOX_CAPACITY`] messages and its receiving end.
    pub fn channel() -> (Outbox, OutboxRx) {
        Outbox::with_capacity(OUTBOX_CAPACITY)
    }

    /// A bounded outbox of `capacity` messages (at least 1) and its receiving end.
    pub(crate) fn with_capacity(capacity: usize) -> (Outbox, OutboxRx) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Outbox { target: Target::Channel(tx) }, rx)
    }

    /// An outbox that forwards to whatever `point_to` last named, starting with `first`.
    pub fn relay(first: Option<Outbox>) -> (Outbox, RelayHandle) {
        let shared = Arc::new(Mutex::new(first));
        (Outbox { target: Target::Relay(shared.clone()) }, RelayHandle(shared))
    }

    /// Queues an advisory message (a notification): never waits; dropped and counted when the
    /// client is not keeping up or gone. Returns whether it was queued.
    pub fn notify(&self, line: Vec<u8>) -> bool {
        match &self.target {
            Target::Channel(tx) => match tx.try_send(line) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    metrics::counter!("stowage_messages_dropped_total", "reason" => "slow_client").increment(1);
                    tracing::debug!(target: "stowage::gateway", "dropped a notification: the client's queue is full");
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            },
            Target::Relay(current) => {
                let current = current.lock().clone();
                current.is_some_and(|o| o.notify(line))
            }
        }
    }

    /// Queues a message that must arrive (a response or a request), waiting while the queue is
    /// full, up to [`DELIVER_TIMEOUT`].
    pub async fn deliver(&self, line: Vec<u8>) -> Result<(), OutboxError> {
        let tx = match &self.target {
            Target::Channel(tx) => tx.clone(),
            Target::Relay(current) => {
                let current = current.lock().clone();
                return match current {
                    Some(o) => Box::pin(o.deliver(line)).await,
                    None => Err(OutboxError::Closed),
                };
            }
        };
        match tx.try_send(line) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(OutboxError::Closed),
            Err(mpsc::error::TrySendError::Full(line)) => match tokio::time::timeout(DELIVER_TIMEOUT, tx.send(line)).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(_)) => Err(OutboxError::Closed),
                Err(_) => {
                    metrics::counter!("stowage_messages_dropped_total", "reason" => "stalled_client").increment(1);
                    Err(OutboxError::Stalled)
                }
            },
        }
    }

    /// Whether the receiving end is gone.
    pub fn is_closed(&self) -> bool {
        match &self.target {
            Target::Channel(tx) => tx.is_closed(),
            Target::Relay(current) => current.lock().as_ref().is_none_or(Outbox::is_closed),
        }
    }

    /// Resolves when the receiving end is gone (a relay: when its current stream is).
    pub async fn closed(&self) {
        match &self.target {
            Target::Channel(tx) => tx.closed().await,
            Target::Relay(current) => {
                let current = current.lock().clone();
                match current {
                    Some(o) => Box::pin(o.closed()).await,
                    None => std::future::pending().await,
                }
            }
        }
    }

    /// Whether two outboxes feed the same stream.
    pub fn same_stream(&self, other: &Outbox) -> bool {
        match (&self.target, &other.target) {
            (Target::Channel(a), Target::Channel(b)) => a.same_channel(b),
            (Target::Relay(a), Target::Relay(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn notifications_are_dropped_when_full_and_deliveries_wait_for_room() {
        let (out, mut rx) = Outbox::with_capacity(2);
        assert!(out.notify(b"1".to_vec()));
        assert!(out.notify(b"2".to_vec()));
        assert!(!out.notify(b"3".to_vec()), "a full queue drops notifications");
        let waiting = tokio::spawn({
            let out = out.clone();
            async move { out.deliver(b"4".to_vec()).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "a delivery waits for room");
        assert_eq!(rx.recv().await.unwrap(), b"1");
        waiting.await.unwrap().unwrap();
        assert_eq!(rx.recv().await.unwrap(), b"2");
        assert_eq!(rx.recv().await.unwrap(), b"4");
        drop(rx);
        assert_eq!(out.deliver(b"5".to_vec()).await, Err(OutboxError::Closed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_client_gets_a_clear_error_not_unbounded_memory() {
        let (out, _rx) = Outbox::with_capacity(1);
        out.deliver(b"fills it".to_vec()).await.unwrap();
        assert_eq!(out.deliver(b"waits".to_vec()).await, Err(OutboxError::Stalled));
    }

    #[tokio::test]
    async fn a_relay_follows_the_current_stream() {
        let (a, mut rx_a) = Outbox::channel();
        let (b, mut rx_b) = Outbox::channel();
        let (relay, handle) = Outbox::relay(Some(a));
        assert!(relay.notify(b"to a".to_vec()));
        handle.point_to(None);
        assert!(!relay.notify(b"nowhere".to_vec()));
        assert_eq!(relay.deliver(b"nowhere".to_vec()).await, Err(OutboxError::Closed));
        handle.point_to(Some(b));
        relay.deliver(b"to b".to_vec()).await.unwrap();
        assert_eq!(rx_a.recv().await.unwrap(), b"to a");
        assert_eq!(rx_b.recv().await.unwrap(), b"to b");
    }
}
