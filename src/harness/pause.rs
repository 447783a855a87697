//! Runs that stop for a decision: calls that wait for a client's approval,
//! and tools the client runs itself. The harness pauses a run by returning
//! (it holds nothing while it waits) and continues it from its transcript
//! and counters, which is all a paused run needs to be: whoever keeps those
//! (the service keeps them in storage) can resume it, in another process
//! after a restart included.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::message::Message;
use super::usage::UsageTotals;

/// Which tools' calls wait for a client's approval before they execute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Approval {
    /// None: every call runs as soon as it is admitted.
    #[default]
    None,
    /// Every tool's calls (`["*"]`).
    All,
    /// The calls of these tools.
    Tools(HashSet<String>),
}

impl Approval {
    /// From the request's list: `["*"]` is every tool.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Self {
        if names.is_empty() {
            Self::None
        } else if names.iter().any(|name| name.as_ref() == "*") {
            Self::All
        } else {
            Self::Tools(names.iter().map(|n| n.as_ref().to_owned()).collect())
        }
    }

    pub fn requires(&self, tool: &str) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::Tools(tools) => tools.contains(tool),
        }
    }
}

/// What a paused call waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// A client's approval (or denial) before it executes.
    Approval,
    /// The client's own result: the tool is the client's.
    ClientTool,
}

/// A call a paused run waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingAction {
    pub call_id: String,
    pub kind: ActionKind,
    pub name: String,
    pub arguments: Value,
    /// The run whose call it is, when not the run's own: a child's, listed
    /// on its parent while the child waits (SPEC section 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<uuid::Uuid>,
    /// The schema an approval's edited arguments are checked against (its
    /// tool's); kept with the pause in storage, never shown to clients
    /// (see [`PendingAction::shown`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
}

impl PendingAction {
    /// The action as clients see it: without its tool's schema.
    pub fn shown(mut self) -> Self {
        self.input_schema = None;
        self
    }
}

/// A client's answer to a pending action.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Approve,
    /// Approved with these arguments in place of the model's (SPEC section
    /// 25): checked against the tool's schema when given.
    ApproveEdited {
        arguments: Value,
    },
    Deny {
        reason: Option<String>,
    },
    /// A client tool's result, recorded as a successful result.
    Output(Value),
    /// A client tool's failure, recorded as an error result.
    Error(String),
}

impl Answer {
    /// The kind of pending action this answer answers.
    pub fn kind(&self) -> ActionKind {
        match self {
            Self::Approve | Self::ApproveEdited { .. } | Self::Deny { .. } => ActionKind::Approval,
            Self::Output(_) | Self::Error(_) => ActionKind::ClientTool,
        }
    }

    /// Whether this answer fits a pending action of `kind`.
    pub fn fits(&self, kind: ActionKind) -> bool {
        self.kind() == kind
    }
}

/// The result a denied call is recorded with.
pub fn denied(reason: Option<&str>) -> String {
    match reason {
        Some(reason) if !reason.trim().is_empty() => format!("Denied: {reason}"),
        _ => "Denied by the client".to_owned(),
    }
}

/// Checks a client's answers (in the order given) against a paused run's
/// pending actions, some of which may be answered already: every call id
/// must be pending, unanswered and answered once, each with an answer of its
/// kind. The error names the first answer that is wrong. (Edited arguments
/// are checked against their tool's schema before: [`check_edited`].)
pub fn check_answers<'a>(
    pending: &[PendingAction],
    answered: impl Fn(&str) -> bool,
    given: impl IntoIterator<Item = (&'a str, &'a Answer)>,
) -> Result<(), String> {
    let mut seen = HashSet::new();
    for (i, (call_id, answer)) in given.into_iter().enumerate() {
        let Some(action) = pending.iter().find(|action| action.call_id == call_id) else {
            let ids: Vec<&str> = pending.iter().map(|a| a.call_id.as_str()).collect();
            return Err(format!(
                "actions[{i}].call_id: {call_id:?} is not a pending action of this run (pending: {})",
                ids.join(", ")
            ));
        };
        if answered(call_id) {
            return Err(format!(
                "actions[{i}].call_id: {call_id:?} was answered already"
            ));
        }
        if !seen.insert(call_id) {
            return Err(format!(
                "actions[{i}].call_id: {call_id:?} is answered twice in this request"
            ));
        }
        if !answer.fits(action.kind) {
            return Err(match action.kind {
                ActionKind::Approval => format!(
                    "actions[{i}]: call {call_id:?} of {} waits for approval: answer it with a decision (approve or deny), not an output or an error",
                    action.name
                ),
                ActionKind::ClientTool => format!(
                    "actions[{i}]: call {call_id:?} is of the client's tool {}: answer it with an output or an error, not a decision",
                    action.name
                ),
            });
        }
    }
    Ok(())
}

/// Why edited arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditRefused {
    /// They are not valid for the call (the client's to fix): why.
    Invalid(String),
    /// The tool's schema kept with the pause does not compile (the
    /// server's fault): why.
    Schema(String),
}

