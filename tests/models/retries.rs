//! Retries: which failures, how many times, how long apart, and never past
//! the run's deadline.

use std::time::Duration;

use agent_runner::harness::{Message, ModelError};
use agent_runner::models::{OpenAiConfig, OpenAiModel, RetryPolicy};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fixtures::*;
use super::support::*;

fn model_with(base: String, retry: RetryPolicy) -> OpenAiModel {
    let mut config = OpenAiConfig::new("gpt-4o-mini");
    config.http = settings(base, None);
    config.http.retry = retry;
    OpenAiModel::new(config).unwrap()
}

fn model(server: &MockServer) -> OpenAiModel {
    let mut config = OpenAiConfig::new("gpt-4o-mini");
    config.http = settings(format!("{}/v1", server.base), None);
    OpenAiModel::new(config).unwrap()
}

fn quick(max_attempts: u32, base_ms: u64, max_ms: u64) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base_delay: Duration::from_millis(base_ms),
        max_delay: Duration::from_millis(max_ms),
        max_retry_after: Duration::from_secs(5),
    }
}

async fn call_with_deadline(
    model: &OpenAiModel,
    deadline: Option<Instant>,
) -> Result<agent_runner::harness::ModelResponse, ModelError> {
    generate(
        model,
        &[Message::user("Hi")],
        &[],
        &CancellationToken::new(),
        deadline,
        &Deltas::default(),
    )
    .await
}

#[tokio::test]
async fn every_transient_status_is_retried_until_an_answer() {
    for status in [429, 500, 502, 503, 504, 529] {
        let server = MockServer::start(vec![
            openai_error(status, "server_error", "server_error", "try again"),
            openai_server_error(),
            Reply::ok(openai_answer("Recovered", "stop")),
        ])
        .await;
        let response = generate_simple(&model(&server), &[Message::user("Hi")])
            .await
            .unwrap();
        assert_eq!(response.content, "Recovered", "status {status}");
        assert_eq!(server.request_count(), 3, "status {status}");
    }
}

#[tokio::test]
async fn other_statuses_are_not_retried() {
    for status in [400, 401, 403, 404, 408, 422] {
        let server = MockServer::start(vec![openai_error(
            status,
            "invalid_request_error",
            "bad",
            "nope",
        )])
        .await;
        let error = generate_simple(&model(&server), &[Message::user("Hi")])
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(&format!("openai provider: HTTP {status} ")),
            "{error}"
        );
        assert_eq!(server.request_count(), 1, "status {status}");
    }
}

