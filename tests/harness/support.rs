//! Shared fixtures: tools built from closures, a recording observer, and a
//! one-call way to run the harness with a script.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_runner::harness::{
    Event, EventKind, Harness, Observer, ObserverError, RunConfig, RunResult, Stop, Tool,
    ToolDefinition, ToolError, ToolRegistry,
};
use agent_runner::models::ScriptedModel;
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

type Body = dyn Fn(Value, CancellationToken) -> Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>
    + Send
    + Sync;

/// A tool whose behaviour is a closure; counts its executions.
pub struct FnTool {
    definition: Arc<ToolDefinition>,
    body: Box<Body>,
    pub executions: AtomicUsize,
}

#[async_trait]
impl Tool for FnTool {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    async fn execute(
        &self,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        (self.body)(arguments.clone(), cancel.clone()).await
    }
}

pub fn tool<F, Fut>(name: &str, parameters: Value, body: F) -> Arc<FnTool>
where
    F: Fn(Value, CancellationToken) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    Arc::new(FnTool {
        definition: Arc::new(ToolDefinition {
            name: name.into(),
            description: format!("The {name} tool"),
            parameters,
        }),
        body: Box::new(move |args, cancel| Box::pin(body(args, cancel))),
        executions: AtomicUsize::new(0),
    })
}

/// A tool that returns `"ok"`.
pub fn noop() -> Arc<FnTool> {
    tool("noop", json!({"type": "object"}), |_, _| async {
        Ok(json!("ok"))
    })
}

pub fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "name": name, "arguments": arguments})
}

pub fn tool_turn(calls: Vec<Value>) -> Value {
    json!({"content": "", "tool_calls": calls})
}

pub fn answer(text: &str) -> Value {
    json!({"content": text})
}

pub fn registry(tools: &[Arc<FnTool>]) -> ToolRegistry {
    ToolRegistry::new(tools.iter().map(|t| Arc::clone(t) as Arc<dyn Tool>)).expect("valid tools")
}

/// Keeps every event it is given.
#[derive(Default)]
pub struct Recorder {
    pub events: Mutex<Vec<Event>>,
}

impl Observer for Recorder {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        self.events
            .lock()
            .expect("not poisoned")
            .push(event.clone());
        Ok(())
    }
}

impl Recorder {
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().expect("not poisoned").clone()
    }

    pub fn types(&self) -> Vec<&'static str> {
        self.events().iter().map(|e| e.kind.type_name()).collect()
    }

    pub fn run_ends(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::RunEnd { .. }))
            .count()
    }
}

/// Runs `config` with a scripted model, the given tools and an observer.
pub async fn run_with(
    script: Vec<Value>,
    tools: &[Arc<FnTool>],
    config: RunConfig,
    cancel: &Stop,
    observer: Option<&dyn Observer>,
) -> RunResult {
    let model = ScriptedModel::new(script);
    let registry = registry(tools);
    Harness {
        model: &model,
        tools: &registry,
        observer,
    }
    .run(config, cancel)
    .await
}

/// Runs `prompt` with default budgets and no observer.
pub async fn run(script: Vec<Value>, tools: &[Arc<FnTool>], prompt: &str) -> RunResult {
    run_with(script, tools, RunConfig::new(prompt), &Stop::new(), None).await
}
