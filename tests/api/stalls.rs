//! A database that stops answering (a storage stall): a PostgreSQL of the
//! test's own whose processes are stopped with SIGSTOP, which is what a
//! network partition looks like to its clients (connections stay open,
//! nothing comes back), or that holds its COMMITs. Ignored unless asked
//! for, like the other tests of what only PostgreSQL has (see `replicas`):
//! they need PostgreSQL's binaries, and run as root (to signal the server's
//! processes).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::{
    Remote, ServerProcess, assert_gap_free, call, eventually, read_sse, require_postgres,
    start_binary_with, types,
};

/// The statement deadline the server under test is given.
const DEADLINE: Duration = Duration::from_millis(1_000);
/// What an answer may take beyond the deadline it is bounded by, on a busy
/// machine.
const MARGIN: Duration = Duration::from_millis(1_000);

/// A PostgreSQL server of the test's own (the one the other tests share
/// must not be frozen under them), started in a temporary directory by
/// `tests/postgres/server.sh`; thawed and stopped when dropped.
struct Postgres {
    dir: TempDir,
    url: String,
}

impl Postgres {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let output = std::process::Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "PostgreSQL did not start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let url = String::from_utf8(output.stdout).unwrap().trim().to_owned();
        Self { dir, url }
    }

    /// The server's postmaster, from its pid file (none once it stopped).
    fn postmaster(&self) -> Option<u32> {
        let pid_file = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).ok()?;
        pid_file.lines().next()?.trim().parse().ok()
    }

    /// The postmaster's children: the backends serving the connections,
    /// and PostgreSQL's own workers.
    fn children(&self) -> Vec<u32> {
        let Some(postmaster) = self.postmaster() else {
            return Vec::new();
        };
        let Ok(processes) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        processes
            .filter_map(|entry| {
                let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // The parent is the second field after the command, which
                // ends at the last parenthesis.
                let (_, rest) = stat.rsplit_once(')')?;
                let parent: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
                (parent == postmaster).then_some(pid)
            })
            .collect()
    }

    /// Stops every process of the server: the postmaster first, so that it
    /// starts no new backend, then its children.
    fn freeze(&self) {
        let postmaster = self.postmaster().expect("the server runs");
        assert!(signal("STOP", &[postmaster]), "the postmaster stops");
        let children = self.children();
        assert!(!children.is_empty(), "the server has backends to stop");
        signal("STOP", &children);
    }

    /// Lets every process of the server go on.
    fn thaw(&self) {
        signal("CONT", &self.children());
        signal("CONT", &Vec::from_iter(self.postmaster()));
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.thaw();
        let _ = std::process::Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/postgres/server.sh")
}

/// Sends signal `name` to `pids`; whether every one of them got it (a
/// backend may end between its listing and its signal).
fn signal(name: &str, pids: &[u32]) -> bool {
    pids.is_empty()
        || std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .args(pids.iter().map(u32::to_string))
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
}

/// A GET's status, body and how long its answer took; a server that does
/// not answer within ten seconds fails the test.
async fn timed_get(server: &Remote, path: &str) -> (u16, Value, Duration) {
    let began = Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(10), server.get(path))
        .await
        .unwrap_or_else(|_| panic!("GET {path} was not answered within 10 s"));
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body, began.elapsed())
}

/// A run that completes at once.
fn quick(answer: &str) -> Value {
    json!({"prompt": "hi", "model": {"scripted": [{"content": answer}]}})
}

/// A run of `count` steps, a tool call each after `delay_ms`, then an
/// answer: one that writes all along.
fn steps(count: usize, delay_ms: u64) -> Value {
    let mut script: Vec<Value> = (0..count)
        .map(|i| {
            json!({"delay_ms": delay_ms, "content": "",
                   "tool_calls": [call(&format!("c{i}"), "list_dir", json!({}))]})
        })
        .collect();
    script.push(json!({"content": "done"}));
    json!({"prompt": "step by step", "model": {"scripted": script},
           "limits": {"max_steps": count + 1, "max_tool_calls": count}})
}

