//! The HTTP layer the provider adapters share: one POST per attempt, retries
//! with exponential backoff and jitter that honour `Retry-After` and the run's
//! deadline, cancellation that drops the request in flight, provider errors
//! that never carry the API key, and a parser for Server-Sent Events.
//!
//! Why a thin reqwest + serde layer rather than a provider SDK: `async-openai`
//! speaks only OpenAI's dialect, and `genai` hides the retry, timeout and
//! streaming details this module must control (cancellation mid-request, a
//! retry sleep that never passes the run's deadline, which failures are
//! transient). Each adapter is then a small translation of documented JSON
//! shapes, which the tests check against recorded provider examples.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::harness::{ModelError, ToolCall};

/// Statuses worth another attempt: rate limited (429), the provider's own
/// trouble (500, 502, 503, 504) and Anthropic's "overloaded" (529).
pub const RETRYABLE_STATUSES: [u16; 6] = [429, 500, 502, 503, 504, 529];

/// Largest response body read, so a misbehaving server cannot exhaust memory.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Longest excerpt of a provider's error text kept in a model error.
const MAX_DETAIL_CHARS: usize = 300;

/// How long an attempt may outlive the run's deadline (an adapter used
/// without the harness, whose token may not fire, still stops).
const DEADLINE_GRACE: Duration = Duration::from_millis(100);

/// How long to wait for a TCP (and TLS) connection before the attempt counts
/// as a connect failure.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An API key. It can be used but not shown: its `Debug` is redacted, it is
/// neither `Serialize` nor `Display`, and it is scrubbed from every error text
/// a provider sends back.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The key itself, for the one header that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_owned()
        } else {
            text.replace(&self.0, "[redacted]")
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// How failed attempts are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (1: never retry).
    pub max_attempts: u32,
    /// Ceiling of the first backoff; each later one doubles it.
    pub base_delay: Duration,
    /// Ceiling no backoff exceeds, however many attempts failed.
    pub max_delay: Duration,
    /// A provider asking to wait longer than this (`Retry-After`) is not
    /// waited for: the error is reported at once.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the wait after the `failures`-th failed attempt
    /// (1-based): `base_delay * 2^(failures-1)`, capped by `max_delay`.
    pub fn backoff_ceiling(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// The wait after the `failures`-th failed attempt: "equal jitter", a
    /// random point in the upper half of the ceiling, so that clients that
    /// failed together do not retry together yet each still backs off.
    pub fn backoff(&self, failures: u32) -> Duration {
        let ceiling = self.backoff_ceiling(failures);
        let half = ceiling / 2;
        let spread = u64::try_from((ceiling - half).as_micros()).unwrap_or(u64::MAX);
        half + Duration::from_micros(fastrand::u64(0..=spread))
    }
}

/// Settings of a client that are not specific to one provider.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Where the provider's API lives; the adapter appends its path.
    pub base_url: String,
    pub api_key: Option<Secret>,
    /// The variable the key came from: named in authentication errors so the
    /// operator knows what to fix, never the key.
    pub api_key_env: Option<String>,
    /// Extra headers sent with every request (an OpenRouter `HTTP-Referer`, a
    /// gateway's routing header...).
    pub headers: BTreeMap<String, String>,
    /// Limit of one attempt, from sending the request to the end of the body.
    pub timeout: Duration,
    pub retry: RetryPolicy,
}

impl HttpSettings {
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            api_key_env: None,
            headers: BTreeMap::new(),
            timeout: Duration::from_secs(300),
            retry: RetryPolicy::default(),
        }
    }
}

/// A client that cannot be built from its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Why one attempt failed, and whether another one may succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider answered with an error status.
    #[error("HTTP {status}: {detail}", status = status_text(*status))]
    Status {
        status: StatusCode,
        detail: String,
        /// How long the provider asked us to wait (`Retry-After`).
        retry_after: Option<Duration>,
    },
    /// The exchange failed below HTTP: no connection, a reset, no answer in
    /// time, or a stream that broke. Retryable unless some of the answer was
    /// already passed on (a retry would repeat it).
    #[error("{detail}")]
    Transport { detail: String, retryable: bool },
    /// The provider reported an error inside a successful response, such as
    /// an `error` event mid-stream. `overloaded` errors are worth a retry.
    #[error("{detail}")]
    Reported { detail: String, retryable: bool },
    /// The provider answered, but not with what its API documents.
    #[error("{0}")]
    InvalidResponse(String),
    /// The provider stopped before the answer was complete.
    #[error("{0}")]
    Incomplete(String),
}

