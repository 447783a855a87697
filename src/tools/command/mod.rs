//! `run_command`: server-configured command presets, chosen by name.
//!
//! A preset is a fixed program and argument list: the model only picks its
//! name, so there is nothing for it to inject, and no shell ever runs. Each
//! command runs with:
//! - its working directory, and `HOME`, set to the run's workspace (which the
//!   sandbox shows the command as `/workspace`);
//! - stdin closed (`/dev/null`);
//! - an environment cleared down to `PATH`, `HOME`, `LANG` and `TZ`, so none of
//!   the server's secrets (API keys, tokens) reach it. `PATH` is the server's
//!   own, less any empty or relative entry (which would search the
//!   workspace, where the model writes), or `/usr/local/bin:/usr/bin:/bin`
//!   when that leaves nothing; `LANG` and `TZ` are passed on only if the
//!   server has them;
//! - the sandbox (see [`super::sandbox`]): Landlock rules, no network
//!   unless the preset says `network = true`, memory and process limits, no
//!   capabilities, a private `TMPDIR`;
//! - its whole process tree contained (see [`super::sandbox::process_tree`]),
//!   and killed on timeout, cancellation, output overflow, or when the call
//!   is dropped;
//! - stdout and stderr read concurrently to their end, each keeping at most
//!   [`MAX_OUTPUT_CHARS`] characters; one more kills the command and marks
//!   the result `truncated`.
//!
//! When the command's main process exits, whatever it left running is killed
//! too, and the pipes are drained for at most [`DRAIN_WITHIN`]: a descendant
//! that escaped containment (possible only without a cgroup) could otherwise
//! hold them open forever.
//!
//! The result is `{exit_code, stdout, stderr, timed_out, truncated, sandbox}`,
//! plus `signal` (e.g. `"SIGKILL"`) when the command was ended by a signal, in
//! which case `exit_code` is null. A non-zero exit (a denied access among
//! them) is a result, not an error; a preset that cannot start is a tool
//! error.

mod preset;
mod tool;

pub use preset::{CommandPreset, CommandPresets, MAX_DESCRIPTION_CHARS};
pub use tool::RunCommand;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::process::Command;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::capture::Capture;
use super::sandbox::{Sandbox, SandboxReport};
use crate::harness::ToolError;

pub const RUN_COMMAND: &str = "run_command";

/// A preset's timeout when its configuration gives none.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// Characters kept of each of stdout and stderr.
pub const MAX_OUTPUT_CHARS: usize = 65_536;

/// After the tree is killed: how long the pipes may take to reach their end.
pub const DRAIN_WITHIN: Duration = Duration::from_secs(2);

/// After the tree is killed: how long the main process may take to be
/// reaped, and the cgroup to empty. SIGKILL is not ignorable, so this is only
/// reached by a process stuck in the kernel.
pub(crate) const REAP_WITHIN: Duration = Duration::from_secs(2);

/// The same bound when the run was cancelled: the harness stops waiting for
/// a tool shortly after, and whatever is left is cleaned up in the
/// background.
const REAP_WITHIN_CANCELLED: Duration = Duration::from_millis(150);

/// `PATH` when the server's own has no usable entry.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandOutput {
    /// Null when the command was ended by a signal (or could not be reaped).
    pub exit_code: Option<i32>,
    /// The signal that ended the command, e.g. `"SIGKILL"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    pub stdout: String,
    pub stderr: String,
    /// The preset's timeout ended it.
    pub timed_out: bool,
    /// An output stream passed [`MAX_OUTPUT_CHARS`], which ended it.
    pub truncated: bool,
    /// What confined it.
    pub sandbox: SandboxReport,
}

/// Why a command gave no result.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("Command not permitted: {name} (allowed: {allowed})")]
    NotPermitted { name: String, allowed: String },
    #[error("Command could not start: {name} ({program}): {reason}")]
    CouldNotStart {
        name: String,
        program: String,
        reason: String,
    },
    #[error("Command cancelled: the run was stopped before {name} finished")]
    Cancelled { name: String },
}

impl From<CommandError> for ToolError {
    fn from(error: CommandError) -> Self {
        ToolError::new(error.to_string())
    }
}

/// Runs presets: the server's presets, the sandbox they run in, and the
/// environment they get. One per server, shared by every run.
#[derive(Debug)]
pub struct CommandRunner {
    presets: CommandPresets,
    sandbox: Arc<Sandbox>,
    path: OsString,
    lang: Option<OsString>,
    tz: Option<OsString>,
}

impl CommandRunner {
    /// Takes `PATH`, `LANG` and `TZ` from the server's environment, now.
    pub fn new(presets: CommandPresets, sandbox: Arc<Sandbox>) -> Self {
        Self {
            presets,
            sandbox,
            path: safe_path(std::env::var_os("PATH")),
            lang: std::env::var_os("LANG"),
            tz: std::env::var_os("TZ"),
        }
    }

