//! Storage: SQLite or PostgreSQL through sqlx, the one place that knows the
//! schema.
//!
//! A run's writes go through a single writer connection that batches them
//! into transactions ([`writer`]); reads go through a separate pool. On
//! SQLite, with one writer there is never a lock to wait for, and WAL lets
//! the readers go on while it writes. On PostgreSQL several servers may
//! share the database ([`cluster`]): each has its writer, and what they
//! share (claims, leases, a paused run's answers, the webhooks' outbox) is
//! decided under row locks.
//!
//! The connections are sqlx's `Any` ones, and every statement is written in
//! `$N` placeholders, which SQLite and PostgreSQL both take (sqlx's SQLite
//! driver binds `$N` to the N-th argument): one set of statements for both
//! engines, with what differs between them kept to connecting, the
//! migrations and what counts as storage refusing writes.

mod agents;
pub use agents::Saved;
pub mod cluster;
mod connect;
pub mod live;
mod lock;
pub mod outbox;
mod reads;
pub use reads::Page;
mod recover;
pub(crate) mod rows;
mod schedules;
mod tenants;
pub mod uploads;
pub mod writer;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AnyConnection, AnyPool};
use uuid::Uuid;

use crate::harness::{Message, Outcome, PendingAction};
use crate::run::{ActionAnswer, ModelSpec, Run, RunSpec, RunStatus, Tenant};

pub use connect::Engine;
use connect::{STREAM_KEY, open_postgres, open_sqlite, server_key};
pub use live::{Channels, Closing, LiveEvent, StatusChange};
use lock::DatabaseLock;
pub use lock::lock_path;
pub use outbox::{Delivery, Unreadable};
pub use recover::{Recovered, ResumeReason};
use recover::{interrupt, recover, rest};
pub use tenants::{TenantLive, TenantUse};
pub use writer::schedules::Counted;
pub use writer::{Finish, NewEvent, Pause, Transition, Transitioned, Writer, WriterStats};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("the store is closed")]
    Closed,
    /// Storage refuses writes (disk full, I/O error): the server's failure,
    /// not the request's.
    #[error("storage refuses writes: {0}")]
    Refused(String),
    /// The database does not answer (a statement or a connection attempt
    /// past its deadline, the server unreachable): the server's failure, for
    /// now; to the writer, storage refusing writes.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// This replica's membership is lost: another replica took it for dead,
    /// or its lease could not be renewed in time (see [`cluster`]); nothing
    /// more is written under it, until it joined again.
    #[error("this replica's lease is lost")]
    Fenced,
    /// A new run continues one that was removed (purged) meanwhile.
    #[error("the run it continues was removed")]
    PreviousGone,
    /// Another server holds the SQLite file (see [`lock`]).
    #[error(
        "{database} is in use by another agent-runner server ({}, holding {lock}): one \
         SQLite file serves one server at a time; stop that server, or give this one a \
         database of its own (replicas share PostgreSQL)",
        pid.map_or_else(|| "pid unknown".to_owned(), |pid| format!("pid {pid}"))
    )]
    InUse {
        database: String,
        lock: String,
        pid: Option<u32>,
    },
    /// The lock file beside a SQLite file cannot be made or locked.
    #[error("cannot lock the database through {path}: {error}")]
    Lock { path: String, error: String },
}

/// A stored event, as served on the event stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub sequence: u64,
    pub kind: String,
    /// The event object's JSON.
    pub body: String,
}

/// A run that was live when the previous process stopped.
#[derive(Debug, Clone)]
pub struct Unfinished {
    pub run: Run,
    pub tenant: Tenant,
    pub model: ModelSpec,
    /// A paused run whose every action was answered: it resumes from its
    /// checkpoint rather than starting.
    pub answered_pause: bool,
    /// A run whose process stopped while it ran: it goes on from what was
    /// stored (see [`Store::recovery`]).
    pub recovered: bool,
}

/// Where a run whose process stopped stands, to go on from there.
#[derive(Debug)]
pub struct StoredRecovery {
    pub messages: Vec<Arc<Message>>,
    pub last_sequence: u64,
    pub steps: u32,
    /// Whether its last model response is counted in `steps` but lost:
    /// its `model_end` stored, nothing after it (the process stopped in
    /// between). A scripted model gives that response again.
    pub response_lost: bool,
    pub tool_calls: u32,
    pub usage: crate::harness::UsageTotals,
    pub running: Duration,
    /// What is stored of its last batch.
    pub batch: crate::harness::StoppedBatch,
}

