//! Several servers on one PostgreSQL database: this replica's lease, the
//! claims of queued runs, the takeover of a dead replica's runs, and the
//! notifications that carry news between replicas.
//!
//! - **Lease.** Each replica has a row in `replicas` whose `lease_until` its
//!   heartbeat moves forward, on the database's clock (the replicas' own
//!   clocks never matter). A running run's `owner` is the replica executing
//!   it.
//! - **Fence.** Every batch the writer commits first takes a key-share lock
//!   on its replica's row, and a claim does too: a replica whose row is gone
//!   was taken for dead, and writes nothing more (it stops; see
//!   [`Cluster::lost`]). The takeover deletes the row before it ends the
//!   runs, so a batch in flight commits first, and a batch after it finds no
//!   row. (The heartbeat's update of the lease does not wait for that lock.)
//!   A replica that could not renew its lease for five sixths of it gives
//!   it up of itself, before anyone may take it over, and writes nothing
//!   more under it. A session that stays idle in a transaction (a frozen
//!   process) is ended by PostgreSQL after half a lease, so it never holds
//!   a takeover back for long.
//! - **Membership.** A replica's row, and the id its runs are owned by, are
//!   one [`Membership`]. One that is lost stays lost: the replica stops its
//!   runs without writing, and then [`Cluster::rejoin`]s with a new id and
//!   a new lease (its old runs are taken over like any dead replica's,
//!   possibly by itself). It never exits for it.
//! - **Claims.** Queued runs belong to no replica: one with a free slot takes
//!   the oldest of the tenant served least recently (tenants in turn, each
//!   within its limits: see [`tenants`]) with `FOR UPDATE SKIP LOCKED`, so
//!   two never take the same (see [`claims`]).
//! - **Takeover.** Any replica deletes the rows of replicas whose lease ran
//!   out, then queues again every running run whose owner has no row, to
//!   resume (with a `run_resumed` event), or past its resumes ends it
//!   `interrupted` with its `run_end` (and its webhook's delivery, in the
//!   same transaction, for any replica to make: see [`super::outbox`]).
//! - **Notifications.** `LISTEN`/`NOTIFY`, sent inside the transaction that
//!   wrote what they announce (so they arrive only once it is committed):
//!   new events of runs ([`EVENTS`]), a run waiting to be claimed
//!   ([`QUEUED`]), a cancel for the replica executing a run ([`CANCEL`]),
//!   runs' changes of status ([`STATUSES`]). What a replica commits
//!   itself it publishes to its own [`Channels`] once committed. They are
//!   [`notify`]'s.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyConnection, AnyPool, Executor};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

mod claims;
mod notify;
mod tenants;

pub use claims::{Claimed, READ_RETRY_FIRST, READ_RETRY_MAX};
pub use notify::{CANCEL, EVENTS, Notice, QUEUED, STATUSES};
pub(super) use notify::{notify, notify_events, notify_statuses};
pub use tenants::ClaimLimits;

use super::rows;
use super::{Channels, ResumeReason, StatusChange, StoreError};
use crate::harness::Outcome;
use crate::run::{RunStatus, format_time};
use crate::sync::lock;

/// This replica, as the database knows it.
pub struct Cluster {
    pool: AnyPool,
    /// Where what it commits of runs' statuses is published here.
    channels: Arc<Channels>,
    url: String,
    lease: Duration,
    /// The membership it holds now (a lost one until it joined again).
    membership: Mutex<Arc<Membership>>,
    /// The ids of every membership this process held: its own news, which
    /// it published itself, are not heard again.
    ids: Mutex<Vec<Arc<str>>>,
    /// Fires when the server stops: it leaves for good.
    leaving: CancellationToken,
}

/// One membership of the database's replicas: a row of `replicas`, its
/// lease, and the id the runs it executes are owned by.
pub struct Membership {
    id: Arc<str>,
    lost: CancellationToken,
    /// Taken before its row was inserted: its lease runs from no earlier.
    since: std::time::Instant,
}

impl Membership {
    fn new() -> Self {
        Self {
            id: Arc::from(Uuid::now_v7().to_string()),
            lost: CancellationToken::new(),
            since: std::time::Instant::now(),
        }
    }

    /// When its lease began at the latest (before its row was inserted):
    /// what the first renewal's deadline counts from.
    pub fn since(&self) -> std::time::Instant {
        self.since
    }

