//! The `[mcp.NAME]` tables of the configuration, checked when it is read,
//! and resolved (the bearer token read from its variable) when the server
//! starts.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{MAX_TIME_LIMIT_MS, is_valid_env_name};
use crate::models::Secret;
use crate::models::profile::EnvLookup;

/// `startup_timeout_ms` when the table gives none.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 10_000;

/// `tool_timeout_ms` when the table gives none.
pub const DEFAULT_TOOL_TIMEOUT_MS: u64 = 60_000;

fn default_startup_timeout_ms() -> u64 {
    DEFAULT_STARTUP_TIMEOUT_MS
}

fn default_tool_timeout_ms() -> u64 {
    DEFAULT_TOOL_TIMEOUT_MS
}

/// One `[mcp.NAME]` table as written: a stdio server (`command`) or a
/// streamable HTTP one (`url`).
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Stdio: the program, looked up in `PATH`, or a path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Stdio: added to the cleared environment commands get (its values
    /// are redacted when the configuration is printed).
    #[serde(default, serialize_with = "crate::config::redacted_values")]
    pub env: BTreeMap<String, String>,
    /// Stdio: where the server may also read and execute (its own code).
    #[serde(default)]
    pub read_paths: Vec<PathBuf>,
    /// Stdio: the host's network; without it the server opens no socket.
    #[serde(default)]
    pub network: bool,
    /// Stdio: overrides `[sandbox] memory_max_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_bytes: Option<u64>,
    /// Stdio: overrides `[sandbox] pids_max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_max: Option<u64>,
    /// Streamable HTTP: the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Streamable HTTP: the variable holding the bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env: Option<String>,
    /// Starting and listing its tools must take no longer.
    #[serde(default = "default_startup_timeout_ms")]
    pub startup_timeout_ms: u64,
    /// A call not answered in this time is cancelled.
    #[serde(default = "default_tool_timeout_ms")]
    pub tool_timeout_ms: u64,
}

impl fmt::Debug for McpServerConfig {
    /// `env` values may be credentials: only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServerConfig")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("read_paths", &self.read_paths)
            .field("network", &self.network)
            .field("url", &self.url)
            .field("bearer_token_env", &self.bearer_token_env)
            .field("startup_timeout_ms", &self.startup_timeout_ms)
            .field("tool_timeout_ms", &self.tool_timeout_ms)
            .finish_non_exhaustive()
    }
}

/// `^[a-zA-Z0-9][a-zA-Z0-9_-]*$`, at most 32 characters, with no `__` and
/// no `_` at its end: `__` separates the server from the tool in
/// `mcp__SERVER__TOOL`, and neither rule lets one server's prefix
/// (`mcp__a__`) begin another's (`mcp__a___`).
pub fn is_valid_server_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 32
        && bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("__")
        && !name.ends_with('_')
}

