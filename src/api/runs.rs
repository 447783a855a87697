//! The runs resource: create, read, list, cancel, purge.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::create::{Ceilings, CreateRunRequest};
use super::error::{ApiError, ErrorCode};
use super::json::ApiJson;
use super::state::AppState;
use super::tenant_run::{TenantRun, read};
use crate::run::{Run, RunSpec, RunStatus, Tenant};
use crate::runner::{Purged, SubmitError};
use crate::store::RunFilter;
use crate::telemetry::RunTrace;

/// Longest `Idempotency-Key` accepted.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;
pub const DEFAULT_PAGE: u32 = 20;
pub const MAX_PAGE: u32 = 100;

/// `POST /v1/runs`
pub async fn create(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    // On the heap: the routing and middleware layers each move the
    // handler's future, and this one holds a run's whole spec across its
    // awaits (several KiB copied per request, per layer, otherwise).
    Box::pin(create_run(state, tenant, query, headers, body)).await
}

async fn create_run(
    state: AppState,
    tenant: Tenant,
    query: HashMap<String, String>,
    headers: HeaderMap,
    body: Value,
) -> Result<Response, ApiError> {
    // With `stream`, `wait` changes nothing: the stream ends with the run.
    let stream = flag(&query, "stream")?;
    let wait = flag(&query, "wait")? && !stream;
    let key = idempotency_key(&headers)?;
    let hash = key.as_ref().map(|_| request_hash(&body));
    let mut spec = match accept(&state, &tenant, body).await {
        Ok(spec) => spec,
        Err(error) => {
            // A repeat of a run accepted before stays that run, even if
            // the request would not be accepted now (its agent archived
            // or changed since, the server's configuration changed).
            if let (Some(key), Some(hash)) = (&key, &hash)
                && let Ok(Some(existing)) = replay(&state, &tenant, key, hash, stream).await
            {
                return Ok(existing);
            }
            return Err(error);
        }
    };
    // The caller's trace (W3C Trace Context); one that is not valid is
    // ignored, as the standard asks, and the run has a trace of its own.
    if let Some(trace) = headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .and_then(RunTrace::from_traceparent)
    {
        spec.trace = trace;
    }

    if let (Some(key), Some(hash)) = (&key, &hash)
        && let Some(existing) = replay(&state, &tenant, key, hash, stream).await?
    {
        return Ok(existing);
    }
    if state.runner.is_closing() {
        return Err(ApiError::ShuttingDown);
    }
    let idempotency = key.as_deref().zip(hash.as_deref());
    let submitted = state
        .runner
        .submit_following(&tenant, spec, idempotency, stream)
        .await;
    let (run, subscribed) = match submitted {
        Ok(submitted) => submitted,
        Err(SubmitError::Store(error)) => {
            // Two requests raced with one key: the other one won.
            if let (Some(key), Some(hash)) = (&key, &hash)
                && let Some(existing) = replay(&state, &tenant, key, hash, stream).await?
            {
                return Ok(existing);
            }
            return Err(error.into());
        }
        Err(error) => return Err(error.into()),
    };
    if stream {
        // Its events from the first, live ones included.
        let mut response =
            super::events::events(&state, state.runner.store().clone(), run.id, 0, subscribed);
        *response.status_mut() = StatusCode::CREATED;
        set_location(&mut response, run.id);
        return Ok(response);
    }
    let run = if wait {
        // The final state from memory once its end is stored (across any
        // pauses); read back otherwise (the run ended before this looked,
        // or its end was not stored).
        let run = match state.runner.finished(run.id).await {
            Some(run) => run,
            None => read(&state, &tenant, run.id).await?,
        };
        // Only a stored end counts: one that storage refused to the last
        // (the server stopping meanwhile) is not reported as an end.
        if !run.status.is_terminal() {
            return Err(ApiError::Unavailable(format!(
                "the run has no stored end yet (status {}) and the server cannot wait for it; ask for it again later",
                run.status
            )));
        }
        run
    } else {
        run
    };
    let location = format!("/v1/runs/{}", run.id);
    let mut response = (StatusCode::CREATED, Json(run)).into_response();
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    Ok(response)
}

