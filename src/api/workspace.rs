//! A run's workspace as the API serves it: the listing of its files (the
//! first [`MAX_LISTED_FILES`], and whether there are more) and a file's
//! bytes, streamed from the open file: however large the file, a download
//! holds one chunk of it, and a tenant has at most `[limits]
//! max_concurrent_downloads` under way at once (429 `too_many_downloads`
//! beyond), so nothing a client or a command controls sizes the server's
//! memory.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio_util::io::ReaderStream;

use super::clients::Client;
use super::create::check_workspace_path;
use super::error::ApiError;
use super::state::AppState;
use super::tenant_run::TenantRun;
use crate::tools::{FileListing, Workspace, WorkspaceError};

/// Most files a listing names; past them it says `truncated: true`.
pub const MAX_LISTED_FILES: usize = 10_000;

/// What a download reads from the file at a time.
const CHUNK_BYTES: usize = 64 * 1024;

/// `GET /v1/runs/{id}/workspace`
pub async fn list(
    State(state): State<AppState>,
    TenantRun { run, .. }: TenantRun,
) -> Result<Json<Value>, ApiError> {
    let directory = state.runner.workspace_dir(run.id);
    let listing = tokio::task::spawn_blocking(move || {
        let workspace = match Workspace::open(&directory) {
            Ok(workspace) => workspace,
            // Never written to: the directory is made on the first write.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(FileListing {
                    files: Vec::new(),
                    truncated: false,
                });
            }
            Err(error) => return Err(error.to_string()),
        };
        workspace
            .list_files(MAX_LISTED_FILES)
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| ApiError::internal("listing a workspace", e))?
    .map_err(|e| ApiError::internal("listing a workspace", e))?;
    let files: Vec<Value> = listing
        .files
        .into_iter()
        .map(|file| json!({"path": file.path, "size": file.size}))
        .collect();
    Ok(Json(
        json!({"files": files, "truncated": listing.truncated}),
    ))
}

/// `GET /v1/runs/{id}/workspace/{*path}`
pub async fn file(
    State(state): State<AppState>,
    TenantRun { run, tenant }: TenantRun,
    Path((_, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    check_workspace_path(&path)
        .map_err(|why| ApiError::InvalidPath(format!("path {path:?}: {why}")))?;
    // Counted from before the file is opened until its last byte is sent
    // (or the client goes away): the guard travels with the body.
    let held = state
        .downloads
        .hold(Client::Tenant(Arc::from(tenant.0.as_str())))
        .ok_or_else(|| ApiError::TooManyDownloads(state.downloads.limit()))?;
    let directory = state.runner.workspace_dir(run.id);
    let (file, size) = tokio::task::spawn_blocking(move || open(&directory, &path))
        .await
        .map_err(|e| ApiError::internal("opening a workspace file", e))??;
    let reader = tokio::fs::File::from_std(file).take(size);
    let chunks = ReaderStream::with_capacity(reader, CHUNK_BYTES);
    let body = async_stream::stream! {
        let _held = held;
        for await chunk in chunks {
            yield chunk;
        }
    };
    // A file that shrinks while it is sent ends the body short of its
    // length: the client sees a broken download, never a shorter file
    // passed off as whole.
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// The regular file at `path` of the workspace `directory`, opened, with
/// its size.
fn open(directory: &std::path::Path, path: &str) -> Result<(std::fs::File, u64), ApiError> {
    let workspace = Workspace::open(directory).map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            // Never written to: it has no files.
            ApiError::NotFound("file")
        } else {
            ApiError::internal("opening a workspace", error)
        }
    })?;
    workspace.open_file(path).map_err(|error| match error {
        WorkspaceError::NotFound(_)
        | WorkspaceError::NotADirectory(_)
        | WorkspaceError::IsADirectory(_)
        | WorkspaceError::NotRegularFile(_)
        | WorkspaceError::Root => ApiError::NotFound("file"),
        WorkspaceError::Io { .. } | WorkspaceError::PermissionDenied(_) => {
            ApiError::internal("reading a workspace file", error)
        }
        refused => ApiError::InvalidPath(refused.to_string()),
    })
}
