//! `POST /v1/runs`: the request body and its validation into a [`RunSpec`].
//! Every refusal names the field; nothing is created on a refusal.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};
use uuid::Uuid;

mod bounds;
mod repositories;
mod tools;

use super::error::ApiError;
use crate::config::LimitsConfig;
use crate::mcp::McpServers;
use crate::models::ModelProfiles;
use crate::run::{ModelInfo, ModelSpec, RunSpec};
use crate::tools::{BUILTIN_TOOL_NAMES, CommandPresets};
use tools::{Selected, approval, client_tools};

pub use crate::run::{DEFAULT_CONTEXT, DEFAULT_LIMITS};

/// Largest serialised `metadata` accepted.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// Most files a request may seed its workspace with.
pub const MAX_WORKSPACE_FILES: usize = 1000;
/// Longest `instructions` accepted, in bytes.
pub const MAX_INSTRUCTIONS_BYTES: usize = 256 * 1024;
/// Most tools a client may give a run.
pub const MAX_CLIENT_TOOLS: usize = 64;
/// Largest parameters schema of a client tool, serialised, and largest sum
/// of them.
pub const MAX_CLIENT_SCHEMA_BYTES: usize = 16 * 1024;
pub const MAX_CLIENT_SCHEMAS_BYTES: usize = 64 * 1024;
/// Largest output schema, serialised: it is compiled, and sent with the
/// instructions on every step.
pub const MAX_OUTPUT_SCHEMA_BYTES: usize = 64 * 1024;
/// Longest tool name (what providers take).
pub const MAX_TOOL_NAME_BYTES: usize = 64;
/// Longest workspace path a request may name (seeds and downloads), in
/// bytes: tighter than the kernel's `PATH_MAX` that bounds the tools
/// ([`crate::tools::path::MAX_PATH_BYTES`]).
pub const MAX_REQUEST_PATH_BYTES: usize = 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRunRequest {
    pub prompt: String,
    #[serde(default)]
    pub model: Option<ModelChoice>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    #[serde(default)]
    pub commands: Option<Vec<String>>,
    #[serde(default)]
    pub workspace: Option<WorkspaceRequest>,
    #[serde(default)]
    pub limits: Option<LimitsRequest>,
    #[serde(default)]
    pub context: Option<ContextRequest>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub approval: Option<ApprovalRequest>,
    #[serde(default)]
    pub client_tools: Option<Vec<ClientToolRequest>>,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub previous_run_id: Option<String>,
    #[serde(default)]
    pub mcp_servers: Option<Vec<String>>,
    #[serde(default)]
    pub webhook: Option<crate::run::Webhook>,
    #[serde(default)]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub attempts: Option<AttemptsRequest>,
    #[serde(default)]
    pub multitask: Option<crate::run::Multitask>,
    /// Resolved apart (see [`super::subagents`]): stored agents are read.
    #[serde(default)]
    pub subagents: Option<Value>,
}

