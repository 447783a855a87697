//! The JSON-RPC binding of A2A 1.0 on `POST /a2a/{agent}`: one request a
//! call, answered with HTTP 200 and a JSON-RPC result or error (the SDKs
//! read error codes only from a 200), or with an event stream. What is not
//! the client's fault and not about the task (a rate limit, a full queue,
//! a server stopping, an internal failure) keeps its HTTP status, so that a
//! client's HTTP layer sees it as it would on any other route.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::task;
use super::watch::Watch;
use crate::agent::Agent;
use crate::api::error::ApiError;
use crate::api::state::AppState;
use crate::run::{Run, RunStatus, Tenant};
use crate::store::RunFilter;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const TASK_NOT_FOUND: i64 = -32001;
const TASK_NOT_CANCELABLE: i64 = -32002;
const PUSH_NOT_SUPPORTED: i64 = -32003;
const UNSUPPORTED_OPERATION: i64 = -32004;
const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;

/// How long `CancelTask` waits for a running task to stop before it
/// answers with the task as it is.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// Why a call failed.
enum Failure {
    /// A JSON-RPC error.
    Rpc(i64, String),
    /// A refusal that keeps its HTTP status.
    Http(ApiError),
}

type Outcome = Result<Reply, Failure>;

/// What a call answers.
enum Reply {
    Result(Value),
    /// `StreamResponse` results, each sent as an event.
    Stream(std::pin::Pin<Box<dyn futures_util::Stream<Item = Value> + Send>>),
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure::Rpc(INVALID_PARAMS, message.into())
}

/// The failure an API refusal makes: about the task or the request, a
/// JSON-RPC error; otherwise its own HTTP status.
impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Self {
        let status = error.code().status();
        match status {
            StatusCode::NOT_FOUND => Self::Rpc(TASK_NOT_FOUND, error.to_string()),
            StatusCode::CONFLICT => Self::Rpc(UNSUPPORTED_OPERATION, error.to_string()),
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
                Self::Rpc(INVALID_PARAMS, error.to_string())
            }
            _ => Self::Http(error),
        }
    }
}

/// Answers one JSON-RPC request to `agent`.
pub(super) async fn handle(state: AppState, tenant: Tenant, agent: Agent, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => return error_response(&Value::Null, PARSE_ERROR, &error.to_string()),
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let keep_alive = state.clone();
    let call = Call {
        state,
        tenant,
        agent,
    };
    let outcome = match (
        request.get("jsonrpc").and_then(Value::as_str),
        request.get("method").and_then(Value::as_str),
        request.get("params").unwrap_or(&Value::Null),
    ) {
        (Some("2.0"), Some(method), Value::Object(params)) => call.method(method, params).await,
        (Some("2.0"), Some(method), Value::Null) => call.method(method, &Map::new()).await,
        (Some("2.0"), Some(_), _) => Err(invalid("params must be an object")),
        _ => Err(Failure::Rpc(
            INVALID_REQUEST,
            "a JSON-RPC 2.0 request has \"jsonrpc\": \"2.0\" and a method".into(),
        )),
    };
    match outcome {
        Ok(Reply::Result(result)) => {
            Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
        }
        Ok(Reply::Stream(results)) => {
            let events = results.map(move |result| {
                let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
                Ok::<_, Infallible>(SseEvent::default().data(body.to_string()))
            });
            crate::api::events::sse_response(&keep_alive, events)
        }
        Err(Failure::Rpc(code, message)) => error_response(&id, code, &message),
        Err(Failure::Http(error)) => error.into_response(),
    }
}

/// A JSON-RPC error, with HTTP 200 (as the SDKs read them).
fn error_response(id: &Value, code: i64, message: &str) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
        .into_response()
}

/// One call to one of the tenant's agents.
struct Call {
    state: AppState,
    tenant: Tenant,
    agent: Agent,
}

impl Call {
    async fn method(&self, method: &str, params: &Map<String, Value>) -> Outcome {
        match method {
            "SendMessage" => self.send(params, false).await,
            "SendStreamingMessage" => self.send(params, true).await,
            "GetTask" => {
                let run = self.task(params.get("id")).await?;
                Ok(Reply::Result(task::task(&run, history_length(params)?)))
            }
            "SubscribeToTask" => {
                let watch = Watch::new(&self.state, &self.tenant, self.task_id(params.get("id"))?);
                let run = self.owned(watch.read().await?)?;
                if run.status.is_terminal() {
                    return Err(ended(&run));
                }
                Ok(Reply::Stream(Box::pin(watch.updates(run))))
            }
            "CancelTask" => self.cancel(params).await,
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => Err(Failure::Rpc(
                PUSH_NOT_SUPPORTED,
                "push notifications are not supported: stream the task (SendStreamingMessage, \
                 SubscribeToTask), or give the run a webhook through the HTTP API"
                    .into(),
            )),
            "ListTasks" | "GetExtendedAgentCard" => Err(Failure::Rpc(
                UNSUPPORTED_OPERATION,
                format!("{method} is not supported (list runs with GET /v1/runs?agent=NAME)"),
            )),
            other => Err(Failure::Rpc(
                METHOD_NOT_FOUND,
                format!(
                    "no method {other:?} (A2A 1.0: SendMessage, SendStreamingMessage, GetTask, SubscribeToTask, CancelTask)"
                ),
            )),
        }
    }

