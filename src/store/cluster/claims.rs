//! Claims: a replica with a free slot takes the next queued run (see
//! [`super::tenants::next_queued`]: the oldest due run of the tenant served
//! least recently, within its limits), and gives back one it will not
//! execute after all, at once or, when its stored state could not be read,
//! set aside for a while.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{ClaimLimits, Cluster, Membership, QUEUED, change, hold, notify, tenants};
use crate::harness::Outcome;
use crate::run::{RunStatus, format_time};
use crate::store::{StoreError, Unfinished, rows};

/// How long a run whose stored state could not be read waits in the queue
/// before a claim takes it again, after its first such failure; it doubles
/// with each failure in a row, up to [`READ_RETRY_MAX`].
pub const READ_RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest such wait.
pub const READ_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// A claimed run, and whether a client asked for its cancel meanwhile (it
/// then ends at once).
pub struct Claimed {
    pub run: Unfinished,
    pub cancel: bool,
}

impl Cluster {
    /// Takes the next queued run for `membership` (the oldest due of the
    /// tenant served least recently, within its `limits`: see
    /// [`tenants::next_queued`]): marks it `running`, owned by it, started
    /// at `at` (a resumed run keeps its first start). `None` when no run
    /// waits (or every waiting one is being claimed, or is its tenant's
    /// beyond its limit). A queued row that cannot be read ends `failed`,
    /// never in the way of the rest.
    pub async fn claim(
        &self,
        membership: &Membership,
        at: DateTime<Utc>,
        limits: &ClaimLimits<'_>,
    ) -> Result<Option<Claimed>, StoreError> {
        let mut tx = self.pool.begin().await?;
        if !hold(&mut tx, membership).await? {
            return Err(StoreError::Fenced);
        }
        // The unreadable runs it failed on the way, then the one it claimed.
        let mut changes = Vec::new();
        loop {
            let Some(row) = tenants::next_queued(&mut tx, limits, &format_time(&at)).await? else {
                if !changes.is_empty() {
                    self.commit_statuses(tx, changes, &membership.id).await?;
                }
                return Ok(None);
            };
            // Stamped now, after the tenant's turn is locked and its running
            // runs counted: a start stamped before that wait could precede
            // the end of the run whose slot it takes.
            let at = at.max(Utc::now());
            let id: String = sqlx::Row::get(&row, "id");
            let tenant: String = sqlx::Row::get(&row, "tenant");
            let mut unfinished = match rows::unfinished_from_row(&row) {
                Ok(unfinished) => unfinished,
                Err(error) => {
                    tracing::error!(run_id = %id, %error, "a queued run is unreadable; it fails");
                    sqlx::query(
                        "UPDATE runs SET status = 'failed', error = $1, finished_at = $2 \
                         WHERE id = $3",
                    )
                    .bind("The stored run is unreadable")
                    .bind(format_time(&at))
                    .bind(&id)
                    .execute(&mut *tx)
                    .await?;
                    if let Ok(run_id) = rows::parse_uuid(&id) {
                        changes.push(change(
                            run_id,
                            tenant,
                            RunStatus::Ended(Outcome::Failed),
                            at,
                        ));
                    }
                    continue;
                }
            };
            let cancel: bool = sqlx::query_scalar(
                "UPDATE runs SET status = 'running', owner = $1, \
                 started_at = COALESCE(started_at, $2) WHERE id = $3 RETURNING cancel_requested",
            )
            .bind(&*membership.id)
            .bind(format_time(&at))
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
            tenants::served(&mut tx, &tenant).await?;
            changes.push(change(unfinished.run.id, tenant, RunStatus::Running, at));
            self.commit_statuses(tx, changes, &membership.id).await?;
            let run = &mut unfinished.run;
            run.status = RunStatus::Running;
            run.started_at.get_or_insert(at);
            return Ok(Some(Claimed {
                run: unfinished,
                cancel,
            }));
        }
    }

    /// Gives back a run claimed (or inserted running) here that will not
    /// execute here after all: it is queued again, for any replica.
    pub async fn release(&self, run_id: Uuid) -> Result<(), StoreError> {
        self.requeue(
            run_id,
            "UPDATE runs SET status = 'queued', owner = NULL \
             WHERE id = $1 AND owner = $2 AND status = 'running' RETURNING tenant",
        )
        .await
    }

    /// Gives back a run claimed here whose stored state could not be read
    /// (the database failed the read): queued again, but passed by every
    /// claim for a while, so that the runs behind it go on; the wait
    /// doubles with each such failure in a row, from [`READ_RETRY_FIRST`]
    /// up to [`READ_RETRY_MAX`].
    pub async fn set_aside(&self, run_id: Uuid) -> Result<(), StoreError> {
        let first = READ_RETRY_FIRST.as_secs_f64();
        let max = READ_RETRY_MAX.as_secs_f64();
        let statement = format!(
            "UPDATE runs SET status = 'queued', owner = NULL, failed_reads = failed_reads + 1, \
             not_before = to_char((clock_timestamp() + LEAST({first} * power(2, failed_reads), \
             {max}) * interval '1 second') AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') \
             WHERE id = $1 AND owner = $2 AND status = 'running' RETURNING tenant"
        );
        self.requeue(run_id, &statement).await
    }

    /// Queues again the run `statement` (binding the run and this replica)
    /// gives back, and tells the others.
    async fn requeue(&self, run_id: Uuid, statement: &str) -> Result<(), StoreError> {
        let membership = self.membership();
        let mut tx = self.pool.begin().await?;
        if !hold(&mut tx, &membership).await? {
            return Err(StoreError::Fenced);
        }
        let released: Option<String> = sqlx::query_scalar(statement)
            .bind(run_id.to_string())
            .bind(&*membership.id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(tenant) = released else {
            tx.commit().await?;
            return Ok(());
        };
        notify(&mut tx, QUEUED, "").await?;
        let queued = change(run_id, tenant, RunStatus::Queued, Utc::now());
        self.commit_statuses(tx, vec![queued], &membership.id).await
    }
}
