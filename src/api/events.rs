//! `GET /v1/runs/{id}/events`: the run's events over Server-Sent Events.
//!
//! The stream subscribes to the live channel *before* reading storage, replays
//! what is stored after the client's position, then follows live events,
//! skipping any it already sent (by sequence). Live events are published only
//! after they are committed, so storage can always fill a gap: a subscriber
//! that falls behind the live channel's buffer catches up from storage, and
//! never makes the run wait.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use async_stream::stream;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::AppState;
use super::error::ApiError;
use super::tenant_run::TenantRun;
use crate::store::{Store, StoredEvent};

/// Stored events read per query while replaying.
const REPLAY_PAGE: u32 = 500;

pub async fn stream(
    State(state): State<AppState>,
    TenantRun { run, .. }: TenantRun,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let after = resume_point(&headers, &query)?;
    // Subscribe first: whatever is committed after this is either in the
    // channel or found by the storage read below.
    let live = state.runner.live(run.id).map(|live| live.subscribe());
    let store = state.runner.store().clone();
    let run_id = run.id;
    let events = stream! {
        let mut last = after;
        match catch_up(&store, run_id, &mut last).await {
            Ok((events, ended)) => {
                for event in events { yield Ok(event); }
                if ended { return; }
            }
            Err(()) => return,
        }
        let Some(mut live) = live else { return };
        loop {
            let next = live.recv().await;
            match next {
                Ok(event) => match event.sequence {
                    None => yield Ok(SseEvent::default().event(event.kind).data(&event.body)),
                    Some(sequence) if sequence <= last => {}
                    Some(sequence) if sequence == last + 1 => {
                        last = sequence;
                        yield Ok(sse(sequence, event.kind, &event.body));
                        if event.kind == "run_end" { return; }
                    }
                    Some(_) => match catch_up(&store, run_id, &mut last).await {
                        Ok((events, ended)) => {
                            for event in events { yield Ok(event); }
                            if ended { return; }
                        }
                        Err(()) => return,
                    },
                },
                Err(RecvError::Lagged(skipped)) => {
                    tracing::debug!(%run_id, skipped, "subscriber lagged; catching up from storage");
                    match catch_up(&store, run_id, &mut last).await {
                        Ok((events, ended)) => {
                            for event in events { yield Ok(event); }
                            if ended { return; }
                        }
                        Err(()) => return,
                    }
                }
                Err(RecvError::Closed) => {
                    // The run is over (or the server stops): storage has the rest.
                    if let Ok((events, _)) = catch_up(&store, run_id, &mut last).await {
                        for event in events { yield Ok(event); }
                    }
                    return;
                }
            }
        }
    };
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(state.keep_alive)))
}

/// Reads every stored event after `last`, advancing it; tells whether the
/// run's end was among them.
async fn catch_up(
    store: &Store,
    run_id: Uuid,
    last: &mut u64,
) -> Result<(Vec<SseEvent>, bool), ()> {
    let mut out = Vec::new();
    loop {
        let page: Vec<StoredEvent> = store
            .events_after(run_id, *last, REPLAY_PAGE)
            .await
            .map_err(|error| tracing::error!(%run_id, %error, "reading stored events failed"))?;
        let full = page.len() == REPLAY_PAGE as usize;
        for event in page {
            *last = event.sequence;
            out.push(sse(event.sequence, &event.kind, &event.body));
            if event.kind == "run_end" {
                return Ok((out, true));
            }
        }
        if !full {
            return Ok((out, false));
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
