//! A JSON body extractor whose every rejection is an [`ApiError`]: wrong
//! content type (415), oversized (413), not JSON (400), and JSON of the wrong
//! shape (422, naming the field).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::state::AppState;

pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        if !is_json(content_type) {
            return Err(ApiError::UnsupportedMediaType(
                "expected a body with Content-Type: application/json".into(),
            ));
        }
        let limit = state.max_body_bytes;
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if let Some(timeout) = super::serve::body_timed_out(&rejection) {
                    ApiError::RequestTimeout(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
                } else if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge(limit)
                } else {
                    ApiError::InvalidJson(format!("cannot read the body: {rejection}"))
                }
            })?;
        parse(&bytes).map(ApiJson)
    }
}

/// Parses a JSON document, telling syntax errors (400) from shape errors (422).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::InvalidJson(
            "the body is empty; expected a JSON object".into(),
        ));
    }
    reject_duplicate_keys(bytes)?;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::InvalidJson(format!("the body is not valid JSON: {inner}"))
        } else {
            shape_error(&path, &inner)
        }
    })?;
    deserializer
        .end()
        .map_err(|e| ApiError::InvalidJson(format!("the body is not valid JSON: {e}")))?;
    Ok(value)
}

/// A first pass over the document that refuses an object with a key twice
/// (400): serde keeps the last of them, so `{"prompt": "a", "prompt": "b"}`
/// would mean something other than what a reviewer of the request reads.
fn reject_duplicate_keys(bytes: &[u8]) -> Result<(), ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize::<_, UniqueKeys>(&mut deserializer)
        .map(drop)
        .map_err(|error| {
            let path = error.path().to_string();
            let inner = error.into_inner();
            if inner.is_syntax() || inner.is_eof() || path == "." {
                ApiError::InvalidJson(format!("the body is not valid JSON: {inner}"))
            } else {
                ApiError::InvalidJson(format!(
                    "the body is not valid JSON: {path}: {}",
                    strip_position(&inner.to_string())
                ))
            }
        })
}

/// Any JSON value whose objects each name a key at most once.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format!(
                    "the key {key:?} appears twice in one object"
                )));
            }
            map.next_value::<UniqueKeys>()?;
            seen.insert(key);
        }
        Ok(UniqueKeys)
    }
}

/// Reads an already parsed JSON document into `T` (422 naming the field).
pub fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        shape_error(&path, &error.into_inner())
    })
}

/// A 422 naming the field (`limits.max_steps: ...`), or the whole body.
fn shape_error(path: &str, error: &impl std::fmt::Display) -> ApiError {
    let message = strip_position(&error.to_string());
    if path == "." {
        ApiError::Validation(message)
    } else {
        ApiError::Validation(format!("{path}: {message}"))
    }
}

/// serde_json appends " at line L column C", which means little in a 422.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

pub(super) fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}
