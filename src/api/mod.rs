//! The HTTP API (SPEC section 4): one router per resource, merged; every
//! error is JSON. The API knows the runner and the store's read side, never
//! SQL.

pub mod a2a;
pub mod access;
pub mod actions;
pub mod agents;
pub mod auth;
pub mod clients;
pub mod console;
pub mod create;
pub mod error;
pub mod events;
pub mod hosts;
pub mod json;
pub mod limits;
pub mod routes;
pub mod runs;
pub mod schedules;
pub mod serve;
pub mod state;
pub mod statuses;
pub mod stream_tokens;
pub mod subagents;
pub mod system;
pub mod tenant_run;
pub mod transcript;
pub mod unread;
pub mod uploads;
pub mod workspace;

use axum::Router;
use axum::body::to_bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::Request;
use axum::extract::State;
use axum::http::{Method, Uri, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};

use error::ApiError;
pub use state::{AppState, Services};

pub fn router(state: AppState) -> Router {
    let mut protected = Router::new();
    let mut public = Router::new();
    for route in routes::table() {
        if route.public {
            public = public.route(route.path, route.handler);
        } else {
            protected = protected.route(route.path, route.handler);
        }
    }
    let protected = protected.route_layer(from_fn_with_state(state.clone(), auth::authenticate));
    let cors = cors(&state.cors_origins);
    let router = Router::new()
        .merge(protected)
        .merge(public)
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
        .layer(from_fn_with_state(state.clone(), every_request))
        .with_state(state);
    // Outermost: a preflight is answered before anything asks it for a
    // token or a route.
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// CORS for the configured origins (none: no CORS at all, and a browser
/// on another origin cannot call the API). Origins are checked when the
/// configuration is read.
fn cors(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{HeaderName, HeaderValue};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|origin| HeaderValue::from_str(origin).ok())
        .collect();
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("idempotency-key"),
                HeaderName::from_static("last-event-id"),
            ])
            .expose_headers([header::LOCATION, header::RETRY_AFTER])
            .max_age(std::time::Duration::from_secs(3600)),
    )
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NoRoute(format!("{method} {}", uri.path()))
}

async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::MethodNotAllowed(method.to_string())
}

/// What every request goes through, around its route, in one layer (each
/// layer of a router is cloned for every request, with all the layers
/// inside it): the access log and metrics around the rest ([`access`]); a
/// request for a host the server does not answer for refused ([`hosts`]); a
/// body tracked, so that an answer given before it was read closes the
/// connection ([`unread`]); the HTTP layer's own limits ([`limits`]); and
/// an error answer that is not JSON rewritten into the JSON error shape
/// ([`json_errors`]).
async fn every_request(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let access = access::Access::begin(&state, &request);
    // The probes change nothing and tell nothing a rebinding page wants:
    // they answer whatever `Host` a prober sends (a pod's address).
    let probe = matches!(request.uri().path(), "/healthz" | "/readyz");
    if !probe && let Err(host) = state.allowed_hosts.check(&request) {
        let response = ApiError::MisdirectedRequest(host).into_response();
        access.end(&state, &response);
        return response;
    }
    let (request, read) = unread::track(request);
    let response = match limits::refusal(&state, &request) {
        Some(refused) => refused,
        None => json_errors(&state, next.run(request).await).await,
    };
    let response = unread::close_unread(response, read);
    access.end(&state, &response);
    response
}

/// The net under every extractor: an error response that is not JSON (one of
/// axum's own rejections) is rewritten into the JSON error shape.
async fn json_errors(state: &AppState, response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let message = if text.trim().is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let error = match status.as_u16() {
        400 => ApiError::InvalidQuery(message),
        404 => ApiError::NoRoute(message),
        405 => ApiError::MethodNotAllowed(message),
        413 => ApiError::PayloadTooLarge(state.max_body_bytes),
        415 => ApiError::UnsupportedMediaType(message),
        422 => ApiError::Validation(message),
        _ => ApiError::Internal(message),
    };
    let mut rewritten = error.into_response();
    *rewritten.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            rewritten.headers_mut().insert(name, value.clone());
        }
    }
    // The tenant, for the access log.
    if let Some(tenant) = parts.extensions.get::<crate::run::Tenant>() {
        rewritten.extensions_mut().insert(tenant.clone());
    }
    rewritten
}