/// The server under test: the real binary, killed when dropped.
struct Server {
    child: ServerProcess,
    remote: Remote,
}

impl Server {
    /// Serves from `dir`, storing in `postgres`, with a statement deadline
    /// of [`DEADLINE`]. The lease is far longer than the stalls: a replica
    /// that cannot renew its lease gives it up, which is not what most of
    /// these tests are about; they measure how a stall itself is handled.
    fn start(dir: &TempDir, postgres: &Postgres) -> Self {
        Self::leased(dir, postgres, Duration::from_secs(60))
    }

    /// [`Self::start`], with a lease of `lease`.
    fn leased(dir: &TempDir, postgres: &Postgres, lease: Duration) -> Self {
        let deadline = DEADLINE.as_millis().to_string();
        let lease = lease.as_millis().to_string();
        let (child, address) = start_binary_with(
            dir,
            &[
                ("AGENT_RUNNER_STORAGE__DATABASE_URL", postgres.url.as_str()),
                (
                    "AGENT_RUNNER_STORAGE__STATEMENT_TIMEOUT_MS",
                    deadline.as_str(),
                ),
                ("AGENT_RUNNER_RUNS__LEASE_MS", lease.as_str()),
            ],
        );
        Self {
            child,
            remote: Remote::new(address),
        }
    }

    async fn post_run(&self, body: &Value) -> (u16, Value, Duration) {
        let began = Instant::now();
        let request = self
            .remote
            .client
            .post(format!("{}/v1/runs", self.remote.address))
            .json(body)
            .send();
        let response = tokio::time::timeout(Duration::from_secs(10), request)
            .await
            .expect("POST /v1/runs was not answered within 10 s")
            .unwrap();
        let status = response.status().as_u16();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body, began.elapsed())
    }

    /// Waits for `/readyz` to answer 200, and for a new run to be taken and
    /// to complete.
    async fn recovers(&self) {
        eventually("/readyz to be 200 again", async || {
            (timed_get(&self.remote, "/readyz").await.0 == 200).then_some(())
        })
        .await;
        let run = eventually("a new run to be taken", async || {
            match self.post_run(&quick("after")).await {
                (201, run, _) => Some(run),
                (503, ..) => None,
                (other, body, _) => panic!("POST /v1/runs answered {other}: {body}"),
            }
        })
        .await;
        let done = self
            .remote
            .wait_status(run["id"].as_str().unwrap(), "completed")
            .await;
        assert_eq!(done["answer"], "after");
    }
}

/// Waits until `/readyz` says storage refuses writes: a batch of the
/// writer was given up at its deadline, and is held.
async fn refusing(server: &Remote) {
    eventually("storage to refuse writes", async || {
        let (_, body, _) = timed_get(server, "/readyz").await;
        let message = body["error"]["message"].as_str().unwrap_or_default();
        message.contains("refused writes").then_some(())
    })
    .await;
}

/// Waits for run `id` to end, and checks that it completed with a
/// gap-free sequence of events that ends with its `run_end`: the events.
async fn completed(server: &Remote, id: &str) -> Vec<crate::helpers::SseEvent> {
    let ended = eventually("the run to end", async || {
        let run = server.get_json(&format!("/v1/runs/{id}")).await;
        let status = run["status"].as_str().unwrap_or_default();
        (status != "running" && status != "queued").then_some(run)
    })
    .await;
    assert_eq!(ended["status"], "completed", "{ended}");
    let events = read_sse(server.get(&format!("/v1/runs/{id}/events")).await)
        .await
        .0;
    assert_gap_free(&events);
    assert_eq!(types(&events).last(), Some(&"run_end"));
    events
}

