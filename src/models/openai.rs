//! An adapter for OpenAI's Chat Completions API and the servers that speak
//! its dialect (vLLM, Ollama, llama.cpp's server, LM Studio, OpenRouter...).
//!
//! Translation: `user` and `assistant` messages keep their roles, an
//! assistant's tool calls become `tool_calls` of type `function` whose
//! `arguments` is a JSON string, and each tool result becomes a `tool`
//! message tied to its call by `tool_call_id` (the API has no error flag; the
//! content already says what failed). Back from the API, `function.arguments`
//! is parsed; text that is not JSON becomes a recoverable tool error for that
//! call, not a failed run.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use reqwest::header::AUTHORIZATION;
use serde_json::{Value, json};
use uuid::Uuid;

use super::dialect::{Dialect, HttpModel};
use super::http::{
    ConfigError, HttpClient, HttpSettings, ProviderError, SseStream, json_error_detail,
    token_count, tool_call_from_text,
};
use crate::harness::{
    DeltaSink, Message, ModelRequest, ModelResponse, ToolCall, ToolDefinition, Usage,
};

/// Where OpenAI's own API lives; `/chat/completions` is appended.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The name this adapter gives itself in logs and errors.
const PROVIDER: &str = "openai";

/// Everything an OpenAI-compatible model needs.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    pub http: HttpSettings,
    pub model: String,
    /// Sent as `max_tokens`, which every compatible server understands.
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    /// Ask for a stream of server-sent events and forward text as it comes.
    pub stream: bool,
    /// Send a run's output schema as `response_format`.
    pub native_output_schema: bool,
    /// Send the run's `prompt_cache_key`.
    pub cache: bool,
}

impl OpenAiConfig {
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            http: HttpSettings::new(OPENAI_DEFAULT_BASE_URL),
            model: model.into(),
            max_tokens: None,
            temperature: None,
            stream: false,
            native_output_schema: true,
            cache: true,
        }
    }
}

/// A model behind a Chat Completions endpoint.
pub type OpenAiModel = HttpModel<OpenAi>;

/// The Chat Completions wire format, with the request settings of a profile.
#[derive(Debug)]
pub struct OpenAi {
    model: String,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
    native_output_schema: bool,
    cache: bool,
}

impl OpenAiModel {
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        let http = HttpClient::new(
            PROVIDER,
            &config.http,
            "/chat/completions",
            |key| (AUTHORIZATION, format!("Bearer {}", key.expose())),
            &[],
        )?;
        Ok(Self {
            http,
            dialect: OpenAi {
                model: config.model,
                max_tokens: config.max_tokens,
                temperature: config.temperature,
                native_output_schema: config.native_output_schema,
                cache: config.cache,
            },
            stream: config.stream,
        })
    }
}

#[async_trait]
impl Dialect for OpenAi {
    fn request_body(&self, request: &ModelRequest<'_>, stream: bool) -> Value {
        let mut messages = messages_json(request.messages.iter());
        if let (Some(instructions), Value::Array(messages)) = (request.instructions, &mut messages)
        {
            messages.insert(0, json!({"role": "system", "content": instructions}));
        }
        if let (true, Value::Array(messages)) = (request.answer_now, &mut messages) {
            messages.push(json!({"role": "user", "content": crate::harness::stuck::ANSWER_NOW}));
        }
        let mut body = json!({
            "model": self.model,
            "messages": messages,
        });
        // The API refuses an empty `tools` array. A model asked to answer
        // now is sent none: with them, small models call them regardless of
        // `tool_choice`.
        if !request.tools.is_empty() && !request.answer_now {
            body["tools"] = tools_json(request.tools);
            if request.must_use_tool {
                body["tool_choice"] = json!("required");
            }
        }
        // The run's output schema, as the API's own structured output; not
        // when a tool call is required, which a schema for the answer would
        // contradict.
        if let Some(schema) = request.output_schema
            && self.native_output_schema
            && !request.must_use_tool
        {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": schema, "strict": false},
            });
        }
        if let Some(max_tokens) = self.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        if let Some(temperature) = request.temperature.or(self.temperature) {
            body["temperature"] = json!(temperature);
        }
        // One key for the run's calls, which share their prefix: the
        // provider routes them to the same cache.
        if let Some(key) = request.cache_key.filter(|_| self.cache) {
            body["prompt_cache_key"] = json!(key);
        }
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    fn parse_response(
        &self,
        value: Value,
        http: &HttpClient,
    ) -> Result<ModelResponse, ProviderError> {
        parse_response(value, http)
    }

    async fn read_stream(
        &self,
        events: SseStream,
        deltas: &dyn DeltaSink,
        http: &HttpClient,
    ) -> Result<ModelResponse, ProviderError> {
        read_stream(events, deltas, http).await
    }
}

