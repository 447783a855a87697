//! The one error type of the HTTP API, and the JSON shape every error takes:
//! `{"error": {"code": "...", "message": "..."}}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::runner::SubmitError;
use crate::scheduler::Refused;
use crate::store::StoreError;

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
    /// An agent (or a version of one) the tenant does not have, or one
    /// archived, for a new run: the message says which.
    #[error("{0}")]
    AgentNotFound(String),
    /// An upload the tenant does not have (or no longer has).
    #[error("{0}")]
    UploadNotFound(String),
    /// An upload's archive that cannot be taken: an entry that would
    /// escape, corrupt, too large unpacked.
    #[error("{0}")]
    InvalidArchive(String),
    /// A repository (or a credential) the server's settings do not allow.
    #[error("{0}")]
    GitNotAllowed(String),
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(String),
    /// A request that contradicts the resource's state.
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String },
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
    /// The request names a host this server does not answer for.
    #[error(
        "this server does not answer for the host {0:?} ([server] allowed_hosts lists those it \
         does)"
    )]
    MisdirectedRequest(String),
    /// The body did not arrive whole within `[server] body_timeout_ms`.
    #[error("the request's body did not arrive within {0} ms")]
    RequestTimeout(u64),
    /// The client holds its share of connections already.
    #[error(
        "this client holds {0} connections already ([server] max_connections_per_client); \
         close some, or send its requests over those"
    )]
    TooManyConnections(usize),
    /// The tenant has its share of downloads under way already.
    #[error(
        "this client has {0} workspace downloads under way already ([limits] \
         max_concurrent_downloads); retry when one has finished"
    )]
    TooManyDownloads(usize),
    #[error("too many runs are waiting; retry later")]
    QueueFull,
    /// The tenant's `runs_per_minute` is spent for `retry_after` seconds.
    #[error("{message}")]
    RateLimited { message: String, retry_after: u64 },
    /// The tenant's `max_tokens_per_day` is spent for `retry_after` seconds.
    #[error("{message}")]
    QuotaExceeded { message: String, retry_after: u64 },
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
        let code = self.code();
        (code.status(), code.as_str())
    }

    /// The code this error answers with.
    pub fn code(&self) -> ErrorCode {
        use ErrorCode as C;
        match self {
            Self::InvalidJson(_) => C::InvalidJson,
            Self::InvalidQuery(_) => C::InvalidQuery,
            Self::InvalidPath(_) => C::InvalidPath,
            Self::MalformedRequest => C::BadRequest,
            Self::Validation(_) => C::InvalidRequest,
            Self::Unauthorized => C::Unauthorized,
            Self::NotFound(_) | Self::NoRoute(_) => C::NotFound,
            Self::AgentNotFound(_) => C::AgentNotFound,
            Self::UploadNotFound(_) => C::UploadNotFound,
            Self::InvalidArchive(_) => C::InvalidArchive,
            Self::GitNotAllowed(_) => C::GitNotAllowed,
            Self::MethodNotAllowed(_) => C::MethodNotAllowed,
            Self::Conflict { code, .. } => *code,
            Self::PayloadTooLarge(_) => C::PayloadTooLarge,
            Self::UriTooLong(_) => C::UriTooLong,
            Self::HeadersTooLarge { .. } => C::HeadersTooLarge,
            Self::UnsupportedMediaType(_) => C::UnsupportedMediaType,
            Self::MisdirectedRequest(_) => C::MisdirectedRequest,
            Self::RequestTimeout(_) => C::RequestTimeout,
            Self::TooManyConnections(_) => C::TooManyConnections,
            Self::TooManyDownloads(_) => C::TooManyDownloads,
            Self::QueueFull => C::QueueFull,
            Self::RateLimited { .. } => C::RateLimited,
            Self::QuotaExceeded { .. } => C::QuotaExceeded,
            Self::ShuttingDown => C::ShuttingDown,
            Self::Unavailable(_) => C::Unavailable,
            Self::InsufficientStorage(_) => C::InsufficientStorage,
            Self::Internal(_) => C::Internal,
        }
    }
}

