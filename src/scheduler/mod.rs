//! Which run starts next, and the slots runs execute in: one interface for
//! the runner, whatever the engine.
//!
//! - [`Local`] (SQLite, one process): queued runs wait here, each for its
//!   turn at a slot, first come first served.
//! - [`Leased`] (PostgreSQL, replicas): queued runs wait in the database; a
//!   replica with a free slot claims the oldest under a lease it renews,
//!   takes over the runs of replicas whose lease ran out, and hears the
//!   others' news.
//!
//! The runner asks the scheduler for a place ([`Scheduler::admit`]), hands
//! it a stored queued run ([`Scheduler::enqueue`]), and executes a run only
//! in a [`Slot`] the scheduler gave. Counts are kept by guards: a [`Place`]
//! counts a run waiting and a [`Slot`] a run holding a slot until dropped,
//! so that no path can forget to give them back.

mod gate;
mod leased;
mod limits;
mod local;
mod slots;

use std::sync::Arc;

use tokio_util::task::task_tracker::TaskTrackerToken;
use uuid::Uuid;

pub use leased::Leased;
pub use limits::Limits;
pub use local::Local;
pub use slots::{Hold, Place, Slot, Turn};
use slots::{Holding, Slots};

use crate::run::{Run, Tenant};
use crate::store::{StoreError, Unfinished};

/// Why a run was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("the queue is full")]
    QueueFull,
    /// The tenant created its `runs_per_minute` already.
    #[error("the tenant's rate of {per_minute} runs a minute is spent")]
    RateLimited {
        retry_after: std::time::Duration,
        per_minute: u32,
    },
    /// The tenant's runs of the last 24 hours spent its token or cost
    /// quota: `spent` says which, and how much.
    #[error("the tenant's runs of the last 24 hours used {spent}")]
    QuotaExceeded {
        retry_after: std::time::Duration,
        spent: String,
    },
    /// The queue could not be counted (the database's failure).
    #[error("{0}")]
    Storage(String),
    /// This process takes no work for now (see [`Scheduler::unready`]).
    #[error("{0}")]
    Unready(String),
}

/// Where an admitted run goes.
pub enum Admission {
    /// A slot is free: it starts now.
    Now(Slot),
    /// It waits: its place in the queue, counted until it is dropped.
    Queue(Place),
}

/// Where a stored queued run waits.
pub enum Queued {
    /// Here: its task waits for its turn.
    Here(Turn),
    /// In shared storage: whichever replica has a slot first claims it.
    Elsewhere,
}

/// A client's cancel of a run that is not live here.
#[derive(Debug)]
pub enum Cancelled {
    /// It ended `aborted` (it was paused, or queued elsewhere).
    Ended(Box<Run>),
    /// It executes elsewhere: that process is told. The run as it is.
    Forwarded(Box<Run>),
    /// It is none of these (any more).
    Not,
}

/// What the scheduler asks of the runner.
pub trait Host: Send + Sync + 'static {
    /// Starts a run the scheduler took from the queue, in `slot`; `cancel`:
    /// a client asked for its cancel meanwhile (it ends at once).
    fn start_taken(&self, run: Unfinished, slot: Slot, cancel: bool);
    /// Whether a run executes (or waits to) here.
    fn is_live(&self, id: Uuid) -> bool;
    /// Cancels a run that is live here; whether it was.
    fn cancel_live(&self, id: Uuid) -> bool;
    /// Stops every run executing here at once, to be handed over: their
    /// hold was revoked (see [`Hold::revoked`]), so they write nothing
    /// more, and are taken over from storage.
    fn stop_all(&self);
    /// Holds the runner's shutdown until the token is dropped, unless it is
    /// stopping already (`None`): a run taken from the queue always gets
    /// its task, and that task is waited for.
    fn hold(&self) -> Option<TaskTrackerToken>;
}

/// The queue and the slots. See the module's documentation.
#[async_trait::async_trait]
pub trait Scheduler: Send + Sync {
    /// Admits a new run: a slot if one is free, else a place in the queue
    /// if there is room.
    async fn admit(&self, tenant: &Tenant) -> Result<Admission, Refused>;

    /// A place in the queue for a run admitted before (recovered at
    /// start, a pause fully answered): never refused.
    fn readmit(&self, tenant: &Tenant) -> Place;

    /// Hands the scheduler a run stored `queued` (after its place was
    /// given). `fresh`: it has not started, so that it waits while its
    /// tenant's token quota is spent; a run in the middle (resumed, or its
    /// pause answered) never does: a quota never breaks a run.
    fn enqueue(&self, place: Place, fresh: bool) -> Queued;

    /// A slot again for a run executing here that gave its own back while
    /// it waited on others (its children): once its tenant's turn comes,
    /// as any run's; `None` once the slots are closed (shutdown).
    async fn slot_again(&self, tenant: &Tenant) -> Option<Slot>;

    /// Gives back to the queue a run stored as held here that will not
    /// execute (the server stopped before it started).
    async fn release(&self, run_id: Uuid);

    /// Gives back to the queue a run held here whose stored state could
    /// not be read (a failure of the database's), to be claimed again
    /// after a wait that grows with each such failure, by any replica:
    /// `true` when it did. `false` where the queue is this process's own
    /// (SQLite), or the run could not be given back: its task then waits
    /// and reads again itself.
    async fn set_aside(&self, run_id: Uuid) -> bool;

    /// A cancel of a run that is not live here (a client's, or a parent's
    /// of its attempt or child); `why` is the error a run this ends ends
    /// with (`None` for a client's cancel).
    async fn cancel_elsewhere(
        &self,
        run_id: Uuid,
        why: Option<String>,
    ) -> Result<Cancelled, StoreError>;

    /// Starts the scheduler's own work (claiming, renewing, sweeping,
    /// listening), once the server is bound and before it serves.
    async fn join(&self, host: Arc<dyn Host>);

    /// Why this process should not be given work now (on PostgreSQL, it
    /// lost its lease and is joining again); `None` when it may.
    fn unready(&self) -> Option<String>;

    /// Stops handing out turns and taking runs from the queue (shutdown):
    /// what waits stays queued in storage.
    fn close(&self);

    /// Runs executing now, and runs waiting.
    fn counts(&self) -> Counts;
}

/// What the scheduler counts, for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub executing: u64,
    pub queued: u64,
}
