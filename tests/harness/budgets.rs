//! Budgets: whole batches admitted or refused, and every requested call counted.

use std::sync::atomic::Ordering;

use serde_json::json;

use agent_runner::harness::{Message, Outcome, RunConfig, Stop};

use crate::support::*;

/// The design's xorshift32, so the generated cases are the same ones.
struct XorShift(u32);

impl XorShift {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
}

#[tokio::test]
async fn seeded_batches_respect_tool_budgets() {
    let mut rng = XorShift(0x1234_5678);
    let (mut admitted_cases, mut refused_cases) = (0, 0);
    for case in 0..150 {
        let limit = rng.next() % 9;
        let batch = rng.next() % 13;
        let noop = noop();
        let mut config = RunConfig::new("test");
        config.limits.max_tool_calls = limit;
        let calls = (0..batch)
            .map(|j| call(&format!("call-{j}"), "noop", json!({})))
            .collect();
        let result = run_with(
            vec![tool_turn(calls), answer("done")],
            std::slice::from_ref(&noop),
            config,
            &Stop::new(),
            None,
        )
        .await;
        let admitted = batch <= limit;
        let executed = noop.executions.load(Ordering::SeqCst) as u32;
        assert_eq!(executed, if admitted { batch } else { 0 }, "case {case}");
        assert_eq!(
            result.tool_calls,
            if admitted { batch } else { 0 },
            "case {case}"
        );
        if admitted {
            admitted_cases += 1;
            assert_eq!(result.status, Outcome::Completed, "case {case}");
            if batch > 0 {
                assert_eq!(result.messages.len() as u32, 2 + batch + 1, "case {case}");
            }
        } else {
            refused_cases += 1;
            assert_eq!(result.status, Outcome::ToolLimit, "case {case}");
            assert_eq!(
                result
                    .messages
                    .iter()
                    .map(|m| (**m).clone())
                    .collect::<Vec<_>>(),
                vec![Message::user("test")],
                "case {case}: a refused batch leaves no trace"
            );
        }
    }
    // The seed exercises both outcomes.
    assert!(
        admitted_cases > 10 && refused_cases > 10,
        "{admitted_cases}/{refused_cases}"
    );
}

#[tokio::test]
async fn unknown_and_invalid_calls_use_the_budget() {
    let strict = tool(
        "strict",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        |_, _| async { Ok(json!(1)) },
    );
    let mut config = RunConfig::new("go");
    config.limits.max_tool_calls = 3;
    let result = run_with(
        vec![
            tool_turn(vec![
                call("1", "nope", json!({})),
                call("2", "strict", json!({})),
            ]),
            // Two used, one left: a batch of two is refused whole.
            tool_turn(vec![
                call("3", "strict", json!({"n": 1})),
                call("4", "strict", json!({"n": 2})),
            ]),
            answer("unreachable"),
        ],
        std::slice::from_ref(&strict),
        config,
        &Stop::new(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::ToolLimit);
    assert_eq!(result.tool_calls, 2);
    assert_eq!(result.steps, 2);
    assert_eq!(strict.executions.load(Ordering::SeqCst), 0);
    // The first batch and its results stay; the refused one is absent.
    assert_eq!(result.messages.len(), 4);
    assert!(matches!(*result.messages[3], Message::Tool { .. }));
}

#[tokio::test]
async fn zero_tool_calls_allows_only_answers() {
    let mut config = RunConfig::new("go");
    config.limits.max_tool_calls = 0;
    let result = run_with(
        vec![answer("direct")],
        &[noop()],
        config.clone(),
        &Stop::new(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::Completed);
    let result = run_with(
        vec![tool_turn(vec![call("1", "noop", json!({}))])],
        &[noop()],
        config,
        &Stop::new(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::ToolLimit);
}
