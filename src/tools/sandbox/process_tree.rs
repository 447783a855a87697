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
//! 3. **under limits** ([`Resources`]): `memory.max` and `pids.max` of its
//!    cgroup v2 where those controllers can be enabled below this server;
//!    else, on a hybrid machine, a cgroup of its own in each of the v1
//!    `memory` and `pids` hierarchies (joined the same way, before exec;
//!    without a cgroup v2 the v1 pids cgroup also lists the tree to kill);
//!    else `RLIMIT_AS` for memory and nothing for processes.
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
//! This is the one module allowed `unsafe` code: registering the `pre_exec`
//! hook (whose steps are in [`super::child`]), and registering the pidfd
//! with the runtime.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::{Pid, PidfdFlags, Signal, kill_process_group, pidfd_open};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::cgroup::{CgroupBase, CommandCgroup, EMPTY_POLL, Hierarchy};
use super::child::ChildSetup;

/// Which mechanism holds a command's process tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainmentKind {
    /// A cgroup v2 per command, ended with `cgroup.kill`, plus a process
    /// group.
    Cgroup,
    /// A process group only: a descendant that calls `setsid` escapes it.
    ProcessGroup,
}

/// What bounds a command's memory.
#[derive(Debug)]
enum MemoryBy {
    /// `memory.max` of its cgroup v2.
    Unified,
    /// `memory.limit_in_bytes` of its cgroup in the v1 memory hierarchy.
    V1(CgroupBase),
    /// `RLIMIT_AS` of each of its processes: virtual memory, not resident.
    AddressSpace,
    /// Nothing (only [`Containment::process_group_only`]).
    Unbounded,
}

/// What bounds a command's number of processes.
#[derive(Debug)]
enum PidsBy {
    /// `pids.max` of its cgroup v2.
    Unified,
    /// `pids.max` of its cgroup in the v1 pids hierarchy.
    V1(CgroupBase),
    /// Nothing: a root server ignores `RLIMIT_NPROC`, and it counts per
    /// user rather than per command anyway.
    Unbounded,
}

/// The limits one command asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    pub memory_max_bytes: u64,
    pub pids_max: u64,
}

/// The limits a command actually got (`None`: unbounded here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedLimits {
    pub memory_max_bytes: Option<u64>,
    pub pids_max: Option<u64>,
}

/// How commands are contained and limited: detected once when the server
/// starts and shared by every run.
#[derive(Debug)]
pub struct Containment {
    cgroup: Option<CgroupBase>,
    memory: MemoryBy,
    pids: PidsBy,
}

impl Containment {
    /// A cgroup v2 per command where this process's cgroup v2 is writable,
    /// else process groups only; limits on the best mechanism there is (v2
    /// controllers, else the v1 hierarchies, else `RLIMIT_AS` for memory).
    /// Logs what it found: call it once at start.
    pub fn detect() -> Self {
        let cgroup = match CgroupBase::create(Hierarchy::Unified) {
            Ok(base) => {
                tracing::info!(
                    cgroup = %base.dir.display(),
                    "commands run in a cgroup v2 of their own and end with cgroup.kill"
                );
                Some(base)
            }
            Err(reason) => {
                tracing::warn!(
                    %reason,
                    "no writable cgroup v2: commands are contained by their process group \
                     (and their PID namespace, where the sandbox gives them one: without it, \
                     a descendant that calls setsid can outlive its command)"
                );
                None
            }
        };
        let v2 = |controller| {
            cgroup
                .as_ref()
                .is_some_and(|b| b.enable_controller(controller))
        };
        let v1 = |hierarchy| {
            CgroupBase::create(hierarchy)
                .inspect_err(|reason| tracing::debug!(%reason, "no usable v1 hierarchy"))
                .ok()
        };
        let memory = if v2("memory") {
            MemoryBy::Unified
        } else {
            v1(Hierarchy::Memory).map_or(MemoryBy::AddressSpace, MemoryBy::V1)
        };
        let pids = if v2("pids") {
            PidsBy::Unified
        } else {
            v1(Hierarchy::Pids).map_or(PidsBy::Unbounded, PidsBy::V1)
        };
        Self {
            cgroup,
            memory,
            pids,
        }
    }

    /// Process groups only and no limits, whatever the machine offers.
    pub fn process_group_only() -> Self {
        Self {
            cgroup: None,
            memory: MemoryBy::Unbounded,
            pids: PidsBy::Unbounded,
        }
    }

    pub fn kind(&self) -> ContainmentKind {
        match self.cgroup {
            Some(_) => ContainmentKind::Cgroup,
            None => ContainmentKind::ProcessGroup,
        }
    }

