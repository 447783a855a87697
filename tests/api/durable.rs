//! Durable runs (SPEC section 14): a run whose server is killed in the
//! middle goes on after the restart from its last stored step. Real
//! processes, real SIGKILLs, on SQLite (a PostgreSQL replica's takeover is
//! in `replicas.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{
    Remote, ServerProcess, SseEvent, assert_gap_free, binary_command, call, eventually, read_sse,
    spawn_listening, types,
};

/// The real binary on SQLite in `dir`, with `config` as its config file.
pub(crate) fn start(dir: &tempfile::TempDir, config: &str) -> (ServerProcess, Remote) {
    start_with(dir, config, &[])
}

/// [`start`], with more variables in the server's environment.
fn start_with(
    dir: &tempfile::TempDir,
    config: &str,
    variables: &[(&str, &str)],
) -> (ServerProcess, Remote) {
    let file = dir.path().join("durable.toml");
    std::fs::write(&file, config).unwrap();
    let database = format!("sqlite://{}/runs.db", dir.path().display());
    let mut settings = vec![("AGENT_RUNNER_STORAGE__DATABASE_URL", database.as_str())];
    settings.extend_from_slice(variables);
    let mut command = binary_command(dir, &settings);
    command.arg("--config").arg(&file);
    command.stderr(std::process::Stdio::null());
    let (child, address) = spawn_listening(command);
    (child, Remote::new(address))
}

pub(crate) fn kill(child: &mut std::process::Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Waits until the run's first step (prompt, call, result) is stored.
async fn first_step_stored(server: &Remote, id: &str) {
    eventually("the first step to be stored", async || {
        (messages(server, id).await.len() >= 3).then_some(())
    })
    .await;
}

async fn events(server: &Remote, id: &str) -> Vec<SseEvent> {
    read_sse(server.get(&format!("/v1/runs/{id}/events")).await)
        .await
        .0
}

pub(crate) async fn messages(server: &Remote, id: &str) -> Vec<Value> {
    server.get_json(&format!("/v1/runs/{id}/messages")).await["messages"]
        .as_array()
        .unwrap()
        .clone()
}

/// Every call of the transcript has exactly one result.
pub(crate) fn assert_whole(messages: &[Value]) {
    for message in messages {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let id = &call["id"];
            let results = messages
                .iter()
                .filter(|m| m["role"] == "tool" && &m["call_id"] == id)
                .count();
            assert_eq!(results, 1, "call {id} has {results} results: {messages:?}");
        }
    }
}

fn count(kinds: &[&str], kind: &str) -> usize {
    kinds.iter().filter(|k| **k == kind).count()
}

#[tokio::test]
async fn a_run_killed_mid_model_call_resumes_after_the_restart_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start(&dir, "");
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "three steps",
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("w", "write_file", json!({"path": "a.txt", "content": "one"}))],
                     "usage": {"input_tokens": 5, "output_tokens": 1}},
                    {"delay_ms": 1500, "content": "", "tool_calls": [call("l", "list_dir", json!({}))],
                     "usage": {"input_tokens": 7, "output_tokens": 2}},
                    {"content": "done", "usage": {"input_tokens": 9, "output_tokens": 3}}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    // Killed while its second model call is in flight (its first step and
    // its tool's result stored).
    first_step_stored(&server, &id).await;
    kill(&mut child);

    let (mut child, server) = start(&dir, "");
    let done = server.wait_status(&id, "completed").await;
    assert_eq!(done["answer"], "done");
    assert_eq!(done["resumes"], 1);
    assert_eq!(done["steps"], 3, "the lost model call is not counted");
    assert_eq!(done["tool_calls"], 2);
    assert_eq!(done["usage"]["input_tokens"], 21, "{done}");
    let events = events(&server, &id).await;
    assert_gap_free(&events);
    let kinds = types(&events);
    assert_eq!(count(&kinds, "run_start"), 1, "{kinds:?}");
    assert_eq!(count(&kinds, "run_resumed"), 1, "{kinds:?}");
    assert_eq!(count(&kinds, "run_end"), 1, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_end"));
    let resumed = events.iter().find(|e| e.event == "run_resumed").unwrap();
    assert_eq!(resumed.data["attempt"], 1);
    assert_eq!(resumed.data["reason"], "crash");
    let transcript = messages(&server, &id).await;
    assert_whole(&transcript);
    assert_eq!(transcript.len(), 6, "{transcript:?}");
    kill(&mut child);
}

