//! Keeping a command's whole process tree together, and ending all of it.
//!
//! Killing a child leaves its children alive; killing its process group leaves
//! any descendant that called `setsid` (or `setpgid`). So each command runs:
//!
//! 1. **in a cgroup v2 of its own**, where the machine offers a writable one.
//!    [`Containment::detect`] finds the cgroup2 mount in
//!    `/proc/self/mountinfo` (on a hybrid layout it sits beside the v1
//!    hierarchies, e.g. at `/sys/fs/cgroup/unified`), finds this process's
//!    cgroup in the `0::` line of `/proc/self/cgroup`, and creates one
//!    directory below it for this server (`agent-runner-PID-N`). Each command
//!    gets a child cgroup there (`cmd-N`). The child process joins it between
//!    `fork` and `exec` (a `pre_exec` hook writes `0` to the cgroup's
//!    `cgroup.procs` through a descriptor opened before the fork), so the
//!    command is inside before any of its own code runs and nothing it forks
//!    can start outside. Ending it writes `1` to `cgroup.kill` (Linux 5.14),
//!    which SIGKILLs every process in the cgroup, `setsid` or not, and then
//!    waits for `cgroup.events` to say `populated 0` before removing the
//!    directory.
//! 2. **in a process group of its own** (`setpgid(0, 0)` at spawn), always.
//!    Where no cgroup is writable this is the only containment, and a
//!    descendant that leaves the group escapes it; [`Containment::detect`]
//!    says so once in the log.
//!
//! `clone3(CLONE_INTO_CGROUP)` (Linux 5.7) would create the child directly in
//! its cgroup, but neither std nor tokio can spawn with it, and doing so by
//! hand would mean re-implementing spawn (pipes, signal masks, exec error
//! reporting) in unsafe code. Joining in `pre_exec` is equally race-free for
//! the command, because it runs before `exec`; its cost is that `pre_exec`
//! needs `unsafe` and makes std fork rather than use `posix_spawn`.
//!
//! The main process's exit is watched through a pidfd (Linux 5.3) rather than
//! by waiting for it: the process stays an unreaped zombie until the tree has
//! been killed, so its pid, which is also the process group id, cannot be
//! reused by an unrelated process in between. Without pidfds the exit is
//! waited for directly, which leaves a tiny window in which a reused group id
//! could be signalled.
//!
//! Killed descendants are reparented to init (or the nearest subreaper) and
//! reaped there; only the command's main process is this server's child.
//!
//! This is the one module allowed `unsafe` code: the `pre_exec` hook, and
//! registering the pidfd with the runtime.

#![allow(unsafe_code)]

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use rustix::process::{Pid, PidfdFlags, Signal, kill_process_group, pidfd_open};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

/// How often `cgroup.events` is re-read while waiting for a cgroup to empty.
const EMPTY_POLL: Duration = Duration::from_millis(5);

/// How long a cgroup abandoned by a dropped command is given to empty before
/// its directory is left behind.
const ABANDONED_CGROUP_GRACE: Duration = Duration::from_secs(30);

/// Which mechanism holds a command's process tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainmentKind {
    /// A cgroup v2 per command, ended with `cgroup.kill`, plus a process
    /// group.
    Cgroup,
    /// A process group only: a descendant that calls `setsid` escapes it.
    ProcessGroup,
}

/// How commands are contained: detected once when the server starts and
/// shared by every run.
#[derive(Debug)]
pub struct Containment {
    cgroup: Option<CgroupBase>,
}

impl Containment {
    /// A cgroup per command where this process's cgroup v2 is writable, else
    /// process groups only. Logs which, once per call: call it once at start.
    pub fn detect() -> Self {
        match CgroupBase::create() {
            Ok(base) => {
                tracing::info!(
                    cgroup = %base.dir.display(),
                    "commands run in a cgroup v2 of their own and end with cgroup.kill"
                );
                Self { cgroup: Some(base) }
            }
            Err(reason) => {
                tracing::warn!(
                    %reason,
                    "no writable cgroup v2: commands are contained by their process group \
                     only, and a descendant that calls setsid can outlive its command"
                );
                Self::process_group_only()
            }
        }
    }

    /// Process groups only, whatever the machine offers.
    pub fn process_group_only() -> Self {
        Self { cgroup: None }
    }

    pub fn kind(&self) -> ContainmentKind {
        match self.cgroup {
            Some(_) => ContainmentKind::Cgroup,
            None => ContainmentKind::ProcessGroup,
        }
    }

