//! Schedules in storage (SPEC section 23), read here; written through the
//! writer (see `writer::schedules`). Also the reads a busy thread needs: a
//! thread's newest live run, and the runs queued behind one that ended.

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use super::writer::schedules::Counted;
use super::writer::{Transition, Transitioned};
use super::{Store, StoreError, Unfinished, rows};
use crate::run::{Tenant, format_time};
use crate::schedule::{Overlap, Schedule, ThreadMode};

/// A `SELECT` of schedules, each with its newest run, the filter appended.
macro_rules! select_schedules {
    ($filter:literal) => {
        concat!(
            "SELECT s.id, s.tenant, s.name, s.cron, s.timezone, s.body, s.thread, s.overlap, ",
            "s.enabled, s.next_run_at, s.skipped_ticks, s.refused_ticks, s.created_at, ",
            "s.updated_at, (SELECT r.id FROM runs r WHERE r.schedule_id = s.id ",
            "ORDER BY r.id DESC LIMIT 1) AS last_run_id FROM schedules s ",
            $filter
        )
    };
}

const SELECT_SCHEDULE: &str = select_schedules!("WHERE s.tenant = $1 AND s.id = $2");
const SELECT_SCHEDULES_PAGE: &str =
    select_schedules!("WHERE s.tenant = $1 AND ($2 IS NULL OR s.id > $2) ORDER BY s.id LIMIT $3");
const SELECT_DUE_SCHEDULES: &str = select_schedules!(
    "WHERE s.enabled = 1 AND s.next_run_at <= $1 ORDER BY s.next_run_at LIMIT $2"
);

impl Store {
    pub async fn get_schedule(
        &self,
        tenant: &Tenant,
        id: Uuid,
    ) -> Result<Option<Schedule>, StoreError> {
        let row = self
            .read(async |connection| {
                sqlx::query(SELECT_SCHEDULE)
                    .bind(&tenant.0)
                    .bind(id.to_string())
                    .fetch_optional(connection)
                    .await
            })
            .await?;
        row.map(|row| schedule_from_row(&row)).transpose()
    }