/// Asserts that `path` is answered 503 `unavailable` within `bound`.
async fn unavailable_within(server: &Remote, path: &str, bound: Duration) {
    let (status, body, took) = timed_get(server, path).await;
    assert_eq!(status, 503, "GET {path}: {body}");
    assert_eq!(body["error"]["code"], "unavailable", "GET {path}: {body}");
    assert!(took < bound, "GET {path} took {took:?}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_stalled_database_is_answered_503_in_time_and_recovered_from() {
    require_postgres();
    let postgres = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir, &postgres);
    let remote = &server.remote;
    let run = remote.post_json("/v1/runs", &quick("before")).await;
    let id = run["id"].as_str().unwrap().to_owned();
    remote.wait_status(&id, "completed").await;
    assert_eq!(timed_get(remote, "/readyz").await.0, 200);

    // A stall while nothing is written: only the look at the database
    // tells /readyz, and reads find it.
    postgres.freeze();
    let stalled = Instant::now();
    unavailable_within(remote, "/readyz", Duration::from_secs(1) + MARGIN).await;
    unavailable_within(remote, &format!("/v1/runs/{id}"), DEADLINE + MARGIN).await;
    unavailable_within(remote, "/v1/runs", DEADLINE + MARGIN).await;
    // A new run's insert is given up at the deadline: storage refusing
    // writes, which nothing of the run outlives.
    let (status, body, took) = server.post_run(&quick("during")).await;
    assert_eq!(status, 503, "{body}");
    assert!(took < DEADLINE + MARGIN, "POST /v1/runs took {took:?}");
    unavailable_within(remote, "/readyz", Duration::from_secs(1) + MARGIN).await;
    assert!(
        stalled.elapsed() > DEADLINE,
        "the stall did not outlast the deadline"
    );
    postgres.thaw();
    server.recovers().await;
    let (status, body, _) = timed_get(remote, &format!("/v1/runs/{id}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "completed");

    // A stall while a run writes all along: its writes are held, and
    // stored once the database answers, none lost and none twice.
    let run = remote.post_json("/v1/runs", &steps(40, 100)).await;
    let busy = run["id"].as_str().unwrap().to_owned();
    remote.wait_status(&busy, "running").await;
    postgres.freeze();
    unavailable_within(remote, "/readyz", Duration::from_secs(1) + MARGIN).await;
    unavailable_within(remote, &format!("/v1/runs/{busy}"), DEADLINE + MARGIN).await;
    // The run's writes are refused, and held.
    refusing(remote).await;
    postgres.thaw();
    server.recovers().await;
    let events = completed(remote, &busy).await;
    let kinds = types(&events);
    assert_eq!(kinds.iter().filter(|kind| **kind == "tool_end").count(), 40);
    let ended = remote.get_json(&format!("/v1/runs/{busy}")).await;
    assert_eq!(ended["answer"], "done", "{ended}");
    assert_eq!(ended["tool_calls"], 40, "{ended}");
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server stopped"
    );
}

/// A stall longer than the lease while a run writes all along: the one
/// server gives its lease up (its run stopped, writing nothing more under
/// it), stays up, joins again once the database answers, and resumes the
/// run, which completes whole.
#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_stall_longer_than_the_lease_is_survived_and_the_run_resumed() {
    require_postgres();
    let postgres = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::leased(&dir, &postgres, Duration::from_millis(2_000));
    let remote = &server.remote;
    let run = remote.post_json("/v1/runs", &steps(30, 100)).await;
    let id = run["id"].as_str().unwrap().to_owned();
    eventually("its first steps to be stored", async || {
        let messages = remote.get_json(&format!("/v1/runs/{id}/messages")).await;
        (messages["messages"].as_array().unwrap().len() >= 5).then_some(())
    })
    .await;
    postgres.freeze();
    // Past five sixths of the lease unrenewed, it gives the lease up.
    eventually("the lease to be given up", async || {
        let (status, body, _) = timed_get(remote, "/readyz").await;
        let message = body["error"]["message"].as_str().unwrap_or_default();
        (status == 503 && message.contains("lost its lease")).then_some(())
    })
    .await;
    postgres.thaw();
    server.recovers().await;
    let events = completed(remote, &id).await;
    let done = remote.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(done["answer"], "done", "{done}");
    assert_eq!(done["resumes"], 1, "{done}");
    let kinds = types(&events);
    let resumed: Vec<_> = events.iter().filter(|e| e.event == "run_resumed").collect();
    assert_eq!(resumed.len(), 1, "{kinds:?}");
    assert_eq!(resumed[0].data["reason"], "lease_lost");
    assert_eq!(kinds.iter().filter(|k| **k == "run_start").count(), 1);
    assert_eq!(
        kinds.iter().filter(|k| **k == "tool_end").count(),
        done["tool_calls"].as_u64().unwrap() as usize,
        "{kinds:?}"
    );
    assert_eq!(done["tool_calls"], 30, "{done}");
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server stopped"
    );
}

