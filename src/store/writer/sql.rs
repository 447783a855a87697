//! The rows of a batch and the statements that write it.

use sqlx::sqlite::SqliteConnection;
use sqlx::{Executor, QueryBuilder, Sqlite};

use super::Op;
use crate::run::format_time;
use crate::store::{NewRun, StoreError};

/// Most rows one statement writes (the runs insert binds 21 values a row,
/// well within SQLite's 32,766 variables).
const MAX_ROWS_PER_STATEMENT: usize = 256;

/// A row of `runs`, owned, ready to insert.
pub(crate) struct RunRow {
    id: String,
    tenant: String,
    status: &'static str,
    prompt: String,
    limits: String,
    context: String,
    tools: String,
    commands: String,
    model: String,
    metadata: String,
    approval: String,
    client_tools: String,
    mcp_servers: String,
    instructions: Option<String>,
    thread_id: String,
    previous_run_id: Option<String>,
    model_spec: String,
    idempotency_key: Option<String>,
    request_hash: Option<String>,
    created_at: String,
    started_at: Option<String>,
}

impl RunRow {
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
        })
    }
}

/// Begins a write transaction. A rollback that failed under an I/O error
/// can leave the connection inside a transaction: it is ended and begun
/// again. Not being able to begin at all is storage's refusal, not the
/// batch's fault.
pub(super) async fn begin(connection: &mut SqliteConnection) -> Result<(), StoreError> {
    if let Err(error) = connection.execute("BEGIN IMMEDIATE").await {
        let _ = connection.execute("ROLLBACK").await;
        connection
            .execute("BEGIN IMMEDIATE")
            .await
            .map_err(|again| {
                StoreError::Refused(format!("cannot begin a transaction: {error}; {again}"))
            })?;
    }
    Ok(())
}

pub(super) async fn apply_all(
    connection: &mut SqliteConnection,
    ops: &[Op],
) -> Result<(), StoreError> {
    begin(connection).await?;
    if let Err(error) = apply(connection, ops).await {
        let _ = connection.execute("ROLLBACK").await;
        return Err(error);
    }
    if let Err(error) = connection.execute("COMMIT").await {
        let _ = connection.execute("ROLLBACK").await;
        return Err(error.into());
    }
    Ok(())
}

