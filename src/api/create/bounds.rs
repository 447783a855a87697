//! What bounds a run: its budgets and its context, each within the
//! server's ceiling, and its output schema.

use std::sync::Arc;

use serde_json::Value;

use super::{
    Ceilings, CompactionRequest, ContextRequest, DEFAULT_CONTEXT, DEFAULT_LIMITS, LimitsRequest,
    MAX_OUTPUT_SCHEMA_BYTES,
};
use crate::api::error::ApiError;
use crate::config::LimitsConfig;
use crate::run::{CompactionSpec, DEFAULT_COMPACTION_AT, ModelSpec, RunContext, RunLimits};

/// The run's budgets: each as requested, or its default, within `ceilings`.
pub(super) fn limits(
    requested: LimitsRequest,
    ceilings: &LimitsConfig,
) -> Result<RunLimits, ApiError> {
    Ok(RunLimits {
        max_steps: bounded(
            "limits.max_steps",
            requested.max_steps,
            DEFAULT_LIMITS.max_steps.into(),
            1,
            ceilings.max_steps.into(),
        )? as u32,
        max_tool_calls: bounded(
            "limits.max_tool_calls",
            requested.max_tool_calls,
            DEFAULT_LIMITS.max_tool_calls.into(),
            0,
            ceilings.max_tool_calls.into(),
        )? as u32,
        timeout_ms: bounded(
            "limits.timeout_ms",
            requested.timeout_ms,
            DEFAULT_LIMITS.timeout_ms,
            1,
            ceilings.timeout_ms,
        )?,
        action_timeout_ms: bounded(
            "limits.action_timeout_ms",
            requested.action_timeout_ms,
            DEFAULT_LIMITS.action_timeout_ms,
            1,
            ceilings.action_timeout_ms,
        )?,
        max_resumes: bounded(
            "limits.max_resumes",
            requested.max_resumes,
            DEFAULT_LIMITS.max_resumes.into(),
            0,
            ceilings.max_resumes.into(),
        )? as u32,
        output_retries: bounded(
            "limits.output_retries",
            requested.output_retries,
            DEFAULT_LIMITS.output_retries.into(),
            0,
            ceilings.output_retries.into(),
        )? as u32,
        max_cost_usd: match requested.max_cost_usd {
            Some(max) if !(max.is_finite() && max > 0.0) => {
                return Err(ApiError::Validation(format!(
                    "limits.max_cost_usd must be a number of US dollars above 0 (got {max})"
                )));
            }
            max => max,
        },
    })
}

/// Refuses a cost bound on a run whose model has no price: its cost could
/// not be known.
pub(super) fn check_priced(server: &Ceilings<'_>, model: &ModelSpec) -> Result<(), ApiError> {
    let priced = match model {
        ModelSpec::Profile(name) => server
            .profiles
            .get(name)
            .is_some_and(|profile| profile.price().is_some()),
        ModelSpec::Scripted(_) => false,
    };
    if priced {
        return Ok(());
    }
    let which = match model {
        ModelSpec::Profile(name) => format!("model profile {name:?}"),
        ModelSpec::Scripted(_) => "a scripted model".to_owned(),
    };
    Err(ApiError::Validation(format!(
        "limits.max_cost_usd needs a model with a price, and {which} has none \
         (a profile's `price` in the server's configuration)"
    )))
}

/// The run's context bounds, as [`limits`].
pub(super) fn context(
    requested: ContextRequest,
    server: &Ceilings<'_>,
    model: &ModelSpec,
) -> Result<RunContext, ApiError> {
    let ceilings = server.limits;
    Ok(RunContext {
        max_context_chars: bounded(
            "context.max_context_chars",
            requested.max_context_chars,
            DEFAULT_CONTEXT.max_context_chars as u64,
            1,
            ceilings.max_context_chars as u64,
        )? as usize,
        max_tool_result_chars: bounded(
            "context.max_tool_result_chars",
            requested.max_tool_result_chars,
            DEFAULT_CONTEXT.max_tool_result_chars as u64,
            1,
            ceilings.max_tool_result_chars as u64,
        )? as usize,
        compaction: compaction(requested.compaction, server, model)?,
    })
}

/// The run's `context.compaction`: as asked (`at` 0.8 unless given, a
/// profile that exists), else its model profile's `compaction_at`, else
/// none.
fn compaction(
    requested: Option<CompactionRequest>,
    server: &Ceilings<'_>,
    model: &ModelSpec,
) -> Result<Option<CompactionSpec>, ApiError> {
    let Some(requested) = requested else {
        let default = match model {
            ModelSpec::Profile(name) => server.profiles.get(name).and_then(|p| p.compaction_at()),
            ModelSpec::Scripted(_) => None,
        };
        return Ok(default.map(|at| CompactionSpec { at, profile: None }));
    };
    let at = requested.at.unwrap_or(DEFAULT_COMPACTION_AT);
    if !(at > 0.0 && at <= 1.0) {
        return Err(ApiError::Validation(format!(
            "context.compaction.at must be a share of max_context_chars above 0 and at most 1 \
             (got {at})"
        )));
    }
    if let Some(name) = &requested.profile
        && !server.profiles.contains(name)
    {
        let names: Vec<String> = server.profiles.list().into_iter().map(|p| p.name).collect();
        return Err(ApiError::Validation(format!(
            "context.compaction.profile: unknown model profile {name:?} (configured: {})",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        )));
    }
    Ok(Some(CompactionSpec {
        at,
        profile: requested.profile,
    }))
}

/// A run's output schema: a JSON Schema object of at most
/// [`MAX_OUTPUT_SCHEMA_BYTES`] that compiles, and leaves room in the context
/// beside the run's `instructions`.
pub(super) fn output_schema(
    schema: Value,
    instructions: Option<&str>,
    context: &RunContext,
) -> Result<Arc<Value>, ApiError> {
    let size = serde_json::to_string(&schema).map_or(usize::MAX, |s| s.len());
    if size > MAX_OUTPUT_SCHEMA_BYTES {
        return Err(ApiError::Validation(format!(
            "output_schema: at most {MAX_OUTPUT_SCHEMA_BYTES} bytes of JSON (got {size})"
        )));
    }
    crate::harness::output::compile_output_schema(&schema).map_err(|why| {
        ApiError::Validation(format!("output_schema: not a valid JSON Schema: {why}"))
    })?;
    // Sent with the instructions on every step: what the two take of the
    // context must leave room for the rest.
    let told = crate::harness::output::told(&schema);
    let sent = match instructions {
        Some(own) => format!("{own}\n\n{told}"),
        None => told,
    };
    let chars = crate::harness::message::json_string_chars(&sent);
    if chars >= context.max_context_chars {
        return Err(ApiError::Validation(format!(
            "output_schema: with the instructions it takes {chars} characters of the context, \
             and context.max_context_chars is {}",
            context.max_context_chars
        )));
    }
    Ok(Arc::new(schema))
}

fn bounded(
    field: &str,
    value: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ApiError> {
    match value {
        None => Ok(default.clamp(min, max)),
        Some(value) if (min..=max).contains(&value) => Ok(value),
        Some(value) => Err(ApiError::Validation(format!(
            "{field} must be between {min} and {max} (got {value})"
        ))),
    }
}
