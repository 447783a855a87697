//! Where a run is in its life: [`RunStatus`].

use serde::{Deserialize, Serialize, Serializer};

use crate::harness::Outcome;

/// Where a run is in its life: waiting for a slot, running, paused for a
/// client's decision, or ended with an [`Outcome`]. Written as one flat
/// string (`"queued"`, `"requires_action"`, `"completed"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Queued,
    Running,
    /// Paused: it waits for answers to its `pending_actions`, holding no
    /// slot and no task (it lives in storage).
    RequiresAction,
    Ended(Outcome),
}

impl RunStatus {
    /// Every status, the live ones last.
    pub const ALL: [RunStatus; 13] = [
        Self::Ended(Outcome::Completed),
        Self::Ended(Outcome::StepLimit),
        Self::Ended(Outcome::ToolLimit),
        Self::Ended(Outcome::Aborted),
        Self::Ended(Outcome::Timeout),
        Self::Ended(Outcome::ModelError),
        Self::Ended(Outcome::ContextLimit),
        Self::Ended(Outcome::CostLimit),
        Self::Ended(Outcome::Failed),
        Self::Ended(Outcome::Interrupted),
        Self::Queued,
        Self::Running,
        Self::RequiresAction,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::RequiresAction => "requires_action",
            Self::Ended(outcome) => outcome.as_str(),
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "queued" => Some(Self::Queued),
            "running" => Some(Self::Running),
            "requires_action" => Some(Self::RequiresAction),
            other => Outcome::parse(other).map(Self::Ended),
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Ended(_))
    }
}

impl From<Outcome> for RunStatus {
    fn from(outcome: Outcome) -> Self {
        Self::Ended(outcome)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RunStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown run status {text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn statuses_round_trip_through_text() {
        for status in RunStatus::ALL {
            assert_eq!(RunStatus::parse(status.as_str()), Some(status));
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, Value::from(status.as_str()));
            assert_eq!(serde_json::from_value::<RunStatus>(json).unwrap(), status);
        }
        assert_eq!(RunStatus::parse("done"), None);
        assert_eq!(
            RunStatus::ALL.iter().filter(|s| !s.is_terminal()).count(),
            3
        );
    }
}
