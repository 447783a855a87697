//! What `GET /metrics` shows, in the OpenMetrics text format (which
//! Prometheus scrapes), kept with the `prometheus-client` crate: counters
//! and gauges are atomics, so counting never slows a run; durations are
//! histograms, so that quantiles can be computed and alerted on.
//!
//! Labels are bounded: a run's terminal status, a model profile (the
//! server's), a tool (one the run has; anything else a model names counts
//! as `unknown`), a route (the route table's, `unmatched` otherwise) and an
//! HTTP status.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Metric, Registry};

use crate::harness::{Outcome, Usage};

/// The directions of token counters: a cache's are parts of `input`.
const TOKEN_DIRECTIONS: [&str; 4] = ["input", "output", "cached_input", "cache_write"];
use crate::sync::lock;

/// What `/metrics` reads from the state that owns it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    pub active_runs: u64,
    pub queued_runs: u64,
    pub writer_batches: u64,
    pub writer_operations: u64,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProfileLabel {
    profile: String,
}

/// Two profiles of the configuration: a fallback's.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FallbackLabels {
    from: String,
    to: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

/// A tenant: a name of the configuration's tokens (`default` without
/// tokens), never a value a client picks.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantReasonLabels {
    tenant: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantOutcomeLabels {
    tenant: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantDirectionLabels {
    tenant: String,
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantProfileLabels {
    tenant: String,
    profile: String,
}

/// A counter of US dollars.
type Dollars = Counter<f64, std::sync::atomic::AtomicU64>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: &'static str,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Registers a handle on `metric` (metrics are shared handles). Help texts
/// have no final period: the encoder adds one.
fn add<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: &M) {
    registry.register(name, help, metric.clone());
}

/// Buckets of a run's duration: 50 ms to about 14 hours.
fn run_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.5, 14))
}

/// Buckets of a model or tool call's duration: 5 ms to about 20 minutes.
fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

/// Buckets of an HTTP request's duration: 1 ms to about a minute.
fn http_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.5, 13))
}