#[tokio::test]
async fn retries_stop_at_the_attempt_limit() {
    let server = MockServer::start(vec![]).await;
    server.otherwise(openai_server_error());
    let model = model_with(format!("{}/v1", server.base), quick(3, 5, 20));
    let error = call_with_deadline(&model, None).await.unwrap_err();
    // Out of retries on a failure that may pass: a profile's fallback may
    // answer instead (SPEC section 25).
    assert_eq!(
        error,
        ModelError::Unavailable(
            "openai provider: HTTP 500 Internal Server Error: server_error: The server had an error while processing your request. Sorry about that! (after 3 attempts)"
                .into()
        )
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn a_single_attempt_policy_never_retries() {
    let server = MockServer::start(vec![]).await;
    server.otherwise(anthropic_overloaded());
    let model = model_with(format!("{}/v1", server.base), quick(1, 5, 20));
    let error = call_with_deadline(&model, None).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "openai provider: HTTP 529 Overloaded: overloaded_error: Overloaded"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let server = MockServer::start(vec![
        openai_rate_limited().with_header("retry-after", "1"),
        Reply::ok(openai_answer("After the wait", "stop")),
    ])
    .await;
    let model = model_with(format!("{}/v1", server.base), quick(3, 5, 20));
    let response = call_with_deadline(&model, None).await.unwrap();
    assert_eq!(response.content, "After the wait");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1].at - requests[0].at;
    assert!(
        gap >= Duration::from_millis(1000) && gap < Duration::from_millis(1500),
        "{gap:?}"
    );
}

#[tokio::test]
async fn openai_retry_after_ms_is_honoured_too() {
    let server = MockServer::start(vec![
        openai_rate_limited()
            .with_header("retry-after-ms", "300")
            .with_header("retry-after", "1"),
        Reply::ok(openai_answer("ok", "stop")),
    ])
    .await;
    let model = model_with(format!("{}/v1", server.base), quick(3, 5, 20));
    call_with_deadline(&model, None).await.unwrap();
    let requests = server.requests();
    let gap = requests[1].at - requests[0].at;
    assert!(
        gap >= Duration::from_millis(300) && gap < Duration::from_millis(800),
        "{gap:?}"
    );
}

#[tokio::test]
async fn backoff_grows_exponentially_within_its_jitter_bounds() {
    let server = MockServer::start(vec![]).await;
    server.otherwise(openai_server_error());
    let model = model_with(format!("{}/v1", server.base), quick(4, 100, 1000));
    call_with_deadline(&model, None).await.unwrap_err();
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    // Equal jitter: the n-th wait lies in [ceiling/2, ceiling], ceiling =
    // 100 ms * 2^(n-1); a little slack above for the exchange itself.
    for (n, ceiling) in [(1, 100), (2, 200), (3, 400)] {
        let gap = requests[n].at - requests[n - 1].at;
        assert!(
            gap >= Duration::from_millis(ceiling / 2)
                && gap <= Duration::from_millis(ceiling + 300),
            "wait {n}: {gap:?}"
        );
    }
}

#[tokio::test]
async fn a_retry_after_that_would_pass_the_deadline_is_not_waited_for() {
    let server = MockServer::start(vec![
        openai_error(503, "server_error", "unavailable", "Service Unavailable")
            .with_header("retry-after", "4"),
    ])
    .await;
    let model = model(&server);
    let began = Instant::now();
    let error = call_with_deadline(&model, Some(began + Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(
        error.to_string(),
        "openai provider: HTTP 503 Service Unavailable: server_error: Service Unavailable; not retried: the run's deadline comes first"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn backoff_never_sleeps_past_the_deadline() {
    let server = MockServer::start(vec![]).await;
    server.otherwise(openai_server_error());
    let model = model_with(format!("{}/v1", server.base), quick(10, 150, 2000));
    let began = Instant::now();
    let deadline = began + Duration::from_millis(700);
    let error = call_with_deadline(&model, Some(deadline))
        .await
        .unwrap_err();
    // Every sleep ended before the deadline; only the exchange in flight
    // there may outlast it, by the time a loaded machine takes to answer.
    let ended = Instant::now();
    assert!(
        ended < deadline + Duration::from_millis(200),
        "returned {:?} after the deadline",
        ended - deadline
    );
    assert!(
        error
            .to_string()
            .contains("not retried: the run's deadline comes first"),
        "{error}"
    );
    let requests = server.requests();
    assert!((2..10).contains(&requests.len()), "{}", requests.len());
    assert!(requests.iter().all(|request| request.at < deadline));
}

#[tokio::test]
async fn a_retry_after_longer_than_allowed_is_reported_at_once() {
    let server = MockServer::start(vec![
        openai_rate_limited().with_header("retry-after", "3600"),
    ])
    .await;
    let began = Instant::now();
    let error = generate_simple(&model(&server), &[Message::user("Hi")])
        .await
        .unwrap_err();
    assert!(began.elapsed() < Duration::from_secs(2));
    assert!(
        error.to_string().starts_with(
            "openai provider: HTTP 429 Too Many Requests: requests: Rate limit reached"
        ) && error
            .to_string()
            .ends_with("; not retried: the provider asked to wait 3600 s"),
        "{error}"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn connect_errors_are_retried_then_reported() {
    // A port that was free a moment ago: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let model = model_with(base, quick(3, 5, 20));
    let error = call_with_deadline(&model, None).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with("openai provider: cannot connect") && text.ends_with("(after 3 attempts)"),
        "{text}"
    );
}
