//! The slots runs execute in, and the guards that count them: a [`Place`]
//! counts a run waiting, a [`Slot`] a run holding a slot, until dropped.
//! A slot is held under a [`Holding`]: who the runs in it are stored as
//! held by, and whether that hold was revoked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

use super::Refused;
use super::gate::{Gate, Limits as Concurrency, Permit, Who};
use super::limits::Limits;
use crate::run::Tenant;
use crate::sync::lock;

/// Who holds the runs executing in a process's slots, as their rows store
/// it (a replica's id under one membership of the database's replicas;
/// none for one process alone), whether that hold was revoked (the
/// membership was lost), and the slots and runs' tasks held under it.
#[derive(Clone)]
pub(super) struct Holding {
    id: Option<Arc<str>>,
    revoked: CancellationToken,
    tasks: TaskTracker,
}

impl Holding {
    /// One process alone: never revoked.
    pub(super) fn alone() -> Self {
        Self::new(None, CancellationToken::new())
    }

    pub(super) fn new(id: Option<Arc<str>>, revoked: CancellationToken) -> Self {
        Self {
            id,
            revoked,
            tasks: TaskTracker::new(),
        }
    }

    /// Resolves once no slot and no run's task is held under this holding
    /// any more.
    pub(super) async fn released(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    fn hold(&self) -> Hold {
        Hold {
            id: self.id.clone(),
            revoked: self.revoked.clone(),
            _task: self.tasks.token(),
        }
    }
}

/// A run's share of its slot's [`Holding`], which its task keeps until it
/// ends (whatever it writes after its slot is given back is still written
/// under it).
#[derive(Clone)]
pub struct Hold {
    id: Option<Arc<str>>,
    revoked: CancellationToken,
    _task: TaskTrackerToken,
}

impl Hold {
    /// Who holds the run, as its row stores it (a replica's id; none for
    /// one process alone).
    pub fn holder(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// Whether the hold was revoked: the run is another's to take over,
    /// and nothing more of it may be written here.
    pub fn revoked(&self) -> bool {
        self.revoked.is_cancelled()
    }
}

/// The slots (a [`Gate`]: tenants in turn, first come first served within
/// one) and what is counted of them. Shared by both schedulers.
pub(super) struct Slots {
    gate: Arc<Gate>,
    tally: Arc<Tally>,
    /// The holding new slots are held under.
    holding: Mutex<Holding>,
}

#[derive(Default)]
struct Tally {
    /// Runs waiting for a slot here (or being admitted).
    waiting: AtomicUsize,
    /// Runs executing in a slot.
    executing: AtomicUsize,
    /// Runs waiting, by tenant.
    by_tenant: Mutex<HashMap<Arc<str>, usize>>,
    /// Told when a run stops executing in a slot.
    freed: tokio::sync::Notify,
}

impl Slots {
    /// `max_concurrent` slots, each tenant's share of them within
    /// `limits`.
    pub(super) fn new(max_concurrent: usize, limits: Concurrency, holding: Holding) -> Self {
        Self {
            gate: Gate::new(max_concurrent, limits),
            tally: Arc::default(),
            holding: Mutex::new(holding),
        }
    }

    /// The holding new slots are held under.
    pub(super) fn holding(&self) -> Holding {
        lock(&self.holding).clone()
    }

    /// Holds new slots under `holding` from now on.
    pub(super) fn hold_under(&self, holding: Holding) {
        *lock(&self.holding) = holding;
    }

    /// A slot at once for a run of `tenant`, if one is free for it.
    pub(super) fn try_slot(&self, tenant: &str) -> Option<Slot> {
        let permit = self.gate.try_acquire(&Some(Arc::from(tenant)))?;
        Some(self.in_slot(permit))
    }

    /// A slot for a run of no tenant yet (one to be claimed) once its turn
    /// comes; `None` once the slots are closed.
    pub(super) async fn slot(&self) -> Option<Slot> {
        let permit = self.gate.acquire(None).await?;
        Some(self.in_slot(permit))
    }

