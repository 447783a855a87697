//! Stuck loops: a model that repeats a step exactly (the same calls with the
//! same arguments, getting the same results) learns nothing new from it, and
//! small models do it until their steps run out, notes or not. When the last
//! step repeats one of the three before it, the next model call is asked for
//! an answer, without tools (see [`super::model::ModelRequest::answer_now`]).

use std::sync::Arc;

use super::message::Message;

/// What a model asked to answer now is told, as a last user message of
/// what it is sent (never stored): without it, a small model writes the
/// call it would make as text instead.
pub const ANSWER_NOW: &str = "You repeated a step and got the same results again. Do not call \
any tool now: answer the task from what you have.";

/// How many steps before the last one a repeat is looked for: 1 catches a
/// step done again at once, 2 a pair done in turn (write the same file, run
/// the same failing test), 3 a round of three (three sub-agents asked again
/// in turn).
const LOOKBACK: usize = 3;

/// Whether `messages` end in a stuck loop: their last step (an assistant
/// message with tool calls, then its results) is the same as one of the
/// [`LOOKBACK`] steps before it, within the newest prompt's turn.
pub fn is_stuck(messages: &[Arc<Message>]) -> bool {
    let mut steps: Vec<&[Arc<Message>]> = Vec::with_capacity(LOOKBACK + 1);
    let mut end = messages.len();
    while steps.len() <= LOOKBACK {
        let Some(start) = step_start(&messages[..end]) else {
            break;
        };
        steps.push(&messages[start..end]);
        end = start;
    }
    match steps.split_first() {
        Some((last, earlier)) => earlier.iter().any(|step| same_step(last, step)),
        None => false,
    }
}

/// Where the step that `messages` end with starts: its assistant message
/// with tool calls, followed by nothing but tool results. `None` when they
/// end otherwise (with an answer, a prompt, or nothing).
pub(crate) fn step_start(messages: &[Arc<Message>]) -> Option<usize> {
    let results = messages
        .iter()
        .rev()
        .take_while(|message| matches!(***message, Message::Tool { .. }))
        .count();
    let start = messages.len().checked_sub(results + 1)?;
    (results > 0 && !messages[start].tool_calls().is_empty()).then_some(start)
}

/// Two steps with the same calls (names and arguments, in order; their ids
/// aside) and the same results, in order.
fn same_step(a: &[Arc<Message>], b: &[Arc<Message>]) -> bool {
    let same_calls = a[0].tool_calls().len() == b[0].tool_calls().len()
        && a[0]
            .tool_calls()
            .iter()
            .zip(b[0].tool_calls())
            .all(|(x, y)| x.name == y.name && x.arguments == y.arguments);
    let same_results = a.len() == b.len()
        && a[1..].iter().zip(&b[1..]).all(|(x, y)| match (&**x, &**y) {
            (
                Message::Tool {
                    content: x,
                    is_error: xe,
                    ..
                },
                Message::Tool {
                    content: y,
                    is_error: ye,
                    ..
                },
            ) => x == y && xe == ye,
            _ => false,
        });
    same_calls && same_results
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::message::ToolCall;
    use serde_json::json;

    fn step(id: &str, path: &str, result: &str) -> [Arc<Message>; 2] {
        [
            Arc::new(Message::assistant(
                "",
                vec![ToolCall::new(id, "read_file", json!({"path": path}))],
            )),
            Arc::new(Message::tool(id, result, false)),
        ]
    }

    fn transcript(steps: &[[Arc<Message>; 2]]) -> Vec<Arc<Message>> {
        let mut messages = vec![Arc::new(Message::user("task"))];
        for step in steps {
            messages.extend(step.iter().cloned());
        }
        messages
    }

    #[test]
    fn a_step_repeated_with_the_same_result_is_stuck() {
        let once = transcript(&[step("1", "a", "x")]);
        assert!(!is_stuck(&once));
        let again = transcript(&[step("1", "a", "x"), step("2", "a", "x")]);
        assert!(is_stuck(&again), "the same call and result, other ids");
        let changed = transcript(&[step("1", "a", "x"), step("2", "a", "y")]);
        assert!(!is_stuck(&changed), "the same call, a new result");
        let other = transcript(&[step("1", "a", "x"), step("2", "b", "x")]);
        assert!(!is_stuck(&other), "another call");
    }

    #[test]
    fn a_pair_or_a_round_of_three_steps_done_in_turn_is_stuck() {
        let turn = transcript(&[
            step("1", "a", "x"),
            step("2", "b", "y"),
            step("3", "a", "x"),
        ]);
        assert!(is_stuck(&turn));
        let round = transcript(&[
            step("1", "a", "x"),
            step("2", "b", "y"),
            step("3", "c", "z"),
            step("4", "a", "x"),
        ]);
        assert!(is_stuck(&round), "three sub-agents asked again in turn");
        let far = transcript(&[
            step("1", "a", "x"),
            step("2", "b", "y"),
            step("3", "c", "z"),
            step("4", "d", "w"),
            step("5", "a", "x"),
        ]);
        assert!(!is_stuck(&far), "four steps back is not looked at");
    }

    #[test]
    fn an_answer_or_a_new_prompt_ends_the_loop() {
        let mut answered = transcript(&[step("1", "a", "x"), step("2", "a", "x")]);
        answered.push(Arc::new(Message::assistant("done", vec![])));
        assert!(!is_stuck(&answered));
        let mut prompted = transcript(&[step("1", "a", "x")]);
        prompted.push(Arc::new(Message::user("next")));
        prompted.extend(step("2", "a", "x"));
        assert!(
            !is_stuck(&prompted),
            "steps of an earlier prompt are not looked at"
        );
    }
}
