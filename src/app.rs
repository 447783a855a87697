//! Building and running the service: what `main` calls, and what the tests
//! call, so that both run the same server.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::serve::ConnectionLimits;
use crate::api::{self, AppState};
use crate::config::Config;
use crate::mcp::McpServers;
use crate::metrics::Metrics;
use crate::models::{ModelProfiles, process_env};
use crate::runner::Runner;
use crate::scheduler::{Leased, Local, Scheduler};
use crate::store::Store;
use crate::tools::Sandbox;

/// How long open connections may take to finish once every run is stored.
const CONNECTION_DRAIN: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
    /// The database, its URL's password and query redacted.
    #[error("cannot open the database {database}: {source}")]
    Store {
        database: String,
        source: crate::store::StoreError,
    },
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Sandbox(String),
    #[error("cannot create the workspaces directory {path}: {source}")]
    Workspaces {
        path: String,
        source: std::io::Error,
    },
}

pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    connections: ConnectionLimits,
    runner: Runner,
    grace: Duration,
}

/// What a configuration makes before anything is created: its model
/// profiles, MCP servers and webhooks.
struct Checked {
    profiles: ModelProfiles,
    mcp: McpServers,
    webhooks: crate::runner::webhooks::Webhooks,
}

/// Every check `serve` makes of `config` before it creates, opens or binds
/// anything: its model profiles (each key's variable set), the default
/// model, the MCP servers, the webhooks, the database URL, and whether the
/// sandbox can hold its presets and keeps its storage out of their reach.
/// What only the attempt can tell (the database answering, the address
/// free) is left to `serve`. `agent-runner config` runs it.
pub fn check(config: &Config) -> Result<(), StartError> {
    preflight(config).map(drop)
}

fn preflight(config: &Config) -> Result<Checked, StartError> {
    let profiles = ModelProfiles::new(config.models.clone(), &process_env)
        .map_err(|e| StartError::Config(e.to_string()))?;
    if !profiles.contains(&config.runs.default_model) {
        return Err(StartError::Config(format!(
            "runs.default_model: no model profile is named {:?}",
            config.runs.default_model
        )));
    }
    let mcp = McpServers::new(&config.mcp, &process_env).map_err(StartError::Config)?;
    let webhooks = crate::runner::webhooks::Webhooks::new(
        &config.webhooks,
        &config.tenants,
        !config.auth.tokens.is_empty(),
        |name| std::env::var(name).ok(),
    )
    .map_err(StartError::Config)?;
    Store::check_url(&config.storage.database_url)
        .map_err(|error| StartError::Config(format!("storage.database_url: {error}")))?;
    check_sandbox(config, &Sandbox::probe(&config.sandbox))?;
    Ok(Checked {
        profiles,
        mcp,
        webhooks,
    })
}

