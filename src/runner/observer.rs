//! The observer the service gives every run: it turns each event into one
//! [`NewEvent`] (its JSON made once) and hands it to the store's writer,
//! which stores it and then publishes it to the run's subscribers. It never
//! waits, and it never rewrites what the harness reported.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use chrono::{SecondsFormat, Utc};
use uuid::Uuid;

use super::LiveRun;
use crate::harness::{Event, EventKind, Message, Observer, ObserverError, Outcome, Totals};
use crate::metrics::Metrics;
use crate::run::{Run, format_time};
use crate::store::writer::Pause;
use crate::store::{Finish, LiveEvent, NewEvent, Store};
use crate::sync::lock;
use crate::telemetry::{RunAttributes, RunSpans, Telemetry};

/// What a run stopped because its records could not be stored is told.
pub const STORAGE_REFUSED: &str =
    "Storage refused the run's records for too long (the disk may be full); the run was stopped";

pub(super) struct RunObserver {
    live: Arc<LiveRun>,
    /// The tools it may call once its MCP servers listed theirs, when
    /// that differs from what it asked for (told before its `run_start`,
    /// which may come before the store's copy has them).
    tools: OnceLock<Vec<String>>,
    /// Its model's metrics label: the profile, or the provider of an
    /// inline model (a run's model never changes).
    profile: String,
    /// What its tool calls are counted under (see [`tool_label`]).
    labels: ToolLabels,
    /// Whether it has a webhook (its ends and pauses go to the outbox).
    webhook: bool,
    store: Store,
    metrics: Arc<Metrics>,
    /// Transcript messages recorded so far: the next message's position.
    messages: AtomicU32,
    /// The last sequence seen, so the service can continue the sequence.
    last_sequence: AtomicU64,
    /// The outcome the run ended with, once its `run_end` was handed over.
    ended: OnceLock<Outcome>,
    /// The run's `actions_required`, held back until the harness has
    /// returned the pause's checkpoint, to be stored with it.
    pausing: Mutex<Option<NewEvent>>,
    /// What waits for the run's next event, to be stored with it.
    next: Mutex<ForNext>,
    /// Whether the run's `run_end` waits for [`RunObserver::release_end`].
    holding_end: AtomicBool,
    /// The held `run_end`, and its outcome.
    held_end: Mutex<Option<(NewEvent, Outcome)>>,
    /// The spans of this execution of the run, when traces are exported.
    spans: Option<RunSpans>,
    /// How its changes are counted as it ends, once its tools are built.
    watch: OnceLock<super::changes::ChangesWatch>,
    /// Its changes, counted as it ended.
    changes: OnceLock<crate::repo::Changes>,
}

impl RunObserver {
    /// The observer of a run whose transcript holds `messages` messages and
    /// whose last event is `last_sequence` (both 0 for a new run).
    pub(super) fn new(
        live: Arc<LiveRun>,
        store: Store,
        metrics: Arc<Metrics>,
        messages: u32,
        last_sequence: u64,
    ) -> Self {
        // What never changes of the run, read once.
        let (profile, webhook, labels) = store
            .live()
            .read(live.id, |run| {
                let profile = run
                    .model
                    .profile
                    .clone()
                    .unwrap_or_else(|| run.model.provider.clone());
                let client = run.client_tools.iter().map(|tool| tool.name.clone());
                let labels = ToolLabels {
                    tools: run.tools.clone(),
                    client: client.collect(),
                };
                (profile, run.webhook.is_some(), labels)
            })
            .unwrap_or_default();
        Self {
            live,
            tools: OnceLock::new(),
            labels,
            webhook,
            profile,
            store,
            metrics,
            messages: AtomicU32::new(messages),
            last_sequence: AtomicU64::new(last_sequence),
            ended: OnceLock::new(),
            pausing: Mutex::new(None),
            next: Mutex::new(ForNext::default()),
            holding_end: AtomicBool::new(false),
            held_end: Mutex::new(None),
            spans: None,
            watch: OnceLock::new(),
            changes: OnceLock::new(),
        }
    }

    /// With spans of this execution made in `telemetry`, if it exports
    /// them: a child of the run's trace, resumed if the run has events
    /// already.
    pub(super) fn traced(mut self, telemetry: &Telemetry) -> Self {
        if !telemetry.is_on() {
            return self;
        }
        let resumed = self.last_sequence.load(Ordering::Acquire) > 0;
        let tenant = self.live.tenant.0.clone();
        self.spans = self
            .read(|run| {
                let attributes = RunAttributes {
                    run_id: run.id.to_string(),
                    tenant,
                    provider: run.model.provider.clone(),
                    model: run
                        .model
                        .name
                        .clone()
                        .or_else(|| run.model.profile.clone())
                        .unwrap_or_else(|| run.model.provider.clone()),
                    resumed,
                };
                telemetry.run(&run.trace(), attributes)
            })
            .flatten();
        self
    }

