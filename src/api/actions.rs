//! `POST /v1/runs/{id}/actions`: a client's answers to a paused run's
//! pending actions: decisions for approvals, results for its own tools.
//! Refused whole when any answer is wrong; nothing of it is stored then.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::error::{ApiError, ErrorCode};
use super::json::ApiJson;
use super::state::AppState;
use super::tenant_run::TenantRun;
use crate::harness::{EditRefused, check_edited};
use crate::run::{ActionAnswer, Decision, Run};
use crate::runner::{Answered, SubmitError};

/// Most answers one request may carry (a batch is bounded by
/// `max_tool_calls`, and this by the ceiling of it).
pub const MAX_ANSWERS: usize = 1000;
/// Longest denial reason or client error kept.
pub const MAX_ANSWER_TEXT_BYTES: usize = 64 * 1024;
/// Largest edited arguments of an approval, as JSON.
pub const MAX_EDITED_ARGUMENTS_BYTES: usize = 256 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionsRequest {
    actions: Vec<ActionRequest>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionRequest {
    call_id: String,
    #[serde(default)]
    decision: Option<String>,
    /// Present (even `null`) when given: only a denial takes one.
    #[serde(default, deserialize_with = "present")]
    reason: Option<Value>,
    /// Present (even `null`) for a client tool's result.
    #[serde(default, deserialize_with = "present")]
    output: Option<Value>,
    #[serde(default)]
    error: Option<String>,
    /// Present (even `null`) when given: an approval's arguments in place
    /// of the model's.
    #[serde(default, deserialize_with = "present")]
    arguments: Option<Value>,
    /// The run whose action it is, when answered through a parent that
    /// lists its child's (needed only where two children wait on calls of
    /// one id).
    #[serde(default)]
    run_id: Option<Uuid>,
}

/// `Some(value)` for a field that is there, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl ActionRequest {
    /// One answer: exactly one of a decision (with an optional reason for a
    /// denial), an output, or an error.
    fn validate(self, i: usize) -> Result<(String, ActionAnswer), ApiError> {
        let invalid = |message: String| Err(ApiError::Validation(message));
        if self.call_id.is_empty() {
            return invalid(format!("actions[{i}].call_id must not be empty"));
        }
        let given = [
            self.decision.is_some(),
            self.output.is_some(),
            self.error.is_some(),
        ];
        if given.iter().filter(|&&g| g).count() != 1 {
            return invalid(format!(
                "actions[{i}]: give exactly one of decision (approve or deny), output or error"
            ));
        }
        if self.reason.is_some() && self.decision.as_deref() != Some("deny") {
            return invalid(format!(
                "actions[{i}].reason is only for a denial (decision: deny)"
            ));
        }
        if self.arguments.is_some() && self.decision.as_deref() != Some("approve") {
            return invalid(format!(
                "actions[{i}].arguments are only for an approval (decision: approve)"
            ));
        }
        let arguments = match self.arguments {
            None => None,
            Some(Value::Object(arguments)) => {
                let size = serde_json::to_string(&arguments).map_or(usize::MAX, |text| text.len());
                if size > MAX_EDITED_ARGUMENTS_BYTES {
                    return invalid(format!(
                        "actions[{i}].arguments: at most {MAX_EDITED_ARGUMENTS_BYTES} bytes of JSON"
                    ));
                }
                Some(Value::Object(arguments))
            }
            Some(_) => {
                return invalid(format!(
                    "actions[{i}].arguments must be an object (the tool's arguments)"
                ));
            }
        };
        let reason = match self.reason {
            None => None,
            Some(Value::String(reason)) => Some(reason),
            Some(_) => return invalid(format!("actions[{i}].reason must be a string")),
        };
        for (field, text) in [("reason", &reason), ("error", &self.error)] {
            if text
                .as_ref()
                .is_some_and(|t| t.len() > MAX_ANSWER_TEXT_BYTES)
            {
                return invalid(format!(
                    "actions[{i}].{field}: at most {MAX_ANSWER_TEXT_BYTES} bytes are kept"
                ));
            }
        }
        let answer = match (self.decision.as_deref(), self.output, self.error) {
            (Some("approve"), _, _) => ActionAnswer::Decision {
                decision: Decision::Approve,
                reason: None,
                arguments,
            },
            (Some("deny"), _, _) => ActionAnswer::Decision {
                decision: Decision::Deny,
                reason,
                arguments: None,
            },
            (Some(other), _, _) => {
                return invalid(format!(
                    "actions[{i}].decision must be approve or deny (got {other:?})"
                ));
            }
            (None, Some(output), _) => ActionAnswer::Output { output },
            (None, None, Some(error)) => ActionAnswer::Error { error },
            (None, None, None) => unreachable!("exactly one was given"),
        };
        Ok((self.call_id, answer))
    }
}

