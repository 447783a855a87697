//! The scheduler of one replica of several on a PostgreSQL database (see
//! [`crate::store::cluster`]): queued runs wait in the database, not here,
//! and a claimer takes them whenever this replica has a free slot; a
//! heartbeat renews the lease; a sweep takes over dead replicas' runs; the
//! other replicas' notifications wake what waits on them.
//!
//! The claimer, the heartbeat and the sweep work under one membership of
//! the database's replicas. Should it be lost (another replica took this
//! one for dead, or its lease could not be renewed in time), every run
//! executing here is stopped without writing anything more, and once the
//! last of their tasks is done and the writer has dealt with all they
//! handed it, the replica joins again under a new membership: it never
//! exits for it.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    Admission, Cancelled, Counts, Holding, Host, Limits, Place, Queued, Refused, Scheduler, Slot,
    Slots,
};
use crate::config::{Quota, TenantPolicy};
use crate::harness::Outcome;
use crate::metrics::Metrics;
use crate::run::Tenant;
use crate::store::cluster::{ClaimLimits, Claimed, Cluster, Membership, Notice};
use crate::store::{Store, StoreError, Transition, Transitioned};

/// Longest a claimer with a free slot waits before it looks for queued runs
/// again without being told of one.
const CLAIM_POLL: Duration = Duration::from_secs(1);
/// Pause after a claim failed for a reason of storage's.
const CLAIM_RETRY: Duration = Duration::from_millis(200);
/// How long an admission waits for the slot the claimer holds while it
/// looks.
const CLAIM_GRACE: Duration = Duration::from_millis(250);
/// Longest pause between two attempts to join again.
const REJOIN_RETRY_MAX: Duration = Duration::from_secs(2);
/// Why a replica that lost its membership takes no work until it joined
/// again.
const REJOINING: &str = "this replica lost its lease on the database and is joining again; try another replica, or again shortly";

pub struct Leased {
    shared: Arc<Shared>,
}

/// What the replica's own tasks share with the scheduler's handle.
struct Shared {
    store: Store,
    cluster: Arc<Cluster>,
    metrics: Arc<Metrics>,
    slots: Slots,
    max_queued: usize,
    /// Each tenant's limits: concurrency and queue limits set in its table
    /// hold for the whole database, as do its rate and quota.
    limits: Limits,
    /// Told when a run may wait to be claimed.
    claims: Notify,
    /// The claimer holds a slot while it looks for a queued run (an
    /// admission that finds no slot then waits for it a moment).
    claiming: AtomicBool,
    /// The database's waiting runs, as of the last sweep.
    queued: AtomicU64,
    /// Fires when the queue closes (shutdown): the claimer stops.
    closed: CancellationToken,
}

impl Leased {
    pub fn new(
        store: Store,
        cluster: Arc<Cluster>,
        metrics: Arc<Metrics>,
        max_concurrent: usize,
        max_queued: usize,
        tenants: TenantPolicy,
    ) -> Self {
        let holding = holding_of(&cluster.membership());
        Self {
            shared: Arc::new(Shared {
                limits: Limits::new(Arc::new(tenants), store.clone(), Some(Arc::clone(&cluster))),
                store,
                cluster,
                metrics,
                // A tenant's own concurrency limit is the database's (see
                // `admit` and the claim): this replica's slots take runs of
                // any tenant.
                slots: Slots::new(max_concurrent, Arc::new(|_: &str| usize::MAX), holding),
                max_queued,
                claims: Notify::new(),
                claiming: AtomicBool::new(false),
                queued: AtomicU64::new(0),
                closed: CancellationToken::new(),
            }),
        }
    }
}

