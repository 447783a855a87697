//! The scheduler of one process alone (SQLite): queued runs wait here, each
//! for its turn at a slot: tenants in turn, first come first served within
//! a tenant, each within its `[tenants]` limits, a run that has not started
//! within its tenant's token quota too.

use std::sync::Arc;

use chrono::Utc;
use uuid::Uuid;

use super::{
    Admission, Cancelled, Counts, Holding, Host, Limits, Place, Queued, Refused, Scheduler, Slots,
};
use crate::config::TenantPolicy;
use crate::harness::Outcome;
use crate::metrics::Metrics;
use crate::run::{RunStatus, Tenant};
use crate::store::{Store, StoreError, Transition, Transitioned};

pub struct Local {
    store: Store,
    metrics: Arc<Metrics>,
    slots: Slots,
    max_queued: usize,
    limits: Arc<Limits>,
}

impl Local {
    pub fn new(
        store: Store,
        metrics: Arc<Metrics>,
        max_concurrent: usize,
        max_queued: usize,
        tenants: TenantPolicy,
    ) -> Self {
        let tenants = Arc::new(tenants);
        let limits = {
            let tenants = Arc::clone(&tenants);
            Arc::new(move |tenant: &str| tenants.of(tenant).max_concurrent)
        };
        Self {
            limits: Arc::new(Limits::new(Arc::clone(&tenants), store.clone(), None)),
            store,
            metrics,
            slots: Slots::new(max_concurrent, limits, Holding::alone()),
            max_queued,
        }
    }
}

#[async_trait::async_trait]
impl Scheduler for Local {
    async fn admit(&self, tenant: &Tenant) -> Result<Admission, Refused> {
        self.limits.check_quota(tenant).await?;
        let admission = match self.slots.try_slot(&tenant.0) {
            Some(slot) => Admission::Now(slot),
            None => {
                let (place, before, of_tenant) = self.slots.place(&tenant.0);
                if before >= self.max_queued
                    || of_tenant >= self.limits.policy().of(&tenant.0).max_queued
                {
                    return Err(Refused::QueueFull);
                }
                Admission::Queue(place)
            }
        };
        // Refused here, the slot or place goes back as it is dropped.
        self.limits.take_rate(tenant).await?;
        Ok(admission)
    }

    fn readmit(&self, tenant: &Tenant) -> Place {
        self.slots.place(&tenant.0).0
    }

    /// Its task waits here for its turn; a run that has not started is
    /// held to its tenant's quota when its turn comes.
    fn enqueue(&self, place: Place, fresh: bool) -> Queued {
        let quota = fresh.then(|| Arc::clone(&self.limits));
        Queued::Here(self.slots.turn(place, quota))
    }

    async fn slot_again(&self, tenant: &Tenant) -> Option<super::Slot> {
        self.slots.slot_of(&tenant.0).await
    }

    /// Nothing to give back: a run this process does not execute waits in
    /// storage for its next start.
    async fn release(&self, _run_id: Uuid) {}

    /// The queue is this process's: the run's task waits and reads again.
    async fn set_aside(&self, _run_id: Uuid) -> bool {
        false
    }

    /// Here a run that is not live is paused (or has ended): a paused one
    /// ends `aborted`.
    async fn cancel_elsewhere(
        &self,
        run_id: Uuid,
        why: Option<String>,
    ) -> Result<Cancelled, StoreError> {
        let transition = Transition::End {
            run_id,
            status: Outcome::Aborted,
            error: why.clone(),
            at: Utc::now(),
            due: false,
        };
        let mut outcome = self.store.writer().transition(transition).await?;
        // Queued and not live here: one waiting behind a live run of its
        // thread (any other queued run is live, waiting for its turn).
        if let Transitioned::NotPaused(RunStatus::Queued) = outcome {
            let cancel = Transition::CancelWaiting {
                run_id,
                at: Utc::now(),
                error: why,
            };
            outcome = self.store.writer().transition(cancel).await?;
        }
        Ok(match outcome {
            Transitioned::Ended { run, .. } => {
                self.metrics.finished(Outcome::Aborted);
                Cancelled::Ended(Box::new(run))
            }
            _ => Cancelled::Not,
        })
    }

    async fn join(&self, _host: Arc<dyn Host>) {}

    /// Nothing can take this process's runs from it.
    fn unready(&self) -> Option<String> {
        None
    }

    fn close(&self) {
        self.slots.close();
    }

    fn counts(&self) -> Counts {
        Counts {
            executing: self.slots.executing(),
            queued: u64::try_from(self.slots.waiting()).unwrap_or(u64::MAX),
        }
    }
}
