//! The `delegate` tool: each call starts a child run of one of the run's
//! sub-agents and answers with the child's answer (its `output` under a
//! schema; with a copied workspace, its diff too), or its end when it did
//! not complete.
//!
//! Calls of one batch are told to the tool first: their children start at
//! once, at most `[runs] max_parallel_subruns` running, while the harness
//! takes their results in call order. Each child's life (start, end) is
//! followed by a task of its own, which tells the parent's stream through
//! the call the harness is in (the run's events are told by one task at a
//! time). A child is keyed by its call: a parent resumed after a crash
//! finds the child its call started and waits for it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::SlotCell;
use super::life::{ChildLife, Waiting};
use crate::harness::{EventKind, Outcome, Tool, ToolDefinition, ToolError};
use crate::run::{ChildOf, Multitask, Run, RunLimits, RunSpec, RunStatus, Subagent, Subagents};
use crate::runner::observer::RunObserver;
use crate::runner::{LiveRun, Runner};
use crate::telemetry::RunTrace;

/// Longest prompt a `delegate` call may give, in bytes (a run's own
/// instructions' bound).
const MAX_PROMPT_BYTES: usize = 256 * 1024;

/// Most bytes of a copied workspace's diff a result carries.
const MAX_DIFF_BYTES: usize = 64 * 1024;

/// What a child's life comes to: its run as it ended, or why there is
/// none to tell (it could not be started; the parent stopped first).
pub(super) type Ended = Result<Run, String>;

/// The `delegate` tool of one run.
pub(in crate::runner) struct Delegation {
    runner: Runner,
    /// The run that delegates.
    live: Arc<LiveRun>,
    observer: Arc<RunObserver>,
    slot: Arc<SlotCell>,
    subagents: Arc<Subagents>,
    definition: Arc<ToolDefinition>,
    /// Its own place in the tree: its root and depth (0 for a root).
    root: Uuid,
    depth: u32,
    /// The run whose workspace directory it works in.
    workspace_of: Uuid,
    limits: RunLimits,
    /// When its running time runs out.
    deadline: Instant,
    trace: RunTrace,
    /// Children running at once.
    parallel: Arc<Semaphore>,
    /// Its children by call: what each came to, once it did.
    children: Mutex<HashMap<String, watch::Receiver<Option<Ended>>>>,
    /// What its children's tasks have to tell on its stream, in order.
    news: (
        mpsc::UnboundedSender<EventKind>,
        tokio::sync::Mutex<mpsc::UnboundedReceiver<EventKind>>,
    ),
    /// Fires when the tool is gone (the run's drive ended): a child still
    /// running is cancelled, unless the run is handed over.
    gone: CancellationToken,
    /// The pending actions of its children that wait for a decision.
    waiting: Waiting,
    /// Held while its children's usage is summed and stored.
    counting: Arc<tokio::sync::Mutex<()>>,
    /// Its own workspace, opened for writing before a child works in it or
    /// copies it (its directory made, its starting tree kept, and its
    /// changes counted at its end: a child sharing it writes as its own
    /// tools would).
    workspace: Arc<crate::tools::RunWorkspace>,
}

/// What a [`Delegation`] is made of.
pub(in crate::runner) struct DelegationParts {
    pub runner: Runner,
    pub live: Arc<LiveRun>,
    pub observer: Arc<RunObserver>,
    pub slot: Arc<SlotCell>,
    pub spec: RunSpec,
    pub subagents: Arc<Subagents>,
    pub deadline: Instant,
    pub workspace: Arc<crate::tools::RunWorkspace>,
}

