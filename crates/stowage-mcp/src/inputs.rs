//! Server-initiated input (sampling, elicitation, roots) for 2026-07-28 clients.
//!
//! Through 2025-11-25 an upstream asks the client for input by sending it a JSON-RPC request
//! mid-call, and the gateway relays that request (see `Gateway::from_upstream`). The stateless
//! revision has no server-to-client requests: a `tools/call`, `prompts/get` or
//! `resources/read` instead *returns* `{"resultType": "input_required", "inputRequests",
//! "requestState"}`, and the client retries the original request with `inputResponses` and
//! the echoed `requestState` (SEP-2322).
//!
//! The gateway bridges the two without the upstream noticing: the call to a 2025-era
//! upstream keeps running in an [`Exchange`]; each input request it makes is answered with an
//! `input_required` result to the client, and the client's retry delivers the responses to
//! the waiting upstream request and waits again. The `requestState` is an unguessable key to
//! the exchange, usable only by the identity (tenant, user) that started it, and an exchange
//! the client abandons expires after the request timeout, cancelling the upstream call.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::GatewayError;
use crate::jsonrpc::Message;
use crate::outbox::{Outbox, RelayHandle};

/// The client's answer to one input request: its result, or why there is none.
pub(crate) type InputAnswer = Result<Value, String>;

/// An upstream's request for client input, on its way to the client.
#[derive(Debug)]
pub(crate) struct InputAsk {
    pub method: String,
    pub params: Value,
    pub reply: oneshot::Sender<InputAnswer>,
}

/// Where a call running inside an exchange sends its input requests.
pub(crate) type InputTx = mpsc::Sender<InputAsk>;

/// Input requests one call may have waiting for the client at once.
const MAX_WAITING_ASKS: usize = 16;

tokio::task_local! {
    /// Set while a call runs inside an [`Exchange`]: the gateway's forwarding code reads it to
    /// register the call's input channel, without threading it through every request path.
    pub static INPUTS: InputTx;
}

/// The input channel of the call running on this task, if it runs inside an exchange.
pub(crate) fn current() -> Option<InputTx> {
    INPUTS.try_with(Clone::clone).ok()
}

type Outcome = Result<Message, GatewayError>;

/// One interactive request in progress across the client's retries.
pub(crate) struct Exchange {
    task: JoinHandle<Outcome>,
    asks: mpsc::Receiver<InputAsk>,
    pending: HashMap<String, oneshot::Sender<InputAnswer>>,
    /// Points the running call's progress and log messages at the stream of the client's
    /// current attempt; at nothing between attempts, so a parked exchange does not hold the
    /// last attempt's response stream open. Forwarding is synchronous: a call's progress is on
    /// the stream before its result.
    relay: RelayHandle,
    owner: Owner,
    next_key: u64,
}

impl Drop for Exchange {
    fn drop(&mut self) {
        // Abandoned (expired, or the client went away mid-attempt): cancel the upstream call.
        self.task.abort();
    }
}

/// Who may continue an exchange: the tenant and user of the session that started it.
pub(crate) type Owner = (Option<String>, Option<String>);

/// What one attempt of an interactive request comes to.
pub(crate) enum Step {
    /// The call finished: its response.
    Done(Outcome),
    /// The call needs input: the `input_required` result to send, and the exchange to keep
    /// under its `requestState`.
    NeedsInput(Value, String, Exchange),
}

impl Exchange {
    /// Starts `call` on its own task with an input channel and a relay for its messages.
    pub(crate) fn start<F>(owner: Owner, outbox: &Outbox, call: impl FnOnce(Outbox) -> F) -> Exchange
    where
        F: Future<Output = Outcome> + Send + 'static,
    {
        let (inputs, asks) = mpsc::channel(MAX_WAITING_ASKS);
        let (call_out, relay) = Outbox::relay(Some(outbox.clone()));
        let task = tokio::spawn(INPUTS.scope(inputs, call(call_out)));
        Exchange { task, asks, pending: HashMap::new(), relay, owner, next_key: 1 }
    }

    pub(crate) fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Delivers the client's `inputResponses` to the upstream requests waiting for them, and
    /// points the call's messages at the retry's stream.
    pub(crate) fn answer(&mut self, responses: Option<&serde_json::Map<String, Value>>, outbox: &Outbox) {
        self.relay.point_to(Some(outbox.clone()));
        for (key, reply) in self.pending.drain() {
            let answer = match responses.and_then(|r| r.get(&key)) {
                Some(v) => Ok(v.clone()),
                None => Err(format!("the client sent no response for input request {key}")),
            };
            let _ = reply.send(answer);
        }
    }

