//! The command-line client against the real server: exit codes, `--follow`
//! output, `--json`.

use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::helpers::*;

/// Runs the client with `args` against `server` (and `token`), on a thread
/// of its own.
async fn client(server: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-runner"));
    command
        .args(args)
        .env("AGENT_RUNNER_URL", server)
        .env_remove("AGENT_RUNNER_TOKEN");
    if let Some(token) = token {
        command.env("AGENT_RUNNER_TOKEN", token);
    }
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn run_follow_prints_the_run_as_it_goes_and_exits_with_its_outcome() {
    let dir = tempfile::tempdir().unwrap();
    // A profile whose provider is not there: its runs end `failed`.
    let (mut server, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_MODELS__GONE__KIND", "openai"),
            (
                "AGENT_RUNNER_MODELS__GONE__BASE_URL",
                "http://127.0.0.1:9/v1",
            ),
            ("AGENT_RUNNER_MODELS__GONE__MODEL", "m"),
            ("AGENT_RUNNER_MODELS__GONE__MAX_ATTEMPTS", "1"),
        ],
    );
    let followed = client(&address, None, &["run", "look around", "--follow"]).await;
    assert_eq!(followed.status.code(), Some(0), "{followed:?}");
    let text = stdout(&followed);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("run "), "{text}");
    assert!(lines.contains(&"  -> list_dir({})"), "{text}");
    assert!(lines.contains(&"  <- list_dir done"), "{text}");
    assert!(text.contains("I am the demo model"), "{text}");
    assert_eq!(
        lines.last(),
        Some(&"completed after 2 steps and 1 tool call")
    );
    // A run that does not complete exits 1, saying how it ended.
    let failed = client(
        &address,
        None,
        &["run", "hi", "--profile", "gone", "--follow"],
    )
    .await;
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let text = stdout(&failed);
    assert!(text.contains("model error"), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("model_error after 0 steps"),
        "{text}"
    );
    // --json: each event as its JSON, one per line, in sequence.
    let raw = client(&address, None, &["--json", "run", "hi", "--follow"]).await;
    assert_eq!(raw.status.code(), Some(0));
    let events: Vec<Value> = stdout(&raw)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["type"], "run_start");
    let sequences: Vec<u64> = events
        .iter()
        .map(|event| event["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>());
    assert_eq!(events.last().unwrap()["status"], "completed");
    // Refusals exit 1 with the server's reason; a command line that makes
    // no sense exits 2; a server that is not there exits 1.
    let refused = client(&address, None, &["run", "hi", "--profile", "nope"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("422 invalid_request"),
        "{refused:?}"
    );
    let nonsense = client(&address, None, &["runs", "frobnicate"]).await;
    assert_eq!(nonsense.status.code(), Some(2));
    let absent = client("http://127.0.0.1:9", None, &["runs", "list"]).await;
    assert_eq!(absent.status.code(), Some(1));
    assert!(
        stderr(&absent).contains("cannot reach the server"),
        "{absent:?}"
    );
    assert!(terminate(&mut server).success());
}

#[tokio::test]
async fn runs_commands_show_list_cancel_and_answer_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, address) = start_binary_with(
        &dir,
        &[(
            "AGENT_RUNNER_AUTH__TOKENS",
            r#"[{tenant = "cli", token = "secret"}]"#,
        )],
    );
    let token = Some("secret");
    let remote = Remote::new(address.clone());
    // Without the token: refused.
    let refused = client(&address, None, &["runs", "list"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("401"), "{refused:?}");
    // A run that pauses for an approval, made with the client (--json).
    let created = client(
        &address,
        token,
        &[
            "--json",
            "run",
            "list it, with permission",
            "--tool",
            "list_dir",
        ],
    )
    .await;
    assert_eq!(created.status.code(), Some(0), "{created:?}");
    let run: Value = serde_json::from_str(&stdout(&created)).unwrap();
    let id = run["id"].as_str().unwrap().to_owned();
    let shown = client(&address, token, &["runs", "show", &id]).await;
    assert_eq!(shown.status.code(), Some(0));
    assert!(stdout(&shown).starts_with(&id), "{shown:?}");
    let listed = client(&address, token, &["--json", "runs", "list", "--limit", "5"]).await;
    let page: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    assert_eq!(page["runs"][0]["id"], id.as_str());
    // An approval run, made over HTTP, answered with the client.
    let paused: Value = remote
        .client
        .post(format!("{address}/v1/runs"))
        .bearer_auth("secret")
        .json(&json!({
            "prompt": "write, with permission",
            "approval": {"tools": ["write_file"]},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": "a.txt", "content": "x"}))]},
                {"content": "written"}
            ]}
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paused_id = paused["id"].as_str().unwrap().to_owned();
    let mut waiting = String::new();
    for _ in 0..200 {
        let shown = client(&address, token, &["runs", "show", &paused_id]).await;
        waiting = stdout(&shown);
        if waiting.contains("requires_action") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        waiting.contains("pending     w1 approval write_file"),
        "{waiting}"
    );
    let approved = client(&address, token, &["--json", "runs", "approve", &paused_id]).await;
    assert_eq!(approved.status.code(), Some(0), "{approved:?}");
    let approved: Value = serde_json::from_str(&stdout(&approved)).unwrap();
    assert_eq!(approved["status"], "queued");
    // Nothing left to approve: refused.
    let again = client(&address, token, &["runs", "approve", &paused_id]).await;
    assert_eq!(again.status.code(), Some(1));
    // The transcript, and a cancel of a run that has ended.
    let mut messages = String::new();
    for _ in 0..200 {
        let output = client(&address, token, &["runs", "messages", &paused_id]).await;
        messages = stdout(&output);
        if messages.contains("[assistant] written") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        messages.starts_with("[user] write, with permission"),
        "{messages}"
    );
    assert!(messages.contains("  -> write_file("), "{messages}");
    // As `POST .../cancel`, repeatable: the run as it ended.
    let cancelled = client(&address, token, &["runs", "cancel", &paused_id]).await;
    assert_eq!(cancelled.status.code(), Some(0), "{cancelled:?}");
    assert!(stdout(&cancelled).contains("completed"), "{cancelled:?}");
    assert!(terminate(&mut server).success());
}

#[tokio::test]
async fn run_follow_resumes_a_stream_that_breaks_off_with_no_gap() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, address) = start_binary_with(&dir, &[]);
    // The answer to the POST is cut after its first events.
    let (proxy, connections) = crate::eventsource::flaky_proxy(address, 1_200).await;
    let raw = client(&proxy, None, &["--json", "run", "look around", "--follow"]).await;
    assert_eq!(raw.status.code(), Some(0), "{raw:?}");
    let events: Vec<Value> = stdout(&raw)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let sequences: Vec<u64> = events
        .iter()
        .filter_map(|event| event["sequence"].as_u64())
        .collect();
    assert_eq!(
        sequences,
        (1..=sequences.len() as u64).collect::<Vec<_>>(),
        "every event once, in order"
    );
    assert_eq!(events.last().unwrap()["status"], "completed");
    assert!(
        connections.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "it resumed"
    );
    assert!(terminate(&mut server).success());
}

