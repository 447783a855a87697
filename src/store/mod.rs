//! Storage: SQLite or PostgreSQL through sqlx, the one place that knows the
//! schema.
//!
//! A run's writes go through a single writer connection that batches them
//! into transactions ([`writer`]); reads go through a separate pool. On
//! SQLite, with one writer there is never a lock to wait for, and WAL lets
//! the readers go on while it writes. On PostgreSQL several servers may
//! share the database ([`cluster`]): each has its writer, and what they
//! share (claims, leases, a paused run's answers) is decided under row
//! locks.
//!
//! The connections are sqlx's `Any` ones, and every statement is written in
//! `$N` placeholders, which SQLite and PostgreSQL both take (sqlx's SQLite
//! driver binds `$N` to the N-th argument): one set of statements for both
//! engines, with what differs between them kept to connecting, the
//! migrations and what counts as storage refusing writes.

pub mod cluster;
pub mod live;
pub(crate) mod rows;
pub mod writer;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AnyConnection, AnyPool};
use sqlx::{ConnectOptions, Connection, Executor, Row};
use uuid::Uuid;

use crate::harness::{Message, Outcome, PendingAction};
use crate::run::{ActionAnswer, ModelSpec, Run, RunSpec, RunStatus, Tenant, format_time};

pub use live::{Channels, Closing, LiveEvent};
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
    /// This replica's lease is gone: another replica took it for dead (see
    /// [`cluster`]), and it may write nothing more of its runs.
    #[error("this replica's lease is lost")]
    Fenced,
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
}

/// Which runs a listing shows.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub thread_id: Option<Uuid>,
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

/// Connections of the read pool.
const READERS: u32 = 8;
/// Page cache of each reader, in KiB.
const READER_CACHE_KIB: u32 = 512;

#[derive(Clone)]
pub struct Store {
    /// The key that signs stream tokens, the database's (so every replica
    /// of it takes every other's tokens).
    stream_key: Arc<[u8; 32]>,
    read: AnyPool,
    writer: Writer,
    channels: Arc<Channels>,
    /// On PostgreSQL: this replica among the database's.
    cluster: Option<Arc<cluster::Cluster>>,
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

