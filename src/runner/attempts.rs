//! A run of attempts (SPEC section 27): its task starts each attempt as a
//! child run, at most `[runs] max_parallel_attempts` at once, runs the
//! run's check presets on each attempt's workspace as it ended, and ends
//! the run with the chosen attempt's answer and workspace, or `failed`
//! with `no_attempt_passed`.
//!
//! The attempts are runs like any other: queued for a slot of the tenant's,
//! resumed after a crash, cancelled by their own stop. The parent holds no
//! slot while it waits for them (a tenant allowed one run at a time would
//! otherwise wait for ever), and is resumed after a crash like any run:
//! it reads the attempts that exist (a unique index on the parent and the
//! number makes sure none is made twice) and goes on from them.
//!
//! Told on the parent's stream: `attempt_start` when an attempt is made,
//! `attempt_end` once its checks ran; both are written once (an attempt
//! that ended while its parent's process was down has its checks run, and
//! its `attempt_end` told, by whichever process takes the parent up; one
//! made by a process that died before its `attempt_start` was stored is
//! told by it too, from the stored events).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::observer::RunObserver;
use super::task::{Left, RunTask};
use crate::harness::{EventKind, Outcome, StopReason, UsageTotals};
use crate::run::{AttemptOf, AttemptPolicy, AttemptSummary, Run, RunStatus, Until};

/// The error a run of attempts ends with when none passed, before what
/// each attempt did.
pub const NO_ATTEMPT_PASSED: &str = "no_attempt_passed";

/// How often the attempts are read again from storage without news of
/// them: news of a change of status can go by unheard (on PostgreSQL, a
/// replica's notice lost), and a failed read is tried again after it.
const LOOK_AGAIN: Duration = Duration::from_secs(5);

/// What the parent knows of one attempt.
struct Attempt {
    run: Run,
    /// Whether its checks passed on its workspace as it ended, once they
    /// ran (only for an ended attempt).
    checks_passed: Option<bool>,
}

impl Attempt {
    fn summary(&self) -> AttemptSummary {
        AttemptSummary {
            run_id: self.run.id,
            attempt: self.run.attempt.unwrap_or(0),
            status: self.run.status,
            checks_passed: self.checks_passed,
        }
    }

    fn ended(&self) -> bool {
        self.run.status.is_terminal()
    }
}

/// Tells of each attempt not yet told of (`announced`, once it is known):
/// `attempt_start`.
fn announce(
    attempts: &BTreeMap<u32, Attempt>,
    announced: &mut Option<BTreeSet<u32>>,
    observer: &RunObserver,
) {
    let Some(announced) = announced else { return };
    for (&number, attempt) in attempts {
        if announced.insert(number) {
            observer.emit(EventKind::AttemptStart {
                attempt: number,
                run_id: attempt.run.id,
            });
        }
    }
}

/// How a run of attempts comes out.
enum Verdict {
    /// This attempt is chosen.
    Chosen(u32),
    /// Every attempt ended, none passed.
    NonePassed,
}