    /// A tenant's schedules in the order they were made, after `cursor`.
    pub async fn list_schedules(
        &self,
        tenant: &Tenant,
        cursor: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Schedule>, StoreError> {
        let rows = self
            .read(async |connection| {
                sqlx::query(SELECT_SCHEDULES_PAGE)
                    .bind(&tenant.0)
                    .bind(cursor.map(|id| id.to_string()))
                    .bind(i64::from(limit))
                    .fetch_all(connection)
                    .await
            })
            .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    /// Enabled schedules whose next tick is at or before `now`, the most
    /// overdue first, with their tenants.
    pub async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<(Tenant, Schedule)>, StoreError> {
        let rows = self
            .read(async |connection| {
                sqlx::query(SELECT_DUE_SCHEDULES)
                    .bind(format_time(&now))
                    .bind(i64::from(limit))
                    .fetch_all(connection)
                    .await
            })
            .await?;
        rows.iter()
            .map(|row| Ok((Tenant(row.get("tenant")), schedule_from_row(row)?)))
            .collect()
    }

    /// The soonest next tick of any enabled schedule.
    pub async fn soonest_tick(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let soonest: Option<String> = self
            .read(async |connection| {
                sqlx::query_scalar("SELECT MIN(next_run_at) FROM schedules WHERE enabled = 1")
                    .fetch_one(connection)
                    .await
            })
            .await?;
        soonest
            .as_deref()
            .map(|text| {
                DateTime::parse_from_rfc3339(text)
                    .map(|time| time.with_timezone(&Utc))
                    .map_err(|_| StoreError::Corrupt("a schedule's next tick".into()))
            })
            .transpose()
    }

    /// How many schedules the tenant has.
    pub async fn count_schedules(&self, tenant: &Tenant) -> Result<u64, StoreError> {
        let count: i64 = self
            .read(async |connection| {
                sqlx::query_scalar("SELECT COUNT(*) FROM schedules WHERE tenant = $1")
                    .bind(&tenant.0)
                    .fetch_one(connection)
                    .await
            })
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// The newest follow-up queued behind the run `id` (waiting for it, to
    /// continue it), if any.
    pub async fn queued_behind(&self, id: Uuid) -> Result<Option<Uuid>, StoreError> {
        let found: Option<String> = self
            .read(async |connection| {
                sqlx::query_scalar(
                    "SELECT id FROM runs WHERE waiting_for = $1 AND previous_run_id = $1 \
                     AND status = 'queued' ORDER BY id DESC LIMIT 1",
                )
                .bind(id.to_string())
                .fetch_optional(connection)
                .await
            })
            .await?;
        found
            .as_deref()
            .map(|id| Uuid::parse_str(id).map_err(|_| StoreError::Corrupt("a run id".into())))
            .transpose()
    }

    /// Runs queued behind a run that has ended since (or was removed):
    /// to be let go, oldest first.
    pub async fn releasable(&self) -> Result<Vec<Unfinished>, StoreError> {
        let rows = self
            .read(async |connection| {
                sqlx::query(rows::SELECT_RELEASABLE)
                    .fetch_all(connection)
                    .await
            })
            .await?;
        rows.iter().map(rows::unfinished_from_row).collect()
    }
}

fn schedule_from_row(row: &AnyRow) -> Result<Schedule, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("schedule: {what}"));
    let uuid = |text: &str| Uuid::parse_str(text).map_err(|_| corrupt("an id"));
    let time = |text: &str| {
        DateTime::parse_from_rfc3339(text)
            .map(|time| time.with_timezone(&Utc))
            .map_err(|_| corrupt("a time"))
    };
    let count = |column: &str| u64::try_from(row.get::<i64, _>(column)).unwrap_or(0);
    let enabled = row.get::<i64, _>("enabled") != 0;
    Ok(Schedule {
        id: uuid(&row.get::<String, _>("id"))?,
        name: row.get("name"),
        cron: row.get("cron"),
        timezone: row.get("timezone"),
        run: serde_json::from_str(&row.get::<String, _>("body")).map_err(|_| corrupt("body"))?,
        thread: ThreadMode::parse(&row.get::<String, _>("thread"))
            .ok_or_else(|| corrupt("thread"))?,
        overlap: Overlap::parse(&row.get::<String, _>("overlap"))
            .ok_or_else(|| corrupt("overlap"))?,
        enabled,
        next_run_at: if enabled {
            Some(time(&row.get::<String, _>("next_run_at"))?)
        } else {
            None
        },
        last_run_id: row
            .get::<Option<String>, _>("last_run_id")
            .as_deref()
            .map(uuid)
            .transpose()?,
        skipped_ticks: count("skipped_ticks"),
        refused_ticks: count("refused_ticks"),
        created_at: time(&row.get::<String, _>("created_at"))?,
        updated_at: time(&row.get::<String, _>("updated_at"))?,
    })
}

impl Store {
    /// Stores a new schedule (`create`) or an edit of one, whose next tick
    /// is `next` (an edit without one keeps its own); `false` if there was
    /// none to edit.
    pub async fn save_schedule(
        &self,
        tenant: &Tenant,
        schedule: &Schedule,
        next: Option<DateTime<Utc>>,
        create: bool,
    ) -> Result<bool, StoreError> {
        let save = Transition::SaveSchedule {
            tenant: tenant.clone(),
            schedule: schedule.clone(),
            next: next.as_ref().map(format_time),
            create,
        };
        match self.writer().transition(save).await? {
            Transitioned::ScheduleSaved => Ok(true),
            Transitioned::NotFound => Ok(false),
            other => Err(StoreError::Corrupt(format!(
                "a schedule's save came to {other:?}"
            ))),
        }
    }

    /// Removes a schedule (its runs stay); `false` if there was none.
    pub async fn delete_schedule(&self, tenant: &Tenant, id: Uuid) -> Result<bool, StoreError> {
        let delete = Transition::DeleteSchedule {
            tenant: tenant.clone(),
            id,
        };
        Ok(matches!(
            self.writer().transition(delete).await?,
            Transitioned::Purged
        ))
    }

    /// Moves a schedule's next tick from `due` to `next`, counting the
    /// tick: `true` if this call did (no replica did first).
    pub async fn advance_schedule(
        &self,
        id: Uuid,
        due: DateTime<Utc>,
        next: DateTime<Utc>,
        counted: Counted,
    ) -> Result<bool, StoreError> {
        let advance = Transition::AdvanceSchedule {
            id,
            due: format_time(&due),
            next: format_time(&next),
            counted,
        };
        Ok(matches!(
            self.writer().transition(advance).await?,
            Transitioned::Advanced(true)
        ))
    }

    /// The run made for a schedule's tick, if one was.
    pub async fn run_of_tick(
        &self,
        schedule: Uuid,
        tick: DateTime<Utc>,
    ) -> Result<Option<Uuid>, StoreError> {
        let id: Option<String> = self
            .read(async |connection| {
                sqlx::query_scalar(
                    "SELECT id FROM runs WHERE schedule_id = $1 AND schedule_tick = $2",
                )
                .bind(schedule.to_string())
                .bind(format_time(&tick))
                .fetch_optional(connection)
                .await
            })
            .await?;
        id.as_deref()
            .map(|id| Uuid::parse_str(id).map_err(|_| StoreError::Corrupt("a run id".into())))
            .transpose()
    }
}