    /// The tools the run may call, once its MCP servers listed theirs.
    pub(super) fn set_tools(&self, tools: Vec<String>) {
        let _ = self.tools.set(tools);
    }

    /// Reads the run as stored so far (the store's copy of a live run).
    fn read<R>(&self, read: impl FnOnce(&Run) -> R) -> Option<R> {
        self.store.live().read(self.live.id, read)
    }

    /// Counts the run's changes with `watch` as it ends.
    pub(super) fn watch_changes(&self, watch: super::changes::ChangesWatch) {
        let _ = self.watch.set(watch);
    }

    /// Its changes are these (a run that ends before its tools are built
    /// changed nothing, or nothing that can be told).
    pub(super) fn set_changes(&self, changes: crate::repo::Changes) {
        let _ = self.changes.set(changes);
    }

    /// Holds the run's `run_end` back until [`RunObserver::release_end`]:
    /// for a run with something to end before its end may be told (its MCP
    /// servers).
    pub(super) fn hold_end(&self, hold: bool) {
        self.holding_end.store(hold, Ordering::Release);
    }

    /// Hands a held `run_end` to the writer (nothing if none is held), and
    /// stops holding.
    pub(super) fn release_end(&self) {
        self.holding_end.store(false, Ordering::Release);
        let held = lock(&self.held_end).take();
        if let Some((event, outcome)) = held {
            self.store.writer().append(event);
            let _ = self.ended.set(outcome);
        }
    }

    /// Hands the held-back `actions_required` to the writer with `pause`,
    /// the run's state as it pauses. `false` when there is none.
    pub(super) fn pause(&self, pause: Pause) -> bool {
        let event = lock(&self.pausing).take();
        let Some(mut event) = event else {
            return false;
        };
        event.pause = Some(Box::new(pause));
        self.store.writer().append(event);
        true
    }

    /// The status of the run's `run_end`, once it was emitted.
    pub(super) fn ended(&self) -> Option<Outcome> {
        self.ended.get().copied()
    }

    /// Ends a run the harness did not (or could not) end: one cancelled while
    /// queued, or one whose model or tools could not be set up. Its counters
    /// stay as stored (a resumed run's are not zero).
    pub(super) fn end_without_harness(&self, status: Outcome, error: Option<String>) {
        let (steps, tool_calls, usage) = self
            .read(|run| (run.steps, run.tool_calls, run.usage))
            .unwrap_or_default();
        let event = Event {
            run_id: self.live.id,
            sequence: self.last_sequence.load(Ordering::Acquire) + 1,
            timestamp: Utc::now(),
            kind: EventKind::RunEnd {
                status,
                steps,
                tool_calls,
                usage,
                answer: None,
                error,
                output: None,
            },
        };
        let _ = self.on_event(&event);
    }

    /// Tells an event of the run's own that no harness emits (a run of
    /// attempts: its start, its attempts' starts and ends, its end), next
    /// in its sequence.
    pub(super) fn emit(&self, kind: EventKind) {
        let event = Event {
            run_id: self.live.id,
            sequence: self.last_sequence.load(Ordering::Acquire) + 1,
            timestamp: Utc::now(),
            kind,
        };
        if let Err(error) = self.on_event(&event) {
            tracing::error!(%error, "an event of the run could not be told");
        }
    }

    /// The `traceparent` of its tool call `call_id`'s span, while it is
    /// open and traces are exported.
    pub(super) fn tool_traceparent(&self, call_id: &str) -> Option<String> {
        self.spans.as_ref()?.tool_traceparent(call_id)
    }

    /// Whether the run has told any event (a run taken up again has).
    pub(super) fn has_begun(&self) -> bool {
        self.last_sequence.load(Ordering::Acquire) > 0
    }

    /// A `run_start` event with what the run starts with: its model, its
    /// limits and its tools (from its start: with its MCP servers').
    fn run_start_json(&self, event: &Event) -> Result<String, serde_json::Error> {
        let mut body = serde_json::to_value(event)?;
        let started = self.read(|run| {
            let tools = self.tools.get().unwrap_or(&run.tools);
            Ok::<_, serde_json::Error>([
                ("model", serde_json::to_value(&run.model)?),
                ("limits", serde_json::to_value(run.limits)?),
                ("tools", serde_json::to_value(tools)?),
            ])
        });
        if let (Some(started), Some(object)) = (started, body.as_object_mut()) {
            for (key, value) in started? {
                object.insert(key.into(), value);
            }
        }
        serde_json::to_string(&body)
    }

