//! Run events: what the harness reports at every execution boundary, and the
//! observer that receives them.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use uuid::Uuid;

use super::message::Message;
use super::pause::PendingAction;
use super::usage::{Usage, UsageTotals};

/// How a run ended: the harness's own ends, and the two a stop from outside
/// gives it (`failed`: the service could not go on; `interrupted`: the server
/// stopped). A run's lifecycle before its end (queued, running, paused) is
/// the service's, not the harness's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    StepLimit,
    ToolLimit,
    Aborted,
    Timeout,
    ModelError,
    ContextLimit,
    /// Its model calls cost its `max_cost_usd`.
    CostLimit,
    /// The service could not go on with the run.
    Failed,
    /// The server stopped while the run was running.
    Interrupted,
}

impl Outcome {
    pub const ALL: [Outcome; 10] = [
        Self::Completed,
        Self::StepLimit,
        Self::ToolLimit,
        Self::Aborted,
        Self::Timeout,
        Self::ModelError,
        Self::ContextLimit,
        Self::CostLimit,
        Self::Failed,
        Self::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::StepLimit => "step_limit",
            Self::ToolLimit => "tool_limit",
            Self::Aborted => "aborted",
            Self::Timeout => "timeout",
            Self::ModelError => "model_error",
            Self::ContextLimit => "context_limit",
            Self::CostLimit => "cost_limit",
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of a run. `sequence` starts at 1 and has no gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub run_id: Uuid,
    pub sequence: u64,
    #[serde(serialize_with = "rfc3339_micros")]
    pub timestamp: DateTime<Utc>,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    RunStart,
    ModelStart,
    ModelEnd {
        duration_ms: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// Why the model stopped, where its provider says.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// The profile that answered, when a fallback did (the call's
        /// usage and cost are its).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
    ModelError {
        error: String,
    },
    /// A model call's retries were spent on a failure that may pass: the
    /// same request goes to the profile `to` (SPEC section 25).
    ModelFallback {
        from: String,
        to: String,
        reason: String,
    },
    ToolStart {
        call_id: String,
        name: String,
        /// A reviewer approved the call with other arguments: these ran.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        edited: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<serde_json::Value>,
    },
    ToolEnd {
        call_id: String,
        name: String,
        duration_ms: f64,
        is_error: bool,
    },
    /// The run paused: these calls of its last batch wait for a client's
    /// answer.
    ActionsRequired {
        actions: Vec<PendingAction>,
    },
    /// A message just appended to the transcript.
    Message {
        message: Arc<Message>,
        /// The message's JSON, made once by the harness (which measures the
        /// context in it) for whoever records or sends it on.
        #[serde(skip)]
        json: Arc<str>,
    },
    /// A summary now stands in for the transcript's first
    /// `replaced_messages` in what the model is sent (context compaction),
    /// or, with `fallback`, the summary failed and older results are masked
    /// instead.
    Compaction {
        replaced_messages: usize,
        /// What would have been sent, in characters, and what is now.
        before_chars: usize,
        after_chars: usize,
        duration_ms: f64,
        /// The summary call's usage (counted in the run's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// An attempt of the run began: a child run (see
    /// [`crate::run::AttemptPolicy`]). Written with one `run_id`, the
    /// attempt's, in place of the run's own (the service's observer does).
    AttemptStart {
        attempt: u32,
        run_id: Uuid,
    },
    /// An attempt ended, its checks run on its workspace as it ended.
    AttemptEnd {
        attempt: u32,
        run_id: Uuid,
        status: String,
        checks_passed: bool,
    },
    /// A `delegate` call started a child run (SPEC section 24). Written
    /// with one `run_id`, the child's, as an attempt's event is.
    SubrunStart {
        call_id: String,
        run_id: Uuid,
        agent: String,
    },
    /// A child run a `delegate` call started ended.
    SubrunEnd {
        call_id: String,
        run_id: Uuid,
        status: String,
    },
    RunEnd {
        status: Outcome,
        steps: u32,
        tool_calls: u32,
        usage: UsageTotals,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The final answer's JSON document, under an output schema (null
        /// otherwise).
        #[serde(default)]
        output: Option<serde_json::Value>,
    },
}

impl EventKind {
    /// The `type` of a run's last event.
    pub const RUN_END: &'static str = "run_end";

    pub fn type_name(&self) -> &'static str {
        match self {
            Self::RunStart => "run_start",
            Self::ModelStart => "model_start",
            Self::ModelEnd { .. } => "model_end",
            Self::ModelError { .. } => "model_error",
            Self::ModelFallback { .. } => "model_fallback",
            Self::ToolStart { .. } => "tool_start",
            Self::ToolEnd { .. } => "tool_end",
            Self::ActionsRequired { .. } => "actions_required",
            Self::Message { .. } => "message",
            Self::Compaction { .. } => "compaction",
            Self::AttemptStart { .. } => "attempt_start",
            Self::AttemptEnd { .. } => "attempt_end",
            Self::SubrunStart { .. } => "subrun_start",
            Self::SubrunEnd { .. } => "subrun_end",
            Self::RunEnd { .. } => Self::RUN_END,
        }
    }
}

fn rfc3339_micros<S: Serializer>(time: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&time.to_rfc3339_opts(SecondsFormat::Micros, true))
}

/// What an observer may fail with; logged, never acted on.
pub type ObserverError = Box<dyn std::error::Error + Send + Sync>;

/// Receives a run's events as they happen.
///
/// Called synchronously on the run's task, so an observer must not block: one
/// that persists or fans out events should hand them to a channel and return
/// (the service's does). Whatever an observer does, error or panic, it cannot
/// change the run.
pub trait Observer: Send + Sync {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError>;

