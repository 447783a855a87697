//! Removing runs that have ended: a client's purge of one, and the sweep
//! of those past `[retention] keep_days`. Storage removes the run whole in
//! one transaction; its workspace goes once that is committed (a workspace
//! left by a failure is removed by the next sweep of the same run, or by
//! hand: nothing refers to it).

use std::time::Duration;

use chrono::Utc;
use uuid::Uuid;

use super::Runner;
use crate::config::RetentionConfig;
use crate::run::{RunStatus, Tenant, format_time};
use crate::store::{StoreError, Transition, Transitioned};

/// Runs removed per transaction by the sweep.
const EXPIRE_BATCH: u32 = 200;

/// What a purge did.
#[derive(Debug)]
pub enum Purged {
    Removed,
    NotFound,
    /// Live: nothing was removed.
    Live(RunStatus),
}

impl Runner {
    /// Removes a run of `tenant` that has ended: its record, events,
    /// messages and workspace.
    pub async fn purge(&self, tenant: &Tenant, id: Uuid) -> Result<Purged, StoreError> {
        let transition = Transition::Purge {
            run_id: id,
            tenant: tenant.clone(),
        };
        Ok(
            match self.shared.store.writer().transition(transition).await? {
                Transitioned::Purged => {
                    self.remove_workspaces(vec![id]).await;
                    tracing::info!(run_id = %id, "purged");
                    Purged::Removed
                }
                Transitioned::Live(status) => Purged::Live(status),
                _ => Purged::NotFound,
            },
        )
    }

    /// Sweeps runs past `retention.keep_days` every `sweep_interval_ms`
    /// (the first sweep at once), until the server stops. Without
    /// `keep_days`, nothing.
    pub fn keep(&self, retention: RetentionConfig) {
        let Some(days) = retention.keep_days else {
            return;
        };
        let runner = self.clone();
        let every = Duration::from_millis(retention.sweep_interval_ms);
        tokio::spawn(async move {
            let keep = chrono::TimeDelta::days(i64::from(days));
            loop {
                runner.expire(keep).await;
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = runner.closing.cancelled() => return,
                }
            }
        });
    }

    /// Removes every run that ended longer than `keep` ago, a batch at a
    /// time.
    async fn expire(&self, keep: chrono::TimeDelta) {
        let before = format_time(&(Utc::now() - keep));
        loop {
            let transition = Transition::Expire {
                before: before.clone(),
                limit: EXPIRE_BATCH,
            };
            match self.shared.store.writer().transition(transition).await {
                Ok(Transitioned::Expired(ids)) => {
                    let full = ids.len() == EXPIRE_BATCH as usize;
                    if !ids.is_empty() {
                        tracing::info!(runs = ids.len(), %before, "removed runs past their retention");
                    }
                    self.remove_workspaces(ids).await;
                    if !full || self.closing.is_cancelled() {
                        return;
                    }
                }
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(%error, "the retention sweep could not remove runs; it tries again later");
                    return;
                }
            }
        }
    }

    async fn remove_workspaces(&self, ids: Vec<Uuid>) {
        let dirs: Vec<_> = ids.iter().map(|id| self.workspace_dir(*id)).collect();
        let removed = tokio::task::spawn_blocking(move || {
            for dir in dirs {
                match std::fs::remove_dir_all(&dir) {
                    Ok(()) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => {
                        tracing::warn!(dir = %dir.display(), %error, "a removed run's workspace could not be deleted");
                    }
                }
            }
        })
        .await;
        if let Err(error) = removed {
            tracing::warn!(%error, "removing workspaces failed");
        }
    }
}
