//! Tasks (MCP 2025-11-25): a `tools/call` with a `task` parameter answers with a task handle,
//! and the client later asks `tasks/get`, `tasks/result`, `tasks/cancel`. Task ids are the
//! upstream's own, so the gateway remembers which upstream (and which identity) each belongs
//! to, and rewrites `tasks/result` exactly like the `tools/call` result it stands for: a
//! task's 1 MB image is offloaded like any other.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};

use super::Gateway;
use crate::error::GatewayError;
use crate::jsonrpc::Message;
use crate::outbox::Outbox;
use crate::output_schema::OutputSchema;
use crate::session::Session;
use crate::shape::CallContext;

/// Tasks remembered at once; the oldest are forgotten first.
const MAX_TASKS: usize = 10_000;

/// Where a task lives and whose it is.
#[derive(Debug, Clone)]
pub(super) struct TaskRoute {
    upstream: usize,
    owner: (Option<String>, Option<String>),
    tool: String,
    output_schema: Option<Arc<OutputSchema>>,
}

#[derive(Default)]
pub(super) struct Tasks {
    routes: HashMap<String, TaskRoute>,
    order: VecDeque<String>,
}

impl Gateway {
    pub(super) fn remember_task(&self, id: &str, upstream: usize, session: &Session, tool: &str, output_schema: Option<Arc<OutputSchema>>) {
        let owner = (session.scope.tenant_id.clone(), session.scope.user_id.clone());
        let mut t = self.clients.tasks.lock();
        if t.routes.insert(id.to_owned(), TaskRoute { upstream, owner, tool: tool.to_owned(), output_schema }).is_none() {
            t.order.push_back(id.to_owned());
        }
        while t.order.len() > MAX_TASKS {
            if let Some(old) = t.order.pop_front() {
                t.routes.remove(&old);
            }
        }
    }

    /// The route of task `id`, if `session`'s identity started it. Another identity's task is
    /// answered exactly like an unknown one.
    fn task_route(&self, id: &str, session: &Session) -> Option<TaskRoute> {
        let owner = (session.scope.tenant_id.clone(), session.scope.user_id.clone());
        self.clients.tasks.lock().routes.get(id).filter(|r| r.owner == owner).cloned()
    }

    pub(super) async fn task_request(
        self: &Arc<Self>,
        session: &Arc<Session>,
        method: &str,
        params: Value,
        outbox: &Outbox,
    ) -> Result<Message, GatewayError> {
        if method == "tasks/list" {
            return self.list_tasks(session, params, outbox).await;
        }
        let id = params.get("taskId").and_then(Value::as_str).unwrap_or("").to_owned();
        let route = self.task_route(&id, session);
        let upstream = match &route {
            Some(r) => r.upstream,
            None => return Err(GatewayError::InvalidParams(format!("unknown task: {id}"))),
        };
        let mut reply = self.forward(session, upstream, method, params, outbox).await?;
        if method == "tasks/result"
            && let (Some(raw), Some(route)) = (reply.result.take(), route)
        {
            let ctx = CallContext {
                tool: route.tool,
                upstream: self.upstreams[upstream].name().to_owned(),
                scope: session.scope.clone(),
                output_schema: route.output_schema,
            };
            let value = self.shape_tool_result(session, ctx, raw).await;
            return Ok(Message::response(Value::Null, &value));
        }
        Ok(reply)
    }

    /// `tasks/list`: the caller's own tasks from every upstream that lists tasks.
    async fn list_tasks(self: &Arc<Self>, session: &Arc<Session>, params: Value, outbox: &Outbox) -> Result<Message, GatewayError> {
        let mut all = Vec::new();
        for (i, u) in self.upstreams.iter().enumerate() {
            if u.info().and_then(|info| info.pointer("/capabilities/tasks/list").cloned()).is_none() {
                continue;
            }
            let reply = self.forward(session, i, "tasks/list", params.clone(), outbox).await?;
            let v = crate::upstream::result_value(&reply).unwrap_or(Value::Null);
            for t in v.get("tasks").and_then(Value::as_array).into_iter().flatten() {
                let id = t.get("taskId").and_then(Value::as_str).unwrap_or("");
                if self.task_route(id, session).is_some_and(|r| r.upstream == i) {
                    all.push(t.clone());
                }
            }
        }
        Ok(Message::response(Value::Null, &json!({"tasks": all})))
    }
}
