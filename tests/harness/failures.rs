//! Failure paths: a model that fails or answers malformed responses ends the run
//! with `model_error` and no tool side effect; usage is counted honestly.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use serde_json::{Value, json};

use agent_runner::harness::{
    Harness, Message, Model, ModelError, ModelRequest, ModelResponse, Outcome, RunConfig, Stop,
    ToolCall, UsageTotals,
};

use crate::support::*;

fn malformed_envelopes() -> Vec<(Value, &'static str)> {
    let good = || call("1", "noop", json!({}));
    vec![
        (json!("Done"), "response must be an object"),
        (json!(null), "response must be an object"),
        (json!([good()]), "response must be an object"),
        (json!({"content": 42}), "content must be a string"),
        (json!({"tool_calls": [good()]}), "content must be a string"),
        (
            json!({"content": "", "tool_calls": "noop"}),
            "tool_calls must be an array",
        ),
        (
            json!({"content": "", "tool_calls": [good(), "x"]}),
            "each tool call must be an object",
        ),
        (
            json!({"content": "", "tool_calls": [good(), {"id": "", "name": "noop", "arguments": {}}]}),
            "tool call id must be a non-empty string",
        ),
        (
            json!({"content": "", "tool_calls": [good(), {"id": "2", "name": "", "arguments": {}}]}),
            "tool call name must be a non-empty string",
        ),
        (
            json!({"content": "", "tool_calls": [good(), {"id": "2", "name": "noop"}]}),
            "tool call arguments are missing",
        ),
        (
            json!({"content": "", "tool_calls": [good(), good()]}),
            "duplicate tool call id: 1",
        ),
        (
            json!({"content": "", "tool_calls": [good()], "usage": {"input_tokens": -5}}),
            "usage.input_tokens must be a nonnegative integer",
        ),
    ]
}

#[tokio::test]
async fn every_malformed_envelope_ends_the_run_with_no_side_effect() {
    for (envelope, reason) in malformed_envelopes() {
        let noop = noop();
        let recorder = Recorder::default();
        let result = run_with(
            vec![envelope.clone(), answer("never")],
            std::slice::from_ref(&noop),
            RunConfig::new("go"),
            &Stop::new(),
            Some(&recorder),
        )
        .await;
        assert_eq!(result.status, Outcome::ModelError, "{envelope}");
        let error = result.error.as_deref().unwrap_or_default();
        assert!(
            error.starts_with(&format!("Invalid model response: {reason}")),
            "{envelope}: {error}"
        );
        assert_eq!(noop.executions.load(Ordering::SeqCst), 0, "{envelope}");
        assert_eq!(result.tool_calls, 0);
        assert_eq!(result.steps, 0);
        assert_eq!(result.messages.len(), 1, "{envelope}: nothing recorded");
        assert!(!recorder.types().contains(&"tool_start"));
    }
}

/// A model adapter whose typed response still breaks the contract.
struct Typed(ModelResponse);

#[async_trait]
impl Model for Typed {
    async fn generate(&self, _: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        Ok(self.0.clone())
    }
}

#[tokio::test]
async fn typed_responses_from_adapters_are_validated_too() {
    let noop = noop();
    let registry = registry(std::slice::from_ref(&noop));
    let model = Typed(ModelResponse {
        content: String::new(),
        tool_calls: vec![
            ToolCall::new("same", "noop", json!({})),
            ToolCall::new("same", "noop", json!({})),
        ],
        usage: None,
        finish_reason: None,
    });
    let result = Harness {
        model: &model,
        tools: &registry,
        observer: None,
    }
    .run(RunConfig::new("go"), &Stop::new())
    .await;
    assert_eq!(result.status, Outcome::ModelError);
    assert_eq!(
        result.error.as_deref(),
        Some("Invalid model response: duplicate tool call id: same")
    );
    assert_eq!(noop.executions.load(Ordering::SeqCst), 0);
}

struct Exploding;

#[async_trait]
impl Model for Exploding {
    async fn generate(&self, _: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        panic!("adapter bug")
    }
}

#[tokio::test]
async fn a_model_that_panics_is_a_model_error() {
    let registry = registry(&[]);
    let result = Harness {
        model: &Exploding,
        tools: &registry,
        observer: None,
    }
    .run(RunConfig::new("go"), &Stop::new())
    .await;
    assert_eq!(result.status, Outcome::ModelError);
    assert_eq!(result.error.as_deref(), Some("Model panicked: adapter bug"));
}

#[tokio::test]
async fn an_exhausted_script_is_a_model_error() {
    let result = run(
        vec![tool_turn(vec![call("1", "noop", json!({}))])],
        &[noop()],
        "go",
    )
    .await;
    assert_eq!(result.status, Outcome::ModelError);
    assert_eq!(result.error.as_deref(), Some("Scripted model exhausted"));
    assert_eq!(result.steps, 1);
    assert_eq!(result.messages.len(), 3);
}

#[tokio::test]
async fn usage_is_totalled_and_missing_usage_is_not_counted() {
    let result = run(
        vec![
            json!({"content": "", "tool_calls": [call("1", "noop", json!({}))], "usage": {"input_tokens": 100}}),
            json!({"content": "", "tool_calls": [call("2", "noop", json!({}))]}),
            json!({"content": "Done", "usage": {"input_tokens": 7, "output_tokens": 9}}),
        ],
        &[noop()],
        "go",
    )
    .await;
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(
        result.usage,
        UsageTotals {
            input_tokens: 107,
            output_tokens: 9,
            model_calls_with_usage: 2,
            ..UsageTotals::default()
        }
    );
    let unknown = run(vec![answer("free?")], &[], "go").await;
    assert_eq!(unknown.usage.model_calls_with_usage, 0, "unknown, not free");
}

#[tokio::test]
async fn usage_that_overflows_ends_the_run_before_anything_runs() {
    let max = (1u64 << 53) - 1;
    let noop = noop();
    let result = run(
        vec![
            json!({"content": "", "tool_calls": [call("1", "noop", json!({}))], "usage": {"output_tokens": max}}),
            json!({"content": "", "tool_calls": [call("2", "noop", json!({}))], "usage": {"output_tokens": 1}}),
        ],
        std::slice::from_ref(&noop),
        "go",
    )
    .await;
    assert_eq!(result.status, Outcome::ModelError);
    assert!(
        result
            .error
            .as_deref()
            .unwrap()
            .starts_with("Invalid model usage")
    );
    assert_eq!(
        noop.executions.load(Ordering::SeqCst),
        1,
        "only the first batch ran"
    );
    assert_eq!(result.usage.output_tokens, max);
    assert_eq!(result.messages.len(), 3);
    assert!(matches!(&*result.messages[2], Message::Tool { call_id, .. } if call_id == "1"));
}