/// `POST /v1/runs/{id}/actions`
pub async fn answer(
    State(state): State<AppState>,
    TenantRun { tenant, run }: TenantRun,
    ApiJson(body): ApiJson<Value>,
) -> Result<Json<Run>, ApiError> {
    answer_run(&state, &tenant, run, body).await.map(Json)
}

/// Answers `run`'s pending actions with `body` (`{"actions": [...]}`): all
/// of them stored, or none. The run as it is then.
pub(super) async fn answer_run(
    state: &AppState,
    tenant: &crate::run::Tenant,
    run: Run,
    body: Value,
) -> Result<Run, ApiError> {
    let request: ActionsRequest = super::json::from_value(body)?;
    if request.actions.is_empty() {
        return Err(ApiError::Validation(
            "actions must answer at least one pending action".into(),
        ));
    }
    if request.actions.len() > MAX_ANSWERS {
        return Err(ApiError::Validation(format!(
            "actions: at most {MAX_ANSWERS} answers may be given"
        )));
    }
    let runs: Vec<Option<Uuid>> = request.actions.iter().map(|a| a.run_id).collect();
    let answers = request
        .actions
        .into_iter()
        .enumerate()
        .map(|(i, action)| action.validate(i))
        .collect::<Result<Vec<_>, _>>()?;
    // A parent that lists its children's actions: each goes to its child.
    if run
        .pending_actions
        .iter()
        .any(|action| action.run_id.is_some())
    {
        return answer_children(state, tenant, &run, answers, &runs).await;
    }
    let edits: Vec<_> = answers.iter().enumerate().collect();
    check_edits(state, run.id, &edits).await?;
    let answered =
        state
            .runner
            .answer(tenant, run.id, answers)
            .await
            .map_err(|error| match error {
                SubmitError::StorageRefused(why) => {
                    tracing::error!(%why, run_id = %run.id, "answers could not be stored");
                    ApiError::Unavailable(
                        "the server's storage refuses writes; nothing was answered, retry later"
                            .into(),
                    )
                }
                error => error.into(),
            })?;
    answered_json(answered)
}

/// Checks the edited arguments among `answers` (each with its place in the
/// request) against the schemas kept with run `id`'s pause, before
/// anything is stored. Answers to calls that are not pending are left to
/// the store's check, which refuses them.
async fn check_edits(
    state: &AppState,
    id: Uuid,
    answers: &[(usize, &(String, ActionAnswer))],
) -> Result<(), ApiError> {
    let edited = |answer: &ActionAnswer| {
        matches!(
            answer,
            ActionAnswer::Decision {
                arguments: Some(_),
                ..
            }
        )
    };
    if !answers.iter().any(|(_, (_, answer))| edited(answer)) {
        return Ok(());
    }
    let pending = state.runner.store().stored_pending(id).await?;
    for (i, (call_id, answer)) in answers {
        let ActionAnswer::Decision {
            arguments: Some(arguments),
            ..
        } = answer
        else {
            continue;
        };
        let Some(action) = pending.iter().find(|action| &action.call_id == call_id) else {
            continue;
        };
        match check_edited(action, arguments) {
            Ok(()) => {}
            Err(EditRefused::Invalid(why)) => {
                return Err(ApiError::Validation(format!(
                    "actions[{i}].arguments: {why}; nothing was answered"
                )));
            }
            Err(EditRefused::Schema(why)) => {
                tracing::error!(run_id = %id, %why, "a paused call's schema does not compile");
                return Err(ApiError::Internal(why));
            }
        }
    }
    Ok(())
}

