//! `run_command`: server-configured command presets, chosen by name.
//!
//! A preset is a fixed program and argument list: the model only picks its
//! name, so there is nothing for it to inject, and no shell ever runs. Each
//! command runs with:
//! - its working directory, and `HOME`, set to the run's workspace;
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

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::process::Command;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::SelectionError;
use super::capture::Capture;
use super::sandbox::{CommandPolicy, Sandbox, SandboxReport};
use super::workspace::Workspace;
use crate::harness::{Tool, ToolDefinition, ToolError};

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
const REAP_WITHIN: Duration = Duration::from_secs(2);

/// The same bound when the run was cancelled: the harness stops waiting for
/// a tool shortly after, and whatever is left is cleaned up in the
/// background.
const REAP_WITHIN_CANCELLED: Duration = Duration::from_millis(150);

/// `PATH` when the server's own has no usable entry.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

/// A command the model may run by name: a fixed program and arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandPreset {
    /// A program name looked up in `PATH`, or a path.
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Where this preset may also read and execute (its toolchain, say
    /// `~/.cargo` and `~/.rustup` for `cargo test`).
    #[serde(default)]
    pub read_paths: Vec<PathBuf>,
    /// The host's network; without it the command can open no socket.
    #[serde(default)]
    pub network: bool,
    /// Overrides `[sandbox] memory_max_bytes`.
    #[serde(default)]
    pub memory_max_bytes: Option<u64>,
    /// Overrides `[sandbox] pids_max`.
    #[serde(default)]
    pub pids_max: Option<u64>,
}

impl CommandPreset {
    pub fn new(
        program: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            read_paths: Vec::new(),
            network: false,
            memory_max_bytes: None,
            pids_max: None,
        }
    }

    /// The sandbox rules of this preset, for a command in `workspace`.
    pub fn policy<'a>(&'a self, workspace: &'a Path) -> CommandPolicy<'a> {
        CommandPolicy {
            workspace,
            read_paths: &self.read_paths,
            network: self.network,
            memory_max_bytes: self.memory_max_bytes,
            pids_max: self.pids_max,
        }
    }

    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = timeout_ms;
        self
    }
}

/// The server's presets, by name (the `[commands.NAME]` tables of its
/// configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CommandPresets(BTreeMap<String, CommandPreset>);

