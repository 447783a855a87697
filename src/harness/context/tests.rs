//! Bounding results and selecting contexts: examples and properties.
use super::*;
use crate::harness::message::ToolCall;
use proptest::prelude::*;
use serde_json::json;

fn size(messages: &[Message]) -> usize {
    serde_json::to_string(messages).unwrap().chars().count()
}

fn call(id: &str) -> ToolCall {
    ToolCall::new(id, "t", json!({}))
}

#[test]
fn bound_keeps_short_results_whole() {
    assert_eq!(bound_tool_result("hello", 5), "hello");
    assert_eq!(bound_tool_result("", 1), "");
    assert_eq!(bound_tool_result("ééé", 3), "ééé");
}

#[test]
fn bound_keeps_head_and_tail_around_a_marker() {
    let content = "a".repeat(50) + &"b".repeat(50);
    let bounded = bound_tool_result(&content, 60);
    let marker = "\n...[40 or more characters omitted]...\n";
    let remaining = 60 - marker.len();
    assert_eq!(
        bounded,
        format!(
            "{}{marker}{}",
            "a".repeat(remaining.div_ceil(2)),
            "b".repeat(remaining / 2)
        )
    );
    assert_eq!(bounded.chars().count(), 60);
}

#[test]
fn bound_cuts_the_marker_when_the_limit_is_smaller() {
    let content = "x".repeat(100);
    assert_eq!(bound_tool_result(&content, 10), "\n...[90 or");
    assert_eq!(bound_tool_result(&content, 1), "\n");
    assert_eq!(bound_tool_result(&content, 0), "");
}

#[test]
fn bound_handles_a_zero_length_tail() {
    let content = "y".repeat(200);
    let marker = "\n...[159 or more characters omitted]...\n";
    // One character left over: it goes to the head and the tail is empty.
    let bounded = bound_tool_result(&content, 41);
    assert_eq!(marker.len() + 1, 41);
    assert_eq!(bounded, format!("y{marker}"));
}

#[test]
fn bound_never_splits_a_character() {
    let content = "é".repeat(100) + &"✓".repeat(100);
    let bounded = bound_tool_result(&content, 80);
    assert_eq!(bounded.chars().count(), 80);
    assert!(bounded.starts_with('é') && bounded.ends_with('✓'));
}

#[test]
fn selection_keeps_batches_whole() {
    let messages = vec![
        Message::user("task"),
        Message::assistant("", vec![call("1"), call("2")]),
        Message::tool("1", "x".repeat(40), false),
        Message::tool("2", "y".repeat(40), false),
        Message::assistant("", vec![call("3")]),
        Message::tool("3", "z", false),
    ];
    let everything = select_context(&messages, size(&messages)).unwrap();
    assert_eq!(everything, messages);
    // One character short: the older batch goes as a whole.
    let trimmed = select_context(&messages, size(&messages) - 1).unwrap();
    assert_eq!(
        trimmed,
        vec![
            messages[0].clone(),
            messages[4].clone(),
            messages[5].clone()
        ]
    );
}

#[test]
fn a_conversation_keeps_its_first_and_its_newest_user_message() {
    let messages = vec![
        Message::user("first task"),
        Message::assistant("", vec![call("1")]),
        Message::tool("1", "x".repeat(100), false),
        Message::assistant("done with the first", vec![]),
        Message::user("second task"),
        Message::assistant("done with the second", vec![]),
        Message::user("third task"),
        Message::assistant("", vec![call("2")]),
        Message::tool("2", "y".repeat(100), false),
        Message::assistant("", vec![call("3")]),
        Message::tool("3", "z".repeat(100), false),
    ];
    let required = {
        let mut kept = vec![messages[0].clone()];
        kept.extend_from_slice(&messages[6..]);
        kept
    };
    // Exactly what is required: the first message, the newest user
    // message and all after it, even the older of its batches.
    assert_eq!(
        select_context(&messages, size(&required)).unwrap(),
        required
    );
    // Room for one more group: the newest earlier one.
    let mut with_one = vec![messages[0].clone()];
    with_one.extend_from_slice(&messages[5..]);
    assert_eq!(
        select_context(&messages, size(&with_one)).unwrap(),
        with_one
    );
    // An earlier group that does not fit stops the filling, newest first.
    let mut with_two = vec![messages[0].clone()];
    with_two.extend_from_slice(&messages[4..]);
    assert_eq!(
        select_context(&messages, size(&with_two) + 10).unwrap(),
        with_two
    );
    assert_eq!(
        select_context(&messages, size(&messages)).unwrap(),
        messages
    );
    // Less than the required part: its older result is masked (the
    // newest group's never is), and below that, a context limit, not a
    // cut in it.
    let mut masked = required.clone();
    masked[3] = mask(&masked[3]);
    assert_eq!(
        select_context(&messages, size(&required) - 1).unwrap(),
        masked
    );
    assert_eq!(
        select_context(&messages, size(&masked) - 1),
        Err(ContextError::TooSmall {
            limit: size(&masked) - 1,
            required: size(&masked)
        })
    );
}