    /// The replica's id under this membership.
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// Fires once the membership is lost: another replica took it for
    /// dead, or its lease could not be renewed in time. Nothing more is
    /// written under it, and its runs are stopped.
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// Fires [`Self::lost`], saying why.
    pub fn lose(&self, why: &str) {
        if !self.lost.is_cancelled() {
            tracing::error!(
                replica = %self.id,
                "{why}: this replica stops its runs and joins again"
            );
            self.lost.cancel();
        }
    }
}

/// The connections a replica keeps for its heartbeat, claims and sweeps,
/// apart from the read pool, so that reads under load never delay a
/// renewal.
const CLUSTER_CONNECTIONS: u32 = 3;

/// The lock a server of a version before replicas holds on its database:
/// while one does, a replica refuses to start (its runs have no owner, and
/// it has no fence).
const SINGLE_SERVER_LOCK: i64 = 0x6167_656e_7472_756e;

impl Cluster {
    /// Registers a new replica on the database at `url`, with a fresh lease.
    /// Its sessions' statements, and its attempts to connect, are bounded by
    /// `deadline` (see [`super::connect::bound_statements`]).
    pub(super) async fn join(
        url: &str,
        lease: Duration,
        deadline: Duration,
        channels: Arc<Channels>,
    ) -> Result<Self, StoreError> {
        let pool = AnyPoolOptions::new()
            .max_connections(CLUSTER_CONNECTIONS)
            .acquire_timeout((lease / 3).min(deadline))
            .after_connect(move |connection, _| {
                Box::pin(async move {
                    guard_session(connection, lease).await?;
                    super::connect::bound_statements(connection, deadline).await
                })
            })
            .connect(url)
            .await?;
        // The lock and its release on one connection: a session's lock is
        // released only by that session.
        let mut probe = pool.acquire().await?;
        let alone: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock_shared($1)")
            .bind(SINGLE_SERVER_LOCK)
            .fetch_one(&mut *probe)
            .await?;
        if !alone {
            return Err(StoreError::Database(sqlx::Error::Configuration(
                "a server of an earlier version, which cannot share its database, serves this \
                 database: stop it before starting replicas"
                    .into(),
            )));
        }
        sqlx::query("SELECT pg_advisory_unlock_shared($1)")
            .bind(SINGLE_SERVER_LOCK)
            .execute(&mut *probe)
            .await?;
        drop(probe);
        let membership = Arc::new(Membership::new());
        register(&pool, &membership, lease).await?;
        Ok(Self {
            pool,
            channels,
            url: url.to_owned(),
            lease,
            ids: Mutex::new(vec![Arc::clone(&membership.id)]),
            membership: Mutex::new(membership),
            leaving: CancellationToken::new(),
        })
    }

    /// Joins again after the membership held was lost: a new row, a new
    /// id, a fresh lease. Called once nothing more is written under the
    /// old one. Refused once the server stops.
    pub async fn rejoin(&self) -> Result<Arc<Membership>, StoreError> {
        if self.leaving.is_cancelled() {
            return Err(StoreError::Fenced);
        }
        let membership = Arc::new(Membership::new());
        register(&self.pool, &membership, self.lease).await?;
        lock(&self.ids).push(Arc::clone(&membership.id));
        *lock(&self.membership) = Arc::clone(&membership);
        Ok(membership)
    }

    /// The membership this replica holds now.
    pub fn membership(&self) -> Arc<Membership> {
        Arc::clone(&lock(&self.membership))
    }

    /// This replica's id now.
    pub fn id(&self) -> Arc<str> {
        Arc::clone(&lock(&self.membership).id)
    }