#[tokio::test]
async fn a_crash_after_a_responses_model_end_was_stored_but_not_its_message_gives_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start(&dir, "");
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "two steps",
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("l", "list_dir", json!({}))]},
                    {"delay_ms": 5000, "content": "done"}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    // Killed in its last model call; then storage is made to hold what a
    // kill a moment later leaves: that call's model_end (and its step),
    // not the answer after it.
    first_step_stored(&server, &id).await;
    kill(&mut child);
    let database = format!("sqlite://{}/runs.db", dir.path().display());
    let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(&database)
        .await
        .unwrap();
    let (last,): (i64,) = sqlx::query_as("SELECT MAX(sequence) FROM events WHERE run_id = $1")
        .bind(&id)
        .fetch_one(&mut connection)
        .await
        .unwrap();
    let body = json!({"run_id": id, "sequence": last + 1, "timestamp": "2026-01-01T00:00:00Z",
                      "type": "model_end", "duration_ms": 1.0});
    sqlx::query(
        "INSERT INTO events (run_id, sequence, type, body) VALUES ($1, $2, 'model_end', $3)",
    )
    .bind(&id)
    .bind(last + 1)
    .bind(body.to_string())
    .execute(&mut connection)
    .await
    .unwrap();
    sqlx::query("UPDATE runs SET steps = steps + 1 WHERE id = $1")
        .bind(&id)
        .execute(&mut connection)
        .await
        .unwrap();
    drop(connection);

    // The scripted model gives the lost answer again (it was not used up).
    let (mut child, server) = start(&dir, "");
    let done = server.wait_status(&id, "completed").await;
    assert_eq!(done["answer"], "done", "{done}");
    assert_eq!(done["resumes"], 1);
    assert_eq!(done["steps"], 2, "the lost response's step is counted once");
    let transcript = messages(&server, &id).await;
    assert_whole(&transcript);
    assert_eq!(transcript.len(), 4, "{transcript:?}");
    kill(&mut child);
}

/// A preset that appends a line to `log.txt`, then takes a while.
pub(crate) fn appending(idempotent: bool) -> String {
    format!(
        "[commands.append]\nprogram = \"/bin/sh\"\n\
         args = [\"-c\", \"echo line >> log.txt; sleep 2\"]\nidempotent = {idempotent}\n"
    )
}

async fn killed_in_a_command(idempotent: bool) -> (Value, Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = appending(idempotent);
    let (mut child, server) = start(&dir, &config);
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "append",
                "tools": ["run_command"],
                "commands": ["append"],
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("a", "run_command", json!({"command": "append"}))]},
                    {"content": "done"}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let log = dir.path().join("workspaces").join(&id).join("log.txt");
    eventually("the command to run", async || {
        Path::exists(&log).then_some(())
    })
    .await;
    kill(&mut child);

    let (mut child, server) = start(&dir, &config);
    let done = server.wait_status(&id, "completed").await;
    let transcript = messages(&server, &id).await;
    assert_whole(&transcript);
    let written = std::fs::read_to_string(&log).unwrap();
    kill(&mut child);
    (done, transcript, written)
}

