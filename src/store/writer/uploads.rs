//! Uploads' writes, as transitions of the single writer (see
//! [`super::transition`]).

use sqlx::AnyConnection;
use uuid::Uuid;

use super::transition::Transitioned;
use crate::run::{Tenant, format_time};
use crate::store::StoreError;
use crate::store::uploads::Upload;

pub(super) async fn save(
    connection: &mut AnyConnection,
    tenant: &Tenant,
    upload: &Upload,
) -> Result<Transitioned, StoreError> {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO uploads (id, tenant, size, files, created_at) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(upload.id.to_string())
    .bind(&tenant.0)
    .bind(count(upload.size))
    .bind(count(upload.files))
    .bind(format_time(&upload.created_at))
    .execute(&mut *connection)
    .await?;
    Ok(Transitioned::UploadSaved)
}

pub(super) async fn delete(
    connection: &mut AnyConnection,
    tenant: &Tenant,
    id: Uuid,
) -> Result<Transitioned, StoreError> {
    let deleted = sqlx::query("DELETE FROM uploads WHERE id = $1 AND tenant = $2")
        .bind(id.to_string())
        .bind(&tenant.0)
        .execute(&mut *connection)
        .await?;
    Ok(if deleted.rows_affected() == 1 {
        Transitioned::UploadDeleted
    } else {
        Transitioned::NotFound
    })
}

pub(super) async fn expire(
    connection: &mut AnyConnection,
    before: &str,
    limit: u32,
) -> Result<Transitioned, StoreError> {
    let ids: Vec<String> = sqlx::query_scalar(
        "DELETE FROM uploads WHERE id IN (SELECT id FROM uploads WHERE created_at < $1 \
         ORDER BY created_at LIMIT $2) RETURNING id",
    )
    .bind(before)
    .bind(i64::from(limit))
    .fetch_all(&mut *connection)
    .await?;
    Ok(Transitioned::Expired(
        ids.iter()
            .filter_map(|id| Uuid::parse_str(id).ok())
            .collect(),
    ))
}