    /// A slot for a run of `tenant` executing here already, once its
    /// tenant's turn comes; `None` once the slots are closed.
    pub(super) async fn slot_of(&self, tenant: &str) -> Option<Slot> {
        let permit = self.gate.acquire(Some(Arc::from(tenant))).await?;
        Some(self.in_slot(permit))
    }

    fn in_slot(&self, permit: Permit) -> Slot {
        Slot {
            _permit: permit,
            tally: Arc::clone(&self.tally),
            hold: self.holding().hold(),
            executing: false,
        }
    }

    /// The turn of the run at `place`; with `quota`, held to its tenant's
    /// token quota when its turn comes (see [`Turn::wait`]).
    pub(super) fn turn(&self, place: Place, quota: Option<Arc<Limits>>) -> Turn {
        Turn {
            place,
            gate: Arc::clone(&self.gate),
            holding: self.holding(),
            quota,
        }
    }

    /// A place in the queue for a run of `tenant`, and how many waited
    /// before it: in all, and of its tenant.
    pub(super) fn place(&self, tenant: &str) -> (Place, usize, usize) {
        let tenant: Arc<str> = Arc::from(tenant);
        let before = self.tally.waiting.fetch_add(1, Ordering::AcqRel);
        let mut by_tenant = lock(&self.tally.by_tenant);
        let count = by_tenant.entry(Arc::clone(&tenant)).or_default();
        let of_tenant = *count;
        *count += 1;
        drop(by_tenant);
        let place = Place {
            tally: Arc::clone(&self.tally),
            tenant,
        };
        (place, before, of_tenant)
    }

    pub(super) fn waiting(&self) -> usize {
        self.tally.waiting.load(Ordering::Acquire)
    }

    pub(super) fn executing(&self) -> u64 {
        u64::try_from(self.tally.executing.load(Ordering::Relaxed)).unwrap_or(u64::MAX)
    }

    pub(super) fn close(&self) {
        self.gate.close();
    }

    /// Resolves once a run stopped executing in a slot here (at once if
    /// one did since the last call).
    pub(super) async fn freed(&self) {
        self.tally.freed.notified().await;
    }
}

/// A slot a run executes in; given back when dropped.
pub struct Slot {
    _permit: Permit,
    tally: Arc<Tally>,
    hold: Hold,
    executing: bool,
}

impl Slot {
    /// Who holds a run in this slot, as its row stores it (a replica's id;
    /// none for one process alone).
    pub fn holder(&self) -> Option<&str> {
        self.hold.holder()
    }

    /// Whether the slot's hold was revoked (see [`Hold::revoked`]).
    pub fn revoked(&self) -> bool {
        self.hold.revoked()
    }

    /// The run's share of the slot's holding, for its task to keep after
    /// the slot is given back.
    pub fn hold(&self) -> Hold {
        Hold {
            id: self.hold.id.clone(),
            revoked: self.hold.revoked.clone(),
            _task: self.hold._task.clone(),
        }
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
            self.tally.freed.notify_one();
        }
    }
}

/// A run's place in the queue: counted as waiting (in all, and of its
/// tenant) until dropped.
pub struct Place {
    tally: Arc<Tally>,
    tenant: Arc<str>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.tally.waiting.fetch_sub(1, Ordering::AcqRel);
        let mut by_tenant = lock(&self.tally.by_tenant);
        if let Some(count) = by_tenant.get_mut(&self.tenant) {
            *count -= 1;
            if *count == 0 {
                by_tenant.remove(&self.tenant);
            }
        }
    }
}

/// A queued run's turn at a slot here.
pub struct Turn {
    place: Place,
    gate: Arc<Gate>,
    holding: Holding,
    /// The limits whose token quota its tenant is held to when its turn
    /// comes: a run that has not started (a quota keeps new work waiting,
    /// and never breaks a run in the middle).
    quota: Option<Arc<Limits>>,
}