#[async_trait::async_trait]
impl Scheduler for Leased {
    /// Within the tenant's quota, a slot free now (see
    /// [`Shared::start_now`]), else a place in the database's queue if it
    /// has room, then a run creation of the tenant's rate.
    async fn admit(&self, tenant: &Tenant) -> Result<Admission, Refused> {
        let shared = &self.shared;
        if let Some(why) = self.unready() {
            return Err(Refused::Unready(why));
        }
        // A slot held under a membership lost meanwhile is given back.
        let now = |slot: Slot| {
            if slot.revoked() {
                Err(Refused::Unready(REJOINING.to_owned()))
            } else {
                Ok(Admission::Now(slot))
            }
        };
        shared.limits.check_quota(tenant).await?;
        let admission = match shared.start_now(tenant).await {
            Some(slot) => now(slot)?,
            None => Admission::Queue(shared.place(tenant).await?),
        };
        // Refused here, the slot or place goes back as it is dropped.
        shared.limits.take_rate(tenant).await?;
        Ok(admission)
    }

    fn readmit(&self, tenant: &Tenant) -> Place {
        self.shared.slots.place(&tenant.0).0
    }

    /// One of this replica's slots (a tenant's limits are the claims'):
    /// the run is held here already.
    async fn slot_again(&self, tenant: &Tenant) -> Option<Slot> {
        self.shared.slots.slot_of(&tenant.0).await
    }

    /// Stored queued: whichever replica has a slot first claims it (the
    /// claim holds a run that has not started to its tenant's quota).
    fn enqueue(&self, place: Place, _fresh: bool) -> Queued {
        drop(place);
        self.shared.claims.notify_one();
        Queued::Elsewhere
    }

    async fn release(&self, run_id: Uuid) {
        if let Err(error) = self.shared.cluster.release(run_id).await {
            tracing::warn!(%run_id, %error, "the run could not be given back to the queue");
        }
    }

    async fn set_aside(&self, run_id: Uuid) -> bool {
        match self.shared.cluster.set_aside(run_id).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%run_id, %error, "the run could not be set aside in the queue");
                false
            }
        }
    }

    /// A paused or queued one ends `aborted`; a running one's replica is
    /// told to cancel it.
    async fn cancel_elsewhere(
        &self,
        run_id: Uuid,
        why: Option<String>,
    ) -> Result<Cancelled, StoreError> {
        self.shared.cancel_stored(run_id, why).await
    }

    /// Starts this replica's share of the work of several: claims, the
    /// heartbeat, the sweep and the listening. Returns once the replica
    /// listens (or a lease went by), so that no stream it serves begins
    /// before news from the others can reach it.
    async fn join(&self, host: Arc<dyn Host>) {
        let shared = &self.shared;
        tokio::spawn(membership(Arc::clone(shared), Arc::clone(&host)));
        let listening = Arc::clone(shared);
        let (ready, listens) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let stop = listening.cluster.leaving().clone();
            let cluster = Arc::clone(&listening.cluster);
            cluster
                .listen(stop, ready, |notice| listening.heard(notice, &*host))
                .await;
        });
        if tokio::time::timeout(shared.cluster.lease(), listens)
            .await
            .is_err()
        {
            tracing::warn!("not listening for the other replicas' news yet; serving anyway");
        }
    }

    fn unready(&self) -> Option<String> {
        let lost = self.shared.cluster.membership().lost().is_cancelled();
        lost.then(|| REJOINING.to_owned())
    }

    fn close(&self) {
        self.shared.closed.cancel();
        self.shared.slots.close();
    }

    fn counts(&self) -> Counts {
        Counts {
            executing: self.shared.slots.executing(),
            queued: self.shared.queued.load(Ordering::Relaxed),
        }
    }
}

impl Shared {
    /// A slot to start a run of `tenant` in now, if one is free; one the
    /// claimer holds while it looks is waited for a moment: it gives it
    /// back when none is queued, and a run that could start at once should
    /// not be queued, or refused for a full queue, for it. A tenant with a
    /// concurrency limit of its own never starts at once: its runs are
    /// claimed from the queue, where the limit holds across replicas.
    async fn start_now(&self, tenant: &Tenant) -> Option<Slot> {
        if self.limits.policy().set_max_concurrent(&tenant.0).is_some() {
            return None;
        }
        if let Some(slot) = self.slots.try_slot(&tenant.0) {
            return Some(slot);
        }
        if self.claiming.load(Ordering::Acquire)
            && let Ok(Some(slot)) = tokio::time::timeout(CLAIM_GRACE, self.slots.slot()).await
        {
            return Some(slot);
        }
        None
    }

