//! Liveness, readiness, metrics, the model and MCP server catalogues, the
//! caller's tenant and the API's own document.

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::error::ApiError;
use super::state::AppState;
use crate::run::Tenant;
use crate::runner::TenantReport;

pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Ready when the database answers and the server still takes runs.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if let Some(why) = state.runner.store().writer().dead() {
        return Err(ApiError::Unavailable(format!(
            "the store's writer died ({why}); the server is stopping"
        )));
    }
    if state.runner.is_closing() {
        return Err(ApiError::ShuttingDown);
    }
    if let Some(why) = state.runner.unready() {
        return Err(ApiError::Unavailable(why));
    }
    if let Some(failing) = state.runner.store().writer().failing_for() {
        return Err(ApiError::Unavailable(format!(
            "storage has refused writes for {} ms",
            failing.as_millis()
        )));
    }
    state
        .runner
        .store()
        .ping()
        .await
        .map_err(|e| ApiError::Unavailable(format!("the database is not reachable: {e}")))?;
    Ok(Json(json!({"status": "ready", "sandbox": state.sandbox})))
}

/// `GET /metrics`: with `[server] metrics_token`, for its bearer only (it
/// names tenants and what they use).
pub async fn metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(expected) = &state.metrics_token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(super::auth::token_sha256)
            .unwrap_or_default();
        use subtle::ConstantTimeEq;
        if !bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
            return Err(ApiError::Unauthorized);
        }
    }
    let text = state.runner.metrics().render(state.runner.gauges());
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text))
}

/// The configured model profiles: names and kinds, never a key.
pub async fn models(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"models": state.runner.profiles().list()}))
}

/// The configured MCP servers: names and transports, never a token.
pub async fn mcp(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"servers": state.runner.mcp().list()}))
}

/// `GET /v1/tenant`: the caller's tenant's use of the server and its
/// limits.
pub async fn tenant(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Json<TenantReport>, ApiError> {
    Ok(Json(state.runner.tenant_report(&tenant).await?))
}

/// The OpenAPI document, as JSON: `openapi.yaml` converted (a test keeps the
/// two the same), built into the binary.
pub const OPENAPI_JSON: &str = include_str!("../../openapi.json");

/// `GET /openapi.json`
pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}
