//! The Anthropic adapter: blocks both ways, grouped tool results, ids,
//! headers, usage, stop reasons and errors.

use agent_runner::harness::{Message, ModelError, Outcome, ToolCall, Usage, UsageTotals};
use agent_runner::models::{AnthropicConfig, AnthropicModel};
use serde_json::json;

use super::fixtures::*;
use super::support::*;

fn model(server: &MockServer) -> AnthropicModel {
    let mut config = AnthropicConfig::new("claude-sonnet-4-5");
    config.http = settings(server.base.clone(), Some(KEY));
    AnthropicModel::new(config).unwrap()
}

#[tokio::test]
async fn blocks_translate_both_ways_and_tool_results_share_one_user_turn() {
    let server = MockServer::start(vec![Reply::ok(anthropic_message(
        Some("I'll check the current weather in San Francisco for you."),
        vec![anthropic_tool_use(
            "toolu_01A09q90qw90lq917835lq9",
            "San Francisco, CA",
        )],
        "tool_use",
    ))])
    .await;
    let mut config = AnthropicConfig::new("claude-sonnet-4-5");
    config.http = settings(server.base.clone(), Some(KEY));
    config.max_tokens = 1024;
    config.temperature = Some(0.5);
    let model = AnthropicModel::new(config).unwrap();
    let transcript = [
        Message::user("What's the weather in Paris and Lyon?"),
        Message::assistant(
            "Checking both.",
            vec![
                ToolCall::new("toolu_paris", "get_weather", json!({"location": "Paris"})),
                ToolCall::new("toolu_lyon", "get_weather", json!({"location": ""})),
            ],
        ),
        Message::tool("toolu_paris", "\"Rain\"", false),
        Message::tool("toolu_lyon", "location must not be empty", true),
    ];

    let response = generate_simple(&model, &transcript).await.unwrap();

    assert_eq!(
        response.content,
        "I'll check the current weather in San Francisco for you."
    );
    assert_eq!(
        response.tool_calls,
        vec![ToolCall::new(
            "toolu_01A09q90qw90lq917835lq9",
            "get_weather",
            json!({"location": "San Francisco, CA"})
        )]
    );
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: Some(2095),
            output_tokens: Some(503),
            ..Usage::default()
        })
    );

    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.headers["x-api-key"], KEY);
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    assert_eq!(request.headers["content-type"], "application/json");
    assert!(!request.headers.contains_key("authorization"));
    assert_eq!(
        request.body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "temperature": 0.5,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What's the weather in Paris and Lyon?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking both."},
                    {"type": "tool_use", "id": "toolu_paris", "name": "get_weather", "input": {"location": "Paris"}},
                    {"type": "tool_use", "id": "toolu_lyon", "name": "get_weather", "input": {"location": ""}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_paris", "content": "Rain", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "toolu_lyon", "content": "location must not be empty", "is_error": true,
                     "cache_control": {"type": "ephemeral"}}
                ]}
            ],
            "tools": [{
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "input_schema": weather_definition().parameters,
                "cache_control": {"type": "ephemeral"}
            }]
        })
    );
}

#[tokio::test]
async fn max_tokens_defaults_because_the_api_requires_it() {
    let server = MockServer::start(vec![Reply::ok(anthropic_message(
        Some("Hello!"),
        vec![],
        "end_turn",
    ))])
    .await;
    let response = generate_simple(&model(&server), &[Message::user("Hi")])
        .await
        .unwrap();
    assert_eq!(response.content, "Hello!");
    assert!(response.tool_calls.is_empty());
    assert_eq!(server.requests()[0].body["max_tokens"], 4096);
}

