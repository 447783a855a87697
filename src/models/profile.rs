//! Model profiles: the `[models.NAME]` tables of the server's configuration,
//! checked once at start-up and turned into models for each run.
//!
//! ```toml
//! [models.local]
//! kind = "openai"                      # or "anthropic", "scripted"
//! base_url = "http://127.0.0.1:11434/v1"
//! model = "qwen2.5-coder"
//! api_key_env = "OPENAI_API_KEY"       # the key is read from this variable
//! ```
//!
//! A profile names the variable that holds its API key, never the key: the
//! key is read from the environment when the profile's client is built and
//! lives only in that client's request headers (marked sensitive), so it is
//! in no configuration struct, no `Debug` output, no log line and no error.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::anthropic::{
    ANTHROPIC_DEFAULT_BASE_URL, ANTHROPIC_DEFAULT_MAX_TOKENS, AnthropicConfig, AnthropicModel,
};
use super::http::{HttpSettings, RetryPolicy, Secret};
use super::openai::{OPENAI_DEFAULT_BASE_URL, OpenAiConfig, OpenAiModel};
use super::scripted::ScriptedModel;
use crate::harness::{Model, ModelResponse};

/// The profile every server has unless its configuration defines one of the
/// same name.
pub const DEMO_PROFILE: &str = "demo";

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

/// Looks up an environment variable (`std::env::var` in the server, a map in
/// tests).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads the process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// One `[models.NAME]` table, tagged by `kind`.
///
/// Read through a flat table rather than serde's internally tagged enums, so
/// that a value of the wrong type is reported at its own key.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawProfile")]
pub enum ModelProfile {
    /// An OpenAI Chat Completions compatible server.
    OpenAi(HttpProfile),
    /// Anthropic's Messages API.
    Anthropic(HttpProfile),
    /// A fixed script of responses, answered in order (fresh for each run).
    Scripted(ScriptedProfile),
}

/// A `[models.NAME]` table as written: every field of every kind.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    kind: ProfileKind,
    base_url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    timeout_ms: Option<u64>,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
    max_attempts: Option<u32>,
    retry_base_ms: Option<u64>,
    retry_max_ms: Option<u64>,
    stream: Option<bool>,
    script: Option<Vec<Value>>,
}

impl TryFrom<RawProfile> for ModelProfile {
    type Error = String;

    fn try_from(raw: RawProfile) -> Result<Self, String> {
        let kind = raw.kind;
        if kind == ProfileKind::Scripted {
            let http_fields = [
                ("base_url", raw.base_url.is_some()),
                ("model", raw.model.is_some()),
                ("api_key_env", raw.api_key_env.is_some()),
                ("headers", raw.headers.is_some()),
                ("timeout_ms", raw.timeout_ms.is_some()),
                ("max_tokens", raw.max_tokens.is_some()),
                ("temperature", raw.temperature.is_some()),
                ("max_attempts", raw.max_attempts.is_some()),
                ("retry_base_ms", raw.retry_base_ms.is_some()),
                ("retry_max_ms", raw.retry_max_ms.is_some()),
                ("stream", raw.stream.is_some()),
            ];
            if let Some((field, _)) = http_fields.iter().find(|(_, present)| *present) {
                return Err(format!("`{field}` is not a setting of kind scripted"));
            }
            let script = raw.script.ok_or("`script` is required for kind scripted")?;
            return Ok(Self::Scripted(ScriptedProfile { script }));
        }
        if raw.script.is_some() {
            return Err(format!("`script` is only for kind scripted, not {kind}"));
        }
        let profile = HttpProfile {
            base_url: raw.base_url,
            model: raw.model,
            api_key_env: raw.api_key_env,
            headers: raw.headers.unwrap_or_default(),
            timeout_ms: raw.timeout_ms,
            max_tokens: raw.max_tokens,
            temperature: raw.temperature,
            max_attempts: raw.max_attempts,
            retry_base_ms: raw.retry_base_ms,
            retry_max_ms: raw.retry_max_ms,
            stream: raw.stream.unwrap_or(false),
        };
        Ok(match kind {
            ProfileKind::Anthropic => Self::Anthropic(profile),
            _ => Self::OpenAi(profile),
        })
    }
}

