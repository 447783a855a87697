//! The runner as one replica of several on a PostgreSQL database (see
//! [`crate::store::cluster`]): queued runs wait in the database, not here,
//! and a claimer takes them whenever this replica has a free slot; a
//! heartbeat renews the lease; a sweep takes over dead replicas' runs; the
//! other replicas' notifications wake what waits on them.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chrono::Utc;
use uuid::Uuid;

use super::Runner;
use crate::run::RunSpec;
use crate::store::cluster::{Claimed, Cluster, Notice};
use crate::store::{StoreError, Unfinished};

/// Longest a claimer with a free slot waits before it looks for queued runs
/// again without being told of one.
const CLAIM_POLL: Duration = Duration::from_secs(1);
/// Pause after a claim failed for a reason of storage's.
const CLAIM_RETRY: Duration = Duration::from_millis(200);

impl Runner {
    /// On PostgreSQL, starts this replica's share of the work of several:
    /// claims, the heartbeat, the sweep and the listening. Called once the
    /// server is bound (a replica that cannot serve claims nothing) and
    /// before it serves: it returns once the replica listens (or a lease
    /// went by), so that no stream it serves begins before news from the
    /// others can reach it.
    pub async fn join_replicas(&self) {
        let Some(cluster) = self.shared.store.cluster() else {
            return;
        };
        tokio::spawn(claim(self.clone(), Arc::clone(cluster)));
        tokio::spawn(heartbeat(self.clone(), Arc::clone(cluster)));
        tokio::spawn(sweep(self.clone(), Arc::clone(cluster)));
        let runner = self.clone();
        let listening = Arc::clone(cluster);
        let (ready, listens) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let stop = listening.left().clone();
            listening
                .listen(stop, ready, |notice| runner.heard(notice))
                .await;
        });
        if tokio::time::timeout(cluster.lease(), listens)
            .await
            .is_err()
        {
            tracing::warn!("not listening for the other replicas' news yet; serving anyway");
        }
    }

    /// Fires once this replica's lease is lost: the server must stop. Never
    /// fires on SQLite.
    pub fn lease_lost(&self) -> Option<tokio_util::sync::CancellationToken> {
        self.shared
            .store
            .cluster()
            .map(|cluster| cluster.lost().clone())
    }

    fn heard(&self, notice: Notice) {
        let channels = self.shared.store.live();
        match notice {
            Notice::Events(runs) => {
                for run in runs {
                    channels.wake(run);
                }
            }
            Notice::Statuses(changes) => channels.publish_heard_statuses(changes),
            Notice::Queued => self.shared.claims.notify_one(),
            Notice::Cancel(run) => self.cancel_here(run),
            Notice::Missed => {
                channels.wake_all();
                channels.statuses_missed();
                self.shared.claims.notify_one();
            }
        }
    }

    /// Cancels a run if it executes here (a client asked on another
    /// replica, which checked whose run it is).
    fn cancel_here(&self, id: Uuid) {
        let live = self
            .shared
            .live
            .lock()
            .ok()
            .and_then(|live| live.get(&id).cloned());
        if let Some(live) = live
            && live.stop.cancel()
        {
            tracing::info!(run_id = %id, "cancelled from another replica");
        }
    }

    /// Starts a run this replica claimed, in the slot it claimed it with;
    /// one whose cancel a client asked for meanwhile ends at once.
    fn start_claimed(&self, claimed: Claimed, slot: tokio::sync::OwnedSemaphorePermit) {
        let Unfinished {
            run,
            tenant,
            model,
            answered_pause,
        } = claimed.run;
        let id = run.id;
        tracing::debug!(run_id = %id, resumed = answered_pause, "claimed a queued run");
        let spec = RunSpec::of_run(&run, model);
        self.start(run, tenant, spec, Some(slot), answered_pause, false);
        if claimed.cancel {
            self.cancel_here(id);
        }
    }

    /// Whether a run is live here.
    fn is_live_here(&self, id: Uuid) -> bool {
        self.shared
            .live
            .lock()
            .is_ok_and(|live| live.contains_key(&id))
    }
}

