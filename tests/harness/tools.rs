//! The basic loop and the tool boundary: what is executed, what is refused.

use serde_json::json;

use agent_runner::harness::{Message, Outcome, ToolError};

use crate::support::*;

#[tokio::test]
async fn executes_a_tool_and_returns_the_final_answer() {
    let hello = tool("hello", json!({"type": "object"}), |_, _| async {
        Ok(json!("Hello"))
    });
    let result = run(
        vec![
            tool_turn(vec![call("1", "hello", json!({}))]),
            answer("Done"),
        ],
        std::slice::from_ref(&hello),
        "Say hello",
    )
    .await;
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(result.answer.as_deref(), Some("Done"));
    assert_eq!(result.steps, 2);
    assert_eq!(result.tool_calls, 1);
    assert_eq!(*result.messages[2], Message::tool("1", "\"Hello\"", false));
    assert_eq!(
        result.messages.iter().map(|m| (**m).clone()).collect::<Vec<_>>(),
        vec![
            Message::user("Say hello"),
            serde_json::from_value(json!({"role": "assistant", "content": "", "tool_calls": [{"id": "1", "name": "hello", "arguments": {}}]})).unwrap(),
            Message::tool("1", "\"Hello\"", false),
            Message::assistant("Done", vec![]),
        ]
    );
}

#[tokio::test]
async fn an_unknown_tool_is_answered_and_the_loop_goes_on() {
    let result = run(
        vec![
            tool_turn(vec![call("7", "missing_tool", json!({}))]),
            answer("ok"),
        ],
        &[noop()],
        "go",
    )
    .await;
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(result.tool_calls, 1);
    assert_eq!(
        *result.messages[2],
        Message::tool("7", "Unknown tool: missing_tool", true)
    );
}

