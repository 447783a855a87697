//! Repositories in, patches out (SPEC section 21): where a run's workspace
//! comes from besides its request's files (a git clone, an uploaded
//! archive), the tree it started from, and what it changed (a git-style
//! diff, its counts, the workspace as a `.tar.gz`).
//!
//! - [`git`]: cloning a repository into a workspace with the `git` CLI.
//! - [`unpack`]: an upload's archive (`.tar.gz`, `.zip`) unpacked and
//!   checked: refused whole when an entry would escape.
//! - [`tree`]: the entries of a tree, walked by descriptors.
//! - [`diff`]: the workspace against its starting tree, as `git diff` would
//!   write it, or counted.
//! - [`pack`]: a tree written as a `.tar.gz`.
//! - [`places`]: where starting trees and uploads are kept.
//!
//! No HTTP and no SQL: the API and the runner call these with paths.

pub mod diff;
pub mod git;
pub mod pack;
pub mod places;
pub mod tree;
pub mod unpack;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Where a run's workspace comes from: stored with the run, so that
/// whichever process starts it can seed it. Never holds a credential:
/// `token_env` is the name of a variable of the server's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seed {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSeed>,
    /// An upload's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<Uuid>,
    /// The request had files (they are its, not stored here). A run of
    /// files alone keeps its starting tree on its first write (see
    /// [`places`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub files: bool,
}

impl Seed {
    /// A clone or an upload, which the run's task fetches before it starts;
    /// the request's files alone are written when it is accepted.
    pub fn fetches(&self) -> bool {
        self.git.is_some() || self.archive.is_some()
    }

    /// Nothing at all: the workspace starts empty.
    pub fn is_empty(&self) -> bool {
        !self.fetches() && !self.files
    }
}

/// How the tree a run started from is known (see [`places`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartingTree {
    /// Seeded with nothing: the empty tree, and nothing kept.
    Empty,
    /// Kept as the run is seeded (a clone, an upload, the workspace of a
    /// run it continues): a run without one has not been seeded yet, or
    /// its seeding failed.
    AtSeed,
    /// The request's files alone: kept on the run's first write, so a run
    /// without one has changed nothing.
    OnFirstWrite,
}

impl StartingTree {
    /// For a run with `seed`, continuing a previous run's workspace or not.
    pub fn of(seed: Option<&Seed>, continues: bool) -> Self {
        match seed {
            _ if continues => Self::AtSeed,
            Some(seed) if seed.fetches() => Self::AtSeed,
            Some(seed) if seed.files => Self::OnFirstWrite,
            _ => Self::Empty,
        }
    }
}

/// `workspace.git` of a run request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitSeed {
    pub url: String,
    /// A branch, a tag or a full commit id; the remote's default branch
    /// when absent.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Commits of history fetched.
    #[serde(default = "one")]
    pub depth: u32,
    /// The server's environment variable whose value is the credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
}

fn one() -> u32 {
    1
}

/// What a run changed in its workspace, counted as its diff counts it
/// (`changes` of the run object once it has ended).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// Files added, removed, changed or renamed.
    pub files: u64,
    /// Lines added (binary files count none).
    pub insertions: u64,
    /// Lines removed.
    pub deletions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_starting_tree_is_kept_as_its_seed_says() {
        let files = Seed {
            files: true,
            ..Seed::default()
        };
        let upload = Seed {
            archive: Some(Uuid::now_v7()),
            files: true,
            ..Seed::default()
        };
        assert_eq!(StartingTree::of(None, false), StartingTree::Empty);
        assert_eq!(
            StartingTree::of(Some(&Seed::default()), false),
            StartingTree::Empty
        );
        assert_eq!(
            StartingTree::of(Some(&files), false),
            StartingTree::OnFirstWrite
        );
        assert_eq!(StartingTree::of(Some(&upload), false), StartingTree::AtSeed);
        assert_eq!(StartingTree::of(Some(&files), true), StartingTree::AtSeed);
        assert_eq!(StartingTree::of(None, true), StartingTree::AtSeed);
    }
}