/// The settings of a profile served over HTTP.
#[derive(Clone, PartialEq, Default)]
pub struct HttpProfile {
    /// Default: `https://api.openai.com/v1` (requests go to
    /// `{base_url}/chat/completions`) or `https://api.anthropic.com`
    /// (`{base_url}/v1/messages`).
    pub base_url: Option<String>,
    /// The provider's model id. Required.
    pub model: Option<String>,
    /// The environment variable holding the API key. Required for anthropic;
    /// optional for openai, as local servers need no key.
    pub api_key_env: Option<String>,
    /// Extra headers sent with every request (not credentials).
    pub headers: BTreeMap<String, String>,
    /// Limit of one attempt, in milliseconds (default 300,000).
    pub timeout_ms: Option<u64>,
    /// Longest answer, in tokens (anthropic default 4096; openai: the
    /// server's default).
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    /// Attempts per model call, the first one included (default 4, at most
    /// 10).
    pub max_attempts: Option<u32>,
    /// Ceiling of the first retry's backoff, in milliseconds (default 500);
    /// it doubles with each failure.
    pub retry_base_ms: Option<u64>,
    /// Ceiling of any backoff, in milliseconds (default 30,000).
    pub retry_max_ms: Option<u64>,
    /// Stream the answer, forwarding text as it arrives.
    pub stream: bool,
}

// Header values may be sensitive even when they are not the key: show names
// only.
impl fmt::Debug for HttpProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProfile")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("max_attempts", &self.max_attempts)
            .field("retry_base_ms", &self.retry_base_ms)
            .field("retry_max_ms", &self.retry_max_ms)
            .field("stream", &self.stream)
            .finish()
    }
}

/// A scripted profile: each element is the raw JSON a provider adapter would
/// return (`{content, tool_calls?, usage?}`, plus the test knobs `delay_ms`
/// and `error`), as a TOML table or as a string of JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedProfile {
    pub script: Vec<Value>,
}

/// The kind of a profile, as `GET /v1/models` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileKind {
    #[serde(rename = "openai")]
    OpenAi,
    Anthropic,
    Scripted,
}

impl ProfileKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Scripted => "scripted",
        }
    }
}

impl fmt::Display for ProfileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A profile that cannot be used, and why, naming the profile and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("model profile `{profile}`: {message}")]
pub struct ProfileError {
    pub profile: String,
    pub message: String,
}

impl ProfileError {
    fn new(profile: &str, message: impl Into<String>) -> Self {
        Self {
            profile: profile.to_owned(),
            message: message.into(),
        }
    }
}

impl ModelProfile {
    pub fn kind(&self) -> ProfileKind {
        match self {
            Self::OpenAi(_) => ProfileKind::OpenAi,
            Self::Anthropic(_) => ProfileKind::Anthropic,
            Self::Scripted(_) => ProfileKind::Scripted,
        }
    }

    /// The built-in `demo` profile: it lists the workspace, then answers, so
    /// a run of nothing but a prompt works end to end on a fresh server.
    pub fn demo() -> Self {
        Self::Scripted(ScriptedProfile {
            script: vec![
                json!({
                    "content": "",
                    "tool_calls": [{"id": "demo_call_1", "name": "list_dir", "arguments": {}}],
                    "usage": {"input_tokens": 24, "output_tokens": 12}
                }),
                json!({
                    "content": "Hello! I am the demo model. I looked at your workspace and \
                                everything is in order. Configure a real model profile to \
                                get real answers.",
                    "usage": {"input_tokens": 60, "output_tokens": 28}
                }),
            ],
        })
    }