    /// Opens the database at `url` (a SQLite file, created if needed, or a
    /// PostgreSQL database), applies the migrations, and starts the writer.
    /// A SQLite file has one server: the previous process's live runs are
    /// brought to rest (see [`recover`]). A PostgreSQL database may have
    /// several: this server joins them as a replica with a lease of
    /// `lease` (see [`cluster`]), and what a dead one left is taken over
    /// by the replicas' sweeps instead.
    /// `write_retry`: how long writes that storage refuses are still tried
    /// when the store closes (see [`writer`]).
    pub async fn open(
        url: &str,
        write_retry: Duration,
        lease: Duration,
    ) -> Result<(Self, Recovered), StoreError> {
        sqlx::any::install_default_drivers();
        let channels = Arc::new(Channels::default());
        let (store, recovered) = match Engine::of_url(url) {
            Some(Engine::Sqlite) => {
                let (mut connection, read) = open_sqlite(url).await?;
                let recovered = recover(&mut connection, Utc::now()).await?;
                let stream_key = server_key(&mut connection, STREAM_KEY).await?;
                let writer =
                    Writer::start(connection, None, None, write_retry, Arc::clone(&channels));
                let store = Self {
                    stream_key,
                    read,
                    writer,
                    channels,
                    cluster: None,
                };
                (store, recovered)
            }
            Some(Engine::Postgres) => {
                let (mut connection, read, reopen) = open_postgres(url, lease).await?;
                let stream_key = server_key(&mut connection, STREAM_KEY).await?;
                let cluster = Arc::new(cluster::Cluster::join(url, lease).await?);
                let writer = Writer::start(
                    connection,
                    Some(reopen),
                    Some(Arc::clone(&cluster)),
                    write_retry,
                    Arc::clone(&channels),
                );
                let store = Self {
                    stream_key,
                    read,
                    writer,
                    channels,
                    cluster: Some(cluster),
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
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }

    pub async fn get_run(&self, tenant: &Tenant, id: Uuid) -> Result<Option<Run>, StoreError> {
        let row = sqlx::query(rows::SELECT_RUN_BY_ID)
            .bind(id.to_string())
            .bind(&tenant.0)
            .fetch_optional(&self.read)
            .await?;
        row.map(|row| rows::run_from_row(&row)).transpose()
    }

    /// Runs newest first, after `cursor` (an id) when given, of one status
    /// or thread when given.
    pub async fn list_runs(
        &self,
        tenant: &Tenant,
        filter: RunFilter,
        cursor: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Run>, StoreError> {
        let statement = match (filter.status, filter.thread_id) {
            (None, None) => rows::SELECT_RUNS_PAGE,
            (Some(_), None) => rows::SELECT_RUNS_PAGE_BY_STATUS,
            (None, Some(_)) => rows::SELECT_RUNS_PAGE_BY_THREAD,
            (Some(_), Some(_)) => rows::SELECT_RUNS_PAGE_BY_STATUS_AND_THREAD,
        };
        let mut query = sqlx::query(statement)
            .bind(&tenant.0)
            .bind(cursor.map(|c| c.to_string()))
            .bind(i64::from(limit));
        if let Some(thread) = filter.thread_id {
            query = query.bind(thread.to_string());
        }
        if let Some(status) = filter.status {
            query = query.bind(status.as_str());
        }
        let rows = query.fetch_all(&self.read).await?;
        rows.iter().map(rows::run_from_row).collect()
    }

    /// The transcript's messages, each as its JSON text, in order.
    pub async fn messages(&self, run_id: Uuid) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT body FROM messages WHERE run_id = $1 ORDER BY position")
            .bind(run_id.to_string())
            .fetch_all(&self.read)
            .await?;
        Ok(rows.iter().map(|row| row.get::<String, _>(0)).collect())
    }

    /// Stored events with a sequence greater than `after`, in order.
    pub async fn events_after(
        &self,
        run_id: Uuid,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT sequence, type, body FROM events WHERE run_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3",
        )
        .bind(run_id.to_string())
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(StoredEvent {
                    sequence: u64::try_from(row.get::<i64, _>(0))
                        .map_err(|_| StoreError::Corrupt("negative event sequence".into()))?,
                    kind: row.get(1),
                    body: row.get(2),
                })
            })
            .collect()
    }

    /// A run's status, whoever's it is.
    pub async fn run_status(&self, id: Uuid) -> Result<Option<RunStatus>, StoreError> {
        let status: Option<String> = sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(&self.read)
            .await?;
        status
            .map(|text| {
                RunStatus::parse(&text)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown run status {text:?}")))
            })
            .transpose()
    }

    /// The transcript's messages, read back, in order.
    pub async fn transcript(&self, run_id: Uuid) -> Result<Vec<Arc<Message>>, StoreError> {
        self.messages(run_id)
            .await?
            .iter()
            .map(|text| {
                serde_json::from_str::<Message>(text)
                    .map(Arc::new)
                    .map_err(|e| StoreError::Corrupt(format!("a message of run {run_id}: {e}")))
            })
            .collect()
    }

    /// Where an answered pause stands, to resume it: its transcript, its
    /// last event, its running time, what it waited on and the answers.
    pub async fn paused(&self, id: Uuid) -> Result<StoredPause, StoreError> {
        let row = sqlx::query(
            "SELECT pending_actions, answers, running_ms, \
             (SELECT COALESCE(MAX(sequence), 0) FROM events WHERE run_id = runs.id) AS last \
             FROM runs WHERE id = $1",
        )
        .bind(id.to_string())
        .fetch_optional(&self.read)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("run {id} vanished")))?;
        let messages = self.transcript(id).await?;
        let count = |column: &str| {
            u64::try_from(row.get::<i64, _>(column))
                .map_err(|_| StoreError::Corrupt(format!("{column} out of range")))
        };
        Ok(StoredPause {
            messages,
            last_sequence: count("last")?,
            running: Duration::from_millis(count("running_ms")?),
            pending: rows::json(&row, "pending_actions")?,
            answers: rows::json(&row, "answers")?,
        })
    }

    /// Paused runs by their deadline, soonest first.
    pub async fn pause_deadlines(
        &self,
        limit: u32,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, action_deadline FROM runs WHERE status = 'requires_action' \
             AND action_deadline IS NOT NULL ORDER BY action_deadline LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?;
        // A row that does not parse is logged and passed over, never in the
        // way of the others' deadlines.
        Ok(rows
            .iter()
            .filter_map(|row| {
                let id = row.get::<String, _>(0);
                let at = row.get::<String, _>(1);
                match (rows::parse_uuid(&id), rows::time(&at)) {
                    (Ok(id), Ok(at)) => Some((id, at)),
                    _ => {
                        tracing::error!(run_id = %id, deadline = %at, "a paused run's deadline is unreadable");
                        None
                    }
                }
            })
            .collect())
    }

    pub async fn find_idempotent(
        &self,
        tenant: &Tenant,
        key: &str,
    ) -> Result<Option<IdempotentRun>, StoreError> {
        let row = sqlx::query(rows::SELECT_RUN_BY_IDEMPOTENCY_KEY)
            .bind(&tenant.0)
            .bind(key)
            .fetch_optional(&self.read)
            .await?;
        row.map(|row| {
            Ok(IdempotentRun {
                run: rows::run_from_row(&row)?,
                request_hash: row
                    .get::<Option<String>, _>("request_hash")
                    .unwrap_or_default(),
            })
        })
        .transpose()
    }
}

