//! The agents resource: run definitions stored once, in versions never
//! changed, named by runs (`"agent": "NAME"` or `"NAME@N"`). A definition
//! is any field of a run body but the run's own (`prompt`, `workspace`,
//! `previous_run_id`), validated by the run body's own validation.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Extension, FromRequestParts, Query, RawPathParams, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde_json::{Map, Value, json};

use super::create::{Ceilings, CreateRunRequest};
use super::error::{ApiError, ErrorCode};
use super::json::ApiJson;
use super::runs::{flag, next_cursor, page_limit};
use super::state::AppState;
use crate::agent::{Agent, NewVersion, is_valid_name};
use crate::run::{AgentRef, Tenant};
use crate::store::Saved;

/// Longest `description` of an agent, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;

/// The fields of a run body that are the run's own, never an agent's.
const RUN_ONLY: [&str; 4] = ["prompt", "workspace", "previous_run_id", "agent"];

/// `POST /v1/agents`: an agent's first version (201); a live agent of the
/// name is a 409 `agent_exists`. An archived one comes back with its next
/// version: a name's versions are never numbered twice.
pub async fn create(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let body = AgentBody::parse(body, None, &state)?;
    body.resolve_subagents(&state, &tenant).await?;
    let name = body.name.clone();
    match state
        .runner
        .store()
        .save_agent(&tenant, body.into_version(), true)
        .await?
    {
        Saved::Saved(agent) => {
            let mut response = (StatusCode::CREATED, Json(agent)).into_response();
            if let Ok(location) = HeaderValue::from_str(&format!("/v1/agents/{name}")) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            Ok(response)
        }
        Saved::Exists => Err(ApiError::Conflict {
            code: ErrorCode::AgentExists,
            message: format!(
                "an agent named {name:?} exists: PUT /v1/agents/{name} makes a new version of it"
            ),
        }),
        Saved::NotFound => Err(not_found(&name)),
    }
}

/// `PUT /v1/agents/{name}`: the agent's next version (200).
pub async fn update(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    AgentName(name): AgentName,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let body = AgentBody::parse(body, Some(&name), &state)?;
    body.resolve_subagents(&state, &tenant).await?;
    match state
        .runner
        .store()
        .save_agent(&tenant, body.into_version(), false)
        .await?
    {
        Saved::Saved(agent) => Ok(Json(agent).into_response()),
        Saved::Exists | Saved::NotFound => Err(not_found(&name)),
    }
}

/// `GET /v1/agents`: the latest version of each agent, by name, live ones
/// unless `archived=true`.
pub async fn list(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(&query)?;
    let archived = flag(&query, "archived")?;
    let cursor = query.get("cursor").map(String::as_str);
    if let Some(cursor) = cursor
        && !is_valid_name(cursor)
    {
        return Err(ApiError::InvalidQuery(format!(
            "cursor {cursor:?} is not a valid cursor"
        )));
    }
    let mut agents = state
        .runner
        .store()
        .list_agents(&tenant, archived, cursor, limit + 1)
        .await?;
    let next_cursor = next_cursor(&mut agents, limit, |agent| agent.name.clone());
    Ok(Json(json!({"agents": agents, "next_cursor": next_cursor})))
}

/// `GET /v1/agents/{name}`: its latest version, archived or not.
pub async fn get(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    AgentName(name): AgentName,
) -> Result<Json<Agent>, ApiError> {
    read(&state, &tenant, &name, None).await.map(Json)
}

/// `GET /v1/agents/{name}/versions`: its versions, newest first.
pub async fn versions(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    AgentName(name): AgentName,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(&query)?;
    let before = query
        .get("cursor")
        .map(|text| {
            text.parse::<u32>().map_err(|_| {
                ApiError::InvalidQuery(format!("cursor {text:?} is not a valid cursor"))
            })
        })
        .transpose()?;
    let store = state.runner.store();
    let mut versions = store
        .agent_versions(&tenant, &name, before, limit + 1)
        .await?;
    if versions.is_empty() && store.get_agent(&tenant, &name, None).await?.is_none() {
        return Err(not_found(&name));
    }
    let next_cursor = next_cursor(&mut versions, limit, |agent| agent.version.to_string());
    Ok(Json(
        json!({"versions": versions, "next_cursor": next_cursor}),
    ))
}

