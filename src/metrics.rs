//! Counters for `GET /metrics`, kept with atomics so that counting never
//! slows a run, rendered in the Prometheus text format.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::harness::Outcome;

/// A sum and a count, for durations.
#[derive(Debug, Default)]
pub struct Timing {
    micros: AtomicU64,
    count: AtomicU64,
}

impl Timing {
    pub fn record(&self, duration: Duration) {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.micros.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_millis(&self, millis: f64) {
        self.record(Duration::from_secs_f64((millis / 1000.0).max(0.0)));
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
        let seconds = self.micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {seconds}");
        let _ = writeln!(out, "{name}_count {}", self.count.load(Ordering::Relaxed));
    }
}

/// What `/metrics` reads from the state that owns it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    pub active_runs: u64,
    pub queued_runs: u64,
    pub writer_batches: u64,
    pub writer_operations: u64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    pub runs_created: AtomicU64,
    /// Pauses stored: runs that stopped to wait for a client's decision.
    pub runs_paused: AtomicU64,
    finished: [AtomicU64; Outcome::ALL.len()],
    pub model_calls: AtomicU64,
    pub model_errors: AtomicU64,
    pub tool_calls: AtomicU64,
    pub tool_errors: AtomicU64,
    pub run_duration: Timing,
    pub model_duration: Timing,
    pub tool_duration: Timing,
    pub rejected_queue_full: AtomicU64,
}

impl Metrics {
    pub fn finished(&self, outcome: Outcome) {
        if let Some(i) = Outcome::ALL.iter().position(|s| *s == outcome) {
            self.finished[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The Prometheus text exposition of every counter, with the gauges of
    /// state that lives elsewhere (the runner's queue, the store's writer).
    pub fn render(&self, gauges: Gauges) -> String {
        let Gauges {
            active_runs,
            queued_runs,
            writer_batches,
            writer_operations,
        } = gauges;
        let mut out = String::with_capacity(4096);
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        };
        counter(
            &mut out,
            "agent_runner_runs_created_total",
            "Runs accepted.",
            self.runs_created.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "agent_runner_runs_paused_total",
            "Pauses for a client's decision (approvals, client tools).",
            self.runs_paused.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP agent_runner_runs_finished_total Runs ended, by terminal status.\n# TYPE agent_runner_runs_finished_total counter"
        );
        for (status, count) in Outcome::ALL.iter().zip(&self.finished) {
            let _ = writeln!(
                out,
                "agent_runner_runs_finished_total{{status=\"{status}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        gauge(
            &mut out,
            "agent_runner_active_runs",
            "Runs running now.",
            active_runs,
        );
        gauge(
            &mut out,
            "agent_runner_queue_length",
            "Runs waiting for a slot (on PostgreSQL: in the whole database, as of the last sweep).",
            queued_runs,
        );
        counter(
            &mut out,
            "agent_runner_runs_rejected_total",
            "Runs refused because the queue was full.",
            self.rejected_queue_full.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "agent_runner_model_calls_total",
            "Model calls that returned a response.",
            self.model_calls.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "agent_runner_model_errors_total",
            "Model calls that failed.",
            self.model_errors.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "agent_runner_tool_calls_total",
            "Tool calls dispatched.",
            self.tool_calls.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "agent_runner_tool_errors_total",
            "Tool calls answered with an error.",
            self.tool_errors.load(Ordering::Relaxed),
        );
        self.run_duration.render(
            &mut out,
            "agent_runner_run_duration_seconds",
            "Time from a run's start to its end.",
        );
        self.model_duration.render(
            &mut out,
            "agent_runner_model_call_duration_seconds",
            "Duration of model calls.",
        );
        self.tool_duration.render(
            &mut out,
            "agent_runner_tool_call_duration_seconds",
            "Duration of tool calls.",
        );
        counter(
            &mut out,
            "agent_runner_store_batches_total",
            "Write transactions committed.",
            writer_batches,
        );
        counter(
            &mut out,
            "agent_runner_store_writes_total",
            "Write operations committed.",
            writer_operations,
        );
        out
    }
}