    /// Checks the profile without building anything: every field in range,
    /// the key's variable set (looked up with `env`), a script whose
    /// responses are all valid. Errors name the profile and the field.
    pub fn validate(&self, name: &str, env: EnvLookup<'_>) -> Result<(), ProfileError> {
        self.resolve(name, env).map(|_| ())
    }

    /// Validates the profile and prepares it for runs: an HTTP profile gets
    /// its client (and connection pool), built once and shared by its runs;
    /// a scripted one keeps its parsed script.
    pub fn prepare(&self, name: &str, env: EnvLookup<'_>) -> Result<PreparedProfile, ProfileError> {
        let error = |message: String| ProfileError::new(name, message);
        let source = match self.resolve(name, env)? {
            Resolved::Scripted(script) => Source::Scripted(script.into()),
            Resolved::OpenAi(config) => Source::Http(Arc::new(
                OpenAiModel::new(config).map_err(|e| error(e.to_string()))?,
            )),
            Resolved::Anthropic(config) => Source::Http(Arc::new(
                AnthropicModel::new(config).map_err(|e| error(e.to_string()))?,
            )),
        };
        let model = match self {
            Self::OpenAi(profile) | Self::Anthropic(profile) => profile.model.clone(),
            Self::Scripted(_) => None,
        };
        Ok(PreparedProfile {
            kind: self.kind(),
            model,
            source,
        })
    }

    /// A model for one run, built from scratch (prefer [`ModelProfiles`],
    /// which shares an HTTP profile's client between runs).
    pub fn build(&self, name: &str, env: EnvLookup<'_>) -> Result<Arc<dyn Model>, ProfileError> {
        Ok(self.prepare(name, env)?.instantiate())
    }

    fn resolve(&self, name: &str, env: EnvLookup<'_>) -> Result<Resolved, ProfileError> {
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
                }))
            }
        }
    }
}

/// A profile checked and turned into adapter settings.
enum Resolved {
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

fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
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
            if object.remove("error").is_none() {
                ModelResponse::from_json(Value::Object(object))
                    .map_err(|e| error(e.to_string()))?;
            }
            Ok(value)
        })
        .collect()
}

/// What a model source is for a prepared profile.
#[derive(Clone)]
enum Source {
    /// A fresh scripted model per run, each starting at the top.
    Scripted(Arc<[Value]>),
    /// One stateless adapter shared by every run of the profile.
    Http(Arc<dyn Model>),
}

/// A validated profile, ready to give each run its model.
#[derive(Clone)]
pub struct PreparedProfile {
    kind: ProfileKind,
    model: Option<String>,
    source: Source,
}

impl PreparedProfile {
    pub fn kind(&self) -> ProfileKind {
        self.kind
    }

    /// The provider's model id, for HTTP profiles.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The model for one run.
    pub fn instantiate(&self) -> Arc<dyn Model> {
        match &self.source {
            Source::Scripted(script) => Arc::new(ScriptedModel::new(script.iter().cloned())),
            Source::Http(model) => Arc::clone(model),
        }
    }
}

impl fmt::Debug for PreparedProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedProfile")
            .field("kind", &self.kind)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// A profile as `GET /v1/models` lists it: no settings, no secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileInfo {
    pub name: String,
    pub kind: ProfileKind,
}

/// Every profile of the server, validated and prepared at start-up.
///
/// ```
/// use std::collections::BTreeMap;
/// use agent_runner::models::{ModelProfile, ModelProfiles, ProfileKind, process_env};
///
/// #[derive(serde::Deserialize)]
/// struct Config {
///     #[serde(default)]
///     models: BTreeMap<String, ModelProfile>,
/// }
///
/// let config: Config = toml::from_str(
///     r#"
///     [models.local]
///     kind = "openai"
///     base_url = "http://127.0.0.1:11434/v1"
///     model = "qwen2.5-coder"
///     "#,
/// )
/// .expect("a valid configuration");
/// let profiles = ModelProfiles::new(config.models, &process_env).expect("usable profiles");
/// let names: Vec<(String, ProfileKind)> =
///     profiles.list().into_iter().map(|p| (p.name, p.kind)).collect();
/// assert_eq!(
///     names,
///     [("demo".into(), ProfileKind::Scripted), ("local".into(), ProfileKind::OpenAi)]
/// );
/// // One model per run; an HTTP profile's is shared, a scripted one's fresh.
/// let model = profiles.instantiate("local").expect("a configured profile");
/// # drop(model);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ModelProfiles {
    profiles: BTreeMap<String, PreparedProfile>,
}