/// `GET /v1/agents/{name}/versions/{version}`
pub async fn version(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    AgentName(name): AgentName,
    params: RawPathParams,
) -> Result<Json<Agent>, ApiError> {
    let version = params
        .iter()
        .find_map(|(key, value)| (key == "version").then_some(value))
        .and_then(|version| version.parse::<u32>().ok())
        .filter(|version| *version > 0)
        .ok_or_else(|| {
            ApiError::AgentNotFound(format!(
                "agent {name:?} has no such version (versions are 1, 2, ...)"
            ))
        })?;
    read(&state, &tenant, &name, Some(version)).await.map(Json)
}

/// `DELETE /v1/agents/{name}`: archives it (204, also when it was):
/// runs cannot name it any more; those that did keep their record.
pub async fn archive(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    AgentName(name): AgentName,
) -> Result<StatusCode, ApiError> {
    if state.runner.store().archive_agent(&tenant, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&name))
    }
}

/// The body of a new run, with the agent it names (if any) as its base:
/// the agent's definition, whose fields the body's replace whole, but
/// `limits` and `context`, replaced key by key (a null, there as anywhere,
/// is a field not given). Unknown, archived or another tenant's: 404
/// `agent_not_found`.
pub async fn under_agent(
    state: &AppState,
    tenant: &Tenant,
    body: Value,
) -> Result<(Value, Option<AgentRef>), ApiError> {
    let Value::Object(mut own) = body else {
        return Ok((body, None));
    };
    let named = match own.remove("agent") {
        None | Some(Value::Null) => return Ok((Value::Object(own), None)),
        Some(Value::String(named)) => named,
        Some(_) => {
            return Err(ApiError::Validation(
                "agent: must be an agent's name, or NAME@VERSION".into(),
            ));
        }
    };
    let (name, version) = parse_reference(&named)?;
    let Some(agent) = state
        .runner
        .store()
        .agent_for_run(tenant, name, version)
        .await?
    else {
        return Err(match version {
            Some(version) => ApiError::AgentNotFound(format!(
                "agent {name:?} has no version {version}, or is archived"
            )),
            None => ApiError::AgentNotFound(format!("agent {name:?} not found, or archived")),
        });
    };
    // A null is a field not given, as anywhere in a run's body.
    let mut body = Map::clone(&agent.definition);
    for (key, value) in own {
        match (body.get_mut(&key), value) {
            (_, Value::Null) => {}
            (Some(Value::Object(base)), Value::Object(fields))
                if key == "limits" || key == "context" =>
            {
                base.extend(fields.into_iter().filter(|(_, value)| !value.is_null()));
            }
            (_, value) => {
                body.insert(key, value);
            }
        }
    }
    let agent = AgentRef {
        name: agent.name.clone(),
        version: agent.version,
    };
    Ok((Value::Object(body), Some(agent)))
}

/// `NAME` or `NAME@VERSION`.
pub(super) fn parse_reference(named: &str) -> Result<(&str, Option<u32>), ApiError> {
    let (name, version) = match named.split_once('@') {
        Some((name, version)) => {
            let version = version.parse::<u32>().ok().filter(|v| *v > 0);
            let Some(version) = version else {
                return Err(ApiError::Validation(format!(
                    "agent: {named:?}: a version is a positive integer (NAME@1, NAME@2, ...)"
                )));
            };
            (name, Some(version))
        }
        None => (named, None),
    };
    if !is_valid_name(name) {
        return Err(ApiError::Validation(format!(
            "agent: {name:?} is not an agent's name (^[a-z0-9][a-z0-9_-]{{0,63}}$)"
        )));
    }
    Ok((name, version))
}

/// An agent's body (`POST` and `PUT`): its name, description and
/// definition.
struct AgentBody {
    name: String,
    description: Option<String>,
    definition: Map<String, Value>,
}

