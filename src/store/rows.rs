//! The `runs` table's rows and their conversion to the domain's types.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use super::{StoreError, Unfinished};
use crate::harness::{PendingAction, UsageTotals};
use crate::run::RunStatus;
use crate::run::{ActionAnswer, Run, Tenant};

/// A `SELECT` of every column of `runs`, with the given filter appended.
macro_rules! select_runs {
    ($filter:literal) => {
        concat!(
            "SELECT id, tenant, status, prompt, answer, error, steps, tool_calls, ",
            "input_tokens, output_tokens, model_calls_with_usage, cached_input_tokens, ",
            "cache_write_tokens, cost_usd, limits, context, tools, ",
            "commands, model, metadata, model_spec, request_hash, created_at, started_at, ",
            "finished_at, approval, client_tools, pending_actions, answers, running_ms, ",
            "action_deadline, instructions, thread_id, previous_run_id, mcp_servers, webhook, ",
            "resumes, owner, trace_id, parent_span_id, trace_sampled, agent_name, agent_version, ",
            "output_schema, output, seed, changes, parent_run_id, attempt, temperature, ",
            "attempt_policy, attempts, chosen_attempt, schedule_id, schedule_tick, waiting_for, ",
            "copy_pending, subagents, children_usage, call_id, subrun, delegated_actions ",
            "FROM runs ",
            $filter
        )
    };
}

pub(super) const SELECT_RUN_BY_ID: &str = select_runs!("WHERE id = $1 AND tenant = $2");
pub(super) const SELECT_RUN_BY_IDEMPOTENCY_KEY: &str =
    select_runs!("WHERE tenant = $1 AND idempotency_key = $2");
pub(super) const SELECT_RUN_FOR_UPDATE: &str = select_runs!("WHERE id = $1");
/// The same, locking the row (PostgreSQL).
pub(super) const SELECT_RUN_FOR_UPDATE_LOCKED: &str = select_runs!("WHERE id = $1 FOR UPDATE");
pub(super) const SELECT_LIVE_RUNS: &str = select_runs!("WHERE status = $1 ORDER BY id");
/// A tenant's oldest queued run not being claimed, locked (PostgreSQL); not
/// one queued behind a live run of its thread.
pub(super) const SELECT_NEXT_QUEUED_OF_TENANT: &str = select_runs!(
    "WHERE tenant = $1 AND status = 'queued' AND (not_before IS NULL OR not_before <= $2) \
     AND waiting_for IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
);
/// The same, of its runs that started before (PostgreSQL): what a tenant
/// whose quota is spent may still go on with.
pub(super) const SELECT_NEXT_STARTED_QUEUED_OF_TENANT: &str = select_runs!(
    "WHERE tenant = $1 AND status = 'queued' AND (not_before IS NULL OR not_before <= $2) \
     AND waiting_for IS NULL AND started_at IS NOT NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
);
/// A running run owned by a replica, locked (PostgreSQL).
pub(super) const SELECT_OWNED_RUNNING: &str =
    select_runs!("WHERE id = $1 AND owner = $2 AND status = 'running' FOR UPDATE");
/// Running runs that no live replica owns, locked (PostgreSQL).
pub(super) const SELECT_ORPHANED_RUNS: &str = select_runs!(
    "WHERE status = 'running' AND (owner IS NULL \
     OR NOT EXISTS (SELECT 1 FROM replicas WHERE replicas.id = runs.owner)) \
     ORDER BY id FOR UPDATE SKIP LOCKED"
);
/// Pages of runs, newest first, after a cursor when one is bound non-null:
/// one statement per filter, each written so that SQLite takes its index
/// (`runs_by_tenant`, `runs_by_tenant_status`, `runs_by_thread`); a filter
/// written `(? IS NULL OR ...)` would keep it from any of them.
pub(super) const SELECT_RUNS_PAGE: &str =
    select_runs!("WHERE tenant = $1 AND ($2 IS NULL OR id < $2) ORDER BY id DESC LIMIT $3");
