//! Every request, once answered: one access-log line (method, route,
//! status, duration, tenant; never a token, a query or a body) and the HTTP
//! metrics. A stream is counted once its head is sent.

use std::time::{Instant, SystemTime};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::state::AppState;
use crate::run::Tenant;
use crate::telemetry::HttpRequest;

pub async fn observe(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let started_at = SystemTime::now();
    let method = request.method().clone();
    let traceparent = state
        .runner
        .telemetry()
        .is_on()
        .then(|| request.headers().get("traceparent").cloned())
        .flatten();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .and_then(|path| super::routes::static_path(path.as_str()));
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    let route = route.unwrap_or("unmatched");
    let tenant = response.extensions().get::<Tenant>();
    state.runner.metrics().http_request(route, status, elapsed);
    state.runner.telemetry().http_span(HttpRequest {
        method: method.as_str(),
        route,
        status,
        started: started_at,
        traceparent: traceparent.as_ref().and_then(|value| value.to_str().ok()),
    });
    tracing::info!(
        target: "agent_runner::access",
        method = %method,
        route,
        status,
        // Microseconds are plenty.
        duration_ms = (elapsed.as_secs_f64() * 1e6).round() / 1e3,
        tenant = tenant.map_or("-", |tenant| tenant.0.as_str()),
        "request"
    );
    response
}
