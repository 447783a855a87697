//! A command's PID namespace and the small init that holds it (SPEC
//! section 7, third step). The command sees only its own processes in a
//! fresh `/proc`, and can signal nothing outside its namespace: not the
//! server, not another run's commands or MCP servers.
//!
//! Three processes, all made between `fork` and `exec` of the spawned
//! child (so only system calls, no allocation, no lock):
//!
//! - **the outer process** (the server's child, outside the namespace)
//!   unshares the namespace with the mounts ([`super::mounts`]), forks the
//!   init, closes every descriptor it inherited but the status pipe (so
//!   the spawn sees the command start, and the command's pipes close with
//!   the command), and waits. It ends as the command ended: with its exit
//!   code, or killed by the same signal, so the run reports the same
//!   `exit_code` or `signal` as without a namespace. Neither it nor the
//!   init is dumpable: they hold a copy of the server's memory and
//!   environment, which no process of the command's user may read.
//! - **the init** (PID 1 inside) mounts `/proc` for the namespace, takes
//!   the rest of the command's confinement on itself (it is confined like
//!   the command), forks the command, and then only reaps: orphans of the
//!   command are reparented to it and reaped; the signals a command is
//!   sent by its own processes (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
//!   SIGUSR2) are forwarded to the command. When the command ends, the
//!   init writes its wait status to the outer process and exits, and the
//!   kernel kills whatever the command left running in the namespace. It
//!   dies with the outer process (`PR_SET_PDEATHSIG`, set after its change
//!   of user, which clears it), so killing the outer process ends all.
//! - **the command** (PID 2) returns from the hook and is `exec`ed.
//!
//! `fork` here is the raw `clone(SIGCHLD)` system call: the C library's
//! `fork` runs handlers registered in the parent, which a forked copy of a
//! multi-threaded server must not.

#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

/// The command's pid inside the namespace, for the init's signal handler.
static COMMAND: AtomicI32 = AtomicI32::new(0);

/// Signals the init passes on to the command.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// What [`enter`] leaves the init holding: its end of the status pipe.
#[derive(Debug)]
pub(super) struct Init {
    status: libc::c_int,
}

/// `fork` without the C library's handlers. `Ok(0)` in the child.
fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: a plain clone with SIGCHLD and no other flag is fork: the
    // child gets a copy of the address space and continues here on its
    // own copy of the stack.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid as libc::pid_t)
    }
}

/// Closes every descriptor but `keep`: with `close_range` (Linux 5.9), or
/// one by one up to the descriptor limit where it is refused (a seccomp
/// profile that predates it). A descriptor left open here would be std's
/// exec-error pipe or the command's stdio, and hold up the spawn or the
/// end of the command's output.
fn close_all_but(keep: libc::c_int) {
    // SAFETY: close_range, getrlimit and close only touch descriptors and
    // the limit read into `limit`; nothing here uses the closed ones
    // afterwards.
    unsafe {
        let below =
            keep <= 0 || libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32) == 0;
        let above = libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32) == 0;
        if below && above {
            return;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let last = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20) as libc::c_int
        } else {
            1024
        };
        for fd in (0..last).filter(|&fd| fd != keep) {
            libc::close(fd);
        }
    }
}

/// Waits for `pid`, through interruptions; its raw wait status, or `None`
/// when it is not (or no longer) a child.
fn wait_for(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid place for the kernel to write to.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        if waited == pid {
            return Some(status);
        }
        if waited < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

/// Ends this process as `status` says the command ended.
fn end_as(status: libc::c_int) -> ! {
    if libc::WIFEXITED(status) {
        // SAFETY: _exit ends the process; nothing runs after it.
        unsafe { libc::_exit(libc::WEXITSTATUS(status)) }
    }
    let signal = if libc::WIFSIGNALED(status) {
        libc::WTERMSIG(status)
    } else {
        libc::SIGKILL
    };
    // SAFETY: the signal's default action is restored and unblocked, then
    // sent to this process: it ends by it (no core: not dumpable, and no
    // core size). If it somehow survives, it exits as a shell would.
    unsafe {
        let limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &limit);
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), signal);
        libc::_exit(128 + signal)
    }
}

/// Landlock's access rights to read and execute (`EXECUTE`, `READ_FILE`,
/// `READ_DIR`), what every read path gets.
const LANDLOCK_READ: u64 = 1 | (1 << 2) | (1 << 3);

