//! Structured output: a final answer under an output schema.

use std::sync::Arc;

use agent_runner::harness::output::{OUTPUT_NOTE, OutputSchema};
use agent_runner::harness::{Message, Outcome, RunConfig, Stop};
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
async fn the_step_budget_bounds_the_retries_too() {
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
    assert_eq!(result.status, Outcome::StepLimit);
    assert_eq!(result.output, None);
}