impl Delegation {
    pub(in crate::runner) fn new(parts: DelegationParts) -> Self {
        let DelegationParts {
            runner,
            live,
            observer,
            slot,
            spec,
            subagents,
            deadline,
            workspace,
        } = parts;
        let (sender, receiver) = mpsc::unbounded_channel();
        let live_id = live.id;
        // What an earlier execution listed of its children's actions is
        // listed again as they are found waiting.
        if let Err(error) = runner.services.store.writer().delegated(live_id, &[]) {
            tracing::warn!(%error, "the children's pending actions could not be cleared");
        }
        let parallel = Arc::new(Semaphore::new(
            runner.services.max_parallel_subruns as usize,
        ));
        Self {
            definition: Arc::new(crate::run::subagents::delegate_definition(&subagents)),
            root: spec.child_of.as_ref().map_or(live.id, |of| of.root_run_id),
            depth: spec.child_of.as_ref().map_or(0, |of| of.depth),
            workspace_of: spec.workspace_of(live.id),
            limits: spec.limits,
            trace: spec.trace,
            runner,
            live,
            observer,
            slot,
            subagents,
            deadline,
            parallel,
            children: Mutex::default(),
            news: (sender, tokio::sync::Mutex::new(receiver)),
            gone: CancellationToken::new(),
            waiting: Waiting::new(live_id),
            workspace,
            counting: Arc::default(),
        }
    }

