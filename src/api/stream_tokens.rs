//! Stream tokens: what lets an `EventSource` (which cannot send a header)
//! follow one run's events. `POST /v1/runs/{id}/stream_tokens` makes a
//! token valid for that run's `/events` only, for `expires_in` seconds,
//! passed as `?stream_token=`.
//!
//! A token is `RUN.EXPIRY.TENANT.MAC`: the run's id, the Unix second it
//! expires at, the tenant (hex), and an HMAC-SHA256 of them under the
//! database's stream key ([`crate::store::Store::stream_key`]), so that every
//! replica of the database takes every other's tokens and nothing is stored
//! per token. It authenticates that tenant for that run's stream and nothing
//! else.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::json;
use sha2::Sha256;
use uuid::Uuid;

use super::error::ApiError;
use super::state::AppState;
use super::tenant_run::TenantRun;
use crate::run::{Tenant, format_time};

/// A token's lifetime unless the request asks for another.
pub const DEFAULT_EXPIRES_IN: u64 = 300;
/// The longest lifetime a request may ask for: a day.
pub const MAX_EXPIRES_IN: u64 = 86_400;

/// Makes and checks stream tokens with one key.
#[derive(Clone)]
pub struct StreamTokens {
    key: [u8; 32],
}

impl std::fmt::Debug for StreamTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamTokens { key: [redacted] }")
    }
}

impl StreamTokens {
    pub fn new(key: [u8; 32]) -> Self {
        Self { key }
    }

    /// A token for `tenant` to follow run `run_id` until `expires` (Unix
    /// seconds).
    pub fn issue(&self, tenant: &Tenant, run_id: Uuid, expires: i64) -> String {
        let tenant = hex::encode(tenant.0.as_bytes());
        let mac = hex::encode(self.mac(run_id, expires, &tenant));
        format!("{run_id}.{expires}.{tenant}.{mac}")
    }

    /// The tenant `token` authenticates for run `run_id`'s stream at `now`
    /// (Unix seconds); `None` when it is malformed, for another run,
    /// expired, or not made with this key.
    pub fn verify(&self, token: &str, run_id: Uuid, now: i64) -> Option<Tenant> {
        let mut parts = token.split('.');
        let (run, expires, tenant, mac) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || Uuid::parse_str(run).ok()? != run_id {
            return None;
        }
        let expires: i64 = expires.parse().ok()?;
        let given = hex::decode(mac).ok()?;
        // Checked in constant time, before anything else is said of it.
        let expected = self.hmac(run_id, expires, tenant);
        expected.verify_slice(&given).ok()?;
        if expires <= now {
            return None;
        }
        let tenant = String::from_utf8(hex::decode(tenant).ok()?).ok()?;
        Some(Tenant(tenant))
    }

    fn hmac(&self, run_id: Uuid, expires: i64, tenant_hex: &str) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes a key of any size");
        mac.update(format!("stream-token.v1|{run_id}|{expires}|{tenant_hex}").as_bytes());
        mac
    }

    fn mac(&self, run_id: Uuid, expires: i64, tenant_hex: &str) -> Vec<u8> {
        self.hmac(run_id, expires, tenant_hex)
            .finalize()
            .into_bytes()
            .to_vec()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    /// A JSON number: `300` and `300.0` are the same integer.
    expires_in: Option<serde_json::Number>,
}

/// `POST /v1/runs/{id}/stream_tokens`: a token for the run's stream. The
/// body is optional (`{"expires_in": SECONDS}`, 1 to a day).
pub async fn create(
    State(state): State<AppState>,
    TenantRun { tenant, run }: TenantRun,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: TokenRequest = if body.iter().all(u8::is_ascii_whitespace) {
        TokenRequest::default()
    } else {
        let content_type = headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        if !super::json::is_json(content_type) {
            return Err(ApiError::UnsupportedMediaType(
                "expected a body with Content-Type: application/json".into(),
            ));
        }
        super::json::parse(&body)?
    };
    let expires_in = match &request.expires_in {
        None => DEFAULT_EXPIRES_IN,
        Some(number) => whole_seconds(number).ok_or_else(|| {
            ApiError::Validation(format!(
                "expires_in must be a whole number of seconds from 1 to {MAX_EXPIRES_IN} (got {number})"
            ))
        })?,
    };
    let now = Utc::now();
    let seconds = i64::try_from(expires_in).unwrap_or(i64::MAX);
    // Whole seconds, rounded up: a token lives at least what was asked.
    let rounded_up = now.timestamp() + i64::from(now.timestamp_subsec_nanos() > 0);
    let expires = rounded_up.saturating_add(seconds);
    let token = state.stream_tokens.issue(&tenant, run.id, expires);
    let expires_at = DateTime::<Utc>::from_timestamp(expires, 0).unwrap_or(now);
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "token": token,
            "run_id": run.id,
            "expires_in": expires_in,
            "expires_at": format_time(&expires_at),
        })),
    )
        .into_response())
}

/// `number` as whole seconds within bounds (`300.0` is `300`).
fn whole_seconds(number: &serde_json::Number) -> Option<u64> {
    let seconds = match number.as_u64() {
        Some(seconds) => seconds,
        None => {
            let value = number.as_f64()?;
            if value.fract() != 0.0 || !(1.0..=MAX_EXPIRES_IN as f64).contains(&value) {
                return None;
            }
            value as u64
        }
    };
    (1..=MAX_EXPIRES_IN).contains(&seconds).then_some(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_holds_for_its_run_until_it_expires_and_for_nothing_else() {
        let tokens = StreamTokens::new([7; 32]);
        let run = Uuid::now_v7();
        let tenant = Tenant("team.a".into());
        let token = tokens.issue(&tenant, run, 1_000);
        assert_eq!(tokens.verify(&token, run, 999), Some(tenant.clone()));
        assert_eq!(tokens.verify(&token, run, 1_000), None, "expired");
        assert_eq!(
            tokens.verify(&token, Uuid::now_v7(), 999),
            None,
            "another run"
        );
        assert_eq!(
            StreamTokens::new([8; 32]).verify(&token, run, 999),
            None,
            "another key"
        );
        // Any change to what it says breaks its MAC.
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = "2000".into();
        assert_eq!(tokens.verify(&parts.join("."), run, 999), None);
        parts[1] = "1000".into();
        parts[2] = hex::encode("team-b");
        assert_eq!(tokens.verify(&parts.join("."), run, 999), None);
        for bad in ["", "x", "a.b.c.d", &format!("{token}.more")] {
            assert_eq!(tokens.verify(bad, run, 999), None, "{bad:?}");
        }
    }
}
