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
//!
//! - [`secret`]: the API key type, redacted everywhere;
//! - [`retry`]: the retry policy and `Retry-After`;
//! - [`error`]: provider and configuration errors;
//! - [`response`]: body readers and the small parsers adapters share;
//! - [`sse`]: the Server-Sent Events parser.

mod error;
mod response;
mod retry;
mod secret;
mod sse;

pub use error::{ConfigError, ProviderError};
pub use response::{
    MAX_BODY_BYTES, error_detail, json_error_detail, read_body, read_json, token_count,
    tool_call_from_text,
};
pub use retry::{RETRYABLE_STATUSES, RetryPolicy, retry_after};
pub use secret::Secret;
pub use sse::{SseEvent, SseParser, SseStream};

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::harness::ModelError;
use error::error_chain;

/// How long an attempt may outlive the run's deadline (an adapter used
/// without the harness, whose token may not fire, still stops).
const DEADLINE_GRACE: Duration = Duration::from_millis(100);

/// How long to wait for a TCP (and TLS) connection before the attempt counts
/// as a connect failure.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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

/// What one model call brings to the HTTP layer.
#[derive(Clone, Copy)]
pub struct CallContext<'a> {
    pub cancel: &'a CancellationToken,
    pub deadline: Option<Instant>,
    /// The W3C `traceparent` of the call's span, sent with the request.
    pub traceparent: Option<&'a str>,
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
                let mut request = self
                    .client
                    .post(self.url.clone())
                    .headers(self.headers.clone());
                if let Some(traceparent) = context.traceparent {
                    request = request.header("traceparent", traceparent);
                }
                let response = request
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
                return Err(error.into_model_error(provider, attempt, "", true));
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
                    return Err(error.into_model_error(provider, attempt, &note, true));
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
                return Err(error.into_model_error(provider, attempt, note, false));
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
            error_detail(&body, |text| self.scrub(text))
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

#[cfg(test)]
mod tests {
    use super::*;

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