    /// A place in the database's queue for a run of `tenant`, if it has
    /// room, and the tenant's own queue limit (those being admitted here
    /// count too).
    async fn place(&self, tenant: &Tenant) -> Result<Place, Refused> {
        // The database cannot count: the server's failure.
        let storage = |error: StoreError| Refused::Storage(error.to_string());
        let (place, before, of_tenant) = self.slots.place(&tenant.0);
        let queued = self.store.queued().await.map_err(storage)?;
        let queued = usize::try_from(queued)
            .unwrap_or(usize::MAX)
            .saturating_add(before);
        if queued >= self.max_queued {
            return Err(Refused::QueueFull);
        }
        if let Some(max) = self.limits.policy().set_max_queued(&tenant.0) {
            let live = self.store.tenant_live(tenant).await.map_err(storage)?;
            let queued = usize::try_from(live.queued)
                .unwrap_or(usize::MAX)
                .saturating_add(of_tenant);
            if queued >= max {
                return Err(Refused::QueueFull);
            }
        }
        Ok(place)
    }

    fn heard(&self, notice: Notice, host: &dyn Host) {
        let channels = self.store.live();
        match notice {
            Notice::Events(runs) => {
                for run in runs {
                    channels.wake(run);
                }
            }
            Notice::Statuses(changes) => {
                // A run ending elsewhere may free its tenant's last slot.
                if self.limits.policy().limits_concurrency() {
                    self.claims.notify_one();
                }
                channels.publish_heard_statuses(changes);
            }
            Notice::Queued => self.claims.notify_one(),
            Notice::Cancel(run) => {
                if host.cancel_live(run) {
                    tracing::info!(run_id = %run, "cancelled from another replica");
                }
            }
            Notice::Missed => {
                channels.wake_all();
                channels.statuses_missed();
                self.claims.notify_one();
            }
        }
    }

    async fn cancel_stored(
        &self,
        run_id: Uuid,
        why: Option<String>,
    ) -> Result<Cancelled, StoreError> {
        let transition = Transition::Cancel {
            run_id,
            at: Utc::now(),
            error: why,
        };
        Ok(match self.store.writer().transition(transition).await? {
            Transitioned::Ended { run, .. } => {
                self.metrics.finished(Outcome::Aborted);
                Cancelled::Ended(Box::new(run))
            }
            Transitioned::Forwarded { run } => Cancelled::Forwarded(Box::new(run)),
            _ => Cancelled::Not,
        })
    }

    /// Starts a run this replica claimed, in the slot it claimed it with.
    fn start_claimed(&self, host: &dyn Host, claimed: Claimed, slot: Slot) {
        tracing::debug!(
            run_id = %claimed.run.run.id,
            resumed = claimed.run.answered_pause,
            "claimed a queued run"
        );
        host.start_taken(claimed.run, slot, claimed.cancel);
    }
}

/// The holding runs claimed under `membership` are held under.
fn holding_of(membership: &Membership) -> Holding {
    Holding::new(Some(Arc::clone(membership.id())), membership.lost().clone())
}

