//! `[tenants.NAME]`: what each tenant may use of the server (SPEC section
//! 16). `[tenants.default]` holds for every tenant without a table of its
//! own (and for the tenant of a server without tokens, named `default`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RunsConfig;

/// One tenant's limits; a missing one is `[tenants.default]`'s, then the
/// server's (`runs.max_concurrent`, `runs.max_queued`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantLimits {
    /// Its runs executing at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<usize>,
    /// Its runs waiting; beyond, 429 `queue_full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queued: Option<usize>,
    /// Its run creations a minute (a token bucket as deep as a minute's
    /// worth); beyond, 429 `rate_limited`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_per_minute: Option<u32>,
    /// Its input and output tokens over the last 24 hours; beyond, new runs
    /// are refused (429 `quota_exceeded`), running ones go on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens_per_day: Option<u64>,
    /// What its runs' model calls may cost over the last 24 hours, in US
    /// dollars (priced profiles); beyond, as `max_tokens_per_day`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd_per_day: Option<f64>,
    /// The variable holding the key that signs this tenant's webhooks (the
    /// server's `[webhooks] secret_env` signs the rest's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_secret_env: Option<String>,
}

/// The name of the table that holds for tenants without their own.
pub const DEFAULT_TENANT_TABLE: &str = "default";

/// Each tenant's limits, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantPolicy {
    named: BTreeMap<String, Resolved>,
    default: Resolved,
    /// The tables as written: which limits a tenant was given.
    tables: BTreeMap<String, TenantLimits>,
}

/// A tenant's limits with nothing left unset.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Resolved {
    pub max_concurrent: usize,
    pub max_queued: usize,
    /// No limit when `None`.
    pub runs_per_minute: Option<u32>,
    /// No limit when `None`.
    pub max_tokens_per_day: Option<u64>,
    /// No limit when `None`.
    pub max_cost_usd_per_day: Option<f64>,
}

impl Resolved {
    /// Its quotas over the last 24 hours.
    pub fn quota(&self) -> Quota {
        Quota {
            tokens: self.max_tokens_per_day,
            cost_usd: self.max_cost_usd_per_day,
        }
    }
}

/// What a tenant's runs of the last 24 hours may use: tokens, dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quota {
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

impl Quota {
    pub fn is_some(&self) -> bool {
        self.tokens.is_some() || self.cost_usd.is_some()
    }
}

impl TenantPolicy {
    pub fn new(tenants: &BTreeMap<String, TenantLimits>, runs: &RunsConfig) -> Self {
        let fallback = tenants
            .get(DEFAULT_TENANT_TABLE)
            .cloned()
            .unwrap_or_default();
        let resolve = |limits: &TenantLimits| Resolved {
            max_concurrent: limits
                .max_concurrent
                .or(fallback.max_concurrent)
                .unwrap_or(runs.max_concurrent),
            max_queued: limits
                .max_queued
                .or(fallback.max_queued)
                .unwrap_or(runs.max_queued),
            runs_per_minute: limits.runs_per_minute.or(fallback.runs_per_minute),
            max_tokens_per_day: limits.max_tokens_per_day.or(fallback.max_tokens_per_day),
            max_cost_usd_per_day: limits
                .max_cost_usd_per_day
                .or(fallback.max_cost_usd_per_day),
        };
        Self {
            named: tenants
                .iter()
                .map(|(name, limits)| (name.clone(), resolve(limits)))
                .collect(),
            default: resolve(&fallback),
            tables: tenants.clone(),
        }
    }

    /// `tenant`'s `max_concurrent` if its table or the default table sets
    /// one: on PostgreSQL such a limit holds for the whole database, while
    /// `runs.max_concurrent` (what it defaults to) is each replica's.
    pub fn set_max_concurrent(&self, tenant: &str) -> Option<usize> {
        self.set(tenant, |limits| limits.max_concurrent)
    }

    /// Whether any table sets a `max_concurrent`.
    pub fn limits_concurrency(&self) -> bool {
        self.tables
            .values()
            .any(|limits| limits.max_concurrent.is_some())
    }

    /// `tenant`'s `max_queued` if its table or the default table sets one.
    pub fn set_max_queued(&self, tenant: &str) -> Option<usize> {
        self.set(tenant, |limits| limits.max_queued)
    }