/// The database engines a `database_url` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    /// The engine of `url`'s scheme: `sqlite:`, or `postgres:` /
    /// `postgresql:`.
    pub fn of_url(url: &str) -> Option<Self> {
        match url.split_once(':').map(|(scheme, _)| scheme) {
            Some("sqlite") => Some(Self::Sqlite),
            Some("postgres" | "postgresql") => Some(Self::Postgres),
            _ => None,
        }
    }

    /// The engine a connection of sqlx's `Any` driver speaks to.
    pub(crate) fn of_connection(connection: &AnyConnection) -> Self {
        match connection.backend_name() {
            "PostgreSQL" => Self::Postgres,
            _ => Self::Sqlite,
        }
    }
}

/// The writer's connection and the read pool of a SQLite file (created, with
/// its directory, if missing).
async fn open_sqlite(url: &str) -> Result<(AnyConnection, AnyPool), StoreError> {
    let options = SqliteConnectOptions::from_str(url)?.create_if_missing(true);
    if let Some(dir) = options.get_filename().parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Database(e.into()))?;
    }
    // Through sqlx's `Any` driver, which takes a URL: the settings a URL
    // cannot carry are set on each connection.
    let any = |options: &SqliteConnectOptions| {
        AnyConnectOptions::from_url(&options.to_url_lossy())
            .map(ConnectOptions::disable_statement_logging)
    };
    let mut connection = AnyConnection::connect_with(&any(&options)?).await?;
    for pragma in [
        "PRAGMA journal_mode = WAL",
        "PRAGMA synchronous = NORMAL",
        "PRAGMA foreign_keys = ON",
        "PRAGMA busy_timeout = 10000",
    ] {
        connection.execute(pragma).await?;
    }
    sqlx::migrate!("./migrations/sqlite")
        .run(&mut connection)
        .await?;
    // Readers keep a small page cache: in WAL mode a reader's cache is
    // dropped whenever the writer commits, which under load is all the
    // time, so a large one mostly holds memory (2 MiB each by default).
    let read = AnyPoolOptions::new()
        .max_connections(READERS)
        .min_connections(1)
        .after_connect(|connection, _| {
            Box::pin(async move {
                connection
                    .execute(
                        format!(
                            "PRAGMA cache_size = -{READER_CACHE_KIB}; PRAGMA busy_timeout = 10000"
                        )
                        .as_str(),
                    )
                    .await?;
                Ok(())
            })
        })
        // Not creating: a URL's mode would then be `rwc`, not `ro`.
        .connect_with(any(&options.create_if_missing(false).read_only(true))?)
        .await?;
    Ok((connection, read))
}