    /// `SendMessage` and `SendStreamingMessage`: a new task (a run of the
    /// agent; with a `contextId`, a follow-up of that context's latest
    /// run), or, with the `taskId` of a task waiting for input, the answers
    /// its data part gives. Without `returnImmediately`, answered once the
    /// task ends or waits for input.
    async fn send(&self, params: &Map<String, Value>, stream: bool) -> Outcome {
        let message = match params.get("message") {
            Some(Value::Object(message)) => message,
            _ => return Err(invalid("params.message is required: the message to send")),
        };
        let configuration = match params.get("configuration") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(configuration)) => configuration.clone(),
            Some(_) => return Err(invalid("params.configuration must be an object")),
        };
        let immediately = match configuration.get("returnImmediately") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(flag)) => *flag,
            Some(_) => return Err(invalid("configuration.returnImmediately must be a boolean")),
        };
        let history = history_length(&configuration)?;
        let parts = Parts::of(message)?;
        let (run, answered) = match message.get("taskId") {
            None | Some(Value::Null) => (
                self.start(&parts, message.get("contextId")).await?,
                Vec::new(),
            ),
            Some(id) => self.answer(&parts, id).await?,
        };
        let watch = Watch::new(&self.state, &self.tenant, run.id);
        if stream {
            return Ok(Reply::Stream(Box::pin(watch.updates(run))));
        }
        // Settled, and past the answers just given (a parent lists its
        // child's actions until the child takes them up).
        let settled = |run: &Run| {
            task::settled(run.status)
                && !run
                    .pending_actions
                    .iter()
                    .any(|action| answered.contains(&action.call_id))
        };
        let run = if immediately {
            run
        } else {
            watch.until(settled, None).await?
        };
        Ok(Reply::Result(json!({"task": task::task(&run, history)})))
    }

    /// A new run of the agent, its prompt the message's text.
    async fn start(&self, parts: &Parts, context: Option<&Value>) -> Result<Run, Failure> {
        if !parts.data.is_empty() {
            return Err(invalid(
                "a data part answers the pending actions of a task waiting for input (give its \
                 taskId); a new task takes text parts",
            ));
        }
        if parts.text.is_empty() {
            return Err(invalid(
                "the message has no text part: its text is the task's prompt",
            ));
        }
        let mut body = json!({"agent": self.agent.name, "prompt": parts.text.join("\n\n")});
        // A context is a thread of the agent's runs: its latest one is
        // followed up (after it, should it still be going on). A context
        // the service did not make starts a thread of its own.
        let context = match context {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Uuid::parse_str(text).ok(),
            Some(_) => return Err(invalid("message.contextId must be a string")),
        };
        if let Some(context) = context {
            let filter = RunFilter {
                thread_id: Some(context),
                agent: Some(&self.agent.name),
                ..RunFilter::default()
            };
            let store = self.state.runner.store();
            let latest = store
                .list_runs(&self.tenant, filter, None, 1)
                .await
                .map_err(ApiError::from)?;
            if let Some(latest) = latest.first() {
                if latest.status == RunStatus::RequiresAction {
                    return Err(Failure::Rpc(
                        UNSUPPORTED_OPERATION,
                        format!(
                            "the context's latest task {} waits for input: answer it (a message \
                             with its taskId) before sending another",
                            latest.id
                        ),
                    ));
                }
                body["previous_run_id"] = json!(latest.id);
                if !latest.status.is_terminal() {
                    body["multitask"] = json!("enqueue");
                }
            }
        }
        if self.state.runner.is_closing() {
            return Err(Failure::Http(ApiError::ShuttingDown));
        }
        let spec = crate::api::runs::accept(&self.state, &self.tenant, body).await?;
        Ok(self
            .state
            .runner
            .submit(&self.tenant, spec, None)
            .await
            .map_err(ApiError::from)?)
    }

    /// The answers of a message to the task `id` waiting for input: the
    /// task then, and the calls answered.
    async fn answer(&self, parts: &Parts, id: &Value) -> Result<(Run, Vec<String>), Failure> {
        let run = self.task(Some(id)).await?;
        if run.status != RunStatus::RequiresAction {
            return Err(if run.status.is_terminal() {
                ended(&run)
            } else {
                Failure::Rpc(
                    UNSUPPORTED_OPERATION,
                    format!(
                        "task {} is {}: it takes a message only while it waits for input",
                        run.id,
                        task::state(run.status)
                    ),
                )
            });
        }
        let answers = match parts.data.as_slice() {
            [Value::Object(data)] if data.contains_key("actions") => Value::Object(data.clone()),
            _ => {
                return Err(invalid(
                    "the task waits for input: answer its pending actions with one data part \
                     {\"actions\": [...]}, each with its call_id and a decision (approve or \
                     deny) or a client tool's output or error",
                ));
            }
        };
        let calls = answers["actions"]
            .as_array()
            .map(|actions| {
                actions
                    .iter()
                    .filter_map(|action| action.get("call_id")?.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let run = crate::api::actions::answer_run(&self.state, &self.tenant, run, answers).await?;
        Ok((run, calls))
    }

    /// `CancelTask`: the run cancelled (as `DELETE /v1/runs/{id}`), and the
    /// task once it stopped (a while at most).
    async fn cancel(&self, params: &Map<String, Value>) -> Outcome {
        let watch = Watch::new(&self.state, &self.tenant, self.task_id(params.get("id"))?);
        let run = self.owned(watch.read().await?)?;
        match crate::api::runs::cancel_run(&self.state, &self.tenant, run).await? {
            crate::api::runs::Cancel::Ended(run) => Err(Failure::Rpc(
                TASK_NOT_CANCELABLE,
                format!("task {} has ended ({})", run.id, task::state(run.status)),
            )),
            crate::api::runs::Cancel::Asked(_) => {
                let run = watch
                    .until(|run| run.status.is_terminal(), Some(CANCEL_WAIT))
                    .await?;
                Ok(Reply::Result(task::task(&run, None)))
            }
        }
    }

    /// The id of a task, as given.
    fn task_id(&self, id: Option<&Value>) -> Result<Uuid, Failure> {
        let text = match id {
            Some(Value::String(text)) => text,
            _ => return Err(invalid("the task's id is required (a string)")),
        };
        Uuid::parse_str(text).map_err(|_| Failure::Rpc(TASK_NOT_FOUND, format!("no task {text:?}")))
    }

    /// The task `id`: a run of this agent of the tenant's.
    async fn task(&self, id: Option<&Value>) -> Result<Run, Failure> {
        let id = self.task_id(id)?;
        let run = crate::api::tenant_run::read(&self.state, &self.tenant, id)
            .await
            .map_err(|error| match error {
                ApiError::NotFound(_) => Failure::Rpc(TASK_NOT_FOUND, format!("no task {id}")),
                error => Failure::from(error),
            })?;
        self.owned(run)
    }

    /// `run`, if it is a task of this agent.
    fn owned(&self, run: Run) -> Result<Run, Failure> {
        match &run.agent {
            Some(agent) if agent.name == self.agent.name => Ok(run),
            _ => Err(Failure::Rpc(
                TASK_NOT_FOUND,
                format!("no task {} of agent {}", run.id, self.agent.name),
            )),
        }
    }
}

/// The refusal of a message to a task that ended.
fn ended(run: &Run) -> Failure {
    Failure::Rpc(
        UNSUPPORTED_OPERATION,
        format!(
            "task {} is in terminal state {}: send a message with its contextId to go on",
            run.id,
            task::state(run.status)
        ),
    )
}

/// `historyLength`, if given: how many of a task's latest messages it
/// shows.
fn history_length(params: &Map<String, Value>) -> Result<Option<usize>, Failure> {
    match params.get("historyLength") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => {
            Ok(n.as_u64().map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
        }
        Some(_) => Err(invalid("historyLength must be a nonnegative integer")),
    }
}

/// A message's parts: its texts and its data.
struct Parts {
    text: Vec<String>,
    data: Vec<Value>,
}

impl Parts {
    fn of(message: &Map<String, Value>) -> Result<Self, Failure> {
        match message.get("role").and_then(Value::as_str) {
            Some("ROLE_USER") => {}
            other => {
                return Err(invalid(format!(
                    "message.role must be \"ROLE_USER\" (got {other:?})"
                )));
            }
        }
        if !matches!(message.get("messageId"), Some(Value::String(id)) if !id.is_empty()) {
            return Err(invalid(
                "message.messageId is required (a non-empty string)",
            ));
        }
        let Some(Value::Array(parts)) = message.get("parts") else {
            return Err(invalid("message.parts is required (an array of parts)"));
        };
        let mut found = Self {
            text: Vec::new(),
            data: Vec::new(),
        };
        for (i, part) in parts.iter().enumerate() {
            match part {
                Value::Object(part) if part.get("text").is_some_and(Value::is_string) => {
                    found
                        .text
                        .push(part["text"].as_str().unwrap_or_default().to_owned());
                }
                Value::Object(part) if part.contains_key("data") => {
                    found.data.push(part["data"].clone());
                }
                Value::Object(part) if part.contains_key("url") || part.contains_key("raw") => {
                    return Err(Failure::Rpc(
                        CONTENT_TYPE_NOT_SUPPORTED,
                        format!(
                            "message.parts[{i}]: files are not taken; send text (and a data part \
                             answering a task's pending actions)"
                        ),
                    ));
                }
                _ => {
                    return Err(invalid(format!(
                        "message.parts[{i}] is not a text, data, url or raw part"
                    )));
                }
            }
        }
        Ok(found)
    }
}
