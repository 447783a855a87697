//! One uid per live run (`[sandbox] uids`, by default 100000-165535): a
//! root server runs the commands of different runs under different users,
//! so no `chmod`, `chown`, `utime` or truncate of one run's commands
//! reaches another run's files, whatever Landlock allows (it does not
//! mediate those).
//!
//! A uid is leased by each command (and stdio MCP server) of a workspace,
//! and a workspace keeps its uid while any of its processes run. When
//! they have all ended, the uid stays the workspace's own until no
//! never-held uid is left: uids are handed out in turn, so a run's next
//! command usually gets its uid back, and its files need no new owner.
//! The group is the uid's number too.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::identity::RunAs;
use crate::sync::lock;

/// A range of uids, `"FIRST-LAST"` in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub last: u32,
}

/// `[sandbox] uids` when the config gives none: the range Debian gives a
/// first user's subordinate ids, 65536 of them.
pub const DEFAULT_UIDS: UidRange = UidRange {
    first: 100_000,
    last: 165_535,
};

impl fmt::Display for UidRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl std::str::FromStr for UidRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("{text:?} is not a range of uids such as \"100000-165535\"");
        let (first, last) = text.split_once('-').ok_or_else(bad)?;
        let first: u32 = first.trim().parse().map_err(|_| bad())?;
        let last: u32 = last.trim().parse().map_err(|_| bad())?;
        if first == 0 || last < first {
            return Err(format!(
                "{text:?}: the first uid must be at least 1 and the last no smaller than it"
            ));
        }
        // The kernel's "no uid", and what overflows to it.
        if last >= u32::MAX - 1 {
            return Err(format!("{text:?}: uids end below {}", u32::MAX - 1));
        }
        Ok(Self { first, last })
    }
}

impl Serialize for UidRange {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for UidRange {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The uids of a server's commands, and whose each is.
#[derive(Debug)]
pub(super) struct UidPool {
    range: UidRange,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    /// The uid each workspace has (live or kept).
    by_workspace: HashMap<PathBuf, u32>,
    /// Per uid handed out: its workspace, and how many of its processes
    /// run.
    slots: HashMap<u32, (PathBuf, usize)>,
    /// Where the next search for a free uid starts.
    next: u32,
}

/// A uid held by one process of a workspace, until dropped.
#[derive(Debug)]
pub(super) struct Lease {
    pool: Arc<UidPool>,
    owner: RunAs,
}

impl Lease {
    pub(super) fn owner(&self) -> RunAs {
        self.owner
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut state = lock(&self.pool.state);
        if let Some((_, held)) = state.slots.get_mut(&self.owner.uid) {
            *held = held.saturating_sub(1);
        }
    }
}

impl UidPool {
    pub(super) fn new(range: UidRange) -> Arc<Self> {
        Arc::new(Self {
            range,
            state: Mutex::new(PoolState {
                next: range.first,
                ..PoolState::default()
            }),
        })
    }

    pub(super) fn range(&self) -> UidRange {
        self.range
    }

    /// A uid for one more process of `workspace`: its own if it has one,
    /// else one never held, else one whose workspace has nothing running.
    /// `None` when every uid of the range has a live workspace.
    pub(super) fn lease(self: &Arc<Self>, workspace: &Path) -> Option<Lease> {
        let mut state = lock(&self.state);
        let uid = match state.by_workspace.get(workspace) {
            Some(&uid) => uid,
            None => {
                let uid = self.free_uid(&state)?;
                if let Some((previous, _)) = state.slots.remove(&uid) {
                    state.by_workspace.remove(&previous);
                }
                state.slots.insert(uid, (workspace.to_owned(), 0));
                state.by_workspace.insert(workspace.to_owned(), uid);
                state.next = if uid == self.range.last {
                    self.range.first
                } else {
                    uid + 1
                };
                uid
            }
        };
        if let Some((_, held)) = state.slots.get_mut(&uid) {
            *held += 1;
        }
        Some(Lease {
            pool: Arc::clone(self),
            owner: RunAs { uid, gid: uid },
        })
    }

    /// The first uid from `next` on that was never held, else the first
    /// whose workspace has nothing running.
    fn free_uid(&self, state: &PoolState) -> Option<u32> {
        let UidRange { first, last } = self.range;
        let from_next = (state.next..=last).chain(first..state.next);
        let size = u64::from(last - first) + 1;
        if (state.slots.len() as u64) < size {
            return from_next.clone().find(|uid| !state.slots.contains_key(uid));
        }
        from_next
            .clone()
            .find(|uid| state.slots.get(uid).is_some_and(|(_, held)| *held == 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_refuse_what_is_not_one() {
        assert_eq!("100000-165535".parse::<UidRange>(), Ok(DEFAULT_UIDS));
        for bad in ["", "5", "0-10", "10-5", "a-b", "1-4294967295"] {
            assert!(bad.parse::<UidRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn live_workspaces_never_share_a_uid_and_keep_theirs() {
        let pool = UidPool::new(UidRange {
            first: 10,
            last: 11,
        });
        let a = pool.lease(Path::new("/w/a")).unwrap();
        let a2 = pool.lease(Path::new("/w/a")).unwrap();
        let b = pool.lease(Path::new("/w/b")).unwrap();
        assert_eq!(a.owner(), a2.owner());
        assert_ne!(a.owner().uid, b.owner().uid);
        assert!(
            pool.lease(Path::new("/w/c")).is_none(),
            "both uids are live"
        );
        drop(a);
        assert!(pool.lease(Path::new("/w/c")).is_none(), "a still runs one");
        drop(a2);
        // a's uid goes to c, the only one free; a, back, gets none.
        let c = pool.lease(Path::new("/w/c")).unwrap();
        assert_eq!(c.owner().uid, 10);
        assert!(pool.lease(Path::new("/w/a")).is_none());
        drop(b);
        // b kept its uid while it ran nothing, and gets it back.
        assert_eq!(pool.lease(Path::new("/w/b")).unwrap().owner().uid, 11);
    }
}
