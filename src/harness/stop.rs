//! How a run is stopped from outside, and why: the token the loop watches and
//! the reason it reports. The harness knows its own deadline; everything else
//! (a client's cancel, the server stopping, the service failing) comes
//! through here, so that `run_end` carries the right status the first time.

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

/// Why a run was stopped from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// Its client cancelled it: it ends `aborted`.
    Cancelled,
    /// The server stopped while it ran: it ends `interrupted` with this
    /// message.
    Interrupted(String),
    /// The service can no longer run it (its records cannot be stored): it
    /// ends `failed` with this message.
    Failed(String),
    /// Another attempt of its parent passed its checks first: it ends
    /// `aborted` with this message.
    Superseded(String),
    /// The server stops and hands it over: it leaves at its next safe point
    /// without an end (a model call in flight is given up, to be made
    /// again), to be resumed by another process.
    HandOver,
}

impl StopReason {
    /// The error a run stopped for this reason, without its own task (a
    /// queued or paused one), ends with: a superseded attempt's message; a
    /// cancel's is none.
    pub fn superseded(&self) -> Option<String> {
        match self {
            Self::Superseded(why) => Some(why.clone()),
            _ => None,
        }
    }
}

/// A run's stop signal; clones share it. The first reason given wins; later
/// ones only fire the token again, which is a no-op.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    token: CancellationToken,
    reason: OnceLock<StopReason>,
}

impl Stop {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops the run for `reason`; returns whether this was the first reason.
    pub fn stop(&self, reason: StopReason) -> bool {
        let first = self.0.reason.set(reason).is_ok();
        self.0.token.cancel();
        first
    }

    /// A client's cancel.
    pub fn cancel(&self) -> bool {
        self.stop(StopReason::Cancelled)
    }

    pub fn is_stopped(&self) -> bool {
        self.0.token.is_cancelled()
    }

    /// The reason the run was stopped for, once it was.
    pub fn reason(&self) -> Option<&StopReason> {
        self.0.reason.get()
    }

    /// The token that fires when the run is stopped.
    pub fn token(&self) -> &CancellationToken {
        &self.0.token
    }

    /// Resolves once the run is stopped.
    pub async fn stopped(&self) {
        self.0.token.cancelled().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_wins() {
        let stop = Stop::new();
        assert!(!stop.is_stopped());
        assert!(stop.stop(StopReason::Interrupted("bye".into())));
        assert!(!stop.cancel());
        assert!(stop.is_stopped());
        assert_eq!(stop.reason(), Some(&StopReason::Interrupted("bye".into())));
    }
}