/// The transcript in Chat Completions shape.
pub fn messages_json<'a>(messages: impl Iterator<Item = &'a Message>) -> Value {
    let messages: Vec<&Message> = messages.collect();
    let texts = crate::harness::render::tool_texts(messages.iter().copied());
    let messages = messages
        .into_iter()
        .zip(texts)
        .map(|(message, text)| match message {
            // A summary is what the user's side says of what came before.
            Message::User { content } | Message::Summary { content, .. } => {
                json!({"role": "user", "content": content})
            }
            Message::Assistant {
                content,
                tool_calls,
            } if tool_calls.is_empty() => json!({"role": "assistant", "content": content}),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let calls: Vec<Value> = tool_calls.iter().map(tool_call_json).collect();
                let content = if content.is_empty() {
                    Value::Null
                } else {
                    json!(content)
                };
                json!({"role": "assistant", "content": content, "tool_calls": calls})
            }
            Message::Tool { call_id, .. } => json!({
                "role": "tool",
                "tool_call_id": call_id,
                "content": text.unwrap_or_default(),
            }),
        })
        .collect();
    Value::Array(messages)
}

fn tool_call_json(call: &ToolCall) -> Value {
    // Arguments that did not parse go back as `{}`: Ollama and vLLM refuse a
    // whole request whose earlier arguments are not JSON, and the tool error
    // answering the call already tells the model what was wrong.
    let arguments = if call.unparsable_arguments.is_some() {
        "{}".to_owned()
    } else {
        call.arguments.to_string()
    };
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    })
}

/// Tool definitions in Chat Completions shape.
pub fn tools_json(tools: &[Arc<ToolDefinition>]) -> Value {
    tools
        .iter()
        .map(|tool| {
            json!({
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            })
        })
        .collect()
}

/// A complete (non-streamed) Chat Completions response.
pub fn parse_response(value: Value, http: &HttpClient) -> Result<ModelResponse, ProviderError> {
    let invalid = |why: &str| ProviderError::InvalidResponse(why.to_owned());
    if let Some(detail) = value
        .get("error")
        .filter(|error| !error.is_null())
        .and_then(|_| json_error_detail(&value))
    {
        return Err(ProviderError::Reported {
            detail: http.scrub(&detail),
            retryable: false,
        });
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| invalid("the response has no choices"))?;
    let finish_reason = choice.get("finish_reason").and_then(Value::as_str);
    check_finish_reason(finish_reason)?;
    let message = choice
        .get("message")
        .filter(|message| message.is_object())
        .ok_or_else(|| invalid("the first choice has no message"))?;
    let mut content = content_text(message.get("content"))?;
    if content.is_empty()
        && let Some(refusal) = message.get("refusal").and_then(Value::as_str)
    {
        content = refusal.to_owned();
    }
    let mut calls = Vec::new();
    match message.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                let function = item
                    .get("function")
                    .ok_or_else(|| invalid("a tool call has no function"))?;
                let name = function
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("a tool call has no function name"))?;
                let id = item.get("id").and_then(Value::as_str).unwrap_or_default();
                let call = match function.get("arguments") {
                    None | Some(Value::Null) => tool_call_from_text(id.into(), name.into(), ""),
                    Some(Value::String(text)) => tool_call_from_text(id.into(), name.into(), text),
                    // A few servers send the object itself; it is what we want.
                    Some(other) => ToolCall::new(id, name, other.clone()),
                };
                calls.push(call);
            }
        }
        Some(_) => return Err(invalid("tool_calls is not an array")),
    }
    Ok(ModelResponse {
        content,
        tool_calls: with_unique_ids(calls),
        usage: parse_usage(value.get("usage"))?,
        finish_reason: finish_reason.map(str::to_owned),
    })
}

/// A message's `content`: a string, null, or (from some servers) an array of
/// text parts.
fn content_text(content: Option<&Value>) -> Result<String, ProviderError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect()),
        Some(_) => Err(ProviderError::InvalidResponse(
            "message content is not a string".into(),
        )),
    }
}

/// A response cut short is reported, not taken for an answer.
fn check_finish_reason(reason: Option<&str>) -> Result<(), ProviderError> {
    match reason {
        Some("length") => Err(ProviderError::TokenLimit(
            "the answer was cut off at the token limit (finish_reason `length`); raise max_tokens"
                .into(),
        )),
        Some("content_filter") => Err(ProviderError::Incomplete(
            "the provider's content filter withheld the answer (finish_reason `content_filter`)"
                .into(),
        )),
        _ => Ok(()),
    }
}

