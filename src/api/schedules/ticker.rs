//! Schedules' ticks (SPEC section 23). Every server (every replica) looks
//! for enabled schedules whose next tick is due as the soonest falls due,
//! and at least once a second (for those made or changed elsewhere); it
//! makes each tick's run as a client's `POST /v1/runs` would, under the
//! schedule's tenant, its limits and quotas included.
//!
//! Exactly one run a tick, whoever makes it: the run names its schedule and
//! its tick, and storage holds one run per pair (a unique index), so a
//! second replica's run for the same tick is refused by the database, not
//! by timing. The tick is then moved on by a compare on the tick that was
//! due: one replica alone counts it (`skipped_ticks`, `refused_ticks`). A
//! server that stops between making the run and moving the tick leaves it
//! due: whoever looks next finds its run made, and moves it on.
//!
//! Ticks missed while no server ran (or while every replica was frozen)
//! are made up once, by the latest of them. A refused tick (a rate limit,
//! a quota, a full queue; or a body no longer valid: an agent archived, a
//! profile gone) is counted and not retried; a failure of the server's
//! own (its storage) leaves the tick due, for the next look.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;

use super::super::error::ApiError;
use super::super::state::AppState;
use crate::run::{Run, ScheduleOf, Tenant};
use crate::runner::SubmitError;
use crate::schedule::{Overlap, Schedule, ThreadMode, Timing};
use crate::store::Counted;

/// How often the due schedules are looked for.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The least wait between two looks (a tick that could not be made stays
/// due: it is not tried in a tight loop).
const MIN_WAIT: Duration = Duration::from_millis(50);

/// Most schedules made a look.
const PAGE: u32 = 100;

/// What making a schedule's run came to.
pub enum Made {
    Run(Box<Run>),
    /// Its previous run (this one) is live and its overlap is skip.
    Skipped(uuid::Uuid),
    /// Refused by a limit of the tenant, or its body is no longer valid.
    Refused(ApiError),
    /// The server's own failure: tried again at the next look.
    Failed(ApiError),
    /// Another replica made the tick's run.
    Elsewhere,
}

/// Starts looking for due ticks, until the server stops.
pub fn spawn(state: AppState) {
    tokio::spawn(async move {
        let closing = state.runner.closing();
        loop {
            look(&state).await;
            // Until the soonest tick, if it falls within the second (one
            // still due after the look could not be made: a second).
            let wait = match state.runner.store().soonest_tick().await {
                Ok(Some(soonest)) => (soonest - Utc::now())
                    .to_std()
                    .map_or(LOOK_EVERY, |wait| wait.min(LOOK_EVERY)),
                _ => LOOK_EVERY,
            };
            tokio::select! {
                () = tokio::time::sleep(wait.max(MIN_WAIT)) => {}
                () = closing.cancelled() => return,
            }
        }
    });
}

/// Makes every tick due now.
async fn look(state: &AppState) {
    // A replica that lost its standing makes nothing: the others do.
    if state.runner.unready().is_some() || state.runner.is_closing() {
        return;
    }
    let now = Utc::now();
    let due = match state.runner.store().due_schedules(now, PAGE).await {
        Ok(due) => due,
        Err(error) => {
            tracing::warn!(%error, "reading the schedules due failed");
            return;
        }
    };
    for (tenant, schedule) in due {
        if state.runner.is_closing() {
            return;
        }
        tick(state, &tenant, &schedule, now).await;
    }
}

/// The latest time storage and the API can write (a schedule that never
/// falls due again waits there).
fn never() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

