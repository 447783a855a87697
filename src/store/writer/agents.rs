//! Agents' writes, as transitions of the single writer (see
//! [`super::transition`]): a new version decides its number on what is
//! stored, in the transaction that writes it. On PostgreSQL the agent's row
//! is locked by the update that numbers the version, so replicas making
//! versions of one agent at once take turns.

use sqlx::AnyConnection;

use super::transition::Transitioned;
use crate::agent::{Agent, NewVersion};
use crate::run::{Tenant, format_time};
use crate::store::StoreError;

/// A new version of an agent: its first (`create`; an archived agent of
/// that name comes back with its next), or the next of a live one.
pub(super) async fn save(
    connection: &mut AnyConnection,
    tenant: &Tenant,
    new: &NewVersion,
    create: bool,
) -> Result<Transitioned, StoreError> {
    let version = if create {
        let inserted = sqlx::query(
            "INSERT INTO agents (tenant, name, latest, archived) VALUES ($1, $2, 1, 0) \
             ON CONFLICT (tenant, name) DO NOTHING",
        )
        .bind(&tenant.0)
        .bind(&new.name)
        .execute(&mut *connection)
        .await?;
        if inserted.rows_affected() == 1 {
            1
        } else {
            let revived: Option<i64> = sqlx::query_scalar(
                "UPDATE agents SET latest = latest + 1, archived = 0 \
                 WHERE tenant = $1 AND name = $2 AND archived = 1 RETURNING latest",
            )
            .bind(&tenant.0)
            .bind(&new.name)
            .fetch_optional(&mut *connection)
            .await?;
            match revived {
                Some(version) => version,
                None => return Ok(Transitioned::AgentExists),
            }
        }
    } else {
        let next: Option<i64> = sqlx::query_scalar(
            "UPDATE agents SET latest = latest + 1 \
             WHERE tenant = $1 AND name = $2 AND archived = 0 RETURNING latest",
        )
        .bind(&tenant.0)
        .bind(&new.name)
        .fetch_optional(&mut *connection)
        .await?;
        match next {
            Some(version) => version,
            None => return Ok(Transitioned::NotFound),
        }
    };
    let version = u32::try_from(version)
        .map_err(|_| StoreError::Corrupt(format!("agent version {version} out of range")))?;
    sqlx::query(
        "INSERT INTO agent_versions (tenant, name, version, description, definition, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&tenant.0)
    .bind(&new.name)
    .bind(i64::from(version))
    .bind(new.description.as_deref())
    .bind(new.definition.as_str())
    .bind(format_time(&new.at))
    .execute(&mut *connection)
    .await?;
    let definition = serde_json::from_str(&new.definition)
        .map_err(|e| StoreError::Corrupt(format!("an agent's definition: {e}")))?;
    Ok(Transitioned::AgentSaved(Agent {
        name: new.name.clone(),
        version,
        description: new.description.clone(),
        definition: std::sync::Arc::new(definition),
        created_at: new.at,
        archived: false,
    }))
}

/// Archives an agent: new runs cannot name it; its versions stay.
pub(super) async fn archive(
    connection: &mut AnyConnection,
    tenant: &Tenant,
    name: &str,
) -> Result<Transitioned, StoreError> {
    let archived = sqlx::query("UPDATE agents SET archived = 1 WHERE tenant = $1 AND name = $2")
        .bind(&tenant.0)
        .bind(name)
        .execute(&mut *connection)
        .await?;
    Ok(if archived.rows_affected() == 0 {
        Transitioned::NotFound
    } else {
        Transitioned::AgentArchived
    })
}
