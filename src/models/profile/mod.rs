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
//!
//! - this module: the configuration's shapes, and what a profile can do;
//! - [`resolve`]: checking a profile and turning it into adapter settings;
//! - [`prepared`]: validated profiles, ready to give each run its model.

mod loop_settings;
mod prepared;
mod resolve;

pub use loop_settings::LoopSettings;
pub use prepared::{ModelProfiles, PreparedProfile, ProfileInfo};

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::harness::Price;

/// The profile every server has unless its configuration defines one of the
/// same name.
pub const DEMO_PROFILE: &str = "demo";

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
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "RawProfile", into = "RawProfile")]
pub enum ModelProfile {
    /// An OpenAI Chat Completions compatible server.
    OpenAi(HttpProfile),
    /// Anthropic's Messages API.
    Anthropic(HttpProfile),
    /// A fixed script of responses, answered in order (fresh for each run).
    Scripted(ScriptedProfile),
}

/// A `[models.NAME]` table as written: every field of every kind. Written
/// back (for `agent-runner config`) with its header values redacted.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    kind: ProfileKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_key_env: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_base_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_max_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    script: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    native_output_schema: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    draft_first: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    check_answers: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    write_code_blocks: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    question_unchanged: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    price: Option<Price>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compaction_at: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fallback: Option<Vec<String>>,
}

impl ModelProfile {
    /// Replaces its `base_url` by what `redact` makes of it (for printing).
    pub fn redact_base_url(&mut self, redact: impl Fn(&str) -> String) {
        if let Self::OpenAi(http) | Self::Anthropic(http) = self
            && let Some(url) = &http.base_url
        {
            http.base_url = Some(redact(url));
        }
    }
}

impl From<ModelProfile> for RawProfile {
    fn from(profile: ModelProfile) -> Self {
        let kind = profile.kind();
        let mut raw = Self {
            kind,
            base_url: None,
            model: None,
            api_key_env: None,
            headers: None,
            timeout_ms: None,
            max_tokens: None,
            temperature: None,
            max_attempts: None,
            retry_base_ms: None,
            retry_max_ms: None,
            stream: None,
            script: None,
            instructions: None,
            native_output_schema: None,
            draft_first: None,
            check_answers: None,
            write_code_blocks: None,
            question_unchanged: None,
            price: profile.price(),
            cache: None,
            compaction_at: profile.compaction_at(),
            fallback: (!profile.fallback().is_empty()).then(|| profile.fallback().to_vec()),
        };
        let settings = profile.loop_settings();
        raw.draft_first = settings.draft_first;
        raw.check_answers = settings.check_answers;
        raw.write_code_blocks = settings.write_code_blocks;
        raw.question_unchanged = settings.question_unchanged;
        match profile {
            ModelProfile::Scripted(scripted) => {
                raw.script = Some(scripted.script);
                raw.instructions = scripted.instructions;
            }
            ModelProfile::OpenAi(http) | ModelProfile::Anthropic(http) => {
                raw.base_url = http.base_url;
                raw.model = http.model;
                raw.api_key_env = http.api_key_env;
                // Header values may be sensitive even when they are not the
                // key.
                raw.headers = (!http.headers.is_empty()).then(|| {
                    http.headers
                        .into_keys()
                        .map(|name| (name, crate::config::REDACTED.to_owned()))
                        .collect()
                });
                raw.timeout_ms = http.timeout_ms;
                raw.max_tokens = http.max_tokens;
                raw.temperature = http.temperature;
                raw.max_attempts = http.max_attempts;
                raw.retry_base_ms = http.retry_base_ms;
                raw.retry_max_ms = http.retry_max_ms;
                raw.stream = Some(http.stream);
                raw.cache = Some(http.cache);
                raw.instructions = http.instructions;
                raw.native_output_schema =
                    (kind == ProfileKind::OpenAi).then_some(http.native_output_schema);
            }
        }
        raw
    }
}

impl TryFrom<RawProfile> for ModelProfile {
    type Error = String;

    fn try_from(raw: RawProfile) -> Result<Self, String> {
        let kind = raw.kind;
        let loop_settings = LoopSettings {
            draft_first: raw.draft_first,
            check_answers: raw.check_answers,
            write_code_blocks: raw.write_code_blocks,
            question_unchanged: raw.question_unchanged,
        };
        if let Some(price) = &raw.price {
            price.check()?;
        }
        if let Some(at) = raw.compaction_at
            && !(at > 0.0 && at <= 1.0)
        {
            return Err(format!(
                "`compaction_at` must be a share of a run's max_context_chars above 0 and at most 1 (got {at})"
            ));
        }
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
                ("native_output_schema", raw.native_output_schema.is_some()),
                ("cache", raw.cache.is_some()),
            ];
            if let Some((field, _)) = http_fields.iter().find(|(_, present)| *present) {
                return Err(format!("`{field}` is not a setting of kind scripted"));
            }
            let script = raw.script.ok_or("`script` is required for kind scripted")?;
            return Ok(Self::Scripted(ScriptedProfile {
                script,
                instructions: raw.instructions,
                loop_settings,
                price: raw.price,
                compaction_at: raw.compaction_at,
                fallback: raw.fallback.unwrap_or_default(),
            }));
        }
        if raw.script.is_some() {
            return Err(format!("`script` is only for kind scripted, not {kind}"));
        }
        if kind == ProfileKind::Anthropic && raw.native_output_schema.is_some() {
            return Err(
                "`native_output_schema` is only for kind openai (Anthropic's Messages API is told \
                 the schema in the system prompt)"
                    .into(),
            );
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
            instructions: raw.instructions,
            native_output_schema: raw.native_output_schema.unwrap_or(true),
            loop_settings,
            cache: raw.cache.unwrap_or(true),
            price: raw.price,
            compaction_at: raw.compaction_at,
            fallback: raw.fallback.unwrap_or_default(),
        };
        Ok(match kind {
            ProfileKind::Anthropic => Self::Anthropic(profile),
            _ => Self::OpenAi(profile),
        })
    }
}

