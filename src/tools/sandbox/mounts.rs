//! What a command sees of the filesystem's layout: its workspace at
//! `/workspace`, its private temporary directory at `/tmp`, and a private
//! `/dev/shm` (Python's `multiprocessing`, Node's workers), in a mount
//! namespace of its own. No path of the server's layout (its
//! `workspaces_dir`, a run's id) appears in what a command prints, and no
//! two commands share a `/tmp` or a `/dev/shm`. Every other mount is made
//! read-only there (`mount_setattr`, recursively, then its own directories
//! writable again): Landlock does not mediate `chmod`, `chown`, `utime`,
//! so this is what keeps a command from changing what it reaches by a path
//! outside its own directories (another run's files, the server's
//! database and their directories), whoever owns them.
//!
//! The private directories are bind mounts of directories the server made
//! for the command (inside its TMPDIR), so the Landlock rules that grant
//! them, which hold the directories' inodes, hold there too. Making a mount
//! namespace takes `CAP_SYS_ADMIN`: a root server has it; a server that is
//! not root gets it in a user namespace of the command's own, in which the
//! server's user is mapped to itself (so the command's files are the
//! server's, and it gains no right outside), where the kernel allows one
//! (not in a chroot, nor under a seccomp profile that refuses `unshare`: a
//! probe at start tells). Elsewhere the command runs at the real paths (the
//! start-up log says so).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountPropagationFlags, mount_bind, mount_bind_recursive, mount_change};
use rustix::thread::UnshareFlags;

/// Where a command sees its workspace.
pub const WORKSPACE: &str = "/workspace";
/// Where a command sees its private temporary directory (its `TMPDIR`),
/// unless one of its read paths lies under the server's `/tmp`.
pub const TMP: &str = "/tmp";
/// Shared memory, private to the command.
const SHM: &str = "/dev/shm";

/// What commands get on this machine: how their mount namespace is made,
/// and whether a PID namespace of their own (with a `/proc` of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    pub namespaces: Namespaces,
    pub pids: Pids,
}

/// A command's own PID namespace, as far as this machine allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pids {
    /// Its own namespace with its own `/proc`: it sees and signals only
    /// its own processes.
    Own,
    /// Its own namespace, but `/proc` cannot be mounted for it (a
    /// container that masks parts of its `/proc`): it signals only its own
    /// processes, but `/proc` lists the machine's.
    OwnWithoutProc,
    /// None could be made.
    Shared,
}

/// How a command's mount namespace is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespaces {
    /// By the server's own right to mount (root with `CAP_SYS_ADMIN`).
    Privileged,
    /// In a user namespace of the command's own, the server's user and
    /// group mapped to themselves: a server that is not root.
    User,
}

/// Whether commands can be given the layout on this machine, and how: the
/// server may make mount namespaces (root), or user namespaces (the probe
/// makes one), and `/workspace`, the mount point, exists (a root server
/// makes it, empty, when it is missing; the image has it).
pub fn available() -> Result<Support, String> {
    let namespaces = namespaces()?;
    // The best PID namespace a probe gets.
    let pids = [Pids::Own, Pids::OwnWithoutProc]
        .into_iter()
        .find(|&pids| probe(namespaces, pids).is_ok())
        .unwrap_or(Pids::Shared);
    Ok(Support { namespaces, pids })
}

fn namespaces() -> Result<Namespaces, String> {
    if rustix::process::geteuid().is_root() {
        if !super::identity::has_capability(rustix::thread::CapabilitySet::SYS_ADMIN) {
            return Err("the server lacks CAP_SYS_ADMIN (a container's root)".into());
        }
        match std::fs::create_dir(WORKSPACE) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(format!("{WORKSPACE} cannot be made: {error}")),
        }
    }
    if !Path::new(WORKSPACE).is_dir() {
        return Err(format!(
            "{WORKSPACE} is missing, and a server that is not root cannot make it"
        ));
    }
    if rustix::process::geteuid().is_root() {
        return Ok(Namespaces::Privileged);
    }
    probe(Namespaces::User, Pids::Shared)
        .map(|()| Namespaces::User)
        .map_err(|error| format!("no user namespace can be made here ({error})"))
}

