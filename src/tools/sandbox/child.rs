//! The steps a command's child process takes between `fork` and `exec`.
//!
//! They run in the forked copy of a multi-threaded server, where only
//! async-signal-safe work is allowed: everything that allocates or takes a
//! lock (opening the paths of the Landlock rules, compiling the seccomp
//! filter, creating the cgroups) is done before the fork, and this module
//! only makes system calls on what was prepared. A failure is reported as a
//! raw errno (all that crosses back to the parent) and the command does not
//! start: a command is never run less confined than it was asked to be.
//!
//! The order matters:
//! 1. join the command's cgroups, while the child may still write cgroup
//!    files;
//! 2. `RLIMIT_AS`, where no memory cgroup could be used;
//! 3. its own mount namespace (in its own user namespace, for a server
//!    that is not root), with `/workspace`, `/tmp` and `/dev/shm`, and
//!    every other mount read-only ([`super::mounts`]), while it may still
//!    mount; and its own PID namespace, whose init ([`super::init`]) is
//!    forked here and takes the steps below on itself (the process
//!    outside only waits);
//! 4. drop every capability from the bounding set (so an `exec` as root
//!    regains none) and the ambient set;
//! 5. become the command's user ([`super::identity`]): no supplementary
//!    groups, then its group, then its user, which also empties the
//!    effective and permitted sets of a child of a root server;
//! 6. empty the effective, permitted and inheritable sets (a server that is
//!    not root keeps its user): nothing makes the command more than a file
//!    owner (raw sockets, mounts, `ptrace`, overriding file permissions,
//!    loading modules);
//! 7. Landlock's `restrict_self`, which also sets `PR_SET_NO_NEW_PRIVS`;
//! 8. the seccomp filters, since they could refuse a step above;
//! 9. with a PID namespace, the init forks the command, which goes on to
//!    `exec`.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use landlock::{RulesetCreated, RulesetStatus};
use rustix::io::Errno;
use rustix::process::{Resource, Rlimit, setrlimit};
use rustix::thread::{
    CapabilitySet, CapabilitySets, clear_ambient_capability_set,
    remove_capability_from_bounding_set, set_capabilities, set_no_new_privs, set_thread_groups,
    set_thread_res_gid, set_thread_res_uid,
};
use seccompiler::BpfProgram;

use super::identity::RunAs;
use super::mounts::Layout;

/// Everything a child applies to itself before `exec`, prepared by the
/// parent.
#[derive(Debug, Default)]
pub(crate) struct ChildSetup {
    /// `cgroup.procs` of each cgroup to join, in order.
    pub(super) cgroups: Vec<OwnedFd>,
    /// `RLIMIT_AS`, soft and hard.
    pub(super) address_space: Option<u64>,
    /// The kernel confinement (`mode = "enforce"`); `None` runs unconfined.
    pub(super) confinement: Option<Confinement>,
}

/// Landlock rules, the seccomp filters of a command without network, and
/// the command's own layout and user where the server can give them.
#[derive(Debug)]
pub(super) struct Confinement {
    pub(super) landlock: RulesetCreated,
    /// The same ruleset's descriptor, for the rule of a `/proc` mounted
    /// in the child.
    pub(super) landlock_fd: Option<OwnedFd>,
    /// Empty when the command may use the network.
    pub(super) filters: Arc<[BpfProgram]>,
    pub(super) layout: Option<Layout>,
    pub(super) run_as: Option<RunAs>,
}

impl ChildSetup {
    /// Runs in the forked child. Async-signal-safe: system calls only, on
    /// descriptors and memory prepared before the fork.
    pub(super) fn apply(&mut self) -> io::Result<()> {
        for procs in &self.cgroups {
            // `0` moves the writer.
            rustix::io::write(procs, b"0")?;
        }
        if let Some(bytes) = self.address_space {
            setrlimit(
                Resource::As,
                Rlimit {
                    current: Some(bytes),
                    maximum: Some(bytes),
                },
            )?;
        }
        let Some(confinement) = &self.confinement else {
            return Ok(());
        };
        let mut init = None;
        if let Some(layout) = &confinement.layout {
            layout.apply()?;
            // From here on this is the PID namespace's init, if the
            // command has one (the process outside waits and never comes
            // back): confined like the command, then it forks it.
            init = layout.enter_pids(
                confinement
                    .landlock_fd
                    .as_ref()
                    .map(std::os::fd::AsRawFd::as_raw_fd),
            )?;
        }
        drop_bounding_and_ambient()?;
        if let Some(user) = confinement.run_as {
            set_thread_groups(&[])?;
            set_thread_res_gid(user.gid(), user.gid(), user.gid())?;
            set_thread_res_uid(user.uid(), user.uid(), user.uid())?;
        }
        set_capabilities(
            None,
            CapabilitySets {
                effective: CapabilitySet::empty(),
                permitted: CapabilitySet::empty(),
                inheritable: CapabilitySet::empty(),
            },
        )?;
        // `try_clone` duplicates the descriptor (one `fcntl`), since
        // `restrict_self` takes the ruleset by value and this hook may only
        // borrow what the parent prepared.
        let status = confinement
            .landlock
            .try_clone()?
            .restrict_self()
            .map_err(|_| io::Error::last_os_error())?;
        if status.ruleset == RulesetStatus::NotEnforced {
            return Err(Errno::NOSYS.into());
        }
        set_no_new_privs(true)?;
        for filter in confinement.filters.iter() {
            seccompiler::apply_filter(filter).map_err(|_| io::Error::last_os_error())?;
        }
        match init {
            Some(init) => init.start_command(),
            None => Ok(()),
        }
    }
}

/// Empties the bounding and ambient capability sets of the calling thread.
/// Without `CAP_SETPCAP` (an unprivileged server) the bounding set cannot
/// shrink, but there is then nothing in it an `exec` could grant under
/// `no_new_privs`.
fn drop_bounding_and_ambient() -> io::Result<()> {
    for bit in 0..64 {
        match remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(1 << bit)) {
            Ok(()) => {}
            // EINVAL: past the kernel's last capability.
            Err(Errno::INVAL | Errno::PERM) => break,
            Err(errno) => return Err(errno.into()),
        }
    }
    match clear_ambient_capability_set() {
        // EINVAL: a kernel without ambient capabilities (before 4.3).
        Ok(()) | Err(Errno::INVAL) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}
