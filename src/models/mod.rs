//! Models the harness can drive.

pub mod http;
pub mod scripted;

pub use http::{HttpSettings, ProviderError, RetryPolicy, Secret};
pub use scripted::ScriptedModel;