impl McpServerConfig {
    /// What is wrong with the table of server `name`, if anything, as a
    /// message naming the key (`mcp.NAME.key: ...`).
    pub fn check(&self, name: &str) -> Result<(), String> {
        let at = |key: &str| format!("mcp.{name}.{key}");
        if !is_valid_server_name(name) {
            return Err(format!(
                "mcp.{name}: a server name must match ^[a-zA-Z0-9][a-zA-Z0-9_-]*$, have no \"__\", \
                 not end with \"_\", and have at most 32 characters"
            ));
        }
        for (key, ms) in [
            ("startup_timeout_ms", self.startup_timeout_ms),
            ("tool_timeout_ms", self.tool_timeout_ms),
        ] {
            if ms == 0 || ms > MAX_TIME_LIMIT_MS {
                return Err(format!(
                    "{} must be between 1 and {MAX_TIME_LIMIT_MS}",
                    at(key)
                ));
            }
        }
        match (&self.command, &self.url) {
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(format!("{} must not be empty", at("command")));
                }
                if self.bearer_token_env.is_some() {
                    return Err(format!(
                        "{}: a stdio server takes no bearer token (its env, if it needs a secret)",
                        at("bearer_token_env")
                    ));
                }
                crate::config::check_env(&at("env"), &self.env)?;
                crate::config::check_sandbox_settings(
                    &format!("mcp.{name}."),
                    &self.read_paths,
                    self.memory_max_bytes,
                    self.pids_max,
                )
                .map_err(|e| e.to_string())
            }
            (None, Some(url)) => {
                match reqwest::Url::parse(url) {
                    Ok(parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
                        return Err(format!(
                            "{}: credentials do not belong in the URL; name the variable that holds \
                             a bearer token in bearer_token_env",
                            at("url")
                        ));
                    }
                    Ok(parsed)
                        if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => {}
                    _ => {
                        return Err(format!(
                            "{}: {url:?} is not an http or https URL",
                            at("url")
                        ));
                    }
                }
                let stdio_only = [
                    ("args", !self.args.is_empty()),
                    ("env", !self.env.is_empty()),
                    ("read_paths", !self.read_paths.is_empty()),
                    ("network", self.network),
                    ("memory_max_bytes", self.memory_max_bytes.is_some()),
                    ("pids_max", self.pids_max.is_some()),
                ];
                if let Some((key, _)) = stdio_only.iter().find(|(_, given)| *given) {
                    return Err(format!(
                        "{}: only a stdio server (one with command) takes it",
                        at(key)
                    ));
                }
                match &self.bearer_token_env {
                    Some(var) if !is_valid_env_name(var) => Err(format!(
                        "{}: {var:?} is not an environment variable name",
                        at("bearer_token_env")
                    )),
                    _ => Ok(()),
                }
            }
            (Some(_), Some(_)) => Err(format!(
                "mcp.{name}: give command (a stdio server) or url (a streamable HTTP server), not both"
            )),
            (None, None) => Err(format!(
                "mcp.{name}: give command (a stdio server) or url (a streamable HTTP server)"
            )),
        }
    }
}

/// How the server is reached.
#[derive(Debug)]
pub enum Transport {
    Stdio(StdioServer),
    Http(HttpServer),
}

/// A child process per run, speaking MCP on its stdin and stdout.
pub struct StdioServer {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub read_paths: Vec<PathBuf>,
    pub network: bool,
    pub memory_max_bytes: Option<u64>,
    pub pids_max: Option<u64>,
}

impl fmt::Debug for StdioServer {
    /// `env` values may be credentials: only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdioServer")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("read_paths", &self.read_paths)
            .field("network", &self.network)
            .finish_non_exhaustive()
    }
}

/// A streamable HTTP endpoint, with a session per run.
#[derive(Debug)]
pub struct HttpServer {
    pub url: String,
    pub token: Option<Secret>,
}

/// A configured MCP server, ready to be connected to.
#[derive(Debug)]
pub struct McpServer {
    pub name: String,
    pub transport: Transport,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
}

impl McpServer {
    /// Resolves a checked table: reads its bearer token from `env`.
    pub fn resolve(
        name: &str,
        config: &McpServerConfig,
        env: EnvLookup<'_>,
    ) -> Result<Self, String> {
        config.check(name)?;
        let transport = match (&config.command, &config.url) {
            (Some(program), _) => Transport::Stdio(StdioServer {
                program: program.clone(),
                args: config.args.clone(),
                env: config
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                read_paths: config.read_paths.clone(),
                network: config.network,
                memory_max_bytes: config.memory_max_bytes,
                pids_max: config.pids_max,
            }),
            (None, Some(url)) => {
                let token = match &config.bearer_token_env {
                    None => None,
                    Some(var) => match env(var) {
                        Some(token) if !token.trim().is_empty() => Some(Secret::new(token.trim())),
                        _ => {
                            return Err(format!(
                                "mcp.{name}.bearer_token_env: the environment variable {var} is not \
                                 set or is empty"
                            ));
                        }
                    },
                };
                if token.is_some()
                    && let Ok(parsed) = reqwest::Url::parse(url)
                    && parsed.scheme() == "http"
                    && !is_loopback(&parsed)
                {
                    tracing::warn!(
                        server = name,
                        "the MCP server's bearer token goes over plain http to another host: \
                         anyone on the path can read it; use https"
                    );
                }
                Transport::Http(HttpServer {
                    url: url.clone(),
                    token,
                })
            }
            (None, None) => unreachable!("checked: a server has command or url"),
        };
        Ok(Self {
            name: name.to_owned(),
            transport,
            startup_timeout: Duration::from_millis(config.startup_timeout_ms),
            tool_timeout: Duration::from_millis(config.tool_timeout_ms),
        })
    }

