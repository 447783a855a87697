//! The agent harness: a provider-agnostic loop in which the model only proposes
//! tool calls and the harness validates, confines, budgets, executes and
//! records them. Nothing here knows about HTTP or SQL.

pub mod agent;
pub mod blocks;
pub mod context;
pub mod events;
pub mod message;
pub mod model;
pub mod output;
pub mod pause;
pub mod registry;
pub mod render;
pub mod review;
pub mod stop;
pub mod stuck;
pub mod tool;
pub mod unchanged;
pub mod unread;
pub mod usage;

pub use agent::{
    CANNOT_PAUSE, Compaction, ContextLimits, DEFAULT_MAX_RUN_BYTES, HANDED_OVER, Harness, Limits,
    OUTCOME_UNKNOWN, Progress, RunConfig, RunResult, StoppedBatch, TOOL_CANCEL_GRACE,
};
pub use context::{ContextError, ContextIndex, Selection, bound_tool_result, select_context};
pub use events::{Event, EventKind, Observer, ObserverError, Outcome, Totals};
pub use message::{Message, ToolCall};
pub use model::{ContextView, DeltaSink, Model, ModelError, ModelRequest, ModelResponse, NoDeltas};
pub use pause::{
    ActionKind, Answer, Answers, Approval, Checkpoint, EditRefused, PendingAction, check_answers,
    check_edited,
};
pub use registry::{RegistryError, SchemaCache, ToolRegistry, compile_schema, is_valid_tool_name};
pub use render::tool_result_for_model;
pub use stop::{Stop, StopReason};
pub use tool::{ClientTool, Tool, ToolDefinition, ToolError, ToolRole};
pub use usage::{MAX_TOKEN_COUNT, Price, Usage, UsageError, UsageTotals};