/// The run a body asks for, validated: on the agent it names, if any.
pub(super) async fn accept(
    state: &AppState,
    tenant: &Tenant,
    body: Value,
) -> Result<RunSpec, ApiError> {
    let (body, agent) = super::agents::under_agent(state, tenant, body).await?;
    let subagents = body.get("subagents").cloned();
    let request: CreateRunRequest = super::json::from_value(body)?;
    let mut spec =
        request
            .validate(&Ceilings::of(state))
            .map_err(|error| match (&agent, error) {
                // What is wrong may be the definition's, not the request's.
                (Some(agent), ApiError::Validation(message)) => ApiError::Validation(format!(
                    "{message} (the request on agent {}@{})",
                    agent.name, agent.version
                )),
                (_, error) => error,
            })?;
    spec.subagents = super::subagents::resolve(state, tenant, subagents, 1).await?;
    super::subagents::check_names(&spec, spec.subagents.is_some())?;
    spec.agent = agent;
    if let Some(upload) = spec.seed.archive
        && state
            .runner
            .store()
            .get_upload(tenant, upload)
            .await?
            .is_none()
    {
        return Err(ApiError::UploadNotFound(format!(
            "workspace.archive: no upload {upload} (deleted, expired, or never made)"
        )));
    }
    Ok(spec)
}

/// The answer to a repeated `Idempotency-Key`: the first run (200) for the
/// same body, 409 for another.
async fn replay(
    state: &AppState,
    tenant: &Tenant,
    key: &str,
    hash: &str,
    stream: bool,
) -> Result<Option<Response>, ApiError> {
    let found = state.runner.store().find_idempotent(tenant, key).await?;
    match found {
        None => Ok(None),
        Some(found) if found.request_hash == hash && stream => {
            let mut response =
                super::events::events(state, state.runner.store().clone(), found.run.id, 0, None);
            set_location(&mut response, found.run.id);
            Ok(Some(response))
        }
        Some(found) if found.request_hash == hash => {
            let location = format!("/v1/runs/{}", found.run.id);
            let mut response = (StatusCode::OK, Json(found.run)).into_response();
            if let Ok(value) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            Ok(Some(response))
        }
        Some(_) => Err(ApiError::Conflict {
            code: ErrorCode::IdempotencyKeyReused,
            message: "this Idempotency-Key was used with a different request body".into(),
        }),
    }
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY)
        .filter(|k| k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            ApiError::Validation(format!(
                "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
            ))
        })?;
    Ok(Some(key.to_owned()))
}

