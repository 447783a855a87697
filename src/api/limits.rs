//! What the HTTP layer refuses before any handler runs, in the JSON error
//! shape: a URI or header block too large (414, 431), a body announced
//! larger than `max_body_bytes` (413, answered at once, without waiting for
//! a body that may never come), and a query parameter the route does not
//! take or one given twice (400 `invalid_query`).

use axum::extract::{MatchedPath, Request};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;

/// Longest request target (path and query) accepted, in bytes.
pub const MAX_URI_BYTES: usize = 16 * 1024;

/// Largest header block accepted, names and values together, in bytes.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Most header lines accepted.
pub const MAX_HEADER_COUNT: usize = 100;

/// The refusal of `request` by these limits, if it is refused.
pub fn refusal(state: &AppState, request: &Request) -> Option<Response> {
    let target = request
        .uri()
        .path_and_query()
        .map_or(0, |target| target.as_str().len());
    if target > MAX_URI_BYTES {
        return Some(ApiError::UriTooLong(MAX_URI_BYTES).into_response());
    }
    let headers = request.headers();
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if headers.len() > MAX_HEADER_COUNT || bytes > MAX_HEADER_BYTES {
        return Some(
            ApiError::HeadersTooLarge {
                count: MAX_HEADER_COUNT,
                bytes: MAX_HEADER_BYTES,
            }
            .into_response(),
        );
    }
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    // An upload has a ceiling of its own (its body is streamed to disk).
    let limit =
        if request.method() == axum::http::Method::POST && request.uri().path() == "/v1/uploads" {
            state.runner.max_upload_bytes()
        } else {
            state.max_body_bytes as u64
        };
    if announced.is_some_and(|length| length > limit) {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let mut response = ApiError::PayloadTooLarge(limit).into_response();
        // The body is never read: the connection cannot carry another
        // request after it.
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        return Some(response);
    }
    check_query(request).err().map(IntoResponse::into_response)
}

fn check_query(request: &Request) -> Result<(), ApiError> {
    let Some(query) = request.uri().query().filter(|query| !query.is_empty()) else {
        return Ok(());
    };
    let Some(route) = request.extensions().get::<MatchedPath>() else {
        return Ok(());
    };
    let Some(accepted) = super::routes::query_parameters(request.method(), route.as_str()) else {
        return Ok(());
    };
    let mut seen: Vec<String> = Vec::new();
    for (name, _) in form_urlencoded::parse(query.as_bytes()) {
        if !accepted.contains(&name.as_ref()) {
            return Err(ApiError::InvalidQuery(if accepted.is_empty() {
                format!("unknown query parameter {name:?}: this route takes none")
            } else {
                format!(
                    "unknown query parameter {name:?} (this route takes: {})",
                    accepted.join(", ")
                )
            }));
        }
        if seen.iter().any(|s| s == name.as_ref()) {
            return Err(ApiError::InvalidQuery(format!(
                "the query parameter {name:?} is given more than once"
            )));
        }
        seen.push(name.into_owned());
    }
    Ok(())
}
