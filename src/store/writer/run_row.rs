//! A row of `runs` as a new run's insert writes it (see [`super::sql`]).

use crate::run::format_time;
use crate::store::{NewRun, StatusChange, StoreError};

/// A row of `runs`, owned, ready to insert.
pub(crate) struct RunRow {
    pub(super) id: String,
    pub(super) tenant: String,
    pub(super) status: &'static str,
    pub(super) prompt: String,
    pub(super) limits: String,
    pub(super) context: String,
    pub(super) tools: String,
    pub(super) commands: String,
    pub(super) model: String,
    pub(super) metadata: String,
    pub(super) approval: String,
    pub(super) client_tools: String,
    pub(super) mcp_servers: String,
    pub(super) instructions: Option<std::sync::Arc<str>>,
    pub(super) thread_id: String,
    pub(super) previous_run_id: Option<String>,
    pub(super) model_spec: String,
    pub(super) idempotency_key: Option<String>,
    pub(super) request_hash: Option<String>,
    pub(super) created_at: String,
    pub(super) started_at: Option<String>,
    pub(super) owner: Option<String>,
    pub(super) webhook: Option<String>,
    pub(super) trace_id: String,
    pub(super) parent_span_id: Option<String>,
    pub(super) trace_sampled: bool,
    pub(super) agent_name: Option<String>,
    pub(super) agent_version: Option<i64>,
    pub(super) output_schema: Option<String>,
    pub(super) seed: Option<String>,
    pub(super) seed_files: Option<String>,
    pub(super) parent_run_id: Option<String>,
    pub(super) attempt: Option<i64>,
    pub(super) temperature: Option<String>,
    pub(super) attempt_policy: Option<String>,
    pub(super) attempts: Option<String>,
    pub(super) schedule_id: Option<String>,
    pub(super) schedule_tick: Option<String>,
    pub(super) waiting_for: Option<String>,
    pub(super) copy_pending: bool,
    pub(super) subagents: Option<String>,
    pub(super) children_usage: Option<String>,
    pub(super) call_id: Option<String>,
    pub(super) subrun: Option<String>,
    /// The change of status its insert commits.
    pub(super) change: StatusChange,
}

impl RunRow {
    /// The replica that holds the run from its insert (it starts there at
    /// once), if any.
    pub(super) fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The run's prompt (the writer's test hook looks at it).
    #[cfg(debug_assertions)]
    pub(super) fn prompt(&self) -> &str {
        &self.prompt
    }

    pub(crate) fn new(new: NewRun<'_>) -> Result<Self, StoreError> {
        let run = new.run;
        Ok(Self {
            id: run.id.to_string(),
            tenant: new.tenant.0.clone(),
            status: run.status.as_str(),
            prompt: run.prompt.clone(),
            limits: json(&run.limits)?,
            context: json(&run.context)?,
            tools: json(&run.tools)?,
            commands: json(&run.commands)?,
            model: json(&run.model)?,
            metadata: json(&run.metadata)?,
            approval: json(&run.approval)?,
            client_tools: json(&run.client_tools)?,
            mcp_servers: json(&run.mcp_servers)?,
            instructions: run.instructions.clone(),
            thread_id: run.thread_id.to_string(),
            previous_run_id: run.previous_run_id.map(|id| id.to_string()),
            model_spec: json(&new.spec.model)?,
            idempotency_key: new.idempotency.map(|(key, _)| key.to_owned()),
            request_hash: new.idempotency.map(|(_, hash)| hash.to_owned()),
            created_at: format_time(&run.created_at),
            started_at: run.started_at.as_ref().map(format_time),
            owner: new.owner.map(str::to_owned),
            webhook: run.webhook.as_ref().map(json).transpose()?,
            trace_id: run.trace_id.clone(),
            parent_span_id: run.parent_span_id.clone(),
            trace_sampled: run.trace_sampled,
            agent_name: run.agent.as_ref().map(|agent| agent.name.clone()),
            agent_version: run.agent.as_ref().map(|agent| i64::from(agent.version)),
            output_schema: run.output_schema.as_deref().map(json).transpose()?,
            seed: run.seed.as_deref().map(json).transpose()?,
            parent_run_id: run.parent_run_id.map(|id| id.to_string()),
            attempt: run.attempt.map(i64::from),
            temperature: run.temperature.map(|t| t.to_string()),
            attempt_policy: run.attempt_policy.as_ref().map(json).transpose()?,
            attempts: run.attempts.as_ref().map(json).transpose()?,
            schedule_id: run.schedule_id.map(|id| id.to_string()),
            schedule_tick: run.schedule_tick.as_ref().map(format_time),
            waiting_for: run.waiting_for.map(|id| id.to_string()),
            copy_pending: run.copy_pending,
            subagents: run.subagents.as_deref().map(json).transpose()?,
            children_usage: run.children_usage.as_ref().map(json).transpose()?,
            call_id: run.child_of.as_ref().map(|of| of.call_id.clone()),
            subrun: run.child_of.as_ref().map(json).transpose()?,
            // What is written over a clone or an upload, which whichever
            // process starts the run fetches, or over the workspace of the
            // run it waits to continue. A run of files alone has them
            // written when it is accepted: they are not kept.
            seed_files: ((new.spec.seed.fetches() || run.copy_pending)
                && !new.spec.files.is_empty())
            .then(|| json(&new.spec.files))
            .transpose()?,
            change: StatusChange {
                run_id: run.id,
                tenant: new.tenant.0.clone(),
                status: run.status,
                at: format_time(run.started_at.as_ref().unwrap_or(&run.created_at)),
            },
        })
    }

    /// The change of status its insert commits.
    pub(super) fn status_change(&self) -> &StatusChange {
        &self.change
    }
}

pub(super) fn json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Corrupt(format!("cannot serialise a run: {e}")))
}
