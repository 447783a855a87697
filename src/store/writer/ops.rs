//! The writer's operations, and what each tells once it is committed or
//! given up: its waiter, its run's live subscribers, the runs' statuses.

use std::sync::Arc;

use tokio::sync::oneshot;
use uuid::Uuid;

use super::sql::RunRow;
use super::transition::{Transition, Transitioned};
use crate::harness::{Outcome, Totals, UsageTotals};
use crate::run::RunStatus;
use crate::store::StoreError;
use crate::store::live::{Channels, Closing, LiveEvent, StatusChange};

/// The end of a run, written with its `run_end` event in one transaction.
#[derive(Debug)]
pub struct Finish {
    /// The run's tenant (told with its change of status).
    pub tenant: String,
    pub status: Outcome,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub steps: u32,
    pub tool_calls: u32,
    pub usage: UsageTotals,
    /// When it ended, as stored (RFC 3339) and as it is.
    pub finished_at: String,
    pub finished: chrono::DateTime<chrono::Utc>,
    /// The final answer's JSON document, under an output schema.
    pub output: Option<serde_json::Value>,
    /// What it changed in its workspace (none when that could not be
    /// told).
    pub changes: Option<crate::repo::Changes>,
    /// Whether the run has a webhook: its end is then a delivery of the
    /// outbox, written with it (a run without one costs the outbox
    /// nothing).
    pub webhook: bool,
}

/// One event of a run, ready to store: its JSON made once, shared by the row
/// and what live subscribers are sent.
#[derive(Debug)]
pub struct NewEvent {
    pub run_id: Uuid,
    pub sequence: u64,
    pub kind: &'static str,
    pub body: Arc<str>,
    /// The transcript message the event announces: its position and JSON.
    pub message: Option<(u32, Arc<str>)>,
    /// For `run_end`: the run's final state.
    pub finish: Option<Box<Finish>>,
    /// For `actions_required`: where the run pauses, written with it.
    pub pause: Option<Box<Pause>>,
    /// The run's totals as of this event (a step's `model_end`, a tool
    /// result's `message`), written with it: what it resumes from.
    pub progress: Option<Totals>,
    /// The run's event just before this one, stored in the same
    /// transaction (and published first): an answer the harness followed
    /// with a note or with the run's end, which must not be stored without
    /// what followed it (a run resumed after a crash would otherwise end
    /// with an answer its harness had questioned).
    pub first: Option<Box<NewEvent>>,
}

impl NewEvent {
    /// This event and the one stored with it, in order.
    pub(super) fn all(&self) -> impl Iterator<Item = &NewEvent> {
        self.first
            .as_deref()
            .into_iter()
            .chain(std::iter::once(self))
    }
}

/// A run pausing for a decision, written with its `actions_required` event
/// in one transaction: once a client can see the event, the run is
/// `requires_action` and can be answered.
#[derive(Debug)]
pub struct Pause {
    /// The run's tenant (told with its change of status).
    pub tenant: String,
    /// When it paused (RFC 3339).
    pub at: String,
    pub steps: u32,
    pub tool_calls: u32,
    pub usage: UsageTotals,
    /// JSON of the pending actions.
    pub pending: String,
    /// Running time used so far.
    pub running_ms: u64,
    /// When the pause ends `timeout` unless answered (RFC 3339).
    pub action_deadline: String,
    /// Whether the run has a webhook (see [`Finish::webhook`]).
    pub webhook: bool,
}

