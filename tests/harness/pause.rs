//! Runs that pause for a decision and resume from their checkpoint: approvals
//! and client tools.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use agent_runner::harness::{
    ActionKind, Answer, Approval, CANNOT_PAUSE, Checkpoint, ClientTool, EventKind, Harness,
    Message, Outcome, Progress, RunConfig, RunResult, Stop, Tool, ToolDefinition, ToolRegistry,
};
use agent_runner::models::ScriptedModel;

use crate::support::*;

fn order_tool() -> Arc<dyn Tool> {
    Arc::new(ClientTool::new(ToolDefinition {
        name: "lookup_order".into(),
        description: "Find an order".into(),
        parameters: json!({
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
            "additionalProperties": false
        }),
    }))
}

/// Drives a run with `tools` (the harness's own and the client's) to its
/// first pause or end.
struct Driver {
    model: ScriptedModel,
    registry: ToolRegistry,
    recorder: Recorder,
    config: RunConfig,
}

impl Driver {
    fn new(script: Vec<Value>, tools: Vec<Arc<dyn Tool>>, approval: Approval) -> Self {
        let mut config = RunConfig::new("go");
        config.approval = approval;
        Self {
            model: ScriptedModel::new(script),
            registry: ToolRegistry::new(tools).unwrap(),
            recorder: Recorder::default(),
            config,
        }
    }

    fn harness(&self) -> Harness<'_> {
        Harness {
            model: &self.model,
            tools: &self.registry,
            observer: Some(&self.recorder),
        }
    }

    async fn start(&self) -> Progress {
        self.harness()
            .start(self.config.clone(), &Stop::new())
            .await
    }

    async fn resume(&self, checkpoint: Checkpoint, answers: &[(&str, Answer)]) -> Progress {
        let answers: HashMap<String, Answer> = answers
            .iter()
            .map(|(id, answer)| ((*id).to_owned(), answer.clone()))
            .collect();
        self.harness()
            .resume(self.config.clone(), checkpoint, answers, &Stop::new())
            .await
    }
}

fn paused(progress: Progress) -> Checkpoint {
    match progress {
        Progress::Paused(checkpoint) => checkpoint,
        Progress::Ended(result) => panic!("expected a pause, the run ended: {result:?}"),
        Progress::HandedOver(checkpoint) => panic!("expected a pause, handed over: {checkpoint:?}"),
    }
}

fn ended(progress: Progress) -> RunResult {
    match progress {
        Progress::Ended(result) => result,
        Progress::Paused(checkpoint) => panic!("expected an end, the run paused: {checkpoint:?}"),
        Progress::HandedOver(checkpoint) => panic!("expected an end, handed over: {checkpoint:?}"),
    }
}

fn tool_results(result: &RunResult) -> Vec<(String, bool)> {
    result
        .messages
        .iter()
        .filter_map(|m| match &**m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_call_that_needs_approval_runs_nothing_of_its_batch_until_approved() {
    let free = noop();
    let guarded = tool("guarded", json!({"type": "object"}), |_, _| async {
        Ok(json!("done"))
    });
    let tools: Vec<Arc<dyn Tool>> = vec![free.clone() as Arc<dyn Tool>, guarded.clone()];
    let driver = Driver::new(
        vec![
            tool_turn(vec![
                call("1", "noop", json!({})),
                call("2", "guarded", json!({})),
            ]),
            answer("finished"),
        ],
        tools,
        Approval::from_names(&["guarded"]),
    );
    let checkpoint = paused(driver.start().await);
    assert_eq!(free.executions.load(Ordering::SeqCst), 0, "nothing ran");
    assert_eq!(guarded.executions.load(Ordering::SeqCst), 0);
    assert_eq!(checkpoint.tool_calls, 2, "the budget counted the batch");
    assert_eq!(checkpoint.steps, 1);
    assert_eq!(checkpoint.pending.len(), 1);
    assert_eq!(checkpoint.pending[0].call_id, "2");
    assert_eq!(checkpoint.pending[0].kind, ActionKind::Approval);
    let types = driver.recorder.types();
    assert_eq!(types.last(), Some(&"actions_required"));
    assert_eq!(driver.recorder.run_ends(), 0);
    assert_eq!(checkpoint.last_sequence, types.len() as u64);

    let result = ended(driver.resume(checkpoint, &[("2", Answer::Approve)]).await);
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(free.executions.load(Ordering::SeqCst), 1);
    assert_eq!(guarded.executions.load(Ordering::SeqCst), 1);
    assert_eq!(
        tool_results(&result),
        [("\"ok\"".to_owned(), false), ("\"done\"".to_owned(), false)]
    );
    assert_eq!((result.steps, result.tool_calls), (2, 2));
    // One sequence across the pause, one run_start, one run_end.
    let events = driver.recorder.events();
    let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=events.len() as u64).collect::<Vec<_>>());
    let types = driver.recorder.types();
    assert_eq!(types.iter().filter(|t| **t == "run_start").count(), 1);
    assert_eq!(driver.recorder.run_ends(), 1);
}

