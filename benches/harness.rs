//! The harness's own overhead: scripted runs with a no-op tool, so that what is
//! measured is the loop (validation, budgets, context selection, events), not
//! a model or a tool.
//!
//! `cargo bench --bench harness`. Each run's time divided by its steps is the
//! per-step overhead; criterion's throughput line (elements = steps) shows it.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use agent_runner::harness::{
    Event, Harness, Observer, ObserverError, Outcome, RunConfig, Stop, Tool, ToolDefinition,
    ToolError, ToolRegistry,
};
use agent_runner::models::ScriptedModel;

struct Noop(ToolDefinition);

#[async_trait]
impl Tool for Noop {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::new(self.0.clone())
    }
    async fn execute(&self, _: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        Ok(json!("ok"))
    }
}

/// Hands every event to a channel, as the service's observer does.
struct ChannelObserver(mpsc::UnboundedSender<Event>);

impl Observer for ChannelObserver {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        self.0.send(event.clone()).map_err(|e| e.to_string().into())
    }
}

fn registry() -> ToolRegistry {
    let noop = Noop(ToolDefinition {
        name: "noop".into(),
        description: "Does nothing".into(),
        parameters: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false}),
    });
    ToolRegistry::new([Arc::new(noop) as Arc<dyn Tool>]).expect("valid tool")
}

/// `steps - 1` steps of one tool call each, then an answer.
fn script(steps: usize) -> Vec<Value> {
    let mut script: Vec<Value> = (1..steps)
        .map(|i| {
            json!({"content": "", "tool_calls": [{"id": format!("call-{i}"), "name": "noop", "arguments": {"n": i}}],
                   "usage": {"input_tokens": 10, "output_tokens": 2}})
        })
        .collect();
    script.push(json!({"content": "Done", "usage": {"input_tokens": 10, "output_tokens": 2}}));
    script
}

fn config(steps: usize) -> RunConfig {
    let mut config = RunConfig::new("Benchmark the harness");
    config.limits.max_steps = u32::try_from(steps)
        .expect("small")
        .try_into()
        .expect("nonzero");
    config.limits.max_tool_calls = u32::try_from(steps).expect("small");
    // About a dozen groups fit: long runs must trim at every step.
    config.context.max_context_chars = NonZeroUsize::new(2_000).expect("nonzero");
    config
}

fn bench_runs(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let tools = registry();
    let (sender, mut receiver) = mpsc::unbounded_channel();
    let observer = ChannelObserver(sender);

    let mut group = c.benchmark_group("harness");
    for (name, steps, observed) in [
        ("2_steps_unobserved", 2, false),
        ("2_steps", 2, true),
        ("10_steps", 10, true),
        ("1000_steps", 1000, true),
    ] {
        group.throughput(Throughput::Elements(steps as u64));
        if steps == 1000 {
            group.sample_size(20);
        }
        let template = script(steps);
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter_batched(
                || (ScriptedModel::new(template.clone()), config(steps)),
                |(model, config)| {
                    // Drop the previous run's events, as the service's writer would.
                    while receiver.try_recv().is_ok() {}
                    let tools = &tools;
                    let observer = observed.then_some(&observer as &dyn Observer);
                    async move {
                        let harness = Harness {
                            model: &model,
                            tools,
                            observer,
                        };
                        let result = harness.run(config, &Stop::new()).await;
                        assert_eq!(result.status, Outcome::Completed);
                        black_box(result)
                    }
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, bench_runs);
criterion_main!(benches);
