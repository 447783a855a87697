//! The API key reaches the provider's header and nowhere else: not an
//! error, an event, a transcript, a log line or a `Debug` output.

use std::collections::BTreeMap;

use super::fixtures::*;
use super::support::*;
use agent_runner::harness::{Message, Model, Outcome};
use agent_runner::models::{
    AnthropicConfig, AnthropicModel, ModelProfile, ModelProfiles, OpenAiConfig, OpenAiModel,
};

/// Answers that echo the key back, as a careless proxy or error page might.
fn echoing_errors() -> Vec<Reply> {
    vec![
        openai_error(
            400,
            "invalid_request_error",
            "bad",
            &format!("Header Authorization: Bearer {KEY} is malformed"),
        ),
        Reply::Text {
            status: 502,
            body: format!("upstream refused key {KEY}"),
        },
        Reply::Text {
            status: 502,
            body: format!("upstream refused key {KEY}"),
        },
        Reply::Text {
            status: 502,
            body: format!("upstream refused key {KEY}"),
        },
        Reply::Text {
            status: 502,
            body: format!("upstream refused key {KEY}"),
        },
        openai_error(
            401,
            "invalid_request_error",
            "invalid_api_key",
            &format!("Incorrect API key provided: {KEY}."),
        ),
    ]
}

fn assert_no_key(what: &str, text: &str) {
    assert!(!text.contains(KEY), "the key leaked into {what}: {text}");
    assert!(
        !text.contains(&KEY[8..]),
        "part of the key leaked into {what}: {text}"
    );
}

#[tokio::test]
async fn the_key_is_never_in_errors_events_transcripts_or_logs() {
    let logs = LogCapture::install();
    let server = MockServer::start(
        [
            // A run that succeeds after a retry...
            vec![
                openai_rate_limited().with_header("retry-after", "0"),
                Reply::ok(openai_parallel_calls()),
                Reply::ok(openai_answer("Done.", "stop")),
            ],
            // ...then runs and calls that fail while the provider echoes the
            // key.
            echoing_errors(),
        ]
        .concat(),
    )
    .await;
    let mut config = OpenAiConfig::new("gpt-4o-mini");
    config.http = settings(format!("{}/v1", server.base), Some(KEY));
    let model = OpenAiModel::new(config).unwrap();

    let recorder = Recorder::default();
    let completed = run(&model, "Weather?", &recorder).await;
    assert_eq!(completed.status, Outcome::Completed);
    let failed = run(&model, "Again?", &recorder).await;
    assert_eq!(failed.status, Outcome::ModelError);
    let retried = run(&model, "Once more?", &recorder).await;
    assert_eq!(retried.status, Outcome::ModelError);
    let refused = generate_simple(&model, &[Message::user("Hi")])
        .await
        .unwrap_err();

    // The key did go where it belongs.
    assert!(
        server
            .requests()
            .iter()
            .all(|request| request.headers["authorization"] == format!("Bearer {KEY}"))
    );
    let errors = [&failed.error, &retried.error]
        .map(|error| error.clone().unwrap())
        .join("\n");
    assert!(
        errors.contains("HTTP 400 Bad Request") && errors.contains("[redacted]"),
        "{errors}"
    );
    assert!(errors.contains("HTTP 502 Bad Gateway"), "{errors}");
    assert_no_key("errors", &errors);
    assert_no_key("an error", &refused.to_string());
    assert_no_key("events", &recorder.json());
    for result in [&completed, &failed, &retried] {
        assert_no_key("a transcript", &transcript(result).to_string());
    }
    assert_no_key("Debug output", &format!("{model:?}"));
    let logged = logs.text();
    assert!(
        logged.contains("model request failed; retrying"),
        "{logged}"
    );
    assert!(logged.contains("provider=\"openai\""), "{logged}");
    assert_no_key("the logs", &logged);
}

#[tokio::test]
async fn the_anthropic_key_stays_in_its_header() {
    let logs = LogCapture::install();
    let server = MockServer::start(vec![
        anthropic_overloaded(),
        anthropic_error(
            400,
            "invalid_request_error",
            &format!("x-api-key {KEY} is not allowed here"),
        ),
    ])
    .await;
    let mut config = AnthropicConfig::new("claude-sonnet-4-5");
    config.http = settings(server.base.clone(), Some(KEY));
    let model = AnthropicModel::new(config).unwrap();
    let error = generate_simple(&model, &[Message::user("Hi")])
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "anthropic provider: HTTP 400 Bad Request: invalid_request_error: x-api-key [redacted] is not allowed here (after 2 attempts)"
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|request| request.headers["x-api-key"] == KEY)
    );
    assert_no_key("Debug output", &format!("{model:?}"));
    assert_no_key("the logs", &logs.text());
}

#[tokio::test]
async fn profiles_read_the_key_from_the_environment_and_never_show_it() {
    let logs = LogCapture::install();
    let server = MockServer::start(vec![Reply::ok(openai_answer("Hi!", "stop"))]).await;
    let env: BTreeMap<&str, String> = [("PROVIDER_KEY", KEY.to_owned())].into();
    let lookup = |name: &str| env.get(name).cloned();
    let table: BTreeMap<String, ModelProfile> = toml::from_str(&format!(
        r#"
        [mock]
        kind = "openai"
        base_url = "{}/v1"
        model = "gpt-4o-mini"
        api_key_env = "PROVIDER_KEY"
        "#,
        server.base
    ))
    .unwrap();
    assert_no_key("a profile's Debug output", &format!("{table:?}"));
    let profiles = ModelProfiles::new(table, &lookup).unwrap();
    assert_no_key("the registry's Debug output", &format!("{profiles:?}"));
    assert_no_key(
        "the model list",
        &serde_json::to_string(&profiles.list()).unwrap(),
    );
    let model: std::sync::Arc<dyn Model> = profiles.instantiate("mock").unwrap();
    let response = generate_simple(&*model, &[Message::user("Hi")])
        .await
        .unwrap();
    assert_eq!(response.content, "Hi!");
    assert_eq!(
        server.requests()[0].headers["authorization"],
        format!("Bearer {KEY}")
    );
    assert_no_key("the logs", &logs.text());
}
