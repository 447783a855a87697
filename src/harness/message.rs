//! The transcript's vocabulary: messages and tool calls.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a run's transcript, in the shape the API serves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    User {
        content: String,
    },
    Assistant {
        content: String,
        /// Absent when the model asked for no tool.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        call_id: String,
        content: String,
        is_error: bool,
        /// A reviewer changed the call's arguments when approving it (SPEC
        /// section 25): the result is of `arguments`, not of the proposal.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        edited: bool,
        /// The arguments that ran, when edited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<Value>,
    },
    /// A summary of the transcript's first `replaces` messages, which it
    /// stands in for in what the model is sent from here on (context
    /// compaction; every message stays in the transcript).
    Summary {
        content: String,
        replaces: usize,
    },
}

impl Message {
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self::Assistant {
            content: content.into(),
            tool_calls,
        }
    }

    pub fn tool(call_id: impl Into<String>, content: impl Into<String>, is_error: bool) -> Self {
        Self::Tool {
            call_id: call_id.into(),
            content: content.into(),
            is_error,
            edited: false,
            arguments: None,
        }
    }

    /// The tool calls of an assistant message; empty for every other role.
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Self::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }

    /// The message's JSON serialisation.
    pub fn to_json(&self) -> String {
        // A message always serialises: its only map keys are strings.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Length of the message's JSON serialisation, in characters (Unicode scalar
    /// values), computed without building the string. Context budgets are
    /// measured in these units.
    pub fn serialized_chars(&self) -> usize {
        self.serialized_size().chars
    }

    /// Length of the message's JSON serialisation in characters and in
    /// bytes, computed without building the string.
    pub fn serialized_size(&self) -> SerializedSize {
        let mut counter = SerializedSize::default();
        // Writing to a counter cannot fail and a message always serialises.
        let _ = serde_json::to_writer(&mut counter, self);
        counter
    }
}

/// How long a message's JSON is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SerializedSize {
    /// Unicode scalar values (the unit of context budgets).
    pub chars: usize,
    /// Bytes (the unit of what is stored).
    pub bytes: usize,
}

/// Characters of `text` written as a JSON string, its quotes and escapes
/// included, as serde_json writes it (`"` and `\\` escaped with a backslash,
/// as are `\n`, `\r`, `\t`, backspace and form feed; any other control
/// character as `\u00XX`; everything else as it is), counted without
/// writing it.
pub fn json_string_chars(text: &str) -> usize {
    // Whole-slice counts, which the compiler turns into vector code: this
    // runs on every instruction text and tool result.
    let bytes = text.as_bytes();
    let continuations = bytes.iter().filter(|&&b| (b as i8) < -0x40).count();
    let escaped = bytes
        .iter()
        .filter(|&&b| b < 0x20 || b == b'"' || b == b'\\')
        .count();
    let mut chars = 2 + bytes.len() - continuations + escaped;
    if escaped > 0 {
        // A control character without a short escape is `\u00XX`.
        chars += 4 * bytes
            .iter()
            .filter(|&&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x08 | 0x0c))
            .count();
    }
    chars
}

/// Counts the characters of UTF-8 output: every byte that is not a continuation
/// byte starts a character.
impl std::io::Write for SerializedSize {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.chars += buf.iter().filter(|&&b| (b as i8) >= -0x40).count();
        self.bytes += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A tool call proposed by a model. `arguments` is untrusted: it is validated
/// against the tool's schema before anything runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    /// Set by a provider adapter when the model's arguments could not even be
    /// parsed (OpenAI sends them as a JSON string). The call is then answered
    /// with a recoverable `Invalid arguments` error and `arguments` keeps the
    /// raw text the model sent.
    #[serde(skip)]
    pub unparsable_arguments: Option<String>,
}

impl ToolCall {
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            unparsable_arguments: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_serialise_in_the_transcript_shape() {
        let call = ToolCall::new("1", "hello", json!({}));
        assert_eq!(
            serde_json::to_value(Message::assistant("", vec![call])).unwrap(),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "1", "name": "hello", "arguments": {}}]})
        );
        assert_eq!(
            serde_json::to_value(Message::assistant("Done", vec![])).unwrap(),
            json!({"role": "assistant", "content": "Done"})
        );
        assert_eq!(
            serde_json::to_value(Message::tool("1", "\"Hello\"", false)).unwrap(),
            json!({"role": "tool", "call_id": "1", "content": "\"Hello\"", "is_error": false})
        );
    }

    #[test]
    fn a_strings_json_characters_are_counted_as_serde_json_writes_them() {
        for text in [
            "",
            "plain",
            "héllo wörld ✓ 🎉",
            "line\nbreak \"quoted\" back\\slash \t\r\u{8}\u{c}",
            "\u{0}\u{1}\u{1f}\u{7f}\u{80}\u{2028}",
        ] {
            let json = serde_json::to_string(text).unwrap();
            assert_eq!(json_string_chars(text), json.chars().count(), "{json}");
        }
    }

    #[test]
    fn serialized_chars_counts_characters_not_bytes() {
        for message in [
            Message::user("héllo wörld ✓ 🎉"),
            Message::tool("x", "line\nbreak \"quoted\" \u{1}", true),
            Message::assistant("", vec![ToolCall::new("1", "t", json!({"k": "ü"}))]),
        ] {
            let text = serde_json::to_string(&message).unwrap();
            assert_eq!(message.serialized_chars(), text.chars().count());
            assert_eq!(message.serialized_size().bytes, text.len());
        }
    }
}
