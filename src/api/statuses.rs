//! `GET /v1/runs/events`: every run of the tenant's changes of status, over
//! Server-Sent Events, so that one connection watches many runs (a console's
//! list, a dashboard).
//!
//! The stream is live only: it tells of changes committed from the moment
//! it is subscribed (before its response begins, so a client that reads
//! `GET /v1/runs` once the response began misses nothing), each as a
//! `run_status` event without an id. Should a client fall so far behind
//! that changes went by unsent, or this replica miss news from the others
//! (its listening connection was lost), the stream ends: its client
//! reconnects (after `retry`) and reads the runs again, as it does after
//! any reconnection.

use std::convert::Infallible;
use std::sync::Arc;

use async_stream::stream;
use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use axum::response::sse::Event as SseEvent;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::events::{RETRY, sse_response};
use super::state::AppState;
use crate::run::Tenant;
use crate::store::StatusChange;

/// The event type of a change of status.
pub const RUN_STATUS: &str = "run_status";

pub async fn stream(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Response {
    // Subscribed before the response is sent.
    let (mut changes, missed) = state.runner.store().live().subscribe_statuses();
    let closing = state.runner.closing();
    let events = stream! {
        // At once, so that a client reconnects a second after a drop even
        // before anything changed.
        yield Ok::<_, Infallible>(SseEvent::default().retry(RETRY));
        loop {
            let change = tokio::select! {
                change = changes.recv() => change,
                () = closing.cancelled() => break,
                () = missed.cancelled() => {
                    tracing::info!(tenant = %tenant.0, "news from other replicas was missed; a status stream ends, for its client to read the runs again");
                    break;
                }
            };
            match change {
                Ok(change) if change.tenant == tenant.0 => yield Ok(event(&change)),
                Ok(_) => {}
                Err(RecvError::Lagged(skipped)) => {
                    tracing::info!(tenant = %tenant.0, skipped, "a status stream fell behind; it ends, for its client to read the runs again");
                    break;
                }
                Err(RecvError::Closed) => break,
            }
        }
    };
    sse_response(&state, events)
}

fn event(change: &Arc<StatusChange>) -> SseEvent {
    let body = json!({
        "run_id": change.run_id,
        "status": change.status.as_str(),
        "at": change.at,
    });
    SseEvent::default().event(RUN_STATUS).data(body.to_string())
}
