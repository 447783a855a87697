//! Opening a database: which engine a URL names, SQLite's file and
//! pragmas, PostgreSQL's sessions, the migrations of each, and the keys the
//! server keeps in it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AnyConnection, AnyPool, ConnectOptions, Connection, Executor};

use super::lock::DatabaseLock;
use super::{StoreError, cluster, writer};

/// Connections of the read pool.
const READERS: u32 = 8;
/// Page cache of each reader, in KiB.
const READER_CACHE_KIB: u32 = 512;

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
/// its directory, if missing), and the lock this server holds it by (none
/// for an in-memory database). `deadline`: how long a reader may be waited
/// for (its statements are bounded by the store, see [`super::Store`]).
pub(super) async fn open_sqlite(
    url: &str,
    deadline: Duration,
) -> Result<(AnyConnection, AnyPool, Option<DatabaseLock>), StoreError> {
    let options = SqliteConnectOptions::from_str(url)?.create_if_missing(true);
    if let Some(dir) = options.get_filename().parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Database(e.into()))?;
    }
    // Taken before the file is opened: a second server touches nothing of
    // the first one's.
    let lock = match super::Store::database_file(url) {
        Some(file) => Some(DatabaseLock::take(&file)?),
        None => None,
    };
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
        .acquire_timeout(deadline)
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
    Ok((connection, read, lock))
}

/// The writer's connection and the read pool of a PostgreSQL database (which
/// must exist), migrated (sqlx holds an advisory lock while it migrates, so
/// replicas starting together migrate once), and how the writer opens its
/// connection again. Every session's statements are bounded by `deadline`
/// (`statement_timeout`), and so is every attempt to connect.
pub(super) async fn open_postgres(
    url: &str,
    lease: Duration,
    deadline: Duration,
) -> Result<(AnyConnection, AnyPool, writer::Reopen), StoreError> {
    let options = AnyConnectOptions::from_str(url)?.disable_statement_logging();
    let mut connection = connect_within(&options, deadline).await?;
    cluster::guard_session(&mut connection, lease).await?;
    // Migrations are not bounded: one that takes long (an index built on a
    // large table) must not fail a start, nor must waiting for another
    // replica that migrates. The writer's statements are, from then on.
    sqlx::migrate!("./migrations/postgres")
        .run(&mut connection)
        .await?;
    bound_statements(&mut connection, deadline).await?;
    let read = AnyPoolOptions::new()
        .max_connections(READERS)
        .min_connections(1)
        .acquire_timeout(deadline)
        .after_connect(move |connection, _| {
            Box::pin(async move { bound_statements(connection, deadline).await })
        })
        .connect_with(options.clone())
        .await?;
    let reopen: writer::Reopen = Arc::new(move || {
        let options = options.clone();
        Box::pin(async move {
            let mut connection = connect_within(&options, deadline).await?;
            cluster::guard_session(&mut connection, lease).await?;
            bound_statements(&mut connection, deadline).await?;
            Ok(connection)
        })
    });
    Ok((connection, read, reopen))
}

/// Opens a connection to a PostgreSQL server, giving up once `deadline` has
/// passed: a server that accepts connections but never answers (frozen, or
/// behind a partition) would otherwise be waited for forever.
async fn connect_within(
    options: &AnyConnectOptions,
    deadline: Duration,
) -> Result<AnyConnection, StoreError> {
    tokio::time::timeout(deadline, AnyConnection::connect_with(options))
        .await
        .map_err(|_| StoreError::Unavailable(super::no_answer(deadline)))?
        .map_err(StoreError::from)
}

/// Sets a PostgreSQL session's `statement_timeout` to `deadline`: the server
/// cancels a statement that runs longer (one waiting on a lock, say), and
/// the write it belonged to counts as refused. A server that does not run
/// at all cancels nothing, so the store bounds its waits itself as well.
pub(super) async fn bound_statements(
    connection: &mut AnyConnection,
    deadline: Duration,
) -> Result<(), sqlx::Error> {
    let ms = deadline.as_millis().max(1);
    connection
        .execute(format!("SET statement_timeout = {ms}").as_str())
        .await?;
    Ok(())
}

/// The name of the key that signs stream tokens.
pub(super) const STREAM_KEY: &str = "stream_tokens";

/// The server key `name`: made (32 random bytes) the first time, then read.
/// Replicas starting together agree: the first insert wins.
pub(super) async fn server_key(
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
