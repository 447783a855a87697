//! The transitions the writer decides on what is stored (see
//! [`super::transition`]), and what each came to: a paused run's answers
//! and end, a cancel, a hand-over, a purge and the retention sweep; agents',
//! uploads' and schedules' writes; a run queued behind another let go.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::harness::Outcome;
use crate::run::{ActionAnswer, ModelSpec, Run, RunStatus, Tenant};
use crate::store::StatusChange;

/// A change to a paused run.
#[derive(Debug)]
pub enum Transition {
    /// A client's answers to some or all of its pending actions: all of
    /// them applied, or none.
    /// Answers that come once its pause ran out (`at` is past its
    /// deadline) end it `timeout` instead, as the watch would have.
    Answer {
        run_id: Uuid,
        tenant: Tenant,
        answers: Vec<(String, ActionAnswer)>,
        at: DateTime<Utc>,
    },
    /// Ends it with a `run_end` after its last event: a client's cancel,
    /// or (`due`: only if its deadline is at or before that time) its pause
    /// timing out.
    End {
        run_id: Uuid,
        status: Outcome,
        error: Option<String>,
        at: DateTime<Utc>,
        due: bool,
    },
    /// A client's cancel of a run that is not live on this replica (on
    /// PostgreSQL): a paused or queued one ends `aborted`; a running one,
    /// which another replica executes, is marked, and that replica told
    /// (see [`crate::store::cluster::CANCEL`]). `error` says why one that
    /// ends here ended (an attempt another superseded); `None` for a
    /// client's cancel.
    Cancel {
        run_id: Uuid,
        at: DateTime<Utc>,
        error: Option<String>,
    },
    /// Cancels a run queued behind another (SQLite: it is live nowhere),
    /// only while it still waits: one let go meanwhile is in this
    /// process's queue, where the cancel reaches it. `error` as for
    /// [`Transition::Cancel`].
    CancelWaiting {
        run_id: Uuid,
        at: DateTime<Utc>,
        error: Option<String>,
    },
    /// A running run whose server stops hands it over (see
    /// [`crate::harness::StopReason::HandOver`]): queued again to resume,
    /// with a `run_resumed` event (reason `shutdown`), or past its resumes
    /// ended `interrupted`. Only while `holder` still holds it (on
    /// PostgreSQL, another replica may have taken it over meanwhile).
    HandOver {
        run_id: Uuid,
        holder: Option<String>,
        at: DateTime<Utc>,
    },
    /// Removes a run that has ended, its events and messages (a client's
    /// purge): a live one is left as it is.
    Purge {
        run_id: Uuid,
        tenant: Tenant,
    },
    /// Removes up to `limit` runs that ended before `before` (RFC 3339),
    /// oldest first (the retention sweep).
    Expire {
        before: String,
        limit: u32,
    },
    /// A new version of an agent of `tenant`: its first (`create`), or the
    /// next of a live one.
    SaveAgent {
        tenant: Tenant,
        version: crate::agent::NewVersion,
        create: bool,
    },
    /// Archives an agent of `tenant`.
    ArchiveAgent {
        tenant: Tenant,
        name: String,
    },
    /// Uploads: one stored, one removed, those made before `before`.
    SaveUpload {
        tenant: Tenant,
        upload: crate::store::uploads::Upload,
    },
    DeleteUpload {
        tenant: Tenant,
        id: Uuid,
    },
    ExpireUploads {
        before: String,
        limit: u32,
    },
    /// A schedule of `tenant`: a new one (`create`), or an edit; its next
    /// tick `next` (RFC 3339), or for an edit without one, as stored.
    SaveSchedule {
        tenant: Tenant,
        schedule: crate::schedule::Schedule,
        next: Option<String>,
        create: bool,
    },
    DeleteSchedule {
        tenant: Tenant,
        id: Uuid,
    },
    /// Moves a schedule's next tick from `due` to `next` (only if it is
    /// still `due`), counting the tick.
    AdvanceSchedule {
        id: Uuid,
        due: String,
        next: String,
        counted: super::schedules::Counted,
    },
    /// Lets go of a run queued behind another that has ended.
    Release {
        run_id: Uuid,
    },
    /// A run that was queued behind the one it continues takes its
    /// transcript, as it starts.
    TakeHistory {
        run_id: Uuid,
    },
}

/// What a transition found and did.
#[derive(Debug)]
pub enum Transitioned {
    NotFound,
    /// The run is not paused: nothing was written.
    NotPaused(RunStatus),
    /// The answers do not fit its pending actions (why): nothing was written.
    Refused(String),
    /// The answers are stored; `complete`: every pending action is answered
    /// and the run is `queued`, to resume.
    Answered {
        run: Run,
        complete: bool,
        model: ModelSpec,
        tenant: String,
    },
    /// Its pause is not due yet (an answer came in meanwhile, or the clock).
    NotDue,
    /// It ended: its final state.
    Ended {
        run: Run,
        tenant: String,
    },
    /// Its cancel is asked of the replica executing it: the run as it is.
    Forwarded {
        run: Run,
    },
    /// It is removed.
    Purged,
    /// It was handed over: its change of status (queued to resume, or
    /// ended `interrupted`).
    HandedOver(StatusChange),
    /// Not removed: it is live.
    Live(RunStatus),
    /// The runs removed.
    Expired(Vec<Uuid>),
    /// The agent's new version, stored.
    AgentSaved(crate::agent::Agent),
    /// A live agent of that name exists: nothing was written.
    AgentExists,
    /// The agent is archived.
    AgentArchived,
    UploadSaved,
    UploadDeleted,
    ScheduleSaved,
    /// Whether this transition moved the schedule's tick (no other did).
    Advanced(bool),
    /// Whether this transition let the run go (no other did).
    Released(bool),
    HistoryTaken,
}