/// Starts `/bin/sh -c :` with an empty directory at `/workspace` in the
/// namespaces a command would get.
fn probe(namespaces: Namespaces, pids: Pids) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let empty = tempfile::tempdir()?;
    let mut layout = Layout::new(empty.path(), None, empty.path(), namespaces)?;
    layout.pids = pids;
    let mut probe = std::process::Command::new("/bin/sh");
    probe
        .args(["-c", ":"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: `apply` and the init make system calls only, on what was
    // prepared.
    #[allow(unsafe_code)]
    unsafe {
        probe.pre_exec(move || {
            layout.apply()?;
            if let Some(init) = layout.enter_pids(None)? {
                init.start_command()?;
            }
            Ok(())
        });
    }
    let status = probe.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("the probe ended with {status}")))
    }
}

/// One command's mounts, prepared before the fork (the child may not
/// allocate).
#[derive(Debug)]
pub(super) struct Layout {
    workspace: CString,
    /// `None` when the command must read something under the server's
    /// `/tmp` (a read path there, as a checkout under `/tmp` has): its
    /// TMPDIR is then its private directory at its real path.
    tmp: Option<CString>,
    /// `None` where the machine has no `/dev/shm` to cover.
    shm: Option<CString>,
    /// With [`Namespaces::User`]: the `uid_map` and `gid_map` lines that
    /// map the server's user and group to themselves.
    maps: Option<(Vec<u8>, Vec<u8>)>,
    /// Whether the command gets a PID namespace (and a `/proc`) of its own.
    pub(super) pids: Pids,
    /// A directory of the command's own that stays writable at its real
    /// path (its TMPDIR, when it is not bound at `/tmp`).
    in_place: Option<CString>,
}

impl Layout {
    /// The mounts of a command whose workspace is `workspace` and whose
    /// private directories are `tmp` (bound at `/tmp` when given) and `shm`.
    pub(super) fn new(
        workspace: &Path,
        tmp: Option<&Path>,
        shm: &Path,
        namespaces: Namespaces,
    ) -> io::Result<Self> {
        // Absolute, from the server's working directory: the child has
        // already changed into the workspace when it mounts.
        let c = |path: &Path| {
            let path = std::path::absolute(path)?;
            CString::new(path.as_os_str().as_bytes())
                .map_err(|_| io::Error::other("a NUL in a path"))
        };
        Ok(Self {
            pids: Pids::Shared,
            in_place: None,
            workspace: c(workspace)?,
            tmp: tmp.map(c).transpose()?,
            shm: Path::new(SHM).is_dir().then(|| c(shm)).transpose()?,
            maps: (namespaces == Namespaces::User).then(|| {
                let uid = rustix::process::geteuid().as_raw();
                let gid = rustix::process::getegid().as_raw();
                (
                    format!("{uid} {uid} 1").into_bytes(),
                    format!("{gid} {gid} 1").into_bytes(),
                )
            }),
        })
    }

    /// Keeps `dir` writable where it is (every other mount the command
    /// sees is read-only but its `/workspace`, `/tmp` and `/dev/shm`).
    pub(super) fn keep_writable(&mut self, dir: &Path) -> io::Result<()> {
        let dir = std::path::absolute(dir)?;
        self.in_place = Some(
            CString::new(dir.as_os_str().as_bytes())
                .map_err(|_| io::Error::other("a NUL in a path"))?,
        );
        Ok(())
    }

    /// After [`Layout::apply`], in the same process: forks the init of the
    /// command's PID namespace, if it has one ([`super::init`]); the init
    /// returns here, the process outside waits and never returns.
    /// `landlock` is the command's Landlock ruleset, not yet enforced,
    /// which the new `/proc` is added to.
    pub(super) fn enter_pids(
        &self,
        landlock: Option<std::os::fd::RawFd>,
    ) -> io::Result<Option<super::init::Init>> {
        match self.pids {
            Pids::Shared => Ok(None),
            Pids::Own => super::init::enter(true, landlock).map(Some),
            Pids::OwnWithoutProc => super::init::enter(false, landlock).map(Some),
        }
    }