/// Edited arguments for `action`'s call: valid under its tool's schema,
/// kept with the pause, as a model's are before they run.
pub fn check_edited(action: &PendingAction, arguments: &Value) -> Result<(), EditRefused> {
    let Some(schema) = &action.input_schema else {
        return Err(EditRefused::Invalid(format!(
            "call {:?} of {} was paused without its tool's schema (by an earlier version): \
             approve or deny it as proposed",
            action.call_id, action.name
        )));
    };
    let validator = super::registry::schema_options()
        .build(schema)
        .map_err(|error| EditRefused::Schema(format!("the schema of {}: {error}", action.name)))?;
    let errors = super::registry::describe_errors(validator.iter_errors(arguments));
    if errors.is_empty() {
        return Ok(());
    }
    Err(EditRefused::Invalid(format!(
        "not valid for {}: {}",
        action.name,
        errors.join("; ")
    )))
}

/// Where a paused run stands: enough to continue it. The transcript ends
/// with the assistant message whose batch waits; the batch is counted in
/// `tool_calls` already.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub messages: Vec<Arc<Message>>,
    pub steps: u32,
    pub tool_calls: u32,
    pub usage: UsageTotals,
    /// The sequence of the run's last event: the next continues from it.
    pub last_sequence: u64,
    /// Running time used so far (the deadline counts running time only).
    pub elapsed: Duration,
    /// The calls of the last batch that wait for an answer.
    pub pending: Vec<PendingAction>,
}

/// The answers a resumed run was given, by call id.
pub type Answers = HashMap<String, Answer>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_names_and_the_star() {
        assert!(!Approval::from_names::<&str>(&[]).requires("x"));
        assert!(Approval::from_names(&["*"]).requires("anything"));
        let some = Approval::from_names(&["write_file"]);
        assert!(some.requires("write_file") && !some.requires("read_file"));
    }

    #[test]
    fn answers_fit_their_kinds_and_denials_say_why() {
        assert!(Answer::Approve.fits(ActionKind::Approval));
        assert!(!Answer::Output(Value::Null).fits(ActionKind::Approval));
        assert!(Answer::Error("x".into()).fits(ActionKind::ClientTool));
        assert_eq!(denied(Some("not on Fridays")), "Denied: not on Fridays");
        assert_eq!(denied(None), "Denied by the client");
    }

    #[test]
    fn answers_are_checked_against_what_is_pending() {
        let pending = vec![
            PendingAction {
                call_id: "1".into(),
                kind: ActionKind::Approval,
                name: "write_file".into(),
                arguments: Value::Null,
                run_id: None,
                input_schema: None,
            },
            PendingAction {
                call_id: "2".into(),
                kind: ActionKind::ClientTool,
                name: "lookup".into(),
                arguments: Value::Null,
                run_id: None,
                input_schema: None,
            },
        ];
        let none = |_: &str| false;
        let approve = Answer::Approve;
        let output = Answer::Output(Value::Null);
        assert!(check_answers(&pending, none, [("1", &approve), ("2", &output)]).is_ok());
        let error = check_answers(&pending, none, [("3", &approve)]).unwrap_err();
        assert!(error.contains("\"3\" is not a pending action"), "{error}");
        let error = check_answers(&pending, |id| id == "1", [("1", &approve)]).unwrap_err();
        assert!(error.contains("answered already"), "{error}");
        let error = check_answers(&pending, none, [("1", &approve), ("1", &approve)]).unwrap_err();
        assert!(
            error.starts_with("actions[1]") && error.contains("twice"),
            "{error}"
        );
        let error = check_answers(&pending, none, [("2", &approve)]).unwrap_err();
        assert!(error.contains("client's tool lookup"), "{error}");
        let error = check_answers(&pending, none, [("1", &output)]).unwrap_err();
        assert!(error.contains("waits for approval"), "{error}");

        // Edited arguments are checked against the schema kept with the
        // pause; without one (an older pause) they are refused.
        let edit = |arguments: Value| Answer::ApproveEdited { arguments };
        let refused = check_edited(&pending[0], &serde_json::json!({})).unwrap_err();
        assert!(
            matches!(&refused, EditRefused::Invalid(why) if why.contains("without its tool's schema")),
            "{refused:?}"
        );
        let mut with_schema = pending.clone();
        with_schema[0].input_schema = Some(serde_json::json!({
            "type": "object", "properties": {"path": {"type": "string"}},
            "required": ["path"], "additionalProperties": false
        }));
        assert_eq!(
            check_edited(&with_schema[0], &serde_json::json!({"path": "a"})),
            Ok(())
        );
        let refused = check_edited(&with_schema[0], &serde_json::json!({"path": 1})).unwrap_err();
        assert_eq!(
            refused,
            EditRefused::Invalid("not valid for write_file: $.path: expected string".into())
        );
        with_schema[0].input_schema = Some(serde_json::json!({"type": "object", "pattern": "("}));
        let refused = check_edited(&with_schema[0], &serde_json::json!({})).unwrap_err();
        assert!(matches!(refused, EditRefused::Schema(_)), "{refused:?}");
        assert!(edit(Value::Null).fits(ActionKind::Approval));
        assert!(!edit(Value::Null).fits(ActionKind::ClientTool));
        assert_eq!(with_schema[0].clone().shown(), pending[0]);
    }
}
