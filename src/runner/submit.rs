//! Accepting a run: admission by the scheduler (a slot, or a place in the
//! queue), its workspace seeded or copied from the run it continues, its
//! row stored, then its start or its place in the queue. Nothing is left
//! behind when this fails: the scheduler's guards give back what they
//! count when dropped.

use chrono::Utc;
use uuid::Uuid;

use super::{Entry, LiveEvents, Origin, Runner, SubmitError};
use crate::run::{Run, RunSpec, RunStatus, Tenant};
use crate::scheduler::{Admission, Queued, Refused};
use crate::store::writer::RunRow;
use crate::store::{NewRun, StoreError};
use crate::tools::copy::CopyError;
use crate::tools::{Workspace, WorkspaceError};

impl Runner {
    /// Accepts a run: seeds its workspace, stores it, and starts it or queues
    /// it. Nothing is left behind when this fails.
    ///
    /// It goes on in a task of its own: a client that goes away once its
    /// run is stored never leaves it stored without a task.
    pub async fn submit(
        &self,
        tenant: &Tenant,
        spec: RunSpec,
        idempotency: Option<(&str, &str)>,
    ) -> Result<Run, SubmitError> {
        self.submit_following(tenant, spec, idempotency, false)
            .await
            .map(|(run, _)| run)
    }

    /// [`Self::submit`], and with `follow`, a subscription to the run's live
    /// events made before it starts, so that none of them goes by unseen
    /// (`model_delta` ones included). A run queued in the database (on
    /// PostgreSQL) has none: it is followed from storage.
    pub async fn submit_following(
        &self,
        tenant: &Tenant,
        spec: RunSpec,
        idempotency: Option<(&str, &str)>,
        follow: bool,
    ) -> Result<(Run, Option<LiveEvents>), SubmitError> {
        let (runner, tenant) = (self.clone(), tenant.clone());
        let idempotency = idempotency.map(|(key, hash)| (key.to_owned(), hash.to_owned()));
        detached(async move {
            let idempotency = idempotency.as_ref().map(|(k, h)| (k.as_str(), h.as_str()));
            runner.accept(&tenant, spec, idempotency, follow).await
        })
        .await
    }

