//! Response bodies shaped like the providers' documented examples (OpenAI's
//! Chat Completions reference and function-calling guide, Anthropic's
//! Messages, tool use, streaming and errors pages), with only the tool name
//! and ids adjusted where a test needs them.

use serde_json::{Value, json};

use super::support::Reply;

/// An OpenAI tool call as the API returns it: `arguments` is JSON text.
pub fn openai_call(id: &str, arguments: &str) -> Value {
    json!({
        "id": id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments}
    })
}

/// An OpenAI completion whose message asks for `calls`.
pub fn openai_tool_calls(calls: Vec<Value>) -> Value {
    json!({
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1699896916,
        "model": "gpt-4o-mini",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": calls},
            "logprobs": null,
            "finish_reason": "tool_calls"
        }],
        "usage": {
            "prompt_tokens": 82,
            "completion_tokens": 17,
            "total_tokens": 99,
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0
            }
        }
    })
}

/// The parallel function calling example: three calls in one turn.
pub fn openai_parallel_calls() -> Value {
    openai_tool_calls(vec![
        openai_call("call_12345xyz", "{\"location\":\"Paris, France\"}"),
        openai_call("call_67890abc", "{\"location\":\"Bogotá, Colombia\"}"),
        openai_call("call_99999def", "{\"location\":\"Tokyo, Japan\"}"),
    ])
}

/// An OpenAI completion that answers with text.
pub fn openai_answer(text: &str, finish_reason: &str) -> Value {
    json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": finish_reason
        }],
        "usage": {
            "prompt_tokens": 1117,
            "completion_tokens": 46,
            "total_tokens": 1163,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035"
    })
}

pub fn openai_error(status: u16, kind: &str, code: &str, message: &str) -> Reply {
    Reply::status(
        status,
        json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
    )
}

pub fn openai_rate_limited() -> Reply {
    openai_error(
        429,
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for gpt-4o-mini in organization org-abc on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
    )
}

pub fn openai_server_error() -> Reply {
    openai_error(
        500,
        "server_error",
        "server_error",
        "The server had an error while processing your request. Sorry about that!",
    )
}

fn openai_chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]
    })
}

/// The streaming example: text in pieces, a finish, a usage chunk, `[DONE]`.
pub fn openai_text_stream(pieces: &[&str]) -> Vec<String> {
    let mut events = vec![openai_chunk(
        json!({"role": "assistant", "content": ""}),
        None,
    )];
    events.extend(
        pieces
            .iter()
            .map(|piece| openai_chunk(json!({"content": piece}), None)),
    );
    events.push(openai_chunk(json!({}), Some("stop")));
    events.push(json!({
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "choices": [],
        "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}
    }));
    let mut chunks: Vec<String> = events
        .into_iter()
        .map(|event| format!("data: {event}\n\n"))
        .collect();
    chunks.push("data: [DONE]\n\n".into());
    chunks
}

/// A streamed turn with a little text and two calls whose arguments arrive
/// in fragments, the way the function-calling guide shows them.
pub fn openai_tool_stream() -> Vec<String> {
    let call = |index: u64, id: &str| json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": "get_weather", "arguments": ""}}]});
    let args = |index: u64, text: &str| json!({"tool_calls": [{"index": index, "function": {"arguments": text}}]});
    let events = [
        openai_chunk(json!({"role": "assistant", "content": "Checking"}), None),
        openai_chunk(json!({"content": " both."}), None),
        openai_chunk(call(0, "call_DdmO9pD3xa9XTPNJ32zg2hcA"), None),
        openai_chunk(args(0, "{\"lo"), None),
        openai_chunk(args(0, "cation\": \"Paris"), None),
        openai_chunk(call(1, "call_ABCdef0123456789"), None),
        openai_chunk(args(1, "{\"location\":"), None),
        openai_chunk(args(0, ", France\"}"), None),
        openai_chunk(args(1, " \"Tokyo\"}"), None),
        openai_chunk(json!({}), Some("tool_calls")),
    ];
    let mut chunks: Vec<String> = events
        .into_iter()
        .map(|event| format!("data: {event}\n\n"))
        .collect();
    chunks.push("data: [DONE]\n\n".into());
    chunks
}

/// An Anthropic message with optional text and `tool_use` blocks.
pub fn anthropic_message(text: Option<&str>, tool_uses: Vec<Value>, stop_reason: &str) -> Value {
    let mut content: Vec<Value> = text
        .map(|text| json!({"type": "text", "text": text}))
        .into_iter()
        .collect();
    content.extend(tool_uses);
    json!({
        "id": "msg_01Aq9w938a90dw8q",
        "model": "claude-sonnet-4-5",
        "stop_reason": stop_reason,
        "role": "assistant",
        "content": content,
        "type": "message",
        "stop_sequence": null,
        "usage": {"input_tokens": 2095, "output_tokens": 503}
    })
}

pub fn anthropic_tool_use(id: &str, location: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "get_weather", "input": {"location": location}})
}

pub fn anthropic_error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::status(
        status,
        json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}

pub fn anthropic_overloaded() -> Reply {
    anthropic_error(529, "overloaded_error", "Overloaded")
}

/// The streaming example: text, then a tool_use block whose input arrives
/// as `input_json_delta` fragments, then the stop.
pub fn anthropic_stream(text: &[&str], with_tool: bool) -> Reply {
    let mut events: Vec<(Option<&str>, Value)> = vec![
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-6", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        ),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (Some("ping"), json!({"type": "ping"})),
    ];
    for piece in text {
        events.push((
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}),
        ));
    }
    events.push((
        Some("content_block_stop"),
        json!({"type": "content_block_stop", "index": 0}),
    ));
    if with_tool {
        events.push((
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {}}}),
        ));
        for fragment in [
            "",
            "{\"location\":",
            " \"San",
            " Francisc",
            "o,",
            " CA\"",
            "}",
        ] {
            events.push((
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": fragment}}),
            ));
        }
        events.push((
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": 1}),
        ));
    }
    let stop = if with_tool { "tool_use" } else { "end_turn" };
    events.push((
        Some("message_delta"),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 89}}),
    ));
    events.push((Some("message_stop"), json!({"type": "message_stop"})));
    Reply::sse(&events)
}