#[tokio::test]
async fn invalid_arguments_never_execute_the_tool() {
    let echo = tool(
        "echo",
        json!({
            "type": "object",
            "properties": {"text": {"type": "string"}, "flags": {"type": "array", "items": {"type": "string"}}},
            "required": ["text"],
            "additionalProperties": false
        }),
        |args, _| async move { Ok(args) },
    );
    let result = run(
        vec![
            tool_turn(vec![
                call("1", "echo", json!({"flags": [1], "extra": true})),
                call("2", "echo", json!("not an object")),
                call("3", "echo", json!({"text": "hi"})),
            ]),
            answer("done"),
        ],
        std::slice::from_ref(&echo),
        "go",
    )
    .await;
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(echo.executions.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(result.tool_calls, 3);
    assert_eq!(
        *result.messages[2],
        Message::tool(
            "1",
            "Invalid arguments: $.text: required; $.flags[0]: expected string; $.extra: unexpected property",
            true
        )
    );
    assert_eq!(
        *result.messages[3],
        Message::tool("2", "Invalid arguments: $: expected object", true)
    );
    assert_eq!(
        *result.messages[4],
        Message::tool("3", r#"{"text":"hi"}"#, false)
    );
}

#[tokio::test]
async fn tool_errors_are_recoverable_sixty_times_over() {
    let mut executed = 0;
    for i in 0..60 {
        let failing = tool("noop", json!({"type": "object"}), move |_, _| async move {
            Err(ToolError::new(format!("failure {i}")))
        });
        let result = run(
            vec![
                tool_turn(vec![call("1", "noop", json!({}))]),
                answer("recovered"),
            ],
            std::slice::from_ref(&failing),
            "test",
        )
        .await;
        executed += failing.executions.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(result.status, Outcome::Completed, "run {i}");
        assert_eq!(result.answer.as_deref(), Some("recovered"));
        assert!(
            result
                .messages
                .iter()
                .any(|m| **m == Message::tool("1", format!("failure {i}"), true)),
            "run {i}"
        );
    }
    assert_eq!(executed, 60);
}

#[tokio::test]
async fn a_tool_panic_is_recoverable_too() {
    let panicking = tool("noop", json!({"type": "object"}), |_, _| async {
        if true {
            panic!("tool exploded");
        }
        Ok(json!(null))
    });
    let result = run(
        vec![
            tool_turn(vec![call("1", "noop", json!({}))]),
            answer("recovered"),
        ],
        &[panicking],
        "test",
    )
    .await;
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(
        *result.messages[2],
        Message::tool("1", "Tool panicked: tool exploded", true)
    );
}

#[tokio::test]
async fn the_step_limit_stops_a_model_that_never_answers() {
    let script = (0..5)
        .map(|i| tool_turn(vec![call(&format!("c{i}"), "noop", json!({}))]))
        .collect();
    let mut config = agent_runner::harness::RunConfig::new("loop");
    config.limits.max_steps = 3.try_into().unwrap();
    let noop = noop();
    let result = run_with(
        script,
        std::slice::from_ref(&noop),
        config,
        &Default::default(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::StepLimit);
    assert_eq!(result.steps, 3);
    assert_eq!(result.tool_calls, 3);
    // The last step's tool ran: the model just had no turn left to answer.
    assert_eq!(noop.executions.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(result.messages.len(), 7);
    assert_eq!(result.answer, None);
}

#[tokio::test]
async fn tool_results_are_bounded_before_they_enter_the_transcript() {
    let big = tool("big", json!({"type": "object"}), |_, _| async {
        Ok(json!("x".repeat(500)))
    });
    let failing = tool("bad", json!({"type": "object"}), |_, _| async {
        Err(ToolError::new("e".repeat(500)))
    });
    let mut config = agent_runner::harness::RunConfig::new("go");
    config.context.max_tool_result_chars = 100.try_into().unwrap();
    let result = run_with(
        vec![
            tool_turn(vec![
                call("1", "big", json!({})),
                call("2", "bad", json!({})),
            ]),
            answer("done"),
        ],
        &[big, failing],
        config,
        &Default::default(),
        None,
    )
    .await;
    for message in &result.messages[2..4] {
        let Message::Tool { content, .. } = &**message else {
            panic!("expected a tool result, got {message:?}");
        };
        assert_eq!(content.chars().count(), 100);
        assert!(content.contains("or more characters omitted"));
    }
}

#[tokio::test]
async fn a_result_crossing_the_run_ceiling_is_cut_and_the_rest_of_its_batch_does_not_run() {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&runs);
    let big = tool("big", json!({"type": "object"}), move |_, _| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok(json!("x".repeat(30_000))) }
    });
    let mut config = agent_runner::harness::RunConfig::new("go");
    config.context.max_tool_result_chars = 100_000.try_into().unwrap();
    config.context.max_run_bytes = 70_000.try_into().unwrap();
    let calls = (0..5)
        .map(|n| call(&n.to_string(), "big", json!({})))
        .collect();
    let result = run_with(
        vec![tool_turn(calls), answer("never asked")],
        &[big],
        config,
        &Default::default(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::ContextLimit);
    assert!(result.error.as_deref().unwrap().contains("max_run_bytes"));
    // Two whole, the third cut to what fits, the last two never run.
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 3);
    let contents: Vec<&str> = result.messages[2..]
        .iter()
        .map(|message| match &**message {
            Message::Tool { content, .. } => content.as_str(),
            other => panic!("expected a tool result, got {other:?}"),
        })
        .collect();
    assert_eq!(contents.len(), 5);
    assert!(
        contents[2].ends_with("the run ends here]"),
        "{}",
        contents[2]
    );
    assert!(contents[2].len() > 1_000, "as much as fits is kept");
    assert!(contents[3].starts_with("Not run:") && contents[4].starts_with("Not run:"));
    let bytes: usize = result.messages.iter().map(|m| m.to_json().len()).sum();
    assert!(bytes <= 70_000 + 2 * 200, "{bytes}");
}

#[tokio::test]
async fn a_response_that_would_cross_the_run_ceiling_is_not_recorded() {
    let mut config = agent_runner::harness::RunConfig::new("go");
    config.context.max_run_bytes = 1_000.try_into().unwrap();
    let result = run_with(
        vec![answer(&"z".repeat(2_000))],
        &[],
        config,
        &Default::default(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::ContextLimit);
    assert_eq!(result.messages.len(), 1, "only the prompt");
    assert!(
        result
            .error
            .as_deref()
            .unwrap()
            .contains("was not recorded")
    );
}
