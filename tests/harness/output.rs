//! Structured output: a final answer under an output schema.

use std::sync::Arc;

use agent_runner::harness::output::{OUTPUT_NOTE, OutputSchema};
use agent_runner::harness::{
    Checkpoint, Harness, Message, Outcome, Progress, RunConfig, Stop, StoppedBatch,
};
use agent_runner::models::ScriptedModel;
use serde_json::json;

use crate::support::*;

fn with_schema(retries: u32) -> RunConfig {
    let mut config = RunConfig::new("Sort the ticket");
    let schema = json!({
        "type": "object",
        "properties": {"severity": {"enum": ["low", "high"]}},
        "required": ["severity"]
    });
    config.output = Some(Arc::new(
        OutputSchema::new(Arc::new(schema), retries).unwrap(),
    ));
    config
}

#[tokio::test]
async fn a_valid_answer_ends_the_run_with_its_document() {
    let result = run_with(
        vec![answer("{\"severity\": \"low\"}")],
        &[],
        with_schema(2),
        &Stop::new(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(result.output, Some(json!({"severity": "low"})));
    assert_eq!(result.steps, 1);
}

#[tokio::test]
async fn the_retries_of_a_continued_conversation_are_its_own() {
    // The history holds the notes of an earlier run of the same schema:
    // they are not this run's retries.
    let mut config = with_schema(1);
    config.history = vec![
        Arc::new(Message::user("Sort the ticket")),
        Arc::new(Message::assistant("urgent", Vec::new())),
        Arc::new(Message::user(format!("{OUTPUT_NOTE} Yours is not: ..."))),
        Arc::new(Message::assistant("{\"severity\": \"high\"}", Vec::new())),
    ];
    let result = run_with(
        vec![answer("urgent"), answer("{\"severity\": \"high\"}")],
        &[],
        config,
        &Stop::new(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::Completed, "{:?}", result.error);
    assert_eq!(result.output, Some(json!({"severity": "high"})));
    assert_eq!(result.steps, 2);
}

#[tokio::test]
async fn an_answer_without_a_step_left_for_its_retry_fails_the_run_and_is_kept() {
    let mut config = with_schema(5);
    config.limits.max_steps = std::num::NonZeroU32::new(2).unwrap();
    let result = run_with(
        vec![
            answer("no"),
            answer("still no"),
            answer("{\"severity\": \"low\"}"),
        ],
        &[],
        config,
        &Stop::new(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::Failed);
    assert_eq!(result.answer.as_deref(), Some("still no"));
    let error = result.error.unwrap();
    assert!(
        error.starts_with("output_invalid") && error.contains("no step left"),
        "{error}"
    );
    assert_eq!(result.output, None);
    assert_eq!(result.steps, 2);
    // The transcript ends with the answer: no note waits for a step.
    assert!(matches!(
        &**result.messages.last().unwrap(),
        Message::Assistant { content, .. } if content == "still no"
    ));
}

#[tokio::test]
async fn a_run_recovered_after_a_stop_goes_on_counting_its_retries() {
    // Its process stopped after its second answer, which was stored; its
    // first was sent back already: with one retry allowed, it fails.
    let note = format!("{OUTPUT_NOTE} Yours is not:\n- $.severity: required");
    let messages: Vec<Arc<Message>> = [
        Message::user("Sort the ticket"),
        Message::assistant("no", Vec::new()),
        Message::user(note),
        Message::assistant("still no", Vec::new()),
    ]
    .into_iter()
    .map(Arc::new)
    .collect();
    let checkpoint = Checkpoint {
        messages,
        steps: 2,
        tool_calls: 0,
        usage: Default::default(),
        last_sequence: 9,
        elapsed: std::time::Duration::ZERO,
        pending: Vec::new(),
    };
    let model = ScriptedModel::new(vec![answer("{\"severity\": \"low\"}")]);
    let tools = registry(&[]);
    let harness = Harness {
        model: &model,
        tools: &tools,
        observer: None,
    };
    let progress = harness
        .recover(
            with_schema(1),
            checkpoint,
            StoppedBatch::default(),
            &Stop::new(),
        )
        .await;
    let Progress::Ended(result) = progress else {
        panic!("{progress:?}");
    };
    assert_eq!(result.status, Outcome::Failed);
    assert_eq!(result.answer.as_deref(), Some("still no"));
    assert!(result.error.unwrap().contains("after 1 retry"));
}