/// The writer's connection and the read pool of a PostgreSQL database (which
/// must exist), migrated (sqlx holds an advisory lock while it migrates, so
/// replicas starting together migrate once), and how the writer opens its
/// connection again.
async fn open_postgres(
    url: &str,
    lease: Duration,
) -> Result<(AnyConnection, AnyPool, writer::Reopen), StoreError> {
    let options = AnyConnectOptions::from_str(url)?.disable_statement_logging();
    let mut connection = AnyConnection::connect_with(&options).await?;
    cluster::guard_session(&mut connection, lease).await?;
    sqlx::migrate!("./migrations/postgres")
        .run(&mut connection)
        .await?;
    let read = AnyPoolOptions::new()
        .max_connections(READERS)
        .min_connections(1)
        .connect_with(options.clone())
        .await?;
    let reopen: writer::Reopen = Arc::new(move || {
        let options = options.clone();
        Box::pin(async move {
            let mut connection = AnyConnection::connect_with(&options).await?;
            cluster::guard_session(&mut connection, lease).await?;
            Ok(connection)
        })
    });
    Ok((connection, read, reopen))
}

/// The name of the key that signs stream tokens.
const STREAM_KEY: &str = "stream_tokens";

/// The server key `name`: made (32 random bytes) the first time, then read.
/// Replicas starting together agree: the first insert wins.
async fn server_key(
    connection: &mut AnyConnection,
    name: &str,
) -> Result<Arc<[u8; 32]>, StoreError> {
    let mut fresh = [0u8; 32];
    getrandom::fill(&mut fresh)
        .map_err(|e| StoreError::Corrupt(format!("no randomness for a server key: {e}")))?;
    sqlx::query(
        "INSERT INTO server_keys (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .bind(hex::encode(fresh))
    .execute(&mut *connection)
    .await?;
    let stored: String = sqlx::query_scalar("SELECT value FROM server_keys WHERE name = $1")
        .bind(name)
        .fetch_one(&mut *connection)
        .await?;
    let key: [u8; 32] = hex::decode(&stored)
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("the server key {name:?} is malformed")))?;
    Ok(Arc::new(key))
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

/// What [`recover`] found.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Runs that were running: now `interrupted`.
    pub interrupted: Vec<Uuid>,
    /// Runs that were waiting, oldest first: to be started again.
    pub queued: Vec<Unfinished>,
}

/// Ends a running run whose server is gone `interrupted`: a `run_end` after
/// its last event, its final state (its pause, if it resumed from one, is
/// over too).
async fn interrupt(
    connection: &mut AnyConnection,
    run: &Run,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let sequence: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(sequence), 0) + 1 FROM events WHERE run_id = $1")
            .bind(run.id.to_string())
            .fetch_one(&mut *connection)
            .await?;
    let error = crate::run::INTERRUPTED.to_owned();
    let body = run_end_body(
        run,
        sequence,
        now,
        Outcome::Interrupted,
        Some(error.clone()),
    )?;
    sqlx::query("INSERT INTO events (run_id, sequence, type, body) VALUES ($1, $2, 'run_end', $3)")
        .bind(run.id.to_string())
        .bind(sequence)
        .bind(body)
        .execute(&mut *connection)
        .await?;
    sqlx::query(
        "UPDATE runs SET status = $1, error = $2, finished_at = $3, owner = NULL, \
         pending_actions = '[]', answers = '{}', action_deadline = NULL WHERE id = $4",
    )
    .bind(Outcome::Interrupted.as_str())
    .bind(&error)
    .bind(format_time(&now))
    .bind(run.id.to_string())
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Brings the previous process's live runs to rest: `running` ones become
/// `interrupted` with a `run_end` event after their last one; `queued` ones
/// are returned, oldest first, to be started (or resumed) again. Paused runs
/// stay paused: they hold nothing but their row.
async fn recover(
    connection: &mut AnyConnection,
    now: DateTime<Utc>,
) -> Result<Recovered, StoreError> {
    let mut tx = connection.begin().await?;
    let running = sqlx::query(rows::SELECT_LIVE_RUNS)
        .bind(RunStatus::Running.as_str())
        .fetch_all(&mut *tx)
        .await?;
    let mut interrupted = Vec::new();
    for row in &running {
        let run = rows::run_from_row(row)?;
        interrupt(&mut tx, &run, now).await?;
        interrupted.push(run.id);
    }
    let queued = sqlx::query(rows::SELECT_LIVE_RUNS)
        .bind(RunStatus::Queued.as_str())
        .fetch_all(&mut *tx)
        .await?;
    let queued = queued
        .iter()
        .map(rows::unfinished_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    tx.commit().await?;
    Ok(Recovered {
        interrupted,
        queued,
    })
}