    /// The cgroup under which each command gets its own, if any.
    pub fn cgroup_dir(&self) -> Option<&Path> {
        self.cgroup.as_ref().map(|base| base.dir.as_path())
    }

    /// Spawns `command` in a process group of its own and, where available,
    /// a cgroup of its own. The command's stdio is the caller's to set; it is
    /// killed when the returned handle is dropped.
    pub(crate) fn spawn(&self, mut command: Command) -> io::Result<ContainedChild> {
        command.process_group(0).kill_on_drop(true);
        let cgroup = self
            .cgroup
            .as_ref()
            .map(CgroupBase::new_child)
            .transpose()?;
        if let Some(cgroup) = &cgroup {
            let procs = Arc::new(cgroup.open_procs()?);
            // SAFETY: the hook runs in the forked child before `exec`, where
            // only async-signal-safe work is allowed. It makes one `write(2)`
            // system call (rustix issues it directly: no allocation, no lock)
            // on a descriptor opened before the fork, and turns a failure
            // into an `io::Error` from the raw errno, which does not allocate
            // either. The `Arc` is only dereferenced, never dropped, in the
            // child.
            unsafe {
                command.pre_exec(move || join_cgroup(&procs));
            }
        }
        let mut child = command.spawn()?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
            .ok_or_else(|| io::Error::other("the spawned command has no process id"))?;
        // Not yet waited for, so the pid cannot have been reused.
        let exit_watch = pidfd_open(pid, PidfdFlags::empty()).ok().and_then(|pidfd| {
            // SAFETY: `pidfd` is an open descriptor that the `AsyncFd`
            // takes ownership of; `OwnedFd::as_raw_fd` always returns that
            // same descriptor, and no `&mut` access is ever used to swap
            // it, so it stays the registered one until the `AsyncFd` is
            // dropped.
            unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }.ok()
        });
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        Ok(ContainedChild {
            child,
            pid,
            exit_watch,
            cgroup,
            status: None,
            group_killed: false,
            stdout,
            stderr,
        })
    }
}

/// Runs in the forked child: moves it (`0` means the writer) into the cgroup.
fn join_cgroup(procs: &OwnedFd) -> io::Result<()> {
    rustix::io::write(procs, b"0")
        .map(drop)
        .map_err(io::Error::from)
}

/// A spawned command and everything it forks. Dropping it kills the whole
/// tree; the command's own cgroup is removed once it is empty.
#[derive(Debug)]
pub(crate) struct ContainedChild {
    child: Child,
    pid: Pid,
    /// A pidfd of the main process: readable once it has exited, without
    /// reaping it.
    exit_watch: Option<AsyncFd<OwnedFd>>,
    cgroup: Option<CommandCgroup>,
    /// Set once the main process has been reaped.
    status: Option<ExitStatus>,
    /// The process group has been sent SIGKILL at least once.
    group_killed: bool,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

impl ContainedChild {
    pub(crate) fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    pub(crate) fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.stderr.take()
    }

    /// Resolves once the main process has exited. With a pidfd it is not
    /// reaped yet, so its pid and group id stay reserved until
    /// [`ContainedChild::kill_tree`]. Cancel-safe.
    pub(crate) async fn exited(&mut self) {
        if self.status.is_some() {
            return;
        }
        if let Some(watch) = &self.exit_watch {
            match watch.readable().await {
                Ok(_) => return,
                // Cannot happen for a registered pidfd; wait the plain way.
                Err(_) => self.exit_watch = None,
            }
        }
        if let Ok(status) = self.child.wait().await {
            self.status = Some(status);
        }
    }

    /// SIGKILLs every process of the tree: the cgroup (if any), the process
    /// group, and the main process itself in case it left its group.
    /// Safe to call again: nothing is signalled that could have been reused.
    pub(crate) fn kill_tree(&mut self) {
        if let Some(cgroup) = &self.cgroup
            && !cgroup.removed
            && let Err(error) = cgroup.kill()
        {
            tracing::warn!(%error, cgroup = %cgroup.dir.display(), "cgroup.kill failed");
        }
        // The group id is the main process's pid, reserved while that process
        // is unreaped. It was reaped before the tree was killed only without
        // a pidfd; the group is then signalled once, as soon as possible.
        if self.status.is_none() || !self.group_killed {
            // ESRCH: the group is already empty.
            let _ = kill_process_group(self.pid, Signal::KILL);
            self.group_killed = true;
        }
        if self.status.is_none() {
            let _ = self.child.start_kill();
        }
    }

