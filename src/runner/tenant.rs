//! `GET /v1/tenant`: what the caller's tenant uses of the server, and its
//! limits (SPEC section 16).

use chrono::Utc;
use serde::Serialize;

use super::Runner;
use crate::config::ResolvedTenantLimits;
use crate::run::Tenant;
use crate::store::StoreError;

/// A tenant's use and limits.
#[derive(Debug, Clone, Serialize)]
pub struct TenantReport {
    pub tenant: String,
    /// Its runs executing now, on every replica.
    pub running: u64,
    /// Its runs waiting for a slot.
    pub queued: u64,
    /// Runs it created in the last 60 seconds.
    pub runs_last_minute: u64,
    /// Input and output tokens of its runs created in the last 24 hours.
    pub tokens_last_24h: u64,
    /// What its runs created in the last 24 hours cost, in US dollars (of
    /// those whose cost is known).
    pub cost_usd_last_24h: f64,
    pub limits: ResolvedTenantLimits,
}

impl Runner {
    /// `tenant`'s use of the server, read from storage (on PostgreSQL, the
    /// whole database's).
    pub async fn tenant_report(&self, tenant: &Tenant) -> Result<TenantReport, StoreError> {
        let store = &self.services.store;
        let now = Utc::now();
        let live = store.tenant_live(tenant).await?;
        let minute = store
            .tenant_use(tenant, now - chrono::Duration::minutes(1))
            .await?;
        let day = store
            .tenant_use(tenant, now - chrono::Duration::hours(24))
            .await?;
        Ok(TenantReport {
            tenant: tenant.0.clone(),
            running: live.running,
            queued: live.queued,
            runs_last_minute: minute.runs,
            tokens_last_24h: day.tokens,
            cost_usd_last_24h: day.cost_usd,
            limits: self.tenants.of(&tenant.0),
        })
    }
}
