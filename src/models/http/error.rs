//! Why a client could not be built, and why an attempt failed.

use std::time::Duration;

use reqwest::StatusCode;

use super::RETRYABLE_STATUSES;
use crate::harness::ModelError;

/// A client that cannot be built from its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Why one attempt failed, and whether another one may succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider answered with an error status.
    #[error("HTTP {status}: {detail}", status = status_text(*status))]
    Status {
        status: StatusCode,
        detail: String,
        /// How long the provider asked us to wait (`Retry-After`).
        retry_after: Option<Duration>,
    },
    /// The exchange failed below HTTP: no connection, a reset, no answer in
    /// time, or a stream that broke. Retryable unless some of the answer was
    /// already passed on (a retry would repeat it).
    #[error("{detail}")]
    Transport { detail: String, retryable: bool },
    /// The provider reported an error inside a successful response, such as
    /// an `error` event mid-stream. `overloaded` errors are worth a retry.
    #[error("{detail}")]
    Reported { detail: String, retryable: bool },
    /// The provider answered, but not with what its API documents.
    #[error("{0}")]
    InvalidResponse(String),
    /// The provider stopped before the answer was complete.
    #[error("{0}")]
    Incomplete(String),
    /// The answer reached the token limit (`max_tokens`) and was cut off.
    #[error("{0}")]
    TokenLimit(String),
}

impl ProviderError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Status { status, .. } => RETRYABLE_STATUSES.contains(&status.as_u16()),
            Self::Transport { retryable, .. } | Self::Reported { retryable, .. } => *retryable,
            Self::InvalidResponse(_) | Self::Incomplete(_) | Self::TokenLimit(_) => false,
        }
    }

    /// The wait the provider asked for, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The error a call ends with after `attempts`; `may_pass`: the call
    /// gave up on a failure that may pass (its retries spent, or a wait
    /// longer than allowed asked for), which another profile may answer.
    pub(super) fn into_model_error(
        self,
        provider: &str,
        attempts: u32,
        note: &str,
        may_pass: bool,
    ) -> ModelError {
        let tried = if attempts > 1 {
            format!(" (after {attempts} attempts)")
        } else {
            String::new()
        };
        match self {
            Self::InvalidResponse(why) => {
                ModelError::InvalidResponse(format!("{provider} provider: {why}"))
            }
            Self::Incomplete(why) => ModelError::Incomplete(format!("{provider} provider: {why}")),
            Self::TokenLimit(why) => ModelError::TokenLimit(format!("{provider} provider: {why}")),
            other => {
                let text = format!("{provider} provider: {other}{tried}{note}");
                if may_pass && other.is_retryable() {
                    ModelError::Unavailable(text)
                } else {
                    ModelError::Provider(text)
                }
            }
        }
    }
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None if status.as_u16() == 529 => "529 Overloaded".to_owned(),
        None => status.as_u16().to_string(),
    }
}

/// An error and its sources, one line.
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
