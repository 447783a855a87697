//! The rows of a batch and the statements that write it.

use serde_json::Value;
use sqlx::AnyConnection;
use sqlx::Executor;

use super::Op;
pub(crate) use super::run_row::RunRow;
use super::run_row::json;
use super::statements::{Placeholders, chunks, values_statement};

use crate::store::cluster::{self, Membership};
use crate::store::{Engine, StoreError, outbox};

/// Begins a write transaction. A rollback that failed under an I/O error
/// can leave the connection inside a transaction: it is ended and begun
/// again. Not being able to begin at all is storage's refusal, not the
/// batch's fault.
pub(super) async fn begin(connection: &mut AnyConnection) -> Result<(), StoreError> {
    // SQLite takes its write lock at once (there is one writer, so it never
    // waits); PostgreSQL locks rows as they are written.
    let begin = match Engine::of_connection(connection) {
        Engine::Postgres => "BEGIN",
        Engine::Sqlite => "BEGIN IMMEDIATE",
    };
    if let Err(error) = connection.execute(begin).await {
        let _ = connection.execute("ROLLBACK").await;
        connection.execute(begin).await.map_err(|again| {
            StoreError::Refused(format!("cannot begin a transaction: {error}; {again}"))
        })?;
    }
    Ok(())
}

/// Writes `ops` in one transaction. On PostgreSQL, it first takes a share
/// lock on the row of `replica`, the membership this replica holds (none
/// there, or the membership lost: [`StoreError::Fenced`], and nothing is
/// written), and it tells the other replicas what it wrote once it is
/// committed (see [`crate::store::cluster`]). `committing` is the
/// transaction's id once its COMMIT is sent (on PostgreSQL): should that
/// fail without an answer, whether it committed is for [`committed`] to
/// tell.
pub(super) async fn apply_all(
    connection: &mut AnyConnection,
    replica: Option<&Membership>,
    ops: &[Op],
    committing: &mut Option<i64>,
) -> Result<(), StoreError> {
    *committing = None;
    if replica.is_some_and(|replica| replica.lost().is_cancelled()) {
        return Err(StoreError::Fenced);
    }
    begin(connection).await?;
    let mut xid = None;
    if let Some(replica) = replica {
        match cluster::hold_lease_writing(connection, replica.id()).await {
            Ok(Some(id)) => xid = Some(id),
            Ok(None) => {
                let _ = connection.execute("ROLLBACK").await;
                replica.lose("another replica took this one's lease for dead");
                return Err(StoreError::Fenced);
            }
            Err(error) => {
                let _ = connection.execute("ROLLBACK").await;
                return Err(error);
            }
        }
    }
    let written = async {
        apply(connection, ops).await?;
        if let Some(replica) = replica {
            announce(connection, replica, ops).await?;
        }
        Ok::<_, StoreError>(())
    };
    if let Err(error) = written.await {
        let _ = connection.execute("ROLLBACK").await;
        return Err(error);
    }
    *committing = xid;
    if let Err(error) = connection.execute("COMMIT").await {
        let _ = connection.execute("ROLLBACK").await;
        return Err(error.into());
    }
    *committing = None;
    Ok(())
}

/// Whether PostgreSQL's transaction `xid`, whose COMMIT went unanswered,
/// committed: `Some(true)` or `Some(false)`, `None` while it is still in
/// progress (its session has not read the COMMIT yet, the server having
/// been frozen, or it waits for a synchronous standby). One too old for the
/// server to tell is taken as not committed: written again, what it did
/// store fails alone, as a duplicate.
pub(super) async fn committed(
    connection: &mut AnyConnection,
    xid: i64,
) -> Result<Option<bool>, StoreError> {
    let status: Option<String> = sqlx::query_scalar("SELECT txid_status($1)")
        .bind(xid)
        .fetch_one(&mut *connection)
        .await?;
    Ok(match status.as_deref() {
        Some("committed") => Some(true),
        Some("in progress") => None,
        _ => Some(false),
    })
}