pub(super) const SELECT_RUNS_PAGE_BY_STATUS: &str = select_runs!(
    "WHERE tenant = $1 AND ($2 IS NULL OR id < $2) AND status = $4 ORDER BY id DESC LIMIT $3"
);
pub(super) const SELECT_RUNS_PAGE_BY_THREAD: &str = select_runs!(
    "WHERE tenant = $1 AND ($2 IS NULL OR id < $2) AND thread_id = $4 ORDER BY id DESC LIMIT $3"
);
pub(super) const SELECT_RUNS_PAGE_BY_STATUS_AND_THREAD: &str = select_runs!(
    "WHERE tenant = $1 AND ($2 IS NULL OR id < $2) AND thread_id = $4 AND status = $5 \
     ORDER BY id DESC LIMIT $3"
);
/// A run's attempts (`runs_attempts`).
pub(super) const SELECT_RUNS_PAGE_BY_PARENT: &str = select_runs!(
    "WHERE tenant = $1 AND ($2 IS NULL OR id < $2) AND parent_run_id = $4 \
     AND ($5 IS NULL OR status = $5) AND ($6 IS NULL OR thread_id = $6) \
     AND ($7 IS NULL OR agent_name = $7) AND ($8 IS NULL OR schedule_id = $8) \
     ORDER BY id DESC LIMIT $3"
);
/// A schedule's runs (`runs_by_schedule`), narrowed by the other filters
/// when bound non-null.
pub(super) const SELECT_RUNS_PAGE_BY_SCHEDULE: &str = select_runs!(
    "WHERE schedule_id = $4 AND tenant = $1 AND ($2 IS NULL OR id < $2) \
     AND ($5 IS NULL OR status = $5) AND ($6 IS NULL OR thread_id = $6) \
     AND ($7 IS NULL OR agent_name = $7) ORDER BY id DESC LIMIT $3"
);
/// Runs queued behind one that has ended, or is gone (`runs_waiting`).
pub(super) const SELECT_RELEASABLE: &str = select_runs!(
    "WHERE waiting_for IS NOT NULL AND status = 'queued' AND NOT EXISTS (SELECT 1 FROM runs AS \
     ahead WHERE ahead.id = runs.waiting_for \
     AND ahead.status IN ('queued', 'running', 'requires_action')) ORDER BY id"
);
/// Every attempt of a run, whoever its tenant (the runner's own read).
pub(super) const SELECT_ATTEMPTS_OF: &str =
    select_runs!("WHERE parent_run_id = $1 ORDER BY attempt");
/// The child a parent's `delegate` call started (`runs_subruns`).
pub(super) const SELECT_CHILD_OF_CALL: &str =
    select_runs!("WHERE parent_run_id = $1 AND call_id = $2");
/// An agent's runs (`runs_by_tenant_agent`), of one status or thread when
/// bound non-null.
pub(super) const SELECT_RUNS_PAGE_BY_AGENT: &str = select_runs!(
    "WHERE tenant = $1 AND ($2 IS NULL OR id < $2) AND agent_name = $4 \
     AND ($5 IS NULL OR status = $5) AND ($6 IS NULL OR thread_id = $6) ORDER BY id DESC LIMIT $3"
);

/// The run as clients are shown it: a parent whose child waits for a
/// decision shows it waiting too, the child's actions its own (SPEC
/// section 24), while its row stays `running` (it is live, awaiting the
/// child). Never what the service itself decides on: see [`run_from_row`].
pub(super) fn run_as_shown(row: &AnyRow) -> Result<Run, StoreError> {
    let mut run = run_from_row(row)?;
    if run.status == RunStatus::Running
        && let Some(delegated) = optional_json::<Vec<PendingAction>>(row, "delegated_actions")?
        && !delegated.is_empty()
    {
        run.status = RunStatus::RequiresAction;
        run.pending_actions = delegated;
    }
    Ok(run)
}

/// The run as its row stores it (what the service itself goes on from).
pub(super) fn run_from_row(row: &AnyRow) -> Result<Run, StoreError> {
    let mut run = run_columns(row)?;
    if let Some(mut child) = optional_json::<crate::run::ChildOf>(row, "subrun")? {
        child.parent_run_id = run.parent_run_id.unwrap_or_default();
        child.call_id = row.get::<Option<String>, _>("call_id").unwrap_or_default();
        run.root_run_id = Some(child.root_run_id);
        run.child_of = Some(child);
    }
    run.refresh_total();
    Ok(run)
}

