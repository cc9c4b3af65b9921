//! The stdio downstream: newline-delimited JSON-RPC on a byte pipe, one session.
//!
//! Each request is handled on its own task, so a long tool call never blocks the next
//! request (or the cancellation aimed at it); at most [`MAX_IN_FLIGHT`] run at once, after
//! which the reader stops reading (backpressure on the client's pipe). Every outgoing message
//! goes through one bounded outbox and one writer task, so lines never interleave and a
//! client that stops reading costs bounded memory.
//!
//! When the client closes its input, requests waiting for it (sampling, roots) fail at once,
//! running ones get [`SHUTDOWN_GRACE`] to answer, and the session ends.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::framing::{FrameError, LineReader, write_line};
use crate::gateway::Gateway;
use crate::jsonrpc::{Incoming, Kind, Message, code, refuse_batch, scan_request_id};
use crate::outbox::Outbox;
use crate::session::{Caller, SessionKind, deliver_or_log};

/// Requests of one stdio client handled at once.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// How long requests still running when the client closes its input may take to answer.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves one client until its input closes.
pub async fn serve<R, W>(gw: Arc<Gateway>, reader: R, mut writer: W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (outbox, mut rx) = Outbox::channel();
    let writer_task = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            write_line(&mut writer, &line).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let session = gw.open_session(SessionKind::Stdio, Caller::default(), Some(outbox.clone()));
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut lines = LineReader::new(reader, gw.config.max_message_bytes);
    let mut tasks = tokio::task::JoinSet::new();
    let result = loop {
        while tasks.try_join_next().is_some() {}
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break Ok(()),
            Err(FrameError::TooLong { limit, head }) => {
                // Answered at once, naming the limit, under the request's own id when its
                // start says which.
                let id = scan_request_id(&head).unwrap_or(Value::Null);
                let e =
                    Message::error(id, code::INVALID_REQUEST, format!("message over the {limit} byte limit (gateway.max_message_bytes)"));
                deliver_or_log(&outbox, e.to_line(), "an error answer").await;
                continue;
            }
            Err(FrameError::Io(e)) => break Err(e),
        };
        let msg = match Incoming::parse(&line) {
            Ok(Incoming::One(m)) => m,
            Ok(Incoming::Batch(items)) => {
                if let Some(answers) = refuse_batch(&items) {
                    deliver_or_log(&outbox, answers, "a batch answer").await;
                }
                continue;
            }
            Err(e) => {
                deliver_or_log(
                    &outbox,
                    Message::error(Value::Null, code::PARSE_ERROR, format!("parse error: {e}")).to_line(),
                    "an error answer",
                )
                .await;
                continue;
            }
        };
        if msg.kind() == Kind::Request {
            if let Some(id) = &msg.id {
                session.begin(id);
            }
            let Ok(permit) = permits.clone().acquire_owned().await else { break Ok(()) };
            let (gw, session, outbox) = (gw.clone(), session.clone(), outbox.clone());
            tasks.spawn(async move {
                if let Some(resp) = gw.handle(&session, msg, &outbox).await {
                    deliver_or_log(&outbox, resp.to_line(), "a response").await;
                }
                drop(permit);
            });
        } else if let Some(resp) = gw.handle(&session, msg, &outbox).await {
            deliver_or_log(&outbox, resp.to_line(), "a response").await;
        }
    };
    // End of input: nothing can reach the client's answers any more, so whatever waits for
    // them fails now; what is still running gets a short grace to answer (a piped batch of
    // requests expects its answers), then the session and its upstream sessions end.
    session.close();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.shutdown().await;
    gw.close_session(&session);
    drop(outbox);
    drop(session);
    match writer_task.await {
        Ok(r) => result.and(r),
        Err(_) => result,
    }
}
