//! The real-model task set's runner and scorer (`eval/run.py`), against the
//! real server, on its scripted sample: what passes must pass and what does
//! not must fail. And every task of the task set is a request the server
//! accepts, with the preset it names.

use std::path::Path;

use serde_json::{Value, json};

use crate::helpers::{Remote, ServerProcess, binary_command, server_log, spawn_listening};

/// The preset the task set's runs use (as in `eval/server.toml`).
const CONFIG: &str = "[commands.test]\nprogram = \"python3\"\nargs = [\"test_examples.py\"]\n\
                      timeout_ms = 20000\nidempotent = true\n";

fn eval_file(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("eval")
        .join(name)
}

/// The real binary with the task set's preset.
fn start(dir: &tempfile::TempDir) -> (ServerProcess, Remote) {
    let file = dir.path().join("eval.toml");
    std::fs::write(&file, CONFIG).unwrap();
    let mut command = binary_command(dir, &[]);
    command.arg("--config").arg(&file);
    let log = server_log(&mut command);
    command.stderr(log);
    let (child, address) = spawn_listening(command);
    (child, Remote::new(address))
}

#[tokio::test]
async fn the_task_set_runner_scores_the_scripted_sample() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start(&dir);
    let results = dir.path().join("results.jsonl");
    let address = server.address.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(eval_file("run.py"))
            .arg("--server")
            .arg(&address)
            .arg("--one-shot")
            .arg("--out")
            .arg(&results)
            .arg(eval_file("tasks/sample.jsonl"))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("harness: 2/3 passed"), "{stdout}");
    assert!(stdout.contains("one_shot: 1/2 passed"), "{stdout}");
    let results: Vec<Value> = std::fs::read_to_string(dir.path().join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let passed = |task: &str, mode: &str| {
        results
            .iter()
            .find(|r| r["task"] == task && r["mode"] == mode)
            .unwrap_or_else(|| panic!("no result for {task} {mode}"))["passed"]
            .clone()
    };
    assert_eq!(passed("sample-solved", "harness"), true);
    assert_eq!(passed("sample-wrong", "harness"), false);
    assert_eq!(passed("sample-fact", "harness"), true);
    assert_eq!(passed("sample-solved", "one_shot"), true);
    assert_eq!(passed("sample-wrong", "one_shot"), false);
    // The solved run ran the examples through the preset, and they passed.
    let solved = results
        .iter()
        .find(|r| r["task"] == "sample-solved" && r["mode"] == "harness")
        .unwrap();
    let messages = server
        .get_json(&format!(
            "/v1/runs/{}/messages",
            solved["run_id"].as_str().unwrap()
        ))
        .await;
    let ran = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["call_id"] == "t")
        .expect("the test command ran");
    assert!(
        ran["content"]
            .as_str()
            .unwrap()
            .contains("1 of 1 examples pass"),
        "{ran}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn every_task_of_the_task_set_is_a_request_the_server_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start(&dir);
    for file in ["tasks/humaneval-0-81.jsonl", "tasks/own.jsonl"] {
        let tasks = std::fs::read_to_string(eval_file(file)).unwrap();
        let mut count = 0;
        for line in tasks.lines() {
            let task: Value = serde_json::from_str(line).unwrap();
            let mut request = task["request"].clone();
            request["model"] = json!({"scripted": [{"content": "x"}]});
            let response = server
                .client
                .post(format!("{}/v1/runs", server.address))
                .json(&request)
                .send()
                .await
                .unwrap();
            let status = response.status();
            assert_eq!(
                status,
                201,
                "{} {}: {}",
                file,
                task["id"],
                response.text().await.unwrap()
            );
            assert!(task["check"].is_object(), "{}", task["id"]);
            count += 1;
        }
        assert!(count > 0, "{file} has tasks");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