/// Which runs a listing shows.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunFilter<'a> {
    pub status: Option<RunStatus>,
    pub thread_id: Option<Uuid>,
    /// The runs made from this agent (any version).
    pub agent: Option<&'a str>,
    /// The attempts of this run.
    pub parent_run_id: Option<Uuid>,
    /// The runs this schedule made.
    pub schedule_id: Option<Uuid>,
}

/// A paused run, answered, as stored: what its resume starts from.
#[derive(Debug, Clone)]
pub struct StoredPause {
    pub messages: Vec<Arc<Message>>,
    pub last_sequence: u64,
    /// Running time used before the pause.
    pub running: Duration,
    pub pending: Vec<PendingAction>,
    pub answers: std::collections::HashMap<String, ActionAnswer>,
}

/// A run found by its idempotency key.
#[derive(Debug, Clone)]
pub struct IdempotentRun {
    pub run: Run,
    pub request_hash: String,
}

#[derive(Clone)]
pub struct Store {
    /// The key that signs stream tokens, the database's (so every replica
    /// of it takes every other's tokens).
    stream_key: Arc<[u8; 32]>,
    read: AnyPool,
    /// How long a read may wait for the database, taking a connection
    /// included (`storage.statement_timeout_ms`).
    deadline: Duration,
    writer: Writer,
    channels: Arc<Channels>,
    /// On PostgreSQL: this replica among the database's.
    cluster: Option<Arc<cluster::Cluster>>,
    /// On a SQLite file: this server's hold on it, let go at close.
    lock: Option<DatabaseLock>,
    /// The agents' versions runs named (on SQLite; see [`agents`]).
    agents: Arc<agents::Cache>,
}

impl Store {
    /// The file a database URL names, if it names one (a SQLite file).
    pub fn database_file(url: &str) -> Option<std::path::PathBuf> {
        if Engine::of_url(url) != Some(Engine::Sqlite) {
            return None;
        }
        let options = SqliteConnectOptions::from_str(url).ok()?;
        let file = options.get_filename();
        (file.as_os_str() != ":memory:").then(|| file.to_owned())
    }

    /// Whether `url` is a database URL the store can open (its scheme, and
    /// what its engine reads of it), without opening anything.
    pub fn check_url(url: &str) -> Result<(), String> {
        match Engine::of_url(url) {
            Some(Engine::Sqlite) => SqliteConnectOptions::from_str(url)
                .map(drop)
                .map_err(|error| error.to_string()),
            Some(Engine::Postgres) => sqlx::postgres::PgConnectOptions::from_str(url)
                .map(drop)
                .map_err(|error| error.to_string()),
            None => Err("not a sqlite: or postgres: URL".to_owned()),
        }
    }

    /// Opens the database at `url` (a SQLite file, created if needed, or a
    /// PostgreSQL database), applies the migrations, and starts the writer.
    /// A SQLite file has one server: the previous process's live runs are
    /// brought to rest (see [`recover`]). A PostgreSQL database may have
    /// several: this server joins them as a replica with a lease of
    /// `lease` (see [`cluster`]), and what a dead one left is taken over
    /// by the replicas' sweeps instead.
    /// `write_retry`: how long writes that storage refuses are still tried
    /// when the store closes (see [`writer`]). Statements are bounded by
    /// the default deadline (see [`Self::open_with`]).
    pub async fn open(
        url: &str,
        write_retry: Duration,
        lease: Duration,
    ) -> Result<(Self, Recovered), StoreError> {
        let deadline = Duration::from_millis(crate::config::DEFAULT_STATEMENT_TIMEOUT_MS);
        Self::open_with(url, write_retry, lease, deadline).await
    }

