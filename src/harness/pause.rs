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

use super::message::{Message, UsageTotals};

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
}

/// A client's answer to a pending action.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Approve,
    Deny {
        reason: Option<String>,
    },
    /// A client tool's result, recorded as a successful result.
    Output(Value),
    /// A client tool's failure, recorded as an error result.
    Error(String),
}

impl Answer {
    /// Whether this answer fits a pending action of `kind`.
    pub fn fits(&self, kind: ActionKind) -> bool {
        match self {
            Self::Approve | Self::Deny { .. } => kind == ActionKind::Approval,
            Self::Output(_) | Self::Error(_) => kind == ActionKind::ClientTool,
        }
    }
}

/// The result a denied call is recorded with.
pub fn denied(reason: Option<&str>) -> String {
    match reason {
        Some(reason) if !reason.trim().is_empty() => format!("Denied: {reason}"),
        _ => "Denied by the client".to_owned(),
    }
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
}
