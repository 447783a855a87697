//! Opening paths beneath a root directory descriptor, with no symbolic link
//! followed anywhere and no way above the root.
//!
//! Every resolution starts from the root's descriptor and is done by the kernel
//! in one go, or one component at a time from descriptors already held: there
//! is no moment where a path string that was checked earlier is opened again,
//! so swapping a component for a symbolic link between a check and the open has
//! nothing to race against.
//!
//! - [`Resolver::Openat2`] (Linux 5.6+): one `openat2` call with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`. The kernel
//!   refuses any symbolic link in the path with `ELOOP` and any escape with
//!   `EXDEV`.
//! - [`Resolver::Walk`] (everywhere else): `openat` each directory component
//!   with `O_DIRECTORY | O_NOFOLLOW` from the descriptor of the previous one,
//!   then the final component with `O_NOFOLLOW`. A `..` step goes back to the
//!   descriptor the walk came from instead of asking the kernel for the parent,
//!   so it can never rise above the root.
//!
//! The `cap-std` family offers the same descriptor-relative opens, but it
//! follows symbolic links that stay inside the root, and the workspace refuses
//! every link, so `rustix` is used directly.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, mkdirat, openat, openat2, statat};
use rustix::io::Errno;

use super::path::{Step, join_steps};

/// How paths are resolved beneath the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// The kernel resolves the whole path with `openat2`.
    Openat2,
    /// A component-by-component `openat` walk.
    Walk,
}

/// Refuse symbolic links (and `/proc` magic links) anywhere, and anything that
/// would leave the starting directory.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// `openat2` answers `EAGAIN` when a concurrent rename races with a `..` it
/// is resolving; after this many tries the walk is used for that call.
const OPENAT2_TRIES: usize = 16;

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Resolver {
    /// `openat2` when this kernel has it and lets this process use it (it may
    /// be missing before Linux 5.6, or blocked by a seccomp filter with
    /// `ENOSYS` or `EPERM`), the walk otherwise.
    pub fn detect(root: BorrowedFd<'_>) -> Self {
        match openat2(root, ".", DIR_FLAGS, Mode::empty(), RESOLVE) {
            Ok(_) => Self::Openat2,
            Err(_) => Self::Walk,
        }
    }
}

/// Opens the directory `steps` names beneath `root`, for reading its entries
/// or as the base of further `*at` calls.
pub(crate) fn open_dir(
    root: BorrowedFd<'_>,
    resolver: Resolver,
    steps: &[Step],
) -> Result<OwnedFd, Errno> {
    if resolver == Resolver::Openat2
        && let Some(result) = try_openat2(root, steps, DIR_FLAGS)
    {
        return result;
    }
    walk(root, steps)
}

/// Opens whatever `steps` names beneath `root` with `flags` (plus `O_NOFOLLOW`
/// and `O_CLOEXEC`). A path ending in `..` names a directory and is opened as
/// one.
pub(crate) fn open(
    root: BorrowedFd<'_>,
    resolver: Resolver,
    steps: &[Step],
    flags: OFlags,
) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if resolver == Resolver::Openat2
        && let Some(result) = try_openat2(root, steps, flags)
    {
        return result;
    }
    match steps.split_last() {
        Some((Step::Name(name), parent)) => {
            let dir = walk(root, parent)?;
            openat(&dir, name.as_str(), flags, Mode::empty())
        }
        _ => walk(root, steps),
    }
}

/// Opens the directory `steps` names beneath `root`, creating each missing
/// directory on the way (mode 0755 less the umask). Always a walk: each
/// directory is created relative to the descriptor of its parent.
pub(crate) fn open_dir_creating(root: BorrowedFd<'_>, steps: &[Step]) -> Result<OwnedFd, Errno> {
    let mut held: Vec<OwnedFd> = Vec::new();
    for step in steps {
        match step {
            Step::Up => {
                held.pop();
            }
            Step::Name(name) => {
                let here = held.last().map_or(root, |fd| fd.as_fd());
                let next = match open_dir_step(here, name) {
                    Err(Errno::NOENT) => {
                        match mkdirat(here, name.as_str(), Mode::from_raw_mode(0o755)) {
                            Ok(()) | Err(Errno::EXIST) => {}
                            Err(error) => return Err(error),
                        }
                        open_dir_step(here, name)?
                    }
                    other => other?,
                };
                held.push(next);
            }
        }
    }
    reopen_last(root, held)
}

/// `None` when `openat2` should not be trusted for this call (it kept
/// answering `EAGAIN`), so the caller walks instead.
fn try_openat2(
    root: BorrowedFd<'_>,
    steps: &[Step],
    flags: OFlags,
) -> Option<Result<OwnedFd, Errno>> {
    let path = join_steps(steps);
    // RESOLVE_NO_SYMLINKS already refuses a trailing link, with ELOOP; with
    // O_NOFOLLOW as well, O_DIRECTORY would win and report ENOTDIR instead.
    let flags = flags.difference(OFlags::NOFOLLOW);
    for _ in 0..OPENAT2_TRIES {
        match openat2(root, path.as_str(), flags, Mode::empty(), RESOLVE) {
            Err(Errno::AGAIN) => continue,
            other => return Some(other),
        }
    }
    None
}

/// Opens each directory of `steps` from the one before it, never following a
/// symbolic link; `..` returns to the previous descriptor.
fn walk(root: BorrowedFd<'_>, steps: &[Step]) -> Result<OwnedFd, Errno> {
    let mut held: Vec<OwnedFd> = Vec::new();
    for step in steps {
        match step {
            Step::Up => {
                held.pop();
            }
            Step::Name(name) => {
                let here = held.last().map_or(root, |fd| fd.as_fd());
                held.push(open_dir_step(here, name)?);
            }
        }
    }
    reopen_last(root, held)
}

/// Opens one directory entry as a directory without following it. The kernel
/// answers `ENOTDIR` for a symbolic link opened with `O_DIRECTORY | O_NOFOLLOW`;
/// that is turned into `ELOOP`, as `openat2` reports it, so the caller can say
/// why. (The open has already failed: this only names the reason.)
fn open_dir_step(here: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    match openat(here, name, DIR_FLAGS, Mode::empty()) {
        Err(Errno::NOTDIR) => match statat(here, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => {
                Err(Errno::LOOP)
            }
            _ => Err(Errno::NOTDIR),
        },
        other => other,
    }
}

fn reopen_last(root: BorrowedFd<'_>, mut held: Vec<OwnedFd>) -> Result<OwnedFd, Errno> {
    match held.pop() {
        Some(fd) => Ok(fd),
        None => openat(root, ".", DIR_FLAGS, Mode::empty()),
    }
}