fn run_columns(row: &AnyRow) -> Result<Run, StoreError> {
    Ok(Run {
        id: parse_uuid(&row.get::<String, _>("id"))?,
        status: RunStatus::parse(&row.get::<String, _>("status"))
            .ok_or_else(|| StoreError::Corrupt("unknown run status".into()))?,
        prompt: row.get("prompt"),
        answer: row.get("answer"),
        error: row.get("error"),
        steps: count(row, "steps")?,
        tool_calls: count(row, "tool_calls")?,
        usage: usage_totals(row)?,
        resumes: count(row, "resumes")?,
        trace_id: row.get("trace_id"),
        parent_span_id: row.get("parent_span_id"),
        // 0 or 1 (an integer in both engines, as the other counts).
        trace_sampled: count::<u8>(row, "trace_sampled")? != 0,
        limits: json(row, "limits")?,
        context: json(row, "context")?,
        tools: json(row, "tools")?,
        commands: json(row, "commands")?,
        model: json(row, "model")?,
        metadata: json(row, "metadata")?,
        pending_actions: unanswered(row)?,
        approval: json(row, "approval")?,
        client_tools: json(row, "client_tools")?,
        mcp_servers: json(row, "mcp_servers")?,
        instructions: row
            .get::<Option<String>, _>("instructions")
            .map(std::sync::Arc::from),
        thread_id: parse_uuid(&row.get::<String, _>("thread_id"))?,
        previous_run_id: row
            .get::<Option<String>, _>("previous_run_id")
            .as_deref()
            .map(parse_uuid)
            .transpose()?,
        webhook: row
            .get::<Option<String>, _>("webhook")
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("webhook: {e}")))?,
        agent: match row.get::<Option<String>, _>("agent_name") {
            Some(name) => Some(crate::run::AgentRef {
                name,
                version: count(row, "agent_version")?,
            }),
            None => None,
        },
        output_schema: optional_json(row, "output_schema")?.map(std::sync::Arc::new),
        seed: optional_json(row, "seed")?.map(std::sync::Arc::new),
        changes: optional_json(row, "changes")?,
        parent_run_id: row
            .get::<Option<String>, _>("parent_run_id")
            .as_deref()
            .map(parse_uuid)
            .transpose()?,
        attempt: optional_count(row, "attempt")?,
        temperature: row
            .get::<Option<String>, _>("temperature")
            .map(|text| {
                text.parse::<f64>()
                    .map_err(|_| StoreError::Corrupt(format!("temperature {text:?}")))
            })
            .transpose()?,
        attempt_policy: optional_json(row, "attempt_policy")?,
        attempts: optional_json(row, "attempts")?,
        chosen_attempt: optional_count(row, "chosen_attempt")?,
        schedule_id: optional_uuid(row, "schedule_id")?,
        schedule_tick: row
            .get::<Option<String>, _>("schedule_tick")
            .as_deref()
            .map(time)
            .transpose()?,
        waiting_for: optional_uuid(row, "waiting_for")?,
        copy_pending: count::<u8>(row, "copy_pending")? != 0,
        subagents: optional_json(row, "subagents")?.map(std::sync::Arc::new),
        root_run_id: None,
        usage_total: None,
        children_usage: optional_json(row, "children_usage")?,
        child_of: None,
        output: optional_json(row, "output")?,
        created_at: time(&row.get::<String, _>("created_at"))?,
        started_at: row
            .get::<Option<String>, _>("started_at")
            .as_deref()
            .map(time)
            .transpose()?,
        finished_at: row
            .get::<Option<String>, _>("finished_at")
            .as_deref()
            .map(time)
            .transpose()?,
    })
}

fn optional_uuid(row: &AnyRow, column: &str) -> Result<Option<Uuid>, StoreError> {
    row.get::<Option<String>, _>(column)
        .as_deref()
        .map(parse_uuid)
        .transpose()
}

pub(super) fn unfinished_from_row(row: &AnyRow) -> Result<Unfinished, StoreError> {
    let run = run_from_row(row)?;
    let answered_pause = row.get::<String, _>("pending_actions") != "[]";
    Ok(Unfinished {
        recovered: run.resumes > 0 && !answered_pause,
        run,
        tenant: Tenant(row.get("tenant")),
        model: json(row, "model_spec")?,
        answered_pause,
    })
}

/// The pending actions still waiting for an answer, as clients see them.
fn unanswered(row: &AnyRow) -> Result<Vec<PendingAction>, StoreError> {
    let pending: Vec<PendingAction> = json(row, "pending_actions")?;
    if pending.is_empty() {
        return Ok(pending);
    }
    let answers: Answers = json(row, "answers")?;
    Ok(pending
        .into_iter()
        .filter(|action| !answers.contains_key(&action.call_id))
        .map(PendingAction::shown)
        .collect())
}

/// The answers a paused run was given so far, by call id.
pub(super) type Answers = std::collections::HashMap<String, ActionAnswer>;

pub(super) fn parse_uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|_| StoreError::Corrupt(format!("bad run id {text:?}")))
}

/// A run's usage, from its columns.
pub(super) fn usage_totals(row: &AnyRow) -> Result<UsageTotals, StoreError> {
    Ok(UsageTotals {
        input_tokens: count(row, "input_tokens")?,
        output_tokens: count(row, "output_tokens")?,
        model_calls_with_usage: count(row, "model_calls_with_usage")?,
        cached_input_tokens: count(row, "cached_input_tokens")?,
        cache_write_tokens: count(row, "cache_write_tokens")?,
        cost_usd: row.get::<Option<f64>, _>("cost_usd"),
    })
}

fn count<T: TryFrom<i64>>(row: &AnyRow, column: &str) -> Result<T, StoreError> {
    T::try_from(row.get::<i64, _>(column))
        .map_err(|_| StoreError::Corrupt(format!("{column} out of range")))
}

/// A count that may be null.
fn optional_count<T: TryFrom<i64>>(row: &AnyRow, column: &str) -> Result<Option<T>, StoreError> {
    row.get::<Option<i64>, _>(column)
        .map(|n| T::try_from(n).map_err(|_| StoreError::Corrupt(format!("{column} out of range"))))
        .transpose()
}

pub(super) fn json<T: DeserializeOwned>(row: &AnyRow, column: &str) -> Result<T, StoreError> {
    serde_json::from_str(&row.get::<String, _>(column))
        .map_err(|e| StoreError::Corrupt(format!("{column}: {e}")))
}

/// A column of JSON that may be null.
fn optional_json<T: DeserializeOwned>(row: &AnyRow, column: &str) -> Result<Option<T>, StoreError> {
    row.get::<Option<String>, _>(column)
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("{column}: {e}")))
}

pub(super) fn time(text: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| StoreError::Corrupt(format!("bad timestamp {text:?}")))
}
