//! The provider-agnostic model contract and the validation of what a model
//! answers.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::message::{Message, ToolCall};
use super::tool::ToolDefinition;
use super::usage::{MAX_TOKEN_COUNT, Usage};

/// What a model is given for one step.
pub struct ModelRequest<'a> {
    /// The run's system prompt, sent as the provider's system message on
    /// every step; never part of the transcript.
    pub instructions: Option<&'a str>,
    /// The messages selected for context (see [`super::context`]), in order.
    pub messages: ContextView<'a>,
    pub tools: &'a [Arc<ToolDefinition>],
    /// The model is to answer now, calling no tool: the run is stuck in a
    /// loop (see [`super::stuck`]). An adapter sends no tools where its
    /// provider accepts a transcript with calls but no tools (OpenAI's
    /// dialect), and forbids their use otherwise (Anthropic); either way it
    /// ends what it sends with [`super::stuck::ANSWER_NOW`] from the user.
    pub answer_now: bool,
    /// The model is to call a tool now: it answered about a file it did
    /// not read (see [`super::unread`]). An adapter asks its provider to
    /// require a tool call (OpenAI's `tool_choice: "required"`, Anthropic's
    /// `{"type": "any"}`); never together with `answer_now`.
    pub must_use_tool: bool,
    /// The JSON Schema the run's final answer must be valid under, if it
    /// has one: an adapter whose provider takes one natively sends it
    /// (OpenAI's `response_format`), where its profile allows. The harness
    /// tells the model of it in the instructions either way.
    pub output_schema: Option<&'a Value>,
    /// Fires on client cancel and on the run's deadline. The harness also stops
    /// waiting for the model when it fires, so an adapter that ignores it is
    /// merely dropped.
    pub cancel: &'a CancellationToken,
    /// When the run's deadline passes, if it has one: an adapter that retries
    /// must not start an attempt, or sleep a backoff, beyond it.
    pub deadline: Option<tokio::time::Instant>,
    /// The W3C `traceparent` of the call's span, when traces are exported:
    /// an adapter sends it with its request.
    pub traceparent: Option<String>,
    /// Where a streaming adapter sends text as it arrives (`model_delta`).
    pub deltas: &'a dyn DeltaSink,
    /// The temperature to sample at instead of the adapter's own (an
    /// attempt of several; see [`crate::run::AttemptPolicy`]).
    pub temperature: Option<f64>,
    /// The key of the run's prompt cache, for a provider that takes one
    /// (OpenAI's `prompt_cache_key`), if the run has one.
    pub cache_key: Option<&'a str>,
}

/// Receives streamed text from a model while a step is in flight.
pub trait DeltaSink: Send + Sync {
    fn delta(&self, text: &str);
}

/// The context sent to the model: the first user message followed by the most
/// recent whole groups of the transcript. Borrowed from the transcript, never
/// copied.
#[derive(Clone, Copy)]
pub struct ContextView<'a> {
    pub(crate) first: &'a [Arc<Message>],
    pub(crate) recent: &'a [Arc<Message>],
    /// The index in the transcript of `recent`'s first message.
    offset: usize,
    /// Results of `recent` shown masked, by their index in the
    /// transcript, in order (see [`crate::harness::context::mask`]).
    masks: &'a [(usize, Arc<Message>)],
}

impl<'a> ContextView<'a> {
    pub fn new(first: &'a [Arc<Message>], recent: &'a [Arc<Message>]) -> Self {
        Self {
            first,
            recent,
            offset: first.len(),
            masks: &[],
        }
    }

    /// The same view, with the messages at the indices of `masks` (in the
    /// transcript, whose message `offset` is `recent`'s first) shown as
    /// given there.
    pub(crate) fn masked(self, offset: usize, masks: &'a [(usize, Arc<Message>)]) -> Self {
        Self {
            offset,
            masks,
            ..self
        }
    }

    pub fn len(&self) -> usize {
        self.first.len() + self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &'a Message> + 'a {
        let (offset, masks) = (self.offset, self.masks);
        let recent = self.recent.iter().enumerate().map(move |(at, message)| {
            if masks.is_empty() {
                return &**message;
            }
            match masks.binary_search_by_key(&(offset + at), |(index, _)| *index) {
                Ok(found) => &*masks[found].1,
                Err(_) => &**message,
            }
        });
        self.first.iter().map(|m| &**m).chain(recent)
    }

    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }
}