    async fn accept(
        &self,
        tenant: &Tenant,
        spec: RunSpec,
        idempotency: Option<(&str, &str)>,
        follow: bool,
    ) -> Result<(Run, Option<LiveEvents>), SubmitError> {
        if self.is_closing() {
            return Err(SubmitError::ShuttingDown);
        }
        // Shutdown waits for this accept to finish: a run stored `running`
        // always gets its task, and that task is waited for.
        let _accepting = self.lifecycle.tasks.token();
        if let Some(why) = self.services.store.writer().dead() {
            return Err(SubmitError::StorageRefused(format!(
                "its writer died ({why})"
            )));
        }
        if let Some(failing) = self.services.store.writer().failing_for() {
            return Err(SubmitError::StorageRefused(format!(
                "for {} ms",
                failing.as_millis()
            )));
        }
        // A run that continues another: that one must have ended (it stays
        // as it ended; a terminal run never goes live again), unless the
        // follow-up says how to wait for it (`multitask`).
        let mut spec = spec;
        let mut behind = None;
        let previous = match spec.previous_run_id {
            // Behind a run it does not continue, while that one is live.
            None => {
                if let Some(after) = spec.after
                    && let Some(ahead) = self.services.store.get_run(tenant, after).await?
                    && !ahead.status.is_terminal()
                {
                    behind = Some(super::waiting::Behind {
                        waits_for: ahead.id,
                        thread: None,
                        stop: None,
                        turn: None,
                    });
                }
                None
            }
            Some(previous) => {
                let previous = self
                    .services
                    .store
                    .get_run(tenant, previous)
                    .await?
                    .ok_or(SubmitError::PreviousNotFound)?;
                if previous.status.is_terminal() {
                    Some(previous)
                } else {
                    behind = self.behind(&mut spec, &previous).await?;
                    if behind.is_none() {
                        return Err(SubmitError::PreviousLive(previous.status));
                    }
                    None
                }
            }
        };
        let metrics = &self.services.metrics;
        // A free slot starts the run now; otherwise it waits, if there is
        // room: here, or on PostgreSQL in the database, for any replica.
        let admission = self
            .scheduler
            .admit(tenant)
            .await
            .map_err(|refused| match refused {
                Refused::QueueFull => {
                    metrics.run_rejected(&tenant.0, "queue_full");
                    SubmitError::QueueFull
                }
                Refused::Storage(why) => SubmitError::StorageRefused(why),
                Refused::Unready(why) => SubmitError::Unready(why),
                refused @ (Refused::RateLimited { retry_after, .. }
                | Refused::QuotaExceeded { retry_after, .. }) => {
                    let reason = match refused {
                        Refused::QuotaExceeded { .. } => "quota_exceeded",
                        _ => "rate_limited",
                    };
                    metrics.run_rejected(&tenant.0, reason);
                    SubmitError::Limited {
                        refused,
                        retry_after,
                    }
                }
            })?;
        let id = Uuid::now_v7();
        let mut run = Run::queued(id, &spec, Utc::now());
        // Behind a live run it takes no slot and no place here: it is
        // queued once that run has ended (see `waiting`).
        let admission = match &behind {
            Some(behind) => {
                drop(admission);
                Self::queued_behind(&mut run, behind);
                None
            }
            None => Some(admission),
        };
        if let Some(Admission::Now(_)) = admission {
            // It starts at once: stored as running from the first write, so
            // that a restart never runs it again (see `RunTask::execute`).
            run.status = RunStatus::Running;
            run.started_at = Some(run.created_at);
        }
        let directory = self.workspace_dir(id);
        let mut prepared = Ok(());
        if let Some(previous) = &previous {
            run.thread_id = previous.thread_id;
            prepared = copy_workspace(
                &self.workspace_dir(previous.id),
                &directory,
                "previous_run_id",
            )
            .await;
        }
        // One queued behind a live run is seeded as it starts.
        if let Ok(()) = prepared
            && !spec.copy_pending
        {
            prepared = seed_workspace(&directory, &spec).await;
        }
        if let Err(error) = prepared {
            let _ = tokio::fs::remove_dir_all(&directory).await;
            return Err(error);
        }
        let owner = match &admission {
            Some(Admission::Now(slot)) => slot.holder(),
            Some(Admission::Queue(_)) | None => None,
        };
        let row = RunRow::new(NewRun {
            run: &run,
            tenant,
            spec: &spec,
            idempotency,
            owner,
        });
        let inserted = match row {
            Ok(row) => self.services.store.writer().insert_run(row).await,
            Err(error) => Err(error),
        };
        if let Err(error) = inserted {
            let _ = tokio::fs::remove_dir_all(&directory).await;
            return Err(match error {
                StoreError::Refused(why) => SubmitError::StorageRefused(why),
                // This replica lost its lease (and joins again): the
                // client goes to another, or comes back.
                StoreError::Fenced => SubmitError::Unready(
                    self.unready()
                        .unwrap_or_else(|| "this replica lost its lease on the database".into()),
                ),
                // Purged between its acceptance and its insert.
                StoreError::PreviousGone => SubmitError::PreviousNotFound,
                error => error.into(),
            });
        }
        metrics.run_created(&tenant.0);
        let Some(admission) = admission else {
            self.waiting.added();
            if let Some(behind) = behind {
                // Stored: the next follow-up finds it.
                drop(behind.turn);
                if let Some(live) = behind.stop {
                    self.stop_for_follow_up(tenant, live).await;
                }
            }
            return Ok((run, None));
        };
        let entry = match admission {
            Admission::Now(slot) => Entry::Slot(slot),
            Admission::Queue(place) => match self.scheduler.enqueue(place, true) {
                Queued::Here(turn) => Entry::Turn(turn),
                // Followed from storage, as it executes wherever it is
                // claimed.
                Queued::Elsewhere => return Ok((run, None)),
            },
        };
        let events = self.start(
            run.clone(),
            tenant.clone(),
            spec,
            entry,
            Origin::Start,
            follow,
        );
        Ok((run, events))
    }
}

