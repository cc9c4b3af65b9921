//! The stdio downstream: newline-delimited JSON-RPC on a byte pipe, one session.
//!
//! Each request is handled on its own task, so a long tool call never blocks the next
//! request (or the cancellation aimed at it); every outgoing message goes through one writer
//! task, so lines never interleave.

use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::framing::{FrameError, LineReader, write_line};
use crate::gateway::Gateway;
use crate::jsonrpc::{Kind, Message, code};

/// Serves one client until its input closes.
pub async fn serve<R, W>(gw: Arc<Gateway>, reader: R, mut writer: W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer_task = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            write_line(&mut writer, &line).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let session = gw.open_session(None, Some(tx.clone()));
    let mut lines = LineReader::new(reader, gw.config.max_message_bytes);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        while tasks.try_join_next().is_some() {}
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(FrameError::TooLong { limit }) => {
                let e = Message::error(Value::Null, code::INVALID_REQUEST, format!("message over the {limit} byte limit"));
                let _ = tx.send(e.to_line());
                continue;
            }
            Err(FrameError::Io(e)) => return Err(e),
        };
        let msg = match Message::parse(&line) {
            Ok(m) => m,
            Err(e) => {
                let _ = tx.send(Message::error(Value::Null, code::PARSE_ERROR, format!("parse error: {e}")).to_line());
                continue;
            }
        };
        if msg.kind() == Kind::Request {
            if let Some(id) = &msg.id {
                session.begin(id);
            }
            let (gw, session, tx) = (gw.clone(), session.clone(), tx.clone());
            tasks.spawn(async move {
                if let Some(resp) = gw.handle(&session, msg, &tx).await {
                    let _ = tx.send(resp.to_line());
                }
            });
        } else if let Some(resp) = gw.handle(&session, msg, &tx).await {
            let _ = tx.send(resp.to_line());
        }
    }
    // End of input: answer what is still running (a piped batch of requests expects its
    // answers), then flush and stop.
    while tasks.join_next().await.is_some() {}
    drop(tx);
    session.set_notify(None);
    drop(session);
    match writer_task.await {
        Ok(r) => r,
        Err(_) => Ok(()),
    }
}