impl RunTask {
    /// Runs the attempts of this run and ends it. An error is the service's
    /// own failure (the run ends `failed`).
    pub(super) async fn run_attempts(&self, observer: &RunObserver) -> Result<Left, String> {
        let policy = self.spec.attempts.ok_or("the run has no attempts")?;
        let shared = &self.runner.services;
        let id = self.live.id;
        let stop = &self.live.stop;
        let taken_up = observer.has_begun();
        if !taken_up {
            observer.emit(EventKind::RunStart);
        }
        // Its own tree, cloned or unpacked if it must be, and kept (see
        // `RunSpec::starting_tree`): what each attempt starts from, and
        // what its diff is against.
        tokio::select! {
            biased;
            () = stop.stopped() => {}
            seeded = self.seed_workspace() => seeded?,
        }
        let parent_dir = self.runner.workspace_dir(id);
        // Subscribed before the first read: no end after it goes unheard.
        let (mut statuses, mut missed) = shared.store.live().subscribe_statuses();
        let told = shared
            .store
            .live()
            .read(id, |run| run.attempts.clone())
            .flatten()
            .unwrap_or_default();
        // The attempts whose start the stream has told. Taken up again, a
        // run may find an attempt its last process made but died before
        // telling of: it is told once they are read from storage.
        let mut announced: Option<BTreeSet<u32>> = (!taken_up).then(BTreeSet::new);
        let mut attempts: BTreeMap<u32, Attempt> = BTreeMap::new();
        let mut first_passed: Option<(chrono::DateTime<chrono::Utc>, u32)> = None;
        loop {
            if announced.is_none() {
                match shared.store.attempts_announced(id).await {
                    Ok(numbers) => announced = Some(numbers.into_iter().collect()),
                    Err(error) => tracing::warn!(%error, "the attempts told of could not be read"),
                }
            }
            match shared.store.attempts_of(id).await {
                Ok(runs) => {
                    for run in runs {
                        let Some(number) = run.attempt else { continue };
                        let checks_passed = attempts
                            .get(&number)
                            .and_then(|a| a.checks_passed)
                            .or_else(|| {
                                told.iter()
                                    .find(|t| t.attempt == number && t.status.is_terminal())
                                    .and_then(|t| t.checks_passed)
                            })
                            .filter(|_| run.status.is_terminal());
                        attempts.insert(number, Attempt { run, checks_passed });
                    }
                }
                Err(error) => tracing::warn!(%error, "the attempts could not be read"),
            }
            announce(&attempts, &mut announced, observer);
            // Every attempt that ended has its checks run, once.
            let mut changed = false;
            for attempt in attempts.values_mut() {
                if !attempt.ended() || attempt.checks_passed.is_some() {
                    continue;
                }
                // Stopped meanwhile: whoever goes on runs them again.
                let Some(passed) = self.checks_pass(&attempt.run).await else {
                    continue;
                };
                attempt.checks_passed = Some(passed);
                changed = true;
                let number = attempt.run.attempt.unwrap_or(0);
                tracing::info!(attempt = number, status = %attempt.run.status, checks_passed = passed, "attempt ended");
                observer.emit(EventKind::AttemptEnd {
                    attempt: number,
                    run_id: attempt.run.id,
                    status: attempt.run.status.as_str().to_owned(),
                    checks_passed: passed,
                });
            }
            for attempt in attempts.values() {
                if attempt.checks_passed == Some(true) {
                    let at = attempt.run.finished_at.unwrap_or_default();
                    let number = attempt.run.attempt.unwrap_or(0);
                    if first_passed.is_none_or(|first| (at, number) < first) {
                        first_passed = Some((at, number));
                    }
                }
            }
            let verdict = decide(&policy, &attempts, first_passed.map(|(_, n)| n));
            let stopped = stop.reason().cloned();
            // Once decided, or stopped by a client, the attempts left are
            // ended.
            let superseded = match (&verdict, &stopped) {
                (_, Some(StopReason::Cancelled)) => Some(StopReason::Cancelled),
                (Some(Verdict::Chosen(chosen)), _) => Some(StopReason::Superseded(format!(
                    "superseded: attempt {chosen} passed its checks first"
                ))),
                _ => None,
            };
            if let Some(reason) = &superseded {
                self.end_attempts(&attempts, reason).await;
            }
            match &stopped {
                Some(StopReason::HandOver | StopReason::Interrupted(_)) => {
                    // The attempts are handed over with this process's
                    // runs; whoever takes this run up goes on from them.
                    self.record(&attempts, None, None)?;
                    return Ok(Left::HandedOver);
                }
                Some(StopReason::Failed(why)) => {
                    self.record(&attempts, None, None)?;
                    observer.end_without_harness(Outcome::Failed, Some(why.clone()));
                    return Ok(Left::Ended);
                }
                _ => {}
            }
            let all_ended = attempts.values().all(Attempt::ended);
            if all_ended && (superseded.is_some() || verdict.is_some()) {
                self.finish(observer, &attempts, verdict, &parent_dir)
                    .await?;
                return Ok(Left::Ended);
            }
            if verdict.is_none() && superseded.is_none() {
                match self
                    .start_more(
                        &policy,
                        &mut attempts,
                        &mut announced,
                        &parent_dir,
                        observer,
                    )
                    .await
                {
                    Ok(started) => changed |= started,
                    Err(error) => {
                        // The run fails: the attempts it made go with it.
                        self.end_attempts(&attempts, &StopReason::Cancelled).await;
                        self.record(&attempts, None, None)?;
                        return Err(error);
                    }
                }
            }
            if changed {
                self.record(&attempts, None, None)?;
            }
            // Waits for news of one of its attempts, or its own stop.
            let mine = |change: &crate::store::StatusChange| {
                attempts.values().any(|a| a.run.id == change.run_id)
            };
            let look_again = tokio::time::sleep(LOOK_AGAIN);
            tokio::pin!(look_again);
            loop {
                tokio::select! {
                    () = stop.stopped(), if superseded.is_none() && stopped.is_none() => break,
                    () = missed.cancelled() => {
                        (statuses, missed) = shared.store.live().subscribe_statuses();
                        break;
                    }
                    () = &mut look_again => break,
                    change = statuses.recv() => match change {
                        Ok(change) if mine(&change) => break,
                        Ok(_) => {}
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => return Err("the store closed".into()),
                    },
                }
            }
        }
    }

