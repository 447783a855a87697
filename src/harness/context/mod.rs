//! Context control: bounding tool results before they enter the transcript, and
//! choosing which part of the transcript the model sees.
//!
//! Sizes are characters of the JSON serialisation of the message array, the
//! same unit for every provider (not tokens).

use std::collections::HashSet;
use std::sync::Arc;

use super::message::{Message, json_string_chars};
use super::model::ContextView;

/// Why no valid context could be selected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("Conversation must start with a user message")]
    NoLeadingUser,
    #[error("Duplicate tool call IDs in assistant turn")]
    DuplicateCallIds,
    #[error("Orphan or duplicate tool result")]
    OrphanResult,
    #[error("Incomplete tool result batch")]
    IncompleteBatch,
    #[error(
        "Context budget of {limit} characters is too small for the required messages ({required} characters)"
    )]
    TooSmall { limit: usize, required: usize },
}

/// Bounds a tool result to `limit` characters: head and tail are kept around a
/// marker saying how much was left out. When even the marker does not fit, the
/// marker itself is cut to the limit.
pub fn bound_tool_result(content: &str, limit: usize) -> String {
    // Fast path: a byte length within the limit is a char length within it.
    if content.len() <= limit {
        return content.to_owned();
    }
    let length = content.chars().count();
    if length <= limit {
        return content.to_owned();
    }
    let marker = format!("\n...[{} or more characters omitted]...\n", length - limit);
    let marker_length = marker.chars().count();
    if marker_length >= limit {
        return marker.chars().take(limit).collect();
    }
    let remaining = limit - marker_length;
    let front = remaining.div_ceil(2);
    let back = remaining / 2;
    let front_end = content
        .char_indices()
        .nth(front)
        .map_or(content.len(), |(i, _)| i);
    let back_start = if back == 0 {
        content.len()
    } else {
        content
            .char_indices()
            .nth_back(back - 1)
            .map_or(0, |(i, _)| i)
    };
    let mut bounded = String::with_capacity(front_end + marker.len() + content.len() - back_start);
    bounded.push_str(&content[..front_end]);
    bounded.push_str(&marker);
    bounded.push_str(&content[back_start..]);
    bounded
}

/// What the model sees of a tool result masked to fit the context, for a
/// result of `chars` characters.
pub fn masked_result(chars: usize) -> String {
    format!("{MASKED_BEFORE}{chars}{MASKED_AFTER}")
}

const MASKED_BEFORE: &str = "[result omitted to fit the context: ";
const MASKED_AFTER: &str = " characters; call the tool again if you need it]";

/// The length of [`masked_result`]`(chars)`, which is ASCII, without making
/// it.
fn masked_result_len(chars: usize) -> usize {
    MASKED_BEFORE.len()
        + chars.checked_ilog10().map_or(1, |log| log as usize + 1)
        + MASKED_AFTER.len()
}

/// `message` (a tool result) masked: its content replaced by
/// [`masked_result`].
pub fn mask(message: &Message) -> Message {
    match message {
        Message::Tool {
            call_id,
            content,
            is_error,
            ..
        } => Message::tool(
            call_id.clone(),
            masked_result(content.chars().count()),
            *is_error,
        ),
        other => other.clone(),
    }
}

/// Size bookkeeping for a transcript, kept as messages are appended so that
/// selecting a context costs in proportion to what is selected, not to the
/// whole run. Each message is measured once, when appended.
#[derive(Debug, Default, Clone)]
pub struct ContextIndex {
    /// Serialised size of the first message (the user prompt).
    first_size: usize,
    /// Groups after the first message: `(index of first message, total size)`.
    /// An assistant message starts a group; its tool results join it. A user
    /// message (of a continued conversation) is a group alone.
    groups: Vec<(usize, usize)>,
    /// The group of the newest user message after the first, if any.
    newest_user: Option<usize>,
    /// The tool results that masking makes smaller, in order: `(index,
    /// characters saved by masking it)`.
    results: Vec<(usize, usize)>,
    /// Every message after the first, with its comma.
    rest: usize,
    len: usize,
}

/// A context chosen within a budget: the messages from `start` on (after
/// the first), with the tool results at `masked` (indices into the
/// transcript, in order) masked (see [`mask`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub start: usize,
    pub masked: Vec<usize>,
}

impl ContextIndex {
    /// Records a message appended to the transcript. `size` is its serialised
    /// length in characters.
    pub fn push(&mut self, message: &Message, size: usize) {
        let index = self.len;
        self.len += 1;
        if index == 0 {
            self.first_size = size;
            return;
        }
        self.rest += size + 1;
        match (message, self.groups.last_mut()) {
            (Message::Tool { content, .. }, Some(group)) => {
                group.1 += size;
                // Only results that masking makes smaller are ever masked.
                // The masked message differs in its content alone: what
                // masking saves is the difference of the two strings (both
                // measured as JSON; the masked text has nothing to escape).
                let masked = masked_result_len(content.chars().count()) + 2;
                let saved = json_string_chars(content).saturating_sub(masked);
                if saved > 0 {
                    self.results.push((index, saved));
                }
            }
            _ => {
                if matches!(message, Message::User { .. }) {
                    self.newest_user = Some(self.groups.len());
                }
                self.groups.push((index, size));
            }
        }
    }

