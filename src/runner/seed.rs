//! Seeding a run's workspace from a repository or an upload, and keeping
//! the tree it starts from (SPEC section 21).
//!
//! A run of files alone is seeded when it is accepted (see `submit`) and
//! keeps its starting tree on its first write (see
//! [`crate::tools::RunWorkspace`]): its files are not stored. Anything
//! more is done by the run's task before its harness starts (a clone can
//! take a while; the time counts against nothing of the run's): the clone,
//! then the upload's files over it, then the request's files over both;
//! then the workspace is copied (without `.git`) to `.bases/ID`, which is
//! the sign that it is seeded: a process that stopped halfway leaves no
//! base, and whichever process runs it next seeds it again from the start.
//! A run that continues another (copied from it when accepted) keeps its
//! base the same way.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::task::RunTask;
use crate::repo::git::{self, CloneLimits};
use crate::repo::{StartingTree, places};
use crate::tools::Workspace;
use crate::tools::copy::{CopyOptions, copy_tree, keep_starting_tree};

impl RunTask {
    /// Seeds the workspace and keeps its starting tree, unless a run of
    /// files alone (nothing to do) or one seeded before (resumed). The
    /// error is the run's end (`failed`).
    pub(super) async fn seed_workspace(&self) -> Result<(), String> {
        let spec = &self.spec;
        let starting = spec.starting_tree();
        if starting != StartingTree::AtSeed {
            return Ok(());
        }
        let id = self.live.id;
        let root = self.runner.workspaces_root().to_owned();
        let base = places::base(&root, id);
        if tokio::fs::symlink_metadata(&base).await.is_ok() {
            return Ok(());
        }
        let dir = self.runner.workspace_dir(id);
        if spec.seed.fetches() {
            let began = std::time::Instant::now();
            self.fill(&dir).await?;
            tracing::info!(
                ms = began.elapsed().as_millis() as u64,
                "workspace seeded from {}",
                if spec.seed.git.is_some() {
                    "a repository"
                } else {
                    "an upload"
                }
            );
        }
        blocking(move || keep_base(&dir, &base)).await
    }

    /// The clone, the upload and the files, in that order, into `dir`.
    async fn fill(&self, dir: &Path) -> Result<(), String> {
        let spec = &self.spec;
        let settings = self.runner.repositories();
        let owned = dir.to_owned();
        blocking(move || places::remove_tree(&owned).map_err(|e| e.to_string())).await?;
        if let Some(seed) = &spec.seed.git {
            let token = match &seed.token_env {
                Some(name) => Some(std::env::var(name).map_err(|_| {
                    format!("workspace.git.token_env: the server's environment has no {name}")
                })?),
                None => None,
            };
            let limits = CloneLimits {
                timeout: Duration::from_millis(settings.git_timeout_ms),
                max_bytes: settings.max_git_bytes,
            };
            git::clone(seed, token.as_deref(), dir, limits)
                .await
                .map_err(|error| error.0)?;
        }
        if let Some(upload) = spec.seed.archive {
            let from = places::upload(self.runner.workspaces_root(), upload);
            let to = dir.to_owned();
            blocking(move || {
                if std::fs::symlink_metadata(&from).is_err() {
                    return Err(format!(
                        "workspace.archive: the upload {upload} is gone (deleted, or expired)"
                    ));
                }
                let options = CopyOptions {
                    skip_git: false,
                    over_existing: true,
                };
                let copied = copy_tree(&from, &to, options)
                    .map_err(|e| format!("the upload could not be copied: {e}"))?;
                // An upload is whole and readable: what could not be read
                // was removed meanwhile (the upload deleted, or expired).
                if copied.skipped > 0 {
                    return Err(format!(
                        "workspace.archive: the upload {upload} was removed while it was copied"
                    ));
                }
                Ok(())
            })
            .await?;
        }
        let files = if spec.files.is_empty() {
            self.runner
                .store()
                .seed_files(self.live.id)
                .await
                .map_err(|e| format!("the run's files could not be read: {e}"))?
        } else {
            spec.files.clone()
        };
        let to = dir.to_owned();
        blocking(move || write_files(&to, &files)).await
    }
}

/// Writes `files` over what `dir` holds (made if missing).
pub(super) fn write_files(dir: &Path, files: &BTreeMap<String, String>) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("the workspace could not be made: {e}"))?;
    if files.is_empty() {
        return Ok(());
    }
    let workspace =
        Workspace::open(dir).map_err(|e| format!("the workspace could not be opened: {e}"))?;
    for (path, content) in files {
        workspace
            .write_seed(path, content.as_bytes())
            .map_err(|e| format!("workspace.files.{path}: {e}"))?;
    }
    Ok(())
}

/// Copies the workspace at `dir` to `base` (see [`keep_starting_tree`]).
fn keep_base(dir: &Path, base: &Path) -> Result<(), String> {
    keep_starting_tree(dir, base).map_err(|e| format!("the starting tree could not be kept: {e}"))
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("seeding the workspace failed: {e}"))?
}
