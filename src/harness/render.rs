//! What a model reads of a tool's result. The transcript keeps a result as
//! its JSON serialisation (section 2 of the spec); a model reads it better as
//! text: a string result (a file's text) as that text, not a JSON literal
//! with its quotes and `\n` escapes; a command's result as its exit code,
//! then its output and errors as text (a traceback reads as one); anything
//! else as the compact JSON it already is. Errors are text already.

use std::borrow::Cow;

use serde_json::{Map, Value};

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
    fn a_cut_string_reads_as_text_on_both_sides() {
        let text = "line \"one\"\n".repeat(200);
        let stored = crate::harness::bound_tool_result(&json!(text).to_string(), 300);
        let read = tool_result_for_model(&stored, false);
        assert!(read.starts_with("line \"one\"\nline"), "{read}");
        assert!(read.contains("characters omitted]"), "{read}");
        assert!(!read.contains("\\n"), "no escapes left: {read}");
    }
}
