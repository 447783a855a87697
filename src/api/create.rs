//! `POST /v1/runs`: the request body and its validation into a [`RunSpec`].
//! Every refusal names the field; nothing is created on a refusal.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::error::ApiError;
use crate::config::LimitsConfig;
use crate::harness::{ToolDefinition, compile_schema, is_valid_tool_name};
use crate::mcp::{McpServers, TOOL_PREFIX, server_of, server_prefix};
use crate::models::ModelProfiles;
use crate::run::{ApprovalSpec, ModelInfo, ModelSpec, RunContext, RunLimits, RunSpec};
use crate::tools::command::RUN_COMMAND;
use crate::tools::{BUILTIN_TOOL_NAMES, CommandPresets};

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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextRequest {
    pub max_context_chars: Option<u64>,
    pub max_tool_result_chars: Option<u64>,
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
    /// For a run with built-in tools and no instructions (none: none).
    pub default_instructions: Option<&'a std::sync::Arc<str>>,
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
            default_instructions: state.default_instructions.as_ref(),
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

        let commands = match self.commands {
            None => preset_names(server.presets),
            Some(commands) => {
                check_unique("commands", &commands)?;
                if let Some(unknown) = commands.iter().find(|c| !server.presets.contains(c)) {
                    return invalid(format!(
                        "commands: unknown command {unknown:?} (configured: {})",
                        list_or_none(&preset_names(server.presets))
                    ));
                }
                commands
            }
        };
        let mcp_servers = self.mcp_servers.unwrap_or_default();
        check_unique("mcp_servers", &mcp_servers)?;
        if let Some(unknown) = mcp_servers.iter().find(|name| !server.mcp.contains(name)) {
            let configured: Vec<String> = server.mcp.names().map(str::to_owned).collect();
            return invalid(format!(
                "mcp_servers: unknown MCP server {unknown:?} (configured: {})",
                list_or_none(&configured)
            ));
        }
        let tools = match self.tools {
            // By default every built-in tool, but `run_command` only when there
            // is a command to run.
            None => BUILTIN_TOOL_NAMES
                .iter()
                .filter(|&&t| t != RUN_COMMAND || !commands.is_empty())
                .map(|t| (*t).to_owned())
                .collect(),
            Some(tools) => {
                check_unique("tools", &tools)?;
                if let Some(unknown) = tools.iter().find(|t| {
                    !BUILTIN_TOOL_NAMES.contains(&t.as_str()) && !is_mcp_tool(t, &mcp_servers)
                }) {
                    if unknown.starts_with(TOOL_PREFIX) {
                        return invalid(format!(
                            "tools: {unknown:?} is not a tool of an MCP server of this run \
                             (mcp__SERVER__TOOL, SERVER one of mcp_servers: {})",
                            list_or_none(&mcp_servers)
                        ));
                    }
                    return invalid(format!(
                        "tools: unknown tool {unknown:?} (available: {}, and the tools of the \
                         run's mcp_servers as mcp__SERVER__TOOL)",
                        BUILTIN_TOOL_NAMES.join(", ")
                    ));
                }
                if tools.iter().any(|t| t == RUN_COMMAND) && commands.is_empty() {
                    return invalid(
                        "tools: run_command needs at least one command in commands (none is configured or allowed)"
                            .into(),
                    );
                }
                tools
            }
        };

        let ceilings = server.limits;
        let requested = self.limits.unwrap_or_default();
        let limits = RunLimits {
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
        };
        let requested = self.context.unwrap_or_default();
        let context = RunContext {
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
        };

        let files = self.workspace.map(|w| w.files).unwrap_or_default();
        if files.len() > MAX_WORKSPACE_FILES {
            return invalid(format!(
                "workspace.files: at most {MAX_WORKSPACE_FILES} files may be given"
            ));
        }
        for path in files.keys() {
            check_workspace_path(path)
                .map_err(|why| ApiError::Validation(format!("workspace.files.{path}: {why}")))?;
        }

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
        let client_tools = client_tools(self.client_tools.unwrap_or_default(), &tools)?;
        let approval = approval(self.approval, &tools, &client_tools, &mcp_servers)?;
        if let Some(webhook) = &self.webhook {
            server
                .webhooks
                .check(&webhook.url)
                .map_err(|why| ApiError::Validation(format!("webhook.url: {why}")))?;
        }
        let output_schema = self.output_schema.map(output_schema).transpose()?;
        if let Some(schema) = &output_schema {
            // Sent with the instructions on every step: what the two take
            // of the context must leave room for the rest.
            let told = crate::harness::output::told(schema);
            let sent = match &instructions {
                Some(own) => format!("{own}\n\n{told}"),
                None => told,
            };
            let chars = crate::harness::message::json_string_chars(&sent);
            if chars >= context.max_context_chars {
                return invalid(format!(
                    "output_schema: with the instructions it takes {chars} characters of the \
                     context, and context.max_context_chars is {}",
                    context.max_context_chars
                ));
            }
        }

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
        })
    }
}

/// A run's output schema: a JSON Schema object of at most
/// [`MAX_OUTPUT_SCHEMA_BYTES`] that compiles.
fn output_schema(schema: Value) -> Result<std::sync::Arc<Value>, ApiError> {
    let size = serde_json::to_string(&schema).map_or(usize::MAX, |s| s.len());
    if size > MAX_OUTPUT_SCHEMA_BYTES {
        return Err(ApiError::Validation(format!(
            "output_schema: at most {MAX_OUTPUT_SCHEMA_BYTES} bytes of JSON (got {size})"
        )));
    }
    crate::harness::output::compile_output_schema(&schema).map_err(|why| {
        ApiError::Validation(format!("output_schema: not a valid JSON Schema: {why}"))
    })?;
    Ok(std::sync::Arc::new(schema))
}

