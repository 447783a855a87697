//! Cancellation and deadlines reach the model and the tools.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use agent_runner::harness::{
    EventKind, Harness, Message, Outcome, RunConfig, Stop, StopReason, ToolRegistry,
};
use agent_runner::models::ScriptedModel;

use crate::support::*;

#[tokio::test]
async fn a_run_cancelled_before_it_starts_never_calls_the_model() {
    let cancel = Stop::new();
    cancel.cancel();
    let model = ScriptedModel::new(vec![answer("never")]);
    let registry = ToolRegistry::new([]).unwrap();
    let result = Harness {
        model: &model,
        tools: &registry,
        observer: None,
    }
    .run(RunConfig::new("go"), &cancel)
    .await;
    assert_eq!(result.status, Outcome::Aborted);
    assert_eq!(result.steps, 0);
    assert_eq!(model.remaining(), 1, "the model was not called");
    assert_eq!(result.messages.len(), 1);
}

#[tokio::test]
async fn cancel_during_a_model_call_aborts_promptly() {
    let cancel = Stop::new();
    let noop = noop();
    let model = ScriptedModel::new(vec![
        json!({"delay_ms": 10_000, "content": "", "tool_calls": [call("1", "noop", json!({}))]}),
    ]);
    let registry = registry(std::slice::from_ref(&noop));
    let harness = Harness {
        model: &model,
        tools: &registry,
        observer: None,
    };
    let (result, cancelled) = tokio::join!(harness.run(RunConfig::new("go"), &cancel), async {
        // The call is under way once it has taken its answer from the
        // script (it then waits out its delay).
        let deadline = Instant::now() + Duration::from_secs(10);
        while model.remaining() > 0 {
            assert!(Instant::now() < deadline, "the model was never called");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
        Instant::now()
    });
    assert_eq!(result.status, Outcome::Aborted);
    assert!(cancelled.elapsed() < Duration::from_secs(5));
    assert_eq!(noop.executions.load(Ordering::SeqCst), 0);
    assert_eq!(result.steps, 0);
}

#[tokio::test]
async fn cancel_during_a_tool_reaches_the_tool() {
    let cancel = Stop::new();
    let trigger = cancel.clone();
    let waiting = tool("wait", json!({"type": "object"}), move |_, token| {
        let trigger = trigger.clone();
        async move {
            trigger.cancel();
            token.cancelled().await;
            Err(agent_runner::harness::ToolError::new(
                "stopped by cancellation",
            ))
        }
    });
    let after = noop();
    let result = run_with(
        vec![
            tool_turn(vec![
                call("1", "wait", json!({})),
                call("2", "noop", json!({})),
            ]),
            answer("never"),
        ],
        &[waiting, after.clone()],
        RunConfig::new("go"),
        &cancel,
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::Aborted);
    assert_eq!(
        after.executions.load(Ordering::SeqCst),
        0,
        "no call after the cancel"
    );
    assert_eq!(result.tool_calls, 1);
    // What the cancelled tool said is kept: the transcript is honest.
    assert_eq!(
        *result.messages[2],
        Message::tool("1", "stopped by cancellation", true)
    );
}

#[tokio::test]
async fn a_tool_that_ignores_cancellation_is_abandoned() {
    let cancel = Stop::new();
    let trigger = cancel.clone();
    let stubborn = tool("stubborn", json!({"type": "object"}), move |_, _| {
        let trigger = trigger.clone();
        async move {
            trigger.cancel();
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(json!("too late"))
        }
    });
    let started = Instant::now();
    let result = run_with(
        vec![
            tool_turn(vec![call("1", "stubborn", json!({}))]),
            answer("never"),
        ],
        &[stubborn],
        RunConfig::new("go"),
        &cancel,
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::Aborted);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        *result.messages[2],
        Message::tool("1", "Tool call cancelled: the run was stopped", true)
    );
}

#[tokio::test]
async fn the_deadline_is_reached_inside_a_cooperative_model() {
    let mut config = RunConfig::new("go");
    config.limits.timeout = Some(Duration::from_millis(50));
    let started = Instant::now();
    let result = run_with(
        vec![json!({"delay_ms": 10_000, "content": "late"})],
        &[],
        config,
        &Stop::new(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::Timeout);
    assert_eq!(result.answer, None);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn the_deadline_is_reached_inside_a_cooperative_tool() {
    let waiting = tool("wait", json!({"type": "object"}), |_, token| async move {
        token.cancelled().await;
        Err(agent_runner::harness::ToolError::new("deadline reached"))
    });
    let mut config = RunConfig::new("go");
    config.limits.timeout = Some(Duration::from_millis(50));
    let result = run_with(
        vec![
            tool_turn(vec![call("1", "wait", json!({}))]),
            answer("never"),
        ],
        &[waiting],
        config,
        &Stop::new(),
        None,
    )
    .await;
    assert_eq!(result.status, Outcome::Timeout);
    assert_eq!(result.steps, 1);
    assert_eq!(
        *result.messages[2],
        Message::tool("1", "deadline reached", true)
    );
}

#[tokio::test]
async fn a_client_cancel_is_not_reported_as_a_timeout() {
    let cancel = Stop::new();
    cancel.cancel();
    let mut config = RunConfig::new("go");
    config.limits.timeout = Some(Duration::from_millis(1));
    let result = run_with(vec![answer("x")], &[], config, &cancel, None).await;
    assert_eq!(result.status, Outcome::Aborted);
}

/// The reason a run was stopped for is its `run_end`, the first time: the
/// server stopping is `interrupted`, the service failing is `failed`, each
/// with its message, and a later reason does not replace the first.
#[tokio::test]
async fn a_stop_ends_the_run_with_its_reason() {
    for (reason, status) in [
        (
            StopReason::Interrupted("the server stopped".into()),
            Outcome::Interrupted,
        ),
        (
            StopReason::Failed("storage refused".into()),
            Outcome::Failed,
        ),
        // A caller that cannot hand a run over (`Harness::run`) ends it.
        (StopReason::HandOver, Outcome::Interrupted),
        // Another attempt of its parent passed first.
        (
            StopReason::Superseded("superseded: attempt 2 passed its checks first".into()),
            Outcome::Aborted,
        ),
    ] {
        let stop = Stop::new();
        let trigger = stop.clone();
        let expected = match &reason {
            StopReason::Interrupted(why)
            | StopReason::Failed(why)
            | StopReason::Superseded(why) => why.clone(),
            StopReason::HandOver => agent_runner::harness::HANDED_OVER.to_owned(),
            StopReason::Cancelled => unreachable!(),
        };
        let tool = tool("wait", json!({"type": "object"}), move |_, token| {
            let trigger = trigger.clone();
            let reason = reason.clone();
            async move {
                trigger.stop(reason);
                trigger.cancel();
                token.cancelled().await;
                Ok(json!("stopped"))
            }
        });
        let recorder = Recorder::default();
        let result = run_with(
            vec![
                tool_turn(vec![call("1", "wait", json!({}))]),
                answer("never"),
            ],
            &[tool],
            RunConfig::new("go"),
            &stop,
            Some(&recorder),
        )
        .await;
        assert_eq!(result.status, status);
        assert_eq!(result.error.as_deref(), Some(expected.as_str()));
        let end = recorder.events().pop().unwrap();
        assert!(
            matches!(&end.kind, EventKind::RunEnd { status: s, error: Some(e), .. } if *s == status && *e == expected),
            "{end:?}"
        );
    }
}