    /// Chooses the context within `limit` characters (the JSON array's
    /// brackets and commas included). Required: the first message, and the
    /// newest user message after it with everything after that (without
    /// one, the latest group). When everything does not fit, the oldest
    /// tool results outside the newest group are masked, one by one; when
    /// that is not enough, the oldest groups are dropped too, and then the
    /// newest of the masked results that fit again are shown whole.
    /// `TooSmall` when what is required does not fit, masked.
    pub fn select(&self, limit: usize) -> Result<Selection, ContextError> {
        let everything = self.total();
        if everything <= limit {
            return Ok(Selection {
                start: self.groups.first().map_or(self.len, |group| group.0),
                masked: Vec::new(),
            });
        }
        // Masked, oldest first, outside the newest group.
        let newest = self.groups.last().map_or(self.len, |group| group.0);
        let mut used = everything;
        let mut masked = Vec::new();
        for &(index, saved) in self.results.iter().take_while(|(index, _)| *index < newest) {
            if used <= limit {
                break;
            }
            used -= saved;
            masked.push(index);
        }
        let required = self
            .newest_user
            .unwrap_or(self.groups.len().saturating_sub(1));
        // Then the oldest groups dropped, masked as they were.
        let mut first_kept = 0;
        let mut dropped_results = 0;
        while used > limit && first_kept < required {
            let end = self.groups.get(first_kept + 1).map_or(self.len, |g| g.0);
            let mut cost = self.cost(first_kept);
            while let Some(&index) = masked.get(dropped_results)
                && index < end
            {
                cost -= self.saved(index);
                dropped_results += 1;
            }
            used -= cost;
            first_kept += 1;
        }
        if used > limit {
            return Err(ContextError::TooSmall {
                limit,
                required: used,
            });
        }
        masked.drain(..dropped_results);
        // Room left over shows the newest masked results whole again.
        while let Some(&index) = masked.last() {
            let saved = self.saved(index);
            if used + saved > limit {
                break;
            }
            used += saved;
            masked.pop();
        }
        Ok(Selection {
            start: self
                .groups
                .get(first_kept)
                .map_or(self.len, |group| group.0),
            masked,
        })
    }

    /// Where the newest group starts (an assistant message with its
    /// results, or a user message after the first), if there is one.
    pub fn newest_group(&self) -> Option<usize> {
        self.groups.last().map(|group| group.0)
    }

    /// The characters of the whole transcript as a JSON array.
    pub fn total(&self) -> usize {
        self.first_size + 2 + self.rest
    }

    /// What masking the tool result at `index` saves.
    fn saved(&self, index: usize) -> usize {
        self.results
            .binary_search_by_key(&index, |(at, _)| *at)
            .map_or(0, |at| self.results[at].1)
    }

    /// A group's characters, with the comma before each of its messages.
    fn cost(&self, group: usize) -> usize {
        self.groups[group].1 + self.messages_in(group)
    }

    fn messages_in(&self, group: usize) -> usize {
        let end = self.groups.get(group + 1).map_or(self.len, |g| g.0);
        end - self.groups[group].0
    }
}

/// The pure form of context selection, for a whole transcript at once: checks
/// that it is a coherent conversation (a leading user message, every tool result
/// answering a call of the assistant turn just before it, every call answered),
/// then selects as [`ContextIndex::select`] does, masked results masked.
pub fn select_context(messages: &[Message], limit: usize) -> Result<Vec<Message>, ContextError> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    check_coherent(messages)?;
    let mut index = ContextIndex::default();
    for message in messages {
        index.push(message, message.serialized_chars());
    }
    let Selection { start, masked } = index.select(limit)?;
    let mut selected = Vec::with_capacity(1 + messages.len() - start);
    selected.push(messages[0].clone());
    for (index, message) in messages.iter().enumerate().skip(start.max(1)) {
        selected.push(match masked.binary_search(&index) {
            Ok(_) => mask(message),
            Err(_) => message.clone(),
        });
    }
    Ok(selected)
}

/// The context for a harness transcript of shared messages: `masks` holds
/// the masked forms of the selection's masked results, in order.
pub(crate) fn view<'a>(
    messages: &'a [Arc<Message>],
    selection: &Selection,
    masks: &'a [(usize, Arc<Message>)],
) -> ContextView<'a> {
    let start = selection.start.max(1);
    ContextView::new(&messages[..1], &messages[start..]).masked(start, masks)
}

fn check_coherent(messages: &[Message]) -> Result<(), ContextError> {
    if !matches!(messages[0], Message::User { .. }) {
        return Err(ContextError::NoLeadingUser);
    }
    let mut pending: HashSet<&str> = HashSet::new();
    for message in messages {
        match message {
            Message::Tool { call_id, .. } => {
                if !pending.remove(call_id.as_str()) {
                    return Err(ContextError::OrphanResult);
                }
            }
            other => {
                if !pending.is_empty() {
                    return Err(ContextError::IncompleteBatch);
                }
                for call in other.tool_calls() {
                    if !pending.insert(call.id.as_str()) {
                        return Err(ContextError::DuplicateCallIds);
                    }
                }
            }
        }
    }
    if pending.is_empty() {
        Ok(())
    } else {
        Err(ContextError::IncompleteBatch)
    }
}

#[cfg(test)]
mod tests;
