//! The one error type of the HTTP API, and the JSON shape every error takes:
//! `{"error": {"code": "...", "message": "..."}}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Seconds a client is told to wait after a 429.
pub const RETRY_AFTER_SECONDS: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON at all, or is empty.
    #[error("{0}")]
    InvalidJson(String),
    /// A query parameter is malformed or out of range.
    #[error("{0}")]
    InvalidQuery(String),
    /// A workspace path that could never name a file of the workspace.
    #[error("{0}")]
    InvalidPath(String),
    /// The body is JSON but not an acceptable request; the message names the field.
    #[error("{0}")]
    Validation(String),
    #[error("a valid bearer token is required (Authorization: Bearer TOKEN)")]
    Unauthorized,
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("no route for {0}")]
    NoRoute(String),
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(String),
    /// A request that contradicts the resource's state.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// The bytes are not an HTTP request (hyper's own refusal, made JSON).
    #[error("the request is not valid HTTP")]
    MalformedRequest,
    #[error("the request body exceeds the limit of {0} bytes")]
    PayloadTooLarge(usize),
    #[error("the request target exceeds the limit of {0} bytes")]
    UriTooLong(usize),
    #[error("the request headers exceed the limit of {count} lines or {bytes} bytes")]
    HeadersTooLarge { count: usize, bytes: usize },
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("too many runs are waiting; retry later")]
    QueueFull,
    #[error("the server is shutting down and takes no new runs")]
    ShuttingDown,
    #[error("{0}")]
    Unavailable(String),
    /// The server's disk is full.
    #[error("{0}")]
    InsufficientStorage(String),
    /// Anything else: logged with its context, answered opaquely.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn internal(context: &str, error: impl std::fmt::Display) -> Self {
        Self::Internal(format!("{context}: {error}"))
    }

    /// The status and the JSON body of this error, for the layers that write
    /// bytes themselves (see `super::serve`).
    pub fn status_and_body(&self) -> (StatusCode, String) {
        let (status, code) = self.status_and_code();
        let body = json!({"error": {"code": code, "message": self.to_string()}});
        (status, body.to_string())
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::InvalidJson(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
            Self::InvalidQuery(_) => (StatusCode::BAD_REQUEST, "invalid_query"),
            Self::InvalidPath(_) => (StatusCode::BAD_REQUEST, "invalid_path"),
            Self::MalformedRequest => (StatusCode::BAD_REQUEST, "bad_request"),
            Self::Validation(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
            Self::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::NotFound(_) | Self::NoRoute(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            Self::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::UriTooLong(_) => (StatusCode::URI_TOO_LONG, "uri_too_long"),
            Self::HeadersTooLarge { .. } => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers_too_large",
            ),
            Self::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            Self::QueueFull => (StatusCode::TOO_MANY_REQUESTS, "queue_full"),
            Self::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            Self::InsufficientStorage(_) => {
                (StatusCode::INSUFFICIENT_STORAGE, "insufficient_storage")
            }
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let Self::Internal(context) = &self {
            tracing::error!(error = %context, "internal error");
        }
        let body = Json(json!({"error": {"code": code, "message": self.to_string()}}));
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        match self {
            Self::QueueFull => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
            }
            Self::ShuttingDown => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(5u32));
            }
            Self::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}