impl ProviderError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Status { status, .. } => RETRYABLE_STATUSES.contains(&status.as_u16()),
            Self::Transport { retryable, .. } | Self::Reported { retryable, .. } => *retryable,
            Self::InvalidResponse(_) | Self::Incomplete(_) => false,
        }
    }

    /// The wait the provider asked for, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    fn into_model_error(self, provider: &str, attempts: u32, note: &str) -> ModelError {
        let tried = if attempts > 1 {
            format!(" (after {attempts} attempts)")
        } else {
            String::new()
        };
        match self {
            Self::InvalidResponse(why) => {
                ModelError::InvalidResponse(format!("{provider} provider: {why}"))
            }
            Self::Incomplete(why) => ModelError::Incomplete(format!("{provider} provider: {why}")),
            other => ModelError::Provider(format!("{provider} provider: {other}{tried}{note}")),
        }
    }
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None if status.as_u16() == 529 => "529 Overloaded".to_owned(),
        None => status.as_u16().to_string(),
    }
}

/// What one model call brings to the HTTP layer.
#[derive(Clone, Copy)]
pub struct CallContext<'a> {
    pub cancel: &'a CancellationToken,
    pub deadline: Option<Instant>,
}

/// One provider endpoint: a reqwest client (its connection pool shared by
/// every run of the profile), the URL, the headers (the key's marked
/// sensitive) and the retry policy.
pub struct HttpClient {
    provider: &'static str,
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    api_key: Option<Secret>,
    api_key_env: Option<String>,
    timeout: Duration,
    retry: RetryPolicy,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("provider", &self.provider)
            .field("url", &self.url.as_str())
            .field("api_key_env", &self.api_key_env)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// Builds a reqwest client with this crate's TLS setup.
pub fn build_client() -> Result<reqwest::Client, ConfigError> {
    // reqwest is built without a bundled crypto provider; ring is installed
    // as the process default. An error means one is already installed, which
    // serves as well.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|error| ConfigError(format!("cannot build an HTTP client: {error}")))
}

impl HttpClient {
    /// A client for `provider` (named in logs and errors) that POSTs to
    /// `base_url` + `path`. `auth` turns the key into its header.
    pub fn new(
        provider: &'static str,
        settings: &HttpSettings,
        path: &str,
        auth: impl FnOnce(&Secret) -> (HeaderName, String),
        default_headers: &[(HeaderName, &str)],
    ) -> Result<Self, ConfigError> {
        let url = endpoint_url(&settings.base_url, path)?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in default_headers {
            headers.insert(name.clone(), header_value(name.as_str(), value)?);
        }
        for (name, value) in &settings.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ConfigError(format!("invalid header name `{name}`")))?;
            let value = header_value(name.as_str(), value)?;
            headers.insert(name, value);
        }
        if let Some(key) = &settings.api_key {
            let (name, value) = auth(key);
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                ConfigError("the API key contains characters a header cannot carry".into())
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(Self {
            provider,
            client: build_client()?,
            url,
            headers,
            api_key: settings.api_key.clone(),
            api_key_env: settings.api_key_env.clone(),
            timeout: settings.timeout,
            retry: settings.retry,
        })
    }