    /// The child of `call_id`: its life's task, started now if it was not.
    /// `share`: how many children of its batch share what the parent has
    /// left to spend.
    fn child(
        &self,
        call_id: &str,
        arguments: &Value,
        share: usize,
    ) -> Result<watch::Receiver<Option<Ended>>, ToolError> {
        let name = arguments.get("agent").and_then(Value::as_str).unwrap_or("");
        let prompt = arguments
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or("");
        // Some servers give every response's calls the same ids: a child
        // is the call's id and what it asks, so that a later call reusing
        // an id starts a child of its own (and one that asks the same gets
        // the same answer).
        let key = child_key(call_id, name, prompt);
        let mut children = crate::sync::lock(&self.children);
        if let Some(child) = children.get(&key) {
            return Ok(child.clone());
        }
        let Some(subagent) = self.subagents.get(name) else {
            return Err(ToolError::new(format!(
                "No sub-agent {name:?}: give one of {}",
                self.subagents
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        if prompt.trim().is_empty() {
            return Err(ToolError::new(
                "The prompt is empty: say what the sub-agent is to do",
            ));
        }
        if prompt.contains('\0') || prompt.len() > MAX_PROMPT_BYTES {
            return Err(ToolError::new(format!(
                "The prompt must have no NUL character and at most {MAX_PROMPT_BYTES} bytes"
            )));
        }
        let spec = self.child_spec(&key, name, subagent, prompt, share);
        let copy_from =
            (!subagent.workspace.is_shared()).then(|| self.runner.workspace_dir(self.workspace_of));
        let (sender, receiver) = watch::channel(None);
        children.insert(key, receiver.clone());
        let life = ChildLife {
            runner: self.runner.clone(),
            tenant: self.live.tenant.clone(),
            parent: Arc::clone(&self.live),
            parallel: Arc::clone(&self.parallel),
            news: self.news.0.clone(),
            cancel: self.live.stop.token().clone(),
            gone: self.gone.clone(),
            call_id: call_id.to_owned(),
            agent: name.to_owned(),
            waiting: self.waiting.clone(),
            counting: Arc::clone(&self.counting),
        };
        let opening = Arc::clone(&self.workspace);
        tokio::spawn(async move {
            let opened = tokio::task::spawn_blocking(move || opening.for_writing().map(drop))
                .await
                .map_err(std::io::Error::other)
                .and_then(|opened| opened);
            if let Err(error) = opened {
                let why = format!("the workspace could not be opened: {error}");
                let _ = sender.send(Some(Err(why)));
                return;
            }
            let ended = life.live(spec, copy_from).await;
            let _ = sender.send(Some(ended));
        });
        Ok(receiver)
    }

    /// The child run a call starts: the sub-agent's definition, its limits
    /// capped by what the parent has left.
    fn child_spec(
        &self,
        key: &str,
        name: &str,
        subagent: &Subagent,
        prompt: &str,
        share: usize,
    ) -> RunSpec {
        let template = &subagent.definition;
        let (tool_calls, spent) = self
            .runner
            .services
            .store
            .live()
            .read(self.live.id, |run| {
                (run.tool_calls, run.usage_total.unwrap_or(run.usage))
            })
            .unwrap_or_default();
        let mut limits = template.limits;
        let left = self.deadline.saturating_duration_since(Instant::now());
        limits.timeout_ms = limits
            .timeout_ms
            .min(u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1));
        // The call itself is one of the parent's (counted as its batch
        // ends: the others of its batch are not yet).
        limits.max_tool_calls = limits.max_tool_calls.min(
            self.limits
                .max_tool_calls
                .saturating_sub(tool_calls.saturating_add(1)),
        );
        if let Some(max) = self.limits.max_cost_usd {
            // Shared by the children of its batch.
            let left = (max - spent.cost_usd.unwrap_or(0.0)).max(0.0) / share.max(1) as f64;
            limits.max_cost_usd = Some(limits.max_cost_usd.map_or(left, |own| own.min(left)));
        }
        let workspace_of = subagent.workspace.is_shared().then_some(self.workspace_of);
        let call_id = key.split('/').next().unwrap_or(key);
        let trace = self
            .observer
            .tool_traceparent(call_id)
            .and_then(|header| RunTrace::from_traceparent(&header))
            .unwrap_or(self.trace);
        RunSpec {
            prompt: prompt.to_owned(),
            model: template.model.clone(),
            model_info: template.model_info.clone(),
            tools: template.tools.clone(),
            commands: template.commands.clone(),
            files: Default::default(),
            limits,
            context: template.context.clone(),
            metadata: template.metadata.clone(),
            approval: template.approval.clone(),
            client_tools: template.client_tools.clone(),
            instructions: template.instructions.as_deref().map(Arc::from),
            previous_run_id: None,
            mcp_servers: template.mcp_servers.clone(),
            webhook: None,
            trace,
            agent: subagent.agent.clone(),
            output_schema: template.output_schema.clone().map(Arc::new),
            seed: Default::default(),
            attempts: None,
            attempt_of: None,
            multitask: Multitask::Reject,
            schedule: None,
            copy_pending: false,
            after: None,
            subagents: (!template.subagents.is_empty())
                .then(|| Arc::new(template.subagents.clone())),
            child_of: Some(ChildOf {
                parent_run_id: self.live.id,
                call_id: key.to_owned(),
                root_run_id: self.root,
                agent: name.to_owned(),
                depth: self.depth + 1,
                workspace_of,
            }),
        }
    }

    /// Tells the parent's stream what its children's tasks have to tell.
    fn tell(&self, news: &mut mpsc::UnboundedReceiver<EventKind>) {
        while let Ok(event) = news.try_recv() {
            self.observer.emit(event);
        }
    }

    /// What the model is answered for a child's end.
    async fn result(&self, run: &Run, copied: bool) -> Result<Value, ToolError> {
        if run.status != RunStatus::Ended(Outcome::Completed) {
            let error = run.error.as_deref().unwrap_or("no error given");
            return Err(ToolError::new(format!(
                "The sub-agent's run {} ended {}: {error}",
                run.id, run.status
            )));
        }
        let answer = match &run.output {
            Some(output) => output.clone(),
            None => Value::String(run.answer.clone().unwrap_or_default()),
        };
        if !copied {
            return Ok(answer);
        }
        let diff = self.diff(run.id).await;
        Ok(json!({"answer": answer, "diff": diff}))
    }

    /// A copied workspace's diff against what it started from (cut short
    /// past [`MAX_DIFF_BYTES`]).
    async fn diff(&self, id: Uuid) -> String {
        let base = crate::repo::places::base(self.runner.workspaces_root(), id);
        let now = self.runner.workspace_dir(id);
        let made = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
            let base = crate::repo::tree::Tree::walk(&base, false).map_err(|e| e.to_string())?;
            let now = crate::repo::tree::Tree::walk(&now, false).map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            crate::repo::diff::write(&base, &now, &mut out).map_err(|e| e.to_string())?;
            Ok(out)
        })
        .await;
        match made {
            Ok(Ok(mut out)) => {
                let cut = out.len() > MAX_DIFF_BYTES;
                out.truncate(MAX_DIFF_BYTES);
                let mut text = String::from_utf8_lossy(&out).into_owned();
                if cut {
                    text.push_str("\n[diff cut short]");
                }
                text
            }
            Ok(Err(error)) => format!("[the diff could not be made: {error}]"),
            Err(error) => format!("[the diff could not be made: {error}]"),
        }
    }
}

impl Drop for Delegation {
    fn drop(&mut self) {
        self.gone.cancel();
    }
}

#[async_trait]
impl Tool for Delegation {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    /// A call that runs again after its run was resumed waits for the child
    /// it started, never starts another.
    fn idempotent(&self, _arguments: &Value) -> bool {
        true
    }

