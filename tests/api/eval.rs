//! The real-model task set's runner and scorer (`eval/run.py`), against the
//! real server, on its scripted sample: what passes must pass and what does
//! not must fail, and extractions score field by field, with their schema
//! and without. And every task of the task set is a request the server
//! accepts, with the preset it names; every extraction's expected document
//! is valid under its own schema.

use std::path::Path;

use serde_json::{Value, json};

use crate::helpers::{
    Remote, ServerProcess, binary_command, eventually, server_log, spawn_listening,
};

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
    start_with(dir, CONFIG)
}

/// The real binary with `config`.
fn start_with(dir: &tempfile::TempDir, config: &str) -> (ServerProcess, Remote) {
    let file = dir.path().join("eval.toml");
    std::fs::write(&file, config).unwrap();
    let mut command = binary_command(dir, &[]);
    command.arg("--config").arg(&file);
    let log = server_log(&mut command);
    command.stderr(log);
    let (child, address) = spawn_listening(command);
    (child, Remote::new(address))
}

/// Runs `eval/run.py` with `args` on the scripted sample against `server`:
/// what it printed, and the results it kept (`--out`).
async fn run_sample(
    dir: &tempfile::TempDir,
    server: &Remote,
    args: &[&str],
) -> (String, Vec<Value>) {
    let results = dir.path().join("results.jsonl");
    let address = server.address.clone();
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let out = results.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(eval_file("run.py"))
            .arg("--server")
            .arg(&address)
            .args(&args)
            .arg("--out")
            .arg(&out)
            .arg(eval_file("tasks/sample.jsonl"))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: Vec<Value> = std::fs::read_to_string(results)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (stdout, results)
}

/// The result of `task` in `mode` among `results`.
fn result<'a>(results: &'a [Value], task: &str, mode: &str) -> &'a Value {
    results
        .iter()
        .find(|r| r["task"] == task && r["mode"] == mode)
        .unwrap_or_else(|| panic!("no result for {task} {mode}"))
}

/// Which fields of an extraction's result were right.
fn fields_right(result: &Value) -> Value {
    Value::Object(
        result["field_results"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(name, field)| (name.clone(), field["right"].clone()))
            .collect(),
    )
}

