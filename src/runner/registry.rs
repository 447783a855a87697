//! The runs live in this process (queued here, or executing): what a
//! client's cancel, a replica's notice and the storage watch reach a run
//! through. A run is registered when it goes live and let go once its end
//! (or its pause) is stored.

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use crate::harness::{Stop, StopReason};
use crate::run::Tenant;
use crate::sync::lock;

/// A run that is queued here or running here. What it is as stored lives
/// in storage (and, while it is live, in the store's copy that its writer
/// keeps after each commit): nothing here is patched by hand.
pub struct LiveRun {
    pub id: Uuid,
    pub tenant: Tenant,
    /// Stops it, saying why: a client's cancel, the server stopping, storage
    /// refusing its records.
    pub(super) stop: Stop,
    /// Set once its start is stored: it is executing.
    pub(super) executing: AtomicBool,
}

/// The live runs, by id.
#[derive(Default)]
pub(super) struct LiveRuns {
    runs: Mutex<HashMap<Uuid, Arc<LiveRun>>>,
}

impl LiveRuns {
    /// Registers a run that goes live. One whose pause a client cancelled
    /// while it was letting go (after the answer that made it live again)
    /// inherits the cancel.
    pub(super) fn register(&self, live: &Arc<LiveRun>) {
        let paused = lock(&self.runs).insert(live.id, Arc::clone(live));
        if paused.is_some_and(|paused| matches!(paused.stop.reason(), Some(StopReason::Cancelled)))
        {
            live.stop.cancel();
        }
    }

    pub(super) fn get(&self, id: Uuid) -> Option<Arc<LiveRun>> {
        lock(&self.runs).get(&id).cloned()
    }

    pub(super) fn contains(&self, id: Uuid) -> bool {
        lock(&self.runs).contains_key(&id)
    }

    /// Every live run.
    pub(super) fn all(&self) -> Vec<Arc<LiveRun>> {
        lock(&self.runs).values().cloned().collect()
    }

    /// Cancels a live run of `tenant`, under the registry's lock (a pausing
    /// run's task decides under it whether it was cancelled, see
    /// [`Self::forget_unless_cancelled`]).
    pub(super) fn cancel(&self, tenant: &Tenant, id: Uuid) -> Option<Arc<LiveRun>> {
        let runs = lock(&self.runs);
        let live = runs.get(&id).filter(|live| &live.tenant == tenant)?;
        live.stop.cancel();
        Some(Arc::clone(live))
    }

    /// Cancels a live run whoever its tenant (the tenant was checked where
    /// the cancel was asked); whether it was live and not stopped yet.
    pub(super) fn cancel_any(&self, id: Uuid) -> bool {
        let runs = lock(&self.runs);
        runs.get(&id).is_some_and(|live| live.stop.cancel())
    }

    /// Lets go of a run that paused, unless a client cancelled it (checked
    /// under the lock that cancels take): that one stays registered until
    /// its pause is ended, so that an answer racing the cancel starts a run
    /// that inherits it. Whether it was cancelled.
    pub(super) fn forget_unless_cancelled(&self, run: &Arc<LiveRun>) -> bool {
        let mut runs = lock(&self.runs);
        if matches!(run.stop.reason(), Some(StopReason::Cancelled)) {
            return true;
        }
        Self::remove(&mut runs, run);
        false
    }

    /// Lets go of a live run, unless its id is live again as another one
    /// (a paused run answered and resumed before its first task let go).
    pub(super) fn forget(&self, run: &Arc<LiveRun>) {
        Self::remove(&mut lock(&self.runs), run);
    }

    fn remove(runs: &mut HashMap<Uuid, Arc<LiveRun>>, run: &Arc<LiveRun>) {
        if runs
            .get(&run.id)
            .is_some_and(|registered| Arc::ptr_eq(registered, run))
        {
            runs.remove(&run.id);
        }
    }
}