    /// Runs until the call finishes or asks for input. Input requests that arrive together
    /// go to the client in one `input_required` result.
    pub(crate) async fn step(mut self) -> Step {
        let first = tokio::select! {
            r = &mut self.task => {
                let out = r.unwrap_or_else(|e| Err(GatewayError::Internal(format!("the call failed: {e}"))));
                return Step::Done(out);
            }
            Some(ask) = self.asks.recv() => ask,
        };
        let mut requests = serde_json::Map::new();
        let mut next = Some(first);
        while let Some(ask) = next.take().or_else(|| self.asks.try_recv().ok()) {
            let key = format!("input-{}", self.next_key);
            self.next_key += 1;
            requests.insert(key.clone(), json!({"method": ask.method, "params": ask.params}));
            self.pending.insert(key, ask.reply);
        }
        self.relay.point_to(None);
        let state = uuid::Uuid::new_v4().to_string();
        let result = json!({"resultType": "input_required", "inputRequests": requests, "requestState": state});
        Step::NeedsInput(result, state, self)
    }
}

/// Exchanges waiting for the client's retry, by `requestState`.
#[derive(Default)]
pub(crate) struct Exchanges {
    waiting: Mutex<HashMap<String, Exchange>>,
}

impl Exchanges {
    /// Parks `exchange` under `state` until the client retries, or `ttl` passes.
    pub(crate) fn park(self: &Arc<Self>, state: String, exchange: Exchange, ttl: Duration) {
        self.waiting.lock().insert(state.clone(), exchange);
        let me: Weak<Exchanges> = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            if let Some(me) = me.upgrade() {
                me.waiting.lock().remove(&state);
            }
        });
    }

    /// Takes the exchange parked under `state`, if `owner` started it. Another identity's
    /// state is answered exactly like an unknown one, and stays parked.
    pub(crate) fn take(&self, state: &str, owner: &Owner) -> Option<Exchange> {
        let mut waiting = self.waiting.lock();
        if waiting.get(state)?.owner() != owner {
            return None;
        }
        waiting.remove(state)
    }
}

/// Asks the client through the exchange's channel and waits for its answer.
pub(crate) async fn ask(inputs: &InputTx, method: &str, params: Value, timeout: Duration) -> InputAnswer {
    let (reply, answer) = oneshot::channel();
    inputs
        .send(InputAsk { method: method.to_owned(), params, reply })
        .await
        .map_err(|_| format!("the call that made this {method} request has ended"))?;
    match tokio::time::timeout(timeout, answer).await {
        Ok(Ok(a)) => a,
        Ok(Err(_)) => Err(format!("the client abandoned the request before answering {method}")),
        Err(_) => Err(format!("the client did not answer {method} within {}s", timeout.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn input_requests_round_trip_through_retries() {
        let (out, _rx) = Outbox::channel();
        let ex = Exchange::start((None, Some("u".into())), &out, |_call_out| async {
            let inputs = current().expect("runs inside the exchange");
            let a = ask(&inputs, "sampling/createMessage", json!({"maxTokens": 5}), Duration::from_secs(5))
                .await
                .map_err(GatewayError::Internal)?;
            let text = a["content"]["text"].as_str().unwrap_or_default().to_owned();
            Ok(Message::response(Value::Null, &json!({"content": [{"type": "text", "text": text}]})))
        });
        let Step::NeedsInput(result, state, mut ex) = ex.step().await else { panic!("expected input_required") };
        assert_eq!(result["resultType"], "input_required");
        assert_eq!(result["inputRequests"]["input-1"]["method"], "sampling/createMessage");
        assert_eq!(result["requestState"], state);
        let responses = json!({"input-1": {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}});
        ex.answer(responses.as_object(), &out);
        let Step::Done(Ok(m)) = ex.step().await else { panic!("expected the final result") };
        assert!(m.result.unwrap().get().contains("\"hi\""));
    }

    #[tokio::test]
    async fn only_the_owner_can_continue_and_unknown_states_are_refused() {
        let exchanges = Arc::new(Exchanges::default());
        let (out, _rx) = Outbox::channel();
        let ex = Exchange::start((None, Some("alice".into())), &out, |_| std::future::pending());
        exchanges.park("s1".into(), ex, Duration::from_secs(60));
        assert!(exchanges.take("s1", &(None, Some("mallory".into()))).is_none());
        assert!(exchanges.take("nope", &(None, Some("alice".into()))).is_none());
        assert!(exchanges.take("s1", &(None, Some("alice".into()))).is_some());
    }

    #[tokio::test]
    async fn an_abandoned_exchange_expires_and_cancels_its_call() {
        let exchanges = Arc::new(Exchanges::default());
        let (out, _rx) = Outbox::channel();
        let (dropped_tx, dropped) = oneshot::channel::<()>();
        let ex = Exchange::start((None, None), &out, move |_| async move {
            let _guard = dropped_tx; // dropped when the call is cancelled
            std::future::pending::<Outcome>().await
        });
        exchanges.park("s".into(), ex, Duration::from_millis(50));
        let r = tokio::time::timeout(Duration::from_secs(5), dropped).await;
        assert!(r.is_ok(), "the call was not cancelled when its exchange expired");
        assert!(exchanges.take("s", &(None, None)).is_none());
    }
}