/// `attempts`: the run tried `n` times, its checks choosing (SPEC 27).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptsRequest {
    pub n: u64,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub until: Option<crate::run::Until>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequest {
    pub tools: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientToolRequest {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: Option<Value>,
}

/// `{"profile": NAME}`, `{"scripted": [...]}`, or `NAME` alone, short for
/// the first.
#[derive(Debug)]
pub enum ModelChoice {
    Profile(String),
    Scripted(Vec<Value>),
}

impl<'de> Deserialize<'de> for ModelChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "snake_case")]
        enum Tagged {
            Profile(String),
            Scripted(Vec<Value>),
        }
        struct Choice;
        impl<'de> serde::de::Visitor<'de> for Choice {
            type Value = ModelChoice;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a profile's name, {\"profile\": NAME} or {\"scripted\": [...]}")
            }

            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<ModelChoice, E> {
                Ok(ModelChoice::Profile(name.to_owned()))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ModelChoice, A::Error> {
                // Read as the tagged table, through the same map, so that an
                // error names its own field (`model.scripted`).
                let tagged =
                    Tagged::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(match tagged {
                    Tagged::Profile(name) => ModelChoice::Profile(name),
                    Tagged::Scripted(script) => ModelChoice::Scripted(script),
                })
            }
        }
        deserializer.deserialize_any(Choice)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceRequest {
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    #[serde(default)]
    pub git: Option<crate::repo::GitSeed>,
    /// An upload's id.
    #[serde(default)]
    pub archive: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    pub max_steps: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub action_timeout_ms: Option<u64>,
    pub max_resumes: Option<u64>,
    pub output_retries: Option<u64>,
    pub max_cost_usd: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextRequest {
    pub max_context_chars: Option<u64>,
    pub max_tool_result_chars: Option<u64>,
    pub compaction: Option<CompactionRequest>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionRequest {
    pub at: Option<f64>,
    pub profile: Option<String>,
}

/// What validation needs to know of the server.
#[derive(Clone, Copy)]
pub struct Ceilings<'a> {
    pub limits: &'a LimitsConfig,
    pub profiles: &'a ModelProfiles,
    pub presets: &'a CommandPresets,
    pub mcp: &'a McpServers,
    pub default_model: &'a str,
    pub webhooks: &'a crate::runner::webhooks::Webhooks,
    /// `[workspaces]`: the repositories a run may be cloned from.
    pub repositories: &'a crate::config::WorkspacesConfig,
    /// For a run with built-in tools and no instructions (none: none).
    pub default_instructions: Option<&'a std::sync::Arc<str>>,
    /// `[runs] max_attempts`.
    pub max_attempts: u32,
}

impl<'a> Ceilings<'a> {
    /// The server's, as the API holds them.
    pub fn of(state: &'a super::state::AppState) -> Self {
        Self {
            limits: &state.limits,
            profiles: state.runner.profiles(),
            presets: state.runner.presets(),
            mcp: state.runner.mcp(),
            default_model: &state.default_model,
            webhooks: state.runner.webhooks(),
            repositories: state.runner.repositories(),
            default_instructions: state.default_instructions.as_ref(),
            max_attempts: state.runner.max_attempts(),
        }
    }
}

impl CreateRunRequest {
    pub fn validate(self, server: &Ceilings<'_>) -> Result<RunSpec, ApiError> {
        let invalid = |message: String| Err(ApiError::Validation(message));
        if self.prompt.trim().is_empty() {
            return invalid("prompt must not be empty".into());
        }
        if self.prompt.contains('\0') {
            return invalid("prompt must not contain NUL characters".into());
        }
        // The request's instructions replace its profile's ("" clears them).
        let mut instructions = None;
        let (model, model_info) = match self.model {
            None => {
                instructions = profile_instructions(server, server.default_model);
                profile(server, server.default_model, "runs.default_model")?
            }
            Some(ModelChoice::Profile(name)) => {
                instructions = profile_instructions(server, &name);
                profile(server, &name, "model.profile")?
            }
            Some(ModelChoice::Scripted(script)) => {
                check_script(&script)?;
                (
                    ModelSpec::Scripted(script),
                    ModelInfo {
                        provider: "scripted".into(),
                        profile: None,
                        name: None,
                    },
                )
            }
        };

        let Selected {
            commands,
            mcp_servers,
            tools,
        } = tools::select(server, self.commands, self.mcp_servers, self.tools)?;

        let limits = bounds::limits(self.limits.unwrap_or_default(), server.limits)?;
        if limits.max_cost_usd.is_some() {
            bounds::check_priced(server, &model)?;
        }
        let context = bounds::context(self.context.unwrap_or_default(), server, &model)?;

        let (files, mut seed) = match self.workspace {
            Some(workspace) => {
                let seed = repositories::seed(workspace.git, workspace.archive, server)?;
                (workspace.files, seed)
            }
            None => Default::default(),
        };
        if files.len() > MAX_WORKSPACE_FILES {
            return invalid(format!(
                "workspace.files: at most {MAX_WORKSPACE_FILES} files may be given"
            ));
        }
        for path in files.keys() {
            check_workspace_path(path)
                .map_err(|why| ApiError::Validation(format!("workspace.files.{path}: {why}")))?;
        }
        seed.files = !files.is_empty();

        let metadata = self.metadata.unwrap_or_default();
        let size = serde_json::to_string(&metadata).map_or(usize::MAX, |s| s.len());
        if size > MAX_METADATA_BYTES {
            return invalid(format!(
                "metadata: at most {MAX_METADATA_BYTES} bytes of JSON are kept (got {size})"
            ));
        }

        if let Some(given) = self.instructions {
            if given.contains('\0') {
                return invalid("instructions must not contain NUL characters".into());
            }
            if given.len() > MAX_INSTRUCTIONS_BYTES {
                return invalid(format!(
                    "instructions: at most {MAX_INSTRUCTIONS_BYTES} bytes (got {})",
                    given.len()
                ));
            }
            instructions = (!given.is_empty()).then(|| given.into());
        } else if instructions.is_none()
            && tools
                .iter()
                .any(|tool| BUILTIN_TOOL_NAMES.contains(&tool.as_str()))
        {
            instructions = server.default_instructions.cloned();
        }
        let previous_run_id = self
            .previous_run_id
            .map(|id| {
                Uuid::parse_str(&id).map_err(|_| {
                    ApiError::Validation(format!("previous_run_id: {id:?} is not a run id"))
                })
            })
            .transpose()?;
        if previous_run_id.is_some() && seed.fetches() {
            return invalid(
                "workspace.git and workspace.archive cannot be given with previous_run_id: a run \
                 that continues another starts from the workspace it continues"
                    .into(),
            );
        }
        if self.multitask.is_some() && previous_run_id.is_none() {
            return invalid(
                "multitask is given with previous_run_id: it says what a follow-up does while \
                 the run it continues is live"
                    .into(),
            );
        }
        let client_tools = client_tools(self.client_tools.unwrap_or_default(), &tools)?;
        // A run with sub-agents may have its `delegate` calls approved.
        let delegates = self.subagents.as_ref().is_some_and(|s| !s.is_null());
        let approval = approval(
            self.approval,
            &tools,
            &client_tools,
            &mcp_servers,
            delegates,
        )?;
        if let Some(webhook) = &self.webhook {
            server
                .webhooks
                .check(&webhook.url)
                .map_err(|why| ApiError::Validation(format!("webhook.url: {why}")))?;
        }
        let output_schema = self
            .output_schema
            .map(|schema| bounds::output_schema(schema, instructions.as_deref(), &context))
            .transpose()?;
        let attempts = self
            .attempts
            .map(|attempts| attempt_policy(attempts, &commands, server))
            .transpose()?;

        Ok(RunSpec {
            prompt: self.prompt,
            model,
            model_info,
            tools,
            commands,
            files,
            limits,
            context,
            metadata,
            approval,
            client_tools,
            instructions,
            previous_run_id,
            mcp_servers,
            webhook: self.webhook,
            trace: Default::default(),
            agent: None,
            output_schema,
            seed,
            attempts,
            attempt_of: None,
            multitask: self.multitask.unwrap_or_default(),
            schedule: None,
            copy_pending: false,
            after: None,
            subagents: None,
            child_of: None,
        })
    }
}

fn profile_instructions(server: &Ceilings<'_>, name: &str) -> Option<std::sync::Arc<str>> {
    server
        .profiles
        .get(name)
        .and_then(|profile| profile.instructions())
        .filter(|instructions| !instructions.is_empty())
        .map(std::sync::Arc::from)
}

fn profile(
    server: &Ceilings<'_>,
    name: &str,
    field: &str,
) -> Result<(ModelSpec, ModelInfo), ApiError> {
    let Some(info) = model_info(server.profiles, name) else {
        let names: Vec<String> = server.profiles.list().into_iter().map(|p| p.name).collect();
        return Err(ApiError::Validation(format!(
            "{field}: unknown model profile {name:?} (configured: {})",
            list_or_none(&names)
        )));
    };
    Ok((ModelSpec::Profile(name.to_owned()), info))
}

/// A script's elements are checked as a model's responses are, when the run
/// gets to them; here only what the request itself can get wrong is refused.
fn check_script(script: &[Value]) -> Result<(), ApiError> {
    for (i, element) in script.iter().enumerate() {
        if let Some(delay) = element.get("delay_ms")
            && delay.as_u64().is_none()
        {
            return Err(ApiError::Validation(format!(
                "model.scripted[{i}].delay_ms must be a nonnegative integer"
            )));
        }
    }
    Ok(())
}

fn check_unique(field: &str, names: &[String]) -> Result<(), ApiError> {
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(ApiError::Validation(format!(
                "{field}: {name:?} is listed twice"
            )));
        }
    }
    Ok(())
}

