//! `GET /v1/runs/{id}/events`: the run's events over Server-Sent Events.
//!
//! The stream subscribes to the live channel *before* reading storage, replays
//! what is stored after the client's position, then follows live events,
//! skipping any it already sent (by sequence). Live events are published only
//! after they are committed, so storage can always fill a gap: a subscriber
//! that falls behind the live channel's buffer catches up from storage, and
//! never makes the run wait.
//!
//! Storage is read a page at a time, and each page is sent before the next
//! is read: a stream holds one page, whatever the length of the run it
//! replays, and its first event goes out once the first page is read.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use async_stream::stream;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::error::ApiError;
use super::state::AppState;
use super::tenant_run::TenantRun;
use crate::harness::EventKind;
use crate::runner::LiveEvents;
use crate::store::{LiveEvent, Page, Store, StoredEvent};

/// Most `model_delta` events a stream holds for the stored event they
/// follow (the oldest go first: deltas are live-only, and never more than
/// a model call's worth wait).
const MAX_HELD: usize = 4096;

/// Stored events read per query while replaying: what a stream holds of a
/// run's history at once (256 events, or the first to reach 256 KiB).
const REPLAY_PAGE: Page = Page::STREAM;

pub async fn stream(
    State(state): State<AppState>,
    TenantRun { run, .. }: TenantRun,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = resume_point(&headers, &query)?;
    let store = state.runner.store().clone();
    // Resuming at or past the end of a run that ended: nothing will ever
    // come, and 204 is what makes an EventSource stop reconnecting.
    if run.status.is_terminal()
        && store
            .events_after(run.id, after, Page::ONE)
            .await?
            .is_empty()
    {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(events(&state, store, run.id, after, None))
}

/// How long an EventSource waits before it reconnects (sent with the first
/// event of every stream).
pub const RETRY: Duration = Duration::from_millis(1000);

/// The event stream of run `run_id` after sequence `after`, as a response:
/// replayed from storage, then followed live until its end. `subscribed`:
/// a subscription to its live events made before it started, if there is
/// one (so that its first `model_delta` events are not missed).
pub(super) fn events(
    state: &AppState,
    store: Store,
    run_id: Uuid,
    after: u64,
    subscribed: Option<LiveEvents>,
) -> Response {
    let closing = state.runner.closing();
    let mut cursor = Cursor {
        store: store.clone(),
        run_id,
        last: after,
        ended: false,
        retry: Some(RETRY),
        held: VecDeque::new(),
    };
    let mut subscribed = subscribed;
    let events = stream! {
        // Each pass follows the run while it is live here; a paused run is
        // waited for until it goes live again (answered) or ends.
        while !cursor.ended {
            let channels = store.live();
            // Made before looking, so that a resume after the look wakes it.
            let reopened = channels.until_reopened(cursor.run_id);
            // Subscribe first: whatever is committed after this is either in
            // the channel or found by the storage read below.
            // A subscription made before the run started has every event
            // in order (deltas held until the event they follow): storage
            // is needed only should it lag.
            let (live, fresh) = match subscribed.take() {
                Some(live) => (Some(live), true),
                None => (channels.subscribe(cursor.run_id), false),
            };
            if !fresh {
                for await event in cursor.catch_up() { yield Ok::<_, Infallible>(event); }
            }
            if cursor.ended { break; }
            let Some(mut live) = live else {
                // Not live here: paused (or about to resume), else over.
                match store.run_status(cursor.run_id).await {
                    Ok(Some(status)) if !status.is_terminal() => {
                        tokio::select! {
                            () = reopened.wait() => continue,
                            () = closing.cancelled() => break,
                        }
                    }
                    // Ended: storage has the rest.
                    _ => {
                        for await event in cursor.catch_up() { yield Ok(event); }
                        break;
                    }
                }
            };
            while !cursor.ended {
                match live.recv().await {
                    Ok(event) => match cursor.follow(&event) {
                        Some(events) => for event in events { yield Ok(event); },
                        // A gap: some events went by unseen.
                        None => for await event in cursor.catch_up() { yield Ok(event); },
                    },
                    Err(RecvError::Lagged(skipped)) => {
                        tracing::debug!(run_id = %cursor.run_id, skipped, "subscriber lagged; catching up from storage");
                        for await event in cursor.catch_up() { yield Ok(event); }
                    }
                    // It ended or paused (or the server stops): storage has
                    // what came before; the next pass sees which.
                    Err(RecvError::Closed) => break,
                }
            }
        }
    };
    sse_response(state, events)
}

/// `events` as an SSE response: keep-alive comments while idle, and no
/// buffering by proxies.
pub(super) fn sse_response(
    state: &AppState,
    events: impl futures_util::Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
) -> Response {
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(state.keep_alive))
        .into_response();
    // Proxies such as nginx would otherwise hold the events back.
    response.headers_mut().insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response
}

