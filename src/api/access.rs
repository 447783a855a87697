//! Every request, once answered: one access-log line (method, route,
//! status, duration, tenant; never a token, a query or a body) and the HTTP
//! metrics. A stream is counted once its head is sent.

use std::time::{Instant, SystemTime};

use axum::extract::{MatchedPath, Request};
use axum::response::Response;

use super::state::AppState;
use crate::run::Tenant;
use crate::telemetry::HttpRequest;

/// A request being answered, as the access log and the metrics tell it.
pub struct Access {
    started: Instant,
    started_at: SystemTime,
    method: axum::http::Method,
    route: Option<&'static str>,
    traceparent: Option<axum::http::HeaderValue>,
}

impl Access {
    /// `request` arrived.
    pub fn begin(state: &AppState, request: &Request) -> Self {
        Self {
            started: Instant::now(),
            started_at: SystemTime::now(),
            method: request.method().clone(),
            route: request
                .extensions()
                .get::<MatchedPath>()
                .and_then(|path| super::routes::static_path(path.as_str())),
            traceparent: state
                .runner
                .telemetry()
                .is_on()
                .then(|| request.headers().get("traceparent").cloned())
                .flatten(),
        }
    }

    /// It was answered with `response`: its line, metrics and span.
    pub fn end(self, state: &AppState, response: &Response) {
        let elapsed = self.started.elapsed();
        let status = response.status().as_u16();
        let route = self.route.unwrap_or("unmatched");
        let tenant = response.extensions().get::<Tenant>();
        state.runner.metrics().http_request(route, status, elapsed);
        state.runner.telemetry().http_span(HttpRequest {
            method: self.method.as_str(),
            route,
            status,
            started: self.started_at,
            traceparent: self
                .traceparent
                .as_ref()
                .and_then(|value| value.to_str().ok()),
        });
        tracing::info!(
            target: "agent_runner::access",
            method = %self.method,
            route,
            status,
            // Microseconds are plenty.
            duration_ms = (elapsed.as_secs_f64() * 1e6).round() / 1e3,
            tenant = tenant.map_or("-", |tenant| tenant.0.as_str()),
            "request"
        );
    }
}