/// Whether `tools` names some of the MCP tools of `name`'s server, and not
/// `name`: the run will not have it.
fn narrowed_out(name: &str, tools: &[String], servers: &[String]) -> bool {
    server_of(name, servers).is_some_and(|server| {
        let prefix = server_prefix(server);
        tools.iter().any(|t| t.starts_with(&prefix)) && !tools.iter().any(|t| t == name)
    })
}

/// A name of a tool of one of the run's MCP servers: `mcp__SERVER__TOOL`
/// in the tool-name rule. Whether the server has it is known when the run
/// starts.
fn is_mcp_tool(name: &str, servers: &[String]) -> bool {
    server_of(name, servers).is_some_and(|server| name.len() > server.len() + TOOL_PREFIX.len() + 2)
        && is_valid_tool_name(name)
        && name.len() <= MAX_TOOL_NAME_BYTES
}

fn profile_instructions(server: &Ceilings<'_>, name: &str) -> Option<std::sync::Arc<str>> {
    server
        .profiles
        .get(name)
        .and_then(|profile| profile.instructions())
        .filter(|instructions| !instructions.is_empty())
        .map(std::sync::Arc::from)
}

/// The client's tools: named by the tool-name rule, clashing with no other
/// tool of the run, each with an object schema that compiles.
fn client_tools(
    requested: Vec<ClientToolRequest>,
    tools: &[String],
) -> Result<Vec<ToolDefinition>, ApiError> {
    let invalid = |message: String| Err(ApiError::Validation(message));
    if requested.len() > MAX_CLIENT_TOOLS {
        return invalid(format!(
            "client_tools: at most {MAX_CLIENT_TOOLS} tools may be given (got {})",
            requested.len()
        ));
    }
    let mut definitions: Vec<ToolDefinition> = Vec::with_capacity(requested.len());
    let mut schema_bytes = 0;
    for (i, tool) in requested.into_iter().enumerate() {
        let name = tool.name;
        if !is_valid_tool_name(&name) || name.len() > MAX_TOOL_NAME_BYTES {
            return invalid(format!(
                "client_tools[{i}].name: {name:?} is not a valid tool name \
                 (^[a-zA-Z][a-zA-Z0-9_-]*$, at most {MAX_TOOL_NAME_BYTES} characters)"
            ));
        }
        if name.starts_with(TOOL_PREFIX) {
            return invalid(format!(
                "client_tools[{i}].name: {name:?}: names starting with {TOOL_PREFIX} are MCP tools'"
            ));
        }
        if tools.contains(&name) || definitions.iter().any(|d| d.name == name) {
            return invalid(format!(
                "client_tools[{i}].name: {name:?} clashes with another tool of the run"
            ));
        }
        let parameters = tool
            .parameters
            .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        // Compiling a schema costs time in its size (each pattern is a
        // regex to build): bounded, per tool and in all.
        let size = serde_json::to_string(&parameters).map_or(usize::MAX, |s| s.len());
        if size > MAX_CLIENT_SCHEMA_BYTES {
            return invalid(format!(
                "client_tools[{i}].parameters: at most {MAX_CLIENT_SCHEMA_BYTES} bytes of JSON (got {size})"
            ));
        }
        schema_bytes += size;
        if schema_bytes > MAX_CLIENT_SCHEMAS_BYTES {
            return invalid(format!(
                "client_tools: at most {MAX_CLIENT_SCHEMAS_BYTES} bytes of parameters schemas in all"
            ));
        }
        if let Err(why) = compile_schema(&parameters) {
            return invalid(format!(
                "client_tools[{i}].parameters: the schema of tool {name} does not compile: {why}"
            ));
        }
        definitions.push(ToolDefinition {
            name,
            description: tool.description,
            parameters,
        });
    }
    Ok(definitions)
}

/// Which tools' calls wait for approval: tools of the run, or `"*"`.
fn approval(
    requested: Option<ApprovalRequest>,
    tools: &[String],
    client_tools: &[ToolDefinition],
    mcp_servers: &[String],
) -> Result<ApprovalSpec, ApiError> {
    let Some(requested) = requested else {
        return Ok(ApprovalSpec::default());
    };
    check_unique("approval.tools", &requested.tools)?;
    let known = |name: &str| {
        name == "*"
            || tools.iter().any(|t| t == name)
            || client_tools.iter().any(|t| t.name == name)
            || is_mcp_tool(name, mcp_servers) && !narrowed_out(name, tools, mcp_servers)
    };
    if let Some(unknown) = requested.tools.iter().find(|name| !known(name)) {
        let mut names: Vec<String> = tools.to_vec();
        names.extend(client_tools.iter().map(|t| t.name.clone()));
        return Err(ApiError::Validation(format!(
            "approval.tools: {unknown:?} is not a tool of this run (its tools: {}, and those of its \
             mcp_servers as mcp__SERVER__TOOL; \"*\" is all of them)",
            list_or_none(&names)
        )));
    }
    Ok(ApprovalSpec {
        tools: requested.tools,
    })
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
