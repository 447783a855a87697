//! An adapter for Anthropic's Messages API.
//!
//! Translation: an assistant message becomes a `text` block and one
//! `tool_use` block per call (its `input` an object, its id kept); each tool
//! result becomes a `tool_result` block of a `user` turn, with `is_error`,
//! and consecutive results (or any consecutive messages of one role) share
//! one turn, as the API requires turns to alternate. Tool definitions carry
//! their schema as `input_schema`; `max_tokens` is always sent, since the API
//! requires it.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use reqwest::header::HeaderName;
use serde_json::{Map, Value, json};

use super::dialect::{Dialect, HttpModel};
use super::http::{
    ConfigError, HttpClient, HttpSettings, ProviderError, SseStream, json_error_detail,
    token_count, tool_call_from_text,
};
use crate::harness::{
    DeltaSink, Message, ModelRequest, ModelResponse, ToolCall, ToolDefinition, Usage,
};

/// Where Anthropic's API lives; `/v1/messages` is appended.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The API version sent in `anthropic-version` (a profile's `headers` may
/// override it).
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` when a profile does not set it: the API has no default.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 4096;

/// The name this adapter gives itself in logs and errors.
const PROVIDER: &str = "anthropic";

/// Everything an Anthropic model needs.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    pub http: HttpSettings,
    pub model: String,
    pub max_tokens: u32,
    pub temperature: Option<f64>,
    /// Ask for a stream of server-sent events and forward text as it comes.
    pub stream: bool,
    /// Mark the stable prefix for the prompt cache (`cache_control`).
    pub cache: bool,
}

impl AnthropicConfig {
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            http: HttpSettings::new(ANTHROPIC_DEFAULT_BASE_URL),
            model: model.into(),
            max_tokens: ANTHROPIC_DEFAULT_MAX_TOKENS,
            temperature: None,
            stream: false,
            cache: true,
        }
    }
}

/// A model behind the Messages API.
pub type AnthropicModel = HttpModel<Anthropic>;

/// The Messages API wire format, with the request settings of a profile.
#[derive(Debug)]
pub struct Anthropic {
    model: String,
    max_tokens: u32,
    temperature: Option<f64>,
    cache: bool,
}

impl AnthropicModel {
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let http = HttpClient::new(
            PROVIDER,
            &config.http,
            "/v1/messages",
            |key| {
                (
                    HeaderName::from_static("x-api-key"),
                    key.expose().to_owned(),
                )
            },
            &[(
                HeaderName::from_static("anthropic-version"),
                ANTHROPIC_VERSION,
            )],
        )?;
        Ok(Self {
            http,
            dialect: Anthropic {
                model: config.model,
                max_tokens: config.max_tokens,
                temperature: config.temperature,
                cache: config.cache,
            },
            stream: config.stream,
        })
    }
}

#[async_trait]
impl Dialect for Anthropic {
    fn request_body(&self, request: &ModelRequest<'_>, stream: bool) -> Value {
        let mut messages = messages_json(request.messages.iter());
        if request.answer_now
            && let Some(last) = messages.as_array_mut().and_then(|turns| turns.last_mut())
        {
            // The last turn is the user's (the results of the repeated
            // step): the request joins it, as turns must alternate.
            let note = json!({"type": "text", "text": crate::harness::stuck::ANSWER_NOW});
            if let Some(blocks) = last["content"].as_array_mut() {
                blocks.push(note);
            }
        }
        let mut body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
        });
        if let Some(instructions) = request.instructions {
            body["system"] = json!(instructions);
        }
        if !request.tools.is_empty() {
            // A transcript with tool use needs its tools defined: a model
            // asked to answer now is forbidden to use them instead.
            body["tools"] = tools_json(request.tools);
            if request.answer_now {
                body["tool_choice"] = json!({"type": "none"});
            } else if request.must_use_tool {
                body["tool_choice"] = json!({"type": "any"});
            }
        }
        if let Some(temperature) = request.temperature.or(self.temperature) {
            body["temperature"] = json!(temperature);
        }
        if self.cache {
            mark_cache_breakpoints(&mut body);
        }
        if stream {
            body["stream"] = json!(true);
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

/// Marks the stable prefix for the prompt cache: the system prompt, the
/// tool definitions (their last one), and the newest message (its last
/// block), so that the next step reads everything before its new turns
/// from the cache. Three of the four breakpoints the API allows.
fn mark_cache_breakpoints(body: &mut Value) {
    let ephemeral = || json!({"type": "ephemeral"});
    if let Some(Value::String(text)) = body.get("system") {
        body["system"] = json!([{"type": "text", "text": text, "cache_control": ephemeral()}]);
    }
    let last_tool = body
        .get_mut("tools")
        .and_then(Value::as_array_mut)
        .and_then(|tools| tools.last_mut());
    if let Some(tool) = last_tool {
        tool["cache_control"] = ephemeral();
    }
    let last_block = body
        .get_mut("messages")
        .and_then(Value::as_array_mut)
        .and_then(|turns| turns.last_mut())
        .and_then(|turn| turn.get_mut("content"))
        .and_then(Value::as_array_mut)
        .and_then(|blocks| blocks.last_mut());
    if let Some(block) = last_block {
        block["cache_control"] = ephemeral();
    }
}

/// The transcript as Messages API turns.
pub fn messages_json<'a>(messages: impl Iterator<Item = &'a Message>) -> Value {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let messages: Vec<&Message> = messages.collect();
    let texts = crate::harness::render::tool_texts(messages.iter().copied());
    for (message, text) in messages.into_iter().zip(texts) {
        let (role, blocks) = match message {
            // A summary is what the user's side says of what came before.
            Message::User { content } | Message::Summary { content, .. } => {
                ("user", vec![json!({"type": "text", "text": content})])
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
                if !content.is_empty() {
                    blocks.push(json!({"type": "text", "text": content}));
                }
                blocks.extend(tool_calls.iter().map(tool_use_json));
                ("assistant", blocks)
            }
            Message::Tool {
                call_id, is_error, ..
            } => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": text.unwrap_or_default(),
                    "is_error": is_error,
                })],
            ),
        };
        // The API refuses an empty turn: an assistant message with neither
        // text nor calls has nothing to say.
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn tool_use_json(call: &ToolCall) -> Value {
    // `input` must be an object; arguments that were not one were answered
    // with an error, and `{}` stands for them here.
    let input = match &call.arguments {
        Value::Object(_) if call.unparsable_arguments.is_none() => call.arguments.clone(),
        _ => Value::Object(Map::new()),
    };
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
}

/// Tool definitions in Messages API shape.
pub fn tools_json(tools: &[Arc<ToolDefinition>]) -> Value {
    tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.parameters,
            })
        })
        .collect()
}

/// A complete (non-streamed) Messages API response.
pub fn parse_response(value: Value, http: &HttpClient) -> Result<ModelResponse, ProviderError> {
    let invalid = |why: &str| ProviderError::InvalidResponse(why.to_owned());
    if value.get("type").and_then(Value::as_str) == Some("error") {
        return Err(reported(&value, http, false));
    }
    let stop_reason = value.get("stop_reason").and_then(Value::as_str);
    check_stop_reason(stop_reason)?;
    let blocks = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("the response has no content array"))?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => content.push_str(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("a text block has no text"))?,
            ),
            Some("tool_use") => {
                let text = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            ProviderError::InvalidResponse(format!("a tool_use block has no {key}"))
                        })
                };
                let input = block.get("input").cloned().unwrap_or(json!({}));
                tool_calls.push(ToolCall::new(text("id")?, text("name")?, input));
            }
            // Thinking and server-tool blocks are not part of the answer.
            Some(_) => {}
            None => return Err(invalid("a content block has no type")),
        }
    }
    Ok(ModelResponse {
        content,
        tool_calls,
        usage: parse_usage(value.get("usage"))?,
        finish_reason: stop_reason.map(str::to_owned),
    })
}

fn reported(value: &Value, http: &HttpClient, retryable: bool) -> ProviderError {
    ProviderError::Reported {
        detail: http.scrub(&json_error_detail(value).unwrap_or_else(|| value.to_string())),
        retryable,
    }
}

/// A response cut short is reported, not taken for an answer.
fn check_stop_reason(reason: Option<&str>) -> Result<(), ProviderError> {
    let why = match reason {
        Some("max_tokens") => {
            return Err(ProviderError::TokenLimit(
                "the answer was cut off at the token limit (stop_reason `max_tokens`); raise \
                 max_tokens"
                    .into(),
            ));
        }
        Some("model_context_window_exceeded") => {
            "the answer was cut off by the model's context window (stop_reason `model_context_window_exceeded`)"
        }
        Some("refusal") => "the model declined to answer (stop_reason `refusal`)",
        Some("pause_turn") => "the provider paused the turn (stop_reason `pause_turn`)",
        _ => return Ok(()),
    };
    Err(ProviderError::Incomplete(why.into()))
}

/// Input tokens are the uncached ones plus those written to or read from the
/// prompt cache: all of them were part of the prompt.
fn parse_usage(usage: Option<&Value>) -> Result<Option<Usage>, ProviderError> {
    let Some(usage) = usage.filter(|usage| !usage.is_null()) else {
        return Ok(None);
    };
    if !usage.is_object() {
        return Err(ProviderError::InvalidResponse(
            "usage is not an object".into(),
        ));
    }
    let uncached = token_count(usage, "input_tokens")?;
    let written = token_count(usage, "cache_creation_input_tokens")?;
    let read = token_count(usage, "cache_read_input_tokens")?;
    let input = [uncached, written, read]
        .into_iter()
        .flatten()
        .reduce(u64::saturating_add);
    Ok(Some(Usage {
        input_tokens: input,
        output_tokens: token_count(usage, "output_tokens")?,
        cached_input_tokens: read,
        cache_write_tokens: written,
        cost_usd: None,
    }))
}

/// A content block being assembled from stream events.
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        /// The input given at the block's start (`{}` when it is streamed).
        input: Value,
        /// The `input_json_delta` fragments, concatenated.
        json: String,
    },
    Other,
}

/// Reads a streamed answer, forwarding text as it arrives, and assembles the
/// same response a non-streamed call would have given.
async fn read_stream(
    mut events: SseStream,
    deltas: &dyn DeltaSink,
    http: &HttpClient,
) -> Result<ModelResponse, ProviderError> {
    let invalid = |why: String| ProviderError::InvalidResponse(why);
    let mut blocks: BTreeMap<u64, Block> = BTreeMap::new();
    let mut usage: Option<Usage> = None;
    let mut stop_reason: Option<String> = None;
    let mut stopped = false;
    let mut forwarded = false;
    while let Some(event) = events.next(!forwarded).await? {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|error| invalid(format!("a stream event is not valid JSON ({error})")))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or_default();
        let index = || {
            data.get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| invalid(format!("a {kind} event has no index")))
        };
        match kind {
            "message_start" => {
                if let Some(found) = parse_usage(data.get("message").and_then(|m| m.get("usage")))?
                {
                    usage = Some(found);
                }
            }
            "content_block_start" => {
                // A block as it starts holds no more than its event.
                events.keep(event.data.len())?;
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let text = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let started = match block.get("type").and_then(Value::as_str) {
                    Some("text") => Block::Text(text("text")),
                    Some("tool_use") => Block::ToolUse {
                        id: text("id"),
                        name: text("name"),
                        input: block.get("input").cloned().unwrap_or(json!({})),
                        json: String::new(),
                    },
                    _ => Block::Other,
                };
                blocks.insert(index()?, started);
            }
            "content_block_delta" => {
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let block = blocks.get_mut(&index()?);
                match (delta.get("type").and_then(Value::as_str), block) {
                    (Some("text_delta"), Some(Block::Text(text))) => {
                        let fragment = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        if !fragment.is_empty() {
                            events.keep(fragment.len())?;
                            text.push_str(fragment);
                            deltas.delta(fragment);
                            forwarded = true;
                        }
                    }
                    (Some("input_json_delta"), Some(Block::ToolUse { json, .. })) => {
                        let fragment = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        events.keep(fragment.len())?;
                        json.push_str(fragment);
                    }
                    (Some("text_delta" | "input_json_delta"), _) => {
                        return Err(invalid(format!("a {kind} event does not match its block")));
                    }
                    // Thinking, signatures and anything newer: not ours.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    stop_reason = Some(reason.to_owned());
                }
                // Counts here are cumulative: they replace those of
                // message_start where present.
                if let Some(found) = parse_usage(data.get("usage"))? {
                    let mut merged = usage.unwrap_or_default();
                    merged.input_tokens = found.input_tokens.or(merged.input_tokens);
                    merged.output_tokens = found.output_tokens.or(merged.output_tokens);
                    merged.cached_input_tokens =
                        found.cached_input_tokens.or(merged.cached_input_tokens);
                    merged.cache_write_tokens =
                        found.cache_write_tokens.or(merged.cache_write_tokens);
                    usage = Some(merged);
                }
            }
            "message_stop" => {
                stopped = true;
                break;
            }
            "error" => {
                let transient = matches!(
                    data.get("error")
                        .and_then(|e| e.get("type"))
                        .and_then(Value::as_str),
                    Some("overloaded_error" | "api_error" | "rate_limit_error")
                );
                return Err(reported(&data, http, transient && !forwarded));
            }
            // ping, content_block_stop and event types added later.
            _ => {}
        }
    }
    if !stopped {
        return Err(ProviderError::Transport {
            detail: "the stream ended before message_stop".into(),
            retryable: !forwarded,
        });
    }
    check_stop_reason(stop_reason.as_deref())?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks.into_values() {
        match block {
            Block::Text(text) => content.push_str(&text),
            Block::ToolUse {
                id,
                name,
                input,
                json,
            } => tool_calls.push(if json.trim().is_empty() {
                ToolCall::new(id, name, input)
            } else {
                tool_call_from_text(id, name, &json)
            }),
            Block::Other => {}
        }
    }
    Ok(ModelResponse {
        content,
        tool_calls,
        usage,
        finish_reason: stop_reason,
    })
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
