//! Configuration: the TOML file of SPEC section 5, environment overrides
//! (`AGENT_RUNNER_SECTION__KEY`), and defaults that work with no file at all.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod check;
mod ended;
mod print;
mod runs;
mod tenants;
mod traces;
mod workspaces;

pub(crate) use check::check_env;
pub(crate) use check::check_sandbox_settings;
pub use check::is_valid_env_name;
pub use ended::{RetentionConfig, WebhooksConfig};
use print::redacted;
pub use print::{REDACTED, effective, redact_url, redacted_values};
pub use runs::{DEFAULT_INSTRUCTIONS, RunsConfig};
pub use tenants::{
    DEFAULT_TENANT_TABLE, Quota, Resolved as ResolvedTenantLimits, TenantLimits, TenantPolicy,
};
pub use traces::TracingConfig;
pub use workspaces::WorkspacesConfig;

use crate::mcp::McpServerConfig;
use crate::models::ModelProfile;
use crate::tools::{CommandPreset, SandboxConfig};

/// Prefix of environment overrides; `__` separates the levels of a key, so
/// `AGENT_RUNNER_RUNS__MAX_CONCURRENT=8` sets `runs.max_concurrent`.
pub const ENV_PREFIX: &str = "AGENT_RUNNER_";

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub runs: RunsConfig,
    pub limits: LimitsConfig,
    pub commands: BTreeMap<String, CommandPreset>,
    pub sandbox: SandboxConfig,
    pub models: BTreeMap<String, ModelProfile>,
    /// MCP servers whose tools runs may use.
    pub mcp: BTreeMap<String, McpServerConfig>,
    pub auth: AuthConfig,
    pub retention: RetentionConfig,
    pub webhooks: WebhooksConfig,
    /// `[tenants.NAME]`: each tenant's limits (SPEC section 16).
    pub tenants: BTreeMap<String, TenantLimits>,
    /// `[tracing]`: where runs' spans go (SPEC section 17).
    pub tracing: TracingConfig,
    /// `[workspaces]`: workspaces seeded from repositories (SPEC section 21).
    pub workspaces: WorkspacesConfig,
    /// The file this was read from, if any: the sandbox keeps commands away
    /// from it.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Interval of keep-alive comments on idle event streams (default 15 s).
    pub sse_keep_alive_ms: Option<u64>,
    /// A request head must arrive whole within this, counted from the
    /// connection's accept or the end of its previous response.
    pub request_header_timeout_ms: u64,
    /// A keep-alive connection with nothing in flight is closed after this.
    pub idle_timeout_ms: u64,
    /// A request's body must arrive whole within this, counted from its
    /// head (408 `request_timeout` after, and the connection is closed).
    pub body_timeout_ms: u64,
    /// Connections open at once; default: what the open-file limit allows.
    pub max_connections: Option<usize>,
    /// Connections one client may hold: a tenant's once authenticated, else
    /// a remote address's (429 `too_many_connections` past it).
    pub max_connections_per_client: usize,
    /// Origins whose pages may call the API from a browser (CORS), each
    /// `scheme://host[:port]`; default none.
    pub cors_origins: Vec<String>,
    /// The hosts a request may name in `Host` (`host`, `host:port`, `*`);
    /// default: the loopback names and addresses when bound to loopback,
    /// else any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
    /// When set, `/metrics` answers only `Authorization: Bearer` with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_token: Option<SecretText>,
}

/// An entry of `[webhooks] allowed_hosts` (`host` or `host:port`) as a
/// URL's parsing writes its host (lower case; `0x7f.1` as `127.0.0.1`), and
/// the port it pins, if any.
pub fn webhook_host(entry: &str) -> Result<(String, Option<u16>), String> {
    let refused = || format!("{entry:?} is not a host or host:port (no scheme, path or user)");
    if entry.is_empty() || entry.contains(['/', '@', '?', '#', ' ']) {
        return Err(refused());
    }
    let url = reqwest::Url::parse(&format!("http://{entry}/")).map_err(|_| refused())?;
    let host = url.host_str().ok_or_else(refused)?.to_owned();
    // Given, even the scheme's own (`port()` leaves that out).
    let pinned = entry.rsplit_once(':').filter(|(before, port)| {
        !before.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
    });
    let port = match pinned {
        Some((_, port)) => Some(port.parse::<u16>().map_err(|_| refused())?),
        None => None,
    };
    Ok((host, port))
}

