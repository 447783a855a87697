//! Reading a provider's response: bounded bodies, error details, token
//! counts and tool call arguments.

use serde_json::Value;

use super::ProviderError;
use super::error::error_chain;
use crate::harness::ToolCall;

/// Most bytes of a response held at once, so a misbehaving server cannot
/// exhaust memory: a whole body, or of a streamed one the event being read
/// and the answer assembled so far.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Longest excerpt of a provider's error text kept in a model error.
const MAX_DETAIL_CHARS: usize = 300;

/// Reads a whole body, refusing one larger than [`MAX_BODY_BYTES`].
pub async fn read_body(response: &mut reqwest::Response) -> Result<Vec<u8>, ProviderError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| ProviderError::Transport {
            detail: format!("reading the response failed: {}", error_chain(&error)),
            retryable: true,
        })?
    {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ProviderError::InvalidResponse(format!(
                "response body larger than {MAX_BODY_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads a whole body as JSON.
pub async fn read_json(response: &mut reqwest::Response) -> Result<Value, ProviderError> {
    let body = read_body(response).await?;
    serde_json::from_slice(&body).map_err(|error| {
        ProviderError::InvalidResponse(format!("response body is not valid JSON ({error})"))
    })
}

/// The useful part of an error body: `error.message` (with `error.type`) in
/// both providers' shapes, else the start of the text; `scrub`bed (the key
/// taken out) before it is cut, so that a key across the cut cannot leave
/// its start behind.
pub fn error_detail(body: &[u8], scrub: impl Fn(&str) -> String) -> String {
    let detail = match serde_json::from_slice::<Value>(body) {
        Ok(value) => json_error_detail(&value).unwrap_or_else(|| value.to_string()),
        Err(_) => String::from_utf8_lossy(body).trim().to_owned(),
    };
    let detail = if detail.is_empty() {
        "no details".to_owned()
    } else {
        detail
    };
    truncate_chars(&scrub(&detail), MAX_DETAIL_CHARS)
}

/// `error.message` with `error.type` (or `error.code`) before it, from an
/// OpenAI or Anthropic error object.
pub fn json_error_detail(value: &Value) -> Option<String> {
    let error = value.get("error")?;
    if let Some(text) = error.as_str() {
        return Some(text.to_owned());
    }
    let message = error.get("message").and_then(Value::as_str);
    let kind = error
        .get("type")
        .or_else(|| error.get("code"))
        .and_then(|kind| match kind {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            _ => None,
        });
    match (kind, message) {
        (Some(kind), Some(message)) => Some(format!("{kind}: {message}")),
        (None, Some(message)) => Some(message.to_owned()),
        (Some(kind), None) => Some(kind),
        (None, None) => Some(error.to_string()),
    }
}

fn truncate_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// A token count from a provider's usage object: absent or null is `None`,
/// anything but a nonnegative integer is an invalid response.
pub fn token_count(usage: &Value, key: &str) -> Result<Option<u64>, ProviderError> {
    match usage.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| {
            ProviderError::InvalidResponse(format!(
                "usage.{key} is not a nonnegative integer: {value}"
            ))
        }),
    }
}

/// A tool call whose arguments arrived as JSON text. Text that does not parse
/// is kept as a string and flagged, so the harness answers the call with a
/// recoverable `Invalid arguments` error and the model can try again. Empty
/// text (some servers send it for a call without arguments) means `{}`.
pub fn tool_call_from_text(id: String, name: String, text: &str) -> ToolCall {
    if text.trim().is_empty() {
        return ToolCall::new(id, name, Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(arguments) => ToolCall::new(id, name, arguments),
        Err(error) => ToolCall {
            id,
            name,
            arguments: Value::String(text.to_owned()),
            unparsable_arguments: Some(format!("arguments are not valid JSON ({error})")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn as_is(text: &str) -> String {
        text.to_owned()
    }

    #[test]
    fn error_details_come_from_both_providers_shapes() {
        assert_eq!(
            error_detail(
                br#"{"error": {"message": "Rate limit reached", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}"#,
                as_is
            ),
            "requests: Rate limit reached"
        );
        assert_eq!(
            error_detail(
                br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
                as_is
            ),
            "overloaded_error: Overloaded"
        );
        assert_eq!(error_detail(b"  Bad Gateway\n", as_is), "Bad Gateway");
        assert_eq!(error_detail(b"", as_is), "no details");
        let long = "x".repeat(1000);
        assert_eq!(
            error_detail(long.as_bytes(), as_is).chars().count(),
            MAX_DETAIL_CHARS + 3
        );
    }

    #[test]
    fn a_key_across_the_cut_leaves_nothing_of_itself() {
        let key = "sk-TOPSECRETKEY0123456789";
        // The key starts a few characters before the cut.
        let body = format!("{}{key} and more", "x".repeat(MAX_DETAIL_CHARS - 10));
        let detail = error_detail(body.as_bytes(), |text| text.replace(key, "[redacted]"));
        assert!(!detail.contains("sk-TOP"), "{detail}");
        assert!(detail.contains("[redac"), "{detail}");
    }
}
