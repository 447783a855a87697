//! `agent-runner config`: the effective configuration printed as TOML, its
//! secrets redacted, and the serializers that redact them.

use std::collections::BTreeMap;

use super::{Config, ConfigError};

/// The effective configuration as TOML, secrets redacted: bearer tokens
/// and their digests, URLs' passwords and queries (the database's, model
/// profiles', MCP servers'), model profiles' header values, MCP servers'
/// environment values. It is for reading: a redacted token is refused.
pub fn effective(config: &Config) -> Result<String, ConfigError> {
    let mut shown = config.clone();
    shown.storage.database_url = redact_url(&shown.storage.database_url);
    for server in shown.mcp.values_mut() {
        if let Some(url) = &server.url {
            server.url = Some(redact_url(url));
        }
    }
    for profile in shown.models.values_mut() {
        profile.redact_base_url(redact_url);
    }
    toml::to_string(&shown).map_err(|e| ConfigError::Invalid(format!("cannot print it: {e}")))
}

/// `url` with the password of its user part and its query replaced (a
/// query may carry a password, `?password=`, or a key).
pub fn redact_url(url: &str) -> String {
    let (url, query) = match url.split_once('?') {
        Some((url, _)) => (url, format!("?{REDACTED}")),
        None => (url, String::new()),
    };
    redact_password(url) + &query
}

/// `url` with the password of its user part replaced.
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, None), |(a, p)| (a, Some(p)));
    let Some((user, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = match user.split_once(':') {
        Some((name, _)) => format!("{name}:{REDACTED}"),
        None => user.to_owned(),
    };
    let path = path.map(|path| format!("/{path}")).unwrap_or_default();
    format!("{scheme}://{user}@{host}{path}")
}

/// What a secret is printed as.
pub const REDACTED: &str = "<redacted>";

pub(super) fn redacted<S: serde::Serializer>(
    _: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(REDACTED)
}

/// A map with its values redacted (an environment's).
pub fn redacted_values<S: serde::Serializer>(
    map: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut out = serializer.serialize_map(Some(map.len()))?;
    for key in map.keys() {
        out.serialize_entry(key, REDACTED)?;
    }
    out.end()
}
