//! The tools of a run as its request names them: its commands, its MCP
//! servers, its built-in and MCP tools, the client's own tools, and which
//! of them wait for approval.

use super::{
    ApprovalRequest, Ceilings, ClientToolRequest, MAX_CLIENT_SCHEMA_BYTES,
    MAX_CLIENT_SCHEMAS_BYTES, MAX_CLIENT_TOOLS, MAX_TOOL_NAME_BYTES, check_unique, list_or_none,
    preset_names,
};
use crate::api::error::ApiError;
use crate::harness::{ToolDefinition, compile_schema, is_valid_tool_name};
use crate::mcp::{TOOL_PREFIX, server_of, server_prefix};
use crate::run::ApprovalSpec;
use crate::tools::BUILTIN_TOOL_NAMES;
use crate::tools::command::RUN_COMMAND;

/// What a run may call, as its request names it.
pub(super) struct Selected {
    pub commands: Vec<String>,
    pub mcp_servers: Vec<String>,
    pub tools: Vec<String>,
}

/// The run's presets (all of the server's by default), its MCP servers, and
/// its tools (every built-in one by default, `run_command` only with a
/// command to run), each known to the server.
pub(super) fn select(
    server: &Ceilings<'_>,
    commands: Option<Vec<String>>,
    mcp_servers: Option<Vec<String>>,
    tools: Option<Vec<String>>,
) -> Result<Selected, ApiError> {
    let invalid = |message: String| Err(ApiError::Validation(message));
    let commands = match commands {
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
    let mcp_servers = mcp_servers.unwrap_or_default();
    check_unique("mcp_servers", &mcp_servers)?;
    if let Some(unknown) = mcp_servers.iter().find(|name| !server.mcp.contains(name)) {
        let configured: Vec<String> = server.mcp.names().map(str::to_owned).collect();
        return invalid(format!(
            "mcp_servers: unknown MCP server {unknown:?} (configured: {})",
            list_or_none(&configured)
        ));
    }
    let tools = match tools {
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
    Ok(Selected {
        commands,
        mcp_servers,
        tools,
    })
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
pub(super) fn is_mcp_tool(name: &str, servers: &[String]) -> bool {
    server_of(name, servers).is_some_and(|server| name.len() > server.len() + TOOL_PREFIX.len() + 2)
        && is_valid_tool_name(name)
        && name.len() <= MAX_TOOL_NAME_BYTES
}

/// The client's tools: named by the tool-name rule, clashing with no other
/// tool of the run, each with an object schema that compiles.
pub(super) fn client_tools(
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
pub(super) fn approval(
    requested: Option<ApprovalRequest>,
    tools: &[String],
    client_tools: &[ToolDefinition],
    mcp_servers: &[String],
    delegates: bool,
) -> Result<ApprovalSpec, ApiError> {
    let Some(requested) = requested else {
        return Ok(ApprovalSpec::default());
    };
    check_unique("approval.tools", &requested.tools)?;
    let known = |name: &str| {
        name == "*"
            || delegates && name == crate::run::subagents::DELEGATE_TOOL
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
