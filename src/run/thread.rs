//! A run's place in its thread and among a schedule's runs (SPEC section
//! 23): what a follow-up of a live run does (`multitask`), and the
//! schedule and tick that made a run.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a follow-up does when the run it continues is still live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Multitask {
    /// Refused: 409 `run_live` (as a follow-up of a live run always was).
    #[default]
    Reject,
    /// Accepted now and queued behind the thread's newest live run; it
    /// continues from that run's end.
    Enqueue,
    /// The live run is stopped as a cancel stops it; the new run continues
    /// from what it did.
    Interrupt,
    /// The live run is stopped; the new run continues from the run before
    /// it, as if it had not been.
    Rollback,
}

impl Multitask {
    pub const ALL: [&str; 4] = ["reject", "enqueue", "interrupt", "rollback"];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Enqueue => "enqueue",
            Self::Interrupt => "interrupt",
            Self::Rollback => "rollback",
        }
    }
}

/// The schedule a run was made by, and the tick it was made for (`None`:
/// a trigger's run, made on demand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleOf {
    pub schedule_id: Uuid,
    pub tick: Option<DateTime<Utc>>,
}
