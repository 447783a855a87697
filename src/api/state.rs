//! What every handler may reach: the runner (and through it the store's read
//! side), the tokens, the request ceilings. Shared behind one `Arc`, so that
//! the clone each request takes is a reference count.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use super::auth::Auth;
use crate::config::LimitsConfig;
use crate::runner::Runner;

/// The service's state as the API sees it.
pub struct Services {
    pub runner: Runner,
    pub auth: Auth,
    pub limits: LimitsConfig,
    pub default_model: Arc<str>,
    /// `runs.default_instructions`, when not empty.
    pub default_instructions: Option<Arc<str>>,
    pub max_body_bytes: usize,
    /// Interval of keep-alive comments on idle event streams.
    pub keep_alive: Duration,
    /// Origins whose pages may call the API (CORS).
    pub cors_origins: Vec<String>,
    /// What makes and checks the tokens of `?stream_token=`.
    pub stream_tokens: super::stream_tokens::StreamTokens,
    /// The hosts a request may name (DNS rebinding).
    pub allowed_hosts: super::hosts::AllowedHosts,
    /// The SHA-256 of `[server] metrics_token`, when `/metrics` needs it.
    pub metrics_token: Option<String>,
    /// The connections each client holds (a connection moves to its
    /// tenant as a request authenticates).
    pub client_connections: Arc<super::clients::ClientShares>,
    /// What the command sandbox guarantees here (`/readyz` says it).
    pub sandbox: serde_json::Value,
    /// The workspace downloads each tenant has under way.
    pub downloads: Arc<super::clients::ClientShares>,
}

/// A handle to [`Services`]; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Services>);

impl AppState {
    pub fn new(services: Services) -> Self {
        Self(Arc::new(services))
    }
}

impl Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}
