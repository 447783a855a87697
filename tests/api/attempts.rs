//! Attempts (SPEC section 27): a run tried several times, each attempt a
//! child run with its own workspace, verified by the run's check presets,
//! through the real server with a provider mock in OpenAI's wire format.

use agent_runner::tools::CommandPreset;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{Seen, mock_openai_profile, scripted_openai};

/// A `test` preset, a check, that passes once `main.py` says `ok`.
fn check_preset() -> CommandPreset {
    let preset = "program = \"sh\"\nargs = [\"-c\", \"grep -q ok main.py\"]\n\
                  timeout_ms = 20000\ncheck = true";
    toml::from_str(preset).unwrap()
}

/// A server taking code blocks as files, with the check preset `test`, the
/// profile `oa` on a provider answering `replies`, and `parallel` attempts
/// of a run at once.
async fn spawn_attempts(replies: Vec<Value>, parallel: u32) -> (TestApp, Seen) {
    spawn_attempts_in(replies, parallel, None).await
}

/// The same, with at most `max_concurrent` runs executing at once.
async fn spawn_attempts_in(
    replies: Vec<Value>,
    parallel: u32,
    max_concurrent: Option<usize>,
) -> (TestApp, Seen) {
    let (address, seen) = scripted_openai(replies).await;
    let app = spawn_with(move |config| {
        if let Some(max) = max_concurrent {
            config.runs.max_concurrent = max;
        }
        config.commands.insert("test".into(), check_preset());
        config.commands.insert(
            "plain".into(),
            toml::from_str("program = \"true\"").unwrap(),
        );
        config.runs.write_code_blocks = true;
        config.runs.max_parallel_attempts = parallel;
        config
            .models
            .insert("oa".into(), mock_openai_profile(&address));
    })
    .await;
    (app, seen)
}

/// An answer whose code block rewrites `main.py` to print `word`.
fn writes(word: &str) -> Value {
    json!({"role": "assistant", "content": format!("main.py\n```python\nprint('{word}')\n```")})
}

/// A run of `n` attempts, each one model call (a failing check is its end).
fn request(n: u32, until: &str) -> Value {
    json!({"prompt": "make the program print ok", "model": {"profile": "oa"},
           "commands": ["test"], "limits": {"max_steps": 1},
           "workspace": {"files": {"main.py": "print('no')\n"}},
           "attempts": {"n": n, "until": until}})
}