/// `struct landlock_path_beneath_attr`.
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// Runs in the outer process, after the namespace was unshared (the next
/// child is its PID 1) and the mounts were made: forks the init, which
/// returns here, as PID 1, with `/proc` mounted when `mount_proc`, and
/// readable under the Landlock ruleset `landlock` (not yet enforced): a
/// rule names an inode, and the new `/proc` is not the one the server's
/// rules name. The outer process never returns: it waits, then ends as the
/// command did.
pub(super) fn enter(mount_proc: bool, landlock: Option<libc::c_int>) -> io::Result<Init> {
    let mut pipe = [0 as libc::c_int; 2];
    // SAFETY: `pipe` has room for the two descriptors.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read, write] = pipe;
    // Neither the outer process nor the init ever execs: each holds a copy
    // of the server's memory and environment. Not dumpable, no process of
    // the command's user may read them (`/proc/1/environ`, `/proc/1/mem`)
    // or trace them; the command, once `exec`ed, is dumpable again.
    // SAFETY: a prctl on this process.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let init = fork()?;
    if init > 0 {
        outer(init, read, write)
    }
    // The init.
    // SAFETY: closes this process's copy of the outer process's end.
    unsafe { libc::close(read) };
    if mount_proc {
        // SAFETY: the strings are NUL-terminated literals.
        let mounted = unsafe {
            libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        if mounted != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(ruleset) = landlock {
            allow_reading_proc(ruleset)?;
        }
    }
    Ok(Init { status: write })
}

/// Adds a rule to read the (new) `/proc` to the ruleset `ruleset`.
fn allow_reading_proc(ruleset: libc::c_int) -> io::Result<()> {
    // SAFETY: a literal path; the descriptor is closed below.
    let proc = unsafe { libc::open(c"/proc".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if proc < 0 {
        return Err(io::Error::last_os_error());
    }
    let rule = PathBeneath {
        allowed_access: LANDLOCK_READ,
        parent_fd: proc,
    };
    // SAFETY: `rule` is a `landlock_path_beneath_attr` that outlives the
    // call (LANDLOCK_RULE_PATH_BENEATH is 1).
    let added = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            1 as libc::c_int,
            &rule as *const PathBeneath,
            0 as libc::c_uint,
        )
    };
    let error = io::Error::last_os_error();
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(proc) };
    if added != 0 { Err(error) } else { Ok(()) }
}

/// The outer process: waits for the init, then ends as the command did.
fn outer(init: libc::pid_t, read: libc::c_int, write: libc::c_int) -> ! {
    // SAFETY: plain system calls on this process's own descriptors and
    // memory.
    unsafe { libc::close(write) };
    // The spawn's error pipe, the command's stdio, the cgroup files: the
    // init and the command hold what they need.
    close_all_but(read);
    let init_status = wait_for(init).unwrap_or(libc::SIGKILL);
    let mut bytes = [0u8; 4];
    // SAFETY: `bytes` has room for the four bytes read.
    let got = unsafe { libc::read(read, bytes.as_mut_ptr().cast(), bytes.len()) };
    if got == 4 {
        end_as(libc::c_int::from_ne_bytes(bytes))
    }
    // The init died before the command ended (killed): so does this.
    if libc::WIFSIGNALED(init_status) {
        end_as(init_status)
    }
    end_as(libc::SIGKILL)
}

impl Init {
    /// Runs in the init, last (after its confinement): forks the command,
    /// which returns to be `exec`ed; the init never returns.
    pub(super) fn start_command(self) -> io::Result<()> {
        // Dies with the outer process. Set here, after the change of user
        // (which clears it). Should the outer process have died before,
        // its end of the status pipe is closed, and writing would fail.
        // SAFETY: a prctl on this process, and a poll of its own
        // descriptor.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            let mut outer = libc::pollfd {
                fd: self.status,
                events: libc::POLLOUT,
                revents: 0,
            };
            if libc::poll(&mut outer, 1, 0) == 1 && outer.revents & libc::POLLERR != 0 {
                libc::_exit(1);
            }
        }
        // The handlers first: a signal sent between the fork and them would
        // be lost (PID 1 ignores what it has no handler for). The command
        // inherits them until its exec resets them; meanwhile they pass
        // nothing on (no command is known yet).
        // SAFETY: installs a handler that only calls kill(2), which is
        // async-signal-safe.
        unsafe {
            for signal in FORWARDED {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = forward as *const () as libc::sighandler_t;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
        let command = fork()?;
        if command == 0 {
            // SAFETY: closes this process's own copy of the status pipe.
            unsafe { libc::close(self.status) };
            return Ok(());
        }
        COMMAND.store(command, Ordering::SeqCst);
        // The spawn's error pipe (the command keeps its copy until exec)
        // and the command's stdio.
        close_all_but(self.status);
        let status = reap_until(command);
        let bytes = status.to_ne_bytes();
        // SAFETY: writes four bytes from `bytes`, then ends this process:
        // the kernel kills what is left in the namespace.
        unsafe {
            libc::write(self.status, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(0)
        }
    }
}

/// Reaps every child until `command` ends; its wait status.
fn reap_until(command: libc::pid_t) -> libc::c_int {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid place for the kernel to write to.
        let waited = unsafe { libc::waitpid(-1, &mut status, 0) };
        if waited == command {
            return status;
        }
        if waited < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // No child left, and the command not seen: it cannot happen,
            // but the outer process must learn something.
            return libc::SIGKILL;
        }
    }
}

extern "C" fn forward(signal: libc::c_int) {
    let command = COMMAND.load(Ordering::SeqCst);
    if command > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe {
            libc::kill(command, signal);
        }
    }
}