    /// Reaps the main process, waiting at most `within` (a SIGKILLed process
    /// exits at once, unless it is stuck in the kernel). `None` if it did not
    /// exit in time.
    pub(crate) async fn reap(&mut self, within: Duration) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Ok(Ok(status)) = tokio::time::timeout(within, self.child.wait()).await
        {
            self.status = Some(status);
        }
        self.status
    }

    /// Waits at most `within` until no process of the tree is left, and then
    /// removes the command's cgroup. With a process group only, there is
    /// nothing to wait on: the group was signalled and the dying members are
    /// reaped by their new parent. Returns whether the tree is known gone.
    pub(crate) async fn wait_gone(&mut self, within: Duration) -> bool {
        let Some(cgroup) = &mut self.cgroup else {
            return true;
        };
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match cgroup.populated() {
                Ok(false) => {
                    cgroup.remove();
                    return true;
                }
                Ok(true) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(EMPTY_POLL).await;
                }
                _ => return false,
            }
        }
    }
}

impl Drop for ContainedChild {
    fn drop(&mut self) {
        self.kill_tree();
        // `child` is killed again and reaped in the background by tokio
        // (`kill_on_drop`); the cgroup cleans itself up in its own drop.
    }
}

/// The directory under which this server creates one cgroup per command.
#[derive(Debug)]
struct CgroupBase {
    dir: PathBuf,
    next: AtomicU64,
}

impl CgroupBase {
    fn create() -> Result<Self, String> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|error| format!("reading /proc/self/mountinfo: {error}"))?;
        let membership = fs::read_to_string("/proc/self/cgroup")
            .map_err(|error| format!("reading /proc/self/cgroup: {error}"))?;
        let own = own_cgroup_dir(&mountinfo, &membership)?;
        if !own.join("cgroup.procs").is_file() {
            return Err(format!("{} is not a cgroup v2 directory", own.display()));
        }
        sweep_stale(&own);
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
        if !dir.join("cgroup.kill").is_file() {
            let _ = fs::remove_dir(&dir);
            return Err("this kernel has no cgroup.kill (Linux 5.14+)".into());
        }
        Ok(Self {
            dir,
            next: AtomicU64::new(0),
        })
    }

    fn new_child(&self) -> io::Result<CommandCgroup> {
        let dir = self
            .dir
            .join(format!("cmd-{}", self.next.fetch_add(1, Ordering::Relaxed)));
        fs::create_dir(&dir)?;
        Ok(CommandCgroup {
            dir,
            removed: false,
        })
    }
}

/// Ends what a server that died without cleaning up left under `parent`: the
/// `agent-runner-PID-N` cgroups whose PID is gone. Their commands (orphans
/// still running, if any) are killed and the directories removed. A cgroup
/// whose owner is alive is never touched.
fn sweep_stale(parent: &Path) {
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
            let _ = fs::write(child.join("cgroup.kill"), "1");
        }
        for child in &children {
            // A killed cgroup empties within milliseconds; give it a moment.
            for _ in 0..100 {
                if fs::remove_dir(child).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        if fs::remove_dir(&base).is_ok() {
            tracing::info!(cgroup = %base.display(), "removed a cgroup left by a server that is gone");
        }
    }
}

impl Drop for CgroupBase {
    fn drop(&mut self) {
        // Fails, harmlessly, while an abandoned command's cgroup is still
        // being cleaned up.
        let _ = fs::remove_dir(&self.dir);
    }
}

/// One command's cgroup.
#[derive(Debug)]
struct CommandCgroup {
    dir: PathBuf,
    removed: bool,
}