/// What the run object says of a profile's model.
pub fn model_info(profiles: &ModelProfiles, name: &str) -> Option<ModelInfo> {
    let profile = profiles.get(name)?;
    Some(ModelInfo {
        provider: profile.kind().as_str().to_owned(),
        profile: Some(name.to_owned()),
        name: profile.model().map(str::to_owned),
    })
}

fn preset_names(presets: &CommandPresets) -> Vec<String> {
    presets.names().map(str::to_owned).collect()
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// A workspace file's path: [`crate::tools::path::check_file_path`]'s rule, within our length limit.
pub fn check_workspace_path(path: &str) -> Result<(), &'static str> {
    if path.len() > MAX_REQUEST_PATH_BYTES {
        return Err("the path is too long");
    }
    crate::tools::path::check_file_path(path)
}

/// `attempts`, validated: `n` within `[runs] max_attempts`, a temperature a
/// provider takes, and a check among the run's commands to tell the
/// attempts apart.
fn attempt_policy(
    attempts: AttemptsRequest,
    commands: &[String],
    server: &Ceilings<'_>,
) -> Result<crate::run::AttemptPolicy, ApiError> {
    let invalid = |message: String| Err(ApiError::Validation(message));
    let most = server.max_attempts;
    let n = match u32::try_from(attempts.n) {
        Ok(n) if (2..=most).contains(&n) => n,
        _ => {
            return invalid(format!(
                "attempts.n: from 2 to {most} (the server's runs.max_attempts), got {}",
                attempts.n
            ));
        }
    };
    if let Some(t) = attempts.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return invalid(format!("attempts.temperature: from 0 to 2, got {t}"));
    }
    let checks = commands
        .iter()
        .any(|name| server.presets.get(name).is_some_and(|preset| preset.check));
    if !checks {
        return invalid(
            "attempts: needs a command preset with check = true among commands; nothing else \
             could tell the attempts apart"
                .into(),
        );
    }
    Ok(crate::run::AttemptPolicy {
        n,
        temperature: attempts.temperature,
        until: attempts.until.unwrap_or_default(),
    })
}
