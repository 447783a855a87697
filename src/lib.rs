//! agent-runner: an HTTP service that runs AI-agent loops on behalf of clients.
//!
//! - [`harness`]: the agent loop and its contracts (messages, models, tools,
//!   budgets, context, events). No HTTP and no SQL.
//! - [`models`]: models the harness can drive: scripted, OpenAI-compatible,
//!   Anthropic; and the configured profiles.
//! - [`tools`]: the built-in tools: a confined workspace and preset commands.
//! - [`mcp`]: tools from MCP servers, connected for each run that uses them.
//! - [`run`]: the service's vocabulary for a run (request and run object).
//! - [`agent`]: the service's vocabulary for agents (stored, versioned
//!   definitions that runs name).
//! - [`runner`]: accepts runs and executes each as a task of its own: stop
//!   signals, workspaces, pauses, webhooks, retention.
//! - [`scheduler`]: which run starts next, and the slots runs execute in
//!   (in process for SQLite; leased, across replicas, for PostgreSQL).
//! - [`store`]: SQLite or PostgreSQL through sqlx: the one place that knows
//!   the schema; replicas on PostgreSQL.
//! - [`api`]: the axum routers, errors and the event stream.
//! - [`config`]: the TOML configuration and its environment overrides.
//! - [`metrics`]: counters for `/metrics`.
//! - [`app`]: builds and runs the whole service (what `main` and tests call).
//! - [`cli`]: the command-line client (`agent-runner run`, `runs ...`).
//! - [`sync`]: locks that log a poisoning instead of hiding it.

pub mod agent;
pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod harness;
pub mod mcp;
pub mod metrics;
pub mod models;
pub mod repo;
pub mod run;
pub mod runner;
pub mod schedule;
pub mod scheduler;
pub mod store;
pub mod sync;
pub mod telemetry;
pub mod tools;
