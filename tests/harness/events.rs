//! Events: order, correlation, isolation from observers, and `run_end` on every
//! path.

use std::time::Duration;

use serde_json::json;

use agent_runner::harness::{
    Event, EventKind, Observer, ObserverError, Outcome, RunConfig, Stop, Usage, UsageTotals,
};

use crate::support::*;

fn hello_script() -> Vec<serde_json::Value> {
    vec![
        json!({"content": "", "tool_calls": [call("1", "noop", json!({}))], "usage": {"input_tokens": 10, "output_tokens": 2}}),
        json!({"content": "Done", "usage": {"input_tokens": 15, "output_tokens": 3}}),
    ]
}

#[tokio::test]
async fn events_come_in_order_with_a_gap_free_sequence() {
    let recorder = Recorder::default();
    let config = RunConfig::new("hello");
    let run_id = config.run_id;
    let result = run_with(
        hello_script(),
        &[noop()],
        config,
        &Stop::new(),
        Some(&recorder),
    )
    .await;
    assert_eq!(result.status, Outcome::Completed);
    assert_eq!(
        recorder.types(),
        [
            "run_start",
            "message",
            "model_start",
            "model_end",
            "message",
            "tool_start",
            "tool_end",
            "message",
            "model_start",
            "model_end",
            "message",
            "run_end"
        ]
    );
    let events = recorder.events();
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.run_id, run_id);
        assert_eq!(event.sequence, i as u64 + 1);
    }
    assert!(events.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));
    // Every message event is the transcript message, in transcript order.
    let messages: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Message { message, .. } => Some((**message).clone()),
            _ => None,
        })
        .collect();
    let transcript: Vec<_> = result.messages.iter().map(|m| (**m).clone()).collect();
    assert_eq!(messages, transcript);
    // Correlation and durations.
    match (&events[5].kind, &events[6].kind) {
        (
            EventKind::ToolStart { call_id, name, .. },
            EventKind::ToolEnd {
                call_id: end_id,
                name: end_name,
                duration_ms,
                is_error,
            },
        ) => {
            assert_eq!((call_id.as_str(), name.as_str()), ("1", "noop"));
            assert_eq!((end_id, end_name), (call_id, name));
            assert!(*duration_ms >= 0.0);
            assert!(!is_error);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        events[3].kind,
        EventKind::ModelEnd { usage: Some(Usage { input_tokens: Some(10), output_tokens: Some(2), .. }), duration_ms, finish_reason: None, profile: None } if duration_ms >= 0.0
    ));
    assert_eq!(
        events[11].kind,
        EventKind::RunEnd {
            status: Outcome::Completed,
            steps: 2,
            tool_calls: 1,
            usage: UsageTotals {
                input_tokens: 25,
                output_tokens: 5,
                model_calls_with_usage: 2,
                ..UsageTotals::default()
            },
            answer: Some("Done".into()),
            error: None,
            output: None,
        }
    );
}

struct Failing;

impl Observer for Failing {
    fn on_event(&self, _: &Event) -> Result<(), ObserverError> {
        Err("observer is broken".into())
    }
}

struct Panicking;

impl Observer for Panicking {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        panic!("observer panicked at event {}", event.sequence);
    }
}

#[tokio::test]
async fn an_observer_that_fails_or_panics_cannot_change_the_run() {
    let baseline = run(hello_script(), &[noop()], "hello").await;
    for observer in [&Failing as &dyn Observer, &Panicking] {
        let mut config = RunConfig::new("hello");
        config.run_id = baseline.run_id;
        let noop = noop();
        let result = run_with(
            hello_script(),
            std::slice::from_ref(&noop),
            config,
            &Stop::new(),
            Some(observer),
        )
        .await;
        assert_eq!(result, baseline);
        assert_eq!(noop.executions.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}

/// One script per way a run can end, with the status it must end in.
fn endings() -> Vec<(Outcome, Vec<serde_json::Value>, RunConfig, bool)> {
    let config = |f: fn(&mut RunConfig)| {
        let mut config = RunConfig::new("end");
        f(&mut config);
        config
    };
    vec![
        (Outcome::Completed, vec![answer("a")], config(|_| {}), false),
        (
            Outcome::StepLimit,
            vec![tool_turn(vec![call("1", "noop", json!({}))])],
            config(|c| c.limits.max_steps = 1.try_into().unwrap()),
            false,
        ),
        (
            Outcome::ToolLimit,
            vec![tool_turn(vec![call("1", "noop", json!({}))])],
            config(|c| c.limits.max_tool_calls = 0),
            false,
        ),
        (Outcome::Aborted, vec![answer("a")], config(|_| {}), true),
        (
            Outcome::Timeout,
            vec![json!({"delay_ms": 5000, "content": "late"})],
            config(|c| c.limits.timeout = Some(Duration::from_millis(20))),
            false,
        ),
        (
            Outcome::ModelError,
            vec![json!({"error": "provider down"})],
            config(|_| {}),
            false,
        ),
        (Outcome::ModelError, vec![], config(|_| {}), false),
        (
            Outcome::ContextLimit,
            vec![answer("a")],
            config(|c| c.context.max_context_chars = 5.try_into().unwrap()),
            false,
        ),
    ]
}

#[tokio::test]
async fn run_end_comes_exactly_once_and_last_on_every_path() {
    for (expected, script, config, cancelled) in endings() {
        let recorder = Recorder::default();
        let cancel = Stop::new();
        if cancelled {
            cancel.cancel();
        }
        let result = run_with(script, &[noop()], config, &cancel, Some(&recorder)).await;
        assert_eq!(result.status, expected);
        assert_eq!(recorder.run_ends(), 1, "{expected}");
        let events = recorder.events();
        let last = events.last().unwrap();
        match &last.kind {
            EventKind::RunEnd { status, error, .. } => {
                assert_eq!(*status, expected);
                assert_eq!(error, &result.error);
            }
            other => panic!("{expected}: last event is {other:?}"),
        }
        assert_eq!(events.first().unwrap().kind, EventKind::RunStart);
        assert!(
            events
                .iter()
                .enumerate()
                .all(|(i, e)| e.sequence == i as u64 + 1)
        );
    }
}

#[tokio::test]
async fn a_model_failure_is_reported_as_a_model_error_event() {
    let recorder = Recorder::default();
    let result = run_with(
        vec![json!({"error": "provider down"})],
        &[],
        RunConfig::new("x"),
        &Stop::new(),
        Some(&recorder),
    )
    .await;
    assert_eq!(result.error.as_deref(), Some("provider down"));
    assert_eq!(
        recorder.types(),
        [
            "run_start",
            "message",
            "model_start",
            "model_error",
            "run_end"
        ]
    );
    assert_eq!(
        recorder.events()[3].kind,
        EventKind::ModelError {
            error: "provider down".into()
        }
    );
}
