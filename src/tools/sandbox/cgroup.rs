//! Cgroups of commands: where this server may create them, one per command,
//! and the limits written into them.
//!
//! Three hierarchies can serve, found in `/proc/self/mountinfo` and
//! `/proc/self/cgroup`:
//! - the **unified** (v2) hierarchy: the process tree's container (ended
//!   with `cgroup.kill`) and, where its `memory` and `pids` controllers can be
//!   enabled below this server, the limits (`memory.max`, `pids.max`);
//! - on a hybrid machine, the v1 **memory** and **pids** hierarchies: one
//!   cgroup in each per command, for `memory.limit_in_bytes` and `pids.max`.
//!
//! In each, this server creates one directory below its own cgroup
//! (`agent-runner-PID-N`) and one child per command (`cmd-N`). A server that
//! died without cleaning up leaves its directories behind; the next one
//! sweeps those whose PID is gone, killing what still runs there.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use rustix::process::{Pid, Signal, kill_process};

/// How often a cgroup is re-read while waiting for it to empty.
pub(super) const EMPTY_POLL: Duration = Duration::from_millis(5);

/// How long a cgroup abandoned by a dropped command is given to empty before
/// its directory is left behind.
const ABANDONED_CGROUP_GRACE: Duration = Duration::from_secs(30);

/// A cgroup hierarchy this server can place commands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hierarchy {
    /// cgroup v2.
    Unified,
    /// The v1 hierarchy with the `memory` controller.
    Memory,
    /// The v1 hierarchy with the `pids` controller.
    Pids,
}

impl Hierarchy {
    fn name(self) -> &'static str {
        match self {
            Hierarchy::Unified => "cgroup v2",
            Hierarchy::Memory => "cgroup v1 memory",
            Hierarchy::Pids => "cgroup v1 pids",
        }
    }

    /// The v1 controller this hierarchy is found by.
    fn controller(self) -> Option<&'static str> {
        match self {
            Hierarchy::Unified => None,
            Hierarchy::Memory => Some("memory"),
            Hierarchy::Pids => Some("pids"),
        }
    }
}

/// The directory under which this server creates one cgroup per command in
/// one hierarchy.
#[derive(Debug)]
pub(super) struct CgroupBase {
    pub(super) dir: PathBuf,
    hierarchy: Hierarchy,
    next: AtomicU64,
}

impl CgroupBase {
    /// Creates this server's directory in `hierarchy`, below the cgroup this
    /// process is in, after sweeping what dead servers left there.
    pub(super) fn create(hierarchy: Hierarchy) -> Result<Self, String> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|error| format!("reading /proc/self/mountinfo: {error}"))?;
        let membership = fs::read_to_string("/proc/self/cgroup")
            .map_err(|error| format!("reading /proc/self/cgroup: {error}"))?;
        let own = own_cgroup_dir(&mountinfo, &membership, hierarchy)?;
        if !own.join("cgroup.procs").is_file() {
            return Err(format!(
                "{} is not a {} directory",
                own.display(),
                hierarchy.name()
            ));
        }
        sweep_stale(&own, hierarchy);
        static INSTANCE: AtomicU64 = AtomicU64::new(0);
        let dir = own.join(format!(
            "agent-runner-{}-{}",
            std::process::id(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        ));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(format!("creating {}: {error}", dir.display())),
        }
        // cgroup.kill appears in non-root cgroups from Linux 5.14 on.
        if hierarchy == Hierarchy::Unified && !dir.join("cgroup.kill").is_file() {
            let _ = fs::remove_dir(&dir);
            return Err("this kernel has no cgroup.kill (Linux 5.14+)".into());
        }
        Ok(Self {
            dir,
            hierarchy,
            next: AtomicU64::new(0),
        })
    }

    /// Enables the v2 `controller` for the command cgroups below this one,
    /// if the cgroups above let it through. Returns whether it is enabled.
    pub(super) fn enable_controller(&self, controller: &str) -> bool {
        let listed = |dir: &Path, file: &str| {
            fs::read_to_string(dir.join(file))
                .is_ok_and(|text| text.split_whitespace().any(|c| c == controller))
        };
        if let Some(own) = self.dir.parent()
            && !listed(&self.dir, "cgroup.controllers")
        {
            // Fails (EBUSY) where the own cgroup holds processes and is not
            // the root: cgroup v2 lets only leaves hold processes.
            let _ = fs::write(own.join("cgroup.subtree_control"), format!("+{controller}"));
        }
        listed(&self.dir, "cgroup.controllers")
            && fs::write(
                self.dir.join("cgroup.subtree_control"),
                format!("+{controller}"),
            )
            .is_ok()
            && listed(&self.dir, "cgroup.subtree_control")
    }

    pub(super) fn new_child(&self) -> io::Result<CommandCgroup> {
        let dir = self
            .dir
            .join(format!("cmd-{}", self.next.fetch_add(1, Ordering::Relaxed)));
        fs::create_dir(&dir)?;
        Ok(CommandCgroup {
            dir,
            hierarchy: self.hierarchy,
            removed: false,
        })
    }
}

