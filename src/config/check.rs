//! Checking a configuration once it is read: every value in range, every
//! name well formed, and the combinations that cannot work refused.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{
    Config, ConfigError, MAX_LEASE_MS, MAX_STATEMENT_TIMEOUT_MS, MAX_TENANT_BYTES,
    MAX_TIME_LIMIT_MS, MIN_LEASE_MS, MIN_STATEMENT_TIMEOUT_MS, REDACTED,
};
use crate::tools::command::MAX_DESCRIPTION_CHARS as MAX_PRESET_DESCRIPTION_CHARS;
use crate::tools::sandbox::MIN_MEMORY_MAX_BYTES;

/// The smallest ceiling of a run's transcript: room for a prompt and a few
/// results.
const MIN_RUN_BYTES: usize = 64 * 1024;

/// Longest `runs.default_instructions`, in bytes (a request's own may be as
/// long).
const MAX_DEFAULT_INSTRUCTIONS_BYTES: usize = 256 * 1024;

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if crate::store::Engine::of_url(&self.storage.database_url).is_none() {
            let scheme = self
                .storage
                .database_url
                .split_once(':')
                .map_or("none", |(scheme, _)| scheme);
            return invalid(format!(
                "storage.database_url: the scheme {scheme:?} is not supported; supported: \
                 sqlite (e.g. sqlite://data/agent-runner.db) and postgres \
                 (postgres://USER:PASSWORD@HOST/DATABASE)"
            ));
        }
        let server = &self.server;
        if server.request_header_timeout_ms == 0
            || server.idle_timeout_ms == 0
            || server.body_timeout_ms == 0
        {
            return invalid(
                "server.request_header_timeout_ms, idle_timeout_ms and body_timeout_ms must be \
                 at least 1"
                    .into(),
            );
        }
        if self.storage.write_retry_ms == 0 {
            return invalid("storage.write_retry_ms must be at least 1".into());
        }
        let instructions = &self.runs.default_instructions;
        if instructions.contains('\0') || instructions.len() > MAX_DEFAULT_INSTRUCTIONS_BYTES {
            return invalid(format!(
                "runs.default_instructions: at most {MAX_DEFAULT_INSTRUCTIONS_BYTES} bytes, \
                 without NUL characters"
            ));
        }
        let statement_timeout = self.storage.statement_timeout_ms;
        if !(MIN_STATEMENT_TIMEOUT_MS..=MAX_STATEMENT_TIMEOUT_MS).contains(&statement_timeout) {
            return invalid(format!(
                "storage.statement_timeout_ms must be between {MIN_STATEMENT_TIMEOUT_MS} and \
                 {MAX_STATEMENT_TIMEOUT_MS} (got {statement_timeout})"
            ));
        }
        if let Some(token) = &server.metrics_token
            && (token.0.is_empty()
                || token.0 == REDACTED
                || token.0.chars().any(char::is_whitespace))
        {
            return invalid(
                "server.metrics_token must be a bearer token: not empty, no whitespace \
                 (and not the redacted placeholder `agent-runner config` prints)"
                    .into(),
            );
        }
        for host in server.allowed_hosts.iter().flatten() {
            if let Err(why) = crate::api::hosts::check_entry(host) {
                return invalid(format!("server.allowed_hosts: {host:?} {why}"));
            }
        }
        for origin in &server.cors_origins {
            if let Err(why) = check_origin(origin) {
                return invalid(format!("server.cors_origins: {origin:?} {why}"));
            }
        }
        if server.max_connections == Some(0) || server.max_connections_per_client == 0 {
            return invalid(
                "server.max_connections and max_connections_per_client must be at least 1".into(),
            );
        }
        if self.runs.max_attempts < 2 {
            return invalid("runs.max_attempts must be at least 2".into());
        }
        if self.runs.max_parallel_attempts == 0 {
            return invalid("runs.max_parallel_attempts must be at least 1".into());
        }
        if self.runs.max_parallel_subruns == 0 {
            return invalid("runs.max_parallel_subruns must be at least 1".into());
        }
        if self.runs.max_depth > 8 {
            return invalid("runs.max_depth must be at most 8".into());
        }
        if self.runs.max_concurrent == 0 {
            return invalid("runs.max_concurrent must be at least 1".into());
        }
        super::tenants::check(&self.tenants).or_else(invalid)?;
        self.tracing.check().or_else(invalid)?;
        self.workspaces.check().or_else(invalid)?;
        if self.limits.max_upload_bytes == 0 {
            return invalid("limits.max_upload_bytes must be at least 1".into());
        }
        if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&self.runs.lease_ms) {
            return invalid(format!(
                "runs.lease_ms must be between {MIN_LEASE_MS} and {MAX_LEASE_MS} (got {})",
                self.runs.lease_ms
            ));
        }
        let limits = &self.limits;
        if limits.max_steps == 0
            || limits.timeout_ms == 0
            || limits.max_context_chars == 0
            || limits.max_tool_result_chars == 0
            || limits.action_timeout_ms == 0
        {
            return invalid(
                "limits.max_steps, timeout_ms, max_context_chars, max_tool_result_chars and action_timeout_ms must be at least 1"
                    .into(),
            );
        }
        if limits.max_concurrent_downloads == 0 {
            return invalid(
                "limits.max_concurrent_downloads must be at least 1 (a tenant could download nothing)"
                    .into(),
            );
        }
        if limits.max_run_bytes < MIN_RUN_BYTES {
            return invalid(format!(
                "limits.max_run_bytes must be at least {MIN_RUN_BYTES} (got {})",
                limits.max_run_bytes
            ));
        }
        if limits.timeout_ms > MAX_TIME_LIMIT_MS || limits.action_timeout_ms > MAX_TIME_LIMIT_MS {
            return invalid(format!(
                "limits.timeout_ms and action_timeout_ms must be at most {MAX_TIME_LIMIT_MS} (a year)"
            ));
        }
        for (name, preset) in &self.commands {
            if !crate::harness::is_valid_tool_name(name) {
                return invalid(format!(
                    "commands.{name}: a preset name must match ^[a-zA-Z][a-zA-Z0-9_-]*$"
                ));
            }
            if preset.program.trim().is_empty() {
                return invalid(format!("commands.{name}.program must not be empty"));
            }
            if preset.timeout_ms == 0 {
                return invalid(format!("commands.{name}.timeout_ms must be at least 1"));
            }
            if let Some(description) = &preset.description {
                if description.trim().is_empty() {
                    return invalid(format!(
                        "commands.{name}.description must not be empty (leave it out instead)"
                    ));
                }
                if description.chars().count() > MAX_PRESET_DESCRIPTION_CHARS {
                    return invalid(format!(
                        "commands.{name}.description must be at most {MAX_PRESET_DESCRIPTION_CHARS} characters"
                    ));
                }
            }
            check_env(&format!("commands.{name}.env"), &preset.env)
                .map_err(ConfigError::Invalid)?;
            check_sandbox_settings(
                &format!("commands.{name}."),
                &preset.read_paths,
                preset.memory_max_bytes,
                preset.pids_max,
            )?;
        }
        for (name, server) in &self.mcp {
            server.check(name).map_err(ConfigError::Invalid)?;
        }
        check_sandbox_settings(
            "sandbox.",
            &self.sandbox.read_paths,
            Some(self.sandbox.memory_max_bytes),
            Some(self.sandbox.pids_max),
        )?;
        if self
            .retention
            .keep_days
            .is_some_and(|days| !(1..=36_500).contains(&days))
        {
            return invalid("retention.keep_days must be between 1 and 36500".into());
        }
        if !(100..=86_400_000).contains(&self.retention.sweep_interval_ms) {
            return invalid("retention.sweep_interval_ms must be between 100 and 86400000".into());
        }
        let webhooks = &self.webhooks;
        for host in &webhooks.allowed_hosts {
            if let Err(why) = super::webhook_host(host) {
                return invalid(format!("webhooks.allowed_hosts: {why}"));
            }
        }
        if !webhooks.allowed_hosts.is_empty() && webhooks.secret_env.is_none() {
            return invalid("webhooks.secret_env is required with webhooks.allowed_hosts".into());
        }
        if webhooks.retry_for_ms > MAX_TIME_LIMIT_MS || webhooks.timeout_ms == 0 {
            return invalid(
                "webhooks.retry_for_ms must be at most a year, and timeout_ms at least 1".into(),
            );
        }
        for (i, token) in self.auth.tokens.iter().enumerate() {
            if token.tenant.trim().is_empty() {
                return invalid(format!("auth.tokens[{i}].tenant must not be empty"));
            }
            if token.token.as_deref() == Some(REDACTED) {
                return invalid(format!(
                    "auth.tokens[{i}].token is {REDACTED:?}, as `agent-runner config` prints it: \
                     give the real token (or its token_sha256)"
                ));
            }
            if token.tenant.len() > MAX_TENANT_BYTES {
                return invalid(format!(
                    "auth.tokens[{i}].tenant must be at most {MAX_TENANT_BYTES} bytes"
                ));
            }
            match (&token.token, &token.token_sha256) {
                (Some(t), None) if !t.is_empty() => {}
                (None, Some(h)) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {}
                (None, Some(_)) => {
                    return invalid(format!(
                        "auth.tokens[{i}].token_sha256 must be 64 hexadecimal characters"
                    ));
                }
                _ => {
                    return invalid(format!(
                        "auth.tokens[{i}] needs exactly one of token or token_sha256"
                    ));
                }
            }
        }
        if self.auth.tokens.is_empty() && !self.server.bind.ip().is_loopback() {
            return invalid(format!(
                "server.bind is {}, but no auth.tokens are configured: without tokens the server only binds a loopback address",
                self.server.bind
            ));
        }
        Ok(())
    }
}

