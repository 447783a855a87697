//! One model call of the loop: the context the model is sent (its window,
//! old results masked, a draft's view), the request (tools, instructions,
//! the notes' asks), and what came back, counted as a step.

use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::fallback::{self, Chain};
use super::{End, Run, draft, millis};
use crate::harness::context;
use crate::harness::events::{Emitter, EventKind};
use crate::harness::message::Message;
use crate::harness::model::{ContextView, DeltaSink, ModelError, ModelRequest, ModelResponse};
use crate::harness::usage::{Price, Usage, UsageError};
use crate::harness::{stuck, unread};

/// The longest `finish_reason` kept (providers' are a word or two).
const MAX_FINISH_REASON_CHARS: usize = 64;

/// What asking the model for its next response came to.
pub(super) enum Asked {
    /// A valid response, its step counted and its `model_end` emitted, and
    /// whether it was a draft.
    Response(ModelResponse, bool),
    /// The response was dropped (cut off at the token limit), its step
    /// counted: ask again.
    Again,
    /// The run ends.
    End(End),
}

impl Run<'_, '_> {
    /// Asks the model for its next response: the run's transcript as the
    /// model sees it now, within the context limits.
    pub(super) async fn ask_model(
        &mut self,
        token: &CancellationToken,
        deadline: Option<tokio::time::Instant>,
    ) -> Asked {
        let tools = self.harness.tools;
        if let Err(end) = self.compact_if_due(token, deadline).await {
            return Asked::End(end);
        }
        let mut selection = match self.select_context() {
            Ok(selection) => selection,
            Err(error) => return Asked::End(End::ContextLimit(error.to_string())),
        };
        if self.view.is_none() {
            selection.start = selection.start.max(draft::view_start(&self.messages));
        }
        let sent = self.sent();
        let masks: Vec<(usize, Arc<Message>)> = selection
            .masked
            .iter()
            .map(|&index| (index, Arc::new(context::mask(&sent[index]))))
            .collect();
        let draft = self.drafting();
        // A draft's prompt, with the files it names shown (never stored).
        let mut shown: Vec<Arc<Message>> = Vec::new();
        if draft && let Some(prompt) = self.draft_prompt().await {
            shown.push(Arc::new(Message::user(prompt)));
        }
        self.emitter.emit(|| EventKind::ModelStart);
        let began = Instant::now();
        // The same request goes to each profile of the chain in turn.
        let mut chain = Chain::new(self.config.fallback.as_ref());
        let response = loop {
            let deltas = Deltas(&self.emitter);
            let request = ModelRequest {
                instructions: self.instructions(draft),
                messages: if shown.is_empty() {
                    context::view(self.sent(), &selection, &masks)
                } else {
                    ContextView::new(&shown, &[])
                },
                tools: if draft { &[] } else { tools.definitions() },
                answer_now: stuck::is_stuck(&self.messages),
                must_use_tool: !draft && unread::was_noted(&self.messages),
                // Not with a draft, which is no final answer.
                output_schema: self
                    .config
                    .output
                    .as_ref()
                    .filter(|_| !draft)
                    .map(|output| &**output.schema()),
                cancel: token,
                deadline,
                traceparent: self.emitter.traceparent(),
                deltas: &deltas,
                temperature: self.config.temperature,
                cache_key: self.config.cache_key.as_deref(),
            };
            let model = chain.model(self.harness.model);
            let Some(response) = fallback::generate(model, request, token).await else {
                return Asked::End(End::Stopped);
            };
            match response {
                Err(error) if !token.is_cancelled() => match chain.next(error) {
                    Ok(fallback) => self.emitter.emit(|| fallback),
                    Err(error) => break Err(error),
                },
                response => break response,
            }
        };
        let mut response = match response {
            Ok(response) => response,
            Err(_) if token.is_cancelled() => return Asked::End(End::Stopped),
            Err(ModelError::Incomplete(why) | ModelError::TokenLimit(why)) if draft => {
                self.cut_off(&why, began, false, chain.profile());
                return Asked::Again;
            }
            Err(ModelError::TokenLimit(why)) if self.may_note_cut_off() => {
                self.cut_off(&why, began, true, chain.profile());
                return Asked::Again;
            }
            Err(error) => return Asked::End(self.model_failed(error.to_string())),
        };
        let price = chain.price(self.config.price);
        if let Err(error) = self.count_usage(response.usage.as_mut(), price) {
            return Asked::End(self.model_failed(format!("Invalid model usage: {error}")));
        }
        let duration_ms = millis(began.elapsed());
        let usage = response.usage;
        // The provider's word, bounded: it is stored with every step.
        let finish_reason = response
            .finish_reason
            .take()
            .map(|reason| reason.chars().take(MAX_FINISH_REASON_CHARS).collect());
        // The totals first, so that they are stored with the event
        // that makes them.
        self.steps += 1;
        self.tell_totals();
        let profile = chain.profile();
        self.emitter.emit(|| EventKind::ModelEnd {
            duration_ms,
            usage,
            finish_reason,
            profile,
        });

        Asked::Response(response, draft)
    }

    /// Counts a call's usage in the run's, priced at `price`: its
    /// `cost_usd` set, and what the run is known to have spent. A call
    /// without usage makes the run's cost unknown (null), and counts
    /// nothing toward its `max_cost_usd`.
    pub(super) fn count_usage(
        &mut self,
        usage: Option<&mut Usage>,
        price: Option<Price>,
    ) -> Result<(), UsageError> {
        let Some(usage) = usage else {
            self.usage.add_cost(None);
            return Ok(());
        };
        usage.cost_usd = price.map(|price| price.cost(usage));
        self.usage.add(usage)?;
        self.spent_usd += usage.cost_usd.unwrap_or(0.0);
        Ok(())
    }

    /// The end of a run whose calls cost its `max_cost_usd`: `response`,
    /// the call that reached it, is recorded, none of its tool calls run.
    pub(super) fn over_budget(&mut self, response: &ModelResponse) -> Option<End> {
        let max = self.config.limits.max_cost_usd?;
        let spent = self.spent_usd;
        if spent < max {
            return None;
        }
        let why =
            format!("the run's model calls cost ${spent:.6}, reaching its max_cost_usd of ${max}");
        let message = Message::assistant(response.content.clone(), response.tool_calls.clone());
        if let Err(end) = self.append_response(message) {
            return Some(end);
        }
        Some(End::CostLimit(why))
    }
}

struct Deltas<'e, 'o>(&'e Emitter<'o>);

impl DeltaSink for Deltas<'_, '_> {
    fn delta(&self, text: &str) {
        self.0.delta(text);
    }
}