/// An answer the harness questions is stored with the note that follows
/// it, never alone: a crash right after the answer is stored (the debug
/// build's hook stops the server dead after the event that holds the
/// answer's text) leaves a run that goes on from the note, not one that
/// ends `completed` with the answer its harness rejected.
#[tokio::test]
async fn an_answer_and_the_note_questioning_it_are_stored_together() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[runs]\ncheck_answers = true\n";
    let (mut child, server) = start_with(
        &dir,
        config,
        &[("AGENT_RUNNER_TEST_CRASH_AFTER_MESSAGE", "from memory")],
    );
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "What does notes.md say?",
                "workspace": {"files": {"notes.md": "hi\n"}},
                "model": {"scripted": [
                    {"content": "It says hello, from memory."},
                    {"content": "", "tool_calls": [call("r1", "read_file", json!({"path": "notes.md"}))]},
                    {"content": "It says hi."}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let stopped = child.wait().unwrap();
    assert!(
        !stopped.success(),
        "the hook stops the server dead: {stopped:?}"
    );
    let (_child, server) = start(&dir, config);
    let done = server.wait_status(&id, "completed").await;
    assert_eq!(done["answer"], "It says hi.", "{done}");
    let messages = messages(&server, &id).await;
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant"
        ],
        "{messages:?}"
    );
    assert!(
        messages[2]["content"]
            .as_str()
            .unwrap()
            .contains("notes.md"),
        "the note: {messages:?}"
    );
    assert_gap_free(&events(&server, &id).await);
}

#[tokio::test]
async fn a_command_that_was_running_is_never_run_twice_unless_idempotent() {
    let (done, transcript, written) = killed_in_a_command(false).await;
    assert_eq!(done["resumes"], 1);
    assert_eq!(written, "line\n", "the call did not run again");
    let result = transcript
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the call has a result");
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .starts_with("Outcome unknown"),
        "{result}"
    );

    let (done, transcript, written) = killed_in_a_command(true).await;
    assert_eq!(done["resumes"], 1);
    assert_eq!(written, "line\nline\n", "an idempotent preset runs again");
    let result = transcript.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["is_error"], false, "{result}");
}

#[tokio::test]
async fn max_resumes_zero_keeps_the_old_rule() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start(&dir, "");
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "no resume",
                "limits": {"max_resumes": 0},
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("l", "list_dir", json!({}))]},
                    {"delay_ms": 60000, "content": "never"}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    assert_eq!(run["limits"]["max_resumes"], 0);
    first_step_stored(&server, &id).await;
    kill(&mut child);
    let (mut child, server) = start(&dir, "");
    let ended = server.wait_status(&id, "interrupted").await;
    assert_eq!(ended["resumes"], 0);
    let kinds: Vec<String> = events(&server, &id)
        .await
        .iter()
        .map(|e| e.event.clone())
        .collect();
    assert!(!kinds.contains(&"run_resumed".to_owned()), "{kinds:?}");
    kill(&mut child);
}

#[tokio::test]
async fn a_graceful_stop_past_its_grace_hands_the_run_over_to_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[runs]\nshutdown_grace_ms = 200\n";
    let (mut child, server) = start(&dir, config);
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "outlast the grace",
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("l", "list_dir", json!({}))]},
                    {"delay_ms": 2000, "content": "done"}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    first_step_stored(&server, &id).await;
    let status = crate::helpers::terminate(&mut child);
    assert!(status.success(), "a graceful stop exits 0: {status:?}");

    let (mut child, server) = start(&dir, config);
    let done = server.wait_status(&id, "completed").await;
    assert_eq!(done["resumes"], 1);
    let events = events(&server, &id).await;
    assert_gap_free(&events);
    let kinds = types(&events);
    for kind in ["run_start", "run_resumed", "run_end"] {
        assert_eq!(count(&kinds, kind), 1, "{kinds:?}");
    }
    let resumed = events.iter().find(|e| e.event == "run_resumed").unwrap();
    assert_eq!(resumed.data["reason"], "shutdown");
    assert_whole(&messages(&server, &id).await);
    kill(&mut child);
}

