//! `/v1/uploads`: archives a tenant sends once and names in runs'
//! `workspace.archive`. The body is streamed to a file (never held in
//! memory), refused past `[limits] max_upload_bytes`, then unpacked and
//! checked whole (see [`crate::repo::unpack`]): an upload is stored only
//! once its tree is in place, and a refused one leaves nothing behind.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, body::Bytes};
use chrono::Utc;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use super::error::ApiError;
use super::state::AppState;
use crate::repo::places;
use crate::repo::unpack::{Format, UnpackError, unpack};
use crate::run::{Tenant, format_time};
use crate::store::uploads::Upload;

/// `POST /v1/uploads`
pub async fn create(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let format = Format::of_content_type(content_type).ok_or_else(|| {
        ApiError::UnsupportedMediaType(format!(
            "an upload's Content-Type is application/gzip (a .tar.gz) or application/zip \
             (got {content_type:?})"
        ))
    })?;
    let id = Uuid::now_v7();
    let tree = places::upload(state.runner.workspaces_root(), id);
    let partial = places::partial(&tree);
    let mut archive = partial.clone().into_os_string();
    archive.push(".archive");
    // Removed however this ends: refused, failed, or the client gone.
    let archive = RemovedOnDrop(std::path::PathBuf::from(archive));
    let size = receive(&state, body, &archive.0).await?;
    // Once the body is in, the rest goes on in a task of its own: a client
    // that goes away never leaves a tree unpacked without its record.
    let (keeping, tenant) = (state.clone(), tenant.clone());
    let kept = tokio::spawn(async move {
        let archive = archive;
        keep(&keeping, &tenant, id, size, format, &archive.0).await
    })
    .await
    .map_err(|e| ApiError::internal("keeping an upload", e))?;
    let (upload, unpacked) = kept?;
    tracing::info!(upload = %id, size, files = unpacked.files, bytes = unpacked.bytes, "upload unpacked");
    let mut response = (StatusCode::CREATED, Json(object(&state, &upload))).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/uploads/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Unpacks the received `archive` into place and stores the upload; on any
/// failure, nothing of it is left.
async fn keep(
    state: &AppState,
    tenant: &Tenant,
    id: Uuid,
    size: u64,
    format: Format,
    archive: &std::path::Path,
) -> Result<(Upload, crate::repo::unpack::Unpacked), ApiError> {
    let tree = places::upload(state.runner.workspaces_root(), id);
    let partial = places::partial(&tree);
    let max_bytes = state.runner.repositories().max_unpacked_bytes;
    let (from, into, done) = (archive.to_owned(), partial.clone(), tree.clone());
    let unpacked = tokio::task::spawn_blocking(move || {
        std::fs::create_dir(&into).map_err(UnpackError::Write)?;
        let unpacked = unpack(&from, format, &into, max_bytes)?;
        std::fs::rename(&into, &done).map_err(UnpackError::Write)?;
        Ok::<_, UnpackError>(unpacked)
    })
    .await
    .map_err(|e| ApiError::internal("unpacking an upload", e));
    let unpacked = match unpacked {
        Ok(Ok(unpacked)) => unpacked,
        Ok(Err(error)) => {
            let _ = remove(&partial).await;
            return Err(match error {
                UnpackError::Refused(why) => {
                    ApiError::InvalidArchive(format!("the archive was refused whole: {why}"))
                }
                UnpackError::Write(error) => disk("unpacking an upload", &error),
            });
        }
        Err(error) => {
            let _ = remove(&partial).await;
            return Err(error);
        }
    };
    let upload = Upload {
        id,
        size,
        files: unpacked.files,
        created_at: Utc::now(),
    };
    if let Err(error) = state
        .runner
        .store()
        .insert_upload(tenant, upload.clone())
        .await
    {
        let _ = remove(&tree).await;
        return Err(error.into());
    }
    Ok((upload, unpacked))
}

/// A file removed when this is dropped.
struct RemovedOnDrop(std::path::PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `GET /v1/uploads/{id}`
pub async fn get(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = upload_id(&id)?;
    match state.runner.store().get_upload(&tenant, id).await? {
        Some(upload) => Ok(Json(object(&state, &upload))),
        None => Err(not_found(id)),
    }
}

/// `DELETE /v1/uploads/{id}`: runs that named it and have not started
/// yet end `failed`.
pub async fn delete(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = upload_id(&id)?;
    if !state.runner.store().delete_upload(&tenant, id).await? {
        return Err(not_found(id));
    }
    if let Err(error) = remove(&places::upload(state.runner.workspaces_root(), id)).await {
        tracing::warn!(upload = %id, %error, "a deleted upload's files could not be removed");
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Streams `body` to the file `to`: its size, or why not.
async fn receive(state: &AppState, body: Body, to: &std::path::Path) -> Result<u64, ApiError> {
    let limit = state.runner.max_upload_bytes();
    if let Some(parent) = to.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| disk("storing an upload", &e))?;
    }
    let mut file = tokio::fs::File::create(to)
        .await
        .map_err(|e| disk("storing an upload", &e))?;
    let mut size = 0u64;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk: Bytes = chunk.map_err(|error| match super::serve::body_timed_out(&error) {
            Some(timeout) => {
                ApiError::RequestTimeout(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
            }
            None => ApiError::MalformedRequest,
        })?;
        size += chunk.len() as u64;
        if size > limit {
            return Err(ApiError::PayloadTooLarge(
                usize::try_from(limit).unwrap_or(usize::MAX),
            ));
        }
        file.write_all(&chunk)
            .await
            .map_err(|e| disk("storing an upload", &e))?;
    }
    file.flush()
        .await
        .map_err(|e| disk("storing an upload", &e))?;
    Ok(size)
}

/// The upload object of the API.
fn object(state: &AppState, upload: &Upload) -> Value {
    let expires_at = state
        .runner
        .keep_days()
        .map(|days| format_time(&(upload.created_at + chrono::TimeDelta::days(i64::from(days)))));
    json!({
        "id": upload.id,
        "size": upload.size,
        "files": upload.files,
        "created_at": format_time(&upload.created_at),
        "expires_at": expires_at,
    })
}

fn upload_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::UploadNotFound(format!("no upload {id:?}")))
}

fn not_found(id: Uuid) -> ApiError {
    ApiError::UploadNotFound(format!("no upload {id} (deleted, expired, or never made)"))
}

/// Our disk failing: full is 507, anything else an opaque 500.
fn disk(context: &str, error: &std::io::Error) -> ApiError {
    match error.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            ApiError::InsufficientStorage(format!("{context}: the server's disk is full"))
        }
        _ => ApiError::internal(context, error),
    }
}

async fn remove(dir: &std::path::Path) -> std::io::Result<()> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || places::remove_tree(&dir))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}
