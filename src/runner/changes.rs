//! What a run changed in its workspace: the tree it started from (a copy
//! kept beside the workspaces, or the files of its request, see
//! [`crate::repo::places`]), and the counts its end is stored with.
//!
//! Counting costs a run nothing when its tools never asked to write (no
//! write, command or MCP server touched the workspace in this execution of
//! it): its workspace is then as it was seeded. A run resumed after a pause
//! or a restart is always counted, since what it did before is not known
//! here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use uuid::Uuid;

use super::Runner;
use crate::repo::diff::{self, Base};
use crate::repo::tree::Tree;
use crate::repo::{Changes, places};
use crate::store::Store;
use crate::tools::RunWorkspace;

impl Runner {
    /// The tree run `id` started from. `files`: its request's, when they
    /// are at hand (else they are read from storage).
    pub async fn diff_base(
        &self,
        id: Uuid,
        files: Option<&BTreeMap<String, String>>,
    ) -> Result<Base, String> {
        base(
            self.services.store.clone(),
            self.workspaces_root().to_owned(),
            id,
            files.cloned(),
        )
        .await
    }
}

async fn base(
    store: Store,
    root: PathBuf,
    id: Uuid,
    files: Option<BTreeMap<String, String>>,
) -> Result<Base, String> {
    let kept = places::base(&root, id);
    let tree = tokio::task::spawn_blocking(move || {
        std::fs::symlink_metadata(&kept)
            .is_ok()
            .then(|| Tree::walk(&kept, false))
            .transpose()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("the run's starting tree could not be read: {e}"))?;
    if let Some(tree) = tree {
        return Ok(Base::Tree(tree));
    }
    let files = match files {
        Some(files) => files,
        None => store
            .seed_files(id)
            .await
            .map_err(|e| format!("the run's seeded files could not be read: {e}"))?,
    };
    Ok(Base::files(files))
}

/// What the observer needs to count a run's changes at its end.
pub(super) struct ChangesWatch {
    pub(super) runner: Runner,
    pub(super) run_id: Uuid,
    pub(super) workspace: Arc<RunWorkspace>,
    /// A new run in this process: its workspace is as seeded unless its
    /// tools asked to write.
    pub(super) fresh: bool,
}

impl ChangesWatch {
    /// The run's changes as of now; `None` when they could not be told
    /// (logged).
    pub(super) async fn count(&self) -> Option<Changes> {
        if self.fresh && !self.workspace.was_written() {
            return Some(Changes::default());
        }
        let counted = async {
            let base = self.runner.diff_base(self.run_id, None).await?;
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