/// Where a stream stands: the last sequence it sent, and whether that was the
/// run's end (or the stream cannot go on).
struct Cursor {
    store: Store,
    run_id: Uuid,
    last: u64,
    ended: bool,
    /// Sent with the first event, then `None`.
    retry: Option<Duration>,
    /// `model_delta` events that came before the stored event they follow
    /// (by its sequence), held until it is sent.
    held: VecDeque<(u64, SseEvent)>,
}

impl Cursor {
    /// Every stored event after the last one sent, up to the run's end, read
    /// a page at a time as the stream is consumed (the next page is read
    /// once the previous one is sent: keyset pagination by sequence, so a
    /// page costs the same however far into the run it is). A storage
    /// failure ends the stream (the client resumes from its last id).
    fn catch_up(&mut self) -> impl Stream<Item = SseEvent> + Send + '_ {
        stream! {
            while !self.ended {
                let page: Vec<StoredEvent> = match self
                    .store
                    .events_after(self.run_id, self.last, REPLAY_PAGE)
                    .await
                {
                    Ok(page) => page,
                    Err(error) => {
                        tracing::error!(run_id = %self.run_id, %error, "reading stored events failed");
                        self.ended = true;
                        break;
                    }
                };
                // Cut by its rows or its bytes: there may be more.
                let full = REPLAY_PAGE.is_full(page.iter().map(|event| event.body.len()));
                let mut out = Vec::new();
                for event in page {
                    self.last = event.sequence;
                    out.push(self.first(sse(event.sequence, &event.kind, &event.body)));
                    if event.kind == EventKind::RUN_END {
                        self.ended = true;
                    } else {
                        // The deltas that follow it go right after it.
                        self.release_held(&mut out);
                    }
                    for event in out.drain(..) {
                        yield event;
                    }
                    if self.ended {
                        break;
                    }
                }
                if !full {
                    break;
                }
            }
            let mut out = Vec::new();
            self.release_held(&mut out);
            for event in out {
                yield event;
            }
        }
    }

    /// The held deltas whose stored event was sent, in order.
    fn release_held(&mut self, out: &mut Vec<SseEvent>) {
        while let Some((after, _)) = self.held.front() {
            if *after > self.last && !self.ended {
                break;
            }
            if let Some((_, event)) = self.held.pop_front() {
                // Past the end nothing more is sent.
                if !self.ended {
                    out.push(self.first(event));
                }
            }
        }
    }

    /// A live event: what it makes the stream send (nothing when it was
    /// sent already), or `None` for a gap (some events went by unseen),
    /// which storage fills ([`Cursor::catch_up`]).
    fn follow(&mut self, event: &LiveEvent) -> Option<Vec<SseEvent>> {
        match event.sequence {
            None => {
                let delta = SseEvent::default().event(event.kind).data(&*event.body);
                // Late: what came after the event it follows was sent
                // already (read from storage), and its place is gone. Deltas
                // are live-only text, and the stored message has it whole.
                if event.after < self.last {
                    return Some(Vec::new());
                }
                if event.after == self.last {
                    return Some(vec![self.first(delta)]);
                }
                if self.held.len() == MAX_HELD {
                    self.held.pop_front();
                }
                self.held.push_back((event.after, delta));
                Some(Vec::new())
            }
            Some(sequence) if sequence <= self.last => Some(Vec::new()),
            Some(sequence) if sequence == self.last + 1 => {
                self.last = sequence;
                self.ended = event.is_end();
                let mut out = vec![self.first(sse(sequence, event.kind, &event.body))];
                self.release_held(&mut out);
                Some(out)
            }
            Some(_) => None,
        }
    }

    /// `event`, with the reconnection time if it is the stream's first.
    fn first(&mut self, event: SseEvent) -> SseEvent {
        match self.retry.take() {
            Some(retry) => event.retry(retry),
            None => event,
        }
    }
}

fn sse(sequence: u64, kind: &str, body: &str) -> SseEvent {
    SseEvent::default()
        .id(sequence.to_string())
        .event(kind)
        .data(body)
}

/// `Last-Event-ID` (header) or `?after=`: the sequence to resume after. The
/// header wins when both are given; both must be valid (an empty `after`
/// means 0; an empty header, which no EventSource sends, is refused).
fn resume_point(headers: &HeaderMap, query: &HashMap<String, String>) -> Result<u64, ApiError> {
    let parse = |name: &str, text: &str| {
        let text = text.trim();
        if text.is_empty() && name == "after" {
            return Ok(0);
        }
        text.parse::<u64>().map_err(|_| {
            ApiError::InvalidQuery(format!(
                "{name} must be a nonnegative integer sequence (got {text:?})"
            ))
        })
    };
    let from_header = headers
        .get("last-event-id")
        .map(|value| parse("Last-Event-ID", value.to_str().unwrap_or("invalid")))
        .transpose()?;
    let from_query = query
        .get("after")
        .map(|text| parse("after", text))
        .transpose()?;
    Ok(from_header.or(from_query).unwrap_or(0))
}

/// The default interval of keep-alive comments on an idle stream.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);