    fn set(&self, tenant: &str, limit: impl Fn(&TenantLimits) -> Option<usize>) -> Option<usize> {
        self.tables
            .get(tenant)
            .and_then(&limit)
            .or_else(|| self.tables.get(DEFAULT_TENANT_TABLE).and_then(&limit))
    }

    /// `tenant`'s limits.
    pub fn of(&self, tenant: &str) -> Resolved {
        self.named.get(tenant).copied().unwrap_or(self.default)
    }

    /// Whether any tenant has a token or cost quota.
    pub fn has_quotas(&self) -> bool {
        std::iter::once(&self.default)
            .chain(self.named.values())
            .any(|limits| limits.quota().is_some())
    }

    /// Whether any tenant has a rate limit or a token quota (checked at
    /// each admission: a server without any does no such work).
    pub fn has_rates_or_quotas(&self) -> bool {
        std::iter::once(&self.default)
            .chain(self.named.values())
            .any(|limits| limits.runs_per_minute.is_some() || limits.quota().is_some())
    }
}

/// What is wrong with `tenants`, if anything.
pub(super) fn check(tenants: &BTreeMap<String, TenantLimits>) -> Result<(), String> {
    for (name, limits) in tenants {
        if limits.max_concurrent == Some(0) {
            return Err(format!("tenants.{name}.max_concurrent must be at least 1"));
        }
        if limits.runs_per_minute == Some(0) {
            return Err(format!(
                "tenants.{name}.runs_per_minute must be at least 1 (leave it out for no limit)"
            ));
        }
        if let Some(variable) = &limits.webhook_secret_env
            && !super::check::is_valid_env_name(variable)
        {
            return Err(format!(
                "tenants.{name}.webhook_secret_env: {variable:?} is not a variable's name"
            ));
        }
        if limits.max_tokens_per_day == Some(0) {
            return Err(format!(
                "tenants.{name}.max_tokens_per_day must be at least 1 (leave it out for no limit)"
            ));
        }
        if let Some(max) = limits.max_cost_usd_per_day
            && !(max.is_finite() && max > 0.0)
        {
            return Err(format!(
                "tenants.{name}.max_cost_usd_per_day must be a number of US dollars above 0 \
                 (got {max}; leave it out for no limit)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_takes_its_own_then_the_default_tables_then_the_servers_limits() {
        let tenants: BTreeMap<String, TenantLimits> = toml::from_str(
            "[default]\nmax_queued = 50\nruns_per_minute = 60\n[a]\nmax_concurrent = 2\n\
             [b]\nmax_queued = 7\nruns_per_minute = 5\nmax_tokens_per_day = 1000\n",
        )
        .unwrap();
        let runs = RunsConfig {
            max_concurrent: 8,
            max_queued: 1000,
            ..RunsConfig::default()
        };
        let policy = TenantPolicy::new(&tenants, &runs);
        let limits = |name| {
            let Resolved {
                max_concurrent,
                max_queued,
                runs_per_minute,
                max_tokens_per_day,
                ..
            } = policy.of(name);
            (
                max_concurrent,
                max_queued,
                runs_per_minute,
                max_tokens_per_day,
            )
        };
        assert_eq!(limits("a"), (2, 50, Some(60), None));
        assert_eq!(limits("b"), (8, 7, Some(5), Some(1000)));
        assert_eq!(limits("anyone"), (8, 50, Some(60), None));
        assert_eq!(policy.set_max_concurrent("a"), Some(2));
        assert!(policy.limits_concurrency());
        assert_eq!(policy.set_max_concurrent("b"), None);
        assert_eq!(policy.set_max_queued("b"), Some(7));
        assert_eq!(policy.set_max_queued("anyone"), Some(50));
        assert!(policy.has_rates_or_quotas());
        assert!(!TenantPolicy::new(&BTreeMap::new(), &runs).has_rates_or_quotas());
        assert!(check(&tenants).is_ok());
        let zero: BTreeMap<String, TenantLimits> =
            toml::from_str("[a]\nmax_concurrent = 0\n").unwrap();
        assert_eq!(
            check(&zero).unwrap_err(),
            "tenants.a.max_concurrent must be at least 1"
        );
        assert!(toml::from_str::<BTreeMap<String, TenantLimits>>("[a]\nburst = 1\n").is_err());
    }
}
