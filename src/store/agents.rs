//! Agents in storage: their versions written through the writer (see
//! `writer::agents`), read here; and the versions runs name, kept in
//! memory on SQLite.
//!
//! A run naming an agent reads its definition as it is created. On SQLite
//! this server is the only writer, so what it read stays true until it
//! writes that agent again: the versions runs name are kept, and an
//! agent's are dropped when it is written (its generation counter keeps a
//! read that raced a write from keeping what it read). On PostgreSQL
//! another replica may write an agent at any time, so every run reads it:
//! a version made on one replica is the one the next run names on any.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sqlx::Row;
use sqlx::any::AnyRow;

use super::writer::{Transition, Transitioned};
use super::{Store, StoreError};
use crate::agent::{Agent, NewVersion};
use crate::run::Tenant;
use crate::sync::lock;

/// What saving a version came to.
#[derive(Debug)]
pub enum Saved {
    Saved(Agent),
    /// Creating: a live agent of that name exists.
    Exists,
    /// Updating: no live agent of that name.
    NotFound,
}

/// A `SELECT` of versions of agents with their agent's state, the join's
/// condition and the filter appended.
macro_rules! concat_agent {
    ($rest:literal) => {
        concat!(
            "SELECT v.name, v.version, v.description, v.definition, v.created_at, a.archived ",
            "FROM agents a JOIN agent_versions v ON v.tenant = a.tenant AND v.name = a.name ",
            $rest
        )
    };
}

/// Agents (and versions of them) kept for the runs that name them, each
/// agent's by its tenant and name.
#[derive(Default)]
pub(super) struct Cache {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// Bumped when everything kept is dropped (the cache full).
    epoch: u64,
    /// By tenant, then by name (looked up without making a key).
    agents: HashMap<String, HashMap<String, Versions>>,
    /// The agents kept (entries of `agents`' maps).
    count: usize,
    /// The definitions' bytes kept, about.
    bytes: usize,
}

impl Kept {
    fn versions(&self, tenant: &Tenant, name: &str) -> Option<&Versions> {
        self.agents.get(&tenant.0)?.get(name)
    }

    fn versions_mut(&mut self, tenant: &Tenant, name: &str) -> &mut Versions {
        let names = self.agents.entry(tenant.0.clone()).or_default();
        if !names.contains_key(name) {
            self.count += 1;
        }
        names.entry(name.to_owned()).or_default()
    }
}

/// What is kept of one agent: its latest version, and versions named.
#[derive(Default)]
struct Versions {
    /// Bumped by every write of the agent: a read that began before it
    /// does not keep what it read. (An agent written is kept as an empty
    /// entry, for its count.)
    generation: u64,
    latest: Option<Arc<Agent>>,
    named: HashMap<u32, Arc<Agent>>,
}

/// When a read of an agent began, as the cache counts: what it read is kept
/// only if neither changed meanwhile.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Began {
    epoch: u64,
    generation: u64,
}

impl Cache {
    /// Agents kept at most; past it, or past [`Self::MAX_BYTES`], the cache
    /// starts over.
    const CAPACITY: usize = 4096;
    /// Bytes of definitions kept at most (a definition may be as large as
    /// a request's body).
    const MAX_BYTES: usize = 32 * 1024 * 1024;

    fn get(&self, tenant: &Tenant, name: &str, version: Option<u32>) -> Option<Arc<Agent>> {
        let kept = lock(&self.inner);
        let versions = kept.versions(tenant, name)?;
        match version {
            None => versions.latest.clone(),
            Some(version) => versions.named.get(&version).cloned(),
        }
    }

    fn began(&self, tenant: &Tenant, name: &str) -> Began {
        let kept = lock(&self.inner);
        let generation = kept
            .versions(tenant, name)
            .map_or(0, |versions| versions.generation);
        Began {
            epoch: kept.epoch,
            generation,
        }
    }

    /// Keeps `agent` (read as `version` names it), read since `began`,
    /// unless it was written meanwhile.
    fn keep(&self, tenant: &Tenant, version: Option<u32>, agent: &Arc<Agent>, began: Began) {
        let size = serde_json::to_string(&*agent.definition).map_or(usize::MAX, |text| text.len());
        let mut kept = lock(&self.inner);
        let now = Began {
            epoch: kept.epoch,
            generation: kept
                .versions(tenant, &agent.name)
                .map_or(0, |v| v.generation),
        };
        if now != began {
            return;
        }
        if kept.count >= Self::CAPACITY || kept.bytes.saturating_add(size) > Self::MAX_BYTES {
            kept.agents.clear();
            kept.count = 0;
            kept.bytes = 0;
            kept.epoch += 1;
            if size > Self::MAX_BYTES {
                return;
            }
            // What was read is still what is stored: kept in the new epoch.
        }
        kept.bytes += size;
        let versions = kept.versions_mut(tenant, &agent.name);
        match version {
            None => versions.latest = Some(Arc::clone(agent)),
            Some(version) => {
                versions.named.insert(version, Arc::clone(agent));
            }
        }
    }

    /// Drops what is kept of an agent being written.
    fn forget(&self, tenant: &Tenant, name: &str) {
        let mut kept = lock(&self.inner);
        let versions = kept.versions_mut(tenant, name);
        versions.generation += 1;
        versions.latest = None;
        versions.named.clear();
    }
}