/// The settings of a profile served over HTTP.
#[derive(Clone, PartialEq)]
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
    /// The system prompt of a run of this profile that gives none.
    pub instructions: Option<String>,
    /// Send a run's output schema as the provider's own (OpenAI's
    /// `response_format`); off for servers that cannot combine it with
    /// tools. Default on.
    pub native_output_schema: bool,
    /// How the loop treats this model; unset: the server's `[runs]`.
    pub loop_settings: LoopSettings,
    /// Use the provider's prompt cache: Anthropic's `cache_control` marks
    /// on the stable prefix, OpenAI's `prompt_cache_key`. Default on.
    pub cache: bool,
    /// What its tokens cost, if priced.
    pub price: Option<Price>,
    /// Its runs compact at this share of their context unless they say
    /// otherwise (see `context.compaction`).
    pub compaction_at: Option<f64>,
    /// The profiles a model call goes to, in turn, when its retries are
    /// spent on a failure that may pass.
    pub fallback: Vec<String>,
}

impl Default for HttpProfile {
    fn default() -> Self {
        Self {
            base_url: None,
            model: None,
            api_key_env: None,
            headers: BTreeMap::new(),
            timeout_ms: None,
            max_tokens: None,
            temperature: None,
            max_attempts: None,
            retry_base_ms: None,
            retry_max_ms: None,
            stream: false,
            instructions: None,
            native_output_schema: true,
            loop_settings: LoopSettings::default(),
            cache: true,
            price: None,
            compaction_at: None,
            fallback: Vec::new(),
        }
    }
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
            .field("instructions", &self.instructions.as_ref().map(String::len))
            .field("native_output_schema", &self.native_output_schema)
            .field("loop_settings", &self.loop_settings)
            .field("cache", &self.cache)
            .field("price", &self.price)
            .field("compaction_at", &self.compaction_at)
            .field("fallback", &self.fallback)
            .finish()
    }
}

/// A scripted profile: each element is the raw JSON a provider adapter would
/// return (`{content, tool_calls?, usage?}`, plus the test knobs `delay_ms`
/// and `error`), as a TOML table or as a string of JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedProfile {
    pub script: Vec<Value>,
    /// The system prompt of a run of this profile that gives none.
    pub instructions: Option<String>,
    /// How the loop treats this model; unset: the server's `[runs]`.
    pub loop_settings: LoopSettings,
    /// What its (scripted) tokens cost, if priced.
    pub price: Option<Price>,
    /// Its runs compact at this share of their context unless they say
    /// otherwise.
    pub compaction_at: Option<f64>,
    /// The profiles a model call goes to, in turn, when it fails as a
    /// provider out of retries does.
    pub fallback: Vec<String>,
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
    /// The system prompt of a run of this profile that gives none.
    pub fn instructions(&self) -> Option<&str> {
        match self {
            Self::OpenAi(http) | Self::Anthropic(http) => http.instructions.as_deref(),
            Self::Scripted(scripted) => scripted.instructions.as_deref(),
        }
    }

    /// What its tokens cost, if the profile has a price.
    pub fn price(&self) -> Option<Price> {
        match self {
            Self::OpenAi(http) | Self::Anthropic(http) => http.price,
            Self::Scripted(scripted) => scripted.price,
        }
    }

    /// The share of their context at which its runs compact by default.
    pub fn compaction_at(&self) -> Option<f64> {
        match self {
            Self::OpenAi(http) | Self::Anthropic(http) => http.compaction_at,
            Self::Scripted(scripted) => scripted.compaction_at,
        }
    }

    /// The profiles its model calls fall back to, as written.
    pub fn fallback(&self) -> &[String] {
        match self {
            Self::OpenAi(http) | Self::Anthropic(http) => &http.fallback,
            Self::Scripted(scripted) => &scripted.fallback,
        }
    }

    /// How the loop treats this profile's model (what it leaves unset is
    /// the server's).
    pub fn loop_settings(&self) -> LoopSettings {
        match self {
            Self::OpenAi(http) | Self::Anthropic(http) => http.loop_settings,
            Self::Scripted(scripted) => scripted.loop_settings,
        }
    }

    pub fn kind(&self) -> ProfileKind {
        match self {
            Self::OpenAi(_) => ProfileKind::OpenAi,
            Self::Anthropic(_) => ProfileKind::Anthropic,
            Self::Scripted(_) => ProfileKind::Scripted,
        }
    }

    /// The built-in `demo` profile: it lists the workspace (when the run may
    /// call `list_dir`), then answers, so a run of nothing but a prompt
    /// works end to end on a fresh server.
    pub fn demo() -> Self {
        Self::Scripted(ScriptedProfile {
            instructions: None,
            loop_settings: LoopSettings::default(),
            price: None,
            compaction_at: None,
            fallback: Vec::new(),
            script: vec![
                json!({
                    "content": "",
                    "tool_calls": [{"id": "demo_call_1", "name": "list_dir", "arguments": {}}],
                    "usage": {"input_tokens": 24, "output_tokens": 12},
                    "only_with_tool": "list_dir"
                }),
                json!({
                    "content": "Hello! I am the demo model: a script, not a real model. \
                                Configure a real model profile to get real answers.",
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
}

#[cfg(test)]
mod tests;