impl ModelProfiles {
    /// Validates and prepares every profile (the `[models]` table), adding
    /// the built-in `demo` unless the configuration defines its own. Fails on
    /// the first profile that is not usable, naming it.
    pub fn new(
        profiles: impl IntoIterator<Item = (String, ModelProfile)>,
        env: EnvLookup<'_>,
    ) -> Result<Self, ProfileError> {
        let mut prepared = BTreeMap::new();
        for (name, profile) in profiles {
            let ready = profile.prepare(&name, env)?;
            prepared.insert(name, ready);
        }
        if !prepared.contains_key(DEMO_PROFILE) {
            let demo = ModelProfile::demo().prepare(DEMO_PROFILE, env)?;
            prepared.insert(DEMO_PROFILE.to_owned(), demo);
        }
        Ok(Self { profiles: prepared })
    }

    pub fn get(&self, name: &str) -> Option<&PreparedProfile> {
        self.profiles.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.profiles.contains_key(name)
    }

    /// The model for one run of the profile `name`.
    pub fn instantiate(&self, name: &str) -> Option<Arc<dyn Model>> {
        self.get(name).map(PreparedProfile::instantiate)
    }

    /// Names and kinds, sorted by name.
    pub fn list(&self) -> Vec<ProfileInfo> {
        self.profiles
            .iter()
            .map(|(name, profile)| ProfileInfo {
                name: name.clone(),
                kind: profile.kind,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_demo_profile_is_valid_and_added_by_default() {
        ModelProfile::demo()
            .validate(DEMO_PROFILE, &no_env)
            .unwrap();
        let profiles = ModelProfiles::new([], &no_env).unwrap();
        assert_eq!(
            profiles.list(),
            vec![ProfileInfo {
                name: "demo".into(),
                kind: ProfileKind::Scripted
            }]
        );
    }

    #[test]
    fn names_are_checked() {
        for bad in ["", "-x", "a b", "ü", &"x".repeat(65)] {
            assert!(
                ModelProfile::demo().validate(bad, &no_env).is_err(),
                "{bad}"
            );
        }
        for good in ["a", "gpt-4o", "local_1.5", "9b"] {
            ModelProfile::demo().validate(good, &no_env).unwrap();
        }
    }

    #[test]
    fn scripts_are_checked_element_by_element() {
        let profile = |script: Vec<Value>| ModelProfile::Scripted(ScriptedProfile { script });
        let error = |script: Vec<Value>| {
            profile(script)
                .validate("s", &no_env)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            error(vec![]),
            "model profile `s`: `script` must hold at least one response"
        );
        assert_eq!(
            error(vec![json!({"content": "ok"}), json!({"content": 1})]),
            "model profile `s`: `script[1]`: Invalid model response: content must be a string"
        );
        assert_eq!(
            error(vec![json!("{nope")]),
            "model profile `s`: `script[0]`: not valid JSON (key must be a string at line 1 column 2)"
        );
        assert_eq!(
            error(vec![json!({"content": "", "delay_ms": -1})]),
            "model profile `s`: `script[0]`: `delay_ms` must be a nonnegative integer"
        );
        profile(vec![
            json!({"error": "boom"}),
            json!("{\"content\": \"fine\", \"delay_ms\": 5}"),
        ])
        .validate("s", &no_env)
        .unwrap();
    }
}