#[test]
fn old_results_are_masked_oldest_first_before_groups_are_dropped() {
    let long = |c: &str| c.repeat(500);
    let messages = vec![
        Message::user("task"),
        // A group that stays long with its result masked.
        Message::assistant(long("t"), vec![call("1")]),
        Message::tool("1", long("a"), false),
        Message::assistant("", vec![call("2")]),
        Message::tool("2", long("b"), false),
        Message::assistant("", vec![call("3")]),
        Message::tool("3", long("c"), false),
    ];
    let masked = |indices: &[usize]| {
        let mut view = messages.clone();
        for &index in indices {
            view[index] = mask(&view[index]);
        }
        view
    };
    assert_eq!(
        masked(&[2])[2],
        Message::tool(
            "1",
            "[result omitted to fit the context: 500 characters; call the tool again if you need it]",
            false
        )
    );
    // One character short: the oldest result is masked, nothing dropped.
    assert_eq!(
        select_context(&messages, size(&messages) - 1).unwrap(),
        masked(&[2])
    );
    // Then the next oldest; the newest group's result never.
    let two = masked(&[2, 4]);
    assert_eq!(select_context(&messages, size(&two)).unwrap(), two);
    // Not enough with both masked: the oldest group goes...
    let dropped = |mut view: Vec<Message>| {
        view.drain(1..3);
        view
    };
    // ...and the room it leaves shows the next result whole again...
    let whole = dropped(messages.clone());
    assert!(size(&whole) < size(&two));
    assert_eq!(select_context(&messages, size(&two) - 1).unwrap(), whole);
    // ...when there is room enough.
    let tight = dropped(masked(&[4]));
    assert_eq!(select_context(&messages, size(&whole) - 1).unwrap(), tight);
    // Short results, which masking would lengthen, are never masked.
    let short = vec![
        Message::user("task"),
        Message::assistant("", vec![call("1")]),
        Message::tool("1", "ok", false),
        Message::assistant("", vec![call("2")]),
        Message::tool("2", "ok", false),
    ];
    assert_eq!(
        select_context(&short, size(&short) - 1).unwrap(),
        vec![short[0].clone(), short[3].clone(), short[4].clone()]
    );
}

#[test]
fn selection_refuses_incoherent_transcripts() {
    let user = Message::user("task");
    assert_eq!(
        select_context(&[Message::assistant("hi", vec![])], 1000),
        Err(ContextError::NoLeadingUser)
    );
    assert_eq!(
        select_context(&[user.clone(), Message::tool("1", "x", false)], 1000),
        Err(ContextError::OrphanResult)
    );
    assert_eq!(
        select_context(
            &[
                user.clone(),
                Message::assistant("", vec![call("1"), call("2")]),
                Message::tool("1", "x", false),
            ],
            1000
        ),
        Err(ContextError::IncompleteBatch)
    );
    assert_eq!(
        select_context(
            &[
                user.clone(),
                Message::assistant("", vec![call("1"), call("2")]),
                Message::tool("1", "x", false),
                Message::assistant("", vec![]),
            ],
            1000
        ),
        Err(ContextError::IncompleteBatch)
    );
    assert_eq!(
        select_context(
            &[
                user.clone(),
                Message::assistant("", vec![call("1")]),
                Message::tool("1", "x", false),
                Message::tool("1", "x", false),
            ],
            1000
        ),
        Err(ContextError::OrphanResult)
    );
    assert_eq!(
        select_context(
            &[user, Message::assistant("", vec![call("1"), call("1")])],
            1000
        ),
        Err(ContextError::DuplicateCallIds)
    );
    assert_eq!(select_context(&[], 1), Ok(vec![]));
}

