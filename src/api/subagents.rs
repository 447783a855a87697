//! `subagents` of a run or an agent (SPEC section 24), resolved as the run
//! is accepted: a stored agent by the version named (or its latest then),
//! an inline definition as given; each validated as the body of a run of
//! its own would be, into what its child runs are made from.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::create::{Ceilings, CreateRunRequest};
use super::error::ApiError;
use super::state::AppState;
use crate::agent::is_valid_name;
use crate::run::subagents::{DELEGATE_TOOL, MAX_SUBAGENTS};
use crate::run::{AgentRef, ChildTemplate, RunSpec, SubWorkspace, Subagent, Subagents, Tenant};

/// Fields of a run body a sub-agent's definition may not carry: its
/// prompt is the `delegate` call's, its workspace its parent's, and it runs
/// once, for its parent alone.
const NOT_IN_SUBAGENT: &[&str] = &[
    "prompt",
    "previous_run_id",
    "attempts",
    "webhook",
    "multitask",
];

/// Most bytes a sub-agent's description may have.
const MAX_DESCRIPTION_BYTES: usize = 4096;

/// The run's `subagents` (`raw`, the body's field), resolved for children
/// at `depth` (1 for a root's): `None` when none are given. Their own
/// sub-agents are resolved while the depth allows them to delegate, and
/// left out beyond it. Every refusal names the sub-agent.
pub async fn resolve(
    state: &AppState,
    tenant: &Tenant,
    raw: Option<Value>,
    depth: u32,
) -> Result<Option<Arc<Subagents>>, ApiError> {
    let subagents = match raw {
        None | Some(Value::Null) => return Ok(None),
        Some(raw) => resolve_map(state, tenant, raw, depth, "subagents".into()).await?,
    };
    // Stored agents naming each other resolve into a tree that grows with
    // each level: it is bounded, as a run's row holds it whole.
    let count = count(&subagents);
    if count > MAX_RESOLVED {
        return Err(ApiError::Validation(format!(
            "subagents: {count} sub-agents at all depths (stored agents' own included); at most \
             {MAX_RESOLVED}"
        )));
    }
    let bytes = serde_json::to_string(&subagents).map_or(usize::MAX, |text| text.len());
    if bytes > MAX_RESOLVED_BYTES {
        return Err(ApiError::Validation(format!(
            "subagents: {bytes} bytes of definitions at all depths (stored agents' own \
             included); at most {MAX_RESOLVED_BYTES}"
        )));
    }
    Ok(Some(Arc::new(subagents)))
}

/// Most sub-agents a run's tree may hold at all depths, and most bytes of
/// their definitions.
const MAX_RESOLVED: usize = 64;
const MAX_RESOLVED_BYTES: usize = 4 * 1024 * 1024;

fn count(subagents: &Subagents) -> usize {
    subagents
        .values()
        .map(|subagent| 1 + count(&subagent.definition.subagents))
        .sum()
}

type Resolving<'a> = Pin<Box<dyn Future<Output = Result<Subagents, ApiError>> + Send + 'a>>;

fn resolve_map<'a>(
    state: &'a AppState,
    tenant: &'a Tenant,
    raw: Value,
    depth: u32,
    field: String,
) -> Resolving<'a> {
    Box::pin(async move {
        let invalid = |message: String| Err(ApiError::Validation(message));
        let Value::Object(entries) = raw else {
            return invalid(format!("{field}: must be an object of sub-agents by name"));
        };
        if entries.len() > MAX_SUBAGENTS {
            return invalid(format!(
                "{field}: at most {MAX_SUBAGENTS} sub-agents (got {})",
                entries.len()
            ));
        }
        let mut subagents = BTreeMap::new();
        for (name, entry) in entries {
            let field = format!("{field}.{name}");
            if !is_valid_name(&name) {
                return invalid(format!(
                    "{field}: {name:?} is not a sub-agent's name (^[a-z0-9][a-z0-9_-]{{0,63}}$)"
                ));
            }
            let subagent = resolve_one(state, tenant, entry, depth, &field).await?;
            subagents.insert(name, subagent);
        }
        Ok(subagents)
    })
}

