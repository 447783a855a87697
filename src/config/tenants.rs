//! `[tenants.NAME]`: what each tenant may use of the server (SPEC section
//! 16). `[tenants.default]` holds for every tenant without a table of its
//! own (and for the tenant of a server without tokens, named `default`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RunsConfig;

/// One tenant's limits; a missing one is `[tenants.default]`'s, then the
/// server's (`runs.max_concurrent`, `runs.max_queued`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantLimits {
    /// Its runs executing at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<usize>,
    /// Its runs waiting; beyond, 429 `queue_full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queued: Option<usize>,
}

/// The name of the table that holds for tenants without their own.
pub const DEFAULT_TENANT_TABLE: &str = "default";

/// Each tenant's limits, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantPolicy {
    named: BTreeMap<String, Resolved>,
    default: Resolved,
}

/// A tenant's limits with nothing left unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Resolved {
    pub max_concurrent: usize,
    pub max_queued: usize,
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
        };
        Self {
            named: tenants
                .iter()
                .map(|(name, limits)| (name.clone(), resolve(limits)))
                .collect(),
            default: resolve(&fallback),
        }
    }

    /// `tenant`'s limits.
    pub fn of(&self, tenant: &str) -> Resolved {
        self.named.get(tenant).copied().unwrap_or(self.default)
    }
}

/// What is wrong with `tenants`, if anything.
pub(super) fn check(tenants: &BTreeMap<String, TenantLimits>) -> Result<(), String> {
    for (name, limits) in tenants {
        if limits.max_concurrent == Some(0) {
            return Err(format!("tenants.{name}.max_concurrent must be at least 1"));
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
            "[default]\nmax_queued = 50\n[a]\nmax_concurrent = 2\n[b]\nmax_queued = 7\n",
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
            } = policy.of(name);
            (max_concurrent, max_queued)
        };
        assert_eq!(limits("a"), (2, 50));
        assert_eq!(limits("b"), (8, 7));
        assert_eq!(limits("anyone"), (8, 50));
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
