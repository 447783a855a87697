//! The webhooks' outbox: each end or pause of a run that has a webhook is a
//! row of `webhook_deliveries`, written in the transaction that commits the
//! change it tells of ([`enqueue`]: the writer's batches and transitions,
//! the recovery at start, a replica's claims and takeovers), and removed
//! once it is delivered or given up ([`super::Writer::delivered`]). Whatever
//! a process had not delivered when it stopped, however it stopped, is
//! there for the next one to deliver.
//!
//! On PostgreSQL any replica may deliver a row: it takes due rows with a
//! claim that runs out ([`Store::take_deliveries`]), under `FOR UPDATE SKIP
//! LOCKED`, so that one replica at a time delivers a row, and another takes
//! it over once the claim has run out (its replica died in the middle). A
//! SQLite database has one server, which knows what it is delivering.
//!
//! A delivery is therefore made at least once: a process that dies between
//! a receiver's answer and the row's removal delivers it again. Receivers
//! deduplicate by the row's id, its `webhook-id`, which is the same on every
//! attempt.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use sqlx::AnyConnection;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::writer::{Placeholders, chunks, values_statement};
use super::{StatusChange, Store, StoreError, rows};
use crate::run::{RunStatus, format_time};

/// A webhook's delivery taken from the outbox.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Its `webhook-id`.
    pub id: String,
    /// The change it tells of.
    pub change: StatusChange,
    /// When it was written: it is given up `retry_for_ms` after this.
    pub created_at: DateTime<Utc>,
    /// Attempts that failed so far.
    pub attempts: u32,
}

/// A row of the outbox that cannot be read: its id, and why.
#[derive(Debug, Clone)]
pub struct Unreadable {
    pub id: String,
    pub why: String,
}

/// Whether a change of status is posted to its run's webhook: ends and
/// pauses are.
pub fn is_posted(status: RunStatus) -> bool {
    status.is_terminal() || status == RunStatus::RequiresAction
}

/// The `webhook-id` of the delivery of `change`: one for the message,
/// whatever its attempts, and made from the change alone, so that the same
/// change written twice is one delivery.
pub fn delivery_id(change: &StatusChange) -> String {
    let digest = Sha256::digest(format!("{}.{}", change.status, change.at));
    format!(
        "msg_{}_{}",
        change.run_id.simple(),
        hex::encode(&digest[..8])
    )
}

/// Writes the deliveries of `changes` (those that are posted, of runs that
/// have a webhook) into the outbox, due at once, in the caller's
/// transaction.
pub(super) async fn enqueue(
    connection: &mut AnyConnection,
    changes: &[StatusChange],
) -> Result<(), StoreError> {
    let posted: Vec<(String, &StatusChange)> = changes
        .iter()
        .filter(|change| is_posted(change.status))
        .map(|change| (delivery_id(change), change))
        .collect();
    if posted.is_empty() {
        return Ok(());
    }
    let now = format_time(&Utc::now());
    let placeholders = Placeholders::of(connection);
    for chunk in chunks(&posted) {
        // Only for runs that have a webhook, as the run's row says in this
        // transaction.
        let sql = values_statement(
            placeholders,
            "INSERT INTO webhook_deliveries (id, run_id, tenant, status, at, created_at, next_at) \
             SELECT v.column1, v.column2, v.column3, v.column4, v.column5, v.column6, v.column6 \
             FROM (",
            chunk.len(),
            6,
            ") AS v, runs WHERE runs.id = v.column2 AND runs.webhook IS NOT NULL \
             ON CONFLICT (id) DO NOTHING",
        );
        let mut query = sqlx::query(&sql);
        for (id, change) in chunk {
            query = query
                .bind(id.as_str())
                .bind(change.run_id.to_string())
                .bind(change.tenant.as_str())
                .bind(change.status.as_str())
                .bind(change.at.as_str())
                .bind(now.as_str());
        }
        query.execute(&mut *connection).await?;
    }
    Ok(())
}

