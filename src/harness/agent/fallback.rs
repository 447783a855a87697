//! A model call its provider could not answer goes on to the run's
//! fallback profiles in turn (SPEC section 25): the same request (tools,
//! context, limits), each profile with its own retries. The call's usage
//! and cost are the profile's that answered.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use super::config::{FallbackModel, Fallbacks};
use super::panic_message;
use crate::harness::events::EventKind;
use crate::harness::model::{Model, ModelError, ModelRequest, ModelResponse};
use crate::harness::usage::Price;

/// Asks `model`, a panic taken as its failure and the response validated;
/// `None` when `token` fires first.
pub(super) async fn generate(
    model: &dyn Model,
    request: ModelRequest<'_>,
    token: &CancellationToken,
) -> Option<Result<ModelResponse, ModelError>> {
    let outcome = tokio::select! {
        biased;
        () = token.cancelled() => return None,
        outcome = AssertUnwindSafe(model.generate(request)).catch_unwind() => outcome,
    };
    Some(
        outcome
            .unwrap_or_else(|panic| {
                Err(ModelError::Provider(format!(
                    "Model panicked: {}",
                    panic_message(&*panic)
                )))
            })
            .and_then(|response| response.validate().map(|()| response)),
    )
}

/// Where one model call stands in its run's fallback chain.
pub(super) struct Chain {
    fallbacks: Option<Arc<Fallbacks>>,
    /// 0: the run's own model; `n`: the chain's `n`-th profile.
    at: usize,
    /// Each profile left behind, with why.
    failures: Vec<String>,
}

impl Chain {
    pub(super) fn new(fallbacks: Option<&Arc<Fallbacks>>) -> Self {
        Self {
            fallbacks: fallbacks.cloned(),
            at: 0,
            failures: Vec::new(),
        }
    }

    /// The fallback that is to answer now, if the call has fallen back.
    fn current(&self) -> Option<&FallbackModel> {
        let index = self.at.checked_sub(1)?;
        self.fallbacks.as_ref()?.chain.get(index)
    }

    /// The model to ask now: `own`, the run's, or a fallback's.
    pub(super) fn model<'m>(&'m self, own: &'m dyn Model) -> &'m dyn Model {
        self.current().map_or(own, |fallback| &*fallback.model)
    }

    /// What the tokens of the model asked now cost (`own`: the run's price).
    pub(super) fn price(&self, own: Option<Price>) -> Option<Price> {
        self.current().map_or(own, |fallback| fallback.price)
    }

    /// The profile that answers, when a fallback does.
    pub(super) fn profile(&self) -> Option<String> {
        self.current().map(|fallback| fallback.profile.clone())
    }

    /// The name of the profile asked now.
    fn name(&self) -> &str {
        match (self.current(), &self.fallbacks) {
            (Some(fallback), _) => &fallback.profile,
            (None, Some(fallbacks)) => &fallbacks.from,
            (None, None) => "the run's model",
        }
    }

    /// The error of a call every profile of its chain failed, naming each
    /// and why (`why`: the last one's).
    fn each_failed(&self, why: &str) -> String {
        format!(
            "every model profile failed: {}; `{}`: {why}",
            self.failures.join("; "),
            self.name()
        )
    }

    /// After a failed call: `Ok` with the `model_fallback` event to tell
    /// when the call goes on to the next profile (its retries were spent on
    /// a failure that may pass, and the chain has one more), else the error
    /// the call ends with, naming every profile that failed it.
    pub(super) fn next(&mut self, error: ModelError) -> Result<EventKind, ModelError> {
        let next = self
            .fallbacks
            .as_ref()
            .and_then(|fallbacks| fallbacks.chain.get(self.at))
            .map(|fallback| fallback.profile.clone());
        match (error, next) {
            (ModelError::Unavailable(why), Some(to)) => {
                let from = self.name().to_owned();
                tracing::warn!(from, to, reason = %why, "model unavailable; falling back");
                self.failures.push(format!("`{from}`: {why}"));
                self.at += 1;
                Ok(EventKind::ModelFallback {
                    from,
                    to,
                    reason: why,
                })
            }
            // A cut-off answer is asked for again (from the run's own
            // profile): it names no chain.
            (error @ (ModelError::TokenLimit(_) | ModelError::Incomplete(_)), _) => Err(error),
            (error, _) if self.failures.is_empty() => Err(error),
            (ModelError::InvalidResponse(why), _) => {
                Err(ModelError::InvalidResponse(self.each_failed(&why)))
            }
            (ModelError::Unavailable(why) | ModelError::Provider(why), _) => {
                Err(ModelError::Provider(self.each_failed(&why)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::ScriptedModel;

    fn chain(names: &[&str]) -> Arc<Fallbacks> {
        Arc::new(Fallbacks {
            from: "own".into(),
            chain: names
                .iter()
                .map(|name| FallbackModel {
                    profile: (*name).into(),
                    model: Arc::new(ScriptedModel::new(Vec::new())),
                    price: None,
                })
                .collect(),
        })
    }

    #[test]
    fn only_a_failure_that_may_pass_goes_on_and_the_last_names_each() {
        let fallbacks = chain(&["b", "c"]);
        let mut at = Chain::new(Some(&fallbacks));
        assert_eq!(at.profile(), None);
        let refused = at.next(ModelError::Provider("HTTP 400".into()));
        assert_eq!(refused, Err(ModelError::Provider("HTTP 400".into())));

        let event = at.next(ModelError::Unavailable("HTTP 529".into()));
        assert_eq!(
            event,
            Ok(EventKind::ModelFallback {
                from: "own".into(),
                to: "b".into(),
                reason: "HTTP 529".into()
            })
        );
        assert_eq!(at.profile().as_deref(), Some("b"));
        let event = at.next(ModelError::Unavailable("HTTP 503".into()));
        assert!(
            matches!(event, Ok(EventKind::ModelFallback { ref from, ref to, .. }) if from == "b" && to == "c")
        );
        let last = at.next(ModelError::Unavailable("refused".into()));
        assert_eq!(
            last,
            Err(ModelError::Provider(
                "every model profile failed: `own`: HTTP 529; `b`: HTTP 503; `c`: refused".into()
            ))
        );
    }

    #[test]
    fn without_a_chain_an_unavailable_model_ends_the_call() {
        let mut at = Chain::new(None);
        let error = ModelError::Unavailable("HTTP 429".into());
        assert_eq!(at.next(error.clone()), Err(error));
    }
}