/// Works under one membership after another: the claimer, the heartbeat
/// and the sweep of each, until the server stops. Once one is lost, stops
/// the runs executing here, waits until nothing more of theirs can be
/// written, and joins again.
async fn membership(shared: Arc<Shared>, host: Arc<dyn Host>) {
    let cluster = &shared.cluster;
    let leaving = cluster.leaving().clone();
    loop {
        let membership = cluster.membership();
        let holding = shared.slots.holding();
        tokio::spawn(claim(
            Arc::clone(&shared),
            Arc::clone(&host),
            Arc::clone(&membership),
        ));
        tokio::spawn(heartbeat(
            Arc::clone(&shared),
            Arc::clone(&host),
            Arc::clone(&membership),
        ));
        tokio::spawn(sweep(Arc::clone(&shared), Arc::clone(&membership)));
        tokio::select! {
            () = membership.lost().cancelled() => {}
            () = leaving.cancelled() => return,
        }
        let lost_at = Instant::now();
        // Its runs stop at once, writing nothing more (their hold is
        // revoked); whatever they handed the writer before is dropped by
        // it, the membership being lost.
        host.stop_all();
        holding.released().await;
        shared.store.writer().barrier().await;
        tracing::info!(
            replica = %membership.id(),
            stopping_ms = lost_at.elapsed().as_millis() as u64,
            "the runs of the lost membership are stopped"
        );
        let mut retry = CLAIM_RETRY;
        loop {
            if shared.closed.is_cancelled() {
                return;
            }
            match cluster.rejoin().await {
                Ok(membership) => {
                    shared.slots.hold_under(holding_of(&membership));
                    tracing::info!(
                        replica = %membership.id(),
                        rejoin_ms = lost_at.elapsed().as_millis() as u64,
                        "joined again after losing the lease"
                    );
                    break;
                }
                Err(error) => {
                    tracing::warn!(%error, "joining the database's replicas again failed");
                    tokio::select! {
                        () = tokio::time::sleep(retry) => {}
                        () = leaving.cancelled() => return,
                    }
                    retry = (retry * 2).min(REJOIN_RETRY_MAX);
                }
            }
        }
    }
}