/// A digest of the request body that does not depend on key order.
fn request_hash(body: &Value) -> String {
    fn canonical(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<_> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    canonical(&map[key], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut text = String::new();
    canonical(body, &mut text);
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// `GET /v1/runs/{id}`
pub async fn get(TenantRun { run, .. }: TenantRun) -> Json<Run> {
    Json(run)
}

/// `GET /v1/runs`
pub async fn list(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let status = query
        .get("status")
        .map(|s| {
            RunStatus::parse(s).ok_or_else(|| {
                ApiError::InvalidQuery(format!(
                    "status must be one of {} (got {s:?})",
                    RunStatus::ALL.map(RunStatus::as_str).join(", ")
                ))
            })
        })
        .transpose()?;
    let limit = page_limit(&query)?;
    let id_param = |name: &str, what: &str| {
        query
            .get(name)
            .map(|text| {
                Uuid::parse_str(text)
                    .map_err(|_| ApiError::InvalidQuery(format!("{name} {text:?} is not {what}")))
            })
            .transpose()
    };
    let thread_id = id_param("thread_id", "a run id")?;
    let agent = query.get("agent").map(String::as_str);
    if let Some(name) = agent
        && !crate::agent::is_valid_name(name)
    {
        return Err(ApiError::InvalidQuery(format!(
            "agent {name:?} is not an agent's name (^[a-z0-9][a-z0-9_-]{{0,63}}$)"
        )));
    }
    let parent_run_id = id_param("parent_run_id", "a run id")?;
    let schedule_id = id_param("schedule_id", "a schedule id")?;
    let cursor = id_param("cursor", "a valid cursor")?;
    let mut runs = state
        .runner
        .store()
        .list_runs(
            &tenant,
            RunFilter {
                status,
                thread_id,
                agent,
                parent_run_id,
                schedule_id,
            },
            cursor,
            limit + 1,
        )
        .await?;
    let next_cursor = next_cursor(&mut runs, limit, |run| run.id.to_string());
    Ok(Json(json!({"runs": runs, "next_cursor": next_cursor})))
}

/// A page's `limit`: default [`DEFAULT_PAGE`], 1 to [`MAX_PAGE`].
pub(super) fn page_limit(query: &HashMap<String, String>) -> Result<u32, ApiError> {
    match query.get("limit") {
        None => Ok(DEFAULT_PAGE),
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                ApiError::InvalidQuery(format!(
                    "limit must be an integer from 1 to {MAX_PAGE} (got {text:?})"
                ))
            }),
    }
}

/// Cuts a page read with one item more than `limit`, and gives the cursor
/// of the next page (the last item kept's), if there is more.
pub(super) fn next_cursor<T>(
    items: &mut Vec<T>,
    limit: u32,
    cursor: impl Fn(&T) -> String,
) -> Option<String> {
    if items.len() > limit as usize {
        items.truncate(limit as usize);
        items.last().map(cursor)
    } else {
        None
    }
}

/// How often a cancel looks for a run that is neither live here nor paused
/// (one answered and about to resume), a millisecond apart.
const CANCEL_ATTEMPTS: usize = 10;

/// `DELETE /v1/runs/{id}`: cancels a live run (202 with it); a run that
/// has ended is a 409 `run_not_live`.
pub async fn cancel(
    State(state): State<AppState>,
    TenantRun { tenant, run }: TenantRun,
) -> Result<Response, ApiError> {
    match cancel_run(&state, &tenant, run).await? {
        Cancel::Asked(run) => Ok((StatusCode::ACCEPTED, Json(run)).into_response()),
        Cancel::Ended(run) => Err(ApiError::Conflict {
            code: ErrorCode::RunNotLive,
            message: format!("the run has already ended with status {}", run.status),
        }),
    }
}

/// `POST /v1/runs/{id}/cancel`: the same, idempotent: a run that has ended
/// is answered 200 with its final state.
pub async fn cancel_idempotent(
    State(state): State<AppState>,
    TenantRun { tenant, run }: TenantRun,
) -> Result<Response, ApiError> {
    Ok(match cancel_run(&state, &tenant, run).await? {
        Cancel::Asked(run) => (StatusCode::ACCEPTED, Json(run)).into_response(),
        Cancel::Ended(run) => (StatusCode::OK, Json(run)).into_response(),
    })
}

/// `POST /v1/runs/{id}/purge`: removes a run that has ended, with its
/// events, messages and workspace (204); a live one is a 409 `run_live`.
pub async fn purge(
    State(state): State<AppState>,
    TenantRun { tenant, run }: TenantRun,
) -> Result<Response, ApiError> {
    match state.runner.purge(&tenant, run.id).await? {
        Purged::Removed => Ok(StatusCode::NO_CONTENT.into_response()),
        Purged::NotFound => Err(ApiError::NotFound("run")),
        Purged::Live(status) => Err(ApiError::Conflict {
            code: ErrorCode::RunLive,
            message: format!("the run is {status}: cancel it, and purge it once it has ended"),
        }),
    }
}

/// What a cancel did.
pub(super) enum Cancel {
    /// The run was live: it is told to stop (or ended at once, paused or
    /// queued), as it stands now.
    Asked(Run),
    /// It had ended already: its final state.
    Ended(Run),
}

pub(super) async fn cancel_run(
    state: &AppState,
    tenant: &Tenant,
    run: Run,
) -> Result<Cancel, ApiError> {
    let id = run.id;
    if !run.status.is_terminal() {
        // Live here, or in storage alone: paused, or on PostgreSQL queued
        // or executing on another replica. A paused run answered meanwhile
        // is live again a moment later: tried a few times.
        for _ in 0..CANCEL_ATTEMPTS {
            if state.runner.cancel(tenant, id).is_some() {
                return Ok(Cancel::Asked(run));
            }
            if let Some(ended) = state.runner.cancel_stored(id, None).await? {
                return Ok(Cancel::Asked(ended));
            }
            if state.runner.is_closing() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
    // Terminal, or it ended between the read and the cancel.
    let run = read(state, tenant, id).await?;
    if !run.status.is_terminal() {
        // Live in storage but not here: the server is stopping, so the
        // next process (or another replica) has it.
        return Err(if state.runner.is_closing() {
            ApiError::ShuttingDown
        } else {
            ApiError::Unavailable("the run is between two states; retry the cancel".into())
        });
    }
    Ok(Cancel::Ended(run))
}

/// A boolean query parameter: absent, `false` or `0`; `true`, `1` or empty.
pub(super) fn flag(query: &HashMap<String, String>, name: &str) -> Result<bool, ApiError> {
    match query.get(name).map(String::as_str) {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some(other) => Err(ApiError::InvalidQuery(format!(
            "{name} must be true or false (got {other:?})"
        ))),
    }
}

/// `Location: /v1/runs/{id}`.
fn set_location(response: &mut Response, id: uuid::Uuid) {
    if let Ok(value) = HeaderValue::from_str(&format!("/v1/runs/{id}")) {
        response.headers_mut().insert(header::LOCATION, value);
    }
}
