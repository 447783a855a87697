//! Several replicas on one PostgreSQL database: real server processes, one
//! database, one workspaces directory. Ignored unless asked for: they run
//! with `--include-ignored` when the suite runs on PostgreSQL
//! (`AGENT_RUNNER_TEST_POSTGRES`, as `.ci/run` does), and fail, rather than
//! pass without running, when asked for on SQLite.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use sqlx::Connection;
use tempfile::TempDir;

use crate::helpers::{
    Remote, ServerProcess, TEST_LEASE_MS, assert_gap_free, call, database_url, read_sse,
    require_postgres, start_binary_with, terminate, types,
};
use crate::statuses::Statuses;

/// A replica: the real binary on the shared data directory, killed when
/// dropped.
pub(crate) struct Replica {
    pub(crate) child: ServerProcess,
    pub(crate) server: Remote,
}

impl Replica {
    pub(crate) fn start(dir: &TempDir, settings: &[(&str, &str)]) -> Self {
        let (child, address) = start_binary_with(dir, settings);
        Self {
            child,
            server: Remote::new(address),
        }
    }

    pub(crate) fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.server
            .client
            .post(format!("{}{path}", self.server.address))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn delete(&self, path: &str) -> reqwest::Response {
        self.server
            .client
            .delete(format!("{}{path}", self.server.address))
            .send()
            .await
            .unwrap()
    }

    async fn events(&self, id: &str) -> Vec<crate::helpers::SseEvent> {
        read_sse(self.server.get(&format!("/v1/runs/{id}/events")).await)
            .await
            .0
    }
}

/// A connection of the test's own to the replicas' database.
async fn database(dir: &TempDir) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(&database_url(dir.path()))
        .await
        .unwrap()
}

/// The ids of the replicas the database knows, oldest first.
async fn replica_ids(dir: &TempDir) -> Vec<String> {
    sqlx::query_scalar("SELECT id FROM replicas ORDER BY started_at, id")
        .fetch_all(&mut database(dir).await)
        .await
        .unwrap()
}

fn waits(ms: u64, answer: &str) -> Value {
    json!({"prompt": "wait", "model": {"scripted": [{"delay_ms": ms, "content": answer}]}})
}

/// `body` with resumes off: a run whose replica dies ends `interrupted`.
fn unresumable(mut body: Value) -> Value {
    body["limits"] = json!({"max_resumes": 0});
    body
}

/// A run of a few steps, each a tool call after a pause.
fn steps(count: usize, delay_ms: u64) -> Value {
    let mut script: Vec<Value> = (0..count)
        .map(|i| {
            json!({"delay_ms": delay_ms, "content": "",
                   "tool_calls": [call(&format!("c{i}"), "list_dir", json!({}))]})
        })
        .collect();
    script.push(json!({"content": "done"}));
    json!({"prompt": "step by step", "model": {"scripted": script}})
}

/// Frees `replica`'s one slot (cancels `busy`), then checks that `queued`
/// starts there and completes with `answer`, started once.
async fn frees_and_runs_once(replica: &Replica, busy: &str, queued: &str, answer: &str) {
    assert_eq!(
        replica.delete(&format!("/v1/runs/{busy}")).await.status(),
        202
    );
    let done = replica.server.wait_status(queued, "completed").await;
    assert_eq!(done["answer"], answer);
    let kinds = types(&replica.events(queued).await).join(",");
    assert_eq!(kinds.matches("run_start").count(), 1, "{kinds}");
}

/// Two replicas with one slot each, the second one busy with a long run:
/// the replicas and that run's id.
async fn two_with_one_busy(dir: &TempDir) -> (Replica, Replica, String) {
    let one = [("AGENT_RUNNER_RUNS__MAX_CONCURRENT", "1")];
    let a = Replica::start(dir, &one);
    let b = Replica::start(dir, &one);
    let busy = id_of(&b.server.post_json("/v1/runs", &waits(60_000, "b")).await);
    b.server.wait_status(&busy, "running").await;
    (a, b, busy)
}

