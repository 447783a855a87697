//! Publication of committed events: a broadcast channel per live run, owned
//! by the store (as a pub/sub beside the data it publishes). The writer
//! publishes each event once its transaction commits, so a subscriber never
//! sees an event storage does not have; `model_delta` text, which is never
//! stored, goes out through the same channel at once.
//!
//! A run's channel opens when it goes live and closes once its end (or its
//! pause) is committed, or given up: subscribers then see the channel
//! closed, and whoever waits for the end is told how it closed. A paused run
//! has no channel (it holds no memory here); whoever follows it waits for
//! it to go live again ([`Channels::until_reopened`]). So does whoever
//! follows a run that executes on another replica: news of its events
//! arrives from the database ([`super::cluster`]) as a wake.
//!
//! Beside the runs' channels, one channel carries every run's changes of
//! status ([`StatusChange`]), published by whatever commits them (the
//! writer, a replica's claim or takeover) or heard from other replicas:
//! what the tenant-wide stream follows. An end or a pause among them also
//! wakes the webhooks' dispatcher, whose deliveries are stored with them
//! (see [`super::outbox`]).

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::run::{Run, RunStatus};
use crate::sync::lock;

/// Events buffered per live run for subscribers; one that falls further
/// behind catches up from storage.
pub const LIVE_BUFFER: usize = 32;

/// Changes of status buffered for the tenant-wide streams (twice what one
/// batch of the writer publishes at once); one that falls further behind
/// ends (its client reads the runs again).
pub const STATUS_BUFFER: usize = 2 * super::writer::MAX_BATCH;

/// A run's status changed, and that change is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusChange {
    pub run_id: Uuid,
    pub tenant: String,
    pub status: RunStatus,
    /// When it changed (RFC 3339).
    pub at: String,
}

/// An event on its way to live subscribers. Sequenced events are already
/// stored; `model_delta` ones (no sequence) are live only.
#[derive(Debug)]
pub struct LiveEvent {
    pub sequence: Option<u64>,
    /// The sequence of the stored event this one comes after: a
    /// `model_delta` is published at once, before the `model_start` it
    /// follows is committed, and a stream holds it until it sent that.
    pub after: u64,
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

/// How a run's channel closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// Its end is stored.
    Ended,
    /// Its pause is stored: it waits for a decision, and goes live again
    /// (with a new channel) once it is answered.
    Paused,
    /// It left without a stored end: its last write was given up, or it was
    /// left queued for the next process.
    GivenUp,
}

impl Closing {
    fn code(self) -> u8 {
        match self {
            Self::Ended => 1,
            Self::Paused => 2,
            Self::GivenUp => 0,
        }
    }

    fn from_code(code: u8) -> Self {
        match code {
            1 => Self::Ended,
            2 => Self::Paused,
            _ => Self::GivenUp,
        }
    }
}

struct Channel {
    events: broadcast::Sender<Arc<LiveEvent>>,
    ended: Ended,
    /// The run object as stored so far: its only writer is the store's
    /// writer, after each commit (see [`Channels::apply`]).
    run: Run,
}

/// Fires when a run's channel closes, telling how.
#[derive(Clone, Default)]
struct Ended {
    token: CancellationToken,
    how: Arc<AtomicU8>,
    /// The run as stored when its channel closed with its end.
    last: Arc<std::sync::OnceLock<Run>>,
}

/// The channels of the live runs, and the one of every run's status.
pub struct Channels {
    runs: Mutex<HashMap<Uuid, Channel>>,
    statuses: broadcast::Sender<Arc<StatusChange>>,
    /// Fired when changes of status may have gone by unheard (news from
    /// other replicas was missed): the status streams then end, for their
    /// clients to read the runs again. Replaced once fired.
    statuses_missed: Mutex<CancellationToken>,
    /// Told of ends and pauses committed (here or on another replica):
    /// their webhooks may be due in the outbox.
    outbox: tokio::sync::Notify,
    /// Fired when a run that is not live here goes live again or ends:
    /// what followers of a paused run wait on. Made only for runs someone
    /// waits on.
    reopened: Mutex<HashMap<Uuid, Arc<CancellationToken>>>,
}

/// A registered wait for a run to go live again or end (see
/// [`Channels::until_reopened`]). Its run's entry goes when its last waiter
/// does, so waiters that give up leave nothing behind.
pub struct Reopened<'a> {
    channels: &'a Channels,
    run_id: Uuid,
    /// Taken when it is dropped, under the lock, so that the count of
    /// waiters is exact.
    token: Option<Arc<CancellationToken>>,
}