impl Turn {
    /// Resolves to a slot once it is the run's turn (its tenant's, and its
    /// own within its tenant's); `None` once the queue is closed. Dropping
    /// it gives up the place.
    ///
    /// Held to its tenant's quota, a run whose tenant spent it gives its
    /// turn back: the tenant is passed over until its window frees (its
    /// other runs wait with it, the other tenants' go on), and the run
    /// waits first in its tenant's line.
    pub async fn wait(self) -> Option<Slot> {
        let who: Who = Some(Arc::clone(&self.place.tenant));
        let mut again = false;
        loop {
            let permit = if again {
                self.gate.acquire_first(who.clone()).await?
            } else {
                self.gate.acquire(who.clone()).await?
            };
            if let Some(limits) = &self.quota {
                let tenant = Tenant(self.place.tenant.to_string());
                match limits.check_quota_at_turn(&tenant).await {
                    Ok(()) => {}
                    Err(Refused::QuotaExceeded { retry_after, .. }) => {
                        tracing::info!(
                            tenant = %tenant.0,
                            retry_after_s = retry_after.as_secs(),
                            "the tenant's token quota is spent: its queued runs wait"
                        );
                        self.gate
                            .hold_out(&who, tokio::time::Instant::now() + retry_after);
                        drop(permit);
                        again = true;
                        continue;
                    }
                    // The quota cannot be read (the database's failure):
                    // the run was admitted under it, and starts.
                    Err(error) => {
                        tracing::warn!(%error, "the tenant's quota could not be checked");
                    }
                }
            }
            return Some(Slot {
                _permit: permit,
                tally: Arc::clone(&self.place.tally),
                hold: self.holding.hold(),
                executing: false,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unlimited() -> Concurrency {
        Arc::new(|_: &str| usize::MAX)
    }

    #[tokio::test]
    async fn guards_give_back_what_they_count() {
        let slots = Slots::new(1, unlimited(), Holding::alone());
        let mut first = slots.try_slot("t").expect("a free slot");
        first.executing();
        assert_eq!(slots.executing(), 1);
        assert!(slots.try_slot("t").is_none());
        let turn = slots.turn(slots.place("t").0, None);
        assert_eq!(slots.waiting(), 1);
        let waiting = tokio::spawn(turn.wait());
        drop(first);
        assert_eq!(slots.executing(), 0);
        let second = waiting.await.unwrap().expect("its turn");
        assert_eq!(slots.waiting(), 0, "the place went with the turn");
        drop(second);
        // A turn dropped while waiting gives its place back.
        let _held = slots.try_slot("t").unwrap();
        let turn = slots.turn(slots.place("t").0, None);
        let waiting = tokio::spawn(turn.wait());
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(slots.waiting(), 0);
        slots.close();
        let turn = slots.turn(slots.place("t").0, None);
        assert!(turn.wait().await.is_none(), "a closed queue gives no turn");
    }

    #[tokio::test]
    async fn a_holding_is_released_once_its_slots_and_holds_are_gone() {
        let revoked = CancellationToken::new();
        let first = Holding::new(Some(Arc::from("first")), revoked.clone());
        let slots = Slots::new(2, unlimited(), first.clone());
        let slot = slots.try_slot("t").unwrap();
        assert_eq!(slot.holder(), Some("first"));
        let hold = slot.hold();
        slots.hold_under(Holding::alone());
        let other = slots.try_slot("t").unwrap();
        assert_eq!(
            other.holder(),
            None,
            "new slots are held under the new holding"
        );
        revoked.cancel();
        assert!(slot.revoked() && hold.revoked() && !other.revoked());
        let released = tokio::spawn(async move { first.released().await });
        drop(slot);
        tokio::task::yield_now().await;
        assert!(!released.is_finished(), "a task still keeps its hold");
        drop(hold);
        released.await.unwrap();
    }
}
