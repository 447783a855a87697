//! The schedules resource (SPEC section 23): a cron in a timezone and a run
//! body; each tick makes one run (see [`ticker`]), and a trigger one now.
//! A schedule's body is validated as `POST /v1/runs` validates a run's,
//! when it is made or changed; its runs continue the schedule's previous
//! run (`thread: continue`) through the schedule, never a body's own
//! `previous_run_id`.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

pub mod ticker;

use super::error::{ApiError, ErrorCode};
use super::json::{ApiJson, from_value};
use super::runs::{next_cursor, page_limit};
use super::state::AppState;
use crate::run::Tenant;
use crate::schedule::{MAX_NAME_BYTES, Overlap, Schedule, ThreadMode, Timing};

/// Most schedules a tenant may have.
pub const MAX_SCHEDULES_PER_TENANT: u64 = 1000;

/// The fields of a run body a schedule's runs get from the schedule.
const NOT_IN_BODY: [(&str, &str); 2] = [
    (
        "previous_run_id",
        "a schedule's runs continue its previous run with thread: \"continue\"",
    ),
    (
        "multitask",
        "a schedule's overlap says what a tick does while its previous run is live",
    ),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleRequest {
    cron: String,
    #[serde(default)]
    timezone: Option<String>,
    run: Value,
    #[serde(default)]
    thread: Option<ThreadMode>,
    #[serde(default)]
    overlap: Option<Overlap>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    name: Option<String>,
}

/// A request checked: the schedule it makes (without its id and times).
struct Checked {
    request: ScheduleRequest,
    timezone: String,
    timing: Timing,
}

impl ScheduleRequest {
    async fn check(self, state: &AppState, tenant: &Tenant) -> Result<Checked, ApiError> {
        let timezone = self.timezone.clone().unwrap_or_else(|| "UTC".to_owned());
        let timing = Timing::parse(&self.cron, &timezone).map_err(ApiError::Validation)?;
        if let Some(name) = &self.name {
            if name.len() > MAX_NAME_BYTES {
                return Err(ApiError::Validation(format!(
                    "name: at most {MAX_NAME_BYTES} bytes (got {})",
                    name.len()
                )));
            }
            if name.contains('\0') {
                return Err(ApiError::Validation(
                    "name must not contain NUL characters".into(),
                ));
            }
        }
        let Value::Object(body) = &self.run else {
            return Err(ApiError::Validation(
                "run: must be a run body (an object, as POST /v1/runs takes)".into(),
            ));
        };
        for (field, why) in NOT_IN_BODY {
            if body.get(field).is_some_and(|value| !value.is_null()) {
                return Err(ApiError::Validation(format!(
                    "run.{field}: not taken here: {why}"
                )));
            }
        }
        // As `POST /v1/runs` would take it now.
        super::runs::accept(state, tenant, self.run.clone())
            .await
            .map_err(in_run_body)?;
        Ok(Checked {
            request: self,
            timezone,
            timing,
        })
    }
}

/// A run body's refusal, as the schedule's: 422 naming `run`. The
/// server's own failures stay what they are.
fn in_run_body(error: ApiError) -> ApiError {
    match error {
        ApiError::Validation(message)
        | ApiError::AgentNotFound(message)
        | ApiError::UploadNotFound(message)
        | ApiError::GitNotAllowed(message) => ApiError::Validation(format!("run: {message}")),
        ApiError::NotFound(what) => ApiError::Validation(format!("run: {what} not found")),
        error => error,
    }
}

/// `POST /v1/schedules`: 201 with the schedule.
pub async fn create(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let request: ScheduleRequest = from_value(body)?;
    let checked = request.check(&state, &tenant).await?;
    let store = state.runner.store();
    if store.count_schedules(&tenant).await? >= MAX_SCHEDULES_PER_TENANT {
        return Err(ApiError::Validation(format!(
            "a tenant has at most {MAX_SCHEDULES_PER_TENANT} schedules; delete one first"
        )));
    }
    let now = Utc::now();
    let mut schedule = Schedule {
        id: Uuid::now_v7(),
        name: None,
        cron: String::new(),
        timezone: String::new(),
        run: Value::Null,
        thread: ThreadMode::default(),
        overlap: Overlap::default(),
        enabled: true,
        next_run_at: None,
        last_run_id: None,
        skipped_ticks: 0,
        refused_ticks: 0,
        created_at: now,
        updated_at: now,
    };
    let next = apply(&mut schedule, checked, true);
    store.save_schedule(&tenant, &schedule, next, true).await?;
    let mut response = (StatusCode::CREATED, Json(&schedule)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/schedules/{}", schedule.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Sets what `checked` says on `schedule`; its next tick, counted from now
/// when its timing changed, it was enabled, or `fresh` (`None`: as stored).
fn apply(schedule: &mut Schedule, checked: Checked, fresh: bool) -> Option<chrono::DateTime<Utc>> {
    let Checked {
        request,
        timezone,
        timing,
    } = checked;
    let now = Utc::now();
    let enabled = request.enabled.unwrap_or(true);
    let retimed = fresh
        || schedule.cron != request.cron
        || schedule.timezone != timezone
        || (enabled && !schedule.enabled);
    let next = match schedule.next_run_at {
        Some(next) if !retimed => next,
        _ => timing.next_after(now).unwrap_or(now),
    };
    // A disabled schedule's stored tick is not shown: one enabled again
    // counts from now (`retimed`).
    schedule.name = request.name;
    schedule.cron = request.cron;
    schedule.timezone = timezone;
    schedule.run = request.run;
    schedule.thread = request.thread.unwrap_or_default();
    schedule.overlap = request.overlap.unwrap_or_default();
    schedule.enabled = enabled;
    schedule.next_run_at = enabled.then_some(next);
    schedule.updated_at = now;
    retimed.then_some(next)
}

/// `GET /v1/schedules`: the tenant's, in the order they were made.
pub async fn list(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(&query)?;
    let cursor = query
        .get("cursor")
        .map(|text| {
            Uuid::parse_str(text).map_err(|_| {
                ApiError::InvalidQuery(format!("cursor {text:?} is not a valid cursor"))
            })
        })
        .transpose()?;
    let mut schedules = state
        .runner
        .store()
        .list_schedules(&tenant, cursor, limit + 1)
        .await?;
    let next_cursor = next_cursor(&mut schedules, limit, |schedule| schedule.id.to_string());
    Ok(Json(
        json!({"schedules": schedules, "next_cursor": next_cursor}),
    ))
}

/// The tenant's schedule of the path's id (anything else is a 404).
async fn read(state: &AppState, tenant: &Tenant, id: &str) -> Result<Schedule, ApiError> {
    let id = Uuid::parse_str(id).map_err(|_| ApiError::NotFound("schedule"))?;
    state
        .runner
        .store()
        .get_schedule(tenant, id)
        .await?
        .ok_or(ApiError::NotFound("schedule"))
}

/// `GET /v1/schedules/{id}`
pub async fn get(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<Schedule>, ApiError> {
    read(&state, &tenant, &id).await.map(Json)
}

/// `PATCH /v1/schedules/{id}`: the fields given replace the schedule's
/// (a null `name` clears it), checked whole as a new schedule would be.
/// A change of `cron` or `timezone`, or enabling it, counts its next tick
/// from now; a tick due meanwhile is not made up.
pub async fn update(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Json<Schedule>, ApiError> {
    let mut schedule = read(&state, &tenant, &id).await?;
    let Value::Object(changes) = body else {
        return Err(ApiError::Validation(
            "the body must be an object of the fields to change".into(),
        ));
    };
    let mut merged = Map::new();
    merged.insert("cron".into(), json!(schedule.cron));
    merged.insert("timezone".into(), json!(schedule.timezone));
    merged.insert("run".into(), schedule.run.clone());
    merged.insert("thread".into(), json!(schedule.thread));
    merged.insert("overlap".into(), json!(schedule.overlap));
    merged.insert("enabled".into(), json!(schedule.enabled));
    merged.insert("name".into(), json!(schedule.name));
    for (key, value) in changes {
        if value.is_null() && key != "name" {
            return Err(ApiError::Validation(format!(
                "{key}: must not be null (leave it out to keep it)"
            )));
        }
        merged.insert(key, value);
    }
    let request: ScheduleRequest = from_value(Value::Object(merged))?;
    let checked = request.check(&state, &tenant).await?;
    let next = apply(&mut schedule, checked, false);
    if !state
        .runner
        .store()
        .save_schedule(&tenant, &schedule, next, false)
        .await?
    {
        return Err(ApiError::NotFound("schedule"));
    }
    // As stored (its newest run included).
    read(&state, &tenant, &id).await.map(Json)
}

/// `DELETE /v1/schedules/{id}`: 204; the runs it made stay.
pub async fn delete(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let schedule = read(&state, &tenant, &id).await?;
    if state
        .runner
        .store()
        .delete_schedule(&tenant, schedule.id)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("schedule"))
    }
}

/// `POST /v1/schedules/{id}/trigger`: one run now (201 with it), as a tick
/// makes it but with no tick of its own; while the schedule's previous run
/// is live, `overlap: skip` is a 409 `run_live`, `enqueue` queues it.
pub async fn trigger(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let schedule = read(&state, &tenant, &id).await?;
    match ticker::make_run(&state, &tenant, &schedule, None).await {
        ticker::Made::Run(run) => {
            let mut response = (StatusCode::CREATED, Json(&run)).into_response();
            if let Ok(location) = HeaderValue::from_str(&format!("/v1/runs/{}", run.id)) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            Ok(response)
        }
        ticker::Made::Skipped(live) => Err(ApiError::Conflict {
            code: ErrorCode::RunLive,
            message: format!(
                "the schedule's previous run {live} is live, and its overlap is skip (or, \
                 with enqueue, that run is itself still queued behind the one before)"
            ),
        }),
        ticker::Made::Refused(error) | ticker::Made::Failed(error) => Err(error),
        ticker::Made::Elsewhere => Err(ApiError::Unavailable(
            "the run was made by another request; list the schedule's runs".into(),
        )),
    }
}
