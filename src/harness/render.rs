//! What a model reads of a tool's result. The transcript keeps a result as
//! its JSON serialisation (section 2 of the spec); a model reads it better as
//! text: a string result (a file's text) as that text, not a JSON literal
//! with its quotes and `\n` escapes; a command's result as its exit code,
//! then its output and errors as text (a traceback reads as one); a search
//! that matched nothing with a note on where search looks; anything else as
//! the compact JSON it already is. Errors are text already.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value};

use super::message::Message;

/// What a call that repeats the previous call of its tool exactly, with the
/// same result, ends with for its model: the commonest stuck loop of a small
/// model is writing the same file and running the same failing test until
/// its steps run out.
pub const REPEATED: &str =
    "This is the same call with the same result as before; try something different.";

/// What a search that matched nothing ends with for its model: a small
/// model asked to fix `stats.py` searched for the text `stats.py`, found no
/// line holding it, and answered from memory instead of reading the file.
pub const NO_MATCH: &str = "No line of any file matches: search looks inside files, not at \
their names. To see a file whose name you know, read it.";

/// What the model reads of each message's tool result, in order: `None`
/// for a message that is not a tool result, else its text (see
/// [`tool_result_for_model`]), ending with [`REPEATED`] when the call
/// repeats the previous call of its tool (same arguments) and got the same
/// result.
pub fn tool_texts<'a>(
    messages: impl IntoIterator<Item = &'a Message>,
) -> Vec<Option<Cow<'a, str>>> {
    let mut calls: HashMap<&'a str, (&'a str, &'a Value)> = HashMap::new();
    let mut previous: HashMap<&'a str, (&'a Value, &'a str)> = HashMap::new();
    let mut texts = Vec::new();
    for message in messages {
        match message {
            Message::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    calls.insert(call.id.as_str(), (call.name.as_str(), &call.arguments));
                }
                texts.push(None);
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                ..
            } => {
                let mut text = tool_result_for_model(content, *is_error);
                if let Some(&(name, arguments)) = calls.get(call_id.as_str()) {
                    let repeated = previous
                        .get(name)
                        .is_some_and(|&(before, result)| before == arguments && result == content);
                    if repeated {
                        text = Cow::Owned(format!("{text}\n\n{REPEATED}"));
                    }
                    previous.insert(name, (arguments, content.as_str()));
                }
                texts.push(Some(text));
            }
            _ => texts.push(None),
        }
    }
    texts
}

/// `content`, a stored tool result, as its model is to read it.
pub fn tool_result_for_model(content: &str, is_error: bool) -> Cow<'_, str> {
    if is_error {
        return Cow::Borrowed(content);
    }
    match serde_json::from_str::<Value>(content) {
        Ok(Value::String(text)) => Cow::Owned(text),
        Ok(Value::Object(object)) if is_command_output(&object) => {
            Cow::Owned(command_text(&object))
        }
        Ok(Value::Object(object)) if is_empty_search(&object) => {
            Cow::Owned(format!("{content}\n\n{NO_MATCH}"))
        }
        Ok(_) => Cow::Borrowed(content),
        // A string result cut to fit (`"head\n...[N or more characters
        // omitted]...\ntail"`): each side read as the text it is.
        Err(_) => cut_string(content).map_or(Cow::Borrowed(content), Cow::Owned),
    }
}

/// Whether `object` is `run_command`'s result.
fn is_command_output(object: &Map<String, Value>) -> bool {
    object.contains_key("exit_code")
        && object.get("stdout").is_some_and(Value::is_string)
        && object.get("stderr").is_some_and(Value::is_string)
}

/// Whether `object` is the result of a search that matched nothing
/// (`{"matches": [], "total": 0, "truncated": false}`).
fn is_empty_search(object: &Map<String, Value>) -> bool {
    object.len() == 3
        && object
            .get("matches")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
        && object.get("total").and_then(Value::as_u64) == Some(0)
        && object.get("truncated").and_then(Value::as_bool) == Some(false)
}

fn command_text(object: &Map<String, Value>) -> String {
    let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
    let flag = |key: &str| object.get(key).and_then(Value::as_bool).unwrap_or(false);
    let mut head = match (
        object.get("exit_code").and_then(Value::as_i64),
        text("signal"),
    ) {
        (Some(code), _) => format!("exit code {code}"),
        (None, "") => "no exit code".to_owned(),
        (None, signal) => format!("ended by {signal}"),
    };
    if flag("timed_out") {
        head.push_str(" (timed out)");
    }
    if flag("truncated") {
        head.push_str(" (output truncated)");
    }
    let mut parts = vec![head];
    for stream in ["stdout", "stderr"] {
        let body = text(stream);
        parts.push(if body.is_empty() {
            format!("[{stream}: empty]")
        } else {
            format!("[{stream}]\n{}", body.strip_suffix('\n').unwrap_or(body))
        });
    }
    parts.join("\n")
}

