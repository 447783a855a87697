//! Uploads in storage (what `POST /v1/uploads` took: the archive's size and
//! files; its unpacked tree is kept beside the workspaces, see
//! [`crate::repo::places`]), and the files a run's request seeded it with.
//! Writes go through the writer (see `writer::uploads`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::writer::{Transition, Transitioned};
use super::{Store, StoreError};
use crate::run::Tenant;

/// An upload as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub id: Uuid,
    /// Bytes of the archive as it was sent.
    pub size: u64,
    /// Regular files it unpacked to.
    pub files: u64,
    pub created_at: DateTime<Utc>,
}

impl Store {
    /// Stores an upload of `tenant` (its tree is in place already).
    pub async fn insert_upload(&self, tenant: &Tenant, upload: Upload) -> Result<(), StoreError> {
        let transition = Transition::SaveUpload {
            tenant: tenant.clone(),
            upload,
        };
        self.writer().transition(transition).await.map(drop)
    }

    /// Removes an upload of `tenant`: whether there was one.
    pub async fn delete_upload(&self, tenant: &Tenant, id: Uuid) -> Result<bool, StoreError> {
        let transition = Transition::DeleteUpload {
            tenant: tenant.clone(),
            id,
        };
        Ok(matches!(
            self.writer().transition(transition).await?,
            Transitioned::UploadDeleted
        ))
    }

    /// Removes up to `limit` uploads made before `before` (RFC 3339): the
    /// ones removed.
    pub async fn expire_uploads(
        &self,
        before: String,
        limit: u32,
    ) -> Result<Vec<Uuid>, StoreError> {
        match self
            .writer()
            .transition(Transition::ExpireUploads { before, limit })
            .await?
        {
            Transitioned::Expired(ids) => Ok(ids),
            _ => Ok(Vec::new()),
        }
    }

    /// An upload of `tenant`.
    pub async fn get_upload(
        &self,
        tenant: &Tenant,
        id: Uuid,
    ) -> Result<Option<Upload>, StoreError> {
        let query = sqlx::query(
            "SELECT id, size, files, created_at FROM uploads WHERE id = $1 AND tenant = $2",
        )
        .bind(id.to_string())
        .bind(&tenant.0);
        let row = self
            .read(async |connection| query.fetch_optional(connection).await)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let count = |column: &str| {
            u64::try_from(row.get::<i64, _>(column))
                .map_err(|_| StoreError::Corrupt(format!("uploads.{column} is negative")))
        };
        Ok(Some(Upload {
            id,
            size: count("size")?,
            files: count("files")?,
            created_at: super::rows::time(&row.get::<String, _>("created_at"))?,
        }))
    }

    /// The files a run's request seeded its workspace with (none: none).
    pub async fn seed_files(&self, run_id: Uuid) -> Result<BTreeMap<String, String>, StoreError> {
        let query = sqlx::query("SELECT files FROM run_seed_files WHERE run_id = $1")
            .bind(run_id.to_string());
        let text: Option<String> = self
            .read(async |connection| {
                query
                    .fetch_optional(connection)
                    .await
                    .map(|row| row.map(|row| row.get::<String, _>("files")))
            })
            .await?;
        match text {
            None => Ok(BTreeMap::new()),
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(format!("run_seed_files.files: {e}"))),
        }
    }
}