pub struct Metrics {
    registry: Registry,
    runs_created: Counter,
    runs_paused: Counter,
    runs_rejected: Counter,
    finished: Family<StatusLabel, Counter>,
    model_calls: Family<ProfileLabel, Counter>,
    model_errors: Family<ProfileLabel, Counter>,
    model_fallbacks: Family<FallbackLabels, Counter>,
    tool_calls: Family<ToolLabel, Counter>,
    tool_errors: Family<ToolLabel, Counter>,
    tokens: Family<DirectionLabel, Counter>,
    tenant_runs_created: Family<TenantLabel, Counter>,
    tenant_runs_rejected: Family<TenantReasonLabels, Counter>,
    schedule_ticks: Family<TenantOutcomeLabels, Counter>,
    tenant_tokens: Family<TenantDirectionLabels, Counter>,
    cost: Family<TenantProfileLabels, Dollars>,
    spans_dropped: Counter,
    run_duration: Histogram,
    model_duration: Histograms<ProfileLabel>,
    tool_duration: Histograms<ToolLabel>,
    http_requests: Family<HttpLabels, Counter>,
    http_duration: Histograms<RouteLabel>,
    /// One render at a time (the gauges of the moment join it).
    rendering: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("agent_runner");
        registry.register(
            "build",
            "The running build",
            Info::new(VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );
        let finished = Family::<StatusLabel, Counter>::default();
        // Every status and direction is shown from the start, at zero.
        for outcome in Outcome::ALL {
            let _ = finished.get_or_create(&StatusLabel {
                status: outcome.as_str(),
            });
        }
        let tokens = Family::<DirectionLabel, Counter>::default();
        for direction in TOKEN_DIRECTIONS {
            let _ = tokens.get_or_create(&DirectionLabel { direction });
        }
        let metrics = Self {
            runs_created: Counter::default(),
            runs_paused: Counter::default(),
            runs_rejected: Counter::default(),
            finished,
            model_calls: Family::default(),
            model_errors: Family::default(),
            model_fallbacks: Family::default(),
            tenant_runs_created: Family::default(),
            tenant_runs_rejected: Family::default(),
            schedule_ticks: Family::default(),
            tenant_tokens: Family::default(),
            cost: Family::default(),
            spans_dropped: Counter::default(),
            tool_calls: Family::default(),
            tool_errors: Family::default(),
            tokens,
            run_duration: run_buckets(),
            model_duration: Family::new_with_constructor(call_buckets),
            tool_duration: Family::new_with_constructor(call_buckets),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(http_buckets),
            rendering: Mutex::new(()),
            registry: Registry::default(),
        };
        let r = &mut registry;
        add(r, "runs_created", "Runs accepted", &metrics.runs_created);
        add(
            r,
            "runs_paused",
            "Pauses for a client's decision (approvals, client tools)",
            &metrics.runs_paused,
        );
        add(
            r,
            "runs_rejected",
            "Runs refused: a full queue, a tenant's rate limit or token quota",
            &metrics.runs_rejected,
        );
        add(
            r,
            "runs_finished",
            "Runs ended, by terminal status",
            &metrics.finished,
        );
        add(
            r,
            "model_calls",
            "Model calls that returned a response, by model profile",
            &metrics.model_calls,
        );
        add(
            r,
            "model_errors",
            "Model calls that failed, by model profile",
            &metrics.model_errors,
        );
        add(
            r,
            "model_fallbacks",
            "Model calls that went on to a fallback profile, by the profile they left and the one they went to",
            &metrics.model_fallbacks,
        );
        add(
            r,
            "tool_calls",
            "Tool calls dispatched, by tool",
            &metrics.tool_calls,
        );
        add(
            r,
            "tool_errors",
            "Tool calls answered with an error, by tool",
            &metrics.tool_errors,
        );
        add(
            r,
            "tokens",
            "Tokens the models reported, by direction (input, output; cached_input and \
             cache_write: the part of input read from and written to a prompt cache)",
            &metrics.tokens,
        );
        add(
            r,
            "tenant_runs_created",
            "Runs accepted, by tenant",
            &metrics.tenant_runs_created,
        );
        add(
            r,
            "tenant_runs_rejected",
            "Runs refused, by tenant and reason (queue_full, rate_limited, quota_exceeded)",
            &metrics.tenant_runs_rejected,
        );
        add(
            r,
            "schedule_ticks",
            "Schedules' ticks, by tenant and outcome (made: a run; skipped: the previous run was \
             live; refused: a limit of the tenant)",
            &metrics.schedule_ticks,
        );
        add(
            r,
            "tenant_tokens",
            "Tokens the models reported, by tenant and direction (as agent_runner_tokens_total)",
            &metrics.tenant_tokens,
        );
        add(
            r,
            "cost_usd",
            "What model calls cost in US dollars, by tenant and model profile (priced profiles)",
            &metrics.cost,
        );
        add(
            r,
            "spans_dropped",
            "Spans not exported: the export queue was full, or the collector failed",
            &metrics.spans_dropped,
        );
        add(
            r,
            "run_duration_seconds",
            "Time from a run's start to its end (or its pause)",
            &metrics.run_duration,
        );
        add(
            r,
            "model_call_duration_seconds",
            "Duration of model calls, by model profile",
            &metrics.model_duration,
        );
        add(
            r,
            "tool_call_duration_seconds",
            "Duration of tool calls, by tool",
            &metrics.tool_duration,
        );
        add(
            r,
            "http_requests",
            "HTTP requests answered, by route and status",
            &metrics.http_requests,
        );
        add(
            r,
            "http_request_duration_seconds",
            "Time to the head of HTTP answers (of a stream: its start), by route",
            &metrics.http_duration,
        );
        Self {
            registry,
            ..metrics
        }
    }

    pub fn run_created(&self, tenant: &str) {
        self.runs_created.inc();
        self.tenant_runs_created
            .get_or_create(&TenantLabel {
                tenant: tenant.to_owned(),
            })
            .inc();
    }

    /// The counter of spans dropped, for the span exporter to count in.
    pub fn spans_dropped(&self) -> Counter {
        self.spans_dropped.clone()
    }

    pub fn run_paused(&self) {
        self.runs_paused.inc();
    }

    /// A run refused for `reason` (an error code: `queue_full`,
    /// `rate_limited`, `quota_exceeded`).
    pub fn run_rejected(&self, tenant: &str, reason: &'static str) {
        self.runs_rejected.inc();
        self.tenant_runs_rejected
            .get_or_create(&TenantReasonLabels {
                tenant: tenant.to_owned(),
                reason,
            })
            .inc();
    }

    /// A schedule's tick, counted once (by the replica that counted it):
    /// `made`, `skipped` or `refused`.
    pub fn schedule_tick(&self, tenant: &str, outcome: &'static str) {
        self.schedule_ticks
            .get_or_create(&TenantOutcomeLabels {
                tenant: tenant.to_owned(),
                outcome,
            })
            .inc();
    }

    pub fn finished(&self, outcome: Outcome) {
        self.finished
            .get_or_create(&StatusLabel {
                status: outcome.as_str(),
            })
            .inc();
    }

    pub fn run_duration(&self, duration: Duration) {
        self.run_duration.observe(duration.as_secs_f64());
    }

    /// A model call of `profile` that answered in `millis`.
    pub fn model_call(&self, profile: &str, millis: f64) {
        let label = ProfileLabel {
            profile: profile.to_owned(),
        };
        self.model_calls.get_or_create(&label).inc();
        self.model_duration
            .get_or_create(&label)
            .observe(seconds(millis));
    }