impl Application {
    /// Checks the configuration (see [`check`]); binds the listener; opens
    /// storage (recovering what a previous process left); builds the
    /// router. Nothing is made on disk before the configuration is known to
    /// be good, and the workspaces directory only once the database is
    /// open. Nothing is served until
    /// [`run_until_stopped`](Self::run_until_stopped).
    pub async fn build(config: Config) -> Result<Self, StartError> {
        let Checked {
            profiles,
            mcp,
            webhooks,
        } = preflight(&config)?;
        let addr = config.server.bind;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        // Detecting the sandbox probes the kernel and writes cgroup files,
        // and sweeping what a dead server left waits for its processes to
        // die: blocking work, kept off the async workers.
        let sandbox = {
            let config = config.clone();
            tokio::task::spawn_blocking(move || prepare_sandbox(&config))
                .await
                .map_err(|error| {
                    StartError::Sandbox(format!("detecting the sandbox failed: {error}"))
                })??
        };
        let sandbox_guarantees = sandbox.guarantees();
        let sandbox = Arc::new(sandbox);
        let (store, recovered) = Store::open_with(
            &config.storage.database_url,
            Duration::from_millis(config.storage.write_retry_ms),
            Duration::from_millis(config.runs.lease_ms),
            Duration::from_millis(config.storage.statement_timeout_ms),
        )
        .await
        .map_err(|source| StartError::Store {
            database: crate::config::redact_url(&config.storage.database_url),
            source,
        })?;
        let workspaces = &config.storage.workspaces_dir;
        if let Err(source) = std::fs::create_dir_all(workspaces) {
            store.close().await;
            return Err(StartError::Workspaces {
                path: workspaces.display().to_string(),
                source,
            });
        }
        if !recovered.interrupted.is_empty() || !recovered.queued.is_empty() {
            tracing::info!(
                interrupted = recovered.interrupted.len(),
                requeued = recovered.queued.len(),
                "recovered the previous process's runs"
            );
        }
        let metrics = Arc::new(Metrics::default());
        // Which run starts next: here, or shared with the other replicas
        // of a PostgreSQL database.
        let (max_concurrent, max_queued) = (config.runs.max_concurrent, config.runs.max_queued);
        let scheduler: Arc<dyn Scheduler> = match store.cluster() {
            Some(cluster) => Arc::new(Leased::new(
                store.clone(),
                Arc::clone(cluster),
                Arc::clone(&metrics),
                max_concurrent,
                max_queued,
                crate::config::TenantPolicy::new(&config.tenants, &config.runs),
            )),
            None => Arc::new(Local::new(
                store.clone(),
                Arc::clone(&metrics),
                max_concurrent,
                max_queued,
                crate::config::TenantPolicy::new(&config.tenants, &config.runs),
            )),
        };
        // Runs' spans, exported off their path when an endpoint is set.
        let telemetry = Arc::new(crate::telemetry::Telemetry::start(
            &config.tracing,
            metrics.spans_dropped(),
        ));
        let runner = Runner::new(
            &config,
            crate::runner::Parts {
                store,
                scheduler,
                metrics,
                profiles: Arc::new(profiles),
                sandbox,
                mcp: Arc::new(mcp),
                webhooks: Arc::new(webhooks),
                telemetry,
            },
        );
        runner.resume(recovered.queued);
        runner.keep(config.retention);
        runner.join().await;
        let client_connections =
            api::clients::ClientShares::new(config.server.max_connections_per_client);
        let state = AppState::new(api::Services {
            sandbox: sandbox_guarantees,
            client_connections: Arc::clone(&client_connections),
            downloads: api::clients::ClientShares::new(config.limits.max_concurrent_downloads),
            runner: runner.clone(),
            auth: api::auth::Auth::new(&config.auth.tokens),
            limits: config.limits,
            default_model: config.runs.default_model.as_str().into(),
            default_instructions: (!config.runs.default_instructions.is_empty())
                .then(|| config.runs.default_instructions.as_str().into()),
            max_body_bytes: config.server.max_body_bytes,
            keep_alive: config
                .server
                .sse_keep_alive_ms
                .map_or(api::events::DEFAULT_KEEP_ALIVE, Duration::from_millis),
            cors_origins: config.server.cors_origins.clone(),
            stream_tokens: api::stream_tokens::StreamTokens::new(*runner.store().stream_key()),
            metrics_token: config
                .server
                .metrics_token
                .as_ref()
                .map(|token| api::auth::token_sha256(&token.0)),
            allowed_hosts: api::hosts::AllowedHosts::new(
                config.server.allowed_hosts.as_deref(),
                config.server.bind,
            ),
        });
        api::schedules::ticker::spawn(state.clone());
        let connections = ConnectionLimits {
            request_header_timeout: Duration::from_millis(config.server.request_header_timeout_ms),
            idle_timeout: Duration::from_millis(config.server.idle_timeout_ms),
            body_timeout: Duration::from_millis(config.server.body_timeout_ms),
            max_connections: config.server.max_connections.unwrap_or_else(|| {
                api::serve::connection_budget(file_reserve(config.runs.max_concurrent))
            }),
            clients: client_connections,
        };
        tracing::info!(
            max_connections = connections.max_connections,
            max_connections_per_client = config.server.max_connections_per_client,
            body_timeout_ms = config.server.body_timeout_ms,
            request_header_timeout_ms = config.server.request_header_timeout_ms,
            idle_timeout_ms = config.server.idle_timeout_ms,
            "connection limits"
        );
        Ok(Self {
            listener,
            connections,
            router: api::router(state),
            runner,
            grace: Duration::from_millis(config.runs.shutdown_grace_ms),
        })
    }