    fn count(&self, kind: &EventKind) {
        let metrics = &self.metrics;
        match kind {
            EventKind::ModelEnd {
                duration_ms,
                usage,
                profile,
                ..
            } => {
                // A fallback's call counts under the profile that answered.
                let profile = profile.as_deref().unwrap_or(&self.profile);
                metrics.model_call(profile, *duration_ms);
                if let Some(usage) = usage {
                    metrics.usage(&self.live.tenant.0, profile, usage);
                }
            }
            EventKind::ModelError { .. } => metrics.model_error(&self.profile),
            EventKind::ModelFallback { from, to, .. } => metrics.model_fallback(from, to),
            EventKind::ToolEnd {
                name,
                duration_ms,
                is_error,
                ..
            } => {
                // Labels are bounded by the server's configuration: a
                // built-in tool by name, an MCP tool by its server, a
                // client's tool as `client`, anything else a model names
                // as `unknown`.
                let tools = self.tools.get().unwrap_or(&self.labels.tools);
                let label = tool_label(tools, &self.labels.client, name);
                metrics.tool_call(&label, *is_error, *duration_ms);
            }
            _ => {}
        }
    }
}

impl Observer for RunObserver {
    fn ending(&self) -> futures_util::future::BoxFuture<'_, ()> {
        Box::pin(async {
            if let Some(watch) = self.watch.get()
                && let Some(changes) = watch.count().await
            {
                let _ = self.changes.set(changes);
            }
        })
    }

    fn traceparent(&self) -> Option<String> {
        self.spans.as_ref().map(RunSpans::traceparent)
    }

    fn last_sequence(&self) -> u64 {
        self.last_sequence.load(Ordering::Acquire)
    }

    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        self.last_sequence.store(event.sequence, Ordering::Release);
        self.count(&event.kind);
        if let Some(spans) = &self.spans {
            spans.on_event(&event.kind);
        }
        let mut message = None;
        let mut finish = None;
        match &event.kind {
            EventKind::Message { json, .. } => {
                let position = self.messages.fetch_add(1, Ordering::AcqRel);
                message = Some((position, Arc::clone(json)));
            }
            EventKind::RunEnd {
                status,
                steps,
                tool_calls,
                usage,
                answer,
                error,
                output,
            } => {
                if self.ended.get().is_some() {
                    return Err("a second run_end was refused".into());
                }
                // PostgreSQL's text holds no NUL (a model's answer, a
                // tool's output quoted in an error may have one): both
                // engines keep U+FFFD in its place.
                let answer = answer.as_deref().map(storable_text);
                let error = error.as_deref().map(storable_text);
                finish = Some(Box::new(Finish {
                    tenant: self.live.tenant.0.clone(),
                    status: *status,
                    answer,
                    error,
                    steps: *steps,
                    tool_calls: *tool_calls,
                    usage: *usage,
                    finished_at: format_time(&event.timestamp),
                    finished: event.timestamp,
                    output: output.clone(),
                    changes: self.changes.get().copied(),
                    webhook: self.webhook,
                }));
            }
            _ => {}
        }
        let outcome = finish.as_ref().map(|finish| finish.status);
        let mut new = NewEvent {
            run_id: self.live.id,
            sequence: event.sequence,
            kind: event.kind.type_name(),
            body: match event.kind {
                EventKind::RunStart => self.run_start_json(event)?,
                _ => event_json(event)?,
            }
            .into(),
            message,
            finish,
            pause: None,
            progress: None,
            first: None,
        };
        {
            let mut next = lock(&self.next);
            new.progress = next.totals.take();
            new.first = next.answer.take().map(Box::new);
            if is_answer(&event.kind) {
                next.answer = Some(new);
                return Ok(());
            }
        }
        if let Some(outcome) = outcome
            && self.holding_end.load(Ordering::Acquire)
        {
            *lock(&self.held_end) = Some((new, outcome));
            return Ok(());
        }
        if matches!(event.kind, EventKind::ActionsRequired { .. }) {
            // The harness's last event before it returns the checkpoint.
            *lock(&self.pausing) = Some(new);
            return Ok(());
        }
        self.store.writer().append(new);
        // Recorded once handed over: a run whose end never reached the
        // writer has no `ended`, and its task closes its channel itself.
        if let Some(outcome) = outcome {
            let _ = self.ended.set(outcome);
        }
        Ok(())
    }

    fn recorded(&self) -> futures_util::future::BoxFuture<'_, bool> {
        Box::pin(self.store.writer().barrier())
    }

    fn on_progress(&self, _run_id: Uuid, totals: &Totals) {
        lock(&self.next).totals = Some(*totals);
    }

    fn on_delta(&self, run_id: Uuid, text: &str) {
        #[derive(serde::Serialize)]
        struct Delta<'a> {
            run_id: Uuid,
            timestamp: String,
            #[serde(rename = "type")]
            kind: &'static str,
            text: &'a str,
        }
        let body = serde_json::to_string(&Delta {
            run_id,
            timestamp: format_time(&Utc::now()),
            kind: "model_delta",
            text,
        });
        if let Ok(body) = body {
            self.store.live().publish(
                run_id,
                Arc::new(LiveEvent {
                    sequence: None,
                    after: self.last_sequence.load(Ordering::Acquire),
                    kind: "model_delta",
                    body: body.into(),
                }),
            );
        }
    }
}