    /// Runs in the forked child, while it still has its capabilities:
    /// system calls only.
    pub(super) fn apply(&self) -> io::Result<()> {
        // Its own System V IPC and POSIX message queues too: commands
        // share a user, and Landlock does not cover those.
        let mut flags = UnshareFlags::NEWNS | UnshareFlags::NEWIPC;
        if self.pids != Pids::Shared {
            // The caller's next child is the namespace's PID 1.
            flags |= UnshareFlags::NEWPID;
        }
        if self.maps.is_some() {
            // Created first, and owning the others: the right to mount
            // there is the child's, in this namespace only.
            flags |= UnshareFlags::NEWUSER;
        }
        // SAFETY: the child has one thread, and no file table is unshared.
        #[allow(unsafe_code)]
        unsafe {
            rustix::thread::unshare_unsafe(flags)?;
        }
        if let Some((uid_map, gid_map)) = &self.maps {
            // `deny` first: a process without `CAP_SETGID` in the parent
            // namespace may map its group only then.
            write_proc(c"/proc/self/setgroups", b"deny")?;
            write_proc(c"/proc/self/uid_map", uid_map)?;
            write_proc(c"/proc/self/gid_map", gid_map)?;
        }
        // Nothing mounted here reaches the server's namespace.
        mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        )?;
        // `/tmp` last: the sources may lie under the server's `/tmp`.
        mount_bind_recursive(self.workspace.as_c_str(), c"/workspace")?;
        if let Some(shm) = &self.shm {
            mount_bind(shm.as_c_str(), c"/dev/shm")?;
        }
        if let Some(tmp) = &self.tmp {
            mount_bind(tmp.as_c_str(), c"/tmp")?;
        }
        if let Some(dir) = &self.in_place {
            mount_bind(dir.as_c_str(), dir.as_c_str())?;
        }
        // Then every mount read-only, but the command's own: nothing it
        // may reach by a path outside them (the server's database and
        // config, other runs' workspaces, their parents) can have its
        // mode, owner or times changed, which Landlock does not mediate.
        set_read_only(c"/", true, true)?;
        set_read_only(c"/workspace", false, true)?;
        if self.shm.is_some() {
            set_read_only(c"/dev/shm", false, false)?;
        }
        if self.tmp.is_some() {
            set_read_only(c"/tmp", false, false)?;
        }
        if let Some(dir) = &self.in_place {
            set_read_only(dir.as_c_str(), false, false)?;
        }
        rustix::process::chdir(c"/workspace")?;
        Ok(())
    }
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Makes the mount at `path` (and those below it, when `recursive`)
/// read-only, or writable again, with `mount_setattr` (Linux 5.12).
fn set_read_only(path: &std::ffi::CStr, read_only: bool, recursive: bool) -> io::Result<()> {
    const MOUNT_ATTR_RDONLY: u64 = 1;
    let attr = MountAttr {
        attr_set: if read_only { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: if read_only { 0 } else { MOUNT_ATTR_RDONLY },
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: `path` is NUL-terminated and `attr` a `mount_attr` of the
    // size given, both alive for the call.
    #[allow(unsafe_code)]
    let done = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes `bytes` to a file of `/proc` in one `write`, as the kernel
/// wants its maps written.
fn write_proc(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    let file = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    let written = rustix::io::write(&file, bytes)?;
    if written == bytes.len() {
        Ok(())
    } else {
        Err(io::Error::other("a short write to /proc"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_made_absolute_before_the_child_changes_directory() {
        let layout = Layout::new(
            Path::new("data/workspaces/run"),
            Some(Path::new("tmp")),
            Path::new("/x/shm"),
            Namespaces::Privileged,
        )
        .unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            layout.workspace.to_str().unwrap(),
            cwd.join("data/workspaces/run").to_str().unwrap()
        );
        assert!(layout.tmp.unwrap().to_str().unwrap().starts_with('/'));
    }
}