#[tokio::test]
async fn a_denied_call_gets_its_reason_and_never_runs() {
    for (reply, expected) in [
        (
            Answer::Deny {
                reason: Some("not on Fridays".into()),
            },
            "Denied: not on Fridays",
        ),
        (Answer::Deny { reason: None }, "Denied by the client"),
    ] {
        let guarded = tool("guarded", json!({"type": "object"}), |_, _| async {
            Ok(json!("done"))
        });
        let driver = Driver::new(
            vec![
                tool_turn(vec![call("1", "guarded", json!({}))]),
                answer("ok"),
            ],
            vec![guarded.clone() as Arc<dyn Tool>],
            Approval::from_names(&["*"]),
        );
        let checkpoint = paused(driver.start().await);
        let result = ended(driver.resume(checkpoint, &[("1", reply)]).await);
        assert_eq!(guarded.executions.load(Ordering::SeqCst), 0);
        assert_eq!(tool_results(&result), [(expected.to_owned(), true)]);
    }
}

#[tokio::test]
async fn a_client_tool_pauses_and_its_output_or_error_is_its_result() {
    let driver = Driver::new(
        vec![
            tool_turn(vec![
                call("1", "lookup_order", json!({"order_id": "A1"})),
                call("2", "lookup_order", json!({"order_id": "B2"})),
            ]),
            answer("shipped"),
        ],
        vec![order_tool()],
        Approval::None,
    );
    let checkpoint = paused(driver.start().await);
    assert_eq!(checkpoint.pending.len(), 2);
    assert!(
        checkpoint
            .pending
            .iter()
            .all(|p| p.kind == ActionKind::ClientTool)
    );
    assert_eq!(checkpoint.pending[0].arguments, json!({"order_id": "A1"}));
    let result = ended(
        driver
            .resume(
                checkpoint,
                &[
                    ("1", Answer::Output(json!({"status": "shipped"}))),
                    ("2", Answer::Error("order service down".into())),
                ],
            )
            .await,
    );
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(
        tool_results(&result),
        [
            ("{\"status\":\"shipped\"}".to_owned(), false),
            ("order service down".to_owned(), true)
        ]
    );
}

#[tokio::test]
async fn invalid_arguments_to_a_client_tool_are_answered_without_a_pause() {
    let driver = Driver::new(
        vec![
            tool_turn(vec![call("1", "lookup_order", json!({"order": 5}))]),
            answer("sorry"),
        ],
        vec![order_tool()],
        Approval::None,
    );
    let result = ended(driver.start().await);
    assert_eq!(result.status, Outcome::Completed);
    let results = tool_results(&result);
    assert!(
        results[0].0.starts_with("Invalid arguments: "),
        "{results:?}"
    );
    assert!(results[0].1);
    assert!(!driver.recorder.types().contains(&"actions_required"));
}

#[tokio::test]
async fn the_deadline_counts_running_time_only() {
    let mut driver = Driver::new(
        vec![
            tool_turn(vec![call("1", "lookup_order", json!({"order_id": "A1"}))]),
            answer("in time"),
        ],
        vec![order_tool()],
        Approval::None,
    );
    driver.config.limits.timeout = Some(Duration::from_millis(300));
    let checkpoint = paused(driver.start().await);
    assert!(checkpoint.elapsed < Duration::from_millis(300));
    // A pause longer than the whole budget spends none of it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let result = ended(
        driver
            .resume(checkpoint.clone(), &[("1", Answer::Output(json!("ok")))])
            .await,
    );
    assert_eq!(result.status, Outcome::Completed);

    // A budget already spent before the pause ends the run at once.
    let mut spent = checkpoint;
    spent.elapsed = Duration::from_millis(300);
    let result = ended(
        driver
            .resume(spent, &[("1", Answer::Output(json!("ok")))])
            .await,
    );
    assert_eq!(result.status, Outcome::Timeout);
}

#[tokio::test]
async fn a_run_that_cannot_pause_ends_failed_with_its_run_end() {
    let driver = Driver::new(
        vec![tool_turn(vec![call(
            "1",
            "lookup_order",
            json!({"order_id": "A1"}),
        )])],
        vec![order_tool()],
        Approval::None,
    );
    let result = driver
        .harness()
        .run(driver.config.clone(), &Stop::new())
        .await;
    assert_eq!(result.status, Outcome::Failed);
    assert_eq!(result.error.as_deref(), Some(CANNOT_PAUSE));
    assert_eq!(driver.recorder.run_ends(), 1);
    assert!(matches!(
        driver.recorder.events().last().unwrap().kind,
        EventKind::RunEnd { .. }
    ));
}

/// A resume never runs a pending call without a fitting answer: a missing
/// approval is a denial, and an approval given to a client's tool is no
/// result.
#[tokio::test]
async fn a_call_without_a_fitting_answer_never_runs() {
    let guarded = tool("guarded", json!({"type": "object"}), |_, _| async {
        Ok(json!("done"))
    });
    let driver = Driver::new(
        vec![
            tool_turn(vec![
                call("1", "guarded", json!({})),
                call("2", "lookup_order", json!({"order_id": "A1"})),
            ]),
            answer("ok"),
        ],
        vec![guarded.clone() as Arc<dyn Tool>, order_tool()],
        Approval::from_names(&["guarded"]),
    );
    let checkpoint = paused(driver.start().await);
    assert_eq!(checkpoint.pending.len(), 2);
    let result = ended(driver.resume(checkpoint, &[("2", Answer::Approve)]).await);
    assert_eq!(guarded.executions.load(Ordering::SeqCst), 0);
    assert_eq!(
        tool_results(&result),
        [
            ("Denied: no approval was given".to_owned(), true),
            ("No result came from the client".to_owned(), true)
        ]
    );
}
