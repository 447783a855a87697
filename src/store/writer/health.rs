//! Since when storage has refused the writer's writes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::StoreError;

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
    /// The writer died: nothing is written any more.
    dead: bool,
}

impl Health {
    pub(super) fn refused(&self, holding: bool) {
        let mut state = crate::sync::lock(&self.state);
        let now = Instant::now();
        state.since.get_or_insert(now);
        state.last = Some(now);
        state.holding = holding || state.dead;
    }

    /// The writer's task died: storage refuses writes from now on.
    pub(super) fn died(&self) {
        let mut state = crate::sync::lock(&self.state);
        state.since.get_or_insert_with(Instant::now);
        state.holding = true;
        state.dead = true;
    }

    pub(super) fn recovered(&self) {
        let mut state = crate::sync::lock(&self.state);
        if !state.dead
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
        let state = crate::sync::lock(&self.state);
        let since = state.since?;
        let stale = !state.holding
            && state
                .last
                .is_none_or(|last| last.elapsed() > REFUSAL_MEMORY);
        (!stale).then(|| since.elapsed())
    }
}

/// Whether `error` is storage refusing writes (the disk full, an I/O error,
/// a read-only or locked file, a server going away or not answering in
/// time), rather than this write being wrong: an I/O error of the driver; a
/// statement or connection attempt past its deadline
/// ([`StoreError::Unavailable`]); SQLite's primary result codes BUSY,
/// LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN and PROTOCOL;
/// PostgreSQL's SQLSTATE classes 08 (connection), 53 (insufficient
/// resources: disk full, out of memory), 57 (operator intervention: a
/// shutdown, a statement cancelled at its `statement_timeout`) and 58
/// (system errors), a read-only transaction, and the conflicts that a
/// retry resolves (serialization failure, deadlock).
pub(in crate::store) fn is_refusal(error: &StoreError) -> bool {
    match error {
        StoreError::Refused(_)
        | StoreError::Unavailable(_)
        | StoreError::Database(sqlx::Error::Io(_)) => true,
        StoreError::Database(sqlx::Error::Database(error)) => {
            let code = error.code().unwrap_or_default();
            if error
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some()
            {
                ["08", "53", "57", "58"]
                    .iter()
                    .any(|class| code.starts_with(class))
                    || matches!(&*code, "25006" | "40001" | "40P01")
            } else {
                code.parse::<i64>()
                    .is_ok_and(|code| matches!(code & 0xff, 5 | 6 | 7 | 8 | 10 | 13 | 14 | 15))
            }
        }
        _ => false,
    }
}
