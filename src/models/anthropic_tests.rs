use super::*;

#[test]
fn consecutive_turns_of_one_role_are_merged() {
    let messages = [
        Message::user("Inspect"),
        Message::assistant(
            "",
            vec![
                ToolCall::new("toolu_1", "list_dir", json!({})),
                ToolCall::new("toolu_2", "read_file", json!({"path": "a"})),
            ],
        ),
        Message::tool("toolu_1", "[]", false),
        Message::tool("toolu_2", "No such file", true),
        Message::assistant("Done", vec![]),
    ];
    assert_eq!(
        messages_json(messages.iter()),
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Inspect"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "list_dir", "input": {}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "a"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "[]", "is_error": false},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "No such file", "is_error": true}
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done"}]}
        ])
    );
}

#[test]
fn inputs_that_are_not_objects_go_back_empty() {
    let bad = tool_call_from_text("t".into(), "x".into(), "{oops");
    assert_eq!(tool_use_json(&bad)["input"], json!({}));
    let list = ToolCall::new("t", "x", json!([1]));
    assert_eq!(tool_use_json(&list)["input"], json!({}));
}

#[test]
fn usage_counts_cached_input() {
    assert_eq!(
        parse_usage(Some(
            &json!({"input_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": null, "output_tokens": 2})
        )),
        Ok(Some(Usage {
            input_tokens: Some(15),
            output_tokens: Some(2),
            cached_input_tokens: Some(5),
            ..Usage::default()
        }))
    );
    assert_eq!(
        parse_usage(Some(&json!({"output_tokens": 2}))),
        Ok(Some(Usage {
            output_tokens: Some(2),
            ..Usage::default()
        }))
    );
}