async fn tick(state: &AppState, tenant: &Tenant, schedule: &Schedule, now: DateTime<Utc>) {
    let Some(due) = schedule.next_run_at else {
        return;
    };
    let id = schedule.id;
    let timing = match Timing::parse(&schedule.cron, &schedule.timezone) {
        Ok(timing) => timing,
        Err(error) => {
            tracing::error!(schedule_id = %id, %error, "a stored schedule's timing is not valid");
            return;
        }
    };
    let tick = timing.latest_due(due, now);
    let next = timing.next_after(now).unwrap_or_else(never);
    let store = state.runner.store();
    let made = match store.run_of_tick(id, tick).await {
        Ok(Some(_)) => Made::Elsewhere,
        Ok(None) => make_run(state, tenant, schedule, Some(tick)).await,
        Err(error) => {
            tracing::warn!(schedule_id = %id, %error, "a tick's run could not be looked for");
            return;
        }
    };
    let (counted, outcome) = match &made {
        Made::Run(run) => {
            tracing::info!(schedule_id = %id, run_id = %run.id, tick = %tick, "a schedule's tick made a run");
            state.runner.metrics().schedule_tick(&tenant.0, "made");
            (Counted::Made, None)
        }
        Made::Elsewhere => (Counted::Made, None),
        Made::Skipped(live) => {
            tracing::info!(schedule_id = %id, run_id = %live, "a tick skipped: the previous run is live");
            (Counted::Skipped, Some("skipped"))
        }
        Made::Refused(error) => {
            tracing::warn!(schedule_id = %id, %error, "a tick's run was refused");
            (Counted::Refused, Some("refused"))
        }
        Made::Failed(error) => {
            tracing::warn!(schedule_id = %id, %error, "a tick's run could not be made; it stays due");
            return;
        }
    };
    match store.advance_schedule(id, due, next, counted).await {
        Ok(true) => {
            if let Some(outcome) = outcome {
                state.runner.metrics().schedule_tick(&tenant.0, outcome);
            }
        }
        Ok(false) => {}
        Err(error) => {
            tracing::warn!(schedule_id = %id, %error, "a schedule's tick could not be moved on")
        }
    }
}

/// Makes the schedule's run for `tick` (`None`: a trigger's), after its
/// previous run: continuing it (`thread: continue`), and while it is live
/// queued behind it (`overlap: enqueue`) or not made (`skip`).
pub async fn make_run(
    state: &AppState,
    tenant: &Tenant,
    schedule: &Schedule,
    tick: Option<DateTime<Utc>>,
) -> Made {
    let store = state.runner.store();
    let previous = match schedule.last_run_id {
        Some(id) => match store.get_run(tenant, id).await {
            Ok(run) => run,
            Err(error) => return Made::Failed(error.into()),
        },
        None => None,
    };
    let live = previous.as_ref().filter(|run| !run.status.is_terminal());
    // Skipped while the previous run is live; with `enqueue`, while it is
    // itself still queued behind the one before (one run waits, not one a
    // tick: a schedule whose runs pause would pile them up).
    if let Some(live) = live
        && (schedule.overlap == Overlap::Skip || live.waiting_for.is_some())
    {
        return Made::Skipped(live.id);
    }
    let mut body = schedule.run.clone();
    if let (ThreadMode::Continue, Some(previous), Value::Object(fields)) =
        (schedule.thread, &previous, &mut body)
    {
        fields.insert("previous_run_id".into(), previous.id.to_string().into());
        if live.is_some() {
            fields.insert("multitask".into(), "enqueue".into());
        }
    }
    let mut spec = match super::super::runs::accept(state, tenant, body).await {
        Ok(spec) => spec,
        Err(error @ (ApiError::Unavailable(_) | ApiError::Internal(_))) => {
            return Made::Failed(error);
        }
        Err(error) => return Made::Refused(super::in_run_body(error)),
    };
    spec.schedule = Some(ScheduleOf {
        schedule_id: schedule.id,
        tick,
    });
    if schedule.thread == ThreadMode::New {
        spec.after = live.map(|run| run.id);
    }
    match state.runner.submit(tenant, spec, None).await {
        Ok(run) => Made::Run(Box::new(run)),
        Err(error @ (SubmitError::Limited { .. } | SubmitError::QueueFull)) => {
            Made::Refused(error.into())
        }
        Err(error @ (SubmitError::Workspace(_) | SubmitError::PreviousNotFound)) => {
            Made::Refused(error.into())
        }
        Err(error) => {
            // Refused by the database as the tick's second run: another
            // replica made it.
            if let Some(tick) = tick
                && let Ok(Some(_)) = store.run_of_tick(schedule.id, tick).await
            {
                return Made::Elsewhere;
            }
            Made::Failed(error.into())
        }
    }
}
