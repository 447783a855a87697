//! The scripted model: a list of raw provider-style responses, answered in
//! order. Tests and demos use it to drive the harness without a real model.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::harness::{Model, ModelError, ModelRequest, ModelResponse};
use crate::sync::lock;

/// Answers each call with the next element of its script.
///
/// Each element is the raw JSON a provider adapter would return
/// (`{content, tool_calls?, usage?, finish_reason?}`), validated exactly
/// like one. Test knobs are taken out of it first: `delay_ms` (wait that
/// long, honouring cancellation), `error` (fail with that message) and
/// `unavailable` (fail as a provider out of retries does, so a profile's
/// `fallback` answers). A script used up is a model error, so an unexpected
/// extra turn never passes silently.
pub struct ScriptedModel {
    script: Mutex<VecDeque<Value>>,
}

impl ScriptedModel {
    pub fn new(script: impl IntoIterator<Item = Value>) -> Self {
        Self {
            script: Mutex::new(script.into_iter().collect()),
        }
    }

    /// Responses not yet used.
    pub fn remaining(&self) -> usize {
        lock(&self.script).len()
    }
}

#[async_trait]
impl Model for ScriptedModel {
    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let next = {
            let mut script = lock(&self.script);
            // A response for a tool the run does not have is passed over.
            while script
                .front()
                .and_then(|response| response.get("only_with_tool"))
                .and_then(Value::as_str)
                .is_some_and(|tool| !request.tools.iter().any(|t| t.name == tool))
            {
                script.pop_front();
            }
            script.pop_front()
        };
        let Some(mut response) = next else {
            return Err(ModelError::Provider("Scripted model exhausted".into()));
        };
        if let Value::Object(object) = &mut response {
            object.remove("only_with_tool");
            if let Some(delay) = object.remove("delay_ms") {
                let millis = delay.as_u64().ok_or_else(|| {
                    ModelError::InvalidResponse("delay_ms must be a nonnegative integer".into())
                })?;
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(millis)) => {}
                    () = request.cancel.cancelled() => {
                        return Err(ModelError::Provider("Scripted model call cancelled".into()));
                    }
                }
            }
            if let Some(error) = object.remove("unavailable") {
                return Err(ModelError::Unavailable(match error {
                    Value::String(message) => message,
                    other => other.to_string(),
                }));
            }
            if let Some(error) = object.remove("error") {
                return Err(ModelError::Provider(match error {
                    Value::String(message) => message,
                    other => other.to_string(),
                }));
            }
        }
        ModelResponse::from_json(response)
    }
}