    pub fn presets(&self) -> &CommandPresets {
        &self.presets
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// `program` with `args` in `workspace` (its working directory and
    /// `HOME`), in the environment every process started for a run gets:
    /// cleared down to `PATH`, `HOME`, `LANG` and `TZ`. Stdio is the
    /// caller's to set; start it with [`Sandbox::spawn`].
    pub(crate) fn command(&self, program: &str, args: &[String], workspace: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(workspace)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", workspace);
        if let Some(lang) = &self.lang {
            command.env("LANG", lang);
        }
        if let Some(tz) = &self.tz {
            command.env("TZ", tz);
        }
        command
    }

    /// Runs the preset `name` in `workspace` until it exits, times out,
    /// overflows its output, or `cancel` fires. The whole tree is dead when
    /// this returns (or, if the future is dropped, is killed right then).
    pub async fn run(
        &self,
        name: &str,
        workspace: &Path,
        cancel: &CancellationToken,
    ) -> Result<CommandOutput, CommandError> {
        let preset = self
            .presets
            .get(name)
            .ok_or_else(|| CommandError::NotPermitted {
                name: name.to_owned(),
                allowed: self.presets.names().collect::<Vec<_>>().join(", "),
            })?;
        let mut command = self.command(&preset.program, &preset.args, workspace);
        command
            .envs(&preset.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut spawned = self
            .sandbox
            .spawn(command, preset.policy(workspace))
            .await
            .map_err(|error| CommandError::CouldNotStart {
                name: name.to_owned(),
                program: preset.program.clone(),
                reason: match error.kind() {
                    std::io::ErrorKind::NotFound => "program not found".to_owned(),
                    _ => error.to_string(),
                },
            })?;
        // Borrowed, not moved out: `spawned` drops the tree before its
        // TMPDIR, on every path.
        let child = &mut spawned.process;
        let mut stdout = Capture::new(child.take_stdout(), MAX_OUTPUT_CHARS);
        let mut stderr = Capture::new(child.take_stderr(), MAX_OUTPUT_CHARS);
        let deadline = Instant::now() + Duration::from_millis(preset.timeout_ms);

        let ending = loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => break Ending::Cancelled,
                () = stdout.read_some(), if stdout.is_open() => {
                    if stdout.truncated() {
                        break Ending::Overflowed;
                    }
                }
                () = stderr.read_some(), if stderr.is_open() => {
                    if stderr.truncated() {
                        break Ending::Overflowed;
                    }
                }
                () = child.exited() => break Ending::Exited,
                () = tokio::time::sleep_until(deadline) => break Ending::TimedOut,
            }
        };

        child.kill_tree();
        let bound = match ending {
            Ending::Cancelled => REAP_WITHIN_CANCELLED,
            _ => REAP_WITHIN,
        };
        let status = child.reap(bound).await;
        if !child.wait_gone(bound).await {
            tracing::warn!(
                command = name,
                "a command's process tree did not empty in time"
            );
        }
        if ending == Ending::Cancelled {
            return Err(CommandError::Cancelled {
                name: name.to_owned(),
            });
        }

        // What the tree wrote before it died is still in the pipes.
        let drain_until = Instant::now() + DRAIN_WITHIN;
        while stdout.is_open() || stderr.is_open() {
            tokio::select! {
                () = stdout.read_some(), if stdout.is_open() => {}
                () = stderr.read_some(), if stderr.is_open() => {}
                () = tokio::time::sleep_until(drain_until) => break,
                () = cancel.cancelled() => break,
            }
        }

        let (exit_code, signal) = describe(status);
        Ok(CommandOutput {
            exit_code,
            signal,
            timed_out: ending == Ending::TimedOut,
            truncated: stdout.truncated() || stderr.truncated(),
            stdout: stdout.into_text(),
            stderr: stderr.into_text(),
            sandbox: spawned.report,
        })
    }
}

/// What ended a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Exited,
    TimedOut,
    Cancelled,
    Overflowed,
}

/// `PATH` less its empty and relative entries, which would search the
/// working directory: the workspace.
fn safe_path(server: Option<OsString>) -> OsString {
    let entries: Vec<&[u8]> = server
        .as_deref()
        .map(|path| {
            path.as_bytes()
                .split(|&b| b == b':')
                .filter(|entry| entry.starts_with(b"/"))
                .collect()
        })
        .unwrap_or_default();
    if entries.is_empty() {
        return DEFAULT_PATH.into();
    }
    let joined = entries.join(&b':');
    std::ffi::OsStr::from_bytes(&joined).to_owned()
}

/// An exit status as the exit code, or the name of the signal that ended it.
pub(crate) fn describe(status: Option<ExitStatus>) -> (Option<i32>, Option<String>) {
    match status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => (Some(code), None),
            (None, Some(signal)) => (None, Some(signal_name(signal))),
            (None, None) => (None, None),
        },
        None => (None, None),
    }
}

fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signal)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("SIG{signal}"), |name| (*name).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_keeps_only_absolute_entries() {
        assert_eq!(
            safe_path(Some("/usr/bin::.:bin:/opt/x/bin:".into())),
            "/usr/bin:/opt/x/bin"
        );
        assert_eq!(safe_path(Some(".:".into())), DEFAULT_PATH);
        assert_eq!(safe_path(None), DEFAULT_PATH);
    }

    #[test]
    fn signals_have_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(1), "SIGHUP");
        assert_eq!(signal_name(31), "SIGSYS");
        assert_eq!(signal_name(40), "SIG40");
        assert_eq!(
            describe(Some(ExitStatus::from_raw(9))),
            (None, Some("SIGKILL".into()))
        );
        assert_eq!(
            describe(Some(ExitStatus::from_raw(3 << 8))),
            (Some(3), None)
        );
    }
}