/// Whether `origin` is what a browser sends as `Origin`: a scheme (http or
/// https), a host and maybe a port, with nothing after.
fn check_origin(origin: &str) -> Result<(), &'static str> {
    let (scheme, rest) = origin
        .split_once("://")
        .ok_or("is not an origin: scheme://host[:port]")?;
    if scheme != "http" && scheme != "https" {
        return Err("must be http or https");
    }
    if rest.is_empty()
        || rest.contains(['/', '?', '#', '@'])
        || !rest.bytes().all(|byte| byte.is_ascii_graphic())
        || rest.ends_with(':')
    {
        return Err("is not an origin: scheme://host[:port], with no path");
    }
    // As a browser sends it, or it would never match.
    if rest.bytes().any(|byte| byte.is_ascii_uppercase()) {
        return Err("must be lower case, as browsers send it");
    }
    let default_port = if scheme == "https" { ":443" } else { ":80" };
    if rest.ends_with(default_port) {
        return Err("must leave out the default port, as browsers do");
    }
    Ok(())
}

/// `^[A-Za-z_][A-Za-z0-9_]*$`: a name a variable can have.
/// Variables a preset's or a stdio MCP server's `env` may not set: the
/// sandbox sets them (a private directory of the server's).
const RESERVED_ENV: [&str; 2] = ["HOME", "TMPDIR"];