    /// A parent handed over (or stopped) while a child runs leaves the call
    /// unanswered: whoever resumes it waits for the same child.
    fn resumes_on_stop(&self) -> bool {
        true
    }

    fn takes_batches(&self) -> bool {
        true
    }

    fn batch(&self, calls: &[(&str, &Value)]) {
        // Started now; their results are taken as each call runs. One that
        // cannot start answers its own call.
        for (call_id, arguments) in calls {
            let _ = self.child(call_id, arguments, calls.len());
        }
    }

    async fn execute(&self, _: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        Err(ToolError::new("delegate is called with its call's id"))
    }

    async fn execute_call(
        &self,
        call_id: &str,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let mut ended = self.child(call_id, arguments, 1)?;
        let copied = arguments
            .get("agent")
            .and_then(Value::as_str)
            .and_then(|name| self.subagents.get(name))
            .is_some_and(|subagent| !subagent.workspace.is_shared());
        let mut news = self.news.1.lock().await;
        let mut lent = false;
        let outcome = loop {
            self.tell(&mut news);
            if let Some(outcome) = ended.borrow().clone() {
                break outcome;
            }
            // Its slot is its children's while it waits.
            lent |= self.slot.lend();
            tokio::select! {
                changed = ended.changed() => if changed.is_err() {
                    break Err("the child's task ended without a word".into());
                },
                event = news.recv() => if let Some(event) = event {
                    self.observer.emit(event);
                },
                () = cancel.cancelled() => break Err("the run was stopped".into()),
            }
        };
        self.tell(&mut news);
        drop(news);
        if lent {
            self.slot.take_back(&self.runner, &self.live.tenant).await;
        }
        match outcome {
            Ok(run) => self.result(&run, copied).await,
            Err(why) => Err(ToolError::new(format!(
                "The sub-agent could not run: {why}"
            ))),
        }
    }
}

/// What a child is stored under: its call's id, and a digest of what it
/// asks (FNV-1a: the same in every build, so a parent resumed by another
/// version finds its children).
fn child_key(call_id: &str, agent: &str, prompt: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in agent.bytes().chain([0]).chain(prompt.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{call_id}/{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::child_key;

    #[test]
    fn a_child_is_keyed_by_its_call_and_what_it_asks() {
        let key = child_key("call_0", "reader", "read a.txt");
        assert_eq!(key, child_key("call_0", "reader", "read a.txt"));
        assert_ne!(key, child_key("call_0", "reader", "read b.txt"));
        assert_ne!(key, child_key("call_0", "writer", "read a.txt"));
        assert_ne!(key, child_key("call_1", "reader", "read a.txt"));
        assert!(key.starts_with("call_0/"));
        // Stable across builds: a resumed parent finds its children.
        assert_eq!(child_key("c", "a", "p"), "c/e5d2a71904267e7c");
    }
}