    /// The address actually bound (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` resolves; then takes no new run (503), gives
    /// running runs their grace, interrupts the rest, stores everything, and
    /// lets open connections finish.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (stopped, runs_stored) = tokio::sync::oneshot::channel::<()>();
        let runner = self.runner.clone();
        let grace = self.grace;
        // A writer that died stores nothing more: the server stops at once
        // and exits with an error, for a supervisor to start it again.
        let writer = runner.store().writer().clone();
        let writer_died = writer.died();
        let mut stopper = tokio::spawn(async move {
            let grace = tokio::select! {
                () = shutdown => grace,
                () = writer_died.cancelled() => {
                    // Unready (and refusing runs) for a moment first, so
                    // that probes and balancers see it leave.
                    tokio::time::sleep(WRITER_DEATH_LINGER).await;
                    Duration::ZERO
                }
            };
            tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down");
            runner.shutdown(grace).await;
            // The spans of the runs just ended, sent before the process
            // exits (off the async threads: the export is blocking).
            let flushing = runner.clone();
            let _ = tokio::task::spawn_blocking(move || flushing.telemetry().flush()).await;
            let _ = stopped.send(());
        });
        let stop_http = CancellationToken::new();
        {
            let stop_http = stop_http.clone();
            tokio::spawn(async move {
                let _ = runs_stored.await;
                stop_http.cancel();
            });
        }
        let mut server = tokio::spawn(api::serve::serve(
            self.listener,
            self.router,
            self.connections,
            stop_http,
        ));
        let served = tokio::select! {
            _ = &mut stopper => None,
            result = &mut server => Some(result),
        };
        match served {
            // The server ended first (it stops once the runs are stored).
            Some(result) => result.map_err(std::io::Error::other)?,
            // Every run is stored; event streams have sent their ends.
            None => match tokio::time::timeout(CONNECTION_DRAIN, server).await {
                Ok(result) => result.map_err(std::io::Error::other)?,
                Err(_) => {
                    tracing::warn!("connections still open after the drain period; closing")
                }
            },
        }
        tracing::info!("stopped");
        if let Some(why) = writer.dead() {
            return Err(std::io::Error::other(format!(
                "the store's writer died ({why}): nothing could be stored any more; \
                 start the server again"
            )));
        }
        Ok(())
    }
}

/// How long a server whose writer died stays up, answering `/readyz` 503,
/// before it stops.
const WRITER_DEATH_LINGER: Duration = Duration::from_secs(1);

/// Detects the command sandbox and refuses to start where it would not
/// hold (see [`check_sandbox`]).
fn prepare_sandbox(config: &Config) -> Result<Sandbox, StartError> {
    let sandbox = Sandbox::detect(&config.sandbox);
    check_sandbox(config, &sandbox)?;
    if !sandbox.presets_allowed() && !config.commands.is_empty() {
        tracing::warn!(
            "command presets are refused: {}; set [sandbox] allow_weaker = true to run them \
             anyway",
            sandbox.weaker().join("; ")
        );
    }
    tracing::info!(presets = config.commands.len(), "{}", sandbox.describe());
    Ok(sandbox)
}

/// Refuses a sandbox that would not hold: presets with an enforcing sandbox
/// the kernel cannot apply, or storage that commands could read.
fn check_sandbox(config: &Config, sandbox: &Sandbox) -> Result<(), StartError> {
    let stdio_servers = config.mcp.values().any(|server| server.command.is_some());
    if (!config.commands.is_empty() || stdio_servers)
        && let Some(missing) = sandbox.missing()
    {
        let what = if config.commands.is_empty() {
            "stdio MCP servers are"
        } else {
            "command presets are"
        };
        return Err(StartError::Sandbox(format!(
            "{what} configured but this kernel cannot sandbox them: {missing} \
             is missing. They would run with the server's own rights; set [sandbox] \
             mode = \"off\" to run them unconfined anyway"
        )));
    }
    let database = Store::database_file(&config.storage.database_url);
    let mut protected = vec![(
        "workspaces directory",
        config.storage.workspaces_dir.as_path(),
    )];
    if let Some(database) = &database {
        protected.push(("database", database.as_path()));
    }
    if let Some(source) = &config.source {
        protected.push(("config file", source.as_path()));
    }
    sandbox
        .check_storage(
            config
                .commands
                .values()
                .flat_map(|preset| preset.read_paths.iter().map(PathBuf::as_path))
                .chain(
                    config
                        .mcp
                        .values()
                        .flat_map(|server| server.read_paths.iter().map(PathBuf::as_path)),
                ),
            &protected,
        )
        .map_err(StartError::Sandbox)
}

/// Descriptors kept from connections: the database's (a few per pooled
/// connection, WAL files included), and for each run that may execute, its
/// workspace walk and a command's pipes, pidfd and cgroup files.
fn file_reserve(max_concurrent: usize) -> u64 {
    256 + 16 * u64::try_from(max_concurrent).unwrap_or(u64::MAX / 32)
}