impl Runner {
    /// Starts attempt `of.attempt` of the run `parent` (SPEC section 27): a
    /// run of its own with the parent's request, its workspace a copy of
    /// the parent's starting tree (kept as its own), queued for a slot
    /// like any run of the tenant. It was admitted with its parent: no rate
    /// or quota refuses it, and it waits for no quota (a quota never breaks
    /// a run). A cost bound of the run is shared out: each of its `n`
    /// attempts may spend `max_cost_usd / n`, so that their sum stays
    /// within it. Nothing is left behind when this fails.
    pub(super) async fn start_attempt(
        &self,
        tenant: &Tenant,
        parent: &RunSpec,
        parent_dir: &std::path::Path,
        of: crate::run::AttemptOf,
    ) -> Result<Run, SubmitError> {
        let mut spec = parent.clone();
        // A cost bound is the attempts' sum: each may spend an equal share.
        if let (Some(max), Some(policy)) = (spec.limits.max_cost_usd, &spec.attempts) {
            spec.limits.max_cost_usd = Some(max / f64::from(policy.n.max(1)));
        }
        spec.attempts = None;
        spec.attempt_of = Some(of);
        // Its files are in the tree it copies; a webhook is the parent's.
        spec.files.clear();
        spec.seed = crate::repo::Seed::default();
        spec.webhook = None;
        self.insert_child(tenant, spec, Some((parent_dir, "attempts")))
            .await
    }

    /// Inserts a child run of `spec` (an attempt, or a `delegate` call's
    /// run) and starts it, admitted with its parent: no rate or quota
    /// refuses it, it waits for no quota, and it waits for a slot of its
    /// tenant's as any run. Its workspace is a copy of `copy`'s directory,
    /// kept as its starting tree (`copy`'s field names it in a refusal),
    /// or none of its own. Nothing is left behind when this fails.
    pub(super) async fn insert_child(
        &self,
        tenant: &Tenant,
        spec: RunSpec,
        copy: Option<(&std::path::Path, &'static str)>,
    ) -> Result<Run, SubmitError> {
        if self.is_closing() {
            return Err(SubmitError::ShuttingDown);
        }
        let _accepting = self.lifecycle.tasks.token();
        let place = self.scheduler.readmit(tenant);
        let id = Uuid::now_v7();
        let run = Run::queued(id, &spec, Utc::now());
        let directory = self.workspace_dir(id);
        let base = crate::repo::places::base(self.workspaces_root(), id);
        let copied = match copy {
            Some((from, field)) => copy_starting_tree(from, &directory, &base, field).await,
            None => Ok(()),
        };
        let row = copied.and_then(|()| {
            RunRow::new(NewRun {
                run: &run,
                tenant,
                spec: &spec,
                idempotency: None,
                owner: None,
            })
            .map_err(SubmitError::from)
        });
        let inserted = match row {
            Ok(row) => self
                .services
                .store
                .writer()
                .insert_run(row)
                .await
                .map_err(SubmitError::from),
            Err(error) => Err(error),
        };
        if let Err(error) = inserted {
            let _ = tokio::fs::remove_dir_all(&directory).await;
            let _ = crate::repo::places::remove_tree(&base);
            return Err(error);
        }
        self.services.metrics.run_created(&tenant.0);
        if let Queued::Here(turn) = self.scheduler.enqueue(place, false) {
            self.start(
                run.clone(),
                tenant.clone(),
                spec,
                Entry::Turn(turn),
                Origin::Start,
                false,
            );
        }
        Ok(run)
    }
}

/// Copies a parent's workspace (its starting tree: it changes nothing of
/// it until its attempts end) to an attempt's, and keeps it as the
/// attempt's starting tree.
pub(super) async fn copy_starting_tree(
    from: &std::path::Path,
    to: &std::path::Path,
    base: &std::path::Path,
    field: &'static str,
) -> Result<(), SubmitError> {
    copy_workspace(from, to, field).await?;
    let (to, base) = (to.to_owned(), base.to_owned());
    tokio::task::spawn_blocking(move || crate::tools::copy::keep_starting_tree(&to, &base))
        .await
        .map_err(|e| SubmitError::Workspace(format!("keeping the starting tree failed: {e}")))?
        .map_err(|e| server_side(&e, format!("keeping an attempt's starting tree: {e}")))
}

/// Drives `work` in a task of its own, so that it finishes even if whoever
/// awaits it (a request's handler) is dropped halfway.
pub(super) async fn detached<T: Send + 'static>(
    work: impl Future<Output = Result<T, SubmitError>> + Send + 'static,
) -> Result<T, SubmitError> {
    tokio::spawn(work).await.unwrap_or_else(|error| {
        Err(SubmitError::Store(StoreError::Corrupt(format!(
            "the request's task failed: {error}"
        ))))
    })
}

