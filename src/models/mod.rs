//! Models the harness can drive.

pub mod http;
pub mod openai;
pub mod scripted;

pub use http::{HttpSettings, ProviderError, RetryPolicy, Secret};
pub use openai::{OpenAiConfig, OpenAiModel};
pub use scripted::ScriptedModel;
