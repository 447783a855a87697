//! Starting the real server on a free port with a fresh data directory, and
//! talking to it over real HTTP.

use std::time::Duration;

use agent_runner::app::Application;
use agent_runner::config::Config;
use agent_runner::models::http::SseParser;
use futures_util::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

mod process;
pub use process::*;

pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    pub token: Option<String>,
    /// Holds the database and the workspaces; removed on drop.
    pub dir: TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

/// With this variable set to a PostgreSQL server's URL (its maintenance
/// database, e.g. `postgres://postgres@127.0.0.1:5432/postgres`), the
/// servers the tests start store in PostgreSQL: a database of its own for
/// each data directory. Unset: SQLite, a file in the data directory.
pub const POSTGRES_VARIABLE: &str = "AGENT_RUNNER_TEST_POSTGRES";

/// Fails a test of what only PostgreSQL has when the suite does not run on
/// PostgreSQL. Such a test is `#[ignore]`d, so that a run on SQLite reports
/// it as not run; this is for when it is asked for anyway
/// (`--include-ignored`) without a PostgreSQL to run on.
pub fn require_postgres() {
    assert!(
        std::env::var(POSTGRES_VARIABLE).is_ok(),
        "this test needs PostgreSQL: set {POSTGRES_VARIABLE} to a PostgreSQL server's URL \
         (see docs/testing.md), or leave out --include-ignored"
    );
}

/// The database of a test server whose data directory is `dir`: a SQLite
/// file in it, or (see [`POSTGRES_VARIABLE`]) a PostgreSQL database named
/// after it, created on first use, so that a restart on the same directory
/// finds the same database.
pub fn database_url(dir: &std::path::Path) -> String {
    let Ok(server) = std::env::var(POSTGRES_VARIABLE) else {
        return format!("sqlite://{}/runs.db", dir.display());
    };
    use sha2::Digest;
    let digest = sha2::Sha256::digest(dir.display().to_string().as_bytes());
    let name = format!("test_{}", hex::encode(&digest[..8]));
    let (base, _) = server
        .rsplit_once('/')
        .expect("a PostgreSQL URL ends with its database");
    let url = format!("{base}/{name}");
    let create = format!("CREATE DATABASE {name}");
    // On a thread of its own: the tests' runtimes are busy with the test.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            use sqlx::Connection;
            let mut connection = sqlx::PgConnection::connect(&server)
                .await
                .expect("the tests' PostgreSQL answers");
            match sqlx::Executor::execute(&mut connection, create.as_str()).await {
                Ok(_) => {}
                // 42P04: it exists (a restart on the same directory).
                Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("42P04") => {}
                Err(error) => panic!("cannot create a test database: {error}"),
            }
        });
    })
    .join()
    .unwrap();
    url
}

/// A config for a test server: port 0, storage in `dir`, short keep-alives.
pub fn test_config(dir: &TempDir) -> Config {
    let mut config = Config::default();
    config.server.bind = "127.0.0.1:0".parse().unwrap();
    config.server.sse_keep_alive_ms = Some(200);
    config.storage.database_url = database_url(dir.path());
    config.storage.workspaces_dir = dir.path().join("workspaces");
    config.runs.shutdown_grace_ms = 2_000;
    config.runs.lease_ms = TEST_LEASE_MS;
    config
}

/// The lease of the tests' servers (on PostgreSQL, how soon a killed one's
/// runs are taken over): short, with room for a busy machine's hiccups.
pub const TEST_LEASE_MS: u64 = 3_000;

pub async fn spawn_app() -> TestApp {
    spawn_with(|_| {}).await
}

pub async fn spawn_with(configure: impl FnOnce(&mut Config)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    configure(&mut config);
    spawn_in(dir, config).await
}

