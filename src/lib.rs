//! agent-runner: runs AI-agent loops on behalf of clients.
//!
//! - [`harness`]: the agent loop and its contracts (messages, models, tools,
//!   budgets, context, events). No HTTP and no SQL.
//! - [`models`]: models the harness can drive: scripted, OpenAI-compatible and
//!   Anthropic adapters, and the profiles that configure them.
//! - [`tools`]: the built-in workspace file tools and preset commands, confined.

pub mod harness;
pub mod models;
pub mod tools;