/// A secret of the configuration: shown neither by `Debug` nor by
/// `agent-runner config`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretText(pub String);

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for SecretText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 1024 * 1024,
            sse_keep_alive_ms: None,
            request_header_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            body_timeout_ms: 30_000,
            max_connections: None,
            max_connections_per_client: 256,
            cors_origins: Vec::new(),
            allowed_hosts: None,
            metrics_token: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    pub database_url: String,
    pub workspaces_dir: PathBuf,
    /// How long a run's records may go unstored (storage refusing writes)
    /// before the run is stopped, to end `failed` once storage is back.
    pub write_retry_ms: u64,
    /// The deadline of every statement and connection attempt: a database
    /// that does not answer within it is taken for one that refuses writes,
    /// and a read waiting on it is answered 503.
    pub statement_timeout_ms: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            database_url: "sqlite://data/agent-runner.db".into(),
            workspaces_dir: PathBuf::from("data/workspaces"),
            write_retry_ms: 30_000,
            statement_timeout_ms: DEFAULT_STATEMENT_TIMEOUT_MS,
        }
    }
}

/// The default of `storage.statement_timeout_ms`.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 5_000;
/// The shortest statement timeout: a batch of writes must commit within it
/// on a database that is merely busy.
pub const MIN_STATEMENT_TIMEOUT_MS: u64 = 100;
/// The longest statement timeout: ten minutes (a request may wait that long).
pub const MAX_STATEMENT_TIMEOUT_MS: u64 = 600_000;

/// The shortest lease: a heartbeat every third of it must reach the
/// database in time, whatever the network's hiccups.
pub const MIN_LEASE_MS: u64 = 300;
/// The longest lease: an hour (a dead replica's runs wait that long).
pub const MAX_LEASE_MS: u64 = 3_600_000;

/// The largest time ceiling: a year, in milliseconds (deadlines further
/// out are not kept).
pub const MAX_TIME_LIMIT_MS: u64 = 365 * 24 * 3_600_000;

/// Ceilings a request may not exceed (422 if it does).
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub max_steps: u32,
    pub max_tool_calls: u32,
    pub timeout_ms: u64,
    pub max_context_chars: usize,
    pub max_tool_result_chars: usize,
    /// Longest a pause may wait for its answers.
    pub action_timeout_ms: u64,
    /// Most resumes a run may ask for after its process stopped.
    pub max_resumes: u32,
    /// Most retries a run may ask for of a final answer that is not valid
    /// under its output schema.
    pub output_retries: u32,
    /// Ceiling of a run's transcript as stored (its messages' JSON, with
    /// the conversation it continues): a result crossing it is cut and the
    /// run ends `context_limit`.
    pub max_run_bytes: usize,
    /// Workspace downloads one tenant may have under way at once.
    pub max_concurrent_downloads: usize,
    /// Largest archive `POST /v1/uploads` takes.
    pub max_upload_bytes: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_steps: 100,
            max_tool_calls: 500,
            timeout_ms: 3_600_000,
            max_context_chars: 1_000_000,
            max_tool_result_chars: 1_000_000,
            action_timeout_ms: 86_400_000,
            max_resumes: 10,
            output_retries: 5,
            max_run_bytes: crate::harness::DEFAULT_MAX_RUN_BYTES,
            max_concurrent_downloads: 4,
            max_upload_bytes: 100 << 20,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub tokens: Vec<TokenConfig>,
}

/// The longest tenant name (it travels between replicas in notifications,
/// which PostgreSQL bounds).
pub const MAX_TENANT_BYTES: usize = 256;

/// One bearer token and the tenant it authenticates. Give the token itself or,
/// better, its SHA-256 in hex so the file holds no secret.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub tenant: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "redacted"
    )]
    pub token: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "redacted"
    )]
    pub token_sha256: Option<String>,
}

impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConfig")
            .field("tenant", &self.tenant)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field(
                "token_sha256",
                &self.token_sha256.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config: {0}")]
    Parse(String),
    #[error("invalid config: {0}")]
    Invalid(String),
}

impl Config {
    /// Reads `path` (if given), applies the environment's overrides, and checks
    /// the result.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let text = match path {
            Some(path) => std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_owned(),
                source,
            })?,
            None => String::new(),
        };
        let mut config = Self::from_toml(&text, env)?;
        config.source = path.map(Path::to_owned);
        Ok(config)
    }

    pub fn from_toml(
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        // Only `AGENT_RUNNER_SECTION__KEY` is an override: variables that
        // merely share the prefix (Kubernetes injects `AGENT_RUNNER_PORT` and
        // `AGENT_RUNNER_SERVICE_HOST` for a Service named agent-runner; the
        // client reads `AGENT_RUNNER_URL`) are not the server's to judge.
        let mut overrides: Vec<_> = env
            .into_iter()
            .filter_map(|(key, value)| Some((key.strip_prefix(ENV_PREFIX)?.to_owned(), value)))
            .filter(|(key, _)| key.contains("__"))
            .collect();
        overrides.sort();
        for (key, value) in overrides {
            apply_override(&mut table, &key, &value)?;
        }
        let config: Config = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| ConfigError::Parse(format!("{}: {}", e.path(), e.inner())))?;
        config.validate()?;
        Ok(config)
    }
}