async fn resolve_one(
    state: &AppState,
    tenant: &Tenant,
    entry: Value,
    depth: u32,
    field: &str,
) -> Result<Subagent, ApiError> {
    let invalid = |message: String| ApiError::Validation(format!("{field}: {message}"));
    let Value::Object(mut entry) = entry else {
        return Err(invalid(
            "must be an object: {\"agent\": NAME or NAME@VERSION} or a definition".into(),
        ));
    };
    let mut description = match entry.remove("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.len() > MAX_DESCRIPTION_BYTES => {
            return Err(invalid(format!(
                "description: at most {MAX_DESCRIPTION_BYTES} bytes (got {})",
                text.len()
            )));
        }
        Some(Value::String(text)) if text.contains('\0') => {
            return Err(invalid(
                "description must not contain NUL characters".into(),
            ));
        }
        Some(Value::String(text)) => Some(text),
        Some(_) => return Err(invalid("description: must be a string".into())),
    };
    let workspace = match entry.remove("workspace") {
        None | Some(Value::Null) => SubWorkspace::Shared,
        Some(value) => serde_json::from_value(value)
            .map_err(|_| invalid("workspace: \"shared\" or \"copy\"".into()))?,
    };
    let (definition, agent) = match entry.remove("agent") {
        None | Some(Value::Null) => (entry, None),
        Some(Value::String(named)) => {
            if let Some(other) = entry.keys().next() {
                return Err(invalid(format!(
                    "{other}: a stored agent's sub-agent takes its definition from the agent; \
                     give only agent, description and workspace"
                )));
            }
            let (name, version) = super::agents::parse_reference(&named)
                .map_err(|error| invalid(error.to_string()))?;
            let Some(stored) = state
                .runner
                .store()
                .agent_for_run(tenant, name, version)
                .await?
            else {
                return Err(ApiError::AgentNotFound(format!(
                    "{field}: agent {named:?} not found, or archived"
                )));
            };
            if description.is_none() {
                description.clone_from(&stored.description);
            }
            let reference = AgentRef {
                name: stored.name.clone(),
                version: stored.version,
            };
            (Map::clone(&stored.definition), Some(reference))
        }
        Some(_) => {
            return Err(invalid(
                "agent: must be an agent's name, or NAME@VERSION".into(),
            ));
        }
    };
    let template = template(state, tenant, definition, depth, field).await?;
    Ok(Subagent {
        description: description.unwrap_or_default(),
        workspace,
        agent,
        definition: template,
    })
}

/// A definition validated as a run's body (with a prompt of its own) into
/// what its child runs are made from.
async fn template(
    state: &AppState,
    tenant: &Tenant,
    mut definition: Map<String, Value>,
    depth: u32,
    field: &str,
) -> Result<ChildTemplate, ApiError> {
    let invalid = |message: String| ApiError::Validation(format!("{field}: {message}"));
    if let Some(own) = NOT_IN_SUBAGENT
        .iter()
        .find(|key| definition.get(**key).is_some_and(|v| !v.is_null()))
    {
        return Err(invalid(format!(
            "{own}: not part of a sub-agent (its prompt is the delegate call's, its workspace \
             its parent's, and it runs once)"
        )));
    }
    // Left in for the run body's validation (a `delegate` call may need
    // approval), and resolved below.
    let nested = definition.get("subagents").cloned();
    definition.insert(
        "prompt".into(),
        Value::String("(the delegate call's prompt)".into()),
    );
    let request: CreateRunRequest =
        super::json::from_value(Value::Object(definition)).map_err(|error| match error {
            ApiError::Validation(message) => invalid(message),
            error => error,
        })?;
    let spec = request
        .validate(&Ceilings::of(state))
        .map_err(|error| match error {
            ApiError::Validation(message) => invalid(message),
            error => error,
        })?;
    // Its own sub-agents, while a child at this depth may delegate.
    let subagents = if depth < state.runner.max_depth() {
        let field = format!("{field}.subagents");
        match nested {
            None | Some(Value::Null) => Subagents::new(),
            Some(raw) => resolve_map(state, tenant, raw, depth + 1, field).await?,
        }
    } else {
        Subagents::new()
    };
    check_names(&spec, !subagents.is_empty()).map_err(|error| match error {
        ApiError::Validation(message) => invalid(message),
        error => error,
    })?;
    Ok(ChildTemplate {
        model: spec.model,
        model_info: spec.model_info,
        tools: spec.tools,
        commands: spec.commands,
        limits: spec.limits,
        context: spec.context,
        approval: spec.approval,
        client_tools: spec.client_tools,
        instructions: spec.instructions.map(|text| text.to_string()),
        mcp_servers: spec.mcp_servers,
        output_schema: spec.output_schema.map(|schema| Value::clone(&schema)),
        metadata: spec.metadata,
        subagents,
    })
}

/// A run that may delegate has a tool named `delegate`: no client tool
/// of its may take the name.
pub fn check_names(spec: &RunSpec, delegates: bool) -> Result<(), ApiError> {
    if delegates
        && spec
            .client_tools
            .iter()
            .any(|tool| tool.name == DELEGATE_TOOL)
    {
        return Err(ApiError::Validation(format!(
            "client_tools: {DELEGATE_TOOL:?} is the built-in tool of a run with subagents; name \
             the client's tool otherwise"
        )));
    }
    Ok(())
}