    /// `"stdio"` or `"streamable_http"`.
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            Transport::Stdio(_) => "stdio",
            Transport::Http(_) => "streamable_http",
        }
    }
}

/// Whether `url` names this machine.
fn is_loopback(url: &reqwest::Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(toml: &str) -> McpServerConfig {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn a_table_is_stdio_or_http_and_each_takes_only_its_keys() {
        let stdio =
            table("command = \"npx\"\nargs = [\"-y\", \"x\"]\nenv = { LOG_LEVEL = \"warn\" }");
        assert_eq!(stdio.check("everything"), Ok(()));
        assert_eq!(stdio.startup_timeout_ms, DEFAULT_STARTUP_TIMEOUT_MS);
        assert_eq!(stdio.tool_timeout_ms, DEFAULT_TOOL_TIMEOUT_MS);
        let http = table("url = \"http://127.0.0.1:9000/mcp\"\nbearer_token_env = \"DOCS_TOKEN\"");
        assert_eq!(http.check("docs"), Ok(()));
        for (toml, expected) in [
            ("", "give command"),
            ("command = \"a\"\nurl = \"http://x\"", "not both"),
            ("command = \" \"", "mcp.s.command must not be empty"),
            (
                "command = \"a\"\nbearer_token_env = \"T\"",
                "mcp.s.bearer_token_env",
            ),
            ("command = \"a\"\nenv = { \"A-B\" = \"1\" }", "mcp.s.env"),
            (
                "command = \"a\"\nenv = { HOME = \"/\" }",
                "set by the sandbox",
            ),
            (
                "command = \"a\"\nread_paths = [\"rel\"]",
                "mcp.s.read_paths",
            ),
            (
                "command = \"a\"\ntool_timeout_ms = 0",
                "mcp.s.tool_timeout_ms",
            ),
            ("url = \"ftp://x\"", "mcp.s.url"),
            (
                "url = \"http://x\"\nargs = [\"a\"]",
                "mcp.s.args: only a stdio server",
            ),
            (
                "url = \"http://x\"\nbearer_token_env = \"a b\"",
                "mcp.s.bearer_token_env",
            ),
            (
                "url = \"https://user:pw@x/mcp\"",
                "credentials do not belong",
            ),
        ] {
            let error = table(toml).check("s").unwrap_err();
            assert!(error.contains(expected), "{toml:?}: {error}");
        }
        assert!(toml::from_str::<McpServerConfig>("command = \"a\"\nshell = true").is_err());
    }

    #[test]
    fn server_names_cannot_make_tool_names_ambiguous() {
        for good in ["everything", "a", "docs-1", "my_server", "9lives"] {
            assert!(is_valid_server_name(good), "{good}");
        }
        for bad in ["", "a__b", "_a", "a_", "a.b", "ä", &"x".repeat(33)] {
            assert!(!is_valid_server_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_token_is_read_from_its_variable_and_never_shown() {
        let http = table("url = \"http://127.0.0.1:9/mcp\"\nbearer_token_env = \"DOCS_TOKEN\"");
        let env = |name: &str| (name == "DOCS_TOKEN").then(|| "s3cret-token".to_owned());
        let server = McpServer::resolve("docs", &http, &env).unwrap();
        assert_eq!(server.transport_name(), "streamable_http");
        assert!(!format!("{server:?}").contains("s3cret"));
        let error = McpServer::resolve("docs", &http, &|_| None).unwrap_err();
        assert!(error.contains("DOCS_TOKEN is not set"), "{error}");
        let stdio = table("command = \"x\"\nenv = { API_KEY = \"hidden-value\" }");
        assert!(!format!("{stdio:?}").contains("hidden-value"));
        let resolved = McpServer::resolve("s", &stdio, &|_| None).unwrap();
        assert!(!format!("{resolved:?}").contains("hidden-value"));
    }
}
