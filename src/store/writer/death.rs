//! The writer's death: its task watched, so that a panic in it (a bug)
//! never goes unseen, and the test hook that causes one in debug builds.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::health::Health;
#[cfg(debug_assertions)]
use super::ops::Op;

/// Whether the writer's task died (it panicked): from then on every write
/// fails, so the server is not ready and must stop.
#[derive(Default)]
pub(super) struct Death {
    pub(super) token: CancellationToken,
    pub(super) why: std::sync::OnceLock<String>,
}

/// Watches the writer's task: one that ends by panicking leaves every
/// later write failing, which must not go unseen. Storage then counts as
/// refusing writes for good (new runs get 503, `/readyz` says why), and
/// whoever serves is told through [`Writer::died`] to stop.
pub(super) async fn watch(
    task: tokio::task::JoinHandle<()>,
    health: Arc<Health>,
    death: Arc<Death>,
) {
    let Err(error) = task.await else {
        // It ended as it should: closed, or every handle dropped.
        return;
    };
    let why = if error.is_panic() {
        let panic = error.into_panic();
        let message = panic
            .downcast_ref::<&str>()
            .map(|message| (*message).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        format!("it panicked: {message}")
    } else {
        format!("it was cancelled: {error}")
    };
    tracing::error!(%why, "the store's writer died: nothing can be stored any more");
    health.died();
    let _ = death.why.set(why);
    death.token.cancel();
}

/// A test hook, in debug builds only (never in a release build): the writer
/// panics on a batch that inserts a run whose prompt is the value of
/// `AGENT_RUNNER_TEST_WRITER_PANIC_ON`, so that tests can see what a dead
/// writer does to the server.
#[cfg(debug_assertions)]
pub(super) fn panic_if_asked(batch: &[Op]) {
    static PROMPT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let Some(prompt) =
        PROMPT.get_or_init(|| std::env::var("AGENT_RUNNER_TEST_WRITER_PANIC_ON").ok())
    else {
        return;
    };
    if batch
        .iter()
        .any(|op| matches!(op, Op::InsertRun(row, _) if row.prompt() == prompt))
    {
        panic!("the writer was asked to panic (AGENT_RUNNER_TEST_WRITER_PANIC_ON)");
    }
}

/// A test hook, in debug builds only (never in a release build): the
/// process stops dead (as a SIGKILL stops it: nothing more is written)
/// right after it commits the event whose message holds the value of
/// `AGENT_RUNNER_TEST_CRASH_AFTER_MESSAGE`, with nothing sent after that
/// event in the same transaction. So tests can see what a restart finds
/// when a crash falls between two writes. The length of the batch to
/// commit before the crash, if the hook is asked for in `batch`.
#[cfg(debug_assertions)]
pub(super) fn crash_point<'a>(batch: impl IntoIterator<Item = &'a Op>) -> Option<usize> {
    static MARKER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let marker = MARKER
        .get_or_init(|| std::env::var("AGENT_RUNNER_TEST_CRASH_AFTER_MESSAGE").ok())
        .as_deref()?;
    batch
        .into_iter()
        .position(|op| {
            matches!(op, Op::Event(event) if event.all().any(|event| {
                event.message.as_ref().is_some_and(|(_, json)| json.contains(marker))
            }))
        })
        .map(|at| at + 1)
}
