//! Publication of committed events: a broadcast channel per live run, owned
//! by the store (as a pub/sub beside the data it publishes). The writer
//! publishes each event once its transaction commits, so a subscriber never
//! sees an event storage does not have; `model_delta` text, which is never
//! stored, goes out through the same channel at once.
//!
//! A run's channel opens when it goes live and closes once its end is
//! committed (or given up): subscribers then see the channel closed, and
//! whoever waits for the end is let go.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Events buffered per live run for subscribers; one that falls further
/// behind catches up from storage.
pub const LIVE_BUFFER: usize = 32;

/// An event on its way to live subscribers. Sequenced events are already
/// stored; `model_delta` ones (no sequence) are live only.
#[derive(Debug)]
pub struct LiveEvent {
    pub sequence: Option<u64>,
    pub kind: &'static str,
    /// The event object's JSON, shared with the row it was written to.
    pub body: Arc<str>,
}

impl LiveEvent {
    /// Whether this is the run's last event.
    pub fn is_end(&self) -> bool {
        self.kind == crate::harness::EventKind::RUN_END
    }
}

struct Channel {
    events: broadcast::Sender<Arc<LiveEvent>>,
    ended: Ended,
}

/// Fires when a run's channel closes, telling whether its end was stored
/// (`false`: given up, or the run left without an end, as one left queued).
#[derive(Clone, Default)]
struct Ended {
    token: CancellationToken,
    stored: Arc<AtomicBool>,
}

/// The channels of the live runs.
#[derive(Default)]
pub struct Channels {
    runs: Mutex<HashMap<Uuid, Channel>>,
}

impl Channels {
    /// Opens the channel of a run that goes live (a no-op if it is open).
    pub fn open(&self, run_id: Uuid) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.entry(run_id).or_insert_with(|| Channel {
                events: broadcast::channel(LIVE_BUFFER).0,
                ended: Ended::default(),
            });
        }
    }

    /// Subscribes to a live run's events; `None` once it is not live.
    pub fn subscribe(&self, run_id: Uuid) -> Option<broadcast::Receiver<Arc<LiveEvent>>> {
        let runs = self.runs.lock().ok()?;
        runs.get(&run_id).map(|channel| channel.events.subscribe())
    }

    /// Resolves once the run's channel closes, to whether its end was
    /// stored; `None` when it is not open.
    pub fn ended(&self, run_id: Uuid) -> Option<impl Future<Output = bool> + Send + use<>> {
        let ended = {
            let runs = self.runs.lock().ok()?;
            runs.get(&run_id)?.ended.clone()
        };
        Some(async move {
            ended.token.cancelled().await;
            ended.stored.load(Ordering::Acquire)
        })
    }

    /// Tells the run's subscribers of `event`.
    pub fn publish(&self, run_id: Uuid, event: Arc<LiveEvent>) {
        let Ok(runs) = self.runs.lock() else { return };
        if let Some(channel) = runs.get(&run_id) {
            // No subscriber is not an error.
            let _ = channel.events.send(event);
        }
    }

    /// Closes the run's channel: its subscribers see it closed, and its
    /// waiters are let go, told whether its end was `stored`.
    pub fn close(&self, run_id: Uuid, stored: bool) {
        let channel = self
            .runs
            .lock()
            .ok()
            .and_then(|mut runs| runs.remove(&run_id));
        if let Some(channel) = channel {
            channel.ended.stored.store(stored, Ordering::Release);
            channel.ended.token.cancel();
        }
    }

    /// How many channels are open.
    pub fn len(&self) -> usize {
        self.runs.lock().map_or(0, |runs| runs.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: u64, kind: &'static str) -> Arc<LiveEvent> {
        Arc::new(LiveEvent {
            sequence: Some(sequence),
            kind,
            body: "{}".into(),
        })
    }

    #[tokio::test]
    async fn subscribers_hear_what_is_published_until_the_channel_closes() {
        let channels = Channels::default();
        let run = Uuid::now_v7();
        assert!(channels.subscribe(run).is_none());
        channels.open(run);
        let mut receiver = channels.subscribe(run).unwrap();
        let ended = channels.ended(run).unwrap();
        channels.publish(run, event(1, "run_start"));
        channels.close(run, true);
        assert_eq!(receiver.recv().await.unwrap().sequence, Some(1));
        assert!(receiver.recv().await.is_err());
        assert!(ended.await);
        assert!(channels.subscribe(run).is_none());
        assert!(channels.is_empty());
    }
}
