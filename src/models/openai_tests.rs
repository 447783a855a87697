use super::*;

fn client() -> HttpClient {
    HttpClient::new(
        PROVIDER,
        &HttpSettings::new("http://127.0.0.1:9/v1"),
        "/chat/completions",
        |key| (AUTHORIZATION, key.expose().to_owned()),
        &[],
    )
    .unwrap()
}

#[test]
fn transcript_translates_to_chat_messages() {
    let bad = tool_call_from_text("call_2".into(), "read_file".into(), "{\"path\": ");
    let messages = [
        Message::user("Inspect"),
        Message::assistant(
            "Looking",
            vec![ToolCall::new("call_1", "list_dir", json!({})), bad.clone()],
        ),
        Message::tool("call_1", "[]", false),
        Message::tool("call_2", "Invalid arguments: $: ...", true),
        Message::assistant(
            "",
            vec![ToolCall::new("call_3", "list_dir", json!({"path": "src"}))],
        ),
        Message::tool("call_3", "[]", false),
        Message::assistant("Done", vec![]),
    ];
    assert_eq!(
        messages_json(messages.iter()),
        json!([
            {"role": "user", "content": "Inspect"},
            {"role": "assistant", "content": "Looking", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "[]"},
            {"role": "tool", "tool_call_id": "call_2", "content": "Invalid arguments: $: ..."},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_3", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\"src\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_3", "content": "[]"},
            {"role": "assistant", "content": "Done"}
        ])
    );
    assert!(
        bad.unparsable_arguments
            .unwrap()
            .starts_with("arguments are not valid JSON (EOF while parsing")
    );
}

#[test]
fn missing_and_repeated_ids_are_replaced() {
    let response = parse_response(
        json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [
            {"type": "function", "function": {"name": "a", "arguments": ""}},
            {"id": "x", "type": "function", "function": {"name": "b", "arguments": {"k": 1}}},
            {"id": "x", "type": "function", "function": {"name": "c", "arguments": "{}"}}
        ]}}]}),
        &client(),
    )
    .unwrap();
    let ids: Vec<&str> = response.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert!(ids[0].starts_with("call_"));
    assert_eq!(ids[1], "x");
    assert!(ids[2].starts_with("call_") && ids[2] != ids[0]);
    assert_eq!(response.tool_calls[0].arguments, json!({}));
    assert_eq!(response.tool_calls[1].arguments, json!({"k": 1}));
    assert_eq!(response.usage, None);
    response.validate().unwrap();
}

#[test]
fn a_null_error_field_is_no_error() {
    let response = parse_response(
        json!({"error": null, "choices": [{"message": {"content": "Hi"}, "finish_reason": "stop"}]}),
        &client(),
    )
    .unwrap();
    assert_eq!(response.content, "Hi");
    assert_eq!(
        parse_response(
            json!({"error": {"message": "busy", "type": "server_error"}}),
            &client()
        ),
        Err(ProviderError::Reported {
            detail: "server_error: busy".into(),
            retryable: false
        })
    );
}

#[test]
fn malformed_responses_are_invalid() {
    for (body, why) in [
        (json!({}), "the response has no choices"),
        (json!({"choices": []}), "the response has no choices"),
        (
            json!({"choices": [{"finish_reason": "stop"}]}),
            "the first choice has no message",
        ),
        (
            json!({"choices": [{"message": {"content": 3}}]}),
            "message content is not a string",
        ),
        (
            json!({"choices": [{"message": {"content": "", "tool_calls": [{"id": "1", "function": {}}]}}]}),
            "a tool call has no function name",
        ),
        (
            json!({"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": -1}}),
            "usage.prompt_tokens is not a nonnegative integer: -1",
        ),
    ] {
        assert_eq!(
            parse_response(body, &client()),
            Err(ProviderError::InvalidResponse(why.into()))
        );
    }
}