    pub fn model_error(&self, profile: &str) {
        self.model_errors
            .get_or_create(&ProfileLabel {
                profile: profile.to_owned(),
            })
            .inc();
    }

    /// A model call that went from profile `from` to its fallback `to`.
    pub fn model_fallback(&self, from: &str, to: &str) {
        self.model_fallbacks
            .get_or_create(&FallbackLabels {
                from: from.to_owned(),
                to: to.to_owned(),
            })
            .inc();
    }

    /// Tokens a model call of a run of `tenant` on `profile` reported, and
    /// what they cost.
    pub fn usage(&self, tenant: &str, profile: &str, usage: &Usage) {
        if let Some(cost) = usage.cost_usd {
            self.cost
                .get_or_create(&TenantProfileLabels {
                    tenant: tenant.to_owned(),
                    profile: profile.to_owned(),
                })
                .inc_by(cost);
        }
        let counts = [
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens,
            usage.cache_write_tokens,
        ];
        for (direction, count) in TOKEN_DIRECTIONS.into_iter().zip(counts) {
            let Some(count) = count else { continue };
            self.tokens
                .get_or_create(&DirectionLabel { direction })
                .inc_by(count);
            self.tenant_tokens
                .get_or_create(&TenantDirectionLabels {
                    tenant: tenant.to_owned(),
                    direction,
                })
                .inc_by(count);
        }
    }

    /// A tool call that ended after `millis` (`tool`: a tool of the run's,
    /// or `unknown`).
    pub fn tool_call(&self, tool: &str, is_error: bool, millis: f64) {
        let label = ToolLabel {
            tool: tool.to_owned(),
        };
        self.tool_calls.get_or_create(&label).inc();
        if is_error {
            self.tool_errors.get_or_create(&label).inc();
        }
        self.tool_duration
            .get_or_create(&label)
            .observe(seconds(millis));
    }

    /// An HTTP request answered (`route`: the route table's path).
    pub fn http_request(&self, route: &'static str, status: u16, duration: Duration) {
        self.http_requests
            .get_or_create(&HttpLabels { route, status })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabel { route })
            .observe(duration.as_secs_f64());
    }

    /// The text exposition of every metric, with the gauges of state that
    /// lives elsewhere (the runner's queue, the store's writer).
    pub fn render(&self, gauges: Gauges) -> String {
        let _one = lock(&self.rendering);
        let mut now = Registry::with_prefix("agent_runner");
        now.register(
            "active_runs",
            "Runs running now",
            ConstGauge::new(saturate(gauges.active_runs)),
        );
        now.register(
            "queue_length",
            "Runs waiting for a slot (on PostgreSQL: in the whole database, as of the last sweep)",
            ConstGauge::new(saturate(gauges.queued_runs)),
        );
        now.register(
            "store_batches",
            "Write transactions committed",
            ConstCounter::new(gauges.writer_batches),
        );
        now.register(
            "store_writes",
            "Write operations committed",
            ConstCounter::new(gauges.writer_operations),
        );
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &now))
            .and_then(|()| encode_eof(&mut out));
        out
    }
}

fn seconds(millis: f64) -> f64 {
    (millis / 1000.0).max(0.0)
}

fn saturate(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_histograms_and_every_status_starts_at_zero() {
        let metrics = Metrics::new();
        metrics.run_duration(Duration::from_millis(120));
        metrics.model_call("demo", 40.0);
        metrics.tool_call("list_dir", true, 2.0);
        metrics.usage(
            "a",
            "p",
            &Usage {
                input_tokens: Some(12),
                output_tokens: Some(3),
                cached_input_tokens: Some(4),
                cost_usd: Some(0.25),
                ..Usage::default()
            },
        );
        let text = metrics.render(Gauges::default());
        for line in [
            "agent_runner_run_duration_seconds_count 1",
            "agent_runner_run_duration_seconds_bucket{le=\"0.125\"} 1",
            "agent_runner_model_call_duration_seconds_count{profile=\"demo\"} 1",
            "agent_runner_tool_errors_total{tool=\"list_dir\"} 1",
            "agent_runner_tokens_total{direction=\"input\"} 12",
            "agent_runner_tenant_tokens_total{tenant=\"a\",direction=\"output\"} 3",
            "agent_runner_tokens_total{direction=\"cached_input\"} 4",
            "agent_runner_tokens_total{direction=\"cache_write\"} 0",
            "agent_runner_cost_usd_total{tenant=\"a\",profile=\"p\"} 0.25",
            "agent_runner_runs_finished_total{status=\"interrupted\"} 0",
            "agent_runner_active_runs 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(text.contains("agent_runner_build_info{version="));
        assert!(text.ends_with("# EOF\n"));
    }
}
