//! Models the harness can drive.

pub mod anthropic;
pub mod http;
pub mod openai;
pub mod scripted;

pub use anthropic::{AnthropicConfig, AnthropicModel};
pub use http::{HttpSettings, ProviderError, RetryPolicy, Secret};
pub use openai::{OpenAiConfig, OpenAiModel};
pub use scripted::ScriptedModel;
