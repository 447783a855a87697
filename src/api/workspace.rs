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
use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
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
use crate::repo::tree::{Tree, TreeError};
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

/// `GET /v1/runs/{id}/diff`: the workspace against the tree it started
/// from, as `git diff` writes it, streamed as it is made (a file's diff at
/// a time). Live runs too: the workspace as it is now.
pub async fn diff(
    State(state): State<AppState>,
    TenantRun { run, tenant }: TenantRun,
) -> Result<Response, ApiError> {
    let held = state
        .downloads
        .hold(Client::Tenant(Arc::from(tenant.0.as_str())))
        .ok_or_else(|| ApiError::TooManyDownloads(state.downloads.limit()))?;
    let starting = run.starting_tree();
    let base = state
        .runner
        .diff_base(run.id, starting)
        .await
        .map_err(|e| ApiError::internal("reading a run's starting tree", e))?;
    let now = walk(&state, run.id, false).await?;
    // No starting tree kept yet (queued, cloning, its clone failed, or
    // files alone never written to): nothing changed.
    let body = match base {
        None => Body::empty(),
        Some(base) => streamed(held, move |out| {
            crate::repo::diff::write(&base, &now, out)
                .map(drop)
                .map_err(|e| e.to_string())
        }),
    };
    Ok(([(header::CONTENT_TYPE, "text/x-diff; charset=utf-8")], body).into_response())
}

/// `GET /v1/runs/{id}/archive`: the workspace as a `.tar.gz`, without its
/// `.git` unless `include_git=true`, streamed as it is made.
pub async fn archive(
    State(state): State<AppState>,
    TenantRun { run, tenant }: TenantRun,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let with_git = super::runs::flag(&query, "include_git")?;
    let held = state
        .downloads
        .hold(Client::Tenant(Arc::from(tenant.0.as_str())))
        .ok_or_else(|| ApiError::TooManyDownloads(state.downloads.limit()))?;
    let tree = walk(&state, run.id, with_git).await?;
    let body = streamed(held, move |out| {
        crate::repo::pack::pack(&tree, out).map_err(|e| e.to_string())
    });
    let disposition = format!("attachment; filename=\"{}.tar.gz\"", run.id);
    Ok((
        [
            (header::CONTENT_TYPE, "application/gzip".to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        body,
    )
        .into_response())
}

/// The run's workspace, walked: one too large to walk is the client's
/// answer (what to do instead), anything else our failure.
async fn walk(state: &AppState, id: uuid::Uuid, with_git: bool) -> Result<Tree, ApiError> {
    let directory = state.runner.workspace_dir(id);
    let walked = tokio::task::spawn_blocking(move || Tree::walk(&directory, with_git))
        .await
        .map_err(|e| ApiError::internal("reading a workspace", e))?;
    walked.map_err(|error| match error {
        TreeError::TooLarge | TreeError::TooDeep => ApiError::Validation(format!(
            "the run's workspace is too large to serve this way: {error}; list it with \
             /workspace and download its files one by one"
        )),
        TreeError::Io(error) => ApiError::internal("reading a workspace", error),
    })
}

/// A body that `write` fills from a blocking thread, a chunk at a time:
/// the server holds a chunk or two of it, whatever its size. A failure
/// halfway ends the body with an error (the client sees a broken
/// download, never a short one passed off as whole); a client that goes
/// away stops the writing.
fn streamed(
    held: impl Send + 'static,
    write: impl FnOnce(&mut dyn std::io::Write) -> Result<(), String> + Send + 'static,
) -> Body {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Result<Bytes, String>>(2);
    tokio::task::spawn_blocking(move || {
        let mut out = ChunkWriter {
            sender: sender.clone(),
            buffer: Vec::with_capacity(CHUNK_BYTES),
        };
        let written = write(&mut out).and_then(|()| out.send().map_err(|e| e.to_string()));
        if let Err(error) = written {
            tracing::warn!(%error, "a streamed download failed");
            let _ = sender.blocking_send(Err(error));
        }
    });
    let stream = async_stream::stream! {
        let _held = held;
        while let Some(chunk) = receiver.recv().await {
            yield chunk.map_err(std::io::Error::other);
        }
    };
    Body::from_stream(stream)
}

struct ChunkWriter {
    sender: tokio::sync::mpsc::Sender<Result<Bytes, String>>,
    buffer: Vec<u8>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK_BYTES),
        ));
        self.sender
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
