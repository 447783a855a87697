//! Checking a profile, field by field, and turning it into the settings of
//! its adapter.

use std::time::Duration;

use serde_json::Value;

use crate::config::is_valid_env_name;
use crate::harness::ModelResponse;
use crate::models::anthropic::{
    ANTHROPIC_DEFAULT_BASE_URL, ANTHROPIC_DEFAULT_MAX_TOKENS, AnthropicConfig,
};
use crate::models::http::{HttpSettings, RetryPolicy, Secret};
use crate::models::openai::{OPENAI_DEFAULT_BASE_URL, OpenAiConfig};

use super::{EnvLookup, HttpProfile, ModelProfile, ProfileError, ProfileKind, ScriptedProfile};

/// Attempts a profile may ask for, the first one included.
const MAX_ATTEMPTS_LIMIT: u32 = 10;

/// Headers that carry credentials: a key belongs in the environment, not in
/// the configuration file.
const CREDENTIAL_HEADERS: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
];

impl ModelProfile {
    /// Checks every field; errors name the profile and the field.
    pub(super) fn resolve(&self, name: &str, env: EnvLookup<'_>) -> Result<Resolved, ProfileError> {
        let error = |message: String| ProfileError::new(name, message);
        if !is_valid_profile_name(name) {
            return Err(error(
                "the name must start with a letter or digit and use only letters, digits, `_`, `-` and `.` (at most 64)".into(),
            ));
        }
        match self {
            Self::Scripted(profile) => Ok(Resolved::Scripted(resolve_script(name, profile)?)),
            Self::OpenAi(profile) => {
                let http = resolve_http(name, self.kind(), profile, OPENAI_DEFAULT_BASE_URL, env)?;
                Ok(Resolved::OpenAi(OpenAiConfig {
                    http,
                    model: required_model(name, self.kind(), profile)?,
                    max_tokens: profile.max_tokens,
                    temperature: profile.temperature,
                    stream: profile.stream,
                    native_output_schema: profile.native_output_schema,
                    cache: profile.cache,
                }))
            }
            Self::Anthropic(profile) => {
                let http =
                    resolve_http(name, self.kind(), profile, ANTHROPIC_DEFAULT_BASE_URL, env)?;
                Ok(Resolved::Anthropic(AnthropicConfig {
                    http,
                    model: required_model(name, self.kind(), profile)?,
                    max_tokens: profile.max_tokens.unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS),
                    temperature: profile.temperature,
                    stream: profile.stream,
                    cache: profile.cache,
                }))
            }
        }
    }
}

/// A profile checked and turned into adapter settings.
pub(super) enum Resolved {
    Scripted(Vec<Value>),
    OpenAi(OpenAiConfig),
    Anthropic(AnthropicConfig),
}

fn is_valid_profile_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn required_model(
    name: &str,
    kind: ProfileKind,
    profile: &HttpProfile,
) -> Result<String, ProfileError> {
    match profile.model.as_deref().map(str::trim) {
        Some(model) if !model.is_empty() => Ok(model.to_owned()),
        _ => Err(ProfileError::new(
            name,
            format!("`model` is required for kind {kind} (the provider's model id)"),
        )),
    }
}

