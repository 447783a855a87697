//! Sub-agents (SPEC section 24): the agents a run may delegate to, each
//! resolved as the run is accepted into what a child run is made from, and
//! what makes a run the child of another.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{AgentRef, ApprovalSpec, ModelInfo, ModelSpec, RunContext, RunLimits};
use crate::harness::ToolDefinition;

/// The name of the built-in tool that starts a child run.
pub const DELEGATE_TOOL: &str = "delegate";

/// Most sub-agents a run (or an agent) may list.
pub const MAX_SUBAGENTS: usize = 8;

/// A run's sub-agents by name, as accepted (shared by its copies).
pub type Subagents = BTreeMap<String, Subagent>;

/// Where a child's workspace is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubWorkspace {
    /// The parent's own directory: what the child changes, the parent sees.
    #[default]
    Shared,
    /// A copy of the parent's directory as the child starts; the child's
    /// diff comes back with its answer.
    Copy,
}

impl SubWorkspace {
    pub fn is_shared(&self) -> bool {
        *self == Self::Shared
    }
}

/// One sub-agent, resolved: what the model is told of it, where its
/// workspace is, the stored agent it is (by the version it was resolved
/// to), and what its child runs are made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subagent {
    pub description: String,
    #[serde(default, skip_serializing_if = "SubWorkspace::is_shared")]
    pub workspace: SubWorkspace,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentRef>,
    pub definition: ChildTemplate,
}

/// What a child run is made from: the fields of a validated run request but
/// its prompt and workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildTemplate {
    pub model: ModelSpec,
    pub model_info: ModelInfo,
    pub tools: Vec<String>,
    pub commands: Vec<String>,
    pub limits: RunLimits,
    pub context: RunContext,
    #[serde(default)]
    pub approval: ApprovalSpec,
    #[serde(default)]
    pub client_tools: Vec<ToolDefinition>,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub mcp_servers: Vec<String>,
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Its own sub-agents (offered while the depth allows).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subagents: Subagents,
}

/// What makes a run a child of another: the run whose `delegate` call
/// (`call_id`) started it, the root of its tree, the sub-agent it runs as,
/// its depth (1 for a root's child) and the run whose workspace directory
/// it works in, when it shares one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildOf {
    #[serde(skip)]
    pub parent_run_id: Uuid,
    #[serde(skip)]
    pub call_id: String,
    pub root_run_id: Uuid,
    pub agent: String,
    pub depth: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_of: Option<Uuid>,
}

/// What the run object shows of a sub-agent: never its definition (a
/// script, a schema), which `GET /v1/agents` shows of a stored one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubagentView<'a> {
    pub description: &'a str,
    pub workspace: SubWorkspace,
    pub agent: Option<&'a AgentRef>,
}

/// The run object's `subagents`: by name, each as [`SubagentView`] shows
/// it; null for a run without.
pub fn subagents_json<S: serde::Serializer>(
    subagents: &Option<Arc<Subagents>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let Some(subagents) = subagents else {
        return serializer.serialize_none();
    };
    let mut map = serializer.serialize_map(Some(subagents.len()))?;
    for (name, subagent) in subagents.iter() {
        map.serialize_entry(
            name,
            &SubagentView {
                description: &subagent.description,
                workspace: subagent.workspace,
                agent: subagent.agent.as_ref(),
            },
        )?;
    }
    map.end()
}

/// The `delegate` tool's definition for `subagents`: its `agent` one of
/// their names, its description listing what each is for.
pub fn delegate_definition(subagents: &Subagents) -> ToolDefinition {
    let mut description = String::from(
        "Start a sub-agent on a task of its own and wait for its answer. It has a fresh \
         context: say in the prompt everything it needs to know (paths, names, what to report \
         back). Several calls in one response run at once. The sub-agents:",
    );
    for (name, subagent) in subagents {
        description.push_str("\n- ");
        description.push_str(name);
        if !subagent.description.is_empty() {
            description.push_str(": ");
            description.push_str(&subagent.description);
        }
    }
    let names: Vec<&str> = subagents.keys().map(String::as_str).collect();
    ToolDefinition {
        name: DELEGATE_TOOL.to_owned(),
        description,
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": names, "description": "Which sub-agent."},
                "prompt": {"type": "string", "minLength": 1, "description": "Its task, in full."}
            },
            "required": ["agent", "prompt"],
            "additionalProperties": false
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> ChildTemplate {
        ChildTemplate {
            model: ModelSpec::Scripted(vec![]),
            model_info: ModelInfo {
                provider: "scripted".into(),
                profile: None,
                name: None,
            },
            tools: vec![],
            commands: vec![],
            limits: super::super::DEFAULT_LIMITS,
            context: super::super::DEFAULT_CONTEXT.clone(),
            approval: ApprovalSpec::default(),
            client_tools: vec![],
            instructions: None,
            mcp_servers: vec![],
            output_schema: None,
            metadata: Default::default(),
            subagents: BTreeMap::new(),
        }
    }

    #[test]
    fn the_delegate_tool_names_each_subagent_and_what_it_is_for() {
        let mut subagents = Subagents::new();
        for (name, description) in [("reader", "reads files"), ("fixer", "")] {
            subagents.insert(
                name.into(),
                Subagent {
                    description: description.into(),
                    workspace: SubWorkspace::Shared,
                    agent: None,
                    definition: template(),
                },
            );
        }
        let definition = delegate_definition(&subagents);
        assert!(definition.description.contains("\n- reader: reads files"));
        assert!(definition.description.contains("\n- fixer"));
        assert_eq!(
            definition.parameters["properties"]["agent"]["enum"],
            serde_json::json!(["fixer", "reader"])
        );
    }

    #[test]
    fn a_stored_subagent_reads_back_as_it_was_written() {
        let subagent = Subagent {
            description: "d".into(),
            workspace: SubWorkspace::Copy,
            agent: Some(AgentRef {
                name: "r".into(),
                version: 2,
            }),
            definition: template(),
        };
        let text = serde_json::to_string(&subagent).unwrap();
        assert_eq!(serde_json::from_str::<Subagent>(&text).unwrap(), subagent);
    }
}