impl CommandCgroup {
    fn open_procs(&self) -> io::Result<OwnedFd> {
        Ok(rustix::fs::open(
            self.dir.join("cgroup.procs"),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    fn kill(&self) -> io::Result<()> {
        fs::write(self.dir.join("cgroup.kill"), "1")
    }

    fn populated(&self) -> io::Result<bool> {
        is_populated(&self.dir)
    }

    /// Removes the (empty) cgroup; a failure is logged and leaves it behind.
    fn remove(&mut self) {
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
        let cleanup = move || {
            let deadline = std::time::Instant::now() + ABANDONED_CGROUP_GRACE;
            while matches!(is_populated(&dir), Ok(true)) && std::time::Instant::now() < deadline {
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

fn is_populated(dir: &Path) -> io::Result<bool> {
    let events = fs::read_to_string(dir.join("cgroup.events"))?;
    Ok(events.lines().any(|line| line.trim() == "populated 1"))
}

/// Where this process's cgroup v2 directory is mounted: the `0::PATH` line of
/// `/proc/self/cgroup` placed under a cgroup2 mount whose root contains it.
fn own_cgroup_dir(mountinfo: &str, membership: &str) -> Result<PathBuf, String> {
    let own = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 hierarchy")?;
    if !own.starts_with('/') {
        return Err(format!("unexpected cgroup v2 path {own:?}"));
    }
    for mount in cgroup2_mounts(mountinfo) {
        let Some(below) = strip_mount_root(own, &mount.root) else {
            continue;
        };
        let mut dir = mount.point.clone();
        for part in below.split('/').filter(|part| !part.is_empty()) {
            if part == ".." || part == "." {
                return Err(format!("unexpected cgroup v2 path {own:?}"));
            }
            dir.push(part);
        }
        return Ok(dir);
    }
    Err("no cgroup2 filesystem is mounted where this process's cgroup is visible".into())
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
struct Cgroup2Mount {
    root: String,
    point: PathBuf,
}

/// The cgroup2 mounts of a `/proc/self/mountinfo` text: fields are
/// `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE
/// SUPER_OPTIONS`, with spaces and the like escaped as octal (`\040`).
fn cgroup2_mounts(mountinfo: &str) -> Vec<Cgroup2Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (mount, filesystem) = line.split_once(" - ")?;
            if filesystem.split(' ').next()? != "cgroup2" {
                return None;
            }
            let mut fields = mount.split(' ');
            let root = fields.nth(3)?;
            let point = fields.next()?;
            Some(Cgroup2Mount {
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
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
";

    #[test]
    fn a_dead_servers_cgroups_are_swept_and_a_live_ones_kept() {
        let Ok(base) = CgroupBase::create() else {
            return; // no writable cgroup v2 here: nothing to sweep
        };
        let parent = base.dir.parent().expect("a parent cgroup").to_owned();
        // No process has this id: it is above every kernel's pid_max.
        let dead = parent.join("agent-runner-999999999-0");
        fs::create_dir(&dead).expect("a cgroup for a dead server");
        fs::create_dir(dead.join("cmd-0")).expect("a command cgroup");
        let live = parent.join(format!("agent-runner-{}-99", std::process::id()));
        fs::create_dir(&live).expect("a cgroup for this process");
        sweep_stale(&parent);
        assert!(!dead.exists(), "the dead server's cgroup is removed");
        assert!(live.exists(), "this process's cgroup is kept");
        fs::remove_dir(&live).expect("cleanup");
    }

    #[test]
    fn finds_the_cgroup2_mount_of_a_hybrid_layout() {
        assert_eq!(
            cgroup2_mounts(HYBRID),
            vec![Cgroup2Mount {
                root: "/".into(),
                point: "/sys/fs/cgroup/unified".into()
            }]
        );
        assert_eq!(
            own_cgroup_dir(HYBRID, "1:cpu:/\n0::/\n"),
            Ok(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            own_cgroup_dir(HYBRID, "0::/system.slice/runner.service\n"),
            Ok(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/runner.service"
            ))
        );
    }

    #[test]
    fn a_mount_of_a_subtree_only_shows_what_is_below_its_root() {
        let mountinfo = "50 1 0:40 /jobs /mnt/my\\040cgroups rw - cgroup2 none rw\n";
        assert_eq!(
            own_cgroup_dir(mountinfo, "0::/jobs/a\n"),
            Ok(PathBuf::from("/mnt/my cgroups/a"))
        );
        assert!(own_cgroup_dir(mountinfo, "0::/jobsx/a\n").is_err());
        assert!(own_cgroup_dir(mountinfo, "0::/other\n").is_err());
    }

    #[test]
    fn no_cgroup2_means_no_cgroup_dir() {
        assert!(
            own_cgroup_dir(
                "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw\n",
                "0::/\n"
            )
            .is_err()
        );
        assert!(own_cgroup_dir(HYBRID, "1:cpu:/\n").is_err());
    }

    #[test]
    fn this_machine_offers_a_writable_cgroup() {
        let containment = Containment::detect();
        assert_eq!(containment.kind(), ContainmentKind::Cgroup);
        let dir = containment.cgroup_dir().unwrap().to_owned();
        assert!(dir.is_dir());
        drop(containment);
        assert!(!dir.exists(), "the server's cgroup directory is removed");
    }
}
