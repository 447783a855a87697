//! Attempts: a run tried several times independently, each attempt a child
//! run verified by the run's checks, the first (or lowest-numbered) to pass
//! chosen (SPEC section 27).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::RunStatus;

/// The temperature of attempts after the first when the request gives none
/// and the profile's is 0 or unset: at temperature 0 a model answers the
/// same way every time.
pub const DEFAULT_TEMPERATURE: f64 = 0.8;

/// `attempts` of a run request, as accepted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AttemptPolicy {
    /// How many attempts, 2 or more.
    pub n: u32,
    /// The temperature of attempts 2 and on (attempt 1 keeps its
    /// profile's); `None`: the profile's, or [`DEFAULT_TEMPERATURE`] where
    /// that is 0 or unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub until: Until,
}

impl AttemptPolicy {
    /// The temperature attempt `attempt` (from 1) is sent with: `None` keeps
    /// the profile's. `profile` is the profile's own.
    pub fn temperature_of(&self, attempt: u32, profile: Option<f64>) -> Option<f64> {
        if attempt <= 1 {
            return None;
        }
        self.temperature.or(match profile {
            Some(t) if t > 0.0 => None,
            _ => Some(DEFAULT_TEMPERATURE),
        })
    }
}

/// When the attempts stop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Until {
    /// The first attempt to end with its checks passing wins; the others
    /// are cancelled.
    #[default]
    FirstPass,
    /// Every attempt runs to its end; the lowest-numbered that passed wins.
    All,
}

impl Until {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstPass => "first_pass",
            Self::All => "all",
        }
    }
}

/// One attempt as its parent's run object lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptSummary {
    pub run_id: Uuid,
    pub attempt: u32,
    pub status: RunStatus,
    /// Whether its checks passed on its workspace as it ended; null until
    /// it has ended.
    pub checks_passed: Option<bool>,
}

/// What makes a run an attempt of another: the parent it is attempt
/// `attempt` (from 1) of, and the temperature it is sent with (`None`: its
/// profile's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttemptOf {
    pub parent_run_id: Uuid,
    pub attempt: u32,
    pub temperature: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_one_keeps_the_profiles_temperature_and_the_others_are_warmer() {
        let policy = AttemptPolicy {
            n: 3,
            temperature: None,
            until: Until::FirstPass,
        };
        assert_eq!(policy.temperature_of(1, None), None);
        assert_eq!(policy.temperature_of(2, None), Some(DEFAULT_TEMPERATURE));
        assert_eq!(
            policy.temperature_of(2, Some(0.0)),
            Some(DEFAULT_TEMPERATURE)
        );
        assert_eq!(
            policy.temperature_of(3, Some(0.5)),
            None,
            "the profile's own"
        );
        let given = AttemptPolicy {
            temperature: Some(1.1),
            ..policy
        };
        assert_eq!(given.temperature_of(1, Some(0.2)), None);
        assert_eq!(given.temperature_of(2, Some(0.2)), Some(1.1));
    }

    #[test]
    fn a_summary_shows_its_status_as_text() {
        let summary = AttemptSummary {
            run_id: Uuid::nil(),
            attempt: 2,
            status: RunStatus::Running,
            checks_passed: None,
        };
        let json = serde_json::to_value(summary).unwrap();
        assert_eq!(json["status"], "running");
        assert_eq!(
            serde_json::from_value::<AttemptSummary>(json).unwrap(),
            summary
        );
    }
}