    pub fn provider(&self) -> &'static str {
        self.provider
    }

    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// POSTs `body` and hands a successful response to `handle`, retrying
    /// transient failures (of the exchange or of `handle`) as the policy
    /// allows, never sleeping past the deadline, and giving up as soon as
    /// `cancel` fires (dropping the request, which closes its connection).
    pub async fn execute<T, F, Fut>(
        &self,
        body: &Value,
        context: CallContext<'_>,
        mut handle: F,
    ) -> Result<T, ModelError>
    where
        F: FnMut(reqwest::Response) -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        let body = serde_json::to_vec(body).map_err(|error| {
            ModelError::Provider(format!(
                "{} provider: cannot encode request: {error}",
                self.provider
            ))
        })?;
        let provider = self.provider;
        let max_attempts = self.retry.max_attempts.max(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let timeout = match context.deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(ModelError::Provider(format!(
                            "{provider} provider: the run's deadline passed before attempt {attempt}"
                        )));
                    }
                    // The harness fires `cancel` at the deadline; the grace
                    // lets that, not this timeout, end an attempt there, so
                    // the run ends as a timeout rather than a model error.
                    self.timeout.min(left + DEADLINE_GRACE)
                }
                None => self.timeout,
            };
            tracing::debug!(provider, attempt, "model request");
            let exchange = async {
                let response = self
                    .client
                    .post(self.url.clone())
                    .headers(self.headers.clone())
                    .body(body.clone())
                    .send()
                    .await
                    .map_err(|error| self.transport_error(&error))?;
                let status = response.status();
                if !status.is_success() {
                    return Err(self.status_error(response).await);
                }
                tracing::debug!(
                    provider,
                    attempt,
                    status = status.as_u16(),
                    "model response"
                );
                handle(response).await
            };
            let outcome = tokio::select! {
                biased;
                () = context.cancel.cancelled() => return Err(self.cancelled()),
                outcome = tokio::time::timeout(timeout, exchange) => outcome,
            };
            let error = match outcome {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(error)) => error,
                Err(_) => ProviderError::Transport {
                    detail: format!("no complete answer within {} ms", timeout.as_millis()),
                    retryable: true,
                },
            };
            let status = error.status().map(|status| status.as_u16());
            if !error.is_retryable() || attempt >= max_attempts {
                tracing::warn!(provider, attempt, status, error = %error, "model request failed");
                return Err(error.into_model_error(provider, attempt, ""));
            }
            let delay = match error.retry_after() {
                Some(asked) if asked > self.retry.max_retry_after => {
                    tracing::warn!(
                        provider,
                        attempt,
                        status,
                        retry_after_ms = asked.as_millis() as u64,
                        "model request failed; the provider asks for a longer wait than allowed"
                    );
                    let note = format!(
                        "; not retried: the provider asked to wait {} s",
                        asked.as_secs()
                    );
                    return Err(error.into_model_error(provider, attempt, &note));
                }
                Some(asked) => asked,
                None => self.retry.backoff(attempt),
            };
            if let Some(deadline) = context.deadline
                && Instant::now() + delay >= deadline
            {
                tracing::warn!(
                    provider,
                    attempt,
                    status,
                    delay_ms = delay.as_millis() as u64,
                    "model request failed; no time left to retry before the deadline"
                );
                let note = "; not retried: the run's deadline comes first";
                return Err(error.into_model_error(provider, attempt, note));
            }
            tracing::warn!(provider, attempt, max_attempts, status, delay_ms = delay.as_millis() as u64, error = %error, "model request failed; retrying");
            tokio::select! {
                biased;
                () = context.cancel.cancelled() => return Err(self.cancelled()),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    fn cancelled(&self) -> ModelError {
        tracing::debug!(provider = self.provider, "model request cancelled");
        ModelError::Provider(format!("{} provider: request cancelled", self.provider))
    }

    /// A reqwest failure before any response, described without the URL (it
    /// is configuration, but a careless one may hold a key in its query).
    fn transport_error(&self, error: &reqwest::Error) -> ProviderError {
        let what = if error.is_connect() {
            "cannot connect"
        } else if error.is_timeout() {
            "timed out"
        } else {
            "request failed"
        };
        let mut detail = format!("{what}: {}", error_chain(error));
        if let Some(key) = &self.api_key {
            detail = key.scrub(&detail);
        }
        // Nothing of the answer was seen, so another attempt cannot repeat it.
        ProviderError::Transport {
            detail,
            retryable: true,
        }
    }

    /// Turns an error response into an error naming its status and what the
    /// provider said, except for authentication failures, whose text may echo
    /// part of the key.
    async fn status_error(&self, mut response: reqwest::Response) -> ProviderError {
        let status = response.status();
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let detail = if matches!(status.as_u16(), 401 | 403) {
            match &self.api_key_env {
                Some(env) => format!("authentication failed; check the key in ${env}"),
                None => "authentication failed; the profile names no api_key_env".to_owned(),
            }
        } else {
            let body = read_body(&mut response).await.unwrap_or_default();
            self.scrub(&error_detail(&body))
        };
        ProviderError::Status {
            status,
            detail,
            retry_after,
        }
    }

    /// `text` without the key, for anything a provider sends back.
    pub fn scrub(&self, text: &str) -> String {
        match &self.api_key {
            Some(key) => key.scrub(text),
            None => text.to_owned(),
        }
    }
}