impl AgentBody {
    /// Reads and checks a body; `path`: the name a `PUT` names. The
    /// definition is checked by the run body's own validation, as the body
    /// of a run with a prompt of its own.
    fn parse(body: Value, path: Option<&str>, state: &AppState) -> Result<Self, ApiError> {
        let invalid = |message: String| Err(ApiError::Validation(message));
        let Value::Object(mut definition) = body else {
            return invalid(
                "the body must be a JSON object: an agent's name and definition".into(),
            );
        };
        let name = match (definition.remove("name"), path) {
            (Some(Value::String(name)), Some(path)) if name != path => {
                return invalid(format!(
                    "name: {name:?} is not the agent of the path ({path:?}); leave it out, or \
                     give the same"
                ));
            }
            (Some(Value::String(name)), _) => name,
            (None, Some(path)) => path.to_owned(),
            (None, None) => return invalid("name: required".into()),
            (Some(_), _) => return invalid("name: must be a string".into()),
        };
        if !is_valid_name(&name) {
            return invalid(format!(
                "name: {name:?} is not a valid agent name (^[a-z0-9][a-z0-9_-]{{0,63}}$)"
            ));
        }
        let description = match definition.remove("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) if text.len() > MAX_DESCRIPTION_BYTES => {
                return invalid(format!(
                    "description: at most {MAX_DESCRIPTION_BYTES} bytes (got {})",
                    text.len()
                ));
            }
            Some(Value::String(text)) if text.contains('\0') => {
                return invalid("description must not contain NUL characters".into());
            }
            Some(Value::String(text)) => Some(text),
            Some(_) => return invalid("description: must be a string".into()),
        };
        if let Some(own) = RUN_ONLY.iter().find(|key| definition.contains_key(**key)) {
            return invalid(format!(
                "{own}: a run's own field, not part of an agent's definition (give it with the \
                 run that names the agent)"
            ));
        }
        // The run body's validation, one path for both: a run naming
        // the agent with a prompt of its own is accepted as it is now.
        let mut body = definition.clone();
        body.insert("prompt".into(), Value::String("(the run's prompt)".into()));
        let request: CreateRunRequest = super::json::from_value(Value::Object(body))?;
        request.validate(&Ceilings::of(state))?;
        Ok(Self {
            name,
            description,
            definition,
        })
    }

    /// Its sub-agents, resolved as a run's are (each stored agent named
    /// must exist): a run naming the agent is accepted as it is now. A
    /// stored agent it names that does not exist is a fault of the body
    /// (422), not of the path (whose agent a `PUT`'s 404 is about).
    async fn resolve_subagents(&self, state: &AppState, tenant: &Tenant) -> Result<(), ApiError> {
        let raw = self.definition.get("subagents").cloned();
        super::subagents::resolve(state, tenant, raw, 1)
            .await
            .map_err(|error| match error {
                ApiError::AgentNotFound(message) => ApiError::Validation(message),
                error => error,
            })?;
        Ok(())
    }

    fn into_version(self) -> NewVersion {
        NewVersion {
            definition: Value::Object(self.definition).to_string(),
            name: self.name,
            description: self.description,
            at: Utc::now(),
        }
    }
}

/// The `{name}` of the path, if it is an agent's name (any other: 404).
pub struct AgentName(pub String);

impl FromRequestParts<AppState> for AgentName {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::InvalidQuery(rejection.body_text()))?;
        let name = params
            .iter()
            .find_map(|(key, value)| (key == "name").then_some(value))
            .unwrap_or_default();
        if !is_valid_name(name) {
            return Err(not_found(name));
        }
        Ok(Self(name.to_owned()))
    }
}

async fn read(
    state: &AppState,
    tenant: &Tenant,
    name: &str,
    version: Option<u32>,
) -> Result<Agent, ApiError> {
    state
        .runner
        .store()
        .get_agent(tenant, name, version)
        .await?
        .ok_or_else(|| match version {
            Some(version) => {
                ApiError::AgentNotFound(format!("agent {name:?} has no version {version}"))
            }
            None => not_found(name),
        })
}

fn not_found(name: &str) -> ApiError {
    ApiError::AgentNotFound(format!("agent {name:?} not found"))
}