/// Whenever a slot is free, claims the oldest queued run of the database and
/// starts it; sleeps while none waits. Ends when the server stops taking
/// runs (what is queued stays queued, for the other replicas).
async fn claim(runner: Runner, cluster: Arc<Cluster>) {
    let stop = runner.stop_queue.clone();
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&runner.slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
            () = stop.cancelled() => return,
        };
        // Shutdown waits for a claimed run's task, which it starts at once.
        let _accepting = runner.tasks.token();
        if stop.is_cancelled() {
            return;
        }
        runner.shared.claiming.store(true, Ordering::Release);
        let claimed = cluster.claim(Utc::now()).await;
        runner.shared.claiming.store(false, Ordering::Release);
        match claimed {
            Ok(Some(claimed)) => {
                runner.start_claimed(claimed, slot);
                continue;
            }
            Ok(None) => drop(slot),
            Err(StoreError::Fenced) => return,
            Err(error) => {
                drop(slot);
                tracing::warn!(%error, "claiming a queued run failed");
                tokio::select! {
                    () = tokio::time::sleep(CLAIM_RETRY) => {}
                    () = stop.cancelled() => return,
                }
                continue;
            }
        }
        drop(_accepting);
        tokio::select! {
            () = runner.shared.claims.notified() => {}
            () = tokio::time::sleep(CLAIM_POLL) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Renews the lease a third of it apart. A replica that could not renew
/// for five sixths of a lease stops of itself: by the end of it another may
/// take it for dead. Each beat also looks at the runs stored as executing
/// here: cancels asked for elsewhere that no notification brought are
/// carried out, and a run that does not execute here at two beats in a row
/// (a claim whose answer was lost) ends `interrupted`. Ends when the
/// replica leaves.
async fn heartbeat(runner: Runner, cluster: Arc<Cluster>) {
    let lease = cluster.lease();
    let mut renewed = Instant::now();
    let mut absent: HashSet<Uuid> = HashSet::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(lease / 3) => {}
            () = cluster.left().cancelled() => return,
        }
        let began = Instant::now();
        let deadline = renewed + lease * 5 / 6;
        let renewal = tokio::select! {
            renewal = cluster.renew() => Some(renewal),
            () = tokio::time::sleep_until(deadline.into()) => None,
        };
        match renewal {
            Some(Ok(())) => renewed = began,
            Some(Err(StoreError::Fenced)) => return,
            Some(Err(error)) => tracing::warn!(%error, "renewing this replica's lease failed"),
            None => {}
        }
        if renewed.elapsed() >= lease * 5 / 6 {
            cluster.lose("its lease could not be renewed in time");
            return;
        }
        // Past shutdown's grace, ends may still be on their way to storage
        // when their runs let go: the look waits for the next process.
        if renewed != began || runner.is_closing() {
            continue;
        }
        match cluster.owned().await {
            Ok(owned) => {
                let mut stray = Vec::new();
                let mut now_absent = HashSet::new();
                for (id, cancel) in owned {
                    if !runner.is_live_here(id) {
                        if absent.contains(&id) {
                            stray.push(id);
                        } else {
                            now_absent.insert(id);
                        }
                    } else if cancel {
                        runner.cancel_here(id);
                    }
                }
                absent = now_absent;
                if !stray.is_empty() {
                    match cluster.interrupt_owned(&stray, Utc::now()).await {
                        Ok(ended) => {
                            for id in ended {
                                tracing::warn!(run_id = %id, "a run stored as executing here did not; it is interrupted");
                                runner.shared.store.live().wake(id);
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
/// out too.
async fn sweep(runner: Runner, cluster: Arc<Cluster>) {
    let every = cluster.lease() / 4;
    loop {
        match cluster.take_over(Utc::now()).await {
            Ok(ended) => {
                for id in ended {
                    runner.shared.store.live().wake(id);
                }
            }
            Err(error) => tracing::warn!(%error, "taking over dead replicas failed"),
        }
        match cluster.queued().await {
            Ok(queued) => runner
                .shared
                .queued_in_database
                .store(queued, Ordering::Relaxed),
            Err(error) => tracing::warn!(%error, "counting the queued runs failed"),
        }
        match cluster.cancels_left().await {
            Ok(left) => {
                for id in left {
                    if let Err(error) = runner.cancel_stored(id).await {
                        tracing::warn!(run_id = %id, %error, "a cancel could not be stored");
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "reading cancels left over failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = cluster.left().cancelled() => return,
        }
    }
}