pub(super) enum Op {
    InsertRun(Box<RunRow>, oneshot::Sender<Result<(), StoreError>>),
    Started {
        run_id: Uuid,
        tenant: String,
        /// When it started, as stored (RFC 3339), and as it is.
        at: String,
        started_at: chrono::DateTime<chrono::Utc>,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    Event(NewEvent),
    /// The tools a run may call, once its MCP servers have listed theirs (a
    /// JSON array of names).
    Tools {
        run_id: Uuid,
        tools: String,
        names: Vec<String>,
    },
    /// A run's attempts as they stand (and the one chosen, once one is):
    /// `attempts` their JSON, `list` what the live copy takes. With
    /// `transcript_of`, the chosen attempt whose transcript becomes the
    /// run's (a follow-up continues it).
    Attempts {
        run_id: Uuid,
        attempts: String,
        list: Vec<crate::run::AttemptSummary>,
        chosen: Option<u32>,
        transcript_of: Option<Uuid>,
    },
    /// The pending actions of a run's children that wait for a decision,
    /// listed on it (`json` null when none).
    Delegated {
        run_id: Uuid,
        json: Option<String>,
    },
    /// What a run's children used, summed (their `usage_total`).
    ChildrenUsage {
        run_id: Uuid,
        json: String,
        usage: UsageTotals,
    },
    /// A change that depends on what is stored (answering or ending a paused
    /// run): written apart from other writes, with the transitions waiting
    /// beside it (see `Task::transitions`).
    Transition(
        Box<Transition>,
        oneshot::Sender<Result<Transitioned, StoreError>>,
    ),
    /// Answered `true` once everything sent before it is committed
    /// (`false` if it was given up): what a run waits on before a side
    /// effect that must not happen unrecorded.
    Barrier(oneshot::Sender<bool>),
    /// A webhook's delivery settled: removed from the outbox (`next_at`
    /// none: delivered or given up), or to be tried again from `next_at`.
    Delivery {
        id: String,
        next_at: Option<String>,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    Close(oneshot::Sender<()>),
}

impl Op {
    /// The change of status this operation commits, if any.
    pub(super) fn status_change(&self) -> Option<StatusChange> {
        let (run_id, tenant, status, at) = match self {
            Self::InsertRun(row, _) => return Some(row.status_change().clone()),
            Self::Started {
                run_id, tenant, at, ..
            } => (*run_id, tenant.as_str(), RunStatus::Running, at.as_str()),
            Self::Event(event) => match (&event.finish, &event.pause) {
                (Some(finish), _) => (
                    event.run_id,
                    finish.tenant.as_str(),
                    RunStatus::Ended(finish.status),
                    finish.finished_at.as_str(),
                ),
                (None, Some(pause)) => (
                    event.run_id,
                    pause.tenant.as_str(),
                    RunStatus::RequiresAction,
                    pause.at.as_str(),
                ),
                (None, None) => return None,
            },
            Self::Tools { .. }
            | Self::Attempts { .. }
            | Self::ChildrenUsage { .. }
            | Self::Delegated { .. }
            | Self::Transition(..)
            | Self::Barrier(_)
            | Self::Delivery { .. }
            | Self::Close(_) => {
                return None;
            }
        };
        Some(StatusChange {
            run_id,
            tenant: tenant.to_owned(),
            status,
            at: at.to_owned(),
        })
    }
}

/// The operations of a batch that storage refused: inserts are answered with
/// the error; the rest is returned, to be held.
pub(super) fn hold(batch: Vec<Op>, error: &StoreError) -> Vec<Op> {
    let mut held = Vec::with_capacity(batch.len());
    for op in batch {
        match op {
            Op::InsertRun(_, done) => {
                let _ = done.send(Err(StoreError::Refused(error.to_string())));
            }
            op => held.push(op),
        }
    }
    held
}

/// Tells an operation's waiters how it ended: a stored event is published to
/// its run's subscribers; a run's end, stored or given up, closes its channel.
pub(super) fn finish(op: Op, stored: bool, channels: &Channels) {
    if stored {
        channels.publish_statuses(op.status_change());
        apply(&op, channels);
    }
    match op {
        Op::InsertRun(_, done) | Op::Started { done, .. } | Op::Delivery { done, .. } => {
            let _ = done.send(if stored {
                Ok(())
            } else {
                Err(StoreError::Refused("the write was given up".into()))
            });
        }
        Op::Event(mut event) => {
            if let Some(first) = event.first.take() {
                finish(Op::Event(*first), stored, channels);
            }
            if stored {
                channels.publish(
                    event.run_id,
                    Arc::new(LiveEvent {
                        sequence: Some(event.sequence),
                        after: event.sequence.saturating_sub(1),
                        kind: event.kind,
                        body: event.body,
                    }),
                );
            }
            let closing = match (stored, event.finish.is_some(), event.pause.is_some()) {
                (true, true, _) => Some(Closing::Ended),
                (true, _, true) => Some(Closing::Paused),
                (false, true, _) | (false, _, true) => Some(Closing::GivenUp),
                _ => None,
            };
            if let Some(closing) = closing {
                channels.close(event.run_id, closing);
            }
        }
        Op::Transition(_, done) => {
            let _ = done.send(Err(StoreError::Refused("the write was given up".into())));
        }
        Op::Barrier(done) => {
            let _ = done.send(stored);
        }
        Op::Tools { .. }
        | Op::Attempts { .. }
        | Op::ChildrenUsage { .. }
        | Op::Delegated { .. }
        | Op::Close(_) => {}
    }
}

/// Applies a committed operation to its live run's copy in `channels`: the
/// one place that copy changes, so that it is what storage holds.
fn apply(op: &Op, channels: &Channels) {
    if let Op::Event(NewEvent {
        first: Some(first), ..
    }) = op
    {
        apply_event(first, channels);
    }
    match op {
        Op::Started {
            run_id, started_at, ..
        } => channels.apply(*run_id, |run| {
            run.status = RunStatus::Running;
            // A resumed run keeps its first start.
            run.started_at.get_or_insert(*started_at);
            run.pending_actions.clear();
        }),
        Op::Tools { run_id, names, .. } => {
            channels.apply(*run_id, |run| run.tools.clone_from(names));
        }
        Op::Attempts {
            run_id,
            list,
            chosen,
            ..
        } => channels.apply(*run_id, |run| {
            run.attempts = Some(list.clone());
            run.chosen_attempt = *chosen;
        }),
        Op::ChildrenUsage { run_id, usage, .. } => channels.apply(*run_id, |run| {
            run.children_usage = Some(*usage);
            run.refresh_total();
        }),
        Op::Event(event) => apply_event(event, channels),
        // A paused run's copy goes with its channel: it goes live again
        // from what storage holds.
        _ => {}
    }
}

/// Applies a committed event (not the one stored before it) to its live
/// run's copy.
fn apply_event(event: &NewEvent, channels: &Channels) {
    match event {
        NewEvent {
            run_id,
            progress: Some(totals),
            finish: None,
            ..
        } => channels.apply(*run_id, |run| {
            run.steps = totals.steps;
            run.tool_calls = totals.tool_calls;
            run.usage = totals.usage;
            run.refresh_total();
        }),
        NewEvent {
            run_id,
            finish: Some(finish),
            ..
        } => channels.apply(*run_id, |run| {
            run.status = RunStatus::Ended(finish.status);
            run.answer.clone_from(&finish.answer);
            run.error.clone_from(&finish.error);
            run.steps = finish.steps;
            run.tool_calls = finish.tool_calls;
            run.usage = finish.usage;
            run.refresh_total();
            run.finished_at = Some(finish.finished);
            run.output.clone_from(&finish.output);
            run.changes = finish.changes;
        }),
        _ => {}
    }
}

/// Tells an operation's waiters that it failed alone, with `error`.
pub(super) fn fail(op: Op, error: StoreError, channels: &Channels) {
    match op {
        Op::InsertRun(_, done) | Op::Started { done, .. } | Op::Delivery { done, .. } => {
            let _ = done.send(Err(error));
        }
        Op::Transition(_, done) => {
            let _ = done.send(Err(error));
        }
        op => finish(op, false, channels),
    }
}

/// Fails the inserts in `batch` of runs held by a replica id other than
/// `holder` (a membership of this replica's that is lost: a slot taken
/// under it, an insert sent after the replica joined again), which must not
/// be written under the new one. The rest of the batch.
pub(super) fn refuse_strays(batch: Vec<Op>, holder: &str, channels: &Channels) -> Vec<Op> {
    let mut kept = Vec::with_capacity(batch.len());
    for op in batch {
        match &op {
            Op::InsertRun(row, _) if row.owner().is_some_and(|owner| owner != holder) => {
                fail(op, StoreError::Fenced, channels);
            }
            _ => kept.push(op),
        }
    }
    kept
}