impl Reopened<'_> {
    /// Resolves once the run went live here again or ended.
    pub async fn wait(&self) {
        if let Some(token) = &self.token {
            token.cancelled().await;
        }
    }
}

impl Drop for Reopened<'_> {
    fn drop(&mut self) {
        let mut waiting = lock(&self.channels.reopened);
        let Some(mine) = self.token.take() else {
            return;
        };
        if let Some(entry) = waiting.get(&self.run_id)
            // The map's and this one: no other waiter.
            && Arc::ptr_eq(entry, &mine)
            && Arc::strong_count(entry) <= 2
        {
            waiting.remove(&self.run_id);
        }
        drop(mine);
    }
}

impl Default for Channels {
    fn default() -> Self {
        Self {
            runs: Mutex::default(),
            statuses: broadcast::channel(STATUS_BUFFER).0,
            statuses_missed: Mutex::default(),
            outbox: tokio::sync::Notify::new(),
            reopened: Mutex::default(),
        }
    }
}

impl Channels {
    /// Tells whoever follows the runs' statuses of changes committed here,
    /// and the webhooks' dispatcher of the ends and pauses among them.
    pub fn publish_statuses(&self, changes: impl IntoIterator<Item = StatusChange>) {
        for change in changes {
            if super::outbox::is_posted(change.status) {
                self.outbox.notify_one();
            }
            // No subscriber is not an error.
            let _ = self.statuses.send(Arc::new(change));
        }
    }

    /// Tells whoever follows the runs' statuses of changes another replica
    /// committed, and the webhooks' dispatcher of the ends and pauses among
    /// them (any replica may deliver them).
    pub fn publish_heard_statuses(&self, changes: impl IntoIterator<Item = StatusChange>) {
        self.publish_statuses(changes);
    }

    /// Resolves once an end or a pause was committed since the last time
    /// it resolved (or since the start): the webhooks' dispatcher looks at
    /// the outbox then.
    pub async fn outbox_changed(&self) {
        self.outbox.notified().await;
    }

    /// Subscribes to every run's changes of status from now on, with what
    /// fires should some go by unheard.
    pub fn subscribe_statuses(
        &self,
    ) -> (broadcast::Receiver<Arc<StatusChange>>, CancellationToken) {
        let missed = lock(&self.statuses_missed).clone();
        (self.statuses.subscribe(), missed)
    }

    /// Tells the status subscribers that changes may have gone by unheard.
    pub fn statuses_missed(&self) {
        std::mem::take(&mut *lock(&self.statuses_missed)).cancel();
    }

    /// Opens the channel of a run that goes live, `run` as stored when it
    /// does (a no-op if it is open).
    pub fn open(&self, run_id: Uuid, run: Run) {
        lock(&self.runs).entry(run_id).or_insert_with(|| Channel {
            events: broadcast::channel(LIVE_BUFFER).0,
            ended: Ended::default(),
            run,
        });
        self.wake(run_id);
    }

    /// Reads the live run's copy (the run as stored so far); `None` once it
    /// is not live.
    pub fn read<R>(&self, run_id: Uuid, read: impl FnOnce(&Run) -> R) -> Option<R> {
        lock(&self.runs)
            .get(&run_id)
            .map(|channel| read(&channel.run))
    }

    /// Applies a committed change to the live run's copy (the writer's,
    /// once the change is committed; nothing else changes it).
    pub(super) fn apply(&self, run_id: Uuid, change: impl FnOnce(&mut Run)) {
        if let Some(channel) = lock(&self.runs).get_mut(&run_id) {
            change(&mut channel.run);
        }
    }