/// Removes the deliveries `delivered` (delivered, or given up), and records
/// a failed attempt of those `retried`, each with when it may be tried next
/// (RFC 3339), claimed by no replica any more.
pub(super) async fn settle(
    connection: &mut AnyConnection,
    delivered: &[&str],
    retried: &[(&str, &str)],
) -> Result<(), StoreError> {
    let placeholders = Placeholders::of(connection);
    for chunk in chunks(delivered) {
        let sql = values_statement(
            placeholders,
            "DELETE FROM webhook_deliveries WHERE id IN (",
            chunk.len(),
            1,
            ")",
        );
        let mut query = sqlx::query(&sql);
        for id in chunk {
            query = query.bind(*id);
        }
        query.execute(&mut *connection).await?;
    }
    for chunk in chunks(retried) {
        let sql = values_statement(
            placeholders,
            "UPDATE webhook_deliveries SET attempts = attempts + 1, next_at = v.column2, \
             claimed_by = NULL, claimed_until = NULL FROM (",
            chunk.len(),
            2,
            ") AS v WHERE webhook_deliveries.id = v.column1",
        );
        let mut query = sqlx::query(&sql);
        for (id, next_at) in chunk {
            query = query.bind(*id).bind(*next_at);
        }
        query.execute(&mut *connection).await?;
    }
    Ok(())
}

const COLUMNS: &str = "id, run_id, tenant, status, at, created_at, attempts";

impl Store {
    /// Takes up to `limit` deliveries that are due, oldest first, leaving
    /// out those in `under_way` (this process's, being delivered). On
    /// PostgreSQL each is claimed for this replica for `claim`: no other
    /// replica takes it until the claim runs out or the delivery is settled.
    /// A row that cannot be read comes as [`Unreadable`].
    pub async fn take_deliveries(
        &self,
        limit: usize,
        under_way: &HashSet<String>,
        claim: Duration,
    ) -> Result<Vec<Result<Delivery, Unreadable>>, StoreError> {
        let now = format_time(&Utc::now());
        // Through the read pool: on PostgreSQL a claim is a write, but the
        // cluster's few connections keep the lease, and must not wait
        // behind deliveries.
        let rows = match &self.cluster {
            Some(cluster) => {
                sqlx::query(&format!(
                    "UPDATE webhook_deliveries SET claimed_by = $1, \
                     claimed_until = now() + make_interval(secs => $2) \
                     WHERE id IN (SELECT id FROM webhook_deliveries WHERE next_at <= $3 \
                     AND (claimed_until IS NULL OR claimed_until < now()) \
                     ORDER BY next_at LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING {COLUMNS}"
                ))
                .bind(cluster.id().to_string())
                .bind(claim.as_secs_f64())
                .bind(&now)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&self.read)
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {COLUMNS} FROM webhook_deliveries WHERE next_at <= $1 \
                     ORDER BY next_at LIMIT $2"
                ))
                .bind(&now)
                .bind(i64::try_from(limit + under_way.len()).unwrap_or(i64::MAX))
                .fetch_all(&self.read)
                .await?
            }
        };
        Ok(rows
            .iter()
            .filter(|row| !under_way.contains(&row.get::<String, _>("id")))
            .take(limit)
            .map(delivery_from_row)
            .collect())
    }

    /// When the next delivery that is not due yet will be, if any.
    pub async fn next_delivery(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let next: Option<String> =
            sqlx::query_scalar("SELECT MIN(next_at) FROM webhook_deliveries WHERE next_at > $1")
                .bind(format_time(&Utc::now()))
                .fetch_one(&self.read)
                .await?;
        next.as_deref().map(rows::time).transpose()
    }
}

fn delivery_from_row(row: &AnyRow) -> Result<Delivery, Unreadable> {
    let id: String = row.get("id");
    let read = || -> Result<Delivery, StoreError> {
        let status: String = row.get("status");
        let status = RunStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown run status {status:?}")))?;
        let attempts: i64 = row.get("attempts");
        Ok(Delivery {
            id: id.clone(),
            change: StatusChange {
                run_id: rows::parse_uuid(&row.get::<String, _>("run_id"))?,
                tenant: row.get("tenant"),
                status,
                at: row.get("at"),
            },
            created_at: rows::time(&row.get::<String, _>("created_at"))?,
            attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        })
    };
    read().map_err(|error| Unreadable {
        id: id.clone(),
        why: error.to_string(),
    })
}
