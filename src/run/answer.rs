//! A client's answers to a paused run's pending actions, as the API takes
//! them and storage keeps them until the run resumes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::harness::Answer;

/// A client's answer to one pending action, as `POST /v1/runs/{id}/actions`
/// takes it (and storage keeps it until the run resumes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ActionAnswer {
    Decision {
        decision: Decision,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// An approval's arguments in place of the model's (SPEC section
        /// 25).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<Value>,
    },
    Output {
        output: Value,
    },
    Error {
        error: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Deny,
}

impl ActionAnswer {
    /// The harness's form of this answer.
    pub fn to_answer(&self) -> Answer {
        match self {
            Self::Decision {
                decision: Decision::Approve,
                arguments: None,
                ..
            } => Answer::Approve,
            Self::Decision {
                decision: Decision::Approve,
                arguments: Some(arguments),
                ..
            } => Answer::ApproveEdited {
                arguments: arguments.clone(),
            },
            Self::Decision {
                decision: Decision::Deny,
                reason,
                ..
            } => Answer::Deny {
                reason: reason.clone(),
            },
            Self::Output { output } => Answer::Output(output.clone()),
            Self::Error { error } => Answer::Error(error.clone()),
        }
    }
}
