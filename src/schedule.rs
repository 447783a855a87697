//! The service's vocabulary for schedules (SPEC section 23): a cron in a
//! timezone, and the run each of its ticks makes. Shared by the API and the
//! store, and free of both.
//!
//! Cron expressions are parsed and their times computed by `croner`, in
//! the schedule's IANA timezone (`chrono-tz`), never by hand. Across a
//! change of the clock (daylight saving time) its rules hold: a time of
//! day that does not exist that day (spring forward) is run at the first
//! instant after the gap if the expression names that time (`30 2 * * *`),
//! and skipped by one that matches it only as an interval (`*/15 * * * *`);
//! a time that happens twice (fall back) is run once, at the first, by an
//! expression that names it, and twice by an interval.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// Whether each run of a schedule starts a thread of its own, or continues
/// the schedule's previous run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadMode {
    #[default]
    New,
    Continue,
}

/// What a tick does while the schedule's previous run is live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Nothing: the tick is counted in `skipped_ticks`.
    #[default]
    Skip,
    /// Its run is queued behind the live one.
    Enqueue,
}

impl ThreadMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Continue => "continue",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_value(Value::String(text.to_owned())).ok()
    }
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Enqueue => "enqueue",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_value(Value::String(text.to_owned())).ok()
    }
}

/// A schedule as stored and as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    pub id: Uuid,
    pub name: Option<String>,
    pub cron: String,
    pub timezone: String,
    /// The run body each tick makes a run of, as accepted.
    pub run: Value,
    pub thread: ThreadMode,
    pub overlap: Overlap,
    pub enabled: bool,
    /// The next tick (null while disabled).
    #[serde(serialize_with = "crate::run::rfc3339_opt")]
    pub next_run_at: Option<DateTime<Utc>>,
    /// The newest run it made (a tick's or a trigger's).
    pub last_run_id: Option<Uuid>,
    /// Ticks that made no run: the previous run was live (`overlap: skip`).
    pub skipped_ticks: u64,
    /// Ticks a tenant limit refused (rate, quota, queue): counted, not
    /// retried.
    pub refused_ticks: u64,
    #[serde(serialize_with = "crate::run::rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "crate::run::rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// The longest `name`.
pub const MAX_NAME_BYTES: usize = 200;

/// A cron expression in a timezone: when its ticks fall.
#[derive(Debug, Clone)]
pub struct Timing {
    cron: Cron,
    zone: Tz,
}

impl Timing {
    /// Five fields, or six with seconds first; an IANA timezone. The error
    /// names the field (`cron`, `timezone`) and what is wrong.
    pub fn parse(cron: &str, timezone: &str) -> Result<Self, String> {
        let fields = cron.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(format!(
                "cron: {cron:?} has {fields} fields; five (minute hour day month weekday) or \
                 six (seconds first)"
            ));
        }
        let parsed = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(cron)
            .map_err(|error| format!("cron: {cron:?} is not a valid expression: {error}"))?;
        let zone = Tz::from_str(timezone).map_err(|_| {
            format!("timezone: {timezone:?} is not an IANA timezone name (e.g. Europe/Berlin)")
        })?;
        let timing = Self { cron: parsed, zone };
        if timing.next_after(Utc::now()).is_none() {
            return Err(format!("cron: {cron:?} never falls due"));
        }
        Ok(timing)
    }

    /// The first tick after `time`.
    pub fn next_after(&self, time: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = time.with_timezone(&self.zone);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|next| next.with_timezone(&Utc))
    }

    /// The latest tick at or before `now` and at or after `due` (a tick
    /// that fell due): of ticks missed, the one made up.
    pub fn latest_due(&self, due: DateTime<Utc>, now: DateTime<Utc>) -> DateTime<Utc> {
        let local = now.with_timezone(&self.zone);
        match self.cron.find_previous_occurrence(&local, true) {
            Ok(latest) if latest.with_timezone(&Utc) >= due => latest.with_timezone(&Utc),
            _ => due,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn five_fields_are_minutes_and_six_have_seconds_first() {
        let five = Timing::parse("*/15 * * * *", "UTC").unwrap();
        assert_eq!(
            five.next_after(at("2026-03-01T10:07:00Z")),
            Some(at("2026-03-01T10:15:00Z"))
        );
        let six = Timing::parse("*/20 * * * * *", "UTC").unwrap();
        assert_eq!(
            six.next_after(at("2026-03-01T10:07:05Z")),
            Some(at("2026-03-01T10:07:20Z"))
        );
    }

    #[test]
    fn a_timezone_moves_the_ticks_and_follows_its_clock_changes() {
        let berlin = Timing::parse("0 9 * * 1-5", "Europe/Berlin").unwrap();
        // Winter: UTC+1; summer: UTC+2 (the clocks changed on 29 March).
        assert_eq!(
            berlin.next_after(at("2026-03-27T00:00:00Z")),
            Some(at("2026-03-27T08:00:00Z"))
        );
        assert_eq!(
            berlin.next_after(at("2026-03-28T00:00:00Z")),
            Some(at("2026-03-30T07:00:00Z"))
        );
        // 02:30 does not exist on 29 March in Berlin: run after the gap.
        let gap = Timing::parse("30 2 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            gap.next_after(at("2026-03-28T12:00:00Z")),
            Some(at("2026-03-29T01:00:00Z"))
        );
    }

    #[test]
    fn missed_ticks_are_made_up_by_the_latest() {
        let hourly = Timing::parse("0 * * * *", "UTC").unwrap();
        let due = at("2026-03-01T10:00:00Z");
        assert_eq!(
            hourly.latest_due(due, at("2026-03-01T13:20:00Z")),
            at("2026-03-01T13:00:00Z")
        );
        assert_eq!(hourly.latest_due(due, at("2026-03-01T10:00:30Z")), due);
    }

    #[test]
    fn refusals_name_the_field() {
        for (cron, zone, field) in [
            ("* * * *", "UTC", "cron:"),
            ("* * * * * * *", "UTC", "cron:"),
            ("61 * * * *", "UTC", "cron:"),
            ("0 9 * * MON", "Mars/Olympus", "timezone:"),
            ("0 0 30 2 *", "UTC", "cron:"),
        ] {
            let error = Timing::parse(cron, zone).unwrap_err();
            assert!(error.starts_with(field), "{cron} {zone}: {error}");
        }
    }
}
