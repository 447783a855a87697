//! The run a request names: the `{id}` of its path, read for the tenant the
//! request authenticated as. Any other id (not a UUID, unknown, another
//! tenant's) is a 404, decided here once rather than in every handler; a
//! path that does not even decode is a 400.

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use uuid::Uuid;

use super::error::ApiError;
use super::state::AppState;
use crate::run::{Run, Tenant};

/// The run of the path's `{id}`, as the tenant may see it.
pub struct TenantRun {
    pub tenant: Tenant,
    pub run: Run,
}

impl FromRequestParts<AppState> for TenantRun {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let tenant = parts
            .extensions
            .get::<Tenant>()
            .cloned()
            .ok_or(ApiError::Unauthorized)?;
        // A path that is not UTF-8 once decoded is malformed, not unknown.
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::InvalidQuery(rejection.body_text()))?;
        let id = params
            .iter()
            .find_map(|(name, value)| (name == "id").then_some(value))
            .ok_or(ApiError::NotFound("run"))?;
        let id = Uuid::parse_str(id).map_err(|_| ApiError::NotFound("run"))?;
        let run = read(state, &tenant, id).await?;
        Ok(Self { tenant, run })
    }
}

/// Reads the run `id` as `tenant` sees it.
pub async fn read(state: &AppState, tenant: &Tenant, id: Uuid) -> Result<Run, ApiError> {
    state
        .runner
        .store()
        .get_run(tenant, id)
        .await?
        .ok_or(ApiError::NotFound("run"))
}