async fn attempts_of(app: &TestApp, id: &str) -> Vec<Value> {
    let page = app.get(&format!("/v1/runs?parent_run_id={id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let mut runs = page.body["runs"].as_array().unwrap().clone();
    runs.sort_by_key(|run| run["attempt"].as_u64());
    runs
}

#[tokio::test]
async fn a_server_running_one_run_at_a_time_runs_the_attempts_one_after_the_other() {
    // The parent gives its slot back while its attempts run: on a server of
    // one slot they take it in turn (the parent holding it, none could).
    let (app, _) = spawn_attempts_in(vec![writes("no!"), writes("ok")], 2, Some(1)).await;
    let run = app.run_to_end(request(2, "first_pass")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["chosen_attempt"], 2, "{run}");
}

/// The reason of an attempt superseded by attempt 1.
const SUPERSEDED: &str = "superseded: attempt 1 passed its checks first";

#[tokio::test]
async fn an_attempt_superseded_before_it_started_says_so() {
    // One slot: attempt 1 passes while the others wait for it, and they
    // end superseded, whether still queued or just started (then held in
    // their model call, so that none can end on its own first).
    let mut held = writes("no!");
    held["_delay_ms"] = json!(600_000);
    let replies = vec![writes("ok"), held.clone(), held];
    let (app, _) = spawn_attempts_in(replies, 3, Some(1)).await;
    let run = app.run_to_end(request(3, "first_pass")).await;
    assert_eq!(run["chosen_attempt"], 1, "{run}");
    let children = attempts_of(&app, run["id"].as_str().unwrap()).await;
    let aborted: Vec<&Value> = children
        .iter()
        .filter(|child| child["status"] == "aborted")
        .collect();
    assert!(!aborted.is_empty(), "{children:?}");
    // Attempt 3 is still queued when attempt 1 passes (attempt 2 holds the
    // one slot, or waits for it): on PostgreSQL it is not live in this
    // process and is ended through storage, with the same reason.
    assert_eq!(children[2]["error"], SUPERSEDED, "{children:?}");
    let postgres = std::env::var(POSTGRES_VARIABLE).is_ok();
    for child in aborted {
        // On PostgreSQL, an attempt claimed at the moment it is superseded
        // (stored running, not yet live here) is told to cancel, and the
        // reason is not stored with that request yet (a known gap).
        if postgres && child["error"].is_null() {
            continue;
        }
        assert_eq!(child["error"], SUPERSEDED, "{child}");
    }
}

#[tokio::test]
async fn the_first_attempt_to_pass_its_checks_is_chosen_and_the_run_takes_its_work() {
    let (app, seen) = spawn_attempts(vec![writes("no!"), writes("nope"), writes("ok")], 1).await;
    let run = app.run_to_end(request(3, "first_pass")).await;
    let id = run["id"].as_str().unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["chosen_attempt"], 3, "{run}");
    assert_eq!(run["answer"], writes("ok")["content"]);
    assert_eq!(
        run["attempt_policy"],
        json!({"n": 3, "until": "first_pass"})
    );
    let listed = run["attempts"].as_array().unwrap();
    let summary: Vec<(u64, &str, bool)> = listed
        .iter()
        .map(|a| {
            (
                a["attempt"].as_u64().unwrap(),
                a["status"].as_str().unwrap(),
                a["checks_passed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, "step_limit", false),
            (2, "step_limit", false),
            (3, "completed", true)
        ],
        "{run}"
    );
    // The usage is the attempts' sum: one call each, 3 and 1 tokens.
    assert_eq!(run["usage"]["input_tokens"], 9, "{run}");
    assert_eq!(run["usage"]["output_tokens"], 3, "{run}");
    assert_eq!(run["steps"], 3, "{run}");

    // Each attempt is a run of its own, listed by its parent, with its
    // own workspace; the parent's is the chosen one's.
    let children = attempts_of(&app, id).await;
    assert_eq!(children.len(), 3);
    for (i, child) in children.iter().enumerate() {
        assert_eq!(child["parent_run_id"], id);
        assert_eq!(child["attempt"], i + 1);
        assert_eq!(child["id"], listed[i]["run_id"]);
        assert_eq!(child["status"], listed[i]["status"]);
    }
    // The filter combines with the others: each narrows the listing.
    let completed = app
        .get(&format!("/v1/runs?parent_run_id={id}&status=completed"))
        .await;
    assert_eq!(completed.status, 200, "{}", completed.body);
    let ids: Vec<&Value> = completed.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| &run["id"])
        .collect();
    assert_eq!(ids, [&children[2]["id"]]);
    let other_thread = app
        .get(&format!(
            "/v1/runs?parent_run_id={id}&thread_id={id}&agent=none"
        ))
        .await;
    assert_eq!(other_thread.status, 200, "{}", other_thread.body);
    assert_eq!(other_thread.body["runs"], json!([]));
    assert_eq!(
        app.workspace_file(&children[0], "main.py").await,
        "print('no!')\n"
    );
    assert_eq!(
        app.workspace_file(&children[2], "main.py").await,
        "print('ok')\n"
    );
    assert_eq!(app.workspace_file(&run, "main.py").await, "print('ok')\n");
    let diff = app.get(&format!("/v1/runs/{id}/diff")).await;
    assert_eq!(diff.status, 200);
    let patch = &diff.text;
    assert!(
        patch.contains("-print('no')") && patch.contains("+print('ok')"),
        "{patch}"
    );
    // A follow-up continues the chosen attempt's transcript.
    let messages = app.messages(id).await;
    assert_eq!(
        messages,
        app.messages(children[2]["id"].as_str().unwrap()).await
    );

    // Attempt 1 is sent at its profile's temperature (none); the others
    // at 0.8, the profile having none.
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].get("temperature"), None, "{}", requests[0]);
    assert_eq!(requests[1]["temperature"], 0.8);
    assert_eq!(requests[2]["temperature"], 0.8);
    assert_eq!(children[1]["temperature"], 0.8);

    let events = app.events(id).await;
    assert_gap_free(&events);
    let kinds = types(&events);
    assert_eq!(kinds.first(), Some(&"run_start"));
    assert_eq!(kinds.last(), Some(&"run_end"));
    let started: Vec<&SseEvent> = events
        .iter()
        .filter(|e| e.event == "attempt_start")
        .collect();
    let ended: Vec<&SseEvent> = events.iter().filter(|e| e.event == "attempt_end").collect();
    assert_eq!(started.len(), 3, "{kinds:?}");
    assert_eq!(ended.len(), 3, "{kinds:?}");
    assert_eq!(started[0].data["attempt"], 1);
    assert_eq!(started[0].data["run_id"], children[0]["id"]);
    assert_eq!(ended[2].data["checks_passed"], true);
    assert_eq!(ended[2].data["status"], "completed");
    assert_eq!(ended[0].data["checks_passed"], false);
}