/// Creates a run, with its idempotency key, until some server answers:
/// a server killed under the request may or may not have stored it.
async fn create(address: &std::sync::Mutex<String>, key: &str, body: &Value) -> String {
    let client = crate::helpers::http_client();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let url = format!("{}/v1/runs", address.lock().unwrap());
        let reply = client
            .post(url)
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await;
        if let Ok(reply) = reply
            && (reply.status() == 201 || reply.status() == 200)
        {
            let run: Value = reply.json().await.unwrap();
            return run["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no server took run {key}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn two_hundred_runs_over_ten_kills_all_complete_and_no_command_runs_twice() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[commands.append]\nprogram = \"/bin/sh\"\n\
                  args = [\"-c\", \"echo line >> log.txt\"]\n";
    let (child, server) = start(&dir, config);
    let address = std::sync::Arc::new(std::sync::Mutex::new(server.address.clone()));
    let body = json!({
        "prompt": "append, look, answer",
        "tools": ["run_command", "list_dir"],
        "commands": ["append"],
        "limits": {"max_resumes": 10},
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("a", "run_command", json!({"command": "append"}))]},
            {"delay_ms": 20, "content": "", "tool_calls": [call("l", "list_dir", json!({}))]},
            {"content": "done"}
        ]}
    });
    // The clients create runs while the server is killed and started again.
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (address, body) = (std::sync::Arc::clone(&address), body.clone());
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for i in 0..50 {
                    ids.push(create(&address, &format!("soak-{client}-{i}"), &body).await);
                }
                ids
            })
        })
        .collect();
    let mut child = child;
    let mut kills = Vec::new();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(150 + fastrand::u64(0..250))).await;
        kill(&mut child);
        kills.push(chrono::Utc::now());
        let (next, server) = start(&dir, config);
        child = next;
        *address.lock().unwrap() = server.address.clone();
    }
    let mut ids = Vec::new();
    for client in clients {
        ids.extend(client.await.unwrap());
    }
    assert_eq!(ids.len(), 200);
    let server = Remote::new(address.lock().unwrap().clone());
    let mut latencies = Vec::new();
    for id in &ids {
        let done = server.wait_status(id, "completed").await;
        latencies.extend(resume_latencies(&events(&server, id).await, &kills));
        let transcript = messages(&server, id).await;
        assert_whole(&transcript);
        let log = dir.path().join("workspaces").join(id).join("log.txt");
        let lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        assert!(lines <= 1, "run {id}'s command ran {lines} times: {done}");
        let unknown = transcript.iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|text| text.starts_with("Outcome unknown"))
        });
        assert!(
            lines == 1 || unknown,
            "run {id}: no line and no unknown outcome"
        );
    }
    kill(&mut child);
    // Figures, not assertions (timing is the benchmarks' business).
    latencies.sort_unstable();
    if let (Some(first), Some(last)) = (latencies.first(), latencies.last()) {
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        eprintln!(
            "resume latency (kill to the resumed run's next event), {} resumes: \
             p50 {} ms, p99 {} ms, min {first} ms, max {last} ms",
            latencies.len(),
            at(0.5),
            at(0.99),
        );
    }
}

/// For each resume in a run's `events`, how long after the kill before it
/// the run went on (its first event after `run_resumed`), in milliseconds.
fn resume_latencies(events: &[SseEvent], kills: &[chrono::DateTime<chrono::Utc>]) -> Vec<i64> {
    let time = |event: &SseEvent| {
        event.data["timestamp"]
            .as_str()
            .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
            .map(|at| at.with_timezone(&chrono::Utc))
    };
    events
        .windows(2)
        .filter(|pair| pair[0].event == "run_resumed")
        .filter_map(|pair| {
            let went_on = time(&pair[1])?;
            let killed = kills.iter().rev().find(|kill| **kill <= went_on)?;
            Some((went_on - *killed).num_milliseconds())
        })
        .collect()
}
