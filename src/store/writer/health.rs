//! Since when storage has refused the writer's writes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a refused insert alone (nothing held) keeps storage reported
/// as failing: long enough that a burst of new runs is refused at once,
/// short enough that the next insert, a probe of its own, comes soon.
const REFUSAL_MEMORY: Duration = Duration::from_secs(2);

/// Since when storage has refused the writer's writes, if it does.
#[derive(Debug, Default)]
pub(super) struct Health {
    state: Mutex<HealthState>,
}

#[derive(Debug, Default)]
struct HealthState {
    /// The first refusal since the last successful commit.
    since: Option<Instant>,
    /// The latest refusal.
    last: Option<Instant>,
    /// Whether refused writes are held, to be tried again.
    holding: bool,
}

impl Health {
    pub(super) fn refused(&self, holding: bool) {
        if let Ok(mut state) = self.state.lock() {
            let now = Instant::now();
            state.since.get_or_insert(now);
            state.last = Some(now);
            state.holding = holding;
        }
    }

    pub(super) fn recovered(&self) {
        if let Ok(mut state) = self.state.lock()
            && let Some(since) = state.since.take()
        {
            *state = HealthState::default();
            tracing::info!(
                refused_for_ms = since.elapsed().as_millis() as u64,
                "storage takes writes again"
            );
        }
    }

    pub(super) fn failing_for(&self) -> Option<Duration> {
        let state = self.state.lock().ok()?;
        let since = state.since?;
        let stale = !state.holding
            && state
                .last
                .is_none_or(|last| last.elapsed() > REFUSAL_MEMORY);
        (!stale).then(|| since.elapsed())
    }
}