/// Starts a run's workspace as a copy of another's: the one it continues,
/// as it ended, or (an attempt) its parent's starting tree. `field` is the
/// request's field a workspace too large to copy is refused under.
async fn copy_workspace(
    from: &std::path::Path,
    to: &std::path::Path,
    field: &'static str,
) -> Result<(), SubmitError> {
    let (from, to) = (from.to_owned(), to.to_owned());
    let began = std::time::Instant::now();
    let stats = tokio::task::spawn_blocking(move || crate::tools::copy::copy_workspace(&from, &to))
        .await
        .map_err(|e| SubmitError::Workspace(format!("copying the workspace failed: {e}")))?
        .map_err(|error| match error {
            CopyError::TooLarge => SubmitError::Workspace(format!("{field}: {error}")),
            CopyError::Write(e) | CopyError::Source(e) => {
                server_side(&e, format!("copying the workspace for {field}: {e}"))
            }
        })?;
    tracing::debug!(
        files = stats.files,
        cloned = stats.cloned,
        bytes = stats.bytes,
        skipped = stats.skipped,
        ms = began.elapsed().as_millis() as u64,
        "workspace copied"
    );
    Ok(())
}

/// Creates the run's workspace directory and the request's files in it.
/// A run without files gets its directory on its first write instead (see
/// [`Workspaces`]).
async fn seed_workspace(directory: &std::path::Path, spec: &RunSpec) -> Result<(), SubmitError> {
    // A clone or an upload is seeded by the run's task, files last (see
    // `super::seed`).
    if spec.files.is_empty() || spec.seed.fetches() {
        return Ok(());
    }
    tokio::fs::create_dir_all(directory)
        .await
        .map_err(|e| server_side(&e, format!("cannot create the workspace: {e}")))?;
    let directory = directory.to_owned();
    let files = spec.files.clone();
    tokio::task::spawn_blocking(move || {
        let workspace = Workspace::open(&directory)
            .map_err(|e| server_side(&e, format!("cannot open the workspace: {e}")))?;
        for (path, content) in &files {
            workspace
                .write_seed(path, content.as_bytes())
                .map_err(|error| match &error {
                    WorkspaceError::Io { source, .. } => {
                        server_side(source, format!("seeding workspace.files.{path}: {error}"))
                    }
                    _ => SubmitError::Workspace(format!("workspace.files.{path}: {error}")),
                })?;
        }
        Ok(())
    })
    .await
    .map_err(|e| SubmitError::Workspace(format!("seeding the workspace failed: {e}")))?
}

/// An I/O failure of the server's own disk while accepting a run: a full
/// disk (or quota) is `StorageFull`, anything else the store's failure.
fn server_side(error: &std::io::Error, message: String) -> SubmitError {
    match error.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            SubmitError::StorageFull(message)
        }
        _ => SubmitError::StorageRefused(message),
    }
}