/// A model's answer for one step, already in the harness's types.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelResponse {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    /// Why the model stopped, in its provider's words (`stop`,
    /// `tool_calls`, `end_turn`, ...), where the provider says.
    pub finish_reason: Option<String>,
}

/// Why a model produced no usable response. Every variant ends the run with
/// `model_error`, but for a response cut off at the token limit, which the
/// loop asks again for once (and a draft's, which it goes on from).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The provider failed: refused the request, or was cut short.
    #[error("{0}")]
    Provider(String),
    /// The provider could not answer for a reason that may pass (429, 5xx,
    /// 529, a timeout, a refused connection), and the call's retries are
    /// spent: a profile's `fallback` may answer instead.
    #[error("{0}")]
    Unavailable(String),
    /// The provider answered, but not with a valid response envelope.
    #[error("Invalid model response: {0}")]
    InvalidResponse(String),
    /// A provider's response was cut short (by a content filter, a refusal).
    #[error("{0}")]
    Incomplete(String),
    /// A provider's response was cut off at its token limit (`max_tokens`):
    /// the harness asks once for a shorter one before it fails the run.
    #[error("{0}")]
    TokenLimit(String),
}

/// A language model, or anything that answers like one.
#[async_trait]
pub trait Model: Send + Sync {
    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError>;
}

impl ModelResponse {
    /// Parses a raw response envelope `{content, tool_calls?, usage?}`, as a
    /// scripted model or a test supplies it, checking every rule of the
    /// contract before anything can be recorded or executed.
    pub fn from_json(value: Value) -> Result<Self, ModelError> {
        let invalid = |why: &str| ModelError::InvalidResponse(why.to_owned());
        let Value::Object(mut object) = value else {
            return Err(invalid("response must be an object"));
        };
        let content = match object.remove("content") {
            Some(Value::String(content)) => content,
            _ => return Err(invalid("content must be a string")),
        };
        let tool_calls = match object.remove("tool_calls") {
            None => Vec::new(),
            Some(Value::Array(calls)) => calls
                .into_iter()
                .map(parse_tool_call)
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid("tool_calls must be an array")),
        };
        let usage = match object.remove("usage") {
            None => None,
            Some(Value::Object(usage)) => Some(parse_usage(usage)?),
            Some(_) => return Err(invalid("usage must be an object")),
        };
        let finish_reason = match object.remove("finish_reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(reason)) => Some(reason),
            Some(_) => return Err(invalid("finish_reason must be a string")),
        };
        let response = Self {
            content,
            tool_calls,
            usage,
            finish_reason,
        };
        response.validate()?;
        Ok(response)
    }

    /// Checks the invariants a typed response can still break: non-empty call
    /// ids and names, unique ids, and usage counts in range. The harness runs
    /// this on every response, whichever adapter produced it.
    pub fn validate(&self) -> Result<(), ModelError> {
        let invalid = |why: String| Err(ModelError::InvalidResponse(why));
        let mut ids = HashSet::with_capacity(self.tool_calls.len());
        for call in &self.tool_calls {
            if call.id.trim().is_empty() {
                return invalid("tool call id must be a non-empty string".into());
            }
            if call.name.trim().is_empty() {
                return invalid("tool call name must be a non-empty string".into());
            }
            if !ids.insert(call.id.as_str()) {
                return invalid(format!("duplicate tool call id: {}", call.id));
            }
        }
        if let Some(usage) = &self.usage
            && usage
                .counts()
                .into_iter()
                .flatten()
                .any(|count| count > MAX_TOKEN_COUNT)
        {
            return invalid(format!(
                "usage counts must be nonnegative integers no larger than {MAX_TOKEN_COUNT}"
            ));
        }
        Ok(())
    }
}

fn parse_tool_call(value: Value) -> Result<ToolCall, ModelError> {
    let invalid = |why: &str| ModelError::InvalidResponse(why.to_owned());
    let Value::Object(mut call) = value else {
        return Err(invalid("each tool call must be an object"));
    };
    let Some(Value::String(id)) = call.remove("id") else {
        return Err(invalid("tool call id must be a non-empty string"));
    };
    let Some(Value::String(name)) = call.remove("name") else {
        return Err(invalid("tool call name must be a non-empty string"));
    };
    let Some(arguments) = call.remove("arguments") else {
        return Err(invalid("tool call arguments are missing"));
    };
    Ok(ToolCall::new(id, name, arguments))
}

