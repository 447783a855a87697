//! The runner as one replica of several on a PostgreSQL database (see
//! [`crate::store::cluster`]): queued runs wait in the database, not here,
//! and a claimer takes them whenever this replica has a free slot; a
//! heartbeat renews the lease; a sweep takes over dead replicas' runs; the
//! other replicas' notifications wake what waits on them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chrono::Utc;
use uuid::Uuid;

use super::Runner;
use crate::run::RunSpec;
use crate::store::cluster::{Cluster, Notice};
use crate::store::{StoreError, Unfinished};

/// Longest a claimer with a free slot waits before it looks for queued runs
/// again without being told of one.
const CLAIM_POLL: Duration = Duration::from_secs(1);
/// Pause after a claim failed for a reason of storage's.
const CLAIM_RETRY: Duration = Duration::from_millis(200);

impl Runner {
    /// Starts this replica's share of the work of several: claims, the
    /// heartbeat, the sweep and the listening.
    pub(super) fn join_replicas(&self, cluster: &Arc<Cluster>) {
        tokio::spawn(claim(self.clone(), Arc::clone(cluster)));
        tokio::spawn(heartbeat(self.clone(), Arc::clone(cluster)));
        tokio::spawn(sweep(Arc::clone(cluster)));
        let runner = self.clone();
        let listening = Arc::clone(cluster);
        tokio::spawn(async move {
            let stop = listening.left().clone();
            listening.listen(stop, |notice| runner.heard(notice)).await;
        });
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
            Notice::Queued => self.shared.claims.notify_one(),
            Notice::Cancel(run) => self.cancel_here(run),
            Notice::Missed => {
                channels.wake_all();
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

    /// Starts a run this replica claimed, in the slot it claimed it with.
    fn start_claimed(&self, claimed: Unfinished, slot: tokio::sync::OwnedSemaphorePermit) {
        let Unfinished {
            run,
            tenant,
            model,
            answered_pause,
        } = claimed;
        tracing::debug!(run_id = %run.id, resumed = answered_pause, "claimed a queued run");
        let spec = RunSpec::of_run(&run, model);
        self.start(run, tenant, spec, Some(slot), answered_pause);
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

/// Renews the lease a third of it apart, and cancels the runs clients
/// cancelled elsewhere that the notification did not reach. A replica that
/// could not renew for a whole lease stops of itself: by then another may
/// take it for dead. Ends when the replica leaves.
async fn heartbeat(runner: Runner, cluster: Arc<Cluster>) {
    let lease = cluster.lease();
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep(lease / 3) => {}
            () = cluster.left().cancelled() => return,
        }
        let began = Instant::now();
        match cluster.heartbeat().await {
            Ok(beat) => {
                renewed = began;
                for run in beat.cancelled {
                    runner.cancel_here(run);
                }
            }
            Err(StoreError::Fenced) => return,
            Err(error) => {
                tracing::warn!(%error, "renewing this replica's lease failed");
                if renewed.elapsed() >= lease {
                    cluster.lose("its lease could not be renewed for lease_ms");
                    return;
                }
            }
        }
    }
}

/// Takes over the replicas whose lease ran out, a quarter of a lease apart:
/// a dead replica's runs end within `lease + lease / 4` of its last renewal.
async fn sweep(cluster: Arc<Cluster>) {
    let every = cluster.lease() / 4;
    loop {
        if let Err(error) = cluster.take_over(Utc::now()).await {
            tracing::warn!(%error, "taking over dead replicas failed");
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = cluster.left().cancelled() => return,
        }
    }
}