    /// [`Self::open`], with `deadline` bounding every statement and every
    /// attempt to connect: a read that does not get its answer in time
    /// fails with [`StoreError::Unavailable`]; a batch of the writer that
    /// does not (on PostgreSQL) is storage refusing writes, held and
    /// written once the database answers again (see [`writer`]). On SQLite
    /// the writer's waits are bounded by SQLite's `busy_timeout`.
    pub async fn open_with(
        url: &str,
        write_retry: Duration,
        lease: Duration,
        deadline: Duration,
    ) -> Result<(Self, Recovered), StoreError> {
        sqlx::any::install_default_drivers();
        let channels = Arc::new(Channels::default());
        let (store, recovered) = match Engine::of_url(url) {
            Some(Engine::Sqlite) => {
                let (mut connection, read, lock) = open_sqlite(url, deadline).await?;
                let recovered = recover(&mut connection, Utc::now()).await?;
                let stream_key = server_key(&mut connection, STREAM_KEY).await?;
                // No deadline for the writer: SQLite's waits for its lock are
                // bounded by `busy_timeout`, and a statement given up would
                // still run to its end on the connection's thread, leaving
                // whether it committed unknown.
                let writer = Writer::start(
                    connection,
                    None,
                    None,
                    None,
                    write_retry,
                    Arc::clone(&channels),
                );
                let store = Self {
                    stream_key,
                    read,
                    deadline,
                    writer,
                    channels,
                    cluster: None,
                    lock,
                    agents: Default::default(),
                };
                (store, recovered)
            }
            Some(Engine::Postgres) => {
                let (mut connection, read, reopen) = open_postgres(url, lease, deadline).await?;
                let stream_key = server_key(&mut connection, STREAM_KEY).await?;
                let cluster = Arc::new(
                    cluster::Cluster::join(url, lease, deadline, Arc::clone(&channels)).await?,
                );
                let writer = Writer::start(
                    connection,
                    Some(reopen),
                    Some(deadline),
                    Some(Arc::clone(&cluster)),
                    write_retry,
                    Arc::clone(&channels),
                );
                let store = Self {
                    stream_key,
                    read,
                    deadline,
                    writer,
                    channels,
                    cluster: Some(cluster),
                    lock: None,
                    agents: Default::default(),
                };
                (store, Recovered::default())
            }
            None => {
                return Err(StoreError::Database(sqlx::Error::Configuration(
                    format!("unsupported database URL scheme: {url:?}").into(),
                )));
            }
        };
        Ok((store, recovered))
    }

    /// The key that signs stream tokens.
    pub fn stream_key(&self) -> &[u8; 32] {
        &self.stream_key
    }

    /// This replica among the database's, on PostgreSQL.
    pub fn cluster(&self) -> Option<&Arc<cluster::Cluster>> {
        self.cluster.as_ref()
    }

    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// The live runs' event channels: subscribe to a run, wait for its end.
    pub fn live(&self) -> &Channels {
        &self.channels
    }

    /// Waits for every queued write to be committed, then closes.
    pub async fn close(&self) {
        self.writer.close().await;
        if let Some(cluster) = &self.cluster {
            cluster.leave().await;
        }
        self.read.close().await;
        if let Some(lock) = &self.lock {
            lock.release();
        }
    }

    /// Whether the database answers, within a second (or the statement
    /// deadline, if shorter): readiness is asked often, and must be
    /// answered soon when the database does not answer at all.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let deadline = self.deadline.min(PING_DEADLINE);
        self.read_within(deadline, async |connection| {
            sqlx::query("SELECT 1").execute(connection).await
        })
        .await?;
        Ok(())
    }

    /// Runs `read` on a connection of the read pool, within the statement
    /// deadline (see [`Self::read_within`]).
    async fn read<T>(
        &self,
        read: impl AsyncFnOnce(&mut AnyConnection) -> Result<T, sqlx::Error>,
    ) -> Result<T, StoreError> {
        self.read_within(self.deadline, read).await
    }

    /// Runs `read` on a connection of the read pool, taking it included
    /// within `deadline`; past it, [`StoreError::Unavailable`]. A database
    /// that stopped answering (frozen, or behind a partition) never
    /// answers at all, so only a deadline of the client's own ends the
    /// wait. The connection whose statement was given up is closed rather
    /// than given back: its statement's answer may still be on its way, and
    /// sqlx, to give it back, would first wait for that (its test of a
    /// released connection), holding a place of the pool for as long as
    /// the database does not answer.
    async fn read_within<T>(
        &self,
        deadline: Duration,
        read: impl AsyncFnOnce(&mut AnyConnection) -> Result<T, sqlx::Error>,
    ) -> Result<T, StoreError> {
        let until = tokio::time::Instant::now() + deadline;
        let mut connection = tokio::time::timeout_at(until, self.read.acquire())
            .await
            .map_err(|_| StoreError::Unavailable(no_answer(deadline)))?
            .map_err(read_error)?;
        match tokio::time::timeout_at(until, read(&mut connection)).await {
            Ok(read) => read.map_err(read_error),
            Err(_) => {
                connection.close_on_drop();
                Err(StoreError::Unavailable(no_answer(deadline)))
            }
        }
    }
}