#[tokio::test]
async fn run_files_land_under_their_relative_path_or_where_they_are_told() {
    let app = spawn_app().await;
    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("notes.txt"), "mine").unwrap();
    let elsewhere = local.path().join("notes.txt");
    let elsewhere = format!("{}=docs/notes.md", elsewhere.display());
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-runner"));
    command
        .current_dir(local.path())
        .env("AGENT_RUNNER_URL", app.url(""))
        .env_remove("AGENT_RUNNER_TOKEN")
        .args([
            "--json",
            "run",
            "read them",
            "--file",
            "./notes.txt",
            "--file",
        ])
        .arg(&elsewhere);
    let created = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    assert_eq!(created.status.code(), Some(0), "{created:?}");
    let run: Value = serde_json::from_slice(&created.stdout).unwrap();
    let id = run["id"].as_str().unwrap();
    app.wait_terminal(id).await;
    for path in ["notes.txt", "docs/notes.md"] {
        let file = app.get(&format!("/v1/runs/{id}/workspace/{path}")).await;
        assert_eq!(file.text, "mine", "{path}");
    }
    // A path out of the current directory needs its place said.
    let outside = client(&app.url(""), None, &["run", "x", "--file", "../notes.txt"]).await;
    assert_eq!(outside.status.code(), Some(2), "{outside:?}");
    assert!(
        stderr(&outside).contains("--file ../notes.txt=PATH"),
        "{outside:?}"
    );
}

#[tokio::test]
async fn a_new_user_is_told_what_the_client_does_and_where_the_server_is() {
    // The server's own help lists the client's commands.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_agent-runner"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    let text = stdout(&help);
    for command in ["serve", "run", "runs", "config", "hash-token"] {
        assert!(
            text.lines()
                .any(|line| line.trim_start().starts_with(&format!("{command} "))),
            "{command} in\n{text}"
        );
    }
    // No server there: what to do about it.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let refused = client(&nowhere, None, &["runs", "list"]).await;
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let text = stderr(&refused);
    assert!(
        text.contains(&format!("cannot reach the server at {nowhere}")),
        "{text}"
    );
    assert!(text.contains("agent-runner serve"), "{text}");
    assert!(text.contains("AGENT_RUNNER_URL"), "{text}");
    // The demo model calls no tool the run does not have.
    let app = spawn_app().await;
    let run = app.run_to_end(json!({"prompt": "hi", "tools": []})).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["steps"], 1, "{run}");
    assert_eq!(run["tool_calls"], 0, "{run}");
    assert!(
        run["answer"].as_str().unwrap().contains("not a real model"),
        "{run}"
    );
}