/// Sets `a__b__c` (lower-cased) to `value`, read as a TOML value when it is
/// one (`8`, `true`, `["x"]`, `{tenant = "a", token = "t"}`) and as a string
/// otherwise.
fn apply_override(table: &mut toml::Table, key: &str, value: &str) -> Result<(), ConfigError> {
    let path: Vec<String> = key.split("__").map(str::to_ascii_lowercase).collect();
    if path.iter().any(String::is_empty) {
        return Err(ConfigError::Parse(format!(
            "environment override {ENV_PREFIX}{key}: empty key segment"
        )));
    }
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_owned()));
    let (last, parents) = path.split_last().expect("split yields one segment");
    let mut current = table;
    for segment in parents {
        let entry = current
            .entry(segment.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = entry.as_table_mut().ok_or_else(|| {
            ConfigError::Parse(format!(
                "environment override {ENV_PREFIX}{key}: {segment} is not a table"
            ))
        })?;
    }
    current.insert(last.clone(), parsed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn no_file_gives_working_defaults() {
        let config = Config::from_toml("", env(&[])).unwrap();
        assert_eq!(config.server.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(config.runs.default_model, "demo");
        assert_eq!(config.storage.database_url, "sqlite://data/agent-runner.db");
        assert_eq!(config.limits.max_steps, 100);
        assert_eq!(config.storage.statement_timeout_ms, 5_000);
    }

    #[test]
    fn reads_the_spec_example() {
        let config = Config::from_toml(
            r#"
            [server]
            bind = "127.0.0.1:0"
            max_body_bytes = 2048
            [runs]
            max_concurrent = 2
            [commands.test]
            description = "Runs the unit tests"
            program = "cargo"
            args = ["test", "--quiet"]
            timeout_ms = 60000
            [[auth.tokens]]
            tenant = "team-a"
            token = "hunter2-token"
            "#,
            env(&[]),
        )
        .unwrap();
        assert_eq!(config.server.max_body_bytes, 2048);
        assert_eq!(config.runs.max_concurrent, 2);
        assert_eq!(config.commands["test"].args, ["test", "--quiet"]);
        assert_eq!(
            config.commands["test"].description.as_deref(),
            Some("Runs the unit tests")
        );
        assert_eq!(config.auth.tokens[0].tenant, "team-a");
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn environment_overrides_win() {
        let config = Config::from_toml(
            "[runs]\nmax_concurrent = 2\n",
            env(&[
                ("AGENT_RUNNER_RUNS__MAX_CONCURRENT", "7"),
                ("AGENT_RUNNER_SERVER__BIND", "127.0.0.1:9999"),
                (
                    "AGENT_RUNNER_AUTH__TOKENS",
                    r#"[{tenant = "t", token = "x"}]"#,
                ),
                ("AGENT_RUNNER_COMMANDS__LS__PROGRAM", "ls"),
                ("UNRELATED", "1"),
            ]),
        )
        .unwrap();
        assert_eq!(config.runs.max_concurrent, 7);
        assert_eq!(config.server.bind.port(), 9999);
        assert_eq!(config.auth.tokens.len(), 1);
        assert_eq!(config.commands["ls"].program, "ls");
    }

    #[test]
    fn variables_that_only_share_the_prefix_are_not_overrides() {
        // What Kubernetes injects for a Service named agent-runner.
        let config = Config::from_toml(
            "",
            env(&[
                ("AGENT_RUNNER_PORT", "tcp://10.0.0.7:8080"),
                ("AGENT_RUNNER_PORT_8080_TCP_ADDR", "10.0.0.7"),
                ("AGENT_RUNNER_SERVICE_HOST", "10.0.0.7"),
                ("AGENT_RUNNER_SERVICE_PORT", "8080"),
                ("AGENT_RUNNER_URL", "http://127.0.0.1:8080"),
                ("AGENT_RUNNER_RUNS__MAX_QUEUED", "5"),
            ]),
        )
        .unwrap();
        assert_eq!(config.runs.max_queued, 5);
        assert_eq!(config.server.bind.to_string(), "127.0.0.1:8080");
    }

    #[test]
    fn a_database_url_of_another_scheme_is_refused_not_taken_for_a_file() {
        let error = Config::from_toml("[storage]\ndatabase_url = \"mysql://db/ar\"\n", env(&[]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("\"mysql\" is not supported"), "{error}");
        assert!(error.contains("sqlite"), "{error}");
        for url in ["postgres://db/ar", "postgresql://u@db:5432/ar"] {
            let toml = format!("[storage]\ndatabase_url = \"{url}\"\n");
            assert!(Config::from_toml(&toml, env(&[])).is_ok(), "{url}");
        }
        assert!(Config::from_toml("[storage]\ndatabase_url = \"data/x.db\"\n", env(&[])).is_err());
        assert!(Config::from_toml("[storage]\ndatabase_url = \"sqlite:x.db\"\n", env(&[])).is_ok());
    }

    #[test]
    fn refuses_bad_configs_with_clear_errors() {
        let error = |text: &str| Config::from_toml(text, env(&[])).unwrap_err().to_string();
        assert!(error("[server]\nbnd = 1").contains("bnd"));
        assert!(error("[runs]\nmax_concurrent = \"x\"").contains("runs.max_concurrent"));
        assert!(error("[runs]\nmax_concurrent = 0").contains("max_concurrent"));
        assert!(error("[server]\nbind = \"0.0.0.0:8080\"").contains("loopback"));
        assert!(error("[[auth.tokens]]\ntenant = \"a\"").contains("exactly one"));
        assert!(error("[commands.\"bad name\"]\nprogram = \"x\"").contains("preset name"));
        assert!(error("[sandbox]\nmode = \"loose\"").contains("sandbox.mode"));
        assert!(error("[sandbox]\nread_paths = [\"usr\"]").contains("absolute"));
        assert!(error("[sandbox]\npids_max = 0").contains("pids_max"));
        assert!(error("[sandbox]\nuids = \"0-10\"").contains("at least 1"));
        assert!(error("[sandbox]\nuids = \"5\"").contains("range of uids"));
        assert!(error("[sandbox]\nuid = 65534").contains("uid"));
        assert!(error("[limits]\nmax_concurrent_downloads = 0").contains("at least 1"));
        assert!(error("[limits]\naction_timeout_ms = 0").contains("action_timeout_ms"));
        assert!(error("[limits]\naction_timeout_ms = 31536000001").contains("a year"));
        assert!(error("[limits]\ntimeout_ms = 31536000001").contains("a year"));
        assert!(error("[storage]\nstatement_timeout_ms = 0").contains("between 100 and"));
        assert!(
            error("[storage]\nstatement_timeout_ms = 600001")
                .contains("storage.statement_timeout_ms")
        );
        assert!(
            error("[commands.t]\nprogram = \"x\"\nmemory_max_bytes = 10")
                .contains("commands.t.memory_max_bytes")
        );
        assert!(
            error("[commands.t]\nprogram = \"x\"\ndescription = \" \"")
                .contains("commands.t.description must not be empty")
        );
        let long = format!(
            "[commands.t]\nprogram = \"x\"\ndescription = \"{}\"",
            "d".repeat(1001)
        );
        assert!(error(&long).contains("commands.t.description must be at most 1000"));
        let env_error =
            |table: &str| error(&format!("[commands.t]\nprogram = \"x\"\nenv = {table}"));
        assert!(env_error("{ \"A-B\" = \"1\" }").contains("commands.t.env: \"A-B\" is not"));
        assert!(
            env_error("{ TMPDIR = \"/tmp\" }")
                .contains("commands.t.env: TMPDIR is set by the sandbox")
        );
        assert!(
            env_error("{ A = \"x\\u0000y\" }")
                .contains("commands.t.env.A: a value may not hold a NUL")
        );
    }

    #[test]
    fn a_presets_env_is_kept_as_written_and_printed_redacted() {
        let config = Config::from_toml(
            "[commands.t]\nprogram = \"x\"\nenv = { CARGO_HOME = \"/opt/cargo\", TOKEN = \"$SECRET\" }\n",
            env(&[("SECRET", "s3cret")]),
        )
        .unwrap();
        let preset = &config.commands["t"];
        assert_eq!(preset.env["TOKEN"], "$SECRET");
        assert_eq!(preset.env["CARGO_HOME"], "/opt/cargo");
        let printed = effective(&config).unwrap();
        assert!(printed.contains("CARGO_HOME"), "{printed}");
        assert!(
            !printed.contains("/opt/cargo") && !printed.contains("$SECRET"),
            "{printed}"
        );
        assert!(!format!("{preset:?}").contains("/opt/cargo"));
    }

    #[test]
    fn the_sandbox_defaults_to_enforce_and_presets_to_no_network() {
        let config = Config::from_toml(
            "[commands.t]\nprogram = \"x\"\nread_paths = [\"/root/.cargo\"]\n",
            env(&[]),
        )
        .unwrap();
        assert_eq!(config.sandbox, SandboxConfig::default());
        assert_eq!(config.sandbox.mode, crate::tools::SandboxMode::Enforce);
        assert!(!config.commands["t"].network);
        assert_eq!(
            config.commands["t"].read_paths,
            [PathBuf::from("/root/.cargo")]
        );
        let off = Config::from_toml("", env(&[("AGENT_RUNNER_SANDBOX__MODE", "off")])).unwrap();
        assert_eq!(off.sandbox.mode, crate::tools::SandboxMode::Off);
    }
}