/// The answer to the request, from what the runner made of it.
fn answered_json(answered: Answered) -> Result<Run, ApiError> {
    match answered {
        Answered::Run(run) => Ok(*run),
        Answered::NotFound => Err(ApiError::NotFound("run")),
        Answered::NotPaused(status) => Err(ApiError::Conflict {
            code: ErrorCode::RunNotPaused,
            message: format!(
                "the run is not waiting for a decision (its status is {status}); nothing was answered"
            ),
        }),
        Answered::Refused(why) => Err(ApiError::Validation(format!("{why}; nothing was answered"))),
    }
}

/// An answer, with its place in the request.
type Placed = (usize, (String, ActionAnswer));

/// Answers given through a parent whose children wait for decisions (SPEC
/// section 24): each is its child's, found by its call (and `run_id`, when
/// given); all are checked before any is given. The parent as it is then.
async fn answer_children(
    state: &AppState,
    tenant: &crate::run::Tenant,
    parent: &Run,
    answers: Vec<(String, ActionAnswer)>,
    runs: &[Option<Uuid>],
) -> Result<Run, ApiError> {
    let mut by_child: Vec<(Uuid, Vec<Placed>)> = Vec::new();
    for (i, ((call_id, answer), named)) in answers.into_iter().zip(runs).enumerate() {
        let candidates: Vec<_> = parent
            .pending_actions
            .iter()
            .filter(|action| action.call_id == call_id)
            .filter(|action| named.is_none_or(|named| action.run_id == Some(named)))
            .collect();
        let action = match candidates.as_slice() {
            [action] => *action,
            [] => {
                return Err(ApiError::Validation(format!(
                    "actions[{i}].call_id: no pending action {call_id:?}{}; nothing was answered",
                    named.map(|id| format!(" of run {id}")).unwrap_or_default()
                )));
            }
            _ => {
                return Err(ApiError::Validation(format!(
                    "actions[{i}]: children {} wait on calls {call_id:?}: give the run_id; \
                     nothing was answered",
                    candidates
                        .iter()
                        .filter_map(|a| a.run_id.map(|id| id.to_string()))
                        .collect::<Vec<_>>()
                        .join(" and ")
                )));
            }
        };
        if !answer.to_answer().fits(action.kind) {
            return Err(ApiError::Validation(format!(
                "actions[{i}]: {call_id:?} waits for {}; nothing was answered",
                match action.kind {
                    crate::harness::ActionKind::Approval => "a decision (approve or deny)",
                    crate::harness::ActionKind::ClientTool => "the client's output or error",
                }
            )));
        }
        let child = action.run_id.unwrap_or(parent.id);
        match by_child.iter_mut().find(|(id, _)| *id == child) {
            Some((_, list)) => list.push((i, (call_id, answer))),
            None => by_child.push((child, vec![(i, (call_id, answer))])),
        }
    }
    // Every child's edits are checked before any child is answered.
    for (child, answers) in &by_child {
        let edits: Vec<_> = answers.iter().map(|(i, answer)| (*i, answer)).collect();
        check_edits(state, *child, &edits).await?;
    }
    for (child, answers) in by_child {
        let answers = answers.into_iter().map(|(_, answer)| answer).collect();
        let answered = state
            .runner
            .answer(tenant, child, answers)
            .await
            .map_err(ApiError::from)?;
        answered_json(answered).map(drop)?;
    }
    super::tenant_run::read(state, tenant, parent.id).await
}