/// Writes `ops` with a few multi-row statements, one kind of row at a time,
/// rather than a statement per row: every statement is a round trip to the
/// connection's worker thread, and under load those round trips, not SQLite,
/// bounded the writer (see docs/benchmarks.md).
///
/// The kinds go in an order that keeps every run's rows consistent: a run is
/// inserted before its events and marked running before it pauses or ends.
async fn apply(connection: &mut AnyConnection, ops: &[Op]) -> Result<(), StoreError> {
    let placeholders = Placeholders::of(connection);
    let mut runs = Vec::new();
    let mut started = Vec::new();
    let mut messages = Vec::new();
    let mut events = Vec::new();
    let mut finishes = Vec::new();
    let mut pauses = Vec::new();
    let mut tools = Vec::new();
    let mut attempts = Vec::new();
    let mut children_usage = Vec::new();
    let mut delegated = Vec::new();
    // Runs that end or pause in the batch.
    let mut settled = Vec::new();
    // Webhooks' deliveries delivered (or given up), and tried again later.
    let mut delivered = Vec::new();
    let mut retried = Vec::new();
    for op in ops {
        match op {
            Op::InsertRun(row, _) => runs.push(&**row),
            Op::Tools {
                run_id,
                tools: list,
                ..
            } => tools.push((run_id.to_string(), list.as_str())),
            Op::Attempts {
                run_id,
                attempts: list,
                chosen,
                transcript_of,
                ..
            } => attempts.push((run_id.to_string(), list.as_str(), *chosen, *transcript_of)),
            Op::ChildrenUsage { run_id, json, .. } => {
                children_usage.push((run_id.to_string(), json.as_str()));
            }
            Op::Delegated { run_id, json } => delegated.push((run_id.to_string(), json.as_deref())),
            Op::Started { run_id, at, .. } => started.push((run_id.to_string(), at.as_str())),
            Op::Event(outer) => {
                for event in outer.all() {
                    let run_id = event.run_id.to_string();
                    if let Some((position, message)) = &event.message {
                        messages.push((run_id.clone(), *position, &**message));
                    }
                    if let Some(finish) = &event.finish {
                        finishes.push((run_id.clone(), &**finish));
                        settled.push(event.run_id);
                    }
                    if let Some(pause) = &event.pause {
                        pauses.push((run_id.clone(), &**pause));
                        settled.push(event.run_id);
                    }
                    events.push((run_id, saturate(event.sequence), event.kind, &*event.body));
                }
            }
            Op::Delivery { id, next_at, .. } => match next_at {
                Some(next_at) => retried.push((id.as_str(), next_at.as_str())),
                None => delivered.push(id.as_str()),
            },
            // Committed alone (see `Task::commit`).
            Op::Transition(..) | Op::Close(_) | Op::Barrier(_) => {}
        }
    }
    // The last totals of each run in the batch, but for runs that end or
    // pause in it: their end or pause stores their totals.
    let mut progress: Vec<(uuid::Uuid, &crate::harness::Totals)> = Vec::new();
    for op in ops.iter().rev() {
        let Op::Event(outer) = op else {
            continue;
        };
        let totals = std::iter::once(outer)
            .chain(outer.first.as_deref())
            .find_map(|event| event.progress.as_ref());
        if let Some(totals) = totals
            && !progress.iter().any(|(seen, _)| *seen == outer.run_id)
            && !settled.contains(&outer.run_id)
        {
            progress.push((outer.run_id, totals));
        }
    }
    for chunk in chunks(&runs) {
        let sql = values_statement(
            placeholders,
            "INSERT INTO runs (id, tenant, status, prompt, limits, context, tools, commands, \
             model, metadata, approval, client_tools, mcp_servers, instructions, thread_id, \
             previous_run_id, model_spec, idempotency_key, request_hash, created_at, started_at, \
             owner, webhook, trace_id, parent_span_id, trace_sampled, agent_name, agent_version, \
             output_schema, seed, parent_run_id, attempt, temperature, attempt_policy, attempts, \
             schedule_id, schedule_tick, waiting_for, copy_pending, subagents, children_usage, \
             call_id, subrun) ",
            chunk.len(),
            43,
            "",
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.id.as_str())
                .bind(row.tenant.as_str())
                .bind(row.status)
                .bind(row.prompt.as_str())
                .bind(row.limits.as_str())
                .bind(row.context.as_str())
                .bind(row.tools.as_str())
                .bind(row.commands.as_str())
                .bind(row.model.as_str())
                .bind(row.metadata.as_str())
                .bind(row.approval.as_str())
                .bind(row.client_tools.as_str())
                .bind(row.mcp_servers.as_str())
                .bind(row.instructions.as_deref())
                .bind(row.thread_id.as_str())
                .bind(row.previous_run_id.as_deref())
                .bind(row.model_spec.as_str())
                .bind(row.idempotency_key.as_deref())
                .bind(row.request_hash.as_deref())
                .bind(row.created_at.as_str())
                .bind(row.started_at.as_deref())
                .bind(row.owner.as_deref())
                .bind(row.webhook.as_deref())
                .bind(row.trace_id.as_str())
                .bind(row.parent_span_id.as_deref())
                .bind(i64::from(row.trace_sampled))
                .bind(row.agent_name.as_deref())
                .bind(row.agent_version)
                .bind(row.output_schema.as_deref())
                .bind(row.seed.as_deref())
                .bind(row.parent_run_id.as_deref())
                .bind(row.attempt)
                .bind(row.temperature.as_deref())
                .bind(row.attempt_policy.as_deref())
                .bind(row.attempts.as_deref())
                .bind(row.schedule_id.as_deref())
                .bind(row.schedule_tick.as_deref())
                .bind(row.waiting_for.as_deref())
                .bind(i64::from(row.copy_pending))
                .bind(row.subagents.as_deref())
                .bind(row.children_usage.as_deref())
                .bind(row.call_id.as_deref())
                .bind(row.subrun.as_deref());
        }
        query.execute(&mut *connection).await?;
    }
    // Apart from the run's row, which each update rewrites whole.
    for row in &runs {
        if let Some(files) = &row.seed_files {
            sqlx::query("INSERT INTO run_seed_files (run_id, files) VALUES ($1, $2)")
                .bind(row.id.as_str())
                .bind(files.as_str())
                .execute(&mut *connection)
                .await?;
        }
    }
    // A run that continues another starts with its transcript (and is not
    // stored if that run was removed since it was accepted); one queued
    // behind it takes it as it starts.
    for row in &runs {
        if let Some(previous) = &row.previous_run_id {
            let there: Option<i32> = sqlx::query_scalar("SELECT 1 FROM runs WHERE id = $1")
                .bind(previous.as_str())
                .fetch_optional(&mut *connection)
                .await?;
            if there.is_none() {
                return Err(StoreError::PreviousGone);
            }
            if row.copy_pending {
                continue;
            }
            sqlx::query(
                "INSERT INTO messages (run_id, position, body) \
                 SELECT $1, position, body FROM messages WHERE run_id = $2",
            )
            .bind(row.id.as_str())
            .bind(previous.as_str())
            .execute(&mut *connection)
            .await?;
        }
    }
    for chunk in chunks(&started) {
        let sql = values_statement(
            placeholders,
            // A resumed run keeps its first start, and no longer waits on
            // anything. Its answers are kept until it pauses or ends again:
            // should its process stop meanwhile, they say how the calls of
            // the answered batch that have no result yet are to go.
            "UPDATE runs SET status = 'running', started_at = COALESCE(runs.started_at, v.column2), \
             pending_actions = '[]', action_deadline = NULL FROM (",
            chunk.len(),
            2,
            ") AS v WHERE runs.id = v.column1",
        );
        let mut query = sqlx::query(&sql);
        for (run_id, at) in chunk {
            query = query.bind(run_id.as_str()).bind(*at);
        }
        query.execute(&mut *connection).await?;
    }
    // After the start: what a run may call, once its MCP servers listed
    // their tools (one row a run, rarely more than a few a batch).
    for (run_id, list) in &tools {
        sqlx::query("UPDATE runs SET tools = $1 WHERE id = $2")
            .bind(*list)
            .bind(run_id.as_str())
            .execute(&mut *connection)
            .await?;
    }
    // What a run's children used, once one ended.
    for (run_id, usage) in &children_usage {
        sqlx::query("UPDATE runs SET children_usage = $1 WHERE id = $2")
            .bind(*usage)
            .bind(run_id.as_str())
            .execute(&mut *connection)
            .await?;
    }
    // The actions a run's children wait on, as they change.
    for (run_id, actions) in &delegated {
        sqlx::query("UPDATE runs SET delegated_actions = $1 WHERE id = $2")
            .bind(*actions)
            .bind(run_id.as_str())
            .execute(&mut *connection)
            .await?;
    }
    // A run's attempts (a few rows a run); the chosen one's transcript
    // replaces the run's own (what it continued, which the attempt
    // continued too), so that a follow-up continues it.
    for (run_id, list, chosen, transcript_of) in &attempts {
        sqlx::query("UPDATE runs SET attempts = $1, chosen_attempt = $2 WHERE id = $3")
            .bind(*list)
            .bind(chosen.map(i64::from))
            .bind(run_id.as_str())
            .execute(&mut *connection)
            .await?;
        if let Some(chosen) = transcript_of {
            sqlx::query("DELETE FROM messages WHERE run_id = $1")
                .bind(run_id.as_str())
                .execute(&mut *connection)
                .await?;
            sqlx::query(
                "INSERT INTO messages (run_id, position, body) \
                 SELECT $1, position, body FROM messages WHERE run_id = $2",
            )
            .bind(run_id.as_str())
            .bind(chosen.to_string())
            .execute(&mut *connection)
            .await?;
        }
    }
    for chunk in chunks(&messages) {
        let sql = values_statement(
            placeholders,
            "INSERT INTO messages (run_id, position, body) ",
            chunk.len(),
            3,
            "",
        );
        let mut query = sqlx::query(&sql);
        for (run_id, position, body) in chunk {
            query = query
                .bind(run_id.as_str())
                .bind(i64::from(*position))
                .bind(*body);
        }
        query.execute(&mut *connection).await?;
    }
    for chunk in chunks(&events) {
        let sql = values_statement(
            placeholders,
            "INSERT INTO events (run_id, sequence, type, body) ",
            chunk.len(),
            4,
            "",
        );
        let mut query = sqlx::query(&sql);
        for (run_id, sequence, kind, body) in chunk {
            query = query
                .bind(run_id.as_str())
                .bind(*sequence)
                .bind(*kind)
                .bind(*body);
        }
        query.execute(&mut *connection).await?;
    }
    for chunk in chunks(&progress) {
        let sql = values_statement(
            placeholders,
            "UPDATE runs SET steps = v.column2, tool_calls = v.column3, \
             input_tokens = v.column4, output_tokens = v.column5, \
             model_calls_with_usage = v.column6, running_ms = v.column7, \
             cached_input_tokens = v.column8, cache_write_tokens = v.column9, \
             cost_usd = v.column10 FROM (",
            chunk.len(),
            10,
            ") AS v WHERE runs.id = v.column1 AND runs.status = 'running'",
        );
        let mut query = sqlx::query(&sql);
        for (run_id, totals) in chunk {
            query = query
                .bind(run_id.to_string())
                .bind(i64::from(totals.steps))
                .bind(i64::from(totals.tool_calls))
                .bind(saturate(totals.usage.input_tokens))
                .bind(saturate(totals.usage.output_tokens))
                .bind(saturate(totals.usage.model_calls_with_usage))
                .bind(saturate(
                    u64::try_from(totals.elapsed.as_millis()).unwrap_or(u64::MAX),
                ))
                .bind(saturate(totals.usage.cached_input_tokens))
                .bind(saturate(totals.usage.cache_write_tokens))
                .bind(totals.usage.cost_usd);
        }
        query.execute(&mut *connection).await?;
    }
    for chunk in chunks(&pauses) {
        let sql = values_statement(
            placeholders,
            "UPDATE runs SET status = 'requires_action', steps = v.column2, \
             tool_calls = v.column3, input_tokens = v.column4, output_tokens = v.column5, \
             model_calls_with_usage = v.column6, pending_actions = v.column7, answers = '{}', \
             running_ms = v.column8, action_deadline = v.column9, \
             cached_input_tokens = v.column10, cache_write_tokens = v.column11, \
             cost_usd = v.column12 FROM (",
            chunk.len(),
            12,
            ") AS v WHERE runs.id = v.column1",
        );
        let mut query = sqlx::query(&sql);
        for (run_id, pause) in chunk {
            query = query
                .bind(run_id.as_str())
                .bind(i64::from(pause.steps))
                .bind(i64::from(pause.tool_calls))
                .bind(saturate(pause.usage.input_tokens))
                .bind(saturate(pause.usage.output_tokens))
                .bind(saturate(pause.usage.model_calls_with_usage))
                .bind(pause.pending.as_str())
                .bind(saturate(pause.running_ms))
                .bind(pause.action_deadline.as_str())
                .bind(saturate(pause.usage.cached_input_tokens))
                .bind(saturate(pause.usage.cache_write_tokens))
                .bind(pause.usage.cost_usd);
        }
        query.execute(&mut *connection).await?;
    }
    for chunk in chunks(&finishes) {
        let sql = values_statement(
            placeholders,
            "UPDATE runs SET status = v.column2, answer = v.column3, error = v.column4, \
             steps = v.column5, tool_calls = v.column6, input_tokens = v.column7, \
             output_tokens = v.column8, model_calls_with_usage = v.column9, \
             finished_at = v.column10, output = v.column11, changes = v.column12, \
             cached_input_tokens = v.column13, cache_write_tokens = v.column14, \
             cost_usd = v.column15, \
             pending_actions = '[]', answers = '{}', action_deadline = NULL FROM (",
            chunk.len(),
            15,
            ") AS v WHERE runs.id = v.column1",
        );
        let mut query = sqlx::query(&sql);
        for (run_id, finish) in chunk {
            query = query
                .bind(run_id.as_str())
                .bind(finish.status.as_str())
                .bind(finish.answer.as_deref())
                .bind(finish.error.as_deref())
                .bind(i64::from(finish.steps))
                .bind(i64::from(finish.tool_calls))
                .bind(saturate(finish.usage.input_tokens))
                .bind(saturate(finish.usage.output_tokens))
                .bind(saturate(finish.usage.model_calls_with_usage))
                .bind(finish.finished_at.as_str())
                .bind(finish.output.as_ref().map(Value::to_string))
                .bind(finish.changes.map(|changes| json(&changes)).transpose()?)
                .bind(saturate(finish.usage.cached_input_tokens))
                .bind(saturate(finish.usage.cache_write_tokens))
                .bind(finish.usage.cost_usd);
        }
        query.execute(&mut *connection).await?;
    }
    // The webhooks of the ends and pauses, in the transaction that stores
    // them: a delivery is never lost, nor made for a change not stored.
    let posted = |event: &super::ops::NewEvent| {
        event.finish.as_ref().is_some_and(|finish| finish.webhook)
            || event.pause.as_ref().is_some_and(|pause| pause.webhook)
    };
    let ends: Vec<_> = ops
        .iter()
        .filter(|op| matches!(op, Op::Event(event) if posted(event)))
        .filter_map(Op::status_change)
        .collect();
    if !ends.is_empty() {
        outbox::enqueue(connection, &ends).await?;
    }
    outbox::settle(connection, &delivered, &retried).await?;
    Ok(())
}

/// Tells the other replicas of a batch: the runs it stored events of, the
/// changes of status it made, and whether it queued a run.
async fn announce(
    connection: &mut AnyConnection,
    replica: &Membership,
    ops: &[Op],
) -> Result<(), StoreError> {
    let mut runs = std::collections::HashSet::new();
    let mut queued = false;
    let changes: Vec<_> = ops.iter().filter_map(Op::status_change).collect();
    cluster::notify_statuses(connection, replica.id(), &changes).await?;
    for op in ops {
        match op {
            Op::Event(event) => {
                runs.insert(event.run_id);
            }
            Op::InsertRun(row, _) => queued |= row.status == "queued",
            _ => {}
        }
    }
    cluster::notify_events(
        connection,
        replica.id(),
        runs.iter().map(ToString::to_string),
    )
    .await?;
    if queued {
        cluster::notify(connection, cluster::QUEUED, "").await?;
    }
    Ok(())
}

pub(super) fn saturate(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
#[path = "sql_tests.rs"]
mod tests;
