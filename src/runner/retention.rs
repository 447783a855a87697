//! Removing runs that have ended: a client's purge of one, and the sweep
//! of those past `[retention] keep_days`. Storage removes the run whole in
//! one transaction; its workspace goes once that is committed (one that
//! cannot be deleted, which is logged, is left for a person to remove:
//! nothing refers to it any more). The sweep removes small batches with a
//! pause between them, so that live runs' writes are never held back
//! long.

use std::time::Duration;

use chrono::Utc;
use uuid::Uuid;

use super::Runner;
use crate::config::RetentionConfig;
use crate::repo::places;
use crate::run::{RunStatus, Tenant, format_time};
use crate::store::{StoreError, Transition, Transitioned};

/// Runs removed per transaction by the sweep, and the pause between two.
const EXPIRE_BATCH: u32 = 50;
const EXPIRE_PAUSE: Duration = Duration::from_millis(50);

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
            match self.services.store.writer().transition(transition).await? {
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

    /// Sweeps runs past `retention.keep_days` every `sweep_interval_ms`,
    /// until the server stops. Without
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
                // Not at once: a server starting has better to do.
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = runner.lifecycle.closing.cancelled() => return,
                }
                runner.expire(keep).await;
                runner.expire_uploads(keep).await;
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
            match self.services.store.writer().transition(transition).await {
                Ok(Transitioned::Expired(ids)) => {
                    let full = ids.len() == EXPIRE_BATCH as usize;
                    if !ids.is_empty() {
                        tracing::info!(runs = ids.len(), %before, "removed runs past their retention");
                    }
                    self.remove_workspaces(ids).await;
                    if !full || self.lifecycle.closing.is_cancelled() {
                        return;
                    }
                    tokio::time::sleep(EXPIRE_PAUSE).await;
                }
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(%error, "the retention sweep could not remove runs; it tries again later");
                    return;
                }
            }
        }
    }

    /// Removes every upload made longer than `keep` ago, a batch at a time
    /// (its record first: a run naming it from then on is refused).
    async fn expire_uploads(&self, keep: chrono::TimeDelta) {
        let before = format_time(&(Utc::now() - keep));
        loop {
            let store = &self.services.store;
            let ids = match store.expire_uploads(before.clone(), EXPIRE_BATCH).await {
                Ok(ids) => ids,
                Err(error) => {
                    tracing::warn!(%error, "the retention sweep could not remove uploads; it tries again later");
                    return;
                }
            };
            let full = ids.len() == EXPIRE_BATCH as usize;
            if !ids.is_empty() {
                tracing::info!(uploads = ids.len(), %before, "removed uploads past their retention");
            }
            let root = self.workspaces_root().to_owned();
            let removed = tokio::task::spawn_blocking(move || {
                for id in ids {
                    let dir = places::upload(&root, id);
                    if let Err(error) = places::remove_tree(&dir) {
                        tracing::warn!(dir = %dir.display(), %error, "an expired upload could not be deleted");
                    }
                }
            })
            .await;
            if removed.is_err() || !full || self.lifecycle.closing.is_cancelled() {
                return;
            }
            tokio::time::sleep(EXPIRE_PAUSE).await;
        }
    }

    /// Removes the runs' workspaces, and their starting trees.
    async fn remove_workspaces(&self, ids: Vec<Uuid>) {
        let root = self.workspaces_root().to_owned();
        let dirs: Vec<_> = ids
            .iter()
            .flat_map(|id| [self.workspace_dir(*id), places::base(&root, *id)])
            .collect();
        let removed = tokio::task::spawn_blocking(move || {
            for dir in dirs {
                if let Err(error) = places::remove_tree(&dir) {
                    tracing::warn!(dir = %dir.display(), %error, "a removed run's workspace could not be deleted");
                }
            }
        })
        .await;
        if let Err(error) = removed {
            tracing::warn!(%error, "removing workspaces failed");
        }
    }
}
