//! No network for a command without `network = true`: seccomp filters,
//! compiled once, that refuse
//! - `socket(2)` of every family, with `EACCES`: no TCP, no UDP, no raw or
//!   packet socket, no netlink, and no UNIX socket either, since a UNIX
//!   socket reaches host daemons by path (a container engine's or init's
//!   control socket is a way out of any sandbox) and Landlock cannot
//!   restrict connecting to one before ABI 9. `socketpair(2)`, which makes
//!   a connected pair and reaches nothing, stays allowed: pipes and
//!   event loops (Python's asyncio, Node's child processes) keep working;
//! - `io_uring_setup(2)`, with `ENOSYS`: io_uring can open sockets
//!   (`IORING_OP_SOCKET`) without the `socket` system call, and programs
//!   fall back to plain system calls when it is missing.
//!
//! A filter checks the architecture first and kills a process that makes
//! a system call of another one (a 32-bit `socketcall`), and on x86_64 the
//! x32 numbers of the same calls are refused too.

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, SeccompRule, TargetArch};

/// The x32 ABI's system call numbers are the x86_64 ones with this bit set.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// The filters, in the order they are installed.
pub(super) fn no_network_filters() -> Result<Vec<BpfProgram>, String> {
    Ok(vec![
        refuse(&[libc::SYS_socket], libc::EACCES)?,
        refuse(&[libc::SYS_io_uring_setup], libc::ENOSYS)?,
    ])
}

/// A filter that answers `errno` to each of `calls` and allows the rest.
fn refuse(calls: &[i64], errno: i32) -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|error| format!("seccomp: {error}"))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &call in calls {
        // No condition: the call is refused whatever its arguments.
        rules.insert(call, Vec::new());
        #[cfg(target_arch = "x86_64")]
        rules.insert(call | X32_SYSCALL_BIT, Vec::new());
    }
    let errno = u32::try_from(errno).map_err(|_| "seccomp: a negative errno".to_owned())?;
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|error| format!("seccomp: {error}"))
}

/// Whether this kernel has seccomp: `/proc/self/status` shows a `Seccomp`
/// line only with `CONFIG_SECCOMP`. (A kernel with seccomp but without its
/// filters fails the command at its first spawn rather than here.)
pub(super) fn supported() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|status| status.lines().any(|line| line.starts_with("Seccomp:")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_machine() {
        let filters = no_network_filters().unwrap();
        assert_eq!(filters.len(), 2);
        assert!(filters.iter().all(|filter| !filter.is_empty()));
        assert!(supported());
    }
}