impl Drop for CgroupBase {
    fn drop(&mut self) {
        // Fails, harmlessly, while an abandoned command's cgroup is still
        // being cleaned up.
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Ends what a server that died without cleaning up left under `parent`: the
/// `agent-runner-PID-N` cgroups whose PID is gone. Their commands (orphans
/// still running, if any) are killed and the directories removed. A cgroup
/// whose owner is alive is never touched.
fn sweep_stale(parent: &Path, hierarchy: Hierarchy) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("agent-runner-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let base = entry.path();
        let children: Vec<PathBuf> = fs::read_dir(&base)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default();
        for child in &children {
            let _ = kill(child, hierarchy);
        }
        for child in &children {
            // A killed cgroup empties within milliseconds; give it a moment.
            for _ in 0..100 {
                if fs::remove_dir(child).is_ok() {
                    break;
                }
                let _ = kill(child, hierarchy);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        if fs::remove_dir(&base).is_ok() {
            tracing::info!(cgroup = %base.display(), "removed a cgroup left by a server that is gone");
        }
    }
}

/// One command's cgroup in one hierarchy.
#[derive(Debug)]
pub(super) struct CommandCgroup {
    pub(super) dir: PathBuf,
    hierarchy: Hierarchy,
    pub(super) removed: bool,
}

impl CommandCgroup {
    /// `cgroup.procs`, opened for the child to join by writing `0` to it.
    pub(super) fn open_procs(&self) -> io::Result<OwnedFd> {
        Ok(rustix::fs::open(
            self.dir.join("cgroup.procs"),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// Writes one limit file (`memory.max`, `pids.max`, ...).
    pub(super) fn set(&self, file: &str, value: u64) -> io::Result<()> {
        fs::write(self.dir.join(file), value.to_string())
    }

    /// Whether a limit file exists (`memory.memsw.limit_in_bytes` exists
    /// only with swap accounting).
    pub(super) fn has(&self, file: &str) -> bool {
        self.dir.join(file).is_file()
    }

    /// SIGKILLs every process in the cgroup (see [`kill`]).
    pub(super) fn kill(&self) -> io::Result<()> {
        kill(&self.dir, self.hierarchy)
    }

    pub(super) fn populated(&self) -> io::Result<bool> {
        is_populated(&self.dir, self.hierarchy)
    }

    /// Removes the (empty) cgroup; a failure is logged and leaves it behind.
    pub(super) fn remove(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        if let Err(error) = fs::remove_dir(&self.dir)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(%error, cgroup = %self.dir.display(), "could not remove a command's cgroup");
        }
    }
}

impl Drop for CommandCgroup {
    /// An abandoned command (its future dropped): kill what is left and
    /// remove the directory once it is empty, off the async runtime.
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let _ = self.kill();
        if fs::remove_dir(&self.dir).is_ok() {
            return;
        }
        let dir = std::mem::take(&mut self.dir);
        let hierarchy = self.hierarchy;
        let cleanup = move || {
            let deadline = std::time::Instant::now() + ABANDONED_CGROUP_GRACE;
            while matches!(is_populated(&dir, hierarchy), Ok(true))
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(EMPTY_POLL);
            }
            if let Err(error) = fs::remove_dir(&dir)
                && error.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(%error, cgroup = %dir.display(), "could not remove an abandoned command's cgroup");
            }
        };
        if let Err(error) = std::thread::Builder::new()
            .name("cgroup-cleanup".into())
            .spawn(cleanup)
        {
            tracing::warn!(%error, "could not start a cgroup cleanup thread");
        }
    }
}

/// SIGKILLs every process in the cgroup at `dir`: `cgroup.kill` in v2; in
/// v1, which has none, each process listed in `cgroup.procs` (the caller
/// repeats this until the cgroup is empty).
fn kill(dir: &Path, hierarchy: Hierarchy) -> io::Result<()> {
    match hierarchy {
        Hierarchy::Unified => fs::write(dir.join("cgroup.kill"), "1"),
        Hierarchy::Memory | Hierarchy::Pids => {
            for pid in fs::read_to_string(dir.join("cgroup.procs"))?
                .lines()
                .filter_map(|line| line.trim().parse::<i32>().ok())
                .filter_map(Pid::from_raw)
            {
                let _ = kill_process(pid, Signal::KILL);
            }
            Ok(())
        }
    }
}

fn is_populated(dir: &Path, hierarchy: Hierarchy) -> io::Result<bool> {
    match hierarchy {
        Hierarchy::Unified => {
            let events = fs::read_to_string(dir.join("cgroup.events"))?;
            Ok(events.lines().any(|line| line.trim() == "populated 1"))
        }
        // v1 has no cgroup.events: a cgroup is empty when it lists no
        // process.
        Hierarchy::Memory | Hierarchy::Pids => {
            let procs = fs::read_to_string(dir.join("cgroup.procs"))?;
            Ok(procs.lines().any(|line| !line.trim().is_empty()))
        }
    }
}

/// Where this process's cgroup in `hierarchy` is mounted: its line of
/// `/proc/self/cgroup` (`0::PATH` for v2, `N:CONTROLLERS:PATH` for v1)
/// placed under a mount of that hierarchy whose root contains it.
fn own_cgroup_dir(
    mountinfo: &str,
    membership: &str,
    hierarchy: Hierarchy,
) -> Result<PathBuf, String> {
    let own = membership
        .lines()
        .find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let matches = match hierarchy.controller() {
                None => controllers.is_empty() && line.starts_with("0::"),
                Some(wanted) => controllers.split(',').any(|c| c == wanted),
            };
            matches.then_some(path)
        })
        .ok_or_else(|| format!("this process is in no {} hierarchy", hierarchy.name()))?;
    if !own.starts_with('/') {
        return Err(format!("unexpected {} path {own:?}", hierarchy.name()));
    }
    for mount in cgroup_mounts(mountinfo, hierarchy) {
        let Some(below) = strip_mount_root(own, &mount.root) else {
            continue;
        };
        let mut dir = mount.point.clone();
        for part in below.split('/').filter(|part| !part.is_empty()) {
            if part == ".." || part == "." {
                return Err(format!("unexpected {} path {own:?}", hierarchy.name()));
            }
            dir.push(part);
        }
        return Ok(dir);
    }
    Err(format!(
        "no {} filesystem is mounted where this process's cgroup is visible",
        hierarchy.name()
    ))
}

