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

mod leased;
mod local;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;
use uuid::Uuid;

pub use leased::Leased;
pub use local::Local;

use crate::run::{Run, Tenant};
use crate::store::{StoreError, Unfinished};

/// Why a run was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("the queue is full")]
    QueueFull,
    /// The queue could not be counted (the database's failure).
    #[error("{0}")]
    Storage(String),
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
    /// given).
    fn enqueue(&self, place: Place) -> Queued;

    /// Gives back to the queue a run stored as held here that will not
    /// execute (the server stopped before it started).
    async fn release(&self, run_id: Uuid);

    /// A client's cancel of a run that is not live here.
    async fn cancel_elsewhere(&self, run_id: Uuid) -> Result<Cancelled, StoreError>;

    /// Starts the scheduler's own work (claiming, renewing, sweeping,
    /// listening), once the server is bound and before it serves.
    async fn join(&self, host: Arc<dyn Host>);

    /// Fires when this process may no longer hold runs (its lease was
    /// lost). Never fires for one process alone.
    fn revoked(&self) -> CancellationToken;

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

/// The slots (a fair semaphore: first come, first served) and what is
/// counted of them. Shared by both schedulers.
struct Slots {
    permits: Arc<Semaphore>,
    tally: Arc<Tally>,
    /// Who holds a run executing in one of these slots, as stored on its
    /// row: a replica's id, or none for one process alone.
    holder: Option<Arc<str>>,
}

#[derive(Default)]
struct Tally {
    /// Runs waiting for a slot here (or being admitted).
    waiting: AtomicUsize,
    /// Runs executing in a slot.
    executing: AtomicUsize,
}

impl Slots {
    fn new(max_concurrent: usize, holder: Option<Arc<str>>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_concurrent)),
            tally: Arc::default(),
            holder,
        }
    }

    fn try_slot(&self) -> Option<Slot> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok()?;
        Some(self.holding(permit))
    }

    /// A slot once one is free; `None` once the slots are closed.
    async fn slot(&self) -> Option<Slot> {
        let permit = Arc::clone(&self.permits).acquire_owned().await.ok()?;
        Some(self.holding(permit))
    }

    fn holding(&self, permit: OwnedSemaphorePermit) -> Slot {
        Slot {
            _permit: permit,
            tally: Arc::clone(&self.tally),
            holder: self.holder.clone(),
            executing: false,
        }
    }

    fn turn(&self, place: Place) -> Turn {
        Turn {
            place,
            permits: Arc::clone(&self.permits),
            holder: self.holder.clone(),
        }
    }

    /// A place in the queue, and how many waited before it.
    fn place(&self) -> (Place, usize) {
        let before = self.tally.waiting.fetch_add(1, Ordering::AcqRel);
        let place = Place {
            tally: Arc::clone(&self.tally),
        };
        (place, before)
    }

    fn waiting(&self) -> usize {
        self.tally.waiting.load(Ordering::Acquire)
    }

    fn executing(&self) -> u64 {
        u64::try_from(self.tally.executing.load(Ordering::Relaxed)).unwrap_or(u64::MAX)
    }

    fn close(&self) {
        self.permits.close();
    }
}

/// A slot a run executes in; given back when dropped.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    tally: Arc<Tally>,
    holder: Option<Arc<str>>,
    executing: bool,
}

impl Slot {
    /// Who holds a run in this slot, as its row stores it (a replica's id;
    /// none for one process alone).
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }

    /// Counts the run as executing from now until the slot is dropped.
    pub fn executing(&mut self) {
        if !self.executing {
            self.executing = true;
            self.tally.executing.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.executing {
            self.tally.executing.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A run's place in the queue: counted as waiting until dropped.
pub struct Place {
    tally: Arc<Tally>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.tally.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A queued run's turn at a slot here.
pub struct Turn {
    place: Place,
    permits: Arc<Semaphore>,
    holder: Option<Arc<str>>,
}

impl Turn {
    /// Resolves to a slot once it is the run's turn; `None` once the queue
    /// is closed. Dropping it gives up the place.
    pub async fn wait(self) -> Option<Slot> {
        let permit = Arc::clone(&self.permits).acquire_owned().await.ok()?;
        Some(Slot {
            _permit: permit,
            tally: Arc::clone(&self.place.tally),
            holder: self.holder,
            executing: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn guards_give_back_what_they_count() {
        let slots = Slots::new(1, None);
        let mut first = slots.try_slot().expect("a free slot");
        first.executing();
        assert_eq!(slots.executing(), 1);
        assert!(slots.try_slot().is_none());
        let turn = slots.turn(slots.place().0);
        assert_eq!(slots.waiting(), 1);
        let waiting = tokio::spawn(turn.wait());
        drop(first);
        assert_eq!(slots.executing(), 0);
        let second = waiting.await.unwrap().expect("its turn");
        assert_eq!(slots.waiting(), 0, "the place went with the turn");
        drop(second);
        // A turn dropped while waiting gives its place back.
        let _held = slots.try_slot().unwrap();
        let turn = slots.turn(slots.place().0);
        let waiting = tokio::spawn(turn.wait());
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(slots.waiting(), 0);
        slots.close();
        let turn = slots.turn(slots.place().0);
        assert!(turn.wait().await.is_none(), "a closed queue gives no turn");
    }
}