#[test]
fn selection_fails_when_required_messages_do_not_fit() {
    let messages = vec![
        Message::user("task"),
        Message::assistant("", vec![call("1")]),
        Message::tool("1", "x".repeat(100), false),
    ];
    let first = size(&messages[..1]);
    assert!(matches!(
        select_context(&messages[..1], first - 1),
        Err(ContextError::TooSmall { .. })
    ));
    assert_eq!(
        select_context(&messages[..1], first),
        Ok(messages[..1].to_vec())
    );
    // The first message fits, but not with the latest group.
    assert_eq!(
        select_context(&messages, size(&messages) - 1),
        Err(ContextError::TooSmall {
            limit: size(&messages) - 1,
            required: size(&messages)
        })
    );
}

fn arb_transcript() -> impl Strategy<Value = Vec<Message>> {
    let text = "[a-zé\"\\\\\n]{0,30}";
    let result = "[a-zé\"\\\\\n]{0,200}";
    let turn = (text, proptest::collection::vec(result, 0..4));
    (text, proptest::collection::vec(turn, 0..12)).prop_map(|(prompt, turns)| {
        let mut messages = vec![Message::user(prompt)];
        let mut next_id = 0;
        for (content, results) in turns {
            let ids: Vec<String> = results
                .iter()
                .map(|_| {
                    next_id += 1;
                    format!("c{next_id}")
                })
                .collect();
            messages.push(Message::assistant(
                content,
                ids.iter().map(|id| call(id)).collect(),
            ));
            for (id, result) in ids.iter().zip(results) {
                messages.push(Message::tool(id.clone(), result, false));
            }
        }
        messages
    })
}

proptest! {
    #[test]
    fn bound_never_exceeds_the_limit(content in "\\PC{0,300}", limit in 0usize..400) {
        let bounded = bound_tool_result(&content, limit);
        prop_assert!(bounded.chars().count() <= limit);
        if content.chars().count() <= limit {
            prop_assert_eq!(bounded, content);
        }
    }

    #[test]
    fn selection_is_a_coherent_suffix_within_the_limit(
        messages in arb_transcript(),
        limit in 1usize..3000,
    ) {
        match select_context(&messages, limit) {
            Ok(selected) => {
                prop_assert!(size(&selected) <= limit);
                prop_assert_eq!(&selected[0], &messages[0]);
                // The rest is a suffix of the transcript, some of its
                // results masked...
                let rest = &selected[1..];
                let suffix = &messages[messages.len() - rest.len()..];
                for (shown, message) in rest.iter().zip(suffix) {
                    prop_assert!(shown == message || *shown == mask(message));
                }
                // ...that is a coherent conversation with the prompt.
                prop_assert!(check_coherent(&selected).is_ok());
                // And no further group would have fitted (masked or
                // not: what fits masked is kept masked).
                let taken = rest.len();
                let none_masked = rest.iter().zip(suffix).all(|(a, b)| a == b);
                if taken + 1 < messages.len() && none_masked {
                    let mut start = messages.len() - taken - 1;
                    while start > 1 && matches!(messages[start], Message::Tool { .. }) {
                        start -= 1;
                    }
                    let mut bigger = vec![messages[0].clone()];
                    bigger.extend_from_slice(&messages[start..]);
                    prop_assert!(size(&bigger) > limit);
                }
            }
            Err(ContextError::TooSmall { required, .. }) => {
                prop_assert!(required > limit);
                let last_group_start = messages
                    .iter()
                    .rposition(|m| matches!(m, Message::Assistant { .. }))
                    .unwrap_or(0);
                let mut minimal = vec![messages[0].clone()];
                if last_group_start > 0 {
                    minimal.extend_from_slice(&messages[last_group_start..]);
                }
                prop_assert_eq!(size(&minimal), required);
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }
}

#[test]
fn the_length_of_a_masked_result_is_known_without_making_it() {
    for chars in [0, 1, 9, 10, 99, 100, 12_345, usize::MAX] {
        assert_eq!(
            super::masked_result_len(chars),
            masked_result(chars).len(),
            "{chars}"
        );
    }
}