#[tokio::test]
async fn tool_use_ids_round_trip_through_a_multi_step_run() {
    let server = MockServer::start(vec![
        Reply::ok(anthropic_message(
            Some("Let me check both cities."),
            vec![
                anthropic_tool_use("toolu_01A", "Paris"),
                anthropic_tool_use("toolu_01B", "Tokyo"),
            ],
            "tool_use",
        )),
        Reply::ok(anthropic_message(
            None,
            vec![anthropic_tool_use("toolu_02C", "")],
            "tool_use",
        )),
        Reply::ok(anthropic_message(
            Some("Paris and Tokyo are sunny."),
            vec![],
            "end_turn",
        )),
    ])
    .await;
    let recorder = Recorder::default();

    let result = run(&model(&server), "Weather in Paris and Tokyo?", &recorder).await;

    assert_eq!(result.status, Outcome::Completed, "{:?}", result.error);
    assert_eq!(result.answer.as_deref(), Some("Paris and Tokyo are sunny."));
    assert_eq!(
        result.usage,
        UsageTotals {
            input_tokens: 3 * 2095,
            output_tokens: 3 * 503,
            model_calls_with_usage: 3,
            ..UsageTotals::default()
        }
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[2].body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Tokyo?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check both cities."},
                {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"location": "Paris"}},
                {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"location": "Tokyo"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "Sunny, 22 C in Paris", "is_error": false},
                {"type": "tool_result", "tool_use_id": "toolu_01B", "content": "Sunny, 22 C in Tokyo", "is_error": false}
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_02C", "name": "get_weather", "input": {"location": ""}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_02C", "content": "location must not be empty", "is_error": true,
                 "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
}

#[tokio::test]
async fn a_max_tokens_stop_is_reported_not_taken_for_an_answer() {
    // Cut off, noted, asked again, cut off again: the run fails.
    let cut = || {
        Reply::ok(anthropic_message(
            Some("The weather in"),
            vec![],
            "max_tokens",
        ))
    };
    let server = MockServer::start(vec![cut(), cut()]).await;
    let recorder = Recorder::default();
    let result = run(&model(&server), "Weather?", &recorder).await;
    assert_eq!(result.status, Outcome::ModelError);
    assert_eq!(
        result.error.as_deref(),
        Some(
            "anthropic provider: the answer was cut off at the token limit (stop_reason `max_tokens`); raise max_tokens"
        )
    );
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn overloaded_answers_are_retried() {
    let server = MockServer::start(vec![
        anthropic_overloaded(),
        anthropic_error(500, "api_error", "Internal server error"),
        Reply::ok(anthropic_message(Some("Finally."), vec![], "end_turn")),
    ])
    .await;
    let response = generate_simple(&model(&server), &[Message::user("Hi")])
        .await
        .unwrap();
    assert_eq!(response.content, "Finally.");
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn errors_name_the_provider_status_and_type() {
    let server = MockServer::start(vec![
        anthropic_error(
            400,
            "invalid_request_error",
            "messages.1.content.0.tool_use.id: String should match pattern",
        ),
        anthropic_error(401, "authentication_error", "invalid x-api-key"),
    ])
    .await;
    let model = model(&server);
    assert_eq!(
        generate_simple(&model, &[Message::user("Hi")]).await,
        Err(ModelError::Provider(
            "anthropic provider: HTTP 400 Bad Request: invalid_request_error: messages.1.content.0.tool_use.id: String should match pattern"
                .into()
        ))
    );
    assert_eq!(
        generate_simple(&model, &[Message::user("Hi")]).await,
        Err(ModelError::Provider(
            "anthropic provider: HTTP 401 Unauthorized: authentication failed; check the key in $TEST_PROVIDER_KEY"
                .into()
        ))
    );
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn an_error_object_in_a_successful_answer_is_a_model_error() {
    let server = MockServer::start(vec![Reply::ok(
        json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}),
    )])
    .await;
    assert_eq!(
        generate_simple(&model(&server), &[Message::user("Hi")]).await,
        Err(ModelError::Provider(
            "anthropic provider: api_error: Internal server error".into()
        ))
    );
}

#[tokio::test]
async fn a_model_asked_to_answer_now_may_not_use_its_tools_and_is_told_so() {
    let server = MockServer::start(vec![Reply::ok(anthropic_message(
        Some("Sunny."),
        vec![],
        "end_turn",
    ))])
    .await;
    let response = generate_answer_now(&model(&server)).await.unwrap();
    assert_eq!(response.content, "Sunny.");
    let body = &server.requests()[0].body;
    assert!(
        body["tools"].is_array(),
        "tool use in the transcript needs its tools"
    );
    assert_eq!(body["tool_choice"], json!({"type": "none"}));
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    let blocks = last["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "tool_result");
    assert_eq!(
        blocks.last().unwrap(),
        &json!({"type": "text", "text": agent_runner::harness::stuck::ANSWER_NOW,
                "cache_control": {"type": "ephemeral"}})
    );
}