    /// Starts attempts while fewer than `[runs] max_parallel_attempts`
    /// have not ended and not all `n` are made. Whether any was.
    async fn start_more(
        &self,
        policy: &AttemptPolicy,
        attempts: &mut BTreeMap<u32, Attempt>,
        announced: &mut Option<BTreeSet<u32>>,
        parent_dir: &std::path::Path,
        observer: &RunObserver,
    ) -> Result<bool, String> {
        let shared = &self.runner.services;
        let profile_temperature = match &self.spec.model {
            crate::run::ModelSpec::Profile(name) => {
                shared.profiles.get(name).and_then(|p| p.temperature())
            }
            crate::run::ModelSpec::Scripted(_) => None,
        };
        let mut started = false;
        for number in 1..=policy.n {
            let running = attempts.values().filter(|a| !a.ended()).count();
            if running >= shared.max_parallel_attempts as usize {
                break;
            }
            if attempts.contains_key(&number) {
                continue;
            }
            let of = AttemptOf {
                parent_run_id: self.live.id,
                attempt: number,
                temperature: policy.temperature_of(number, profile_temperature),
            };
            let run = self
                .runner
                .start_attempt(&self.live.tenant, &self.spec, parent_dir, of)
                .await
                .map_err(|error| format!("attempt {number} could not be started: {error}"))?;
            tracing::info!(attempt = number, attempt_run_id = %run.id, "attempt started");
            attempts.insert(
                number,
                Attempt {
                    run,
                    checks_passed: None,
                },
            );
            announce(attempts, announced, observer);
            started = true;
        }
        Ok(started)
    }

    /// Stops every attempt that has not ended, for `reason`: one live here
    /// at once; one paused, queued elsewhere or running on another replica
    /// through storage (a cancel).
    async fn end_attempts(&self, attempts: &BTreeMap<u32, Attempt>, reason: &StopReason) {
        let why = reason.superseded();
        // Those not live here first, while the live ones still hold their
        // slots: a slot freed before a queued attempt is ended in storage
        // could claim it, and a claimed one is only told to cancel.
        let mut live = Vec::new();
        for attempt in attempts.values().filter(|a| !a.ended()) {
            let id = attempt.run.id;
            if let Some(run) = self.runner.live(id) {
                live.push(run);
                continue;
            }
            if let Err(error) = self.runner.cancel_stored(id, why.clone()).await {
                tracing::warn!(%error, attempt_run_id = %id, "an attempt's cancel could not be stored");
            }
        }
        for run in live {
            run.stop.stop(reason.clone());
        }
    }

    /// Whether every check preset of the run exits 0 on `attempt`'s
    /// workspace as it ended (one that did not complete never passes);
    /// `None` when the run was stopped before they all ran.
    async fn checks_pass(&self, attempt: &Run) -> Option<bool> {
        if attempt.status != RunStatus::Ended(Outcome::Completed) {
            return Some(false);
        }
        let shared = &self.runner.services;
        let dir = self.runner.workspace_dir(attempt.id);
        if let Err(error) = tokio::fs::create_dir_all(&dir).await {
            tracing::error!(%error, "an attempt's workspace could not be made");
            return Some(false);
        }
        let presets = shared.commands.presets();
        let checks = self
            .spec
            .commands
            .iter()
            .filter(|name| presets.get(name).is_some_and(|preset| preset.check));
        for name in checks {
            let ran = shared
                .commands
                .run(name, &dir, self.live.stop.token())
                .await;
            if self.live.stop.is_stopped() {
                return None;
            }
            match ran {
                Ok(output) if output.exit_code == Some(0) => {}
                Ok(output) => {
                    tracing::info!(attempt_run_id = %attempt.id, check = %name, exit_code = ?output.exit_code, "an attempt's check failed");
                    return Some(false);
                }
                Err(error) => {
                    tracing::info!(attempt_run_id = %attempt.id, check = %name, %error, "an attempt's check did not run");
                    return Some(false);
                }
            }
        }
        Some(true)
    }

    /// Records the attempts as they stand, in order with the run's events.
    fn record(
        &self,
        attempts: &BTreeMap<u32, Attempt>,
        chosen: Option<u32>,
        transcript_of: Option<Uuid>,
    ) -> Result<(), String> {
        let list = attempts.values().map(Attempt::summary).collect();
        self.runner
            .services
            .store
            .writer()
            .attempts(self.live.id, list, chosen, transcript_of)
            .map_err(|e| e.to_string())
    }