fn endpoint_url(base_url: &str, path: &str) -> Result<reqwest::Url, ConfigError> {
    let joined = format!("{}{path}", base_url.trim_end_matches('/'));
    let url = reqwest::Url::parse(&joined)
        .map_err(|error| ConfigError(format!("invalid base_url `{base_url}`: {error}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ConfigError(format!(
            "invalid base_url `{base_url}`: the scheme must be http or https"
        )));
    }
    Ok(url)
}

fn header_value(name: &str, value: &str) -> Result<HeaderValue, ConfigError> {
    HeaderValue::from_str(value)
        .map_err(|_| ConfigError(format!("invalid value for header `{name}`")))
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

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
/// both providers' shapes, else the start of the text.
pub fn error_detail(body: &[u8]) -> String {
    let detail = match serde_json::from_slice::<Value>(body) {
        Ok(value) => json_error_detail(&value).unwrap_or_else(|| value.to_string()),
        Err(_) => String::from_utf8_lossy(body).trim().to_owned(),
    };
    let detail = if detail.is_empty() {
        "no details".to_owned()
    } else {
        detail
    };
    truncate_chars(&detail, MAX_DETAIL_CHARS)
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

/// The wait a response asks for: OpenAI's `retry-after-ms`, or the standard
/// `Retry-After` as seconds or as an HTTP date.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(millis) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && millis.is_finite()
        && millis >= 0.0
    {
        return Some(Duration::from_secs_f64(millis / 1000.0));
    }
    let value = text(RETRY_AFTER.as_str())?;
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| Duration::from_secs_f64(seconds.min(u32::MAX as f64)));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
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

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the server named the event.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// An incremental Server-Sent Events parser: feed it bytes as they arrive,
/// in chunks of any size, and take the complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The last byte seen was `\r`, so a `\n` right after it ends nothing.
    after_cr: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    ready: VecDeque<SseEvent>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; lines may end with `\n`, `\r\n` or `\r`.
    pub fn push(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&String::from_utf8_lossy(&line));
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(byte);
                }
            }
        }
    }

    /// The next complete event, if any.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        self.ready.pop_front()
    }

    /// Ends the stream: a last event not followed by a blank line still
    /// counts.
    pub fn finish(&mut self) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&String::from_utf8_lossy(&line));
        }
        self.line_done("");
    }

    fn line_done(&mut self, line: &str) {
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                self.ready.push_back(SseEvent {
                    event: self.event.take(),
                    data,
                });
            }
            self.event = None;
            self.has_data = false;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
    }
}

/// The events of a streamed response body, read as they come.
pub struct SseStream {
    response: reqwest::Response,
    parser: SseParser,
    ended: bool,
}