fn id_of(run: &Value) -> String {
    run["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_run_made_on_one_replica_is_followed_live_on_another() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let a = Replica::start(&dir, &[]);
    let b = Replica::start(&dir, &[]);
    let mut statuses = Statuses::open(b.server.get("/v1/runs/events").await).await;
    let run = a.server.post_json("/v1/runs", &steps(4, 150)).await;
    let id = id_of(&run);
    // Followed on the other replica from its start: every event, in order,
    // while the run goes on (its first event comes before its end).
    let response = b.server.get(&format!("/v1/runs/{id}/events")).await;
    let mut stream = Box::pin(response.bytes_stream());
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event comes while the run goes on")
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("run_start"));
    let during = a.server.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(during["status"], "running", "followed live, not replayed");
    drop(stream);
    let events = b.events(&id).await;
    assert_gap_free(&events);
    assert_eq!(events.last().unwrap().data["status"], "completed");
    // Its changes of status too, wherever it ran.
    let seen = statuses
        .until(|seen| {
            seen.get(&id)
                .is_some_and(|s| s.last().is_some_and(|s| s == "completed"))
        })
        .await;
    let changes = &seen[&id];
    assert!(
        *changes == ["running", "completed"] || *changes == ["queued", "running", "completed"],
        "{changes:?}"
    );
    // Resumed on the other replica from a point in the middle.
    let resumed = read_sse(
        a.server
            .client
            .get(format!("{}/v1/runs/{id}/events", a.server.address))
            .header("Last-Event-ID", "3")
            .send()
            .await
            .unwrap(),
    )
    .await
    .0;
    assert_eq!(resumed.first().unwrap().id, Some(4));
    assert_eq!(resumed, events[3..]);
    // `?wait=true` on one replica of a run that another may execute.
    let waited = b
        .server
        .post_json("/v1/runs?wait=true", &steps(2, 50))
        .await;
    assert_eq!(waited["status"], "completed", "{waited}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_cancel_on_one_replica_reaches_the_run_wherever_it_is() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let one = [("AGENT_RUNNER_RUNS__MAX_CONCURRENT", "1")];
    let a = Replica::start(&dir, &one);
    let b = Replica::start(&dir, &one);
    // Running on A, cancelled on B.
    let running = a
        .server
        .post_json("/v1/runs", &waits(60_000, "never"))
        .await;
    let running = id_of(&running);
    a.server.wait_status(&running, "running").await;
    let reply = b.delete(&format!("/v1/runs/{running}")).await;
    assert_eq!(reply.status(), 202);
    let ended = b.server.wait_status(&running, "aborted").await;
    assert!(ended["finished_at"].is_string());
    let events = b.events(&running).await;
    assert_gap_free(&events);
    assert_eq!(events.last().unwrap().event, "run_end");
    // Both slots taken: a third run waits in the database, and a cancel on
    // either replica ends it there.
    let first = id_of(&a.server.post_json("/v1/runs", &waits(60_000, "a")).await);
    let second = id_of(&b.server.post_json("/v1/runs", &waits(60_000, "b")).await);
    a.server.wait_status(&first, "running").await;
    b.server.wait_status(&second, "running").await;
    let queued = a.server.post_json("/v1/runs", &waits(10, "q")).await;
    assert_eq!(queued["status"], "queued", "{queued}");
    let queued = id_of(&queued);
    let reply = b.delete(&format!("/v1/runs/{queued}")).await;
    assert_eq!(reply.status(), 202);
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["status"], "aborted");
    assert_eq!(
        types(&a.events(&queued).await),
        ["run_end"],
        "it never started"
    );
    for id in [&first, &second] {
        assert_eq!(b.delete(&format!("/v1/runs/{id}")).await.status(), 202);
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_pause_answered_on_another_replica_resumes() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let a = Replica::start(&dir, &[]);
    let b = Replica::start(&dir, &[]);
    let run = a
        .server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "ask first",
                "approval": {"tools": ["list_dir"]},
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("l1", "list_dir", json!({}))]},
                    {"content": "resumed"}
                ]}
            }),
        )
        .await;
    let id = id_of(&run);
    // Followed on A while it is answered on B.
    let follower = {
        let server = Remote::new(a.server.address.clone());
        let id = id.clone();
        tokio::spawn(async move {
            read_sse(server.get(&format!("/v1/runs/{id}/events")).await)
                .await
                .0
        })
    };
    b.server.wait_status(&id, "requires_action").await;
    let answered = b
        .server
        .post_json(
            &format!("/v1/runs/{id}/actions"),
            &json!({"actions": [{"call_id": "l1", "decision": "approve"}]}),
        )
        .await;
    assert_eq!(answered["status"], "queued", "{answered}");
    let done = a.server.wait_status(&id, "completed").await;
    assert_eq!(done["answer"], "resumed");
    let followed = follower.await.unwrap();
    assert_gap_free(&followed);
    let kinds = types(&followed);
    assert_eq!(kinds.first(), Some(&"run_start"));
    assert!(kinds.contains(&"actions_required"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_end"));
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_rolling_restart_of_two_replicas_under_twenty_runs_fails_none() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    // A short grace: runs outlast it and are handed over.
    let settings = [("AGENT_RUNNER_RUNS__SHUTDOWN_GRACE_MS", "100")];
    let mut a = Replica::start(&dir, &settings);
    let mut b = Replica::start(&dir, &settings);
    let mut ids = Vec::new();
    for i in 0..20 {
        let replica = if i % 2 == 0 { &a } else { &b };
        ids.push(id_of(
            &replica.server.post_json("/v1/runs", &steps(4, 150)).await,
        ));
    }
    // One after the other: each stops gracefully (its runs handed over to
    // the other at once), then starts again.
    let status = crate::helpers::terminate(&mut a.child);
    assert!(status.success(), "{status:?}");
    a = Replica::start(&dir, &settings);
    let status = crate::helpers::terminate(&mut b.child);
    assert!(status.success(), "{status:?}");
    b = Replica::start(&dir, &settings);
    let mut handed = 0;
    for id in &ids {
        let done = crate::helpers::eventually("the run to complete", async || {
            let run = a.server.get_json(&format!("/v1/runs/{id}")).await;
            let status = run["status"].as_str().unwrap_or_default().to_owned();
            assert!(
                !matches!(
                    status.as_str(),
                    "failed" | "interrupted" | "aborted" | "timeout"
                ),
                "run {id} ended {status}: {run}"
            );
            (status == "completed").then_some(run)
        })
        .await;
        assert_eq!(done["answer"], "done");
        handed += usize::from(done["resumes"].as_u64().unwrap_or(0) > 0);
        let events = b.events(id).await;
        assert_gap_free(&events);
        assert_eq!(types(&events).last(), Some(&"run_end"));
    }
    eprintln!("rolling restart: {handed} of 20 runs were handed over");
    assert!(handed > 0, "the stops handed runs over");
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_killed_replica_s_running_run_is_resumed_by_another_and_completes() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let mut a = Replica::start(&dir, &[]);
    let b = Replica::start(&dir, &[]);
    // Posted to A, which has a free slot: it executes there.
    let run = id_of(&a.server.post_json("/v1/runs", &steps(3, 400)).await);
    crate::helpers::eventually("its first step to be stored", async || {
        let messages = a.server.get_json(&format!("/v1/runs/{run}/messages")).await;
        (messages["messages"].as_array().unwrap().len() >= 3).then_some(())
    })
    .await;
    a.kill();
    let done = b.server.wait_status(&run, "completed").await;
    assert_eq!(done["answer"], "done");
    assert_eq!(done["resumes"], 1);
    assert_eq!(done["steps"], 4);
    let events = b.events(&run).await;
    assert_gap_free(&events);
    let kinds = types(&events);
    assert_eq!(kinds.iter().filter(|k| **k == "run_start").count(), 1);
    let resumed: Vec<_> = events.iter().filter(|e| e.event == "run_resumed").collect();
    assert_eq!(resumed.len(), 1, "{kinds:?}");
    assert_eq!(resumed[0].data["reason"], "lease_lost");
    assert_eq!(kinds.last(), Some(&"run_end"));
    let messages = b.server.get_json(&format!("/v1/runs/{run}/messages")).await;
    let messages = messages["messages"].as_array().unwrap();
    let calls = messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .count();
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    assert_eq!(calls, results, "every call has one result: {messages:?}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_killed_replica_s_runs_are_taken_over_within_two_leases() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    // B is busy; A runs one run and a third waits.
    let (mut a, b, busy) = two_with_one_busy(&dir).await;
    // Resumes off: it ends `interrupted` (the resume is tested below).
    let running = id_of(
        &a.server
            .post_json("/v1/runs", &unresumable(steps(1, 60_000)))
            .await,
    );
    a.server.wait_status(&running, "running").await;
    let queued = a.server.post_json("/v1/runs", &steps(2, 10)).await;
    assert_eq!(queued["status"], "queued", "{queued}");
    let queued = id_of(&queued);
    // Followed on B, the survivor, which then takes the run over.
    let follower = {
        let server = Remote::new(b.server.address.clone());
        let id = running.clone();
        tokio::spawn(async move {
            read_sse(server.get(&format!("/v1/runs/{id}/events")).await)
                .await
                .0
        })
    };
    let mut statuses = Statuses::open(b.server.get("/v1/runs/events").await).await;
    a.kill();
    let killed = Instant::now();
    let interrupted = b.server.wait_status(&running, "interrupted").await;
    let took = killed.elapsed();
    eprintln!(
        "takeover: {} ms after SIGKILL (lease {TEST_LEASE_MS} ms)",
        took.as_millis()
    );
    assert_eq!(
        interrupted["error"],
        "The server stopped while the run was running"
    );
    let events = b.events(&running).await;
    assert_gap_free(&events);
    assert_eq!(events.last().unwrap().data["status"], "interrupted");
    let followed = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .expect("the follower hears of the end");
    assert_eq!(followed.unwrap(), events, "the follower saw the end");
    // The queued one starts once B has a slot, once.
    frees_and_runs_once(&b, &busy, &queued, "done").await;
    // B's stream told of the takeover it committed, and of the claim.
    let seen = statuses
        .until(|seen| {
            seen.get(&queued)
                .is_some_and(|s| s.last().is_some_and(|s| s == "completed"))
        })
        .await;
    assert_eq!(seen[&running], ["interrupted"]);
    assert_eq!(seen[&queued], ["running", "completed"]);
    assert_eq!(
        replica_ids(&dir).await.len(),
        1,
        "the dead one's row is gone"
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_replica_killed_in_the_middle_of_a_claim_leaves_the_run_to_the_others() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let (mut a, b, busy) = two_with_one_busy(&dir).await;
    let ids = replica_ids(&dir).await;
    assert_eq!(ids.len(), 2);
    // The test holds A's row: A's next claim waits on it, mid-transaction.
    let mut holder = database(&dir).await;
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM replicas WHERE id = $1 FOR UPDATE")
        .bind(&ids[0])
        .execute(&mut holder)
        .await
        .unwrap();
    // Queued on B (busy); A, with its free slot, is told and claims.
    let queued = b
        .server
        .post_json("/v1/runs", &waits(10, "claimed once"))
        .await;
    assert_eq!(queued["status"], "queued", "{queued}");
    let queued = id_of(&queued);
    let mut watcher = database(&dir).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%FROM replicas WHERE id = $1 FOR KEY SHARE%'",
        )
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "A never began its claim");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.kill();
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    // The run is B's to start once B has a slot; it runs once.
    frees_and_runs_once(&b, &busy, &queued, "claimed once").await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_thousand_runs_over_three_replicas_each_run_once() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let settings = [
        ("AGENT_RUNNER_RUNS__MAX_CONCURRENT", "4"),
        ("AGENT_RUNNER_RUNS__MAX_QUEUED", "2000"),
    ];
    let replicas: Vec<Replica> = (0..3).map(|_| Replica::start(&dir, &settings)).collect();
    let body = json!({"prompt": "one step", "model": {"scripted": [
        {"content": "", "tool_calls": [call("c1", "list_dir", json!({}))]},
        {"content": "done"}
    ]}});
    let created = futures_util::stream::iter(0..1000)
        .map(|i| {
            let replica = &replicas[i % 3];
            let body = &body;
            async move {
                let reply = replica.post("/v1/runs", body).await;
                let status = reply.status();
                let run: Value = reply.json().await.unwrap();
                assert_eq!(status, 201, "{run}");
                id_of(&run)
            }
        })
        .buffer_unordered(48)
        .collect::<Vec<_>>()
        .await;
    assert_eq!(created.len(), 1000);
    let mut db = database(&dir).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let live: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running')")
                .fetch_one(&mut db)
                .await
                .unwrap();
        if live == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{live} runs never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let completed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE status = 'completed'")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(completed, 1000);
    let starts: Vec<(String, i64)> = sqlx::query_as(
        "SELECT runs.id, (SELECT COUNT(*) FROM events \
         WHERE events.run_id = runs.id AND events.type = 'run_start') FROM runs",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert_eq!(starts.len(), 1000);
    let twice: Vec<_> = starts.iter().filter(|(_, n)| *n != 1).collect();
    assert!(twice.is_empty(), "runs not started exactly once: {twice:?}");
    let owners: Vec<(Option<String>, i64)> =
        sqlx::query_as("SELECT owner, COUNT(*) FROM runs GROUP BY owner ORDER BY owner")
            .fetch_all(&mut db)
            .await
            .unwrap();
    assert_eq!(owners.len(), 3, "every replica executed some: {owners:?}");
    for mut replica in replicas {
        let status = terminate(&mut replica.child);
        assert!(status.success(), "{status:?}");
    }
    assert!(
        replica_ids(&dir).await.is_empty(),
        "each left on its way out"
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn the_queue_s_bound_and_idempotency_keys_hold_across_replicas() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let settings = [
        ("AGENT_RUNNER_RUNS__MAX_CONCURRENT", "1"),
        ("AGENT_RUNNER_RUNS__MAX_QUEUED", "1"),
    ];
    let a = Replica::start(&dir, &settings);
    let b = Replica::start(&dir, &settings);
    // One key, sent to both at once: one run.
    let keyed = |replica: &Replica| {
        replica
            .server
            .client
            .post(format!("{}/v1/runs", replica.server.address))
            .header("Idempotency-Key", "same-key")
            .json(&waits(60_000, "keyed"))
            .send()
    };
    let (first, second) = tokio::join!(keyed(&a), keyed(&b));
    let (first, second) = (first.unwrap(), second.unwrap());
    let mut statuses = [first.status().as_u16(), second.status().as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 201]);
    let first: Value = first.json().await.unwrap();
    let second: Value = second.json().await.unwrap();
    assert_eq!(first["id"], second["id"]);
    let keyed = id_of(&first);
    // The keyed run takes a slot; the other replica's slot, then the one
    // place in the database's queue; then both replicas refuse.
    let other = id_of(&b.server.post_json("/v1/runs", &waits(60_000, "b")).await);
    // Both slots taken (the second run may have waited for the other
    // replica's claimer, had the keyed one gone to this one).
    for id in [&keyed, &other] {
        a.server.wait_status(id, "running").await;
    }
    let waiting = a.server.post_json("/v1/runs", &waits(60_000, "q")).await;
    assert_eq!(waiting["status"], "queued", "{waiting}");
    for replica in [&a, &b] {
        let refused = replica.post("/v1/runs", &waits(10, "no room")).await;
        assert_eq!(refused.status(), 429);
    }
    for id in [keyed, other, id_of(&waiting)] {
        assert_eq!(a.delete(&format!("/v1/runs/{id}")).await.status(), 202);
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_replica_whose_lease_was_taken_stops_its_runs_and_joins_again() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let mut a = Replica::start(&dir, &[]);
    // One long model call: its lease is taken while it runs, however slow
    // the machine.
    let run = id_of(
        &a.server
            .post_json("/v1/runs", &unresumable(waits(60_000, "never")))
            .await,
    );
    // Its start stored (a run whose start was not stored is not resumed
    // but started again, as if new).
    crate::helpers::eventually("its start to be stored", async || {
        let messages = a.server.get_json(&format!("/v1/runs/{run}/messages")).await;
        (!messages["messages"].as_array().unwrap().is_empty()).then_some(())
    })
    .await;
    let before = replica_ids(&dir).await;
    assert_eq!(before.len(), 1);
    // Taken for dead while alive (a long pause, a partition): its row goes.
    sqlx::query("DELETE FROM replicas")
        .execute(&mut database(&dir).await)
        .await
        .unwrap();
    // It stops the run without writing, and joins again under a new id.
    // The run is taken over from storage like any dead replica's (by its
    // sweep): resumes off, it ends `interrupted`.
    crate::helpers::eventually("A to join again", async || {
        let after = replica_ids(&dir).await;
        (after.len() == 1 && after != before).then_some(())
    })
    .await;
    let ended = a.server.wait_status(&run, "interrupted").await;
    assert!(ended["finished_at"].is_string());
    let events = a.events(&run).await;
    assert_gap_free(&events);
    let kinds = types(&events);
    assert_eq!(kinds.last(), Some(&"run_end"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|kind| **kind == "run_end").count(),
        1,
        "{kinds:?}"
    );
    // It stays up and takes runs again.
    ready(&a).await;
    let next = id_of(&a.server.post_json("/v1/runs", &steps(1, 10)).await);
    assert_eq!(
        a.server.wait_status(&next, "completed").await["answer"],
        "done"
    );
    alive(&mut a);
}

/// Frozen (SIGSTOP) past its lease while it runs a run, then thawed: the
/// other replica has resumed the run meanwhile, and nothing of what the
/// frozen one still had to write lands after its thaw. It stays up, joins
/// again and takes runs again.
#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_replica_frozen_past_its_lease_writes_nothing_more_and_serves_again() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let mut a = Replica::start(&dir, &[]);
    let b = Replica::start(&dir, &[]);
    let before = replica_ids(&dir).await;
    // Posted to A, which has a free slot: it executes there.
    let run = id_of(&a.server.post_json("/v1/runs", &steps(8, 300)).await);
    crate::helpers::eventually("its first step to be stored", async || {
        let messages = a.server.get_json(&format!("/v1/runs/{run}/messages")).await;
        (messages["messages"].as_array().unwrap().len() >= 3).then_some(())
    })
    .await;
    signal(&a, "STOP");
    // B takes the run over once A's lease ran out, and completes it.
    let done = b.server.wait_status(&run, "completed").await;
    let events_then = b.events(&run).await;
    // A wakes with writes of the run in hand, and a lease long gone: it
    // stops the run, and joins again (a new id) once nothing more of the
    // run can be written.
    signal(&a, "CONT");
    crate::helpers::eventually("A to join again", async || {
        let ids = replica_ids(&dir).await;
        (ids.len() == 2 && ids.iter().any(|id| !before.contains(id))).then_some(())
    })
    .await;
    ready(&a).await;
    assert_eq!(done["answer"], "done");
    assert_eq!(done["resumes"], 1);
    let events = b.events(&run).await;
    assert_eq!(
        events.len(),
        events_then.len(),
        "nothing was written after the run's end"
    );
    assert_gap_free(&events);
    let kinds = types(&events);
    assert_eq!(kinds.iter().filter(|k| **k == "run_start").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "run_end").count(), 1);
    assert_eq!(kinds.last(), Some(&"run_end"));
    let resumed: Vec<_> = events.iter().filter(|e| e.event == "run_resumed").collect();
    assert_eq!(resumed.len(), 1, "{kinds:?}");
    assert_eq!(resumed[0].data["reason"], "lease_lost");
    assert_eq!(
        kinds.iter().filter(|k| **k == "tool_end").count(),
        done["tool_calls"].as_u64().unwrap() as usize,
        "{kinds:?}"
    );
    let next = id_of(&a.server.post_json("/v1/runs", &steps(1, 10)).await);
    assert_eq!(
        a.server.wait_status(&next, "completed").await["answer"],
        "done"
    );
    alive(&mut a);
}

/// Sends `replica` the signal `name` (`STOP`, `CONT`).
pub(crate) fn signal(replica: &Replica, name: &str) {
    let sent = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(replica.child.id().to_string())
        .status()
        .unwrap();
    assert!(sent.success(), "SIG{name} was not sent");
}

/// Waits until `replica` says it is ready.
pub(crate) async fn ready(replica: &Replica) {
    crate::helpers::eventually("the replica to be ready", async || {
        let response = replica.server.get("/readyz").await;
        (response.status() == 200).then_some(())
    })
    .await;
}

fn alive(replica: &mut Replica) {
    let exited = replica.child.try_wait().unwrap();
    assert!(exited.is_none(), "the replica stopped: {exited:?}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn status_streams_end_when_their_replica_may_have_missed_news() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let a = Replica::start(&dir, &[]);
    let mut statuses = Statuses::open(a.server.get("/v1/runs/events").await).await;
    // Its listening connection is lost (and opened again): changes of
    // status may have gone by, so the stream ends for its client to read
    // the runs again.
    let mut db = database(&dir).await;
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE query ILIKE 'listen%' AND datname = current_database() \
         AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert!(!ended.is_empty(), "the replica listens");
    let seen = statuses.until(|_| false).await;
    assert!(seen.is_empty(), "{seen:?}");
    // A new stream hears what comes next.
    let mut again = Statuses::open(a.server.get("/v1/runs/events").await).await;
    let run = id_of(&a.server.post_json("/v1/runs", &steps(1, 10)).await);
    let seen = again
        .until(|seen| {
            seen.get(&run)
                .is_some_and(|s| s.last().is_some_and(|s| s == "completed"))
        })
        .await;
    assert!(seen[&run].contains(&"running".to_owned()));
}
