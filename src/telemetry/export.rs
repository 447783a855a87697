//! Spans leave a run's path at once: [`Batcher`] queues each ended span
//! (never waiting: a full queue drops it, counted) for a thread of its own,
//! which exports them in batches over OTLP/HTTP. An exporter that fails (an
//! unreachable collector) drops its batch, counted too, and what comes
//! while the collector is left to rest: nothing of it ever slows or fails
//! a run. The SDK's own batch processor counts what it
//! drops only for its log, so this small one stands in for it.

use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;

/// Spans waiting for export at most; beyond, new ones are dropped.
const QUEUE: usize = 8192;
/// Spans in one export at most.
const BATCH: usize = 512;
/// Longest a span waits for the rest of its batch.
const DELAY: Duration = Duration::from_millis(500);
/// How long the collector is left alone after its first failure, and at
/// most after failures in a row.
const MIN_REST: Duration = Duration::from_secs(1);
const MAX_REST: Duration = Duration::from_secs(30);

enum Message {
    Span(Box<SpanData>),
    /// The provider's resource (`service.name`), for the exporter to send
    /// with every batch.
    Resource(Box<Resource>),
    /// Export what is queued, then say so.
    Flush(SyncSender<()>),
}

/// The span processor: see the module's documentation.
#[derive(Debug)]
pub struct Batcher {
    queue: SyncSender<Message>,
    dropped: Counter,
}

impl Batcher {
    /// Starts the export thread; `exporter` is built on it (a blocking
    /// HTTP client must not be made on an async runtime's thread).
    pub fn start<E, F>(make: F, dropped: Counter) -> Self
    where
        E: SpanExporter + 'static,
        F: FnOnce() -> Result<E, String> + Send + 'static,
    {
        let (queue, received) = sync_channel(QUEUE);
        let counted = dropped.clone();
        // It ends once the processor (the queue's one sender) is gone.
        std::thread::Builder::new()
            .name("span-export".into())
            .spawn(move || export(make, &received, &counted))
            .expect("the span export thread starts");
        Self { queue, dropped }
    }
}

/// The export thread: batches of up to [`BATCH`], each sent when full or
/// [`DELAY`] after its first span.
fn export<E, F>(make: F, received: &Receiver<Message>, dropped: &Counter)
where
    E: SpanExporter,
    F: FnOnce() -> Result<E, String>,
{
    let exporter = match make() {
        Ok(exporter) => Some(exporter),
        Err(error) => {
            tracing::error!(%error, "the span exporter could not be built; spans are dropped");
            None
        }
    };
    let mut sender = Sender {
        exporter,
        dropped,
        rest: MIN_REST,
        resting_until: None,
    };
    let mut batch = Vec::with_capacity(BATCH);
    let mut due: Option<Instant> = None;
    loop {
        let message = match due {
            None => received.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(due) => received.recv_timeout(due.saturating_duration_since(Instant::now())),
        };
        match message {
            Ok(Message::Span(span)) => {
                batch.push(*span);
                due.get_or_insert_with(|| Instant::now() + DELAY);
                if batch.len() >= BATCH {
                    sender.send(&mut batch);
                    due = None;
                }
            }
            Ok(Message::Resource(resource)) => {
                if let Some(exporter) = &mut sender.exporter {
                    exporter.set_resource(&resource);
                }
            }
            Ok(Message::Flush(done)) => {
                sender.send(&mut batch);
                due = None;
                let _ = done.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                sender.send(&mut batch);
                due = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                sender.send(&mut batch);
                if let Some(exporter) = &sender.exporter {
                    let _ = exporter.shutdown();
                }
                return;
            }
        }
    }
}

/// The export thread's exporter, and how long the collector is left alone.
struct Sender<'a, E> {
    exporter: Option<E>,
    dropped: &'a Counter,
    /// After a failed export the collector is left alone for a while
    /// (doubling up to [`MAX_REST`]): what comes meanwhile is dropped
    /// without the work of encoding and sending it.
    rest: Duration,
    resting_until: Option<Instant>,
}

impl<E: SpanExporter> Sender<'_, E> {
    /// Exports `batch` (emptying it), or counts it dropped.
    fn send(&mut self, batch: &mut Vec<SpanData>) {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        let count = spans.len() as u64;
        let Some(exporter) = &self.exporter else {
            self.dropped.inc_by(count);
            return;
        };
        if self
            .resting_until
            .is_some_and(|until| Instant::now() < until)
        {
            self.dropped.inc_by(count);
            return;
        }
        match futures_executor::block_on(exporter.export(spans)) {
            Ok(()) => {
                self.rest = MIN_REST;
                self.resting_until = None;
            }
            Err(error) => {
                self.dropped.inc_by(count);
                tracing::debug!(%error, spans = count, "exporting spans failed; they are dropped");
                self.resting_until = Some(Instant::now() + self.rest);
                self.rest = (self.rest * 2).min(MAX_REST);
            }
        }
    }
}

impl SpanProcessor for Batcher {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        match self.queue.try_send(Message::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.inc();
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let (done, flushed) = sync_channel(1);
        self.queue
            .send(Message::Flush(done))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        flushed
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| OTelSdkError::Timeout(Duration::from_secs(10)))
    }

    /// Hands the provider's resource to the exporter (queued before any
    /// span: the provider sets it as it is built). Without it every span
    /// would reach the collector with an empty resource, no `service.name`.
    fn set_resource(&mut self, resource: &Resource) {
        let message = Message::Resource(Box::new(resource.clone()));
        if self.queue.try_send(message).is_err() {
            tracing::warn!("the span exporter was not given the service's resource");
        }
    }

    /// Exports what is queued; the thread ends when the processor is
    /// dropped.
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.force_flush()
    }
}
