//! `GET /metrics` read by a real Prometheus text parser (the
//! `prometheus-parse` crate): histograms with cumulative buckets, counters
//! by label, HTTP requests by route and status, the build.

use prometheus_parse::{Scrape, Value};
use serde_json::json;

use crate::helpers::*;

fn scrape(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|line| Ok(line.to_owned()))).unwrap()
}

/// The sample `name` whose labels include `labels`.
fn sample<'a>(
    scrape: &'a Scrape,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'a prometheus_parse::Sample> {
    scrape.samples.iter().find(|sample| {
        sample.metric == name
            && labels
                .iter()
                .all(|(key, want)| sample.labels.get(key) == Some(*want))
    })
}

/// The value of the sample `name` whose labels include `labels`.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    sample(scrape, name, labels).and_then(|sample| match &sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
        _ => None,
    })
}

/// A histogram's buckets (upper bound, cumulative count).
fn histogram(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
    let sample =
        sample(scrape, name, labels).unwrap_or_else(|| panic!("no histogram {name} {labels:?}"));
    let Value::Histogram(buckets) = &sample.value else {
        panic!("{name} is not a histogram: {:?}", sample.value);
    };
    let mut buckets: Vec<(f64, f64)> = buckets.iter().map(|b| (b.less_than, b.count)).collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

#[tokio::test]
async fn metrics_are_histograms_and_labelled_counters_a_parser_reads() {
    let app = spawn_app().await;
    app.run_to_end(json!({"prompt": "hi"})).await;
    app.run_to_end(
        json!({"prompt": "call what is not there", "model": {"scripted": [
            {"content": "", "tool_calls": [call("x", "no_such_tool", json!({}))],
             "usage": {"input_tokens": 10, "output_tokens": 4}},
            {"content": "done", "usage": {"input_tokens": 20, "output_tokens": 6}}
        ]}}),
    )
    .await;
    assert_eq!(app.get("/v1/nothing-here").await.status, 404);
    // A run's end is answered once stored; its task counts it a moment later.
    app.wait_metrics(&["agent_runner_runs_finished_total{status=\"completed\"} 2"])
        .await;
    let reply = app.get("/metrics").await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let metrics = scrape(&reply.text);
    let counter = |name: &str, labels: &[(&str, &str)]| {
        value(&metrics, name, labels).unwrap_or_else(|| panic!("no {name} {labels:?}"))
    };
    for (name, labels, expected) in [
        ("agent_runner_runs_created_total", &[][..], 2.0),
        (
            "agent_runner_runs_finished_total",
            &[("status", "completed")][..],
            2.0,
        ),
        (
            "agent_runner_runs_finished_total",
            &[("status", "failed")][..],
            0.0,
        ),
        (
            "agent_runner_model_calls_total",
            &[("profile", "demo")][..],
            2.0,
        ),
        (
            "agent_runner_model_calls_total",
            &[("profile", "scripted")][..],
            2.0,
        ),
        (
            "agent_runner_tool_calls_total",
            &[("tool", "list_dir")][..],
            1.0,
        ),
        // What a model names but the run does not have is one label,
        // whatever its name.
        (
            "agent_runner_tool_errors_total",
            &[("tool", "unknown")][..],
            1.0,
        ),
        (
            "agent_runner_http_requests_total",
            &[("route", "/v1/runs"), ("status", "201")][..],
            2.0,
        ),
        (
            "agent_runner_http_requests_total",
            &[("route", "unmatched"), ("status", "404")][..],
            1.0,
        ),
        (
            "agent_runner_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))][..],
            1.0,
        ),
    ] {
        assert_eq!(counter(name, labels), expected, "{name} {labels:?}");
    }
    assert!(!reply.text.contains("no_such_tool"));
    // The demo model's usage and the script's.
    let input = counter("agent_runner_tokens_total", &[("direction", "input")]);
    assert!(input >= 30.0, "{input}");
    // Histograms: cumulative buckets ending in +Inf at the count.
    for (name, labels) in [
        ("agent_runner_run_duration_seconds", &[][..]),
        (
            "agent_runner_model_call_duration_seconds",
            &[("profile", "demo")][..],
        ),
        (
            "agent_runner_tool_call_duration_seconds",
            &[("tool", "list_dir")][..],
        ),
        (
            "agent_runner_http_request_duration_seconds",
            &[("route", "/v1/runs")][..],
        ),
    ] {
        let buckets = histogram(&metrics, name, labels);
        assert!(buckets.len() > 5, "{name}: {buckets:?}");
        assert!(
            buckets.windows(2).all(|pair| pair[0].1 <= pair[1].1),
            "{name} is cumulative: {buckets:?}"
        );
        let (last, total) = *buckets.last().unwrap();
        assert!(last.is_infinite(), "{name}: {buckets:?}");
        assert!(total >= 1.0, "{name}: {buckets:?}");
    }
    assert_eq!(
        histogram(&metrics, "agent_runner_run_duration_seconds", &[])
            .last()
            .unwrap()
            .1,
        2.0
    );
}