/// Runs `statement` on `postgres` as its administrator.
async fn administer(postgres: &Postgres, statement: &str) {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&postgres.url).await.unwrap();
    sqlx::Executor::execute(&mut admin, statement)
        .await
        .unwrap();
}

/// Has `postgres` hold every COMMIT once it committed, waiting for a
/// synchronous standby that is not there (its statement_timeout does not
/// end that wait); returns once a commit of a new session is held.
async fn hold_commits(postgres: &Postgres) {
    administer(
        postgres,
        "ALTER SYSTEM SET synchronous_standby_names = 'nobody'",
    )
    .await;
    administer(postgres, "SELECT pg_reload_conf()").await;
    eventually("commits to be held", async || {
        use sqlx::Connection;
        let mut probe = sqlx::PgConnection::connect(&postgres.url).await.unwrap();
        // A transaction that writes (a table's catalog rows) waits.
        let commit = sqlx::query("CREATE TEMPORARY TABLE probe (x int)").execute(&mut probe);
        tokio::time::timeout(Duration::from_millis(300), commit)
            .await
            .is_err()
            .then_some(())
    })
    .await;
}

/// Lets the held commits, and the next ones, go through.
async fn release_commits(postgres: &Postgres) {
    administer(postgres, "ALTER SYSTEM RESET synchronous_standby_names").await;
    administer(postgres, "SELECT pg_reload_conf()").await;
}

/// COMMITs that PostgreSQL holds after they committed (it waits for a
/// synchronous standby that is not there) go past the writer's deadline:
/// the writer cannot tell whether they went through, holds what they
/// wrote, asks once the database answers, and finds they did. Nothing is
/// written twice or reported lost: a new run whose insert was among them is
/// answered 201 and goes on (answered 503, it would be a run its client
/// was told does not exist).
#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_commit_left_unanswered_is_neither_lost_nor_written_twice() {
    require_postgres();
    let postgres = Postgres::start();
    // The tests' server commits asynchronously; this database's sessions
    // do not, so that a synchronous standby is waited for once named.
    administer(
        &postgres,
        "ALTER DATABASE postgres SET synchronous_commit = on",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir, &postgres);
    let remote = &server.remote;

    // A new run's insert, alone in its batch.
    hold_commits(&postgres).await;
    let created = tokio::spawn({
        let remote = Remote::new(remote.address.clone());
        async move { remote.post_json("/v1/runs", &quick("held")).await }
    });
    refusing(remote).await;
    assert!(!created.is_finished(), "the insert is held, not answered");
    release_commits(&postgres).await;
    let created = created.await.unwrap();
    let held = created["id"]
        .as_str()
        .expect("the run was created")
        .to_owned();
    completed(remote, &held).await;

    // A run's events, written as it goes.
    let run = remote.post_json("/v1/runs", &steps(20, 100)).await;
    let busy = run["id"].as_str().unwrap().to_owned();
    remote.wait_status(&busy, "running").await;
    hold_commits(&postgres).await;
    refusing(remote).await;
    release_commits(&postgres).await;
    let events = completed(remote, &busy).await;
    let kinds = types(&events);
    assert_eq!(kinds.iter().filter(|kind| **kind == "tool_end").count(), 20);
    server.recovers().await;

    // No run was stored that its client was told was not.
    let listed = remote.get_json("/v1/runs?limit=100").await;
    let listed: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(listed.contains(&held.as_str()) && listed.contains(&busy.as_str()));
}