#[tokio::test]
async fn the_task_set_runner_scores_the_scripted_sample() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start(&dir);
    let (stdout, results) = run_sample(&dir, &server, &["--one-shot"]).await;
    assert!(stdout.contains("harness: 3/6 passed"), "{stdout}");
    assert!(stdout.contains("one_shot: 1/2 passed"), "{stdout}");
    assert!(
        stdout.contains(
            "extraction, with schema: 10/18 fields right, 1/3 tasks fully right, \
             1 ended output_invalid"
        ),
        "{stdout}"
    );
    let passed = |task: &str, mode: &str| result(&results, task, mode)["passed"].clone();
    assert_eq!(passed("sample-solved", "harness"), true);
    assert_eq!(passed("sample-wrong", "harness"), false);
    assert_eq!(passed("sample-fact", "harness"), true);
    assert_eq!(passed("sample-solved", "one_shot"), true);
    assert_eq!(passed("sample-wrong", "one_shot"), false);
    // Extractions: the run's output, scored field by field.
    let right = result(&results, "sample-json-right", "harness");
    assert_eq!(
        (&right["passed"], &right["schema"], &right["fields_right"]),
        (&json!(true), &json!(true), &json!(6)),
        "{right}"
    );
    let wrong = result(&results, "sample-json-wrong", "harness");
    assert_eq!(
        (
            &wrong["passed"],
            &wrong["status"],
            &wrong["fields_right"],
            &wrong["fields"]
        ),
        (&json!(false), &json!("completed"), &json!(4), &json!(6)),
        "{wrong}"
    );
    // Case and spacing, 3.0 for 3, an array in another order: right.
    assert_eq!(
        fields_right(wrong),
        json!({"item": true, "quantity": true, "unit_price": true, "gift_wrap": false,
               "colour": false, "tags": true})
    );
    // Never valid output: the run failed, after the retries.
    let prose = result(&results, "sample-json-prose", "harness");
    assert_eq!(
        (
            &prose["status"],
            &prose["output_invalid"],
            &prose["fields_right"]
        ),
        (&json!("failed"), &json!(true), &json!(0)),
        "{prose}"
    );
    // The solved run ran the examples through the preset, and they passed.
    let solved = result(&results, "sample-solved", "harness");
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
async fn the_task_set_runner_reads_extractions_from_the_answer_without_a_schema() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start(&dir);
    let (stdout, results) =
        run_sample(&dir, &server, &["--no-schema", "--only", "^sample-json-"]).await;
    assert!(
        stdout.contains(
            "extraction, without schema: 10/18 fields right, 1/3 tasks fully right, \
             0 ended output_invalid"
        ),
        "{stdout}"
    );
    assert_eq!(results.len(), 3, "{stdout}");
    for extraction in &results {
        assert_eq!(extraction["schema"], false, "{extraction}");
        let run = server
            .get_json(&format!(
                "/v1/runs/{}",
                extraction["run_id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(
            (&run["output_schema"], &run["output"]),
            (&Value::Null, &Value::Null)
        );
    }
    // The fenced block of the answer is the document.
    let right = result(&results, "sample-json-right", "harness");
    assert_eq!(
        (&right["passed"], &right["fields_right"]),
        (&json!(true), &json!(6)),
        "{right}"
    );
    let wrong = result(&results, "sample-json-wrong", "harness");
    assert_eq!(
        fields_right(wrong),
        json!({"item": true, "quantity": true, "unit_price": true, "gift_wrap": false,
               "colour": false, "tags": true})
    );
    // An answer in prose completes the run, and scores nothing.
    let prose = result(&results, "sample-json-prose", "harness");
    assert_eq!(
        (
            &prose["status"],
            &prose["output_invalid"],
            &prose["fields_right"]
        ),
        (&json!("completed"), &json!(false), &json!(0)),
        "{prose}"
    );
    assert!(
        prose["detail"]
            .as_str()
            .unwrap()
            .contains("the answer is not JSON"),
        "{prose}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn the_task_set_runner_scores_each_attempt_on_its_own_workspace() {
    let dir = tempfile::tempdir().unwrap();
    // Attempts need a check preset: the task set's, checked after changes.
    let (mut child, server) = start_with(&dir, &format!("{CONFIG}check = true\n"));
    let (stdout, results) = run_sample(
        &dir,
        &server,
        &["--attempts", "2", "--only", "^sample-(solved|wrong)$"],
    )
    .await;
    assert!(stdout.contains("attempts-2: 1/2 passed"), "{stdout}");
    // Every attempt solves it: the first to pass its checks is chosen, and
    // whichever ended with its checks passing also passes the task's check.
    let solved = result(&results, "sample-solved", "attempts-2");
    assert_eq!(solved["passed"], true, "{solved}");
    let tried = solved["attempts"].as_array().unwrap();
    assert_eq!(tried.len(), 2, "{solved}");
    assert!(
        tried
            .iter()
            .any(|a| a["checks_passed"] == true && a["passed"] == true && a["seconds"].is_f64()),
        "{solved}"
    );
    // No attempt passes: the run fails, and so does each attempt, scored on
    // its own workspace.
    let wrong = result(&results, "sample-wrong", "attempts-2");
    assert_eq!(
        (&wrong["passed"], &wrong["status"]),
        (&json!(false), &json!("failed")),
        "{wrong}"
    );
    let tried = wrong["attempts"].as_array().unwrap();
    assert_eq!(
        tried.iter().map(|a| &a["attempt"]).collect::<Vec<_>>(),
        [1, 2],
        "{wrong}"
    );
    for attempt in tried {
        assert_eq!(
            (
                &attempt["status"],
                &attempt["checks_passed"],
                &attempt["passed"]
            ),
            (&json!("completed"), &json!(false), &json!(false)),
            "{wrong}"
        );
    }
    assert!(stdout.contains("#1 completed c=n t=n "), "{stdout}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn every_task_of_the_task_set_is_a_request_the_server_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start(&dir);
    for file in [
        "tasks/humaneval-0-81.jsonl",
        "tasks/own.jsonl",
        "tasks/extraction.jsonl",
        "tasks/extraction-terse.jsonl",
    ] {
        let tasks = std::fs::read_to_string(eval_file(file)).unwrap();
        let mut count = 0;
        for line in tasks.lines() {
            let task: Value = serde_json::from_str(line).unwrap();
            let mut request = task["request"].clone();
            // An extraction's model answers what is expected of it: its run
            // completes only if that is valid under the task's schema.
            let expected = &task["check"]["expect_json"];
            let answer = if expected.is_null() {
                "x".to_string()
            } else {
                expected.to_string()
            };
            request["model"] = json!({"scripted": [{"content": answer}]});
            let response = server
                .client
                .post(format!("{}/v1/runs", server.address))
                .json(&request)
                .send()
                .await
                .unwrap();
            let status = response.status();
            let body = response.text().await.unwrap();
            assert_eq!(status, 201, "{} {}: {}", file, task["id"], body);
            assert!(task["check"].is_object(), "{}", task["id"]);
            if !expected.is_null() {
                assert!(request["output_schema"].is_object(), "{}", task["id"]);
                let created: Value = serde_json::from_str(&body).unwrap();
                let id = created["id"].as_str().unwrap();
                let run = eventually(&format!("{} to end", task["id"]), async || {
                    let run = server.get_json(&format!("/v1/runs/{id}")).await;
                    (run["status"] != "queued" && run["status"] != "running").then_some(run)
                })
                .await;
                assert_eq!(run["status"], "completed", "{}: {run}", task["id"]);
                assert_eq!(&run["output"], expected, "{}", task["id"]);
            }
            count += 1;
        }
        assert!(count > 0, "{file} has tasks");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