impl Store {
    /// Stores a new version of an agent: its first (`create`), or the next
    /// of a live one.
    pub async fn save_agent(
        &self,
        tenant: &Tenant,
        version: NewVersion,
        create: bool,
    ) -> Result<Saved, StoreError> {
        let name = version.name.clone();
        let saved = self
            .agent_write(
                tenant,
                &name,
                Transition::SaveAgent {
                    tenant: tenant.clone(),
                    version,
                    create,
                },
            )
            .await;
        match saved? {
            Transitioned::AgentSaved(agent) => Ok(Saved::Saved(agent)),
            Transitioned::AgentExists => Ok(Saved::Exists),
            Transitioned::NotFound => Ok(Saved::NotFound),
            other => Err(StoreError::Corrupt(format!(
                "an agent's save came to {other:?}"
            ))),
        }
    }

    /// Archives an agent; `false` if the tenant has none of that name.
    pub async fn archive_agent(&self, tenant: &Tenant, name: &str) -> Result<bool, StoreError> {
        let archived = self
            .agent_write(
                tenant,
                name,
                Transition::ArchiveAgent {
                    tenant: tenant.clone(),
                    name: name.to_owned(),
                },
            )
            .await;
        match archived? {
            Transitioned::AgentArchived => Ok(true),
            Transitioned::NotFound => Ok(false),
            other => Err(StoreError::Corrupt(format!(
                "an agent's archive came to {other:?}"
            ))),
        }
    }

    /// Writes a change of an agent, then drops what is kept of it: in a task
    /// of its own, so that a request given up meanwhile (its client gone)
    /// still drops it once the change is committed.
    async fn agent_write(
        &self,
        tenant: &Tenant,
        name: &str,
        transition: Transition,
    ) -> Result<Transitioned, StoreError> {
        let store = self.clone();
        let (tenant, name) = (tenant.clone(), name.to_owned());
        tokio::spawn(async move {
            let written = store.writer.transition(transition).await;
            store.agents.forget(&tenant, &name);
            written
        })
        .await
        .map_err(|_| StoreError::Closed)?
    }

    /// A version of an agent (`None`: its latest), archived or not.
    pub async fn get_agent(
        &self,
        tenant: &Tenant,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<Agent>, StoreError> {
        let query = sqlx::query(concat_agent!(
            "AND v.version = COALESCE($3, a.latest) WHERE a.tenant = $1 AND a.name = $2"
        ))
        .bind(&tenant.0)
        .bind(name)
        .bind(version.map(i64::from));
        let row = self
            .read(async |connection| query.fetch_optional(connection).await)
            .await?;
        row.as_ref().map(agent_from_row).transpose()
    }

    /// The version of an agent a new run names (`None`: its latest), if
    /// the agent is live: kept in memory on SQLite (see the module).
    pub async fn agent_for_run(
        &self,
        tenant: &Tenant,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<Arc<Agent>>, StoreError> {
        if self.cluster.is_none()
            && let Some(agent) = self.agents.get(tenant, name, version)
        {
            return Ok((!agent.archived).then_some(agent));
        }
        let began = self.agents.began(tenant, name);
        let Some(agent) = self.get_agent(tenant, name, version).await? else {
            return Ok(None);
        };
        let agent = Arc::new(agent);
        if self.cluster.is_none() {
            self.agents.keep(tenant, version, &agent, began);
        }
        Ok((!agent.archived).then_some(agent))
    }

    /// The latest versions of a tenant's agents, archived or live, by name,
    /// after `cursor` (a name) when given.
    pub async fn list_agents(
        &self,
        tenant: &Tenant,
        archived: bool,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Agent>, StoreError> {
        let query = sqlx::query(concat_agent!(
            "AND v.version = a.latest WHERE a.tenant = $1 AND a.archived = $2 \
             AND ($3 IS NULL OR a.name > $3) ORDER BY a.name LIMIT $4"
        ))
        .bind(&tenant.0)
        .bind(i64::from(archived))
        .bind(cursor)
        .bind(i64::from(limit));
        let rows = self
            .read(async |connection| query.fetch_all(connection).await)
            .await?;
        rows.iter().map(agent_from_row).collect()
    }

    /// An agent's versions, newest first, before `before` when given.
    pub async fn agent_versions(
        &self,
        tenant: &Tenant,
        name: &str,
        before: Option<u32>,
        limit: u32,
    ) -> Result<Vec<Agent>, StoreError> {
        let query = sqlx::query(concat_agent!(
            "WHERE a.tenant = $1 AND a.name = $2 AND ($3 IS NULL OR v.version < $3) \
             ORDER BY v.version DESC LIMIT $4"
        ))
        .bind(&tenant.0)
        .bind(name)
        .bind(before.map(i64::from))
        .bind(i64::from(limit));
        let rows = self
            .read(async |connection| query.fetch_all(connection).await)
            .await?;
        rows.iter().map(agent_from_row).collect()
    }
}

fn agent_from_row(row: &AnyRow) -> Result<Agent, StoreError> {
    let definition: String = row.try_get("definition")?;
    Ok(Agent {
        name: row.try_get("name")?,
        version: u32::try_from(row.try_get::<i64, _>("version")?)
            .map_err(|_| StoreError::Corrupt("an agent's version is out of range".into()))?,
        description: row.try_get("description")?,
        definition: Arc::new(
            serde_json::from_str(&definition)
                .map_err(|e| StoreError::Corrupt(format!("an agent's definition: {e}")))?,
        ),
        created_at: super::rows::time(&row.try_get::<String, _>("created_at")?)?,
        archived: row.try_get::<i64, _>("archived")? != 0,
    })
}
