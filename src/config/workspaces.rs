//! `[workspaces]`: where a run's workspace may come from besides the files
//! of its request (SPEC section 21): which git repositories, with which
//! credentials, how long a clone may take and how large it may grow.

use serde::{Deserialize, Serialize};

/// Most bytes an upload's archive may unpack to, whatever it compresses to.
pub const MAX_UNPACKED_BYTES: u64 = 4 << 30;

/// How runs' workspaces are seeded from repositories.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkspacesConfig {
    /// Prefixes a `workspace.git.url` must start with (`https://github.com/`,
    /// `file:///srv/repos/`): none, no clones. A `file://` URL is accepted
    /// only when a `file://` prefix is listed.
    pub git_allow: Vec<String>,
    /// Environment variables a run's `workspace.git.token_env` may name:
    /// none, no credentials. A run can only have a listed variable sent,
    /// and only to a URL `git_allow` accepts.
    pub git_token_envs: Vec<String>,
    /// Longest a clone may take; past it the run ends `failed`.
    pub git_timeout_ms: u64,
    /// Most bytes a clone may write (its checkout and its `.git`); past it
    /// the clone is stopped and the run ends `failed`.
    pub max_git_bytes: u64,
    /// Most bytes an upload may unpack to (a small archive can unpack to a
    /// great deal): past it the upload is refused.
    pub max_unpacked_bytes: u64,
}

impl Default for WorkspacesConfig {
    fn default() -> Self {
        Self {
            git_allow: Vec::new(),
            git_token_envs: Vec::new(),
            git_timeout_ms: 120_000,
            max_git_bytes: 1 << 30,
            max_unpacked_bytes: 1 << 30,
        }
    }
}

impl WorkspacesConfig {
    /// Whether `url` starts with a listed prefix.
    pub fn allows(&self, url: &str) -> bool {
        self.git_allow.iter().any(|prefix| url.starts_with(prefix))
    }

    /// The settings' own consistency.
    pub(super) fn check(&self) -> Result<(), String> {
        for prefix in &self.git_allow {
            let scheme_ok = ["https://", "http://", "file://", "ssh://", "git://"]
                .iter()
                .any(|scheme| prefix.starts_with(scheme));
            if !scheme_ok {
                return Err(format!(
                    "workspaces.git_allow: {prefix:?} must start with https://, http://, \
                     file://, ssh:// or git://"
                ));
            }
            // `https://github.com` would also allow `https://github.com.evil/`.
            let after_scheme = prefix.split_once("://").map_or("", |(_, rest)| rest);
            if !prefix.starts_with("file://") && !after_scheme.contains('/') {
                return Err(format!(
                    "workspaces.git_allow: {prefix:?} must end its host with a `/` (else \
                     it also allows every host that starts with the same name)"
                ));
            }
        }
        for name in &self.git_token_envs {
            if !super::check::is_valid_env_name(name) {
                return Err(format!(
                    "workspaces.git_token_envs: {name:?} is not an environment variable name"
                ));
            }
            // Checked here rather than refused to a client later: it is
            // the server's to set.
            if std::env::var_os(name).is_none() {
                return Err(format!(
                    "workspaces.git_token_envs: {name} is not set in the server's environment"
                ));
            }
        }
        if self.git_timeout_ms == 0 || self.git_timeout_ms > super::MAX_TIME_LIMIT_MS {
            return Err("workspaces.git_timeout_ms must be between 1 and a year".into());
        }
        if self.max_git_bytes == 0 {
            return Err("workspaces.max_git_bytes must be at least 1".into());
        }
        if self.max_unpacked_bytes == 0 || self.max_unpacked_bytes > MAX_UNPACKED_BYTES {
            return Err(format!(
                "workspaces.max_unpacked_bytes must be between 1 and {MAX_UNPACKED_BYTES}"
            ));
        }
        Ok(())
    }
}
