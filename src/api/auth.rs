//! Bearer-token authentication: each token names a tenant. Tokens are kept as
//! SHA-256 digests and compared in constant time.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::clients::ConnectionClient;
use super::error::ApiError;
use super::state::AppState;
use crate::config::TokenConfig;
use crate::run::Tenant;

/// The configured tokens, as digests.
#[derive(Clone, Default)]
pub struct Auth {
    tokens: Vec<(Tenant, [u8; 32])>,
}

/// The `token_sha256` of `token` (lower-case hex), as `[[auth.tokens]]`
/// takes it.
pub fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

impl Auth {
    pub fn new(tokens: &[TokenConfig]) -> Self {
        let tokens = tokens
            .iter()
            .filter_map(|token| {
                let digest: [u8; 32] = match (&token.token, &token.token_sha256) {
                    (Some(plain), _) => Sha256::digest(plain.as_bytes()).into(),
                    (None, Some(hex_digest)) => hex::decode(hex_digest).ok()?.try_into().ok()?,
                    (None, None) => return None,
                };
                Some((Tenant(token.tenant.clone()), digest))
            })
            .collect();
        Self { tokens }
    }

    pub fn is_enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Whether some configured token still names `tenant`.
    pub fn knows(&self, tenant: &Tenant) -> bool {
        self.tokens.iter().any(|(known, _)| known == tenant)
    }

    /// The tenant `presented` authenticates, checking every token whatever
    /// matches, so that timing tells nothing.
    fn tenant(&self, presented: &str) -> Option<Tenant> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for (tenant, expected) in &self.tokens {
            if bool::from(expected.ct_eq(&digest)) && found.is_none() {
                found = Some(tenant.clone());
            }
        }
        found
    }
}

/// The tenant a `?stream_token=` authenticates, on the events route of the
/// run it was made for.
fn stream_tenant(state: &AppState, request: &Request) -> Option<Tenant> {
    let route = request.extensions().get::<MatchedPath>()?;
    if route.as_str() != "/v1/runs/{id}/events" {
        return None;
    }
    let run_id = request.uri().path().split('/').nth(3)?;
    let run_id = uuid::Uuid::parse_str(run_id).ok()?;
    let token = request.uri().query()?.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == "stream_token").then_some(value)
    })?;
    // A tenant whose tokens were taken out of the configuration has its
    // stream tokens go with them.
    state
        .stream_tokens
        .verify(token, run_id, chrono::Utc::now().timestamp())
        .filter(|tenant| state.auth.knows(tenant))
}

/// Puts the request's [`Tenant`] in its extensions (and its response's),
/// or answers 401.
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let tenant = if state.auth.is_enabled() {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        match presented {
            Some(presented) => state.auth.tenant(presented).ok_or(ApiError::Unauthorized)?,
            // An EventSource sends no header: a stream token stands in,
            // for the one run's stream it was made for.
            None => stream_tenant(&state, &request).ok_or(ApiError::Unauthorized)?,
        }
    } else {
        Tenant::anonymous()
    };
    // Counted against the tenant from now on, not its address: one tenant
    // cannot hold every connection, whatever addresses it comes from.
    if state.auth.is_enabled()
        && let Some(connection) = request.extensions().get::<Arc<ConnectionClient>>()
        && !connection.claim(&state.client_connections, &tenant)
    {
        tracing::warn!(tenant = %tenant.0, "a tenant's connection limit reached; refusing a request");
        return Err(ApiError::TooManyConnections(
            state.client_connections.limit(),
        ));
    }
    request.extensions_mut().insert(tenant.clone());
    let mut response = next.run(request).await;
    // For the access log.
    response.extensions_mut().insert(tenant);
    Ok(response)
}
