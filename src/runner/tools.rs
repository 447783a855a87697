//! A run's tools, from their three sources, in one registry: the built-in
//! tools it asked for, the tools of its MCP servers (their sessions opened
//! for this run), and its client's own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::observer::RunObserver;
use super::subagents::{Delegation, DelegationParts};
use super::task::RunTask;
use crate::harness::{ClientTool, Observer, Tool, ToolRegistry};
use crate::mcp::{RunServers, TOOL_PREFIX};
use crate::repo::StartingTree;
use crate::tools::{RunWorkspace, builtin_tools};
use tokio_util::sync::CancellationToken;

impl RunTask {
    /// The run's tool registry. Its MCP servers are connected into
    /// `servers` (which the caller ends, whatever happens), and the run
    /// object's `tools` then lists what they offer. Also returns the
    /// running time connecting took, which counts against the run's
    /// `timeout_ms` (`before`: what it had used before this drive).
    pub(super) async fn tools(
        &self,
        observer: &Arc<RunObserver>,
        servers: &mut RunServers,
        before: Duration,
    ) -> Result<(ToolRegistry, Duration), String> {
        let shared = &self.runner.services;
        let spec = &self.spec;
        // A starting tree is kept when the run is seeded (see `super::seed`),
        // unless it is the request's files alone: then on the first write.
        let starting = spec.starting_tree();
        // A child that shares its parent's workspace works in its directory.
        let mut workspace = shared
            .workspaces
            .run(&spec.workspace_of(self.live.id).to_string());
        if starting == StartingTree::OnFirstWrite {
            let base = crate::repo::places::base(self.runner.workspaces_root(), self.live.id);
            workspace = workspace.keeping_starting_tree(base);
        }
        let workspace = Arc::new(workspace);
        // What a child sharing its parent's directory changed is its
        // parent's to count.
        if spec.workspace_of(self.live.id) == self.live.id {
            observer.watch_changes(super::changes::ChangesWatch {
                runner: self.runner.clone(),
                run_id: self.live.id,
                workspace: Arc::clone(&workspace),
                fresh: matches!(self.origin, super::Origin::Start),
                starting,
            });
        }
        let (builtin, mcp): (Vec<&str>, Vec<&str>) = spec
            .tools
            .iter()
            .map(String::as_str)
            .partition(|name| !name.starts_with(TOOL_PREFIX));
        let mut tools: Vec<Arc<dyn Tool>> = builtin_tools(
            Arc::clone(&workspace),
            Arc::clone(&shared.commands),
            &builtin,
            &spec.commands,
        )
        .map_err(|e| e.to_string())?;
        let began = Instant::now();
        *servers = self
            .connect_mcp(&workspace, before, observer.traceparent())
            .await?;
        let connecting = began.elapsed();
        let approvals: Vec<&str> = spec.approval.tools.iter().map(String::as_str).collect();
        let from_servers = servers.tools(&mcp, &approvals)?;
        if !servers.is_empty() {
            // What the run may call, now known: the run object lists it.
            let mut names: Vec<String> =
                tools.iter().map(|t| t.definition().name.clone()).collect();
            names.extend(from_servers.iter().map(|t| t.definition().name.clone()));
            if names != spec.tools {
                shared
                    .store
                    .writer()
                    .tools(self.live.id, names.clone())
                    .map_err(|e| e.to_string())?;
                observer.set_tools(names);
            }
        }
        if let Some(delegation) = self.delegation(observer, before, &workspace) {
            tools.push(Arc::new(delegation));
        }
        let compiled_here = spec.client_tools.is_empty() && from_servers.is_empty();
        tools.extend(from_servers);
        tools.extend(
            spec.client_tools
                .iter()
                .map(|definition| Arc::new(ClientTool::new(definition.clone())) as Arc<dyn Tool>),
        );
        // The server's own schemas are compiled once, in the shared cache;
        // a client's, and an MCP server's (up to a thousand tools), off the
        // runtime's threads.
        let registry = if compiled_here {
            ToolRegistry::with_cache(tools, &shared.schemas)
        } else {
            let shared = Arc::clone(shared);
            tokio::task::spawn_blocking(move || ToolRegistry::with_cache(tools, &shared.schemas))
                .await
                .map_err(|e| e.to_string())?
        }
        .map_err(|e| e.to_string())?;
        Ok((registry, connecting))
    }

    /// The run's `delegate` tool, when it has sub-agents and is not as
    /// deep as runs may delegate (`[runs] max_depth`).
    fn delegation(
        &self,
        observer: &Arc<RunObserver>,
        before: Duration,
        workspace: &Arc<RunWorkspace>,
    ) -> Option<Delegation> {
        let subagents = self.spec.subagents.as_ref().filter(|s| !s.is_empty())?;
        let depth = self.spec.child_of.as_ref().map_or(0, |of| of.depth);
        if depth >= self.runner.services.max_depth {
            return None;
        }
        let left = Duration::from_millis(self.spec.limits.timeout_ms).saturating_sub(before);
        Some(Delegation::new(DelegationParts {
            runner: self.runner.clone(),
            live: Arc::clone(&self.live),
            observer: Arc::clone(observer),
            slot: Arc::clone(self.slot.get()?),
            spec: self.spec.clone(),
            subagents: Arc::clone(subagents),
            deadline: Instant::now() + left,
            workspace: Arc::clone(workspace),
        }))
    }

    /// Connects the run to its MCP servers (none when it names none), in
    /// its workspace. A failure is the run's end (`failed`, naming the
    /// server). A stop, or the run's deadline, while they start leaves them
    /// out: the harness then ends the run as the stop (or `timeout`) says.
    async fn connect_mcp(
        &self,
        workspace: &Arc<RunWorkspace>,
        before: Duration,
        traceparent: Option<String>,
    ) -> Result<RunServers, String> {
        let spec = &self.spec;
        if spec.mcp_servers.is_empty() {
            return Ok(RunServers::default());
        }
        let shared = &self.runner.services;
        let abandon = CancellationToken::new();
        let connecting = async {
            let workspace = Arc::clone(workspace);
            let opened = tokio::task::spawn_blocking(move || workspace.for_writing())
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("the run's workspace could not be made: {e}"))?;
            shared
                .mcp
                .connect(
                    &spec.mcp_servers,
                    &shared.commands,
                    opened.root(),
                    traceparent.as_deref(),
                    &abandon,
                )
                .await
        };
        tokio::pin!(connecting);
        let remaining = Duration::from_millis(spec.limits.timeout_ms).saturating_sub(before);
        let began = Instant::now();
        tokio::select! {
            biased;
            () = self.live.stop.stopped() => {}
            () = tokio::time::sleep(remaining) => {}
            connected = &mut connecting => {
                if connected.is_ok() {
                    tracing::debug!(
                        servers = spec.mcp_servers.len(),
                        ms = began.elapsed().as_millis(),
                        "MCP servers connected"
                    );
                }
                return connected;
            }
        }
        // Given up on: the servers still starting are ended, and waited
        // for, before the run goes on to its end.
        abandon.cancel();
        if let Ok(mut started) = connecting.await {
            started.close().await;
        }
        Ok(RunServers::default())
    }
}