fn parse_usage(mut usage: Map<String, Value>) -> Result<Usage, ModelError> {
    let mut count = |key: &str| match usage.remove(key) {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .filter(|&n| n <= MAX_TOKEN_COUNT)
            .map(Some)
            .ok_or_else(|| {
                ModelError::InvalidResponse(format!(
                    "usage.{key} must be a nonnegative integer no larger than {MAX_TOKEN_COUNT}"
                ))
            }),
    };
    Ok(Usage {
        input_tokens: count("input_tokens")?,
        output_tokens: count("output_tokens")?,
        cached_input_tokens: count("cached_input_tokens")?,
        cache_write_tokens: count("cache_write_tokens")?,
        cost_usd: None,
    })
}

/// A sink for callers that do not stream.
pub struct NoDeltas;

impl DeltaSink for NoDeltas {
    fn delta(&self, _text: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error_of(value: Value) -> String {
        ModelResponse::from_json(value).unwrap_err().to_string()
    }

    #[test]
    fn parses_a_full_envelope() {
        let response = ModelResponse::from_json(json!({
            "content": "",
            "tool_calls": [{"id": "1", "name": "t", "arguments": {"a": 1}}],
            "usage": {"input_tokens": 3},
            "ignored": true
        }))
        .unwrap();
        assert_eq!(
            response,
            ModelResponse {
                content: String::new(),
                tool_calls: vec![ToolCall::new("1", "t", json!({"a": 1}))],
                usage: Some(Usage {
                    input_tokens: Some(3),
                    ..Usage::default()
                }),
                finish_reason: None,
            }
        );
    }

    #[test]
    fn refuses_every_malformed_envelope() {
        let cases = [
            (json!(null), "response must be an object"),
            (json!([]), "response must be an object"),
            (json!("Done"), "response must be an object"),
            (json!({}), "content must be a string"),
            (json!({"content": 1}), "content must be a string"),
            (
                json!({"content": "", "tool_calls": {}}),
                "tool_calls must be an array",
            ),
            (
                json!({"content": "", "tool_calls": null}),
                "tool_calls must be an array",
            ),
            (
                json!({"content": "", "tool_calls": [1]}),
                "each tool call must be an object",
            ),
            (
                json!({"content": "", "tool_calls": [{"id": "", "name": "t", "arguments": {}}]}),
                "tool call id must be a non-empty string",
            ),
            (
                json!({"content": "", "tool_calls": [{"id": " ", "name": "t", "arguments": {}}]}),
                "tool call id must be a non-empty string",
            ),
            (
                json!({"content": "", "tool_calls": [{"id": 1, "name": "t", "arguments": {}}]}),
                "tool call id must be a non-empty string",
            ),
            (
                json!({"content": "", "tool_calls": [{"id": "1", "name": "", "arguments": {}}]}),
                "tool call name must be a non-empty string",
            ),
            (
                json!({"content": "", "tool_calls": [{"id": "1", "arguments": {}}]}),
                "tool call name must be a non-empty string",
            ),
            (
                json!({"content": "", "tool_calls": [{"id": "1", "name": "t"}]}),
                "tool call arguments are missing",
            ),
            (
                json!({"content": "", "tool_calls": [
                    {"id": "1", "name": "t", "arguments": {}},
                    {"id": "1", "name": "t", "arguments": {}}
                ]}),
                "duplicate tool call id: 1",
            ),
            (
                json!({"content": "", "usage": {"input_tokens": -1}}),
                "usage.input_tokens must be a nonnegative integer",
            ),
            (
                json!({"content": "", "usage": {"output_tokens": 1.5}}),
                "usage.output_tokens must be a nonnegative integer",
            ),
            (
                json!({"content": "", "usage": {"output_tokens": 9007199254740992u64}}),
                "usage.output_tokens must be a nonnegative integer",
            ),
            (
                json!({"content": "", "usage": 3}),
                "usage must be an object",
            ),
        ];
        for (value, expected) in cases {
            let message = error_of(value.clone());
            assert!(
                message.starts_with(&format!("Invalid model response: {expected}")),
                "{value}: {message}"
            );
        }
    }
}