/// What an observer holds for a run's next event.
#[derive(Default)]
struct ForNext {
    /// Totals told just before the event that records them (see
    /// [`Observer::on_progress`]), stored with it.
    totals: Option<Totals>,
    /// An answer's `message` (an assistant message without tool calls),
    /// held until the event after it, to be stored with it (see
    /// [`NewEvent::first`]).
    answer: Option<NewEvent>,
}

/// Whether `kind` appends an answer: an assistant message without tool
/// calls, which the harness follows at once with a note questioning it or
/// with the run's end.
fn is_answer(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Message { message, .. }
        if matches!(&**message, Message::Assistant { .. }) && message.tool_calls().is_empty())
}

/// `text` with every NUL replaced by U+FFFD.
fn storable_text(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// A run's tools and client tools, by name: what [`tool_label`] needs.
#[derive(Debug, Default)]
struct ToolLabels {
    tools: Vec<String>,
    client: Vec<String>,
}

/// The metrics label of a call of tool `name` of a run that may call
/// `tools` and has the client tools `client`.
fn tool_label(tools: &[String], client: &[String], name: &str) -> String {
    if !tools.iter().any(|tool| tool == name) {
        let client = client.iter().any(|tool| tool == name);
        return if client { "client" } else { "unknown" }.into();
    }
    match name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
    {
        Some((server, _)) => format!("mcp__{server}"),
        None => name.to_owned(),
    }
}

/// The event's JSON. A `message` event reuses the JSON the harness made of
/// its message rather than serialising the message again.
fn event_json(event: &Event) -> Result<String, serde_json::Error> {
    if let EventKind::AttemptStart { .. }
    | EventKind::AttemptEnd { .. }
    | EventKind::SubrunStart { .. }
    | EventKind::SubrunEnd { .. } = &event.kind
    {
        // An attempt's event names the attempt's run as its `run_id` (SPEC
        // section 27), in place of the run whose event it is: one key.
        return serde_json::to_value(event).and_then(|value| serde_json::to_string(&value));
    }
    let EventKind::Message { json, .. } = &event.kind else {
        return serde_json::to_string(event);
    };
    if json.is_empty() {
        return serde_json::to_string(event);
    }
    #[derive(serde::Serialize)]
    struct Head<'a> {
        run_id: Uuid,
        sequence: u64,
        timestamp: String,
        #[serde(rename = "type")]
        kind: &'a str,
    }
    let head = serde_json::to_string(&Head {
        run_id: event.run_id,
        sequence: event.sequence,
        timestamp: event.timestamp.to_rfc3339_opts(SecondsFormat::Micros, true),
        kind: event.kind.type_name(),
    })?;
    let mut body = String::with_capacity(head.len() + json.len() + 12);
    // `head` is an object: its last byte is the closing brace.
    body.push_str(&head[..head.len() - 1]);
    body.push_str(",\"message\":");
    body.push_str(json);
    body.push('}');
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Message;

    #[test]
    fn a_message_event_reads_as_if_serialised_whole() {
        let message = Arc::new(Message::tool("1", "a \"quoted\" é", false));
        let event = Event {
            run_id: Uuid::now_v7(),
            sequence: 7,
            timestamp: Utc::now(),
            kind: EventKind::Message {
                json: message.to_json().into(),
                message,
            },
        };
        let spliced: serde_json::Value =
            serde_json::from_str(&event_json(&event).unwrap()).unwrap();
        let whole = serde_json::to_value(&event).unwrap();
        assert_eq!(spliced, whole);
    }
}