/// Every code an error can have, with its status: the table the document's
/// `ErrorCode` is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    InvalidJson,
    InvalidQuery,
    InvalidPath,
    BadRequest,
    Unauthorized,
    NotFound,
    MethodNotAllowed,
    IdempotencyKeyReused,
    RunNotLive,
    RunNotPaused,
    RunLive,
    AgentExists,
    AgentNotFound,
    UploadNotFound,
    InvalidArchive,
    GitNotAllowed,
    PayloadTooLarge,
    UriTooLong,
    UnsupportedMediaType,
    MisdirectedRequest,
    RequestTimeout,
    InvalidRequest,
    QueueFull,
    TooManyConnections,
    TooManyDownloads,
    HeadersTooLarge,
    Internal,
    ShuttingDown,
    Unavailable,
    InsufficientStorage,
    RateLimited,
    QuotaExceeded,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 32] = [
        Self::InvalidJson,
        Self::InvalidQuery,
        Self::InvalidPath,
        Self::BadRequest,
        Self::Unauthorized,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::IdempotencyKeyReused,
        Self::RunNotLive,
        Self::RunNotPaused,
        Self::RunLive,
        Self::AgentExists,
        Self::AgentNotFound,
        Self::UploadNotFound,
        Self::InvalidArchive,
        Self::GitNotAllowed,
        Self::PayloadTooLarge,
        Self::UriTooLong,
        Self::UnsupportedMediaType,
        Self::MisdirectedRequest,
        Self::RequestTimeout,
        Self::InvalidRequest,
        Self::QueueFull,
        Self::TooManyConnections,
        Self::TooManyDownloads,
        Self::HeadersTooLarge,
        Self::Internal,
        Self::ShuttingDown,
        Self::Unavailable,
        Self::InsufficientStorage,
        Self::RateLimited,
        Self::QuotaExceeded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidJson => "invalid_json",
            Self::InvalidQuery => "invalid_query",
            Self::InvalidPath => "invalid_path",
            Self::BadRequest => "bad_request",
            Self::Unauthorized => "unauthorized",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::RunNotLive => "run_not_live",
            Self::RunNotPaused => "run_not_paused",
            Self::RunLive => "run_live",
            Self::AgentExists => "agent_exists",
            Self::AgentNotFound => "agent_not_found",
            Self::UploadNotFound => "upload_not_found",
            Self::InvalidArchive => "invalid_archive",
            Self::GitNotAllowed => "git_not_allowed",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UriTooLong => "uri_too_long",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::MisdirectedRequest => "misdirected_request",
            Self::RequestTimeout => "request_timeout",
            Self::TooManyConnections => "too_many_connections",
            Self::TooManyDownloads => "too_many_downloads",
            Self::InvalidRequest => "invalid_request",
            Self::QueueFull => "queue_full",
            Self::HeadersTooLarge => "headers_too_large",
            Self::Internal => "internal",
            Self::ShuttingDown => "shutting_down",
            Self::Unavailable => "unavailable",
            Self::InsufficientStorage => "insufficient_storage",
            Self::RateLimited => "rate_limited",
            Self::QuotaExceeded => "quota_exceeded",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Self::InvalidJson | Self::InvalidQuery | Self::InvalidPath | Self::BadRequest => {
                StatusCode::BAD_REQUEST
            }
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::NotFound | Self::AgentNotFound | Self::UploadNotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::IdempotencyKeyReused
            | Self::RunNotLive
            | Self::RunNotPaused
            | Self::RunLive
            | Self::AgentExists => StatusCode::CONFLICT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UriTooLong => StatusCode::URI_TOO_LONG,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::MisdirectedRequest => StatusCode::MISDIRECTED_REQUEST,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::InvalidRequest | Self::InvalidArchive | Self::GitNotAllowed => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Self::QueueFull
            | Self::RateLimited
            | Self::QuotaExceeded
            | Self::TooManyConnections
            | Self::TooManyDownloads => StatusCode::TOO_MANY_REQUESTS,
            Self::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::ShuttingDown | Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        }
    }
}

/// The runner's refusals of a new run.
impl From<SubmitError> for ApiError {
    fn from(error: SubmitError) -> Self {
        match error {
            SubmitError::QueueFull => Self::QueueFull,
            SubmitError::Limited {
                refused,
                retry_after,
            } => {
                // Whole seconds, rounded up: a client waiting that long finds
                // room.
                let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                let message = format!("{refused}; retry in {seconds} s");
                match refused {
                    Refused::QuotaExceeded { .. } => Self::QuotaExceeded {
                        message,
                        retry_after: seconds,
                    },
                    _ => Self::RateLimited {
                        message,
                        retry_after: seconds,
                    },
                }
            }
            SubmitError::ShuttingDown => Self::ShuttingDown,
            SubmitError::Workspace(message) => Self::Validation(message),
            SubmitError::StorageFull(message) => {
                tracing::error!(%message, "a run could not be accepted: the disk is full");
                Self::InsufficientStorage(
                    "the server's disk is full; the run was not created".into(),
                )
            }
            SubmitError::StorageRefused(message) => {
                tracing::error!(%message, "a run could not be accepted: storage refuses writes");
                Self::Unavailable(
                    "the server's storage refuses writes; the run was not created, retry later"
                        .into(),
                )
            }
            SubmitError::Unready(message) => Self::Unavailable(message),
            SubmitError::PreviousNotFound => Self::NotFound("previous_run_id: the run"),
            error @ SubmitError::PreviousLive(_) => Self::Conflict {
                code: ErrorCode::RunLive,
                message: error.to_string(),
            },
            SubmitError::Store(error) => error.into(),
        }
    }
}

/// A storage failure is the server's: refused writes and a database that
/// does not answer (in time) are `unavailable` (the client may retry),
/// anything else an internal error.
impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Refused(why) => {
                tracing::error!(%why, "storage refuses writes");
                Self::Unavailable("the server's storage refuses writes; retry later".into())
            }
            StoreError::Unavailable(why) => {
                tracing::warn!(%why, "the database is unavailable");
                Self::Unavailable("the server's database does not answer; retry later".into())
            }
            // Its writer stopped (it died, or the server is stopping).
            StoreError::Closed => {
                tracing::warn!("storage is closed");
                Self::Unavailable("the server's storage is closed; retry later".into())
            }
            error => Self::internal("storage", error),
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
            Self::QueueFull | Self::TooManyDownloads(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
            }
            Self::RateLimited { retry_after, .. } | Self::QuotaExceeded { retry_after, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            }
            Self::ShuttingDown => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(5u32));
            }
            Self::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            // The connection is not kept: its body is not waited for, or
            // it is one too many.
            Self::RequestTimeout(_) | Self::TooManyConnections(_) => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
                if matches!(self, Self::TooManyConnections(_)) {
                    headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
                }
            }
            _ => {}
        }
        response
    }
}