/// A JSON string literal that was cut around an omission marker, read as
/// its text on both sides of the marker; `None` when it is not one.
fn cut_string(content: &str) -> Option<String> {
    let body = content.strip_prefix('"')?.strip_suffix('"')?;
    let start = body.find("\n...[")?;
    let end = body[start..].find("]...\n")? + start + "]...\n".len();
    let head = unescape_prefix(&body[..start]);
    let tail = unescape_suffix(&body[end..]);
    Some(format!("{head}{}{tail}", &body[start..end]))
}

/// The text of a JSON string's body cut at its end (an escape may be cut in
/// two: it is left out).
fn unescape_prefix(body: &str) -> String {
    for cut in 0..8.min(body.len() + 1) {
        let Some(end) = body.len().checked_sub(cut) else {
            break;
        };
        if let Some(text) = body
            .get(..end)
            .and_then(|part| serde_json::from_str::<String>(&format!("\"{part}\"")).ok())
        {
            return text;
        }
    }
    body.to_owned()
}

/// The text of a JSON string's body cut at its start.
fn unescape_suffix(body: &str) -> String {
    for cut in 0..8.min(body.len() + 1) {
        if let Some(text) = body
            .get(cut..)
            .and_then(|part| serde_json::from_str::<String>(&format!("\"{part}\"")).ok())
        {
            return text;
        }
    }
    body.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_string_result_is_its_text() {
        let stored = json!("def f():\n    \"\"\"Doc.\"\"\"\n").to_string();
        assert_eq!(
            tool_result_for_model(&stored, false),
            "def f():\n    \"\"\"Doc.\"\"\"\n"
        );
    }

    #[test]
    fn errors_and_other_values_are_as_stored() {
        assert_eq!(tool_result_for_model("\"x\"", true), "\"x\"");
        assert_eq!(
            tool_result_for_model("Invalid arguments: $", false),
            "Invalid arguments: $"
        );
        let listing = json!({"entries": [{"name": "a", "kind": "file"}]}).to_string();
        assert_eq!(tool_result_for_model(&listing, false), listing);
    }

    #[test]
    fn a_command_reads_as_its_exit_code_then_its_output() {
        let stored = json!({"exit_code": 1, "stdout": "", "stderr": "Traceback (most recent call last):\n  File \"t.py\"\n",
            "timed_out": false, "truncated": false, "sandbox": {}})
        .to_string();
        assert_eq!(
            tool_result_for_model(&stored, false),
            "exit code 1\n[stdout: empty]\n[stderr]\nTraceback (most recent call last):\n  File \"t.py\""
        );
        let killed = json!({"exit_code": null, "signal": "SIGKILL", "stdout": "x", "stderr": "",
            "timed_out": true, "truncated": false})
        .to_string();
        assert_eq!(
            tool_result_for_model(&killed, false),
            "ended by SIGKILL (timed out)\n[stdout]\nx\n[stderr: empty]"
        );
    }

    #[test]
    fn a_search_that_matched_nothing_says_where_search_looks() {
        let empty = json!({"matches": [], "total": 0, "truncated": false}).to_string();
        assert_eq!(
            tool_result_for_model(&empty, false),
            format!("{empty}\n\n{NO_MATCH}")
        );
        let found = json!({"matches": [{"path": "a.py", "line": 1, "text": "x"}], "total": 1,
            "truncated": false})
        .to_string();
        assert_eq!(tool_result_for_model(&found, false), found);
        let other = json!({"matches": [], "total": 0, "truncated": false, "more": 1}).to_string();
        assert_eq!(tool_result_for_model(&other, false), other, "another shape");
    }

    #[test]
    fn an_exact_repeat_with_the_same_result_gets_a_note() {
        use crate::harness::ToolCall;
        let call = |id: &str, path: &str| ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: json!({"path": path}),
            unparsable_arguments: None,
        };
        let messages = vec![
            Message::assistant(String::new(), vec![call("1", "a.py")]),
            Message::tool("1", "\"x\"", false),
            Message::assistant(String::new(), vec![call("2", "a.py")]),
            Message::tool("2", "\"x\"", false),
            Message::assistant(String::new(), vec![call("3", "b.py")]),
            Message::tool("3", "\"x\"", false),
            Message::assistant(String::new(), vec![call("4", "b.py")]),
            Message::tool("4", "\"y\"", false),
        ];
        let texts = tool_texts(&messages);
        assert_eq!(texts[1].as_deref(), Some("x"));
        assert_eq!(
            texts[3].as_deref(),
            Some(format!("x\n\n{REPEATED}").as_str())
        );
        assert_eq!(texts[5].as_deref(), Some("x"), "other arguments");
        assert_eq!(texts[7].as_deref(), Some("y"), "another result");
        assert!(texts[0].is_none());
    }

    #[test]
    fn a_cut_string_reads_as_text_on_both_sides() {
        let text = "line \"one\"\n".repeat(200);
        let stored = crate::harness::bound_tool_result(&json!(text).to_string(), 300);
        let read = tool_result_for_model(&stored, false);
        assert!(read.starts_with("line \"one\"\nline"), "{read}");
        assert!(read.contains("characters omitted]"), "{read}");
        assert!(!read.contains("\\n"), "no escapes left: {read}");
    }
}