/// An `env` table of a preset or a stdio MCP server (`at` names it in the
/// error): names a shell would take, none the sandbox sets, values that a
/// process environment can hold (no NUL byte).
pub(crate) fn check_env(at: &str, env: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in env {
        if !is_valid_env_name(key) {
            return Err(format!("{at}: {key:?} is not an environment variable name"));
        }
        if RESERVED_ENV.contains(&key.as_str()) {
            return Err(format!(
                "{at}: {key} is set by the sandbox (a private directory of the server's)"
            ));
        }
        if value.contains('\0') {
            return Err(format!("{at}.{key}: a value may not hold a NUL byte"));
        }
    }
    Ok(())
}

pub fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Read paths absolute, limits that let a program start at all.
pub(crate) fn check_sandbox_settings(
    prefix: &str,
    read_paths: &[PathBuf],
    memory_max_bytes: Option<u64>,
    pids_max: Option<u64>,
) -> Result<(), ConfigError> {
    if let Some(path) = read_paths.iter().find(|path| !path.is_absolute()) {
        return Err(ConfigError::Invalid(format!(
            "{prefix}read_paths: {} is not an absolute path",
            path.display()
        )));
    }
    if memory_max_bytes.is_some_and(|bytes| bytes < MIN_MEMORY_MAX_BYTES) {
        return Err(ConfigError::Invalid(format!(
            "{prefix}memory_max_bytes must be at least {MIN_MEMORY_MAX_BYTES} (1 MiB)"
        )));
    }
    if pids_max == Some(0) {
        return Err(ConfigError::Invalid(format!(
            "{prefix}pids_max must be at least 1"
        )));
    }
    Ok(())
}
