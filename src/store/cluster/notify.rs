//! The notifications that carry news between replicas: `LISTEN`/`NOTIFY`,
//! sent inside the transaction that wrote what they announce, so that they
//! arrive only once it is committed.

use std::time::Duration;

use sqlx::AnyConnection;
use sqlx::postgres::{PgListener, PgNotification};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Cluster;
use crate::run::RunStatus;
use crate::store::{Engine, StatusChange, StoreError};

/// New events of runs are stored: `"<replica> <id>,<id>,..."`.
pub const EVENTS: &str = "agent_runner_events";
/// A run waits to be claimed (its payload is empty).
pub const QUEUED: &str = "agent_runner_queued";
/// A client cancelled a run that executes elsewhere: its id.
pub const CANCEL: &str = "agent_runner_cancel";
/// Runs' statuses changed: `"<replica> "` then a JSON array of
/// `[run_id, tenant, status, at]`.
pub const STATUSES: &str = "agent_runner_statuses";

/// Room for ids in one notification (PostgreSQL takes 8000 bytes).
const NOTIFY_PAYLOAD: usize = 7_800;

/// A notification from the database.
#[derive(Debug)]
pub enum Notice {
    /// Runs whose new events another replica stored.
    Events(Vec<Uuid>),
    /// Changes of status another replica committed.
    Statuses(Vec<StatusChange>),
    /// Runs wait to be claimed.
    Queued,
    /// A run a client cancelled, wherever it executes.
    Cancel(Uuid),
    /// The listening connection was lost and is open again: notifications
    /// may have gone by unheard.
    Missed,
}

impl Cluster {
    /// Listens for the other replicas' news, calling `heard` with each, until
    /// `stop` fires; `ready` is told once it first listens. The connection
    /// is opened again whenever it is lost (then [`Notice::Missed`] is
    /// heard).
    pub async fn listen(
        &self,
        stop: CancellationToken,
        ready: tokio::sync::oneshot::Sender<()>,
        heard: impl Fn(Notice),
    ) {
        let mut ready = Some(ready);
        let mut retry = Duration::from_millis(50);
        while !stop.is_cancelled() {
            let mut listener = match self.listener().await {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for the other replicas' notifications yet");
                    tokio::select! {
                        () = tokio::time::sleep(retry) => {}
                        () = stop.cancelled() => return,
                    }
                    retry = (retry * 2).min(Duration::from_secs(2));
                    continue;
                }
            };
            retry = Duration::from_millis(50);
            // Whatever was sent before this listened is in storage.
            heard(Notice::Missed);
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
            loop {
                let received = tokio::select! {
                    received = listener.try_recv() => received,
                    () = stop.cancelled() => return,
                };
                match received {
                    Ok(Some(notification)) => {
                        if let Some(notice) = self.notice(&notification) {
                            heard(notice);
                        }
                    }
                    // The connection was lost (and is opened on the next
                    // receive): a fresh listener is simpler to reason about.
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }

    async fn listener(&self) -> Result<PgListener, StoreError> {
        let mut listener = PgListener::connect(&self.url).await?;
        listener
            .listen_all([EVENTS, QUEUED, CANCEL, STATUSES])
            .await?;
        Ok(listener)
    }

    fn notice(&self, notification: &PgNotification) -> Option<Notice> {
        let payload = notification.payload();
        match notification.channel() {
            EVENTS => {
                let (replica, ids) = payload.split_once(' ')?;
                if self.is_ours(replica) {
                    return None;
                }
                Some(Notice::Events(
                    ids.split(',')
                        .filter_map(|id| Uuid::parse_str(id).ok())
                        .collect(),
                ))
            }
            QUEUED => Some(Notice::Queued),
            CANCEL => Uuid::parse_str(payload).ok().map(Notice::Cancel),
            STATUSES => {
                let (replica, changes) = payload.split_once(' ')?;
                if self.is_ours(replica) {
                    return None;
                }
                let changes: Vec<(Uuid, String, String, String)> =
                    serde_json::from_str(changes).ok()?;
                Some(Notice::Statuses(
                    changes
                        .into_iter()
                        .filter_map(|(run_id, tenant, status, at)| {
                            Some(StatusChange {
                                run_id,
                                tenant,
                                status: RunStatus::parse(&status)?,
                                at,
                            })
                        })
                        .collect(),
                ))
            }
            _ => None,
        }
    }
}

/// Tells the other replicas, once the transaction commits, that runs have
/// new events (`from`: this replica, whose own notifications it ignores).
/// A no-op on SQLite.
pub(in crate::store) async fn notify_events(
    connection: &mut AnyConnection,
    from: &str,
    run_ids: impl Iterator<Item = String>,
) -> Result<(), StoreError> {
    if Engine::of_connection(connection) != Engine::Postgres {
        return Ok(());
    }
    let mut payload = String::new();
    for id in run_ids {
        if payload.len() + id.len() + 1 > NOTIFY_PAYLOAD {
            notify(connection, EVENTS, &payload).await?;
            payload.clear();
        }
        if payload.is_empty() {
            payload.push_str(from);
            payload.push(' ');
        } else {
            payload.push(',');
        }
        payload.push_str(&id);
    }
    if !payload.is_empty() {
        notify(connection, EVENTS, &payload).await?;
    }
    Ok(())
}

/// Tells the other replicas, once the transaction commits, of `changes`
/// of status (`from`: this replica). A no-op on SQLite.
pub(in crate::store) async fn notify_statuses(
    connection: &mut AnyConnection,
    from: &str,
    changes: &[StatusChange],
) -> Result<(), StoreError> {
    if changes.is_empty() || Engine::of_connection(connection) != Engine::Postgres {
        return Ok(());
    }
    let mut batch: Vec<(Uuid, &str, &str, &str)> = Vec::new();
    let mut size = 0;
    for change in changes {
        let entry = (
            change.run_id,
            change.tenant.as_str(),
            change.status.as_str(),
            change.at.as_str(),
        );
        // As serialised (a tenant's quotes and controls are escaped), with
        // its comma.
        let length = serde_json::to_string(&entry).map_or(NOTIFY_PAYLOAD, |json| json.len() + 1);
        if size + length > NOTIFY_PAYLOAD - from.len() - 3 && !batch.is_empty() {
            send_statuses(connection, from, &batch).await?;
            batch.clear();
            size = 0;
        }
        batch.push(entry);
        size += length;
    }
    send_statuses(connection, from, &batch).await
}

async fn send_statuses(
    connection: &mut AnyConnection,
    from: &str,
    batch: &[(Uuid, &str, &str, &str)],
) -> Result<(), StoreError> {
    let json = serde_json::to_string(batch)
        .map_err(|error| StoreError::Corrupt(format!("cannot serialise statuses: {error}")))?;
    notify(connection, STATUSES, &format!("{from} {json}")).await
}

/// Sends `payload` on `channel` once the transaction commits (a no-op on
/// SQLite).
pub(in crate::store) async fn notify(
    connection: &mut AnyConnection,
    channel: &str,
    payload: &str,
) -> Result<(), StoreError> {
    if Engine::of_connection(connection) != Engine::Postgres {
        return Ok(());
    }
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(&mut *connection)
        .await?;
    Ok(())
}
