//! Tools from Model Context Protocol servers (SPEC section 10), through the
//! official SDK's client (`rmcp`).
//!
//! The server's `[mcp.NAME]` tables name the servers; a run names those it
//! uses (`mcp_servers`). When the run starts, each is connected to, for
//! this run alone:
//! - a **stdio** server is started as a child process in the run's
//!   workspace, under the same sandbox and process-tree containment as a
//!   command preset (cleared environment plus its `env`, Landlock with its
//!   `read_paths`, no network unless `network = true`, memory and process
//!   limits), with a private `HOME` and `TMPDIR`. The SDK speaks to it over
//!   its stdin and stdout; its stderr is drained, its last lines kept to
//!   explain a failed start;
//! - a **streamable HTTP** server gets a session of its own, with the
//!   bearer token read from `bearer_token_env` when the server started.
//!
//! Their tools join the run as `mcp__SERVER__TOOL` ([`tool_name`]), each
//! with its description and input schema: one registry with the built-in
//! and client tools, so the same argument check, budgets, events, bounded
//! results and approvals. Every session ends with the run's drive, on
//! every path (end, pause, cancel, deadline, shutdown): a stdio server's
//! whole tree is killed.
//!
//! - [`config`]: the tables, checked and resolved;
//! - [`connection`]: a run's sessions;
//! - [`tool`]: one MCP tool as a run's tool;
//! - `stderr`: what a stdio server says on stderr.

pub mod config;
pub mod connection;
mod stderr;
pub mod tool;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

pub use config::{McpServer, McpServerConfig, is_valid_server_name};
pub use connection::{Context, RunServers};
pub use tool::{McpTool, TOOL_PREFIX, server_prefix, tool_name};

use crate::models::profile::EnvLookup;

/// The server's MCP servers, resolved at start.
#[derive(Debug, Default)]
pub struct McpServers {
    servers: BTreeMap<String, Arc<McpServer>>,
    /// For the streamable HTTP servers, if there are any.
    http: Option<reqwest::Client>,
}

/// What `GET /v1/mcp` shows of a server.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct McpServerInfo {
    pub name: String,
    pub transport: &'static str,
}

impl McpServers {
    /// Resolves the configuration's tables (their bearer tokens read from
    /// `env`).
    pub fn new(
        configs: &BTreeMap<String, McpServerConfig>,
        env: EnvLookup<'_>,
    ) -> Result<Self, String> {
        let servers = configs
            .iter()
            .map(|(name, config)| {
                McpServer::resolve(name, config, env).map(|server| (name.clone(), Arc::new(server)))
            })
            .collect::<Result<BTreeMap<_, _>, _>>()?;
        let http = servers
            .values()
            .any(|server| matches!(server.transport, config::Transport::Http(_)))
            .then(crate::models::http::build_client)
            .transpose()
            .map_err(|error| error.to_string())?;
        Ok(Self { servers, http })
    }

    /// Connects a run to the servers named `names` (each configured), at
    /// once. A stdio server starts in `workspace`, which must exist; an
    /// HTTP server's requests carry `traceparent`, if given. When
    /// `abandon` fires, the servers still starting are ended (and waited
    /// for), and this answers an error.
    pub async fn connect(
        &self,
        names: &[String],
        commands: &crate::tools::CommandRunner,
        workspace: &Path,
        traceparent: Option<&str>,
        abandon: &tokio_util::sync::CancellationToken,
    ) -> Result<RunServers, String> {
        let servers: Vec<Arc<McpServer>> = names
            .iter()
            .map(|name| {
                self.get(name)
                    .cloned()
                    .ok_or_else(|| format!("the MCP server {name} is not configured"))
            })
            .collect::<Result<_, _>>()?;
        let context = Context {
            commands,
            workspace,
            http: self.http.as_ref(),
            traceparent,
            abandon,
        };
        RunServers::connect(&servers, &context).await
    }

    pub fn get(&self, name: &str) -> Option<&Arc<McpServer>> {
        self.servers.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.servers.contains_key(name)
    }

    /// Sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.servers.keys().map(String::as_str)
    }

    pub fn list(&self) -> Vec<McpServerInfo> {
        self.servers
            .values()
            .map(|server| McpServerInfo {
                name: server.name.clone(),
                transport: server.transport_name(),
            })
            .collect()
    }
}

/// The server a full MCP tool name belongs to, if it names one of
/// `servers`: `mcp__SERVER__...`.
pub fn server_of<'a>(name: &str, servers: &'a [String]) -> Option<&'a str> {
    servers
        .iter()
        .map(String::as_str)
        .find(|server| name.starts_with(&server_prefix(server)))
}