    /// What bounds a command's memory, for the log and the README's words.
    pub fn memory_mechanism(&self) -> &'static str {
        match self.memory {
            MemoryBy::Unified => "cgroup v2 memory.max",
            MemoryBy::V1(_) => "cgroup v1 memory.limit_in_bytes",
            MemoryBy::AddressSpace => "RLIMIT_AS (no writable memory cgroup)",
            MemoryBy::Unbounded => "none",
        }
    }

    /// What bounds a command's processes.
    pub fn pids_mechanism(&self) -> &'static str {
        match self.pids {
            PidsBy::Unified => "cgroup v2 pids.max",
            PidsBy::V1(_) => "cgroup v1 pids.max",
            PidsBy::Unbounded => "none (no writable pids cgroup)",
        }
    }

    /// The cgroup under which each command gets its own, if any.
    pub fn cgroup_dir(&self) -> Option<&Path> {
        self.cgroup.as_ref().map(|base| base.dir.as_path())
    }

    /// Spawns `command` in a process group of its own and, where available,
    /// cgroups of its own with `resources` as limits. Between fork and exec
    /// the child joins those cgroups, then takes the steps of `setup`. The
    /// command's stdio is the caller's to set; it is killed when the
    /// returned handle is dropped.
    pub(crate) fn spawn(
        &self,
        mut command: Command,
        resources: Resources,
        mut setup: ChildSetup,
    ) -> io::Result<(ContainedChild, AppliedLimits)> {
        command.process_group(0).kill_on_drop(true);
        let mut applied = AppliedLimits {
            memory_max_bytes: None,
            pids_max: None,
        };
        let cgroup = self
            .cgroup
            .as_ref()
            .map(CgroupBase::new_child)
            .transpose()?;
        let mut joined = Vec::new();
        if let Some(cgroup) = &cgroup {
            if let MemoryBy::Unified = self.memory {
                cgroup.set("memory.max", resources.memory_max_bytes)?;
                // Swap would let a command use more than its limit.
                if cgroup.has("memory.swap.max") {
                    cgroup.set("memory.swap.max", 0)?;
                }
                applied.memory_max_bytes = Some(resources.memory_max_bytes);
            }
            if let PidsBy::Unified = self.pids {
                cgroup.set("pids.max", resources.pids_max)?;
                applied.pids_max = Some(resources.pids_max);
            }
            joined.push(cgroup.open_procs()?);
        }
        let mut limit_cgroups = Vec::new();
        match &self.memory {
            MemoryBy::V1(base) => {
                let memory = base.new_child()?;
                memory.set("memory.limit_in_bytes", resources.memory_max_bytes)?;
                // With swap accounting, memory plus swap gets the same bound.
                if memory.has("memory.memsw.limit_in_bytes") {
                    memory.set("memory.memsw.limit_in_bytes", resources.memory_max_bytes)?;
                }
                joined.push(memory.open_procs()?);
                limit_cgroups.push(memory);
                applied.memory_max_bytes = Some(resources.memory_max_bytes);
            }
            MemoryBy::AddressSpace => {
                setup.address_space = Some(resources.memory_max_bytes);
                applied.memory_max_bytes = Some(resources.memory_max_bytes);
            }
            MemoryBy::Unified | MemoryBy::Unbounded => {}
        }
        if let PidsBy::V1(base) = &self.pids {
            let pids = base.new_child()?;
            pids.set("pids.max", resources.pids_max)?;
            joined.push(pids.open_procs()?);
            limit_cgroups.push(pids);
            applied.pids_max = Some(resources.pids_max);
        }
        setup.cgroups = joined;
        // SAFETY: the hook runs in the forked child before `exec`, where
        // only async-signal-safe work is allowed. `ChildSetup::apply` makes
        // plain system calls on descriptors and data prepared before the
        // fork, allocates nothing, takes no lock, and reports a failure as a
        // raw errno (see `super::child`).
        unsafe {
            command.pre_exec(move || setup.apply());
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
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        Ok((
            ContainedChild {
                child,
                pid,
                exit_watch,
                cgroup,
                limit_cgroups,
                status: None,
                group_killed: false,
                stdin,
                stdout,
                stderr,
            },
            applied,
        ))
    }
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
    /// Its cgroups in the v1 hierarchies that hold its limits.
    limit_cgroups: Vec<CommandCgroup>,
    /// Set once the main process has been reaped.
    status: Option<ExitStatus>,
    /// The process group has been sent SIGKILL at least once.
    group_killed: bool,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

impl ContainedChild {
    pub(crate) fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

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
    /// group, and the main process itself in case it left its group. Without
    /// a cgroup v2, the processes listed in its v1 limit cgroups are killed
    /// one by one, which catches a descendant that left the group.
    /// Safe to call again: nothing is signalled that could have been reused.
    pub(crate) fn kill_tree(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            if !cgroup.removed
                && let Err(error) = cgroup.kill()
            {
                tracing::warn!(%error, cgroup = %cgroup.dir.display(), "cgroup.kill failed");
            }
        } else {
            for cgroup in self.limit_cgroups.iter().filter(|c| !c.removed) {
                let _ = cgroup.kill();
            }
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
    /// removes the command's cgroups. With a process group only, there is
    /// nothing to wait on: the group was signalled and the dying members are
    /// reaped by their new parent. Returns whether the tree is known gone.
    pub(crate) async fn wait_gone(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let mut populated = false;
            for cgroup in self.cgroup.iter().chain(&self.limit_cgroups) {
                match cgroup.populated() {
                    Ok(false) => {}
                    Ok(true) => populated = true,
                    Err(_) => return false,
                }
            }
            if !populated {
                for cgroup in self.cgroup.iter_mut().chain(&mut self.limit_cgroups) {
                    cgroup.remove();
                }
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            if self.cgroup.is_none() {
                // v1 has no cgroup.kill: a process forked since the last
                // round is killed in this one.
                self.kill_tree();
            }
            tokio::time::sleep(EMPTY_POLL).await;
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

#[cfg(test)]
mod tests {
    use super::*;

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
