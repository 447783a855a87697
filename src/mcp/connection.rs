//! One run's sessions with its MCP servers: a stdio server started for the
//! run under the command sandbox, or a session with a streamable HTTP
//! server; the tools each lists; and their end, on every path.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use rmcp::{RoleClient, ServiceExt};
use tokio_util::sync::CancellationToken;

use super::config::{HttpServer, McpServer, StdioServer, Transport};
use super::stderr::StderrTail;
use super::tool::{McpTool, bounded, server_prefix, tool_name};
use crate::harness::Tool;
use crate::tools::command::{REAP_WITHIN, describe};
use crate::tools::sandbox::SandboxedChild;
use crate::tools::{CommandPolicy, CommandRunner};

/// Longest message a stdio server may send; a longer one is dropped (and
/// the call it answers times out).
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Most tools a server may list.
pub const MAX_TOOLS: usize = 1000;

/// How long a failed server's stderr may take to reach its end.
const STDERR_WITHIN: Duration = Duration::from_millis(500);

/// How long a failed server's exit may take to be seen.
const EXIT_WITHIN: Duration = Duration::from_millis(200);

/// How long an HTTP session's close may take.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

/// What starting a run's servers needs of the run.
pub struct Context<'a> {
    pub commands: &'a CommandRunner,
    /// The run's workspace directory, made: a stdio server's working
    /// directory.
    pub workspace: &'a Path,
    /// Built when the server has streamable HTTP servers.
    pub http: Option<&'a reqwest::Client>,
    /// The W3C `traceparent` of the run's span, sent with every request
    /// to an HTTP server (the server's spans join the run's trace).
    pub traceparent: Option<&'a str>,
    /// Fires when the run no longer waits for its servers (it was stopped,
    /// or its deadline passed): a server still starting is ended, and
    /// waited for.
    pub abandon: &'a CancellationToken,
}

/// What a start given up on answers (the run does not show it).
const ABANDONED: &str = "the run stopped waiting for it";

/// A run's open sessions. Dropping it ends them all (a stdio server's
/// whole process tree is killed); [`RunServers::close`] does the same and
/// waits until it is done.
#[derive(Default)]
pub struct RunServers {
    sessions: Vec<Session>,
}

struct Session {
    server: Arc<McpServer>,
    /// Dropped before `child`: the transport lets go of the pipes first.
    service: RunningService<RoleClient, ClientConfig>,
    tools: Vec<rmcp::model::Tool>,
    child: Option<SandboxedChild>,
    _stderr: Option<StderrTail>,
}