/// How long `/readyz`'s look at the database may take at most.
const PING_DEADLINE: Duration = Duration::from_secs(1);

/// What a statement or a connection attempt past its deadline is told as.
fn no_answer(deadline: Duration) -> String {
    format!("no answer within {} ms", deadline.as_millis())
}

/// A read's error: the database not there or not answering (see
/// [`writer::is_refusal`], and a pool that could not give a connection in
/// time) is [`StoreError::Unavailable`], the rest as it is.
fn read_error(error: sqlx::Error) -> StoreError {
    let error = StoreError::Database(error);
    let unavailable = matches!(
        error,
        StoreError::Database(sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed)
    ) || writer::is_refusal(&error);
    if unavailable {
        StoreError::Unavailable(error.to_string())
    } else {
        error
    }
}

/// The `run_end` event of a run the store itself ends (one a previous
/// process left running, a paused one cancelled or timed out), as stored.
pub(crate) fn run_end_body(
    run: &Run,
    sequence: i64,
    at: DateTime<Utc>,
    status: Outcome,
    error: Option<String>,
) -> Result<String, StoreError> {
    let event = crate::harness::Event {
        run_id: run.id,
        sequence: u64::try_from(sequence).unwrap_or(1),
        timestamp: at,
        kind: crate::harness::EventKind::RunEnd {
            status,
            steps: run.steps,
            tool_calls: run.tool_calls,
            usage: run.usage,
            answer: None,
            error,
            output: None,
        },
    };
    serde_json::to_string(&event)
        .map_err(|e| StoreError::Corrupt(format!("cannot serialise an event: {e}")))
}

/// Inserts for a new run, in the order the writer applies them.
pub(crate) struct NewRun<'a> {
    pub run: &'a Run,
    pub tenant: &'a Tenant,
    pub spec: &'a RunSpec,
    pub idempotency: Option<(&'a str, &'a str)>,
    /// The replica that executes it, when it is inserted `running` on
    /// PostgreSQL.
    pub owner: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement that runs for about a second: what a database that stopped
    /// answering looks like from here (SQLite's readers never wait on a
    /// lock, so a slow statement stands for one).
    const SLOW: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c \
                        WHERE x < 5000000) SELECT count(*) FROM c";

    /// A read that waits on the database past the deadline is given up, and
    /// its connection with it; the store goes on.
    #[tokio::test]
    async fn a_read_past_its_deadline_is_unavailable_and_the_store_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/runs.db", dir.path().display());
        let deadline = Duration::from_millis(200);
        let (store, _) = Store::open_with(
            &url,
            Duration::from_secs(1),
            Duration::from_secs(10),
            deadline,
        )
        .await
        .unwrap();
        let began = std::time::Instant::now();
        let read = store
            .read(async |connection| {
                sqlx::query_scalar::<_, i64>(SLOW)
                    .fetch_one(connection)
                    .await
            })
            .await;
        assert!(
            matches!(&read, Err(StoreError::Unavailable(why)) if why == "no answer within 200 ms"),
            "{read:?}"
        );
        assert!(began.elapsed() < deadline * 5, "{:?}", began.elapsed());
        // Other reads are answered meanwhile, on other connections.
        let read = store.get_run(&Tenant::anonymous(), Uuid::now_v7()).await;
        assert!(matches!(read, Ok(None)), "{read:?}");
        assert!(began.elapsed() < deadline * 5, "{:?}", began.elapsed());
        store.close().await;
    }
}
