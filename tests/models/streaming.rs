//! Streaming: text forwarded as it arrives, the same response assembled.

use std::time::Duration;

use agent_runner::harness::{Message, Model, ModelError, Outcome, ToolCall, Usage};
use agent_runner::models::http::MAX_BODY_BYTES;
use agent_runner::models::{AnthropicConfig, AnthropicModel, OpenAiConfig, OpenAiModel};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::fixtures::*;
use super::support::*;

/// An attempt's limit here: what ends a call in these tests is the stream,
/// never the clock, even on a loaded machine, where streaming an endless
/// answer up to the size limit in a debug build takes seconds.
const STREAM_TIMEOUT: Duration = Duration::from_secs(120);

fn openai(server: &MockServer) -> OpenAiModel {
    let mut config = OpenAiConfig::new("gpt-4o-mini");
    config.http = settings(format!("{}/v1", server.base), None);
    config.http.timeout = STREAM_TIMEOUT;
    config.stream = true;
    OpenAiModel::new(config).unwrap()
}

fn anthropic(server: &MockServer) -> AnthropicModel {
    let mut config = AnthropicConfig::new("claude-opus-4-6");
    config.http = settings(server.base.clone(), Some(KEY));
    config.http.timeout = STREAM_TIMEOUT;
    config.stream = true;
    AnthropicModel::new(config).unwrap()
}

fn stream(chunks: Vec<String>) -> Reply {
    Reply::Stream {
        chunks,
        gap: Duration::from_millis(5),
    }
}

async fn streamed(
    model: &dyn agent_runner::harness::Model,
) -> (agent_runner::harness::ModelResponse, Vec<String>) {
    let deltas = Deltas::default();
    let response = generate(
        model,
        &[Message::user("Hello")],
        &[weather_definition()],
        &CancellationToken::new(),
        None,
        &deltas,
    )
    .await
    .unwrap();
    (response, deltas.texts())
}

#[tokio::test]
async fn openai_text_is_forwarded_in_order_and_assembled() {
    let server = MockServer::start(vec![stream(openai_text_stream(&[
        "Hello", "! How", " can I", " help?",
    ]))])
    .await;
    let (response, deltas) = streamed(&openai(&server)).await;
    assert_eq!(deltas, ["Hello", "! How", " can I", " help?"]);
    assert_eq!(response.content, "Hello! How can I help?");
    assert!(response.tool_calls.is_empty());
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: Some(9),
            output_tokens: Some(12),
            ..Usage::default()
        })
    );
    let body = &server.requests()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn openai_tool_call_fragments_are_assembled_per_index() {
    let server = MockServer::start(vec![stream(openai_tool_stream())]).await;
    let (response, deltas) = streamed(&openai(&server)).await;
    assert_eq!(deltas, ["Checking", " both."]);
    assert_eq!(response.content, "Checking both.");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new(
                "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                "get_weather",
                json!({"location": "Paris, France"})
            ),
            ToolCall::new(
                "call_ABCdef0123456789",
                "get_weather",
                json!({"location": "Tokyo"})
            ),
        ]
    );
}

#[tokio::test]
async fn a_stream_cut_short_at_the_token_limit_is_reported() {
    let mut chunks = openai_text_stream(&["The weather", " in"]);
    // Replace the stop with a length finish.
    for chunk in &mut chunks {
        *chunk = chunk.replace("\"finish_reason\":\"stop\"", "\"finish_reason\":\"length\"");
    }
    let server = MockServer::start(vec![stream(chunks)]).await;
    let deltas = Deltas::default();
    let error = generate(
        &openai(&server),
        &[Message::user("Hi")],
        &[],
        &CancellationToken::new(),
        None,
        &deltas,
    )
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("finish_reason `length`"),
        "{error}"
    );
    assert_eq!(deltas.texts(), ["The weather", " in"]);
}

#[tokio::test]
async fn a_stream_that_breaks_before_any_text_is_retried_but_not_after() {
    // Ends with neither a finish nor [DONE], before any text.
    let early = stream(vec![format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]})
    )]);
    let server = MockServer::start(vec![early, stream(openai_text_stream(&["Fine"]))]).await;
    let (response, deltas) = streamed(&openai(&server)).await;
    assert_eq!(response.content, "Fine");
    assert_eq!(deltas, ["Fine"]);
    assert_eq!(server.request_count(), 2);

    // Ends the same way after some text: a retry would repeat it.
    let mut partial = openai_text_stream(&["Half an"]);
    partial.truncate(2);
    let server = MockServer::start(vec![stream(partial), stream(openai_text_stream(&["x"]))]).await;
    let deltas = Deltas::default();
    let error = generate(
        &openai(&server),
        &[Message::user("Hi")],
        &[],
        &CancellationToken::new(),
        None,
        &deltas,
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "openai provider: the stream ended before the answer was complete"
    );
    assert_eq!(deltas.texts(), ["Half an"]);
    assert_eq!(server.request_count(), 1);
}

