//! How a drive ends: a run handed over or paused keeps where it stood; any
//! other end emits `run_end` and becomes the run's result.

use super::{
    CANNOT_PAUSE, Checkpoint, End, HANDED_OVER, Outcome, PendingAction, Progress, Run, RunResult,
    StopReason, Stopped,
};
use crate::harness::events::EventKind;

impl Run<'_, '_> {
    /// Where the drive left the run: handed over, paused, or ended (see
    /// [`Run::finish`]); `stopped` says why, should it have been stopped.
    pub(super) fn progress(self, end: End, stopped: Stopped) -> Progress {
        match end {
            End::Stopped if matches!(stopped, Stopped::From(StopReason::HandOver)) => {
                Progress::HandedOver(self.checkpoint(Vec::new()))
            }
            End::Paused(pending) => Progress::Paused(self.checkpoint(pending)),
            end => Progress::Ended(self.finish(end, stopped)),
        }
    }

    /// Where the run stands, to go on from later, waiting for `pending`.
    fn checkpoint(self, pending: Vec<PendingAction>) -> Checkpoint {
        Checkpoint {
            messages: self.messages,
            steps: self.steps,
            tool_calls: self.tool_calls,
            usage: self.usage,
            last_sequence: self.emitter.sequence(),
            elapsed: self.elapsed_before,
            pending,
        }
    }

    pub(super) fn finish(mut self, end: End, stopped: Stopped) -> RunResult {
        let mut output = None;
        let (status, answer, error) = match end {
            End::Completed(answer, document) => {
                output = document;
                (Outcome::Completed, Some(answer), None)
            }
            End::OutputInvalid(answer, error) => (Outcome::Failed, Some(answer), Some(error)),
            End::StepLimit => (Outcome::StepLimit, None, None),
            End::ToolLimit => (Outcome::ToolLimit, None, None),
            End::Stopped => match stopped {
                Stopped::Deadline => (Outcome::Timeout, None, None),
                Stopped::From(StopReason::Cancelled) => (Outcome::Aborted, None, None),
                Stopped::From(StopReason::Interrupted(why)) => {
                    (Outcome::Interrupted, None, Some(why))
                }
                Stopped::From(StopReason::Failed(why)) => (Outcome::Failed, None, Some(why)),
                Stopped::From(StopReason::Superseded(why)) => (Outcome::Aborted, None, Some(why)),
                Stopped::From(StopReason::HandOver) => {
                    (Outcome::Interrupted, None, Some(HANDED_OVER.to_owned()))
                }
            },
            End::ModelError(error) => (Outcome::ModelError, None, Some(error)),
            End::ContextLimit(error) => (Outcome::ContextLimit, None, Some(error)),
            End::CostLimit(error) => (Outcome::CostLimit, None, Some(error)),
            End::Failed(error) => (Outcome::Failed, None, Some(error)),
            // A drive that cannot pause ends `failed` instead (see `run`).
            End::Paused(_) => (Outcome::Failed, None, Some(CANNOT_PAUSE.to_owned())),
        };
        let (steps, tool_calls, usage) = (self.steps, self.tool_calls, self.usage);
        self.emitter.emit(|| EventKind::RunEnd {
            status,
            steps,
            tool_calls,
            usage,
            answer: answer.clone(),
            error: error.clone(),
            output: output.clone(),
        });
        RunResult {
            run_id: self.config.run_id,
            status,
            answer,
            error,
            messages: self.messages,
            steps,
            tool_calls,
            usage,
            output,
        }
    }
}
