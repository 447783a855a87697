//! Models the harness can drive: the scripted model, the provider adapters
//! (OpenAI-compatible Chat Completions, Anthropic Messages) over a shared
//! HTTP layer, and the profiles that name them in the server's configuration.

pub mod anthropic;
pub mod dialect;
pub mod http;
pub mod openai;
pub mod profile;
pub mod scripted;

pub use anthropic::{AnthropicConfig, AnthropicModel};
pub use dialect::{Dialect, HttpModel};
pub use http::{HttpSettings, ProviderError, RetryPolicy, Secret};
pub use openai::{OpenAiConfig, OpenAiModel};
pub use profile::{
    DEMO_PROFILE, ModelProfile, ModelProfiles, PreparedProfile, ProfileError, ProfileInfo,
    ProfileKind, process_env,
};
pub use scripted::ScriptedModel;
