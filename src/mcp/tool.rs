//! One tool of an MCP server, as a run's tool: its full name, its schema,
//! and its calls over the run's session with the server.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::harness::{Tool, ToolDefinition, ToolError};

/// What every MCP tool's name starts with.
pub const TOOL_PREFIX: &str = "mcp__";

/// Longest tool name providers take.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// `mcp__SERVER__TOOL`, with every character outside `[a-zA-Z0-9_-]` made
/// `_`. A name longer than providers take keeps its first 55 characters and
/// gains `_` and 8 hex digits of the whole name's SHA-256, so that it stays
/// distinct.
pub fn tool_name(server: &str, tool: &str) -> String {
    let full: String = format!("{TOOL_PREFIX}{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if full.len() <= MAX_TOOL_NAME_CHARS {
        return full;
    }
    let digest = hex::encode(Sha256::digest(full.as_bytes()));
    // ASCII only by now, so any byte index is a character boundary.
    format!("{}_{}", &full[..MAX_TOOL_NAME_CHARS - 9], &digest[..8])
}

/// The prefix of server `server`'s tools: `mcp__SERVER__`.
pub fn server_prefix(server: &str) -> String {
    format!("{TOOL_PREFIX}{server}__")
}

/// A tool of an MCP server, called over one run's session.
pub struct McpTool {
    peer: Peer<RoleClient>,
    server: Arc<str>,
    /// Its name on the server.
    remote: String,
    /// What the model is shown: the schema without `$schema`, which some
    /// providers refuse.
    definition: Arc<ToolDefinition>,
    /// The schema as the server declared it, dialect and all: what
    /// arguments are checked against.
    schema: Value,
    timeout: Duration,
    /// Its annotations say it only reads, or is idempotent: safe to call
    /// again after a crash left its outcome unknown.
    idempotent: bool,
}

impl McpTool {
    pub(super) fn new(
        peer: Peer<RoleClient>,
        server: Arc<str>,
        tool: &rmcp::model::Tool,
        timeout: Duration,
    ) -> Self {
        let schema = Value::Object((*tool.input_schema).clone());
        let mut shown = (*tool.input_schema).clone();
        shown.remove("$schema");
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or_default()
            .to_owned();
        Self {
            definition: Arc::new(ToolDefinition {
                name: tool_name(&server, &tool.name),
                description,
                parameters: Value::Object(shown),
            }),
            peer,
            server,
            remote: tool.name.to_string(),
            schema,
            timeout,
            idempotent: tool.annotations.as_ref().is_some_and(|annotations| {
                annotations.read_only_hint == Some(true)
                    || annotations.idempotent_hint == Some(true)
            }),
        }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    fn schema(&self) -> Option<&Value> {
        Some(&self.schema)
    }

    fn idempotent(&self, _arguments: &Value) -> bool {
        self.idempotent
    }

    async fn execute(
        &self,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let mut params = CallToolRequestParams::new(self.remote.clone());
        if let Value::Object(arguments) = arguments {
            params = params.with_arguments(arguments.clone());
        }
        let failed = |error: &dyn std::fmt::Display| {
            ToolError::new(format!(
                "The MCP server {} failed the call of {}: {}",
                self.server,
                self.remote,
                bounded(&error.to_string())
            ))
        };
        let mut call = self
            .peer
            .send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .map_err(|error| failed(&error))?;
        let (reason, error) = tokio::select! {
            biased;
            () = cancel.cancelled() => (
                "the run was stopped",
                format!(
                    "MCP tool call cancelled: the run was stopped before {} answered",
                    self.definition.name
                ),
            ),
            () = tokio::time::sleep(self.timeout) => (
                "the call timed out",
                format!(
                    "The MCP server {} did not answer {} within {} ms (its tool_timeout_ms); \
                     the call was cancelled",
                    self.server,
                    self.remote,
                    self.timeout.as_millis()
                ),
            ),
            response = &mut call.rx => return match response {
                Ok(Ok(ServerResult::CallToolResult(result))) => answer(result),
                Ok(Ok(_)) => Err(failed(&"it answered with something other than a tool result")),
                Ok(Err(error)) => Err(failed(&error)),
                Err(_) => Err(failed(&"the session ended before it answered")),
            },
        };
        // The server is told (`notifications/cancelled`) before the call is
        // given up, within the harness's grace for a stopped tool.
        let _ = tokio::time::timeout(CANCEL_WITHIN, call.cancel(Some(reason.to_owned()))).await;
        Err(ToolError::new(error))
    }
}

/// How long telling a server of a cancelled call may take.
const CANCEL_WITHIN: Duration = Duration::from_millis(200);

/// Longest failure text of a server's quoted in a result.
const MAX_QUOTED_CHARS: usize = 2048;

/// `text`, cut to [`MAX_QUOTED_CHARS`] characters.
pub(super) fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// A call's result as a tool result: its `structuredContent` if it has
/// one, else its `content` blocks; `isError` makes it an error result (the
/// same JSON, as the error's text).
fn answer(result: CallToolResult) -> Result<Value, ToolError> {
    let value = match result.structured_content {
        Some(structured) => structured,
        None => serde_json::to_value(&result.content).unwrap_or(Value::Null),
    };
    if result.is_error == Some(true) {
        let text = match value {
            Value::String(text) => text,
            other => other.to_string(),
        };
        return Err(ToolError::new(text));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_made_of_allowed_characters_and_fit_providers() {
        assert_eq!(
            tool_name("everything", "get-sum"),
            "mcp__everything__get-sum"
        );
        assert_eq!(tool_name("fs", "read.file v2"), "mcp__fs__read_file_v2");
        assert_eq!(tool_name("fs", "ünï"), "mcp__fs___n_");
        let long = tool_name("server", &"x".repeat(100));
        assert_eq!(long.len(), MAX_TOOL_NAME_CHARS);
        assert!(long.starts_with("mcp__server__xxx"));
        let other = tool_name("server", &format!("{}y", "x".repeat(99)));
        assert_ne!(long, other, "long names stay distinct");
        assert!(crate::harness::is_valid_tool_name(&long));
    }

    #[test]
    fn a_result_is_its_structured_content_else_its_content() {
        let parsed: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "{\"t\":1}"}],
            "structuredContent": {"t": 1}
        }))
        .unwrap();
        assert_eq!(answer(parsed).unwrap(), json!({"t": 1}));
        let parsed: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "Echo: hi"}]
        }))
        .unwrap();
        assert_eq!(
            answer(parsed).unwrap(),
            json!([{"type": "text", "text": "Echo: hi"}])
        );
        let parsed: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "no such resource"}],
            "isError": true
        }))
        .unwrap();
        assert_eq!(
            answer(parsed).unwrap_err().message(),
            r#"[{"text":"no such resource","type":"text"}]"#
        );
    }
}