impl RunServers {
    /// Connects to every server of `servers` at once; the first that fails
    /// is the error, and the others are ended (those still starting given
    /// up on, and waited for).
    pub async fn connect(
        servers: &[Arc<McpServer>],
        context: &Context<'_>,
    ) -> Result<Self, String> {
        let abandon = context.abandon.child_token();
        let context = Context {
            abandon: &abandon,
            ..*context
        };
        let mut connecting: FuturesUnordered<_> = servers
            .iter()
            .map(|server| connect(server, &context))
            .collect();
        let mut connected = Self::default();
        let mut failure = None;
        while let Some(session) = connecting.next().await {
            match session {
                Ok(session) => connected.sessions.push(session),
                Err(error) => {
                    abandon.cancel();
                    failure.get_or_insert(error);
                }
            }
        }
        match failure {
            None => Ok(connected),
            Some(error) => {
                connected.close().await;
                Err(error)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// The run's tools of these servers. `requested`: the MCP tools the
    /// request named; a server none of them names gives all its tools, a
    /// server some name gives exactly those. Each named tool, and each MCP
    /// tool `approvals` names, must be one the server listed. Two tools
    /// whose full names come out the same: the first listed is kept.
    pub fn tools(
        &self,
        requested: &[&str],
        approvals: &[&str],
    ) -> Result<Vec<Arc<dyn Tool>>, String> {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for session in &self.sessions {
            let name = &session.server.name;
            let prefix = server_prefix(name);
            let of_server = |names: &[&str]| -> Vec<String> {
                names
                    .iter()
                    .filter(|t| t.starts_with(&prefix))
                    .map(|t| (*t).to_owned())
                    .collect()
            };
            let named = of_server(requested);
            let server: Arc<str> = Arc::from(name.as_str());
            let mut offered: Vec<String> = Vec::new();
            for tool in &session.tools {
                let full = tool_name(name, &tool.name);
                if offered.contains(&full) {
                    tracing::warn!(
                        server = %name,
                        tool = %tool.name,
                        "an MCP tool's name is the same as another's once made safe; it is left out"
                    );
                    continue;
                }
                if named.is_empty() || named.contains(&full) {
                    tools.push(Arc::new(McpTool::new(
                        session.service.peer().clone(),
                        Arc::clone(&server),
                        tool,
                        session.server.tool_timeout,
                    )));
                }
                offered.push(full);
            }
            for (field, names) in [("tools", named), ("approval.tools", of_server(approvals))] {
                if let Some(missing) = names.iter().find(|t| !offered.contains(t)) {
                    return Err(format!(
                        "{field}: the MCP server {name} has no tool {missing} (it has: {})",
                        listing(&offered)
                    ));
                }
            }
        }
        Ok(tools)
    }

    /// Ends every session, all at once: HTTP sessions are closed, stdio
    /// servers killed, whole trees, and waited for (a bounded time).
    pub async fn close(&mut self) {
        let sessions = std::mem::take(&mut self.sessions);
        futures_util::future::join_all(sessions.into_iter().map(Session::close)).await;
    }
}

impl Session {
    async fn close(mut self) {
        match &mut self.child {
            // A stdio server is not asked: its tree is killed.
            Some(child) => {
                child.process.kill_tree();
                let _ = child.process.reap(REAP_WITHIN).await;
                if !child.process.wait_gone(REAP_WITHIN).await {
                    tracing::warn!(
                        server = %self.server.name,
                        "an MCP server's process tree did not empty in time"
                    );
                }
            }
            None => {
                let _ = self.service.close_with_timeout(CLOSE_WITHIN).await;
            }
        }
    }
}

/// The first names of `names`, for an error.
fn listing(names: &[String]) -> String {
    const SHOWN: usize = 50;
    match names.len() {
        0 => "none".to_owned(),
        n if n <= SHOWN => names.join(", "),
        n => format!("{}, and {} more", names[..SHOWN].join(", "), n - SHOWN),
    }
}

/// Who this client is, in the protocol version whose lifecycle every
/// server of today speaks (`initialize`).
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("agent-runner", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
}

async fn connect(server: &Arc<McpServer>, context: &Context<'_>) -> Result<Session, String> {
    let failed = |cause: String| format!("MCP server {} failed to start: {cause}", server.name);
    match &server.transport {
        Transport::Stdio(stdio) => connect_stdio(server, stdio, context).await.map_err(failed),
        Transport::Http(http) => connect_http(server, http, context).await.map_err(failed),
    }
}

fn timed_out(server: &McpServer) -> String {
    format!(
        "it did not start and list its tools within {} ms (its startup_timeout_ms)",
        server.startup_timeout.as_millis()
    )
}

/// Starts the server's process for the run and opens the session.
async fn connect_stdio(
    server: &Arc<McpServer>,
    stdio: &StdioServer,
    context: &Context<'_>,
) -> Result<Session, String> {
    let mut command = context
        .commands
        .command(&stdio.program, &stdio.args, context.workspace);
    command
        .envs(stdio.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let policy = CommandPolicy {
        workspace: context.workspace.to_owned(),
        read_paths: stdio.read_paths.clone(),
        network: stdio.network,
        memory_max_bytes: stdio.memory_max_bytes,
        pids_max: stdio.pids_max,
        private_home: true,
    };
    let mut child = context
        .commands
        .sandbox()
        .spawn(command, policy)
        .await
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => format!("{}: program not found", stdio.program),
            _ => format!("{}: {error}", stdio.program),
        })?;
    let (Some(stdin), Some(stdout)) = (child.process.take_stdin(), child.process.take_stdout())
    else {
        return Err("its stdin and stdout could not be opened".into());
    };
    let secrets: Vec<&str> = stdio.env.iter().map(|(_, v)| v.as_str()).collect();
    let stderr = StderrTail::start(child.process.take_stderr(), &server.name, &secrets);
    let transport =
        AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MAX_MESSAGE_BYTES);
    let opened = tokio::select! {
        opened = tokio::time::timeout(server.startup_timeout, open(client_config(), transport)) => opened,
        () = context.abandon.cancelled() => {
            child.process.kill_tree();
            let _ = child.process.reap(REAP_WITHIN).await;
            let _ = child.process.wait_gone(REAP_WITHIN).await;
            return Err(ABANDONED.into());
        }
    };
    match opened {
        Ok(Ok((service, tools))) => Ok(Session {
            server: Arc::clone(server),
            service,
            tools,
            child: Some(child),
            _stderr: Some(stderr),
        }),
        failure => {
            let cause = match failure {
                Ok(Err(cause)) => bounded(&cause),
                _ => timed_out(server),
            };
            // Whether it ended on its own, before it is killed: its pipe's
            // end may come a moment before its exit is seen.
            let exited = tokio::time::timeout(EXIT_WITHIN, child.process.exited())
                .await
                .is_ok();
            child.process.kill_tree();
            let status = child.process.reap(REAP_WITHIN).await;
            let exit = match (exited, describe(status)) {
                (true, (Some(code), _)) => format!("; it exited with code {code}"),
                (true, (None, Some(signal))) => format!("; it was ended by {signal}"),
                _ => String::new(),
            };
            let last = stderr.last_lines(STDERR_WITHIN).await;
            let _ = child.process.wait_gone(REAP_WITHIN).await;
            Err(if last.is_empty() {
                format!("{cause}{exit}; its stderr was empty")
            } else {
                format!("{cause}{exit}; its stderr ended with:\n{last}")
            })
        }
    }
}

/// Opens a session with the server at its URL.
async fn connect_http(
    server: &Arc<McpServer>,
    http: &HttpServer,
    context: &Context<'_>,
) -> Result<Session, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(http.url.as_str());
    if let Some(token) = &http.token {
        config = config.auth_header(token.expose());
    }
    if let Some(traceparent) = context
        .traceparent
        .and_then(|value| reqwest::header::HeaderValue::from_str(value).ok())
    {
        config.custom_headers.insert(
            reqwest::header::HeaderName::from_static("traceparent"),
            traceparent,
        );
    }
    let client = context
        .http
        .ok_or("no HTTP client was built for the server's MCP servers")?;
    let transport = StreamableHttpClientTransport::with_client(client.clone(), config);
    // The URL may name internal hosts, and the token is the server's: a
    // tenant's run is told neither.
    let scrub = |text: String| {
        let text = text.replace(http.url.as_str(), "its url");
        match &http.token {
            Some(token) => token.scrub(&text),
            None => text,
        }
    };
    let opened = tokio::select! {
        opened = tokio::time::timeout(server.startup_timeout, open(client_config(), transport)) => opened,
        () = context.abandon.cancelled() => return Err(ABANDONED.into()),
    };
    match opened {
        Ok(Ok((service, tools))) => Ok(Session {
            server: Arc::clone(server),
            service,
            tools,
            child: None,
            _stderr: None,
        }),
        Ok(Err(cause)) => Err(bounded(&scrub(cause))),
        Err(_) => Err(timed_out(server)),
    }
}

type Opened = (
    RunningService<RoleClient, ClientConfig>,
    Vec<rmcp::model::Tool>,
);

/// The handshake, then the whole tool list (every page).
async fn open<T, E, A>(info: ClientConfig, transport: T) -> Result<Opened, String>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let service = info.serve(transport).await.map_err(|e| e.to_string())?;
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| format!("listing its tools failed: {e}"))?;
    if tools.len() > MAX_TOOLS {
        return Err(format!(
            "it lists {} tools, more than the {MAX_TOOLS} a run takes",
            tools.len()
        ));
    }
    Ok((service, tools))
}