#[tokio::test]
async fn with_first_pass_the_attempts_still_running_are_superseded() {
    // The first request to arrive is answered at once; the others, much
    // later (which attempt asks first is the scheduler's).
    let late = |word: &str| {
        let mut reply = writes(word);
        reply["_delay_ms"] = json!(60_000);
        reply
    };
    let (app, _) = spawn_attempts(vec![writes("ok"), late("no"), late("no")], 4).await;
    let run = app.run_to_end(request(3, "first_pass")).await;
    assert_eq!(run["status"], "completed", "{run}");
    let chosen = run["chosen_attempt"].as_u64().unwrap();
    let children = attempts_of(&app, run["id"].as_str().unwrap()).await;
    assert_eq!(children.len(), 3);
    for (child, listed) in children.iter().zip(run["attempts"].as_array().unwrap()) {
        assert_eq!(child["status"], listed["status"]);
        if child["attempt"] == chosen {
            assert_eq!(child["status"], "completed", "{child}");
            continue;
        }
        assert_eq!(child["status"], "aborted", "{child}");
        let error = child["error"].as_str().unwrap();
        assert_eq!(
            error,
            format!("superseded: attempt {chosen} passed its checks first")
        );
    }
}

#[tokio::test]
async fn with_all_every_attempt_ends_and_the_lowest_numbered_pass_is_chosen() {
    let (app, _) = spawn_attempts(vec![writes("no"), writes("ok"), writes("ok")], 1).await;
    let run = app.run_to_end(request(3, "all")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["chosen_attempt"], 2, "{run}");
    let passed: Vec<&Value> = run["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["checks_passed"])
        .collect();
    assert_eq!(passed, [&json!(false), &json!(true), &json!(true)], "{run}");
}

#[tokio::test]
async fn when_no_attempt_passes_the_run_fails_and_chooses_none() {
    let (app, _) = spawn_attempts(vec![writes("no")], 2).await;
    let run = app.run_to_end(request(2, "all")).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .starts_with("no_attempt_passed"),
        "{run}"
    );
    assert_eq!(run["chosen_attempt"], Value::Null);
    assert_eq!(run["answer"], Value::Null);
    assert_eq!(run["attempts"].as_array().unwrap().len(), 2);
    // Its workspace is as it started.
    assert_eq!(app.workspace_file(&run, "main.py").await, "print('no')\n");
}

#[tokio::test]
async fn cancelling_the_run_cancels_every_attempt() {
    let mut late = writes("ok");
    late["_delay_ms"] = json!(60_000);
    let (app, _) = spawn_attempts(vec![late], 4).await;
    let run = app.create_run(request(2, "first_pass")).await;
    let id = run["id"].as_str().unwrap().to_owned();
    eventually("both attempts to run", async || {
        let children = attempts_of(&app, &id).await;
        (children.len() == 2 && children.iter().all(|c| c["status"] == "running")).then_some(())
    })
    .await;
    let cancelled = app.delete(&format!("/v1/runs/{id}")).await;
    assert!(cancelled.status.is_success(), "{}", cancelled.body);
    let run = app.wait_terminal(&id).await;
    assert_eq!(run["status"], "aborted", "{run}");
    for child in attempts_of(&app, &id).await {
        assert_eq!(child["status"], "aborted", "{child}");
    }
}

#[tokio::test]
async fn attempts_are_refused_whole_without_a_check_or_out_of_bounds() {
    let (app, _) = spawn_attempts(vec![writes("ok")], 4).await;
    let refused = |body: Value, needle: &'static str| {
        let app = &app;
        async move {
            let reply = app.post_run(body).await;
            assert_eq!(reply.status, 422, "{}", reply.body);
            let message = reply.body["error"]["message"].as_str().unwrap().to_owned();
            assert!(message.contains(needle), "{message}");
        }
    };
    let mut plain = request(2, "all");
    plain["commands"] = json!(["plain"]);
    refused(plain, "check = true").await;
    refused(request(1, "all"), "attempts.n").await;
    refused(request(9, "all"), "runs.max_attempts").await;
    let mut hot = request(2, "all");
    hot["attempts"]["temperature"] = json!(2.5);
    refused(hot, "attempts.temperature").await;
    let mut odd = request(2, "all");
    odd["attempts"]["until"] = json!("sometimes");
    refused(odd, "until").await;
    let mut extra = request(2, "all");
    extra["attempts"]["best_of"] = json!(2);
    refused(extra, "best_of").await;
    // Nothing was made.
    let listed = app.get("/v1/runs").await;
    assert_eq!(listed.body["runs"], json!([]));
    let bad = app.get("/v1/runs?parent_run_id=nope").await;
    assert_eq!(bad.status, 400);
}