fn parse_usage(usage: Option<&Value>) -> Result<Option<Usage>, ProviderError> {
    match usage {
        None | Some(Value::Null) => Ok(None),
        Some(usage) if usage.is_object() => Ok(Some(Usage {
            input_tokens: token_count(usage, "prompt_tokens")?,
            output_tokens: token_count(usage, "completion_tokens")?,
            // Part of `prompt_tokens`, read from the prompt cache.
            cached_input_tokens: match usage.get("prompt_tokens_details") {
                Some(details) if details.is_object() => token_count(details, "cached_tokens")?,
                _ => None,
            },
            cache_write_tokens: None,
            cost_usd: None,
        })),
        Some(_) => Err(ProviderError::InvalidResponse(
            "usage is not an object".into(),
        )),
    }
}

/// Gives a fresh id to every call whose id is missing, empty or repeated in
/// the same response: some local servers omit ids, and a result must be tied
/// to exactly one call.
fn with_unique_ids(mut calls: Vec<ToolCall>) -> Vec<ToolCall> {
    let mut seen = HashSet::new();
    for call in &mut calls {
        if call.id.trim().is_empty() || !seen.insert(call.id.clone()) {
            call.id = format!("call_{}", Uuid::now_v7().simple());
            seen.insert(call.id.clone());
        }
    }
    calls
}

/// A tool call being assembled from stream chunks.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Reads a streamed answer, forwarding text as it arrives, and assembles the
/// same response a non-streamed call would have given.
async fn read_stream(
    mut events: SseStream,
    deltas: &dyn DeltaSink,
    http: &HttpClient,
) -> Result<ModelResponse, ProviderError> {
    let invalid = |why: String| ProviderError::InvalidResponse(why);
    let mut content = String::new();
    let mut calls: BTreeMap<u64, PartialCall> = BTreeMap::new();
    let mut finish_reason: Option<String> = None;
    let mut usage = None;
    let mut done = false;
    let mut forwarded = false;
    while let Some(event) = events.next(!forwarded).await? {
        if event.data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let chunk: Value = serde_json::from_str(&event.data)
            .map_err(|error| invalid(format!("a stream chunk is not valid JSON ({error})")))?;
        if chunk.get("error").is_some_and(|error| !error.is_null()) {
            let detail = json_error_detail(&chunk).unwrap_or_default();
            return Err(ProviderError::Reported {
                detail: http.scrub(&detail),
                retryable: !forwarded,
            });
        }
        if let Some(found) = parse_usage(chunk.get("usage"))? {
            usage = Some(found);
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|choices| choices.first())
        else {
            continue;
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            continue;
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            events.keep(text.len())?;
            content.push_str(text);
            deltas.delta(text);
            forwarded = true;
        }
        if let Some(items) = delta.get("tool_calls").and_then(Value::as_array) {
            for item in items {
                let index = match item.get("index").and_then(Value::as_u64) {
                    Some(index) => index,
                    // No index: a chunk with an id starts a call, one without
                    // continues the last.
                    None if item.get("id").is_some() || calls.is_empty() => {
                        calls.keys().next_back().map_or(0, |last| last + 1)
                    }
                    None => calls.keys().next_back().copied().unwrap_or(0),
                };
                let id = item.get("id").and_then(Value::as_str);
                let function = item.get("function");
                let text = |key| function.and_then(|f| f.get(key)).and_then(Value::as_str);
                let (name, arguments) = (text("name"), text("arguments"));
                // A new call counts for its own place too, so that endless
                // empty ones are refused as well.
                let new = if calls.contains_key(&index) {
                    0
                } else {
                    std::mem::size_of::<PartialCall>()
                };
                let sizes = [id, name, arguments].map(|text| text.map_or(0, str::len));
                events.keep(new + sizes.iter().sum::<usize>())?;
                let call = calls.entry(index).or_default();
                if let Some(id) = id {
                    call.id = id.to_owned();
                }
                call.name.push_str(name.unwrap_or_default());
                call.arguments.push_str(arguments.unwrap_or_default());
            }
        }
    }
    if !done && finish_reason.is_none() {
        return Err(ProviderError::Transport {
            detail: "the stream ended before the answer was complete".into(),
            retryable: !forwarded,
        });
    }
    check_finish_reason(finish_reason.as_deref())?;
    let mut tool_calls = Vec::with_capacity(calls.len());
    for call in calls.into_values() {
        if call.name.is_empty() {
            return Err(invalid("a streamed tool call has no function name".into()));
        }
        tool_calls.push(tool_call_from_text(call.id, call.name, &call.arguments));
    }
    Ok(ModelResponse {
        content,
        tool_calls: with_unique_ids(tool_calls),
        usage,
        finish_reason,
    })
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
