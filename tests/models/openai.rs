//! The OpenAI-compatible adapter: translation both ways, ids, arguments,
//! usage, finish reasons and error statuses.

use agent_runner::harness::{Message, ModelError, Outcome, ToolCall, Usage, UsageTotals};
use agent_runner::models::{OpenAiConfig, OpenAiModel};
use serde_json::{Value, json};

use super::fixtures::*;
use super::support::*;

fn model(server: &MockServer, key: Option<&str>) -> OpenAiModel {
    let mut config = OpenAiConfig::new("gpt-4o-mini");
    config.http = settings(format!("{}/v1", server.base), key);
    OpenAiModel::new(config).unwrap()
}

#[tokio::test]
async fn a_multi_tool_call_turn_translates_both_ways() {
    let server = MockServer::start(vec![Reply::ok(openai_parallel_calls())]).await;
    let mut config = OpenAiConfig::new("gpt-4o-mini");
    config.http = settings(format!("{}/v1", server.base), Some(KEY));
    config
        .http
        .headers
        .insert("X-Title".into(), "agent-runner tests".into());
    config.max_tokens = Some(256);
    config.temperature = Some(0.2);
    let model = OpenAiModel::new(config).unwrap();
    let transcript = [
        Message::user("What is the weather like in Paris today?"),
        Message::assistant(
            "Let me look.",
            vec![ToolCall::new(
                "call_first",
                "get_weather",
                json!({"location": "Paris"}),
            )],
        ),
        Message::tool("call_first", "\"Rain\"", false),
        Message::assistant(
            "",
            vec![
                ToolCall::new("call_a", "get_weather", json!({"location": "Lyon"})),
                ToolCall::new("call_b", "get_weather", json!({})),
            ],
        ),
        Message::tool("call_a", "\"Sunny\"", false),
        Message::tool("call_b", "Invalid arguments: $.location: required", true),
    ];

    let response = generate_simple(&model, &transcript).await.unwrap();

    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new(
                "call_12345xyz",
                "get_weather",
                json!({"location": "Paris, France"})
            ),
            ToolCall::new(
                "call_67890abc",
                "get_weather",
                json!({"location": "Bogotá, Colombia"})
            ),
            ToolCall::new(
                "call_99999def",
                "get_weather",
                json!({"location": "Tokyo, Japan"})
            ),
        ]
    );
    assert_eq!(response.content, "");
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: Some(82),
            output_tokens: Some(17),
            ..Usage::default()
        })
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(request.headers["content-type"], "application/json");
    assert_eq!(request.headers["x-title"], "agent-runner tests");
    assert_eq!(
        request.body,
        json!({
            "model": "gpt-4o-mini",
            "max_tokens": 256,
            "temperature": 0.2,
            "messages": [
                {"role": "user", "content": "What is the weather like in Paris today?"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_first", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_first", "content": "Rain"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Lyon\"}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_a", "content": "Sunny"},
                {"role": "tool", "tool_call_id": "call_b", "content": "Invalid arguments: $.location: required"}
            ],
            "tools": [{
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Get the current weather in a given location",
                    "parameters": weather_definition().parameters
                }
            }]
        })
    );
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let server = MockServer::start(vec![Reply::ok(openai_answer("Hi", "stop"))]).await;
    let response = generate_simple(&model(&server, None), &[Message::user("Hello")])
        .await
        .unwrap();
    assert_eq!(response.content, "Hi");
    assert!(!server.requests()[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn tool_call_ids_round_trip_through_a_multi_step_run() {
    let server = MockServer::start(vec![
        Reply::ok(openai_parallel_calls()),
        Reply::ok(openai_tool_calls(vec![openai_call(
            "call_second_turn",
            "{\"location\": \"Oslo\"}",
        )])),
        Reply::ok(openai_answer(
            "Paris, Bogotá, Tokyo and Oslo are sunny.",
            "stop",
        )),
    ])
    .await;
    let model = model(&server, Some(KEY));
    let recorder = Recorder::default();

    let result = run(&model, "Weather in four cities?", &recorder).await;

    assert_eq!(result.status, Outcome::Completed, "{:?}", result.error);
    assert_eq!(
        result.answer.as_deref(),
        Some("Paris, Bogotá, Tokyo and Oslo are sunny.")
    );
    assert_eq!((result.steps, result.tool_calls), (3, 4));
    assert_eq!(
        result.usage,
        UsageTotals {
            input_tokens: 82 + 82 + 1117,
            output_tokens: 17 + 17 + 46,
            model_calls_with_usage: 3,
            ..UsageTotals::default()
        }
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let messages = &requests[2].body["messages"];
    assert_eq!(
        *messages,
        json!([
            {"role": "user", "content": "Weather in four cities?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_12345xyz", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris, France\"}"}},
                {"id": "call_67890abc", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Bogotá, Colombia\"}"}},
                {"id": "call_99999def", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Tokyo, Japan\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_12345xyz", "content": "Sunny, 22 C in Paris, France"},
            {"role": "tool", "tool_call_id": "call_67890abc", "content": "Sunny, 22 C in Bogotá, Colombia"},
            {"role": "tool", "tool_call_id": "call_99999def", "content": "Sunny, 22 C in Tokyo, Japan"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_second_turn", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Oslo\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_second_turn", "content": "Sunny, 22 C in Oslo"}
        ])
    );
    // The model reads string results as text; the transcript keeps their
    // JSON, and the provider's ids too.
    assert_eq!(
        transcript(&result)[2]["content"],
        "\"Sunny, 22 C in Paris, France\""
    );
    let stored = transcript(&result);
    assert_eq!(stored[2]["call_id"], "call_12345xyz");
    assert_eq!(stored[5]["tool_calls"][0]["id"], "call_second_turn");
    assert_eq!(stored[6]["call_id"], "call_second_turn");
}

#[tokio::test]
async fn invalid_argument_json_is_a_recoverable_tool_error() {
    let server = MockServer::start(vec![
        Reply::ok(openai_tool_calls(vec![
            openai_call("call_bad", "{\"location\": \"Bos"),
            openai_call("call_good", "{\"location\": \"Boston, MA\"}"),
        ])),
        Reply::ok(openai_tool_calls(vec![openai_call(
            "call_retry",
            "{\"location\": \"Boston, MA\"}",
        )])),
        Reply::ok(openai_answer("Sunny in Boston.", "stop")),
    ])
    .await;
    let model = model(&server, None);
    let recorder = Recorder::default();

    let result = run(&model, "Weather in Boston?", &recorder).await;

    assert_eq!(result.status, Outcome::Completed, "{:?}", result.error);
    let stored = transcript(&result);
    assert_eq!(
        stored[1]["tool_calls"][0]["arguments"],
        "{\"location\": \"Bos"
    );
    assert_eq!(stored[2]["call_id"], "call_bad");
    assert_eq!(stored[2]["is_error"], true);
    let error = stored[2]["content"].as_str().unwrap();
    assert!(
        error.starts_with("Invalid arguments: $: arguments are not valid JSON (EOF while parsing"),
        "{error}"
    );
    assert_eq!(stored[3]["call_id"], "call_good");
    assert_eq!(stored[3]["is_error"], false);
    assert_eq!(stored[5]["is_error"], false);
    // The model sees its broken call (as `{}`, which every server accepts)
    // and the error that answers it.
    let second = &server.requests()[1].body["messages"];
    assert_eq!(
        second[1]["tool_calls"][0]["function"]["arguments"],
        json!("{}")
    );
    assert_eq!(second[2]["content"], json!(error));
}

#[tokio::test]
async fn a_length_finish_is_reported_not_taken_for_an_answer() {
    // Cut off, noted, asked again, cut off again: the run fails.
    let cut = || Reply::ok(openai_answer("The weather in Paris is", "length"));
    let server = MockServer::start(vec![cut(), cut()]).await;
    let recorder = Recorder::default();

    let result = run(&model(&server, None), "Weather?", &recorder).await;

    assert_eq!(result.status, Outcome::ModelError);
    assert_eq!(
        result.error.as_deref(),
        Some(
            "openai provider: the answer was cut off at the token limit (finish_reason `length`); raise max_tokens"
        )
    );
    assert_eq!(result.answer, None);
    // The prompt and the note; nothing of either cut-off answer.
    assert_eq!(result.messages.len(), 2, "{:?}", result.messages);
    // The noted one is a step; the failing one, like any failed model call,
    // is not.
    assert_eq!(result.steps, 1);
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn an_answer_cut_off_at_the_token_limit_is_asked_for_again_shorter() {
    let server = MockServer::start(vec![
        Reply::ok(openai_answer("It is sunny, sunny, sunny, sunny", "length")),
        Reply::ok(openai_answer("Sunny.", "stop")),
    ])
    .await;
    let recorder = Recorder::default();

    let result = run(&model(&server, None), "Weather?", &recorder).await;

    assert_eq!(result.status, Outcome::Completed, "{:?}", result.error);
    assert_eq!(result.answer.as_deref(), Some("Sunny."));
    assert_eq!(result.steps, 2);
    let transcript = transcript(&result);
    let note = transcript[1]["content"].as_str().unwrap();
    assert_eq!(transcript[1]["role"], "user");
    assert!(
        note.starts_with("[agent-runner] Your last response was cut off at the token limit"),
        "{note}"
    );
    // The model is sent the note, not the answer it cut off.
    let second = &server.requests()[1].body;
    let sent = second["messages"].as_array().unwrap();
    assert_eq!(sent.last().unwrap()["content"], note);
    assert!(!second.to_string().contains("sunny, sunny"), "{second}");
}

#[tokio::test]
async fn a_malformed_body_is_a_model_error_and_not_retried() {
    for body in [
        "<html>upstream gateway said hello</html>",
        "{\"choices\": [",
        "{\"object\": \"chat.completion\"}",
    ] {
        let server = MockServer::start(vec![Reply::Text {
            status: 200,
            body: body.into(),
        }])
        .await;
        let error = generate_simple(&model(&server, None), &[Message::user("Hi")])
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ModelError::InvalidResponse(text) if text.starts_with("openai provider: ")),
            "{error:?}"
        );
        assert_eq!(server.request_count(), 1);
    }
}

#[tokio::test]
async fn client_errors_name_the_provider_and_status_and_are_not_retried() {
    let server = MockServer::start(vec![openai_error(
        400,
        "invalid_request_error",
        "null",
        "Invalid 'messages[1].tool_calls[0].id': string too long.",
    )])
    .await;
    let error = generate_simple(&model(&server, Some(KEY)), &[Message::user("Hi")])
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ModelError::Provider(
            "openai provider: HTTP 400 Bad Request: invalid_request_error: Invalid 'messages[1].tool_calls[0].id': string too long."
                .into()
        )
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn an_authentication_failure_names_the_variable_not_the_key() {
    let server = MockServer::start(vec![openai_error(
        401,
        "invalid_request_error",
        "invalid_api_key",
        &format!(
            "Incorrect API key provided: {}****LEAK. You can find your API key at https://platform.openai.com/account/api-keys.",
            &KEY[..8]
        ),
    )])
    .await;
    let error = generate_simple(&model(&server, Some(KEY)), &[Message::user("Hi")])
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "openai provider: HTTP 401 Unauthorized: authentication failed; check the key in $TEST_PROVIDER_KEY"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_refusal_or_an_answer_with_usage_maps_to_the_response() {
    let server = MockServer::start(vec![
        Reply::ok(json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
        })),
        // A minimal local server: no usage, no finish_reason.
        Reply::ok(json!({"choices": [{"message": {"role": "assistant", "content": "Hello"}}]})),
    ])
    .await;
    let model = model(&server, None);
    let refusal = generate_simple(&model, &[Message::user("Hi")])
        .await
        .unwrap();
    assert_eq!(refusal.content, "I can't help with that.");
    assert_eq!(
        refusal.usage,
        Some(Usage {
            input_tokens: Some(5),
            output_tokens: Some(7),
            ..Usage::default()
        })
    );
    let plain = generate_simple(&model, &[Message::user("Hi")])
        .await
        .unwrap();
    assert_eq!(plain.content, "Hello");
    assert_eq!(plain.usage, None);
    assert_eq!(
        server.requests()[1].body.get("tools").map(Value::is_array),
        Some(true)
    );
}

#[tokio::test]
async fn an_https_endpoint_that_does_not_speak_tls_is_a_connection_failure() {
    // Exercises the TLS setup (crypto provider, trust store) without any
    // network beyond loopback: the handshake meets a plain HTTP server.
    let server = MockServer::start(vec![]).await;
    let mut config = OpenAiConfig::new("gpt-4o-mini");
    config.http = settings(
        format!("{}/v1", server.base.replace("http://", "https://")),
        None,
    );
    config.http.retry.max_attempts = 1;
    let error = generate_simple(&OpenAiModel::new(config).unwrap(), &[Message::user("Hi")])
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("openai provider: cannot connect"),
        "{error}"
    );
}

#[tokio::test]
async fn a_model_asked_to_answer_now_is_sent_no_tools_and_told_so() {
    let server = MockServer::start(vec![Reply::ok(openai_answer("Sunny.", "stop"))]).await;
    let response = generate_answer_now(&model(&server, None)).await.unwrap();
    assert_eq!(response.content, "Sunny.");
    let body = &server.requests()[0].body;
    assert!(body.get("tools").is_none(), "{body}");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "user", "content": agent_runner::harness::stuck::ANSWER_NOW})
    );
    assert_eq!(messages[messages.len() - 2]["role"], "tool");
}