/// Writes `ops` with a few multi-row statements, one kind of row at a time,
/// rather than a statement per row: every statement is a round trip to the
/// connection's worker thread, and under load those round trips, not SQLite,
/// bounded the writer (see docs/benchmarks.md).
///
/// The kinds go in an order that keeps every run's rows consistent: a run is
/// inserted before its events and marked running before it pauses or ends.
async fn apply(connection: &mut SqliteConnection, ops: &[Op]) -> Result<(), StoreError> {
    let mut runs = Vec::new();
    let mut started = Vec::new();
    let mut messages = Vec::new();
    let mut events = Vec::new();
    let mut finishes = Vec::new();
    let mut pauses = Vec::new();
    let mut tools = Vec::new();
    for op in ops {
        match op {
            Op::InsertRun(row, _) => runs.push(&**row),
            Op::Tools {
                run_id,
                tools: list,
            } => tools.push((run_id.to_string(), list.as_str())),
            Op::Started { run_id, at, .. } => started.push((run_id.to_string(), at.as_str())),
            Op::Event(event) => {
                let run_id = event.run_id.to_string();
                if let Some((position, message)) = &event.message {
                    messages.push((run_id.clone(), *position, &**message));
                }
                if let Some(finish) = &event.finish {
                    finishes.push((run_id.clone(), &**finish));
                }
                if let Some(pause) = &event.pause {
                    pauses.push((run_id.clone(), &**pause));
                }
                events.push((run_id, saturate(event.sequence), event.kind, &*event.body));
            }
            // Committed alone (see `Task::commit`).
            Op::Transition(..) | Op::Close(_) => {}
        }
    }
    for chunk in chunks(&runs) {
        let mut query = QueryBuilder::<Sqlite>::new(
            "INSERT INTO runs (id, tenant, status, prompt, limits, context, tools, commands, \
             model, metadata, approval, client_tools, mcp_servers, instructions, thread_id, \
             previous_run_id, model_spec, idempotency_key, request_hash, created_at, started_at) ",
        );
        query.push_values(chunk, |mut values, row| {
            values
                .push_bind(row.id.as_str())
                .push_bind(row.tenant.as_str())
                .push_bind(row.status)
                .push_bind(row.prompt.as_str())
                .push_bind(row.limits.as_str())
                .push_bind(row.context.as_str())
                .push_bind(row.tools.as_str())
                .push_bind(row.commands.as_str())
                .push_bind(row.model.as_str())
                .push_bind(row.metadata.as_str())
                .push_bind(row.approval.as_str())
                .push_bind(row.client_tools.as_str())
                .push_bind(row.mcp_servers.as_str())
                .push_bind(row.instructions.as_deref())
                .push_bind(row.thread_id.as_str())
                .push_bind(row.previous_run_id.as_deref())
                .push_bind(row.model_spec.as_str())
                .push_bind(row.idempotency_key.as_deref())
                .push_bind(row.request_hash.as_deref())
                .push_bind(row.created_at.as_str())
                .push_bind(row.started_at.as_deref());
        });
        query.build().execute(&mut *connection).await?;
    }
    // A run that continues another starts with its transcript.
    for row in &runs {
        if let Some(previous) = &row.previous_run_id {
            sqlx::query(
                "INSERT INTO messages (run_id, position, body) \
                 SELECT ?, position, body FROM messages WHERE run_id = ?",
            )
            .bind(row.id.as_str())
            .bind(previous.as_str())
            .execute(&mut *connection)
            .await?;
        }
    }
    for chunk in chunks(&started) {
        let mut query = QueryBuilder::<Sqlite>::new(
            // A resumed run keeps its first start, and no longer waits on
            // anything.
            "UPDATE runs SET status = 'running', started_at = COALESCE(runs.started_at, v.column2), \
             pending_actions = '[]', answers = '{}', action_deadline = NULL FROM (",
        );
        query.push_values(chunk, |mut values, (run_id, at)| {
            values.push_bind(run_id.as_str()).push_bind(*at);
        });
        query.push(") AS v WHERE runs.id = v.column1");
        query.build().execute(&mut *connection).await?;
    }
    // After the start: what a run may call, once its MCP servers listed
    // their tools (one row a run, rarely more than a few a batch).
    for (run_id, list) in &tools {
        sqlx::query("UPDATE runs SET tools = ? WHERE id = ?")
            .bind(*list)
            .bind(run_id.as_str())
            .execute(&mut *connection)
            .await?;
    }
    for chunk in chunks(&messages) {
        let mut query =
            QueryBuilder::<Sqlite>::new("INSERT INTO messages (run_id, position, body) ");
        query.push_values(chunk, |mut values, (run_id, position, body)| {
            values
                .push_bind(run_id.as_str())
                .push_bind(i64::from(*position))
                .push_bind(*body);
        });
        query.build().execute(&mut *connection).await?;
    }
    for chunk in chunks(&events) {
        let mut query =
            QueryBuilder::<Sqlite>::new("INSERT INTO events (run_id, sequence, type, body) ");
        query.push_values(chunk, |mut values, (run_id, sequence, kind, body)| {
            values
                .push_bind(run_id.as_str())
                .push_bind(*sequence)
                .push_bind(*kind)
                .push_bind(*body);
        });
        query.build().execute(&mut *connection).await?;
    }
    for chunk in chunks(&pauses) {
        let mut query = QueryBuilder::<Sqlite>::new(
            "UPDATE runs SET status = 'requires_action', steps = v.column2, \
             tool_calls = v.column3, input_tokens = v.column4, output_tokens = v.column5, \
             model_calls_with_usage = v.column6, pending_actions = v.column7, answers = '{}', \
             running_ms = v.column8, action_deadline = v.column9 FROM (",
        );
        query.push_values(chunk, |mut values, (run_id, pause)| {
            values
                .push_bind(run_id.as_str())
                .push_bind(i64::from(pause.steps))
                .push_bind(i64::from(pause.tool_calls))
                .push_bind(saturate(pause.usage.input_tokens))
                .push_bind(saturate(pause.usage.output_tokens))
                .push_bind(saturate(pause.usage.model_calls_with_usage))
                .push_bind(pause.pending.as_str())
                .push_bind(saturate(pause.running_ms))
                .push_bind(pause.action_deadline.as_str());
        });
        query.push(") AS v WHERE runs.id = v.column1");
        query.build().execute(&mut *connection).await?;
    }
    for chunk in chunks(&finishes) {
        let mut query = QueryBuilder::<Sqlite>::new(
            "UPDATE runs SET status = v.column2, answer = v.column3, error = v.column4, \
             steps = v.column5, tool_calls = v.column6, input_tokens = v.column7, \
             output_tokens = v.column8, model_calls_with_usage = v.column9, \
             finished_at = v.column10, pending_actions = '[]', answers = '{}', \
             action_deadline = NULL FROM (",
        );
        query.push_values(chunk, |mut values, (run_id, finish)| {
            values
                .push_bind(run_id.as_str())
                .push_bind(finish.status.as_str())
                .push_bind(finish.answer.as_deref())
                .push_bind(finish.error.as_deref())
                .push_bind(i64::from(finish.steps))
                .push_bind(i64::from(finish.tool_calls))
                .push_bind(saturate(finish.usage.input_tokens))
                .push_bind(saturate(finish.usage.output_tokens))
                .push_bind(saturate(finish.usage.model_calls_with_usage))
                .push_bind(finish.finished_at.as_str());
        });
        query.push(") AS v WHERE runs.id = v.column1");
        query.build().execute(&mut *connection).await?;
    }
    Ok(())
}

/// Cuts `rows` into chunks whose lengths are powers of two, at most
/// [`MAX_ROWS_PER_STATEMENT`]: whatever a batch holds, each kind of statement
/// comes in at most a few shapes, which the connection's statement cache
/// keeps prepared.
fn chunks<T>(rows: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let length = MAX_ROWS_PER_STATEMENT.min(1 << rest.len().ilog2());
        let (chunk, tail) = rest.split_at(length);
        rest = tail;
        Some(chunk)
    })
}

pub(super) fn saturate(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Corrupt(format!("cannot serialise a run: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_cut_in_powers_of_two_up_to_the_most_per_statement() {
        let lengths = |n: usize| -> Vec<usize> {
            let rows = vec![0u8; n];
            chunks(&rows).map(<[u8]>::len).collect()
        };
        assert_eq!(lengths(0), Vec::<usize>::new());
        assert_eq!(lengths(1), [1]);
        assert_eq!(lengths(7), [4, 2, 1]);
        assert_eq!(lengths(200), [128, 64, 8]);
        assert_eq!(lengths(600), [256, 256, 64, 16, 8]);
    }
}
