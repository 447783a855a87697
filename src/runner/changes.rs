//! What a run changed in its workspace: the tree it started from (a copy
//! kept beside the workspaces, see [`crate::repo::places`]), and the counts
//! its end is stored with.
//!
//! Counting costs a run nothing when its tools never asked to write (no
//! write, command or MCP server touched the workspace in this execution of
//! it): its workspace is then as it was seeded. A run resumed after a pause
//! or a restart is always counted, since what it did before is not known
//! here.

use std::sync::Arc;

use uuid::Uuid;

use super::Runner;
use crate::repo::diff;
use crate::repo::tree::Tree;
use crate::repo::{Changes, StartingTree, places};
use crate::tools::RunWorkspace;

impl Runner {
    /// The tree run `id` started from; `None` while it has none kept (see
    /// [`StartingTree`]): it is queued, cloning, its clone failed, or it is
    /// a run of files alone that has not written.
    pub async fn diff_base(
        &self,
        id: Uuid,
        starting: StartingTree,
    ) -> Result<Option<Tree>, String> {
        if starting == StartingTree::Empty {
            return Ok(Some(Tree::empty()));
        }
        let base = places::base(self.workspaces_root(), id);
        tokio::task::spawn_blocking(move || {
            std::fs::symlink_metadata(&base)
                .is_ok()
                .then(|| Tree::walk(&base, false))
                .transpose()
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the run's starting tree could not be read: {e}"))
    }
}

/// What the observer needs to count a run's changes at its end.
pub(super) struct ChangesWatch {
    pub(super) runner: Runner,
    pub(super) run_id: Uuid,
    pub(super) workspace: Arc<RunWorkspace>,
    /// A new run in this process: its workspace is as seeded unless its
    /// tools asked to write.
    pub(super) fresh: bool,
    pub(super) starting: StartingTree,
}

impl ChangesWatch {
    /// The run's changes as of now; `None` when they could not be told
    /// (logged).
    pub(super) async fn count(&self) -> Option<Changes> {
        if self.fresh && !self.workspace.was_written() {
            return Some(Changes::default());
        }
        let counted = async {
            let Some(base) = self.runner.diff_base(self.run_id, self.starting).await? else {
                return match self.starting {
                    StartingTree::OnFirstWrite => Ok(Changes::default()),
                    _ => Err("it has no starting tree (it was never seeded)".to_owned()),
                };
            };
            let dir = self.runner.workspace_dir(self.run_id);
            tokio::task::spawn_blocking(move || {
                let now = Tree::walk(&dir, false).map_err(|e| e.to_string())?;
                diff::count(&base, &now).map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())?
        };
        match counted.await {
            Ok(changes) => Some(changes),
            Err(error) => {
                tracing::warn!(%error, "the run's changes could not be counted");
                None
            }
        }
    }
}
