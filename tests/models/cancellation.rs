//! Cancellation and deadlines reach the request in flight.

use std::sync::Arc;
use std::time::Duration;

use agent_runner::harness::{Harness, Limits, Message, Model, Outcome, RunConfig, Stop};
use agent_runner::models::{AnthropicConfig, AnthropicModel, OpenAiConfig, OpenAiModel};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::support::*;

fn adapters(server: &MockServer) -> Vec<(&'static str, Arc<dyn Model>)> {
    let mut openai = OpenAiConfig::new("gpt-4o-mini");
    openai.http = settings(format!("{}/v1", server.base), None);
    let mut anthropic = AnthropicConfig::new("claude-sonnet-4-5");
    anthropic.http = settings(server.base.clone(), Some(KEY));
    vec![
        ("openai", Arc::new(OpenAiModel::new(openai).unwrap())),
        (
            "anthropic",
            Arc::new(AnthropicModel::new(anthropic).unwrap()),
        ),
    ]
}

async fn wait_for(mut condition: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    condition()
}

/// Waits until the server has more than `before` requests (the one in
/// flight, which it holds), then cancels; returns when it cancelled.
async fn cancel_once_received(
    server: &MockServer,
    before: usize,
    cancel: impl FnOnce(),
) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.request_count() <= before {
        assert!(
            Instant::now() < deadline,
            "the request never reached the server"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cancel();
    Instant::now()
}

#[tokio::test]
async fn cancelling_aborts_a_hanging_request_within_500_ms() {
    let server = MockServer::start(vec![]).await;
    server.otherwise(Reply::Hang);
    for (name, model) in adapters(&server) {
        let before = server.abandoned();
        let asked = server.request_count();
        let cancel = CancellationToken::new();
        let deltas = Deltas::default();
        let prompt = [Message::user("Hi")];
        let (error, cancelled) = tokio::join!(
            generate(&*model, &prompt, &[], &cancel, None, &deltas),
            cancel_once_received(&server, asked, || cancel.cancel()),
        );
        let error = error.unwrap_err();
        let cancelled_after = cancelled.elapsed();
        assert!(
            cancelled_after < Duration::from_millis(500),
            "{name}: {cancelled_after:?}"
        );
        assert_eq!(
            error.to_string(),
            format!("{name} provider: request cancelled")
        );
        // The connection was closed, so the server gave up on the request.
        assert!(
            wait_for(|| server.abandoned() > before).await,
            "{name}: the request was not aborted"
        );
    }
}

#[tokio::test]
async fn a_cancelled_run_against_a_hanging_server_ends_aborted_promptly() {
    let server = MockServer::start(vec![]).await;
    server.otherwise(Reply::Hang);
    for (name, model) in adapters(&server) {
        let tools = weather_tools();
        let cancel = Stop::new();
        let asked = server.request_count();
        let harness = Harness {
            model: &*model,
            tools: &tools,
            observer: None,
        };
        let (result, cancelled) = tokio::join!(
            harness.run(RunConfig::new("Hi"), &cancel),
            cancel_once_received(&server, asked, || {
                cancel.cancel();
            }),
        );
        assert_eq!(result.status, Outcome::Aborted, "{name}");
        // The request hangs for ever: any prompt end is the cancel's.
        assert!(
            cancelled.elapsed() < Duration::from_secs(5),
            "{name}: {:?}",
            cancelled.elapsed()
        );
    }
}

#[tokio::test]
async fn the_run_deadline_ends_a_hanging_request_as_a_timeout() {
    let server = MockServer::start(vec![]).await;
    server.otherwise(Reply::Hang);
    for (name, model) in adapters(&server) {
        let tools = weather_tools();
        let harness = Harness {
            model: &*model,
            tools: &tools,
            observer: None,
        };
        let mut config = RunConfig::new("Hi");
        config.limits = Limits {
            timeout: Some(Duration::from_millis(300)),
            ..Limits::default()
        };
        let began = Instant::now();
        let result = harness.run(config, &Stop::new()).await;
        assert_eq!(result.status, Outcome::Timeout, "{name}");
        // The request hangs for ever: any prompt end is the deadline's.
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{name}: {:?}",
            began.elapsed()
        );
    }
}

#[tokio::test]
async fn an_attempt_that_outlives_its_timeout_is_retried_then_reported() {
    let server = MockServer::start(vec![]).await;
    server.otherwise(Reply::Hang);
    let mut config = OpenAiConfig::new("gpt-4o-mini");
    config.http = settings(format!("{}/v1", server.base), None);
    config.http.timeout = Duration::from_millis(200);
    config.http.retry.max_attempts = 2;
    let model = OpenAiModel::new(config).unwrap();
    let began = Instant::now();
    let error = generate_simple(&model, &[Message::user("Hi")])
        .await
        .unwrap_err();
    assert!(began.elapsed() < Duration::from_millis(1000));
    assert_eq!(
        error.to_string(),
        "openai provider: no complete answer within 200 ms (after 2 attempts)"
    );
    assert_eq!(server.request_count(), 2);
}