    /// A wait for the run `run_id` to go live here again or end. Made
    /// before looking at where the run stands, so that no change after the
    /// look is missed.
    pub fn until_reopened(&self, run_id: Uuid) -> Reopened<'_> {
        let token = Arc::clone(lock(&self.reopened).entry(run_id).or_default());
        Reopened {
            channels: self,
            run_id,
            token: Some(token),
        }
    }

    /// Runs someone waits on to go live again.
    pub fn waited_on(&self) -> usize {
        lock(&self.reopened).len()
    }

    /// Tells whoever waits for `run_id` to go live again that it changed.
    pub fn wake(&self, run_id: Uuid) {
        let token = lock(&self.reopened).remove(&run_id);
        if let Some(token) = token {
            token.cancel();
        }
    }

    /// Tells whoever waits for any run to go live again to look again (news
    /// from other replicas may have been missed).
    pub fn wake_all(&self) {
        let tokens: Vec<_> = lock(&self.reopened)
            .drain()
            .map(|(_, token)| token)
            .collect();
        for token in tokens {
            token.cancel();
        }
    }

    /// Subscribes to a live run's events; `None` once it is not live.
    pub fn subscribe(&self, run_id: Uuid) -> Option<broadcast::Receiver<Arc<LiveEvent>>> {
        lock(&self.runs)
            .get(&run_id)
            .map(|channel| channel.events.subscribe())
    }

    /// Resolves once the run's channel closes, to how it closed; `None`
    /// when it is not open.
    pub fn ended(&self, run_id: Uuid) -> Option<impl Future<Output = Closing> + Send + use<>> {
        // Not through `closed`: the run as stored is not wanted, and
        // cloning it costs a copy of the whole run.
        let ended = lock(&self.runs).get(&run_id)?.ended.clone();
        Some(async move {
            ended.token.cancelled().await;
            Closing::from_code(ended.how.load(Ordering::Acquire))
        })
    }

    /// Resolves once the run's channel closes, to how it closed and, when
    /// it closed with its end stored, the run as stored; `None` when it is
    /// not open.
    pub fn closed(
        &self,
        run_id: Uuid,
    ) -> Option<impl Future<Output = (Closing, Option<Run>)> + Send + use<>> {
        let ended = lock(&self.runs).get(&run_id)?.ended.clone();
        Some(async move {
            ended.token.cancelled().await;
            let how = Closing::from_code(ended.how.load(Ordering::Acquire));
            (how, ended.last.get().cloned())
        })
    }

    /// Tells the run's subscribers of `event`.
    pub fn publish(&self, run_id: Uuid, event: Arc<LiveEvent>) {
        if let Some(channel) = lock(&self.runs).get(&run_id) {
            // No subscriber is not an error.
            let _ = channel.events.send(event);
        }
    }

    /// Closes the run's channel: its subscribers see it closed, and its
    /// waiters are let go, told `how`. Whoever waits for a run that is not
    /// live (a paused one that ended) is woken too.
    pub fn close(&self, run_id: Uuid, how: Closing) {
        let channel = lock(&self.runs).remove(&run_id);
        if let Some(channel) = channel {
            if how == Closing::Ended {
                let _ = channel.ended.last.set(channel.run);
            }
            channel.ended.how.store(how.code(), Ordering::Release);
            channel.ended.token.cancel();
        }
        self.wake(run_id);
    }

    /// How many channels are open.
    pub fn len(&self) -> usize {
        lock(&self.runs).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn test_run(id: Uuid) -> Run {
        let spec = crate::run::RunSpec::scripted(Vec::new());
        Run::queued(id, &spec, chrono::Utc::now())
    }

    fn event(sequence: u64, kind: &'static str) -> Arc<LiveEvent> {
        Arc::new(LiveEvent {
            sequence: Some(sequence),
            after: sequence - 1,
            kind,
            body: "{}".into(),
        })
    }

    #[tokio::test]
    async fn subscribers_hear_what_is_published_until_the_channel_closes() {
        let channels = Channels::default();
        let run = Uuid::now_v7();
        assert!(channels.subscribe(run).is_none());
        channels.open(run, test_run(run));
        let mut receiver = channels.subscribe(run).unwrap();
        let ended = channels.ended(run).unwrap();
        channels.publish(run, event(1, "run_start"));
        channels.close(run, Closing::Paused);
        assert_eq!(receiver.recv().await.unwrap().sequence, Some(1));
        assert!(receiver.recv().await.is_err());
        assert_eq!(ended.await, Closing::Paused);
        assert!(channels.subscribe(run).is_none());
        assert!(channels.is_empty());
    }

    #[tokio::test]
    async fn a_paused_run_wakes_its_waiters_when_it_goes_live_again() {
        let channels = Channels::default();
        let run = Uuid::now_v7();
        let second = Duration::from_secs(1);
        let reopened = channels.until_reopened(run);
        let other = channels.until_reopened(Uuid::now_v7());
        channels.open(run, test_run(run));
        tokio::time::timeout(second, reopened.wait())
            .await
            .expect("woken by the open");
        let ended = channels.until_reopened(run);
        channels.close(run, Closing::Ended);
        tokio::time::timeout(second, ended.wait())
            .await
            .expect("woken by the end");
        let slept = tokio::time::timeout(Duration::from_millis(20), other.wait()).await;
        assert!(slept.is_err(), "another run's waiter sleeps on");
        drop((reopened, ended));
        assert_eq!(channels.waited_on(), 1);
        let again = channels.until_reopened(run);
        let twice = channels.until_reopened(run);
        drop(again);
        assert_eq!(channels.waited_on(), 2, "one waiter of the run is left");
        drop((twice, other));
        assert_eq!(
            channels.waited_on(),
            0,
            "waiters that gave up leave nothing"
        );
    }
}
