//! Command presets: what the server's `[commands.NAME]` tables say.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::DEFAULT_TIMEOUT_MS;
use crate::tools::sandbox::CommandPolicy;

/// Longest `description` a preset may have, in characters: it is shown to
/// the model in every request.
pub const MAX_DESCRIPTION_CHARS: usize = 1000;

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

/// A command the model may run by name: a fixed program and arguments.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandPreset {
    /// What the preset is for, in a sentence ("Runs the unit tests"):
    /// `run_command`'s definition shows it beside the preset's name, so a
    /// model knows what `test` runs without guessing from the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
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
    /// Safe to run again when a crash left it unknown whether it ran to its
    /// end (it only reads, or running it twice leaves what once does).
    #[serde(default)]
    pub idempotent: bool,
    /// Run by the harness itself after every model response that changed
    /// files, in runs that allow this preset (see
    /// [`crate::harness::Tool::checks_after_change`]): the model sees its
    /// result at once, and a code block answer that passes it ends the run.
    #[serde(default)]
    pub check: bool,
    /// Variables added to the command's cleared environment, as written
    /// (`CARGO_HOME = "/opt/cargo"`): nothing is expanded, and nothing of
    /// the server's own environment is reachable through them. Their values
    /// are redacted when the configuration is printed.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "crate::config::redacted_values"
    )]
    pub env: BTreeMap<String, String>,
}

/// `env` values may be credentials: only their names are shown.
impl std::fmt::Debug for CommandPreset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandPreset")
            .field("description", &self.description)
            .field("program", &self.program)
            .field("args", &self.args)
            .field("timeout_ms", &self.timeout_ms)
            .field("read_paths", &self.read_paths)
            .field("network", &self.network)
            .field("memory_max_bytes", &self.memory_max_bytes)
            .field("pids_max", &self.pids_max)
            .field("idempotent", &self.idempotent)
            .field("check", &self.check)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl CommandPreset {
    pub fn new(
        program: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            description: None,
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            read_paths: Vec::new(),
            network: false,
            memory_max_bytes: None,
            pids_max: None,
            idempotent: false,
            check: false,
            env: BTreeMap::new(),
        }
    }

    /// The sandbox rules of this preset, for a command in `workspace`.
    pub fn policy(&self, workspace: &Path) -> CommandPolicy {
        CommandPolicy {
            workspace: workspace.to_owned(),
            read_paths: self.read_paths.clone(),
            network: self.network,
            memory_max_bytes: self.memory_max_bytes,
            pids_max: self.pids_max,
            private_home: false,
        }
    }

    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = timeout_ms;
        self
    }

    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Marks the preset as a check run after every change (`check = true`).
    pub fn with_check(mut self) -> Self {
        self.check = true;
        self
    }

    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    #[test]
    fn a_preset_defaults_its_timeout_and_refuses_unknown_keys() {
        let presets: CommandPresets = serde_json::from_value(json!({
            "test": {"program": "cargo", "args": ["test", "--quiet"]},
            "slow": {"program": "sleep", "args": ["5"], "timeout_ms": 100,
                     "description": "Waits five seconds"},
        }))
        .unwrap();
        assert_eq!(
            presets.get("test"),
            Some(&CommandPreset::new("cargo", ["test", "--quiet"]))
        );
        assert_eq!(presets.get("slow").unwrap().timeout_ms, 100);
        assert_eq!(
            presets.get("slow").unwrap().description.as_deref(),
            Some("Waits five seconds")
        );
        assert_eq!(presets.get("test").unwrap().description, None);
        assert_eq!(presets.names().collect::<Vec<_>>(), ["slow", "test"]);
        assert!(
            serde_json::from_value::<CommandPresets>(json!({
                "x": {"program": "ls", "shell": true}
            }))
            .is_err()
        );
    }
}
