//! The observer the service gives every run: it hands each event to the store's
//! writer and returns at once. Live subscribers are told after the commit, by
//! the writer, so a client never sees an event that storage does not have.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use chrono::Utc;
use uuid::Uuid;

use super::{LiveEvent, LiveRun, Shared};
use crate::harness::{Event, EventKind, Observer, ObserverError, RunStatus, UsageTotals};
use crate::run::{INTERRUPTED, format_time};
use crate::store::writer::{AfterCommit, Finish};

/// What a run stopped because its records could not be stored is told.
pub const STORAGE_REFUSED: &str =
    "Storage refused the run's records for too long (the disk may be full); the run was stopped";

pub(super) struct RunObserver {
    shared: Arc<Shared>,
    live: Arc<LiveRun>,
    /// Transcript messages recorded so far: the next message's position.
    messages: AtomicU32,
    /// The last sequence seen, so the service can continue the sequence.
    last_sequence: AtomicU64,
    ended: AtomicBool,
}

impl RunObserver {
    pub(super) fn new(shared: Arc<Shared>, live: Arc<LiveRun>) -> Self {
        Self {
            shared,
            live,
            messages: AtomicU32::new(0),
            last_sequence: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        }
    }

    pub(super) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Ends a run the harness did not (or could not) end: one cancelled while
    /// queued, or one whose model or tools could not be set up.
    pub(super) fn end_without_harness(&self, status: RunStatus, error: Option<String>) {
        let event = Event {
            run_id: self.live.id,
            sequence: self.last_sequence.load(Ordering::Acquire) + 1,
            timestamp: Utc::now(),
            kind: EventKind::RunEnd {
                status,
                steps: 0,
                tool_calls: 0,
                usage: UsageTotals::default(),
                answer: None,
                error,
            },
        };
        let _ = self.on_event(&event);
    }
}

impl Observer for RunObserver {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        self.last_sequence.store(event.sequence, Ordering::Release);
        let metrics = &self.shared.metrics;
        let mut finish = None;
        let mut message = None;
        let rewritten;
        let mut event = event;
        match &event.kind {
            EventKind::Message { message: m } => {
                let position = self.messages.fetch_add(1, Ordering::AcqRel);
                message = Some((position, serde_json::to_string(&**m)?));
            }
            EventKind::ModelEnd { duration_ms, .. } => {
                metrics.model_calls.fetch_add(1, Ordering::Relaxed);
                metrics.model_duration.record_millis(*duration_ms);
            }
            EventKind::ModelError { .. } => {
                metrics.model_errors.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::ToolEnd {
                duration_ms,
                is_error,
                ..
            } => {
                metrics.tool_calls.fetch_add(1, Ordering::Relaxed);
                if *is_error {
                    metrics.tool_errors.fetch_add(1, Ordering::Relaxed);
                }
                metrics.tool_duration.record_millis(*duration_ms);
            }
            EventKind::RunEnd {
                status,
                steps,
                tool_calls,
                usage,
                answer,
                error,
            } => {
                if self.ended.swap(true, Ordering::AcqRel) {
                    return Err("a second run_end was refused".into());
                }
                let stopped = matches!(status, RunStatus::Aborted | RunStatus::Timeout);
                let (status, error) =
                    if stopped && self.live.storage_refused.load(Ordering::Acquire) {
                        (RunStatus::Failed, Some(STORAGE_REFUSED.to_owned()))
                    } else if stopped && self.live.interrupted.load(Ordering::Acquire) {
                        (RunStatus::Interrupted, Some(INTERRUPTED.to_owned()))
                    } else {
                        (*status, error.clone())
                    };
                rewritten = Event {
                    kind: EventKind::RunEnd {
                        status,
                        steps: *steps,
                        tool_calls: *tool_calls,
                        usage: *usage,
                        answer: answer.clone(),
                        error: error.clone(),
                    },
                    ..event.clone()
                };
                event = &rewritten;
                finish = Some(Finish {
                    run_id: self.live.id,
                    status,
                    answer: answer.clone(),
                    error,
                    steps: *steps,
                    tool_calls: *tool_calls,
                    usage: *usage,
                    finished_at: format_time(&event.timestamp),
                });
            }
            EventKind::RunStart | EventKind::ModelStart | EventKind::ToolStart { .. } => {}
        }
        let kind = event.kind.type_name();
        let body = serde_json::to_string(event)?;
        let live_event = Arc::new(LiveEvent {
            sequence: Some(event.sequence),
            kind,
            body: body.clone(),
        });
        // Subscribers hear only of what was stored; waiters are let go
        // either way.
        let after_commit: AfterCommit = match &finish {
            None => {
                let live = Arc::clone(&self.live);
                Box::new(move |stored| {
                    if stored {
                        let _ = live.events.send(live_event);
                    }
                })
            }
            Some(finish) => {
                let live = Arc::clone(&self.live);
                let shared = Arc::clone(&self.shared);
                let status = finish.status;
                Box::new(move |stored| {
                    shared.metrics.finished(status);
                    if stored {
                        let _ = live.events.send(live_event);
                    }
                    shared.forget(live.id);
                    live.done.cancel();
                })
            }
        };
        self.shared.store.writer().event(
            self.live.id,
            event.sequence,
            kind,
            body,
            message,
            finish,
            Some(after_commit),
        );
        Ok(())
    }

    fn on_delta(&self, run_id: Uuid, text: &str) {
        #[derive(serde::Serialize)]
        struct Delta<'a> {
            run_id: Uuid,
            timestamp: String,
            #[serde(rename = "type")]
            kind: &'static str,
            text: &'a str,
        }
        let body = serde_json::to_string(&Delta {
            run_id,
            timestamp: format_time(&Utc::now()),
            kind: "model_delta",
            text,
        });
        if let Ok(body) = body {
            let _ = self.live.events.send(Arc::new(LiveEvent {
                sequence: None,
                kind: "model_delta",
                body,
            }));
        }
    }
}