/// Starts a server on an existing data directory (to test restarts).
pub async fn spawn_in(dir: TempDir, config: Config) -> TestApp {
    let token = config.auth.tokens.first().and_then(|t| t.token.clone());
    let app = Application::build(config).await.expect("the server builds");
    let address = format!("http://{}", app.local_addr());
    let (shutdown, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    TestApp {
        address,
        client: http_client(),
        token,
        dir,
        shutdown: Some(shutdown),
        server: Some(server),
    }
}

/// An HTTP client for tests (loopback only, but reqwest wants a TLS
/// provider installed before any client is built).
/// A loopback port nothing listens on (just now).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    /// Asserts the JSON error shape and returns its code.
    /// A response, read whole.
    pub async fn of(response: reqwest::Response) -> Self {
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Self {
            status,
            headers,
            body,
            text,
        }
    }

    pub fn error_code(&self) -> &str {
        let error = &self.body["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "not the error shape: {}",
            self.text
        );
        error["code"].as_str().expect("an error code")
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, self.url(path));
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    pub async fn send(&self, builder: reqwest::RequestBuilder) -> Reply {
        Reply::of(builder.send().await.expect("the server answers")).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.request(Method::GET, path)).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send(self.request(Method::DELETE, path)).await
    }

    pub async fn post_run(&self, body: Value) -> Reply {
        self.send(self.request(Method::POST, "/v1/runs").json(&body))
            .await
    }

    /// Creates a run and returns its object (asserting 201).
    pub async fn create_run(&self, body: Value) -> Value {
        let reply = self.post_run(body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        reply.body
    }

    /// Creates a run with `?wait=true` and returns its final object.
    pub async fn run_to_end(&self, body: Value) -> Value {
        let reply = self
            .send(self.request(Method::POST, "/v1/runs?wait=true").json(&body))
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        assert!(
            !matches!(reply.body["status"].as_str(), Some("queued" | "running")),
            "{}",
            reply.text
        );
        reply.body
    }

    /// Polls a run until it leaves `queued`/`running`.
    pub async fn wait_terminal(&self, id: &str) -> Value {
        eventually(&format!("run {id} to end"), async || {
            let run = self.get(&format!("/v1/runs/{id}")).await.body;
            (!matches!(run["status"].as_str(), Some("queued" | "running"))).then_some(run)
        })
        .await
    }

    /// Polls a run until it has the given status.
    pub async fn wait_status(&self, id: &str, status: &str) -> Value {
        eventually(&format!("run {id} to reach {status}"), async || {
            let run = self.get(&format!("/v1/runs/{id}")).await.body;
            (run["status"] == status).then_some(run)
        })
        .await
    }

    /// Polls the list of runs until one has the given status, and returns
    /// the first listed (for a run whose id the test cannot know yet, one
    /// made with `?wait=true`).
    pub async fn wait_listed(&self, status: &str) -> Value {
        eventually(&format!("a run listed as {status}"), async || {
            let listed = self.get(&format!("/v1/runs?status={status}")).await.body;
            listed["runs"]
                .as_array()
                .and_then(|runs| runs.first())
                .cloned()
        })
        .await
    }

    /// Polls `/metrics` until it has every one of `lines` (whole sample
    /// lines, e.g. `agent_runner_active_runs 0`), and returns its text.
    pub async fn wait_metrics(&self, lines: &[&str]) -> String {
        eventually(&format!("/metrics to show {lines:?}"), async || {
            let text = self.get("/metrics").await.text;
            let has = |line: &&str| text.lines().any(|l| l == *line);
            lines.iter().all(has).then_some(text)
        })
        .await
    }

    pub async fn messages(&self, id: &str) -> Vec<Value> {
        let reply = self.get(&format!("/v1/runs/{id}/messages")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.body["messages"].as_array().unwrap().clone()
    }

    /// The text of the file `path` of the run `run`'s workspace.
    pub async fn workspace_file(&self, run: &Value, path: &str) -> String {
        let id = run["id"].as_str().unwrap();
        let reply = self.get(&format!("/v1/runs/{id}/workspace/{path}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.text
    }

    /// Reads a run's whole event stream, until the server closes it.
    pub async fn events(&self, id: &str) -> Vec<SseEvent> {
        self.events_from(id, None).await.0
    }

    /// Opens a run's event stream, to be read as far as the test asks.
    pub async fn follow(&self, id: &str) -> Following {
        let response = self
            .request(Method::GET, &format!("/v1/runs/{id}/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Following::new(response)
    }

    pub async fn events_from(
        &self,
        id: &str,
        last_event_id: Option<u64>,
    ) -> (Vec<SseEvent>, usize) {
        let mut request = self.request(Method::GET, &format!("/v1/runs/{id}/events"));
        if let Some(last) = last_event_id {
            request = request.header("Last-Event-ID", last.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        read_sse(response).await
    }

    /// Signals the server to stop, without waiting.
    pub fn begin_stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Stops the server the way SIGTERM does, and waits for it.
    pub async fn stop(mut self) -> TempDir {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.unwrap().unwrap();
        }
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// One event of a stream.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<u64>,
    pub event: String,
    pub data: Value,
}

/// Reads events until the stream ends; also counts keep-alive comments.
pub async fn read_sse(response: reqwest::Response) -> (Vec<SseEvent>, usize) {
    let mut following = Following::new(response);
    while following.next().await.is_some() {}
    let comments = following.parser.comments();
    (following.events, comments)
}

/// An event stream, read as far as asked: a test that must know its
/// follower is there before it acts reads the events stored so far first
/// (once one has come, the stream follows the run live).
pub struct Following {
    stream: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>,
    >,
    parser: SseParser,
    /// Parsed, not yet handed out by [`Following::next`].
    pending: std::collections::VecDeque<SseEvent>,
    /// Every event handed out so far, in order.
    pub events: Vec<SseEvent>,
}

impl Following {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            stream: Box::pin(response.bytes_stream()),
            parser: SseParser::new(),
            pending: std::collections::VecDeque::new(),
            events: Vec::new(),
        }
    }

    /// The next event, or `None` once the server closed the stream (30 s at
    /// most between two chunks: keep-alives come far more often).
    pub async fn next(&mut self) -> Option<SseEvent> {
        while self.pending.is_empty() {
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.stream.next())
                .await
                .expect("the stream goes on or ends")?;
            for event in self.parser.push_and_take(&chunk.unwrap()) {
                self.pending.push_back(SseEvent {
                    id: event.id.map(|id| id.parse().unwrap()),
                    event: event.event.unwrap_or_else(|| "message".into()),
                    data: serde_json::from_str(&event.data)
                        .unwrap_or_else(|e| panic!("bad event data {:?}: {e}", event.data)),
                });
            }
        }
        let event = self.pending.pop_front()?;
        self.events.push(event.clone());
        Some(event)
    }

    /// Reads until an event of type `kind`, and returns it.
    pub async fn until(&mut self, kind: &str) -> SseEvent {
        loop {
            match self.next().await {
                Some(event) if event.event == kind => return event,
                Some(_) => {}
                None => panic!("the stream ended before a {kind}: {:?}", self.events),
            }
        }
    }

    /// Reads the rest, until the server closes the stream, and returns
    /// every event read (from the first).
    pub async fn rest(mut self) -> Vec<SseEvent> {
        while self.next().await.is_some() {}
        self.events
    }
}

/// How long a test waits for what it waits for before it fails: far more
/// than anything takes on a busy machine, so that only what never comes
/// runs into it.
pub const WAIT_AT_MOST: Duration = Duration::from_secs(30);

/// Polls `check` until it gives a value, and returns it; fails the test,
/// naming what it waited for, once [`WAIT_AT_MOST`] has passed.
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT_AT_MOST;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited in vain for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "name": name, "arguments": arguments})
}

/// A scripted run: one tool call, then an answer.
pub fn two_step(tool: &str, arguments: Value, answer: &str) -> Value {
    json!({
        "prompt": "do it",
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("call-1", tool, arguments)]},
            {"content": answer, "usage": {"input_tokens": 12, "output_tokens": 3}}
        ]}
    })
}

/// Asserts that a run's stored events are numbered 1, 2, 3, ... with no gap.
pub fn assert_gap_free(events: &[SseEvent]) {
    let sequences: Vec<u64> = events.iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(
        sequences,
        (1..=sequences.len() as u64).collect::<Vec<_>>(),
        "no gap"
    );
}

pub fn types(events: &[SseEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event.as_str()).collect()
}
