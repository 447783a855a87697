//! Runs as A2A tasks (protocol 1.0, ProtoJSON): a task is a run of the
//! agent, its `contextId` the run's thread, its state the run's status.

use serde_json::{Value, json};

use crate::harness::Outcome;
use crate::run::{Run, RunStatus, format_time};

/// The task state of a run's status.
pub fn state(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Queued => "TASK_STATE_SUBMITTED",
        RunStatus::Running => "TASK_STATE_WORKING",
        RunStatus::RequiresAction => "TASK_STATE_INPUT_REQUIRED",
        RunStatus::Ended(Outcome::Completed) => "TASK_STATE_COMPLETED",
        RunStatus::Ended(Outcome::Aborted) => "TASK_STATE_CANCELED",
        // Every other end is a failure, named in the status message.
        RunStatus::Ended(_) => "TASK_STATE_FAILED",
    }
}

/// Whether a task in this status is done with its stream: ended, or
/// waiting for input.
pub fn settled(status: RunStatus) -> bool {
    status.is_terminal() || status == RunStatus::RequiresAction
}

/// The task of `run` (its history unless `history` is 0).
pub fn task(run: &Run, history: Option<usize>) -> Value {
    let mut task = json!({
        "id": run.id.to_string(),
        "contextId": run.thread_id.to_string(),
        "status": status(run),
        "metadata": {"status": run.status.as_str()},
    });
    let artifacts = artifacts(run);
    if !artifacts.is_empty() {
        task["artifacts"] = Value::Array(artifacts);
    }
    let mut messages = vec![message(run, "ROLE_USER", "prompt", vec![text(&run.prompt)])];
    if let Some(answer) = &run.answer {
        messages.push(message(run, "ROLE_AGENT", "answer", vec![text(answer)]));
    }
    let keep = history.unwrap_or(messages.len()).min(messages.len());
    if keep > 0 {
        let skip = messages.len() - keep;
        task["history"] = Value::Array(messages.split_off(skip));
    }
    task
}

/// The task's status: its state, when it last changed, and a message
/// where the state needs one (the pending actions of a task waiting for
/// input, the error of a failed one).
pub fn status(run: &Run) -> Value {
    let at = run.finished_at.or(run.started_at).unwrap_or(run.created_at);
    let mut status = json!({"state": state(run.status), "timestamp": format_time(&at)});
    let parts = match run.status {
        RunStatus::RequiresAction => {
            let names: Vec<&str> = run
                .pending_actions
                .iter()
                .map(|action| action.name.as_str())
                .collect();
            vec![
                text(&format!(
                    "Waiting for answers to {} pending action(s) ({}): reply to this task with a \
                     data part {{\"actions\": [...]}}, each an approval's decision or a client \
                     tool's output or error, by call_id.",
                    names.len(),
                    names.join(", ")
                )),
                json!({"data": {"actions": run.pending_actions}, "mediaType": "application/json"}),
            ]
        }
        RunStatus::Ended(outcome) if outcome != Outcome::Completed => {
            let why = run.error.as_deref().unwrap_or(outcome.as_str());
            vec![text(&format!("The run ended {}: {why}", outcome.as_str()))]
        }
        _ => Vec::new(),
    };
    if !parts.is_empty() {
        status["message"] = message(run, "ROLE_AGENT", "status", parts);
    }
    status
}

/// What a completed run made: its answer as a text artifact, its `output`
/// (under an output schema) as a data artifact.
pub fn artifacts(run: &Run) -> Vec<Value> {
    if run.status != RunStatus::Ended(Outcome::Completed) {
        return Vec::new();
    }
    let mut artifacts = Vec::new();
    if let Some(answer) = &run.answer {
        artifacts.push(json!({"artifactId": "answer", "name": "answer", "parts": [text(answer)]}));
    }
    if let Some(output) = &run.output {
        artifacts.push(json!({
            "artifactId": "output", "name": "output",
            "parts": [{"data": output, "mediaType": "application/json"}]
        }));
    }
    artifacts
}

fn text(text: &str) -> Value {
    json!({"text": text})
}

/// A message of the task, its id made of the run's and what it is.
fn message(run: &Run, role: &str, what: &str, parts: Vec<Value>) -> Value {
    json!({
        "messageId": format!("{}-{what}", run.id),
        "contextId": run.thread_id.to_string(),
        "taskId": run.id.to_string(),
        "role": role,
        "parts": parts,
    })
}
