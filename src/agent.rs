//! The service's vocabulary for agents: definitions stored once, in
//! versions never changed, that runs name instead of carrying them whole.
//! Shared by the API and the store, and free of both.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

/// One version of an agent, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agent {
    pub name: String,
    pub version: u32,
    pub description: Option<String>,
    /// The fields of a run body it defines, as accepted.
    pub definition: Arc<Map<String, Value>>,
    /// When this version was made.
    #[serde(serialize_with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    /// Whether the agent is archived now (new runs cannot name it).
    pub archived: bool,
}

fn rfc3339<S: serde::Serializer>(time: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&crate::run::format_time(time))
}

/// The longest agent name.
pub const MAX_NAME_BYTES: usize = 64;

/// `^[a-z0-9][a-z0-9_-]{0,63}$`
pub fn is_valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_NAME_BYTES
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// A new version of an agent, to store.
#[derive(Debug, Clone)]
pub struct NewVersion {
    pub name: String,
    pub description: Option<String>,
    /// The definition's JSON.
    pub definition: String,
    pub at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for good in ["a", "triage", "t-2_x", "0", &"a".repeat(64)] {
            assert!(is_valid_name(good), "{good}");
        }
        for bad in ["", "Triage", "-a", "_a", "a b", "a@1", "é", &"a".repeat(65)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }
}