impl SseStream {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            parser: SseParser::new(),
            ended: false,
        }
    }

    /// The next event, or `None` once the body has ended. A broken stream is
    /// a transport error, retryable only if `retryable` (nothing was passed
    /// on yet).
    pub async fn next(&mut self, retryable: bool) -> Result<Option<SseEvent>, ProviderError> {
        loop {
            if let Some(event) = self.parser.next_event() {
                return Ok(Some(event));
            }
            if self.ended {
                return Ok(None);
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.parser.push(&chunk),
                Ok(None) => {
                    self.ended = true;
                    self.parser.finish();
                }
                Err(error) => {
                    return Err(ProviderError::Transport {
                        detail: format!("the stream broke: {}", error_chain(&error)),
                        retryable,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk);
            out.extend(std::iter::from_fn(|| parser.next_event()));
        }
        parser.finish();
        out.extend(std::iter::from_fn(|| parser.next_event()));
        out
    }

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: name.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn sse_events_survive_any_chunking_and_line_ending() {
        let text = "event: message_start\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: x\ndata:y\n\nevent: ping\r\ndata: {}\r\n\r\ndata: last\rdata: line\r\rdata: é";
        let expected = vec![
            event(Some("message_start"), "{\"a\":1}"),
            event(None, "x\ny"),
            event(Some("ping"), "{}"),
            event(None, "last\nline"),
            event(None, "é"),
        ];
        assert_eq!(events(&[text.as_bytes()]), expected);
        let bytes = text.as_bytes();
        for split in 0..bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(events(&[a, b]), expected, "split at {split}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(events(&singles), expected);
    }

    #[test]
    fn sse_ignores_events_without_data_and_unknown_fields() {
        assert_eq!(
            events(&[b"event: lonely\n\nid: 3\nretry: 10\ndata\n\n"]),
            vec![event(None, "")]
        );
    }

    #[test]
    fn backoff_doubles_within_bounds_and_is_capped() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1_000),
            max_retry_after: Duration::from_secs(60),
        };
        let ceilings: Vec<u128> = (1..=6)
            .map(|n| policy.backoff_ceiling(n).as_millis())
            .collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(policy.backoff_ceiling(200), Duration::from_millis(1_000));
        for failures in 1..=8 {
            let ceiling = policy.backoff_ceiling(failures);
            for _ in 0..200 {
                let delay = policy.backoff(failures);
                assert!(delay >= ceiling / 2 && delay <= ceiling, "{delay:?}");
            }
        }
        let spread: std::collections::HashSet<Duration> =
            (0..50).map(|_| policy.backoff(3)).collect();
        assert!(spread.len() > 1, "backoff has no jitter");
    }

    #[test]
    fn retry_after_reads_seconds_milliseconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_str(value).unwrap());
            }
            map
        };
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1.5")]), now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "3"), ("retry-after-ms", "250")]),
                now
            ),
            Some(Duration::from_millis(250))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &date)]), now),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &past)]), now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")]), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn error_details_come_from_both_providers_shapes() {
        assert_eq!(
            error_detail(br#"{"error": {"message": "Rate limit reached", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}"#),
            "requests: Rate limit reached"
        );
        assert_eq!(
            error_detail(
                br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#
            ),
            "overloaded_error: Overloaded"
        );
        assert_eq!(error_detail(b"  Bad Gateway\n"), "Bad Gateway");
        assert_eq!(error_detail(b""), "no details");
        let long = "x".repeat(1000);
        assert_eq!(
            error_detail(long.as_bytes()).chars().count(),
            MAX_DETAIL_CHARS + 3
        );
    }

    #[test]
    fn secrets_do_not_show() {
        let secret = Secret::new("sk-very-secret");
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
        assert_eq!(
            secret.scrub("bad key sk-very-secret!"),
            "bad key [redacted]!"
        );
        let mut settings = HttpSettings::new("http://127.0.0.1:1/v1");
        settings.api_key = Some(secret);
        assert!(!format!("{settings:?}").contains("sk-very-secret"));
        let client = HttpClient::new(
            "openai",
            &settings,
            "/chat/completions",
            |key| {
                (
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {}", key.expose()),
                )
            },
            &[],
        )
        .unwrap();
        assert!(!format!("{client:?}").contains("sk-very-secret"));
        assert_eq!(
            client.url().as_str(),
            "http://127.0.0.1:1/v1/chat/completions"
        );
    }

    #[test]
    fn base_urls_must_be_http() {
        assert!(endpoint_url("ftp://example.com", "/x").is_err());
        assert!(endpoint_url("not a url", "/x").is_err());
        assert_eq!(
            endpoint_url("https://api.anthropic.com/", "/v1/messages")
                .unwrap()
                .as_str(),
            "https://api.anthropic.com/v1/messages"
        );
    }
}