/// `path` relative to a mount's `root`, when the mount shows it.
fn strip_mount_root<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    if root == "/" {
        return Some(path);
    }
    let rest = path.strip_prefix(root)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

#[derive(Debug, PartialEq, Eq)]
struct CgroupMount {
    root: String,
    point: PathBuf,
}

/// The mounts of `hierarchy` in a `/proc/self/mountinfo` text: fields are
/// `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE
/// SUPER_OPTIONS`, with spaces and the like escaped as octal (`\040`). A v1
/// hierarchy is a `cgroup` mount whose super options name its controller.
fn cgroup_mounts(mountinfo: &str, hierarchy: Hierarchy) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (mount, filesystem) = line.split_once(" - ")?;
            let mut filesystem = filesystem.split(' ');
            let fstype = filesystem.next()?;
            let wanted = match hierarchy.controller() {
                None => fstype == "cgroup2",
                Some(controller) => {
                    fstype == "cgroup"
                        && filesystem
                            .nth(1)
                            .is_some_and(|options| options.split(',').any(|o| o == controller))
                }
            };
            if !wanted {
                return None;
            }
            let mut fields = mount.split(' ');
            let root = fields.nth(3)?;
            let point = fields.next()?;
            Some(CgroupMount {
                root: unescape_octal(root),
                point: PathBuf::from(unescape_octal(point)),
            })
        })
        .collect()
}

fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(octal) = bytes.get(i + 1..i + 4)
            && octal.iter().all(|b| (b'0'..=b'7').contains(b))
        {
            out.push(
                octal
                    .iter()
                    .fold(0u8, |n, b| n.wrapping_mul(8) + (b - b'0')),
            );
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
";

    const HYBRID_MEMBERSHIP: &str = "\
8:pids:/
4:memory:/jobs/a1
1:cpu,cpuacct:/
0::/
";

    #[test]
    fn a_dead_servers_cgroups_are_swept_and_a_live_ones_kept() {
        let Ok(base) = CgroupBase::create(Hierarchy::Unified) else {
            return; // no writable cgroup v2 here: nothing to sweep
        };
        let parent = base.dir.parent().expect("a parent cgroup").to_owned();
        // No process has this id: it is above every kernel's pid_max.
        let dead = parent.join("agent-runner-999999999-0");
        fs::create_dir(&dead).expect("a cgroup for a dead server");
        fs::create_dir(dead.join("cmd-0")).expect("a command cgroup");
        let live = parent.join(format!("agent-runner-{}-99", std::process::id()));
        fs::create_dir(&live).expect("a cgroup for this process");
        sweep_stale(&parent, Hierarchy::Unified);
        assert!(!dead.exists(), "the dead server's cgroup is removed");
        assert!(live.exists(), "this process's cgroup is kept");
        fs::remove_dir(&live).expect("cleanup");
    }

    #[test]
    fn finds_every_hierarchy_of_a_hybrid_layout() {
        assert_eq!(
            cgroup_mounts(HYBRID, Hierarchy::Unified),
            vec![CgroupMount {
                root: "/".into(),
                point: "/sys/fs/cgroup/unified".into()
            }]
        );
        let own = |hierarchy| own_cgroup_dir(HYBRID, HYBRID_MEMBERSHIP, hierarchy);
        assert_eq!(
            own(Hierarchy::Unified),
            Ok(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            own(Hierarchy::Memory),
            Ok(PathBuf::from("/sys/fs/cgroup/memory/jobs/a1"))
        );
        assert_eq!(
            own(Hierarchy::Pids),
            Ok(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(
            own_cgroup_dir(
                HYBRID,
                "0::/system.slice/runner.service\n",
                Hierarchy::Unified
            ),
            Ok(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/runner.service"
            ))
        );
    }

    #[test]
    fn a_mount_of_a_subtree_only_shows_what_is_below_its_root() {
        let mountinfo = "50 1 0:40 /jobs /mnt/my\\040cgroups rw - cgroup2 none rw\n";
        let own = |membership| own_cgroup_dir(mountinfo, membership, Hierarchy::Unified);
        assert_eq!(own("0::/jobs/a\n"), Ok(PathBuf::from("/mnt/my cgroups/a")));
        assert!(own("0::/jobsx/a\n").is_err());
        assert!(own("0::/other\n").is_err());
    }

    #[test]
    fn a_missing_hierarchy_means_no_cgroup_dir() {
        assert!(
            own_cgroup_dir(
                "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
                "0::/\n",
                Hierarchy::Unified
            )
            .is_err()
        );
        assert!(own_cgroup_dir(HYBRID, "1:cpu:/\n", Hierarchy::Unified).is_err());
        assert!(own_cgroup_dir(HYBRID, "0::/\n", Hierarchy::Memory).is_err());
        // A cpu hierarchy is no memory hierarchy, whatever the membership says.
        assert!(
            own_cgroup_dir(
                "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
                "4:memory:/\n",
                Hierarchy::Memory
            )
            .is_err()
        );
    }
}