    /// Whether `id` is one this process held.
    fn is_ours(&self, id: &str) -> bool {
        lock(&self.ids).iter().any(|ours| &**ours == id)
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Fires once the server stops: the replica's heartbeat, sweeps and
    /// listening end.
    pub fn leaving(&self) -> &CancellationToken {
        &self.leaving
    }

    /// Renews `membership`'s lease. One that is gone is lost.
    pub async fn renew(&self, membership: &Membership) -> Result<(), StoreError> {
        let renewed = sqlx::query(
            "UPDATE replicas SET lease_until = now() + make_interval(secs => $2) WHERE id = $1",
        )
        .bind(&*membership.id)
        .bind(self.lease.as_secs_f64())
        .execute(&self.pool)
        .await?;
        if renewed.rows_affected() == 0 {
            membership.lose("another replica took this one's lease for dead");
            return Err(StoreError::Fenced);
        }
        Ok(())
    }

    /// The runs stored `running` and owned by `membership`, and whether a
    /// client asked (on another replica) for each one's cancel.
    pub async fn owned(&self, membership: &Membership) -> Result<Vec<(Uuid, bool)>, StoreError> {
        let rows: Vec<(String, bool)> = sqlx::query_as(
            "SELECT id, cancel_requested FROM runs WHERE owner = $1 AND status = 'running'",
        )
        .bind(&*membership.id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, cancel)| Some((rows::parse_uuid(&id).ok()?, cancel)))
            .collect())
    }

    /// Runs a client cancelled while they were changing hands (pausing,
    /// being answered), left paused or queued: each is to be ended.
    pub async fn cancels_left(&self) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM runs WHERE cancel_requested \
             AND status IN ('queued', 'requires_action') LIMIT 100",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(ids
            .iter()
            .filter_map(|id| rows::parse_uuid(id).ok())
            .collect())
    }

    /// Ends `interrupted` runs stored running and owned by `membership`
    /// that do not execute here (a claim whose answer was lost, a task that
    /// ended without its end stored). Returns those it ended.
    pub async fn interrupt_owned(
        &self,
        membership: &Membership,
        run_ids: &[Uuid],
        at: DateTime<Utc>,
    ) -> Result<Vec<Uuid>, StoreError> {
        let mut tx = self.pool.begin().await?;
        if !hold(&mut tx, membership).await? {
            return Err(StoreError::Fenced);
        }
        let mut ended = Vec::new();
        for run_id in run_ids {
            let row = sqlx::query(rows::SELECT_OWNED_RUNNING)
                .bind(run_id.to_string())
                .bind(&*membership.id)
                .fetch_optional(&mut *tx)
                .await?;
            if let Some(row) = row {
                ended.push(self.interrupt(&mut tx, &row, at).await?);
            }
        }
        self.commit_ended(tx, ended, &membership.id).await
    }

    /// Ends the run of `row` `interrupted` (see [`super::interrupt`]): its
    /// change of status.
    async fn interrupt(
        &self,
        connection: &mut AnyConnection,
        row: &sqlx::any::AnyRow,
        at: DateTime<Utc>,
    ) -> Result<StatusChange, StoreError> {
        let run = rows::run_from_row(row)?;
        super::interrupt(connection, &run, at).await?;
        let tenant = sqlx::Row::get(row, "tenant");
        Ok(change(
            run.id,
            tenant,
            RunStatus::Ended(Outcome::Interrupted),
            at,
        ))
    }

    /// Commits the end of the runs that `ended`, telling every replica
    /// (this one too) of them; their ids.
    async fn commit_ended(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Any>,
        ended: Vec<StatusChange>,
        from: &str,
    ) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<Uuid> = ended.iter().map(|change| change.run_id).collect();
        if !ids.is_empty() {
            notify_events(&mut tx, from, ids.iter().map(Uuid::to_string)).await?;
        }
        self.commit_statuses(tx, ended, from).await?;
        Ok(ids)
    }

    /// Commits `tx` with its `changes` of status, told to the other
    /// replicas with it (`from`: this one) and published here once it is
    /// committed; the webhooks of the ends among them are written with it.
    pub(super) async fn commit_statuses(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Any>,
        changes: Vec<StatusChange>,
        from: &str,
    ) -> Result<(), StoreError> {
        super::outbox::enqueue(&mut tx, &changes).await?;
        notify_statuses(&mut tx, from, &changes).await?;
        tx.commit().await?;
        self.channels.publish_statuses(changes);
        Ok(())
    }

    /// Takes over the replicas whose lease ran out: deletes their rows, then
    /// ends `interrupted` every running run no live replica owns (theirs,
    /// and any left by a server before replicas, or by a membership this
    /// replica lost). Returns those runs.
    pub async fn take_over(
        &self,
        membership: &Membership,
        at: DateTime<Utc>,
    ) -> Result<Vec<Uuid>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Never its own membership: a heartbeat of its own that came late
        // renews it. A row another transaction holds (a batch in flight,
        // another sweep) is passed over until the next sweep.
        let dead: Vec<String> = sqlx::query_scalar(
            "DELETE FROM replicas WHERE id IN (SELECT id FROM replicas \
             WHERE lease_until < now() AND id <> $1 FOR UPDATE SKIP LOCKED) RETURNING id",
        )
        .bind(&*membership.id)
        .fetch_all(&mut *tx)
        .await?;
        let orphans = sqlx::query(rows::SELECT_ORPHANED_RUNS)
            .fetch_all(&mut *tx)
            .await?;
        let mut ended = Vec::with_capacity(orphans.len());
        for row in &orphans {
            let run = rows::run_from_row(row)?;
            let tenant = sqlx::Row::get(row, "tenant");
            ended.push(super::rest(&mut tx, &run, tenant, ResumeReason::LeaseLost, at).await?);
        }
        if ended
            .iter()
            .any(|change| change.status == RunStatus::Queued)
        {
            notify(&mut tx, QUEUED, "").await?;
        }
        let ended = self.commit_ended(tx, ended, &membership.id).await?;
        for replica in &dead {
            tracing::warn!(%replica, "a replica's lease ran out; it is taken for dead");
        }
        for run_id in &ended {
            tracing::warn!(%run_id, "the run's replica is gone; the run is queued to resume, or interrupted past its resumes");
        }
        Ok(ended)
    }

    /// Leaves the database's replicas (the server stops): whatever this
    /// replica still owns is taken over by the next sweep.
    pub(super) async fn leave(&self) {
        self.leaving.cancel();
        let membership = self.membership();
        if membership.lost.is_cancelled() {
            return;
        }
        if let Err(error) = sqlx::query("DELETE FROM replicas WHERE id = $1")
            .bind(&*membership.id)
            .execute(&self.pool)
            .await
        {
            tracing::warn!(%error, "could not leave the replicas; the lease runs out instead");
        }
    }
}