fn resolve_http(
    name: &str,
    kind: ProfileKind,
    profile: &HttpProfile,
    default_base_url: &str,
    env: EnvLookup<'_>,
) -> Result<HttpSettings, ProfileError> {
    let error = |message: String| Err(ProfileError::new(name, message));
    let base_url = profile.base_url.as_deref().unwrap_or(default_base_url);
    match reqwest::Url::parse(base_url) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
        _ => {
            return error(format!(
                "`base_url` must be an http or https URL, not `{base_url}`"
            ));
        }
    }
    required_model(name, kind, profile)?;
    let api_key = match profile.api_key_env.as_deref() {
        None if kind == ProfileKind::Anthropic => {
            return error(
                "`api_key_env` is required for kind anthropic: name the environment variable that holds the key".into(),
            );
        }
        None => None,
        Some(var) if !is_valid_env_name(var) => {
            return error(format!(
                "`api_key_env` must be an environment variable name, not `{var}`"
            ));
        }
        Some(var) => match env(var) {
            Some(key) if !key.trim().is_empty() => Some(Secret::new(key.trim())),
            _ => {
                return error(format!(
                    "`api_key_env`: the environment variable {var} is not set or is empty"
                ));
            }
        },
    };
    for (header, value) in &profile.headers {
        let lower = header.to_ascii_lowercase();
        if CREDENTIAL_HEADERS.contains(&lower.as_str()) {
            return error(format!(
                "`headers.{header}`: credentials come from the variable named by `api_key_env`, not from the configuration"
            ));
        }
        if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
            return error(format!("`headers.{header}` is not a valid header name"));
        }
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            return error(format!(
                "`headers.{header}` has a value a header cannot carry"
            ));
        }
    }
    if profile.timeout_ms == Some(0) {
        return error("`timeout_ms` must be at least 1".into());
    }
    if profile.max_tokens == Some(0) {
        return error("`max_tokens` must be at least 1".into());
    }
    if let Some(temperature) = profile.temperature
        && !(0.0..=2.0).contains(&temperature)
    {
        return error(format!(
            "`temperature` must be between 0 and 2, not {temperature}"
        ));
    }
    let mut retry = RetryPolicy::default();
    if let Some(attempts) = profile.max_attempts {
        if !(1..=MAX_ATTEMPTS_LIMIT).contains(&attempts) {
            return error(format!(
                "`max_attempts` must be between 1 and {MAX_ATTEMPTS_LIMIT}, not {attempts}"
            ));
        }
        retry.max_attempts = attempts;
    }
    if let Some(base) = profile.retry_base_ms {
        if base == 0 {
            return error("`retry_base_ms` must be at least 1".into());
        }
        retry.base_delay = Duration::from_millis(base);
    }
    if let Some(max) = profile.retry_max_ms {
        retry.max_delay = Duration::from_millis(max);
    }
    if retry.max_delay < retry.base_delay {
        return error("`retry_max_ms` must not be smaller than `retry_base_ms`".into());
    }
    Ok(HttpSettings {
        base_url: base_url.to_owned(),
        api_key,
        api_key_env: profile.api_key_env.clone(),
        headers: profile.headers.clone(),
        timeout: profile
            .timeout_ms
            .map_or(HttpSettings::new("").timeout, Duration::from_millis),
        retry,
    })
}

/// Parses string elements as JSON and checks every response as the harness
/// would, so a broken script fails at start-up rather than mid-run.
fn resolve_script(name: &str, profile: &ScriptedProfile) -> Result<Vec<Value>, ProfileError> {
    if profile.script.is_empty() {
        return Err(ProfileError::new(
            name,
            "`script` must hold at least one response",
        ));
    }
    profile
        .script
        .iter()
        .enumerate()
        .map(|(index, element)| {
            let error = |why: String| ProfileError::new(name, format!("`script[{index}]`: {why}"));
            let value = match element {
                Value::String(text) => serde_json::from_str(text)
                    .map_err(|e| error(format!("not valid JSON ({e})")))?,
                other => other.clone(),
            };
            let Value::Object(mut object) = value.clone() else {
                return Err(error("a response must be an object".into()));
            };
            if let Some(delay) = object.remove("delay_ms")
                && delay.as_u64().is_none()
            {
                return Err(error("`delay_ms` must be a nonnegative integer".into()));
            }
            let fails = object.remove("error").is_some();
            if !(fails | object.remove("unavailable").is_some()) {
                ModelResponse::from_json(Value::Object(object))
                    .map_err(|e| error(e.to_string()))?;
            }
            Ok(value)
        })
        .collect()
}