    /// Ends the run once every attempt has: with the chosen one's answer,
    /// output and workspace, or `failed` when none passed (or `aborted`
    /// when its client cancelled it first). Its usage, steps and tool calls
    /// are its attempts' sums.
    async fn finish(
        &self,
        observer: &RunObserver,
        attempts: &BTreeMap<u32, Attempt>,
        verdict: Option<Verdict>,
        parent_dir: &std::path::Path,
    ) -> Result<(), String> {
        // Priced when every attempt's cost is known.
        let mut usage = UsageTotals::starting(!attempts.is_empty());
        let (mut steps, mut tool_calls) = (0u32, 0u32);
        for attempt in attempts.values() {
            let run = &attempt.run;
            usage = usage.plus(&run.usage);
            steps = steps.saturating_add(run.steps);
            tool_calls = tool_calls.saturating_add(run.tool_calls);
        }
        let cancelled = matches!(self.live.stop.reason(), Some(StopReason::Cancelled));
        let chosen = match verdict {
            Some(Verdict::Chosen(number)) if !cancelled => attempts.get(&number),
            _ => None,
        };
        let (status, answer, error, output) = match chosen {
            Some(chosen) => {
                let from = self.runner.workspace_dir(chosen.run.id);
                take_workspace(&from, parent_dir).await?;
                observer.set_changes(chosen.run.changes.unwrap_or_default());
                self.record(attempts, chosen.run.attempt, Some(chosen.run.id))?;
                (
                    Outcome::Completed,
                    chosen.run.answer.clone(),
                    None,
                    chosen.run.output.clone(),
                )
            }
            None if cancelled => {
                self.record(attempts, None, None)?;
                observer.set_changes(crate::repo::Changes::default());
                (Outcome::Aborted, None, None, None)
            }
            None => {
                self.record(attempts, None, None)?;
                observer.set_changes(crate::repo::Changes::default());
                let each = attempts
                    .values()
                    .map(|a| {
                        format!(
                            "attempt {} {}{}",
                            a.run.attempt.unwrap_or(0),
                            a.run.status,
                            if a.run.status == RunStatus::Ended(Outcome::Completed) {
                                ", its checks failed"
                            } else {
                                ""
                            }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                let error = format!(
                    "{NO_ATTEMPT_PASSED}: none of the {} attempts passed its checks ({each})",
                    attempts.len()
                );
                (Outcome::Failed, None, Some(error), None)
            }
        };
        tracing::info!(%status, chosen = ?chosen.and_then(|c| c.run.attempt), "attempts ended");
        observer.emit(EventKind::RunEnd {
            status,
            steps,
            tool_calls,
            usage,
            answer,
            error,
            output,
        });
        Ok(())
    }
}

/// What the attempts so far decide, if anything: with `first_pass`, the
/// first attempt whose checks passed (`first`); with `all`, once every
/// attempt is made and ended, the lowest-numbered that passed. Either way,
/// once all `n` ended without a pass, that none passed.
fn decide(
    policy: &AttemptPolicy,
    attempts: &BTreeMap<u32, Attempt>,
    first: Option<u32>,
) -> Option<Verdict> {
    let all_made = attempts.len() >= policy.n as usize;
    let all_ended = all_made && attempts.values().all(|a| a.checks_passed.is_some());
    match policy.until {
        Until::FirstPass => {
            if let Some(first) = first {
                return Some(Verdict::Chosen(first));
            }
        }
        Until::All if all_ended => {
            let lowest = attempts
                .iter()
                .find(|(_, a)| a.checks_passed == Some(true))
                .map(|(n, _)| *n);
            if let Some(lowest) = lowest {
                return Some(Verdict::Chosen(lowest));
            }
        }
        Until::All => {}
    }
    all_ended.then_some(Verdict::NonePassed)
}

/// Makes the run's workspace the chosen attempt's: what was there is
/// removed, and the attempt's copied in (its own stays, for its diff).
async fn take_workspace(from: &std::path::Path, to: &std::path::Path) -> Result<(), String> {
    let (from, to) = (from.to_owned(), to.to_owned());
    tokio::task::spawn_blocking(move || {
        crate::repo::places::remove_tree(&to)?;
        crate::tools::copy::copy_workspace(&from, &to)
            .map(|_| ())
            .map_err(std::io::Error::other)
    })
    .await
    .map_err(|e| format!("taking the chosen attempt's workspace failed: {e}"))?
    .map_err(|e| format!("the chosen attempt's workspace could not be taken: {e}"))
}