pub(super) fn change(
    run_id: Uuid,
    tenant: String,
    status: RunStatus,
    at: DateTime<Utc>,
) -> StatusChange {
    StatusChange {
        run_id,
        tenant,
        status,
        at: format_time(&at),
    }
}

/// Inserts `membership`'s row, with a fresh lease.
async fn register(
    pool: &AnyPool,
    membership: &Membership,
    lease: Duration,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO replicas (id, lease_until) \
         VALUES ($1, now() + make_interval(secs => $2))",
    )
    .bind(&*membership.id)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await?;
    tracing::info!(
        replica = %membership.id,
        lease_ms = lease.as_millis() as u64,
        "joined the database's replicas"
    );
    Ok(())
}

/// Takes a share lock on `membership`'s row for the transaction: while it
/// is held, no takeover of it can begin. Whether it may act under it: not
/// once it is lost (should its row be gone, it is lost now).
pub(super) async fn hold(
    connection: &mut AnyConnection,
    membership: &Membership,
) -> Result<bool, StoreError> {
    if membership.lost.is_cancelled() {
        return Ok(false);
    }
    let held = hold_lease(connection, &membership.id).await?;
    if !held {
        membership.lose("another replica took this one's lease for dead");
    }
    Ok(held)
}

/// Sets what a replica's sessions must never outlast: a session idle in a
/// transaction for half a lease (its process frozen, its network gone) is
/// ended by PostgreSQL, and with it the locks that would hold a takeover
/// back.
pub(super) async fn guard_session(
    connection: &mut AnyConnection,
    lease: Duration,
) -> Result<(), sqlx::Error> {
    let idle = (lease / 2).as_millis().max(1);
    connection
        .execute(format!("SET idle_in_transaction_session_timeout = {idle}").as_str())
        .await?;
    Ok(())
}

/// [`hold_lease`] for the writer's transactions, which write in any case:
/// the transaction's id (`None`: no row), by which whether it committed can
/// be asked (`txid_status`) should the answer to its COMMIT be lost.
pub(in crate::store) async fn hold_lease_writing(
    connection: &mut AnyConnection,
    id: &str,
) -> Result<Option<i64>, StoreError> {
    let xid: Option<i64> =
        sqlx::query_scalar("SELECT txid_current() FROM replicas WHERE id = $1 FOR KEY SHARE")
            .bind(id)
            .fetch_optional(&mut *connection)
            .await?;
    Ok(xid)
}

/// Takes a key-share lock on replica `id`'s row for the transaction (which
/// a takeover's delete waits for, and the heartbeat's update does not);
/// whether it is there.
pub(super) async fn hold_lease(
    connection: &mut AnyConnection,
    id: &str,
) -> Result<bool, StoreError> {
    let held: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM replicas WHERE id = $1 FOR KEY SHARE")
            .bind(id)
            .fetch_optional(&mut *connection)
            .await?;
    Ok(held.is_some())
}