/// The real binary on SQLite in `dir`, with a check preset, code blocks as
/// files, and the profile `oa` on the provider at `address`.
fn start_binary_checked(dir: &tempfile::TempDir, address: &str) -> (ServerProcess, Remote) {
    let file = dir.path().join("attempts.toml");
    std::fs::write(
        &file,
        format!(
            "[runs]\nwrite_code_blocks = true\n\n[commands.test]\nprogram = \"sh\"\n\
             args = [\"-c\", \"grep -q ok main.py\"]\ncheck = true\n\n[models.oa]\n\
             kind = \"openai\"\nbase_url = \"{address}/v1\"\nmodel = \"mock\"\n\
             api_key_env = \"PATH\"\nmax_attempts = 1\n"
        ),
    )
    .unwrap();
    let mut command = binary_command(dir, &[]);
    command.arg("--config").arg(&file);
    let log = server_log(&mut command);
    command.stderr(log);
    let (child, address) = spawn_listening(command);
    (child, Remote::new(address))
}

#[tokio::test]
async fn a_server_killed_while_attempts_run_makes_none_twice_and_the_run_completes() {
    let dir = tempfile::tempdir().unwrap();
    // The provider (outside the server, so it outlives it) holds the first
    // two calls until the server is killed; the calls made again after the
    // restart are answered at once.
    let mut held = writes("ok");
    held["_delay_ms"] = json!(600_000);
    let (address, seen) = scripted_openai(vec![held.clone(), held, writes("ok")]).await;
    let (mut child, server) = start_binary_checked(&dir, &address);
    let body = json!({"prompt": "make the program print ok", "model": "oa",
        "commands": ["test"], "limits": {"max_steps": 2, "max_resumes": 2},
        "workspace": {"files": {"main.py": "print('no')\n"}},
        "attempts": {"n": 2, "until": "all"}});
    let run = server.post_json("/v1/runs", &body).await;
    let id = run["id"].as_str().unwrap().to_owned();
    eventually("both attempts to wait on their model", async || {
        (seen.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    // Whichever engine the server runs on.
    sqlx::any::install_default_drivers();
    let mut connection =
        <sqlx::AnyConnection as sqlx::Connection>::connect(&database_url(dir.path()))
            .await
            .unwrap();
    let starts = "SELECT COUNT(*) FROM events WHERE run_id = $1 AND type = 'attempt_start'";
    eventually("both attempt_start events to be stored", async || {
        let (stored,): (i64,) = sqlx::query_as(starts)
            .bind(&id)
            .fetch_one(&mut connection)
            .await
            .unwrap();
        (stored == 2).then_some(())
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    // Storage is made to hold what a kill a moment earlier leaves: the
    // attempt made, the parent's last `attempt_start` not yet written.
    let lost = sqlx::query(
        "DELETE FROM events WHERE run_id = $1 AND sequence = \
         (SELECT MAX(sequence) FROM events WHERE run_id = $1 AND type = 'attempt_start')",
    )
    .bind(&id)
    .execute(&mut connection)
    .await
    .unwrap();
    assert_eq!(lost.rows_affected(), 1);
    drop(connection);

    let (mut child, server) = start_binary_checked(&dir, &address);
    let run = server.wait_status(&id, "completed").await;
    assert_eq!(run["chosen_attempt"], 1, "{run}");
    let page = server
        .get_json(&format!("/v1/runs?parent_run_id={id}"))
        .await;
    let children = page["runs"].as_array().unwrap();
    assert_eq!(children.len(), 2, "no attempt made twice: {page}");
    for child in children {
        assert_eq!(child["status"], "completed", "{child}");
        // Resumed from what it had stored (or, had nothing of it been
        // stored yet, started as if it had never left the queue): once.
        let id = child["id"].as_str().unwrap();
        let events = read_sse(server.get(&format!("/v1/runs/{id}/events")).await)
            .await
            .0;
        let kinds = types(&events);
        assert_eq!(
            kinds.iter().filter(|k| **k == "run_start").count(),
            1,
            "{kinds:?}"
        );
        assert_eq!(kinds.last(), Some(&"run_end"), "{kinds:?}");
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        4,
        "each attempt asked twice, once a server"
    );
    let events = read_sse(server.get(&format!("/v1/runs/{id}/events")).await)
        .await
        .0;
    let kinds = types(&events);
    let count = |kind: &str| kinds.iter().filter(|k| **k == kind).count();
    // Each attempt told of once: the lost one after the restart.
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "attempt_start")
        .map(|e| &e.data["attempt"])
        .collect();
    assert_eq!(started.len(), 2, "{kinds:?}");
    assert_ne!(started[0], started[1], "{kinds:?}");
    for attempt in [1, 2] {
        let at = |kind: &str| {
            events
                .iter()
                .position(|e| e.event == kind && e.data["attempt"] == attempt)
        };
        assert!(
            at("attempt_start").unwrap() < at("attempt_end").unwrap(),
            "{kinds:?}"
        );
    }
    assert_eq!(count("attempt_end"), 2, "{kinds:?}");
    assert_eq!(count("run_end"), 1, "{kinds:?}");
    terminate(&mut child);
}
