//! Every stored agent of a tenant as an Agent2Agent (A2A) server (SPEC
//! section 25), in the protocol version the official SDKs speak: A2A 1.0,
//! its JSON-RPC binding, ProtoJSON shapes.
//!
//! - `GET /a2a/{agent}/.well-known/agent-card.json`: the agent's card;
//! - `POST /a2a/{agent}`: `SendMessage`, `SendStreamingMessage`, `GetTask`,
//!   `SubscribeToTask`, `CancelTask` (see [`rpc`]).
//!
//! A task is a run of the agent ([`task`]). Both routes need the tenant's
//! token like any other; an agent the tenant does not have, or has
//! archived, is 404.

mod rpc;
mod task;
mod watch;

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::ApiError;
use super::state::AppState;
use crate::agent::{Agent, is_valid_name};
use crate::run::Tenant;

/// The protocol version spoken, as the card states it.
pub const PROTOCOL_VERSION: &str = "1.0";

/// `GET /a2a/{agent}/.well-known/agent-card.json`
pub async fn card(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let agent = agent(&state, &tenant, &name).await?;
    let url = format!("{}/a2a/{}", base_url(&headers), agent.name);
    let card = Json(agent_card(&agent, &url, state.auth.is_enabled()));
    // Its endpoint is the request's host's: caches keep one per host.
    Ok(([(header::VARY, "Host, X-Forwarded-Proto")], card).into_response())
}

/// `POST /a2a/{agent}`: one JSON-RPC request.
pub async fn endpoint(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let agent = agent(&state, &tenant, &name).await?;
    Ok(Box::pin(rpc::handle(state, tenant, agent, body)).await)
}

/// The tenant's agent `name`, unless archived.
async fn agent(state: &AppState, tenant: &Tenant, name: &str) -> Result<Agent, ApiError> {
    let not_found = || ApiError::AgentNotFound(format!("agent {name:?} not found"));
    if !is_valid_name(name) {
        return Err(not_found());
    }
    match state.runner.store().get_agent(tenant, name, None).await? {
        Some(agent) if !agent.archived => Ok(agent),
        _ => Err(not_found()),
    }
}

/// Where the request says the server is: its `Host`, which the router has
/// checked against `[server] allowed_hosts`, over `https` when a proxy in
/// front says so (`X-Forwarded-Proto`), else `http`.
fn base_url(headers: &HeaderMap) -> String {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let host = text("host").unwrap_or("localhost");
    let scheme = match text("x-forwarded-proto") {
        Some(proto) if proto.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    format!("{scheme}://{host}")
}

/// The agent card of `agent`, served at `url`: its name, description and
/// version, the skill its definition makes (its tools and commands as
/// tags), streaming, and the bearer scheme when the server has tokens.
fn agent_card(agent: &Agent, url: &str, bearer: bool) -> Value {
    let names = |field: &str| -> Vec<String> {
        agent
            .definition
            .get(field)
            .and_then(Value::as_array)
            .map(|names| {
                names
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let description = agent
        .description
        .clone()
        .unwrap_or_else(|| format!("The agent {} of an agent-runner server", agent.name));
    let mut tags = vec!["agent-runner".to_owned()];
    tags.extend(names("tools"));
    tags.extend(
        names("commands")
            .into_iter()
            .map(|c| format!("command:{c}")),
    );
    let mut outputs = vec!["text/plain"];
    if agent.definition.contains_key("output_schema") {
        outputs.push("application/json");
    }
    let mut card = json!({
        "name": agent.name,
        "description": description,
        "version": agent.version.to_string(),
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": PROTOCOL_VERSION}
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": outputs,
        "skills": [{
            "id": agent.name,
            "name": agent.name,
            "description": description,
            "tags": tags,
        }],
    });
    if bearer {
        card["securitySchemes"] =
            json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}});
        card["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
    }
    card
}