/// Runs the client with `args` against `server` with its standard output
/// closed by its reader before it writes (as `| head -1` closes it once it
/// has its line): whatever it writes meets a closed pipe.
async fn client_into_closed_pipe(server: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-runner"));
    command
        .args(args)
        .env("AGENT_RUNNER_URL", server)
        .env_remove("AGENT_RUNNER_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().unwrap();
        drop(child.stdout.take());
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

/// `agent-runner runs list | head -1` and `agent-runner --json run hi
/// --follow | head -3`: once the reader has what it wanted, the client
/// stops quietly (exit 0, nothing on stderr), without a panic.
#[tokio::test]
async fn a_reader_that_stops_reading_ends_the_client_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_binary(&dir);
    for _ in 0..3 {
        let created = client(&address, None, &["run", "hi"]).await;
        assert!(created.status.success(), "{created:?}");
    }
    for args in [
        &["runs", "list"][..],
        &["--json", "runs", "list"],
        &["--json", "run", "hi", "--follow"],
        &["run", "hi", "--follow"],
    ] {
        let closed = client_into_closed_pipe(&address, args).await;
        assert_eq!(closed.status.code(), Some(0), "{args:?}: {closed:?}");
        assert_eq!(stderr(&closed), "", "{args:?}");
    }
}

#[tokio::test]
async fn upload_run_from_it_and_take_its_diff_and_archive() {
    let app = spawn_app().await;
    let address = app.address.clone();
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("project.tar.gz");
    std::fs::write(
        &archive,
        crate::repositories::tar_gz(&[
            ("lib/calc.py", b"def add(a, b):\n    return a - b\n"),
            ("README.md", b"calc\n"),
        ]),
    )
    .unwrap();
    // An upload named as neither archive is refused before it is sent.
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "x").unwrap();
    let refused = client(&address, None, &["upload", notes.to_str().unwrap()]).await;
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(stderr(&refused).contains(".tar.gz"), "{refused:?}");
    // Uploaded, then named by a run made with the client.
    let uploaded = client(
        &address,
        None,
        &["--json", "upload", archive.to_str().unwrap()],
    )
    .await;
    assert_eq!(uploaded.status.code(), Some(0), "{uploaded:?}");
    let upload: Value = serde_json::from_str(&stdout(&uploaded)).unwrap();
    assert_eq!(upload["files"], 2);
    let upload_id = upload["id"].as_str().unwrap();
    let created = client(
        &address,
        None,
        &[
            "--json", "run", "look", "--upload", upload_id, "--tool", "list_dir",
        ],
    )
    .await;
    assert_eq!(created.status.code(), Some(0), "{created:?}");
    let created: Value = serde_json::from_str(&stdout(&created)).unwrap();
    let ended = app.wait_terminal(created["id"].as_str().unwrap()).await;
    assert_eq!(ended["status"], "completed", "{ended}");
    let seeded = app
        .get(&format!(
            "/v1/runs/{}/workspace/lib/calc.py",
            ended["id"].as_str().unwrap()
        ))
        .await;
    assert!(seeded.text.contains("a - b"), "{}", seeded.text);
    // A run from the same upload that fixes the file: its diff, as the
    // server wrote it, and its archive.
    let fixed = app
        .run_to_end(json!({
            "prompt": "fix add",
            "tools": ["write_file"],
            "workspace": {"archive": upload_id},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("1", "write_file",
                    json!({"path": "lib/calc.py", "content": "def add(a, b):\n    return a + b\n"}))]},
                {"content": "fixed"}
            ]}
        }))
        .await;
    let id = fixed["id"].as_str().unwrap();
    let diff = client(&address, None, &["runs", "diff", id]).await;
    assert_eq!(diff.status.code(), Some(0), "{diff:?}");
    assert_eq!(stdout(&diff), app.diff(id).await);
    assert!(stdout(&diff).contains("+    return a + b"), "{diff:?}");
    let out = dir.path().join("out.tar.gz");
    let archived = client(
        &address,
        None,
        &["runs", "archive", id, "--out", out.to_str().unwrap()],
    )
    .await;
    assert_eq!(archived.status.code(), Some(0), "{archived:?}");
    let mut names: Vec<String> = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&out).unwrap(),
    ))
    .entries()
    .unwrap()
    .map(Result::unwrap)
    .filter(|entry| entry.header().entry_type().is_file())
    .map(|entry| entry.path().unwrap().display().to_string())
    .collect();
    names.sort();
    assert_eq!(names, ["README.md", "lib/calc.py"]);
    // A run that is not there: refused, and no file left behind.
    let missing = dir.path().join("missing.tar.gz");
    let absent = uuid::Uuid::now_v7().to_string();
    let refused = client(
        &address,
        None,
        &[
            "runs",
            "archive",
            &absent,
            "--out",
            missing.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(stderr(&refused).contains("404"), "{refused:?}");
    assert!(!missing.exists());
    let refused = client(&address, None, &["runs", "diff", &absent]).await;
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
}