impl CommandPresets {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, name: impl Into<String>, preset: CommandPreset) {
        self.0.insert(name.into(), preset);
    }

    pub fn get(&self, name: &str) -> Option<&CommandPreset> {
        self.0.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<S: Into<String>> FromIterator<(S, CommandPreset)> for CommandPresets {
    fn from_iter<I: IntoIterator<Item = (S, CommandPreset)>>(iter: I) -> Self {
        Self(iter.into_iter().map(|(name, p)| (name.into(), p)).collect())
    }
}

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

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
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
        let mut command = Command::new(&preset.program);
        command
            .args(&preset.args)
            .current_dir(workspace)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(lang) = &self.lang {
            command.env("LANG", lang);
        }
        if let Some(tz) = &self.tz {
            command.env("TZ", tz);
        }
        let mut spawned = self
            .sandbox
            .spawn(command, &preset.policy(workspace))
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

fn describe(status: Option<ExitStatus>) -> (Option<i32>, Option<String>) {
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

/// The `run_command` tool of one run: the presets that run allows, run in its
/// workspace.
pub struct RunCommand {
    runner: Arc<CommandRunner>,
    workspace: Arc<Workspace>,
    allowed: Vec<String>,
    definition: ToolDefinition,
}

impl RunCommand {
    /// `allowed` must name presets of `runner`; the first that does not is
    /// the error. The model sees exactly the allowed names as the enum of
    /// `command`.
    pub fn new(
        runner: Arc<CommandRunner>,
        workspace: Arc<Workspace>,
        allowed: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, SelectionError> {
        let mut allowed: Vec<String> = allowed.into_iter().map(Into::into).collect();
        allowed.sort();
        allowed.dedup();
        if let Some(unknown) = allowed.iter().find(|name| !runner.presets.contains(name)) {
            return Err(SelectionError::UnknownCommand(unknown.clone()));
        }
        let listed: Vec<String> = allowed
            .iter()
            .filter_map(|name| {
                let preset = runner.presets.get(name)?;
                let mut line = std::iter::once(preset.program.as_str())
                    .chain(preset.args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ");
                line = format!("{name} (runs `{line}`, timeout {} ms)", preset.timeout_ms);
                Some(line)
            })
            .collect();
        let description = format!(
            "Run one of the server's preset commands in the workspace, with no shell and no \
             stdin. Returns {{exit_code, stdout, stderr, timed_out, truncated}} (and signal when \
             a signal ended it); stdout and stderr keep at most {MAX_OUTPUT_CHARS} characters \
             each, and more ends the command. Available: {}.",
            if listed.is_empty() {
                "none".to_owned()
            } else {
                listed.join("; ")
            }
        );
        let definition = ToolDefinition {
            name: RUN_COMMAND.into(),
            description,
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "enum": allowed,
                        "description": "The name of the preset command to run."
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        };
        Ok(Self {
            runner,
            workspace,
            allowed,
            definition,
        })
    }
}

#[async_trait]
impl Tool for RunCommand {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    async fn execute(
        &self,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let name = arguments
            .get("command")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !self.allowed.iter().any(|allowed| allowed == name) {
            return Err(CommandError::NotPermitted {
                name: name.to_owned(),
                allowed: self.allowed.join(", "),
            }
            .into());
        }
        let output = self.runner.run(name, self.workspace.root(), cancel).await?;
        serde_json::to_value(output)
            .map_err(|error| ToolError::new(format!("Command result not serialisable: {error}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preset_defaults_its_timeout_and_refuses_unknown_keys() {
        let presets: CommandPresets = serde_json::from_value(json!({
            "test": {"program": "cargo", "args": ["test", "--quiet"]},
            "slow": {"program": "sleep", "args": ["5"], "timeout_ms": 100},
        }))
        .unwrap();
        assert_eq!(
            presets.get("test"),
            Some(&CommandPreset::new("cargo", ["test", "--quiet"]))
        );
        assert_eq!(presets.get("slow").unwrap().timeout_ms, 100);
        assert_eq!(presets.names().collect::<Vec<_>>(), ["slow", "test"]);
        assert!(
            serde_json::from_value::<CommandPresets>(json!({
                "x": {"program": "ls", "shell": true}
            }))
            .is_err()
        );
    }

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

    #[test]
    fn the_schema_lists_exactly_the_allowed_presets() {
        let presets: CommandPresets = [
            ("test", CommandPreset::new("cargo", ["test"])),
            ("lint", CommandPreset::new("cargo", ["clippy"])),
            ("fmt", CommandPreset::new("cargo", ["fmt"])),
        ]
        .into_iter()
        .collect();
        let runner = Arc::new(CommandRunner::new(presets, Arc::new(Sandbox::unconfined())));
        let dir = tempfile::tempdir().unwrap();
        let workspace = Arc::new(Workspace::open(dir.path()).unwrap());
        let tool = RunCommand::new(runner.clone(), workspace.clone(), ["test", "lint"]).unwrap();
        assert_eq!(
            tool.definition().parameters,
            json!({
                "type": "object",
                "properties": {"command": {
                    "type": "string",
                    "enum": ["lint", "test"],
                    "description": "The name of the preset command to run."
                }},
                "required": ["command"],
                "additionalProperties": false
            })
        );
        assert!(
            tool.definition()
                .description
                .contains("test (runs `cargo test`")
        );
        assert_eq!(
            RunCommand::new(runner, workspace, ["test", "deploy"]).err(),
            Some(SelectionError::UnknownCommand("deploy".to_owned()))
        );
    }
}