/// Whenever a slot is free, claims the oldest queued run of the database and
/// starts it; sleeps while none waits. Ends when the queue closes (what is
/// queued stays queued, for the other replicas) or `membership` is lost.
async fn claim(shared: Arc<Shared>, host: Arc<dyn Host>, membership: Arc<Membership>) {
    let closed = shared.closed.clone();
    let lost = membership.lost().clone();
    loop {
        let slot = tokio::select! {
            slot = shared.slots.slot() => match slot {
                Some(slot) => slot,
                None => return,
            },
            () = closed.cancelled() => return,
            () = lost.cancelled() => return,
        };
        // Shutdown waits for a claimed run's task, which it starts at once.
        let Some(_accepting) = host.hold() else {
            return;
        };
        if closed.is_cancelled() || lost.is_cancelled() {
            return;
        }
        shared.claiming.store(true, Ordering::Release);
        let policy = shared.limits.policy();
        let quotas = shared.limits.any_quota();
        if quotas {
            // The tokens of runs that just ended here are counted.
            shared.store.writer().barrier().await;
        }
        let limits = ClaimLimits {
            concurrency: &|tenant| policy.set_max_concurrent(tenant),
            quota: &|tenant| {
                if quotas {
                    policy.of(tenant).quota()
                } else {
                    Quota::default()
                }
            },
        };
        let claimed = shared.cluster.claim(&membership, Utc::now(), &limits).await;
        shared.claiming.store(false, Ordering::Release);
        match claimed {
            Ok(Some(claimed)) => {
                shared.start_claimed(&*host, claimed, slot);
                continue;
            }
            Ok(None) => drop(slot),
            Err(StoreError::Fenced) => return,
            Err(error) => {
                drop(slot);
                tracing::warn!(%error, "claiming a queued run failed");
                tokio::select! {
                    () = tokio::time::sleep(CLAIM_RETRY) => {}
                    () = closed.cancelled() => return,
                    () = lost.cancelled() => return,
                }
                continue;
            }
        }
        drop(_accepting);
        // A tenant at its own concurrency limit may have runs waiting that
        // no claim takes: one of its runs ending here lets them.
        let freed = async {
            if shared.limits.policy().limits_concurrency() {
                shared.slots.freed().await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = shared.claims.notified() => {}
            () = freed => {}
            () = tokio::time::sleep(CLAIM_POLL) => {}
            () = closed.cancelled() => return,
            () = lost.cancelled() => return,
        }
    }
}

/// Renews `membership`'s lease a third of it apart. One that could not be
/// renewed for five sixths of a lease is given up (lost): by the end of it
/// another replica may take it for dead. Each beat also looks at the runs
/// stored as executing under it: cancels asked for elsewhere that no
/// notification brought are carried out, and a run that does not execute
/// here at two beats in a row (a claim whose answer was lost) ends
/// `interrupted`. Ends when the membership is lost or the replica leaves.
async fn heartbeat(shared: Arc<Shared>, host: Arc<dyn Host>, membership: Arc<Membership>) {
    let cluster = &shared.cluster;
    let lease = cluster.lease();
    let lost = membership.lost().clone();
    let leaving = cluster.leaving().clone();
    let mut renewed = membership.since();
    let mut absent: HashSet<Uuid> = HashSet::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(lease / 3) => {}
            () = lost.cancelled() => return,
            () = leaving.cancelled() => return,
        }
        let began = Instant::now();
        let deadline = renewed + lease * 5 / 6;
        let renewal = tokio::select! {
            renewal = cluster.renew(&membership) => Some(renewal),
            () = tokio::time::sleep_until(deadline.into()) => None,
        };
        match renewal {
            Some(Ok(())) => renewed = began,
            Some(Err(StoreError::Fenced)) => return,
            Some(Err(error)) => tracing::warn!(%error, "renewing this replica's lease failed"),
            None => {}
        }
        if renewed.elapsed() >= lease * 5 / 6 {
            membership.lose("its lease could not be renewed in time");
            return;
        }
        // Past shutdown's grace, ends may still be on their way to storage
        // when their runs let go: the look waits for the next process.
        if renewed != began || shared.closed.is_cancelled() {
            continue;
        }
        match cluster.owned(&membership).await {
            Ok(owned) => {
                let mut stray = Vec::new();
                let mut now_absent = HashSet::new();
                for (id, cancel) in owned {
                    if !host.is_live(id) {
                        if absent.contains(&id) {
                            stray.push(id);
                        } else {
                            now_absent.insert(id);
                        }
                    } else if cancel && host.cancel_live(id) {
                        tracing::info!(run_id = %id, "cancelled from another replica");
                    }
                }
                absent = now_absent;
                if !stray.is_empty() {
                    match cluster
                        .interrupt_owned(&membership, &stray, Utc::now())
                        .await
                    {
                        Ok(ended) => {
                            for id in ended {
                                tracing::warn!(run_id = %id, "a run stored as executing here did not; it is interrupted");
                                shared.store.live().wake(id);
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "ending runs that do not execute here failed")
                        }
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "reading the runs stored as executing here failed")
            }
        }
    }
}

/// Takes over the replicas whose lease ran out, a quarter of a lease apart:
/// a dead replica's runs end within `lease + lease / 4` of its last renewal.
/// Whoever waits here on those runs is woken. Cancels that fell between two
/// hands (a run pausing or being answered as it was cancelled) are carried
/// out too. Ends when `membership` is lost or the replica leaves.
async fn sweep(shared: Arc<Shared>, membership: Arc<Membership>) {
    let cluster = &shared.cluster;
    let every = cluster.lease() / 4;
    let lost = membership.lost().clone();
    let leaving = cluster.leaving().clone();
    loop {
        match cluster.take_over(&membership, Utc::now()).await {
            Ok(ended) => {
                for id in ended {
                    shared.store.live().wake(id);
                }
            }
            Err(error) => tracing::warn!(%error, "taking over dead replicas failed"),
        }
        match shared.store.queued().await {
            Ok(queued) => shared.queued.store(queued, Ordering::Relaxed),
            Err(error) => tracing::warn!(%error, "counting the queued runs failed"),
        }
        match cluster.cancels_left().await {
            Ok(left) => {
                for id in left {
                    if let Err(error) = shared.cancel_stored(id, None).await {
                        tracing::warn!(run_id = %id, %error, "a cancel could not be stored");
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "reading cancels left over failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = lost.cancelled() => return,
            () = leaving.cancelled() => return,
        }
    }
}