/// Calls `model`, whose provider streams without end, and checks that the
/// call ends at the size limit, as an invalid response tried once. Returns
/// the bytes of text forwarded.
async fn refused_past_the_limit(model: &dyn Model, server: &MockServer) -> usize {
    let deltas = Deltas::default();
    let error = generate(
        model,
        &[Message::user("Hello")],
        &[weather_definition()],
        &CancellationToken::new(),
        None,
        &deltas,
    )
    .await
    .unwrap_err();
    // Without the limit the stream would run into the attempt's timeout,
    // which is retried.
    assert!(matches!(error, ModelError::InvalidResponse(_)), "{error:?}");
    assert!(
        error.to_string().contains(&format!(
            "streamed response larger than {MAX_BODY_BYTES} bytes"
        )),
        "{error}"
    );
    assert_eq!(server.request_count(), 1);
    deltas.texts().iter().map(String::len).sum()
}

#[tokio::test]
async fn a_stream_past_the_size_limit_ends_the_call_whatever_its_shape() {
    let x = "x".repeat(64 * 1024);
    // One line that never ends.
    let server = MockServer::start(vec![Reply::Endless {
        head: r#"data: {"choices": [{"index": 0, "delta": {"content": ""#.into(),
        repeated: x.clone(),
    }])
    .await;
    assert_eq!(refused_past_the_limit(&openai(&server), &server).await, 0);

    // One event that never ends: data lines and no blank line.
    let server = MockServer::start(vec![Reply::Endless {
        head: String::new(),
        repeated: format!("data: {x}\n"),
    }])
    .await;
    assert_eq!(refused_past_the_limit(&openai(&server), &server).await, 0);

    // Events of a few KiB each, without end: the answer they make up is what
    // outgrows the limit, and the text up to it was forwarded.
    let piece = "y".repeat(4096);
    let event = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]})
    );
    let server = MockServer::start(vec![Reply::Endless {
        head: String::new(),
        repeated: event.repeat(16),
    }])
    .await;
    let forwarded = refused_past_the_limit(&openai(&server), &server).await;
    assert!(forwarded <= MAX_BODY_BYTES, "{forwarded}");
    assert!(forwarded > MAX_BODY_BYTES - 2 * piece.len(), "{forwarded}");

    // The same with a tool call's arguments, which are not forwarded.
    let fragment = "z".repeat(4096);
    let head = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}, "finish_reason": null}]});
    let event = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}, "finish_reason": null}]});
    let server = MockServer::start(vec![Reply::Endless {
        head: format!("data: {head}\n\n"),
        repeated: format!("data: {event}\n\n").repeat(16),
    }])
    .await;
    assert_eq!(refused_past_the_limit(&openai(&server), &server).await, 0);
}

#[tokio::test]
async fn an_anthropic_stream_past_the_size_limit_ends_the_call() {
    let start = [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-6", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
    ];
    let delta = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "z".repeat(4096)}});
    let server = MockServer::start(vec![Reply::Endless {
        head: format!(
            "event: message_start\ndata: {}\n\nevent: content_block_start\ndata: {}\n\n",
            start[0], start[1]
        ),
        repeated: format!("event: content_block_delta\ndata: {delta}\n\n").repeat(16),
    }])
    .await;
    assert_eq!(
        refused_past_the_limit(&anthropic(&server), &server).await,
        0
    );
}

#[tokio::test]
async fn anthropic_text_and_tool_input_are_streamed_and_assembled() {
    let server = MockServer::start(vec![anthropic_stream(
        &["Okay", ", let me", " check."],
        true,
    )])
    .await;
    let (response, deltas) = streamed(&anthropic(&server)).await;
    assert_eq!(deltas, ["Okay", ", let me", " check."]);
    assert_eq!(response.content, "Okay, let me check.");
    assert_eq!(
        response.tool_calls,
        vec![ToolCall::new(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "get_weather",
            json!({"location": "San Francisco, CA"})
        )]
    );
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: Some(25),
            output_tokens: Some(89),
            ..Usage::default()
        })
    );
    assert_eq!(server.requests()[0].body["stream"], true);
}

#[tokio::test]
async fn an_anthropic_overloaded_event_before_any_text_is_retried() {
    let overloaded = Reply::sse(&[
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-6", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        ),
        (
            Some("error"),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]);
    let server = MockServer::start(vec![overloaded, anthropic_stream(&["Hello!"], false)]).await;
    let (response, deltas) = streamed(&anthropic(&server)).await;
    assert_eq!(response.content, "Hello!");
    assert_eq!(deltas, ["Hello!"]);
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn a_streamed_run_sends_deltas_live_and_records_only_whole_messages() {
    let server = MockServer::start(vec![
        anthropic_stream(&["Let me", " look."], true),
        anthropic_stream(&["It is", " sunny."], false),
    ])
    .await;
    let recorder = Recorder::default();
    let result = run(&anthropic(&server), "Weather in SF?", &recorder).await;
    assert_eq!(result.status, Outcome::Completed, "{:?}", result.error);
    assert_eq!(result.answer.as_deref(), Some("It is sunny."));
    assert_eq!(
        *recorder.deltas.lock().unwrap(),
        ["Let me", " look.", "It is", " sunny."]
    );
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
    let stored = transcript(&result);
    assert_eq!(stored[1]["content"], "Let me look.");
    assert_eq!(stored[2]["call_id"], "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
    assert_eq!(stored[3]["content"], "It is sunny.");
}
