//! A run's workspace seeds besides its files: `workspace.git` (a clone of
//! an allowed repository) and `workspace.archive` (an upload's id). Whether
//! the upload exists is asked of storage by the caller; the rest is checked
//! here, before anything is stored.

use uuid::Uuid;

use super::Ceilings;
use crate::api::error::ApiError;
use crate::repo::{GitSeed, Seed};

/// The seed a request's `workspace.git` and `workspace.archive` give.
pub(super) fn seed(
    git: Option<GitSeed>,
    archive: Option<String>,
    server: &Ceilings<'_>,
) -> Result<Seed, ApiError> {
    let archive = archive
        .map(|id| {
            Uuid::parse_str(&id).map_err(|_| {
                ApiError::Validation(format!("workspace.archive: {id:?} is not an upload id"))
            })
        })
        .transpose()?;
    if let Some(git) = &git {
        crate::repo::git::check(git)
            .map_err(|why| ApiError::Validation(format!("workspace.git.{why}")))?;
        let settings = server.repositories;
        if !settings.allows(&git.url) {
            return Err(ApiError::GitNotAllowed(format!(
                "workspace.git.url: {:?} is not allowed: it must start with one of the \
                 server's [workspaces] git_allow ({})",
                git.url,
                if settings.git_allow.is_empty() {
                    "none are set: no repository may be cloned".to_owned()
                } else {
                    settings.git_allow.join(", ")
                }
            )));
        }
        if let Some(name) = &git.token_env {
            if !settings
                .git_token_envs
                .iter()
                .any(|allowed| allowed == name)
            {
                return Err(ApiError::GitNotAllowed(format!(
                    "workspace.git.token_env: {name:?} is not one of the server's [workspaces] \
                     git_token_envs"
                )));
            }
            // Checked as the server started; gone since, it is ours.
            if std::env::var_os(name).is_none() {
                return Err(ApiError::internal(
                    "cloning a repository",
                    format!("the listed variable {name} is not set"),
                ));
            }
        }
    }
    Ok(Seed {
        git,
        archive,
        files: false,
    })
}
