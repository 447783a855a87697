//! What the model sees: the first message plus the most recent whole groups.

use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::json;

use agent_runner::harness::context::mask;
use agent_runner::harness::{
    Harness, Message, Model, ModelError, ModelRequest, ModelResponse, Outcome, RunConfig, Stop,
};
use agent_runner::models::ScriptedModel;

use crate::support::*;

/// A scripted model that keeps a copy of every context it was given, and
/// whether it was asked to answer now.
struct Recording {
    inner: ScriptedModel,
    seen: Mutex<Vec<Vec<Message>>>,
    answer_now: Mutex<Vec<bool>>,
}

impl Recording {
    fn new(script: Vec<serde_json::Value>) -> Self {
        Self {
            inner: ScriptedModel::new(script),
            seen: Mutex::new(Vec::new()),
            answer_now: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl Model for Recording {
    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        self.seen.lock().unwrap().push(request.messages.to_vec());
        self.answer_now.lock().unwrap().push(request.answer_now);
        self.inner.generate(request).await
    }
}

fn size(messages: &[Message]) -> usize {
    serde_json::to_string(messages).unwrap().chars().count()
}

#[tokio::test]
async fn the_model_sees_a_trimmed_context_and_the_transcript_keeps_everything() {
    let echo = tool("echo", json!({"type": "object"}), |_, _| async {
        Ok(json!("r".repeat(200)))
    });
    let mut script: Vec<_> = (0..6)
        .map(|i| tool_turn(vec![call(&format!("c{i}"), "echo", json!({}))]))
        .collect();
    script.push(answer("done"));
    let model = Recording::new(script);
    let registry = registry(&[echo]);
    let mut config = RunConfig::new("the task");
    config.context.max_context_chars = 900.try_into().unwrap();
    let result = Harness {
        model: &model,
        tools: &registry,
        observer: None,
    }
    .run(config, &Stop::new())
    .await;
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(
        result.messages.len(),
        1 + 6 * 2 + 1,
        "the transcript keeps everything"
    );
    let transcript: Vec<Message> = result.messages.iter().map(|m| (**m).clone()).collect();
    let seen = model.seen.lock().unwrap();
    assert_eq!(seen.len(), 7);
    for (step, context) in seen.iter().enumerate() {
        assert!(size(context) <= 900, "step {step}: {} chars", size(context));
        assert_eq!(context[0], Message::user("the task"));
        // The rest is the end of the transcript as it stood, older results
        // masked, starting on an assistant message so that no result is cut
        // from its call.
        let so_far = &transcript[..1 + step * 2];
        let rest = &context[1..];
        for (shown, message) in rest.iter().zip(&so_far[so_far.len() - rest.len()..]) {
            assert!(shown == message || *shown == mask(message), "step {step}");
        }
        assert!(rest.is_empty() || matches!(rest[0], Message::Assistant { .. }));
    }
    // Masking happened first, then trimming: late steps do not see the
    // early groups.
    let masked = |m: &Message| matches!(m, Message::Tool { content, .. } if content.starts_with("[result omitted"));
    assert!(
        seen[3].iter().any(masked),
        "masked before anything is dropped"
    );
    assert!(seen[6].len() < 1 + 6 * 2);
    assert!(seen[6].len() >= 3);
    // Every step repeats the one before it exactly: from the third model
    // call on, the model is asked to answer now.
    assert_eq!(
        *model.answer_now.lock().unwrap(),
        [false, false, true, true, true, true, true]
    );
}

#[tokio::test]
async fn a_prompt_larger_than_the_context_ends_the_run_with_context_limit() {
    let mut config = RunConfig::new("p".repeat(100));
    config.context.max_context_chars = 50.try_into().unwrap();
    let result = run_with(vec![answer("x")], &[], config, &Stop::new(), None).await;
    assert_eq!(result.status, Outcome::ContextLimit);
    assert_eq!(result.steps, 0);
    assert!(result.error.as_deref().unwrap().contains("too small"));
}

#[tokio::test]
async fn a_latest_group_that_cannot_fit_ends_the_run_with_context_limit() {
    let big = tool("big", json!({"type": "object"}), |_, _| async {
        Ok(json!("b".repeat(1000)))
    });
    let mut config = RunConfig::new("task");
    config.context.max_context_chars = 500.try_into().unwrap();
    let result = run_with(
        vec![
            tool_turn(vec![call("1", "big", json!({}))]),
            answer("never"),
        ],
        &[big],
        config,
        &Stop::new(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::ContextLimit);
    assert_eq!(result.steps, 1);
    assert_eq!(
        result.messages.len(),
        3,
        "the transcript still has the result"
    );
}
