//! The web console: a page and its script and style, embedded in the binary
//! (built from `console/` at compile time; no build step of their own, no
//! CDN, nothing fetched from elsewhere). Served without a token: the page
//! asks for one and sends it with every API request it makes.
//!
//! Every answer carries a Content-Security-Policy that lets the page run its
//! own script and style only and talk to this server only, so that nothing
//! a run produced (which the page shows as text, never as markup) could run
//! as code should a bug let it through.

use axum::extract::Path;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

const INDEX: &str = include_str!("../../console/index.html");
const SCRIPT: &str = include_str!("../../console/app.js");
const DIFF_SCRIPT: &str = include_str!("../../console/diff.js");
const SCHEDULES_SCRIPT: &str = include_str!("../../console/schedules.js");
const SUBRUNS_SCRIPT: &str = include_str!("../../console/subruns.js");
const PENDING_SCRIPT: &str = include_str!("../../console/pending.js");
const EVENTS_SCRIPT: &str = include_str!("../../console/events.js");
const STYLE: &str = include_str!("../../console/app.css");

/// What the page may load and connect to: itself only.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// `GET /`: the console's page.
pub async fn index() -> Response {
    asset_response("text/html; charset=utf-8", INDEX)
}

/// `GET /console/{file}`: its script and style.
pub async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    match file.as_str() {
        "app.js" => Ok(asset_response("text/javascript; charset=utf-8", SCRIPT)),
        "diff.js" => Ok(asset_response(
            "text/javascript; charset=utf-8",
            DIFF_SCRIPT,
        )),
        "schedules.js" => Ok(asset_response(
            "text/javascript; charset=utf-8",
            SCHEDULES_SCRIPT,
        )),
        "subruns.js" => Ok(asset_response(
            "text/javascript; charset=utf-8",
            SUBRUNS_SCRIPT,
        )),
        "events.js" => Ok(asset_response(
            "text/javascript; charset=utf-8",
            EVENTS_SCRIPT,
        )),
        "pending.js" => Ok(asset_response(
            "text/javascript; charset=utf-8",
            PENDING_SCRIPT,
        )),
        "app.css" => Ok(asset_response("text/css; charset=utf-8", STYLE)),
        _ => Err(ApiError::NotFound("console file")),
    }
}

fn asset_response(content_type: &'static str, body: &'static str) -> Response {
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // A new binary may bring a new console: always asked again (cheap).
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        HeaderName::from_static("x-frame-options"),
        HeaderValue::from_static("DENY"),
    );
    response
}