    /// The run's totals after a step's model response or a tool's result,
    /// told just before the event that records it (`model_end`, or the
    /// result's `message`): what a run that resumes after a crash goes on
    /// from.
    fn on_progress(&self, _run_id: Uuid, _totals: &Totals) {}

    /// Resolves once every event told so far is recorded for good (`false`
    /// if it never will be): the harness waits on it before a tool call
    /// that must not run unrecorded (one not safe to run twice), so that a
    /// run resumed after a crash knows the call was started.
    fn recorded(&self) -> futures_util::future::BoxFuture<'_, bool> {
        Box::pin(std::future::ready(true))
    }

    /// Called once before the run's `run_end` is emitted (never before a
    /// pause or a hand-over), and awaited: what the observer must learn of
    /// the run's end that takes time to learn (the service counts what the
    /// run changed in its workspace, which `run_end` is stored with).
    fn ending(&self) -> futures_util::future::BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    /// The last sequence number it was told, when a tool of the run may
    /// tell events of its own (while the harness awaits the tool, never
    /// at once with it): the harness's next event follows it. By default
    /// 0 (only the harness tells events).
    fn last_sequence(&self) -> u64 {
        0
    }

    /// Text a streaming model produced, before its response is complete. Not a
    /// sequenced event: it is for live display only.
    fn on_delta(&self, _run_id: Uuid, _text: &str) {}

    /// The W3C `traceparent` of the run's model call open now (made at
    /// its `model_start`), else of the run's own span, if the observer
    /// traces it: sent to the provider (and, the run's, to its MCP servers
    /// over HTTP).
    fn traceparent(&self) -> Option<String> {
        None
    }
}

/// A run's totals so far (see [`Observer::on_progress`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub steps: u32,
    pub tool_calls: u32,
    pub usage: UsageTotals,
    /// Running time so far, across its drives.
    pub elapsed: std::time::Duration,
}

/// Stamps events with the run id, sequence and time, and shields the run from
/// its observer.
pub(crate) struct Emitter<'a> {
    run_id: Uuid,
    sequence: u64,
    observer: Option<&'a dyn Observer>,
}

impl<'a> Emitter<'a> {
    /// The observer's `traceparent` of the model call open now.
    pub(crate) fn traceparent(&self) -> Option<String> {
        self.observer.and_then(|observer| observer.traceparent())
    }

    pub(crate) fn new(run_id: Uuid, observer: Option<&'a dyn Observer>) -> Self {
        Self::continuing(run_id, observer, 0)
    }

    /// An emitter whose next event follows `last_sequence`.
    pub(crate) fn continuing(
        run_id: Uuid,
        observer: Option<&'a dyn Observer>,
        last_sequence: u64,
    ) -> Self {
        Self {
            run_id,
            sequence: last_sequence,
            observer,
        }
    }

    /// The sequence of the last event emitted.
    pub(crate) fn sequence(&self) -> u64 {
        self.observer
            .map_or(self.sequence, |o| self.sequence.max(o.last_sequence()))
    }

    /// Emits the event `kind` builds; `kind` runs only when someone listens.
    pub(crate) fn emit(&mut self, kind: impl FnOnce() -> EventKind) {
        let Some(observer) = self.observer else {
            self.sequence += 1;
            return;
        };
        // After what a tool told, if it did.
        self.sequence = self.sequence.max(observer.last_sequence()) + 1;
        let event = Event {
            run_id: self.run_id,
            sequence: self.sequence,
            timestamp: Utc::now(),
            kind: kind(),
        };
        match catch_unwind(AssertUnwindSafe(|| observer.on_event(&event))) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(run_id = %self.run_id, sequence = event.sequence, %error, "run observer failed");
            }
            Err(_) => {
                tracing::warn!(run_id = %self.run_id, sequence = event.sequence, "run observer panicked");
            }
        }
    }

    /// See [`Observer::recorded`]; `true` without an observer.
    pub(crate) async fn recorded(&self) -> bool {
        match self.observer {
            Some(observer) => observer.recorded().await,
            None => true,
        }
    }

    pub(crate) fn progress(&self, totals: &Totals) {
        if let Some(observer) = self.observer {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                observer.on_progress(self.run_id, totals)
            }));
        }
    }

    pub(crate) fn delta(&self, text: &str) {
        if let Some(observer) = self.observer {
            let _ = catch_unwind(AssertUnwindSafe(|| observer.on_delta(self.run_id, text)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_serialise_flat_with_their_type() {
        let event = Event {
            run_id: Uuid::nil(),
            sequence: 3,
            timestamp: DateTime::parse_from_rfc3339("2026-01-02T03:04:05.123456Z")
                .unwrap()
                .with_timezone(&Utc),
            kind: EventKind::ToolEnd {
                call_id: "1".into(),
                name: "t".into(),
                duration_ms: 1.5,
                is_error: false,
            },
        };
        let value = serde_json::to_value(&event).unwrap();
        assert_eq!(
            value,
            json!({
                "run_id": "00000000-0000-0000-0000-000000000000",
                "sequence": 3,
                "timestamp": "2026-01-02T03:04:05.123456Z",
                "type": "tool_end",
                "call_id": "1",
                "name": "t",
                "duration_ms": 1.5,
                "is_error": false
            })
        );
        let back: Event = serde_json::from_value(value).unwrap();
        assert_eq!(back, event);
    }

    #[test]
    fn statuses_round_trip_through_text() {
        for status in Outcome::ALL {
            assert_eq!(Outcome::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                json!(status.as_str())
            );
        }
        assert_eq!(Outcome::parse("done"), None);
    }
}
