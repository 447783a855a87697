//! The design's scenarios, end to end through scripted models.

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_bare_prompt_runs_end_to_end_with_the_demo_model() {
    let app = spawn_app().await;
    let run = app.run_to_end(json!({"prompt": "hi"})).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["model"]["provider"], "scripted");
    assert_eq!(run["model"]["profile"], "demo");
    assert!(run["answer"].as_str().is_some_and(|a| !a.is_empty()));
    assert_eq!(run["steps"], 2);
    assert_eq!(run["tool_calls"], 1);
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(messages[0], json!({"role": "user", "content": "hi"}));
    assert_eq!(messages.len(), 4);
    // Its run_start says what it started with.
    let events = app.events(run["id"].as_str().unwrap()).await;
    let start = &events[0].data;
    assert_eq!(start["type"], "run_start");
    assert_eq!(start["model"], run["model"]);
    assert_eq!(start["limits"], run["limits"]);
    assert_eq!(start["tools"], run["tools"]);
}

#[tokio::test]
async fn a_model_named_alone_is_its_profile() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(json!({"prompt": "hi", "model": "demo"}))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["model"]["profile"], "demo");
    let unknown = app.post_run(json!({"prompt": "hi", "model": "nope"})).await;
    assert_eq!(unknown.status, 422, "{}", unknown.text);
    let message = unknown.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("unknown model profile \"nope\""),
        "{message}"
    );
    for wrong in [json!(7), json!(["demo"]), json!({"name": "demo"})] {
        let refused = app.post_run(json!({"prompt": "hi", "model": wrong})).await;
        assert!(
            refused.status == 400 || refused.status == 422,
            "{wrong}: {}",
            refused.text
        );
        assert!(refused.text.contains("model"), "{}", refused.text);
    }
}

#[tokio::test]
async fn a_tool_then_an_answer_is_recorded_whole() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(json!({
            "prompt": "read it",
            "workspace": {"files": {"notes/todo.txt": "buy milk"}},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("c1", "read_file", json!({"path": "notes/todo.txt"}))]},
                {"content": "You must buy milk", "usage": {"input_tokens": 12, "output_tokens": 3}}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["answer"], "You must buy milk");
    assert_eq!(
        run["usage"],
        json!({"input_tokens": 12, "output_tokens": 3, "model_calls_with_usage": 1,
               "cached_input_tokens": 0, "cache_write_tokens": 0, "cost_usd": null})
    );
    let id = run["id"].as_str().unwrap();
    assert_eq!(
        app.messages(id).await,
        vec![
            json!({"role": "user", "content": "read it"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "notes/todo.txt"}}]}),
            json!({"role": "tool", "call_id": "c1", "content": "\"buy milk\"", "is_error": false}),
            json!({"role": "assistant", "content": "You must buy milk"}),
        ]
    );
}

#[tokio::test]
async fn an_unknown_tool_and_invalid_arguments_are_answered_to_the_model() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(json!({
            "prompt": "go",
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("a", "rm_rf", json!({})),
                    call("b", "read_file", json!({"path": 7, "mode": "x"}))
                ]},
                {"content": "sorry"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["tool_calls"], 2);
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(
        messages[2],
        json!({"role": "tool", "call_id": "a", "content": "Unknown tool: rm_rf", "is_error": true})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "call_id": "b", "content": "Invalid arguments: $.path: expected string; $.mode: unexpected property", "is_error": true})
    );
}

#[tokio::test]
async fn limits_end_runs_with_their_statuses() {
    let app = spawn_app().await;
    let looping: Vec<_> = (0..5)
        .map(|i| json!({"content": "", "tool_calls": [call(&format!("c{i}"), "list_dir", json!({}))]}))
        .collect();
    let run = app
        .run_to_end(
            json!({"prompt": "loop", "model": {"scripted": looping}, "limits": {"max_steps": 2}}),
        )
        .await;
    assert_eq!(run["status"], "step_limit");
    assert_eq!(run["steps"], 2);

    let run = app
        .run_to_end(json!({
            "prompt": "many",
            "limits": {"max_tool_calls": 1},
            "model": {"scripted": [{"content": "", "tool_calls": [call("a", "list_dir", json!({})), call("b", "list_dir", json!({}))]}]}
        }))
        .await;
    assert_eq!(run["status"], "tool_limit");
    assert_eq!(run["tool_calls"], 0);
    assert_eq!(app.messages(run["id"].as_str().unwrap()).await.len(), 1);

    let run = app
        .run_to_end(json!({
            "prompt": "a long prompt that does not fit",
            "context": {"max_context_chars": 10},
            "model": {"scripted": [{"content": "x"}]}
        }))
        .await;
    assert_eq!(run["status"], "context_limit");
    assert!(run["error"].as_str().unwrap().contains("too small"));

    let run = app
        .run_to_end(json!({
            "prompt": "slow",
            "limits": {"timeout_ms": 100},
            "model": {"scripted": [{"delay_ms": 10000, "content": "late"}]}
        }))
        .await;
    assert_eq!(run["status"], "timeout");
}

#[tokio::test]
async fn model_errors_and_malformed_responses_end_runs_with_model_error() {
    let app = spawn_app().await;
    let cases = [
        (
            json!([{"error": "provider unavailable"}]),
            "provider unavailable",
        ),
        (json!([]), "Scripted model exhausted"),
        (
            json!(["just text"]),
            "Invalid model response: response must be an object",
        ),
        (
            json!([{"content": 5}]),
            "Invalid model response: content must be a string",
        ),
        (
            json!([{"content": "", "tool_calls": [call("1", "list_dir", json!({})), call("1", "list_dir", json!({}))]}]),
            "Invalid model response: duplicate tool call id: 1",
        ),
    ];
    for (script, error) in cases {
        let run = app
            .run_to_end(json!({"prompt": "x", "model": {"scripted": script}}))
            .await;
        assert_eq!(run["status"], "model_error", "{run}");
        assert_eq!(run["error"], error);
        assert_eq!(run["tool_calls"], 0);
    }
}

#[tokio::test]
async fn a_written_file_can_be_listed_and_downloaded() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(two_step(
            "write_file",
            json!({"path": "out.txt", "content": "hello file"}),
            "written",
        ))
        .await;
    assert_eq!(run["status"], "completed");
    let id = run["id"].as_str().unwrap();
    let listing = app.get(&format!("/v1/runs/{id}/workspace")).await;
    assert_eq!(
        listing.body,
        json!({"files": [{"path": "out.txt", "size": 10}], "truncated": false})
    );
    let file = app.get(&format!("/v1/runs/{id}/workspace/out.txt")).await;
    assert_eq!(file.status, 200);
    assert_eq!(file.text, "hello file");
    let missing = app.get(&format!("/v1/runs/{id}/workspace/nope.txt")).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "not_found");
    let escape = app
        .get(&format!("/v1/runs/{id}/workspace/..%2F..%2Fetc%2Fpasswd"))
        .await;
    assert_eq!(escape.status, 400, "{}", escape.text);
    assert_eq!(escape.error_code(), "invalid_path");
}

/// A run that only reads has no directory of its own: its reads see an
/// empty workspace, with the same answers (and refusals) as any other, and
/// its workspace lists empty.
#[tokio::test]
async fn a_run_that_never_writes_reads_an_empty_workspace_and_makes_no_directory() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(json!({
            "prompt": "look",
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("1", "list_dir", json!({})),
                    call("2", "read_file", json!({"path": "a.txt"})),
                    call("3", "read_file", json!({"path": "../escape"}))
                ]},
                {"content": "nothing here"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let id = run["id"].as_str().unwrap();
    let results: Vec<serde_json::Value> = app
        .messages(id)
        .await
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results[0]["content"], "{\"entries\":[]}");
    assert_eq!(results[0]["is_error"], false);
    assert!(
        results[1]["content"] == "No such file or directory: a.txt",
        "{}",
        results[1]
    );
    assert!(
        results[2]["content"]
            .as_str()
            .unwrap()
            .starts_with("Path is outside the workspace"),
        "{}",
        results[2]
    );
    assert!(!app.dir.path().join("workspaces").join(id).exists());
    let listing = app.get(&format!("/v1/runs/{id}/workspace")).await;
    assert_eq!(listing.body, json!({"files": [], "truncated": false}));
    let missing = app.get(&format!("/v1/runs/{id}/workspace/a.txt")).await;
    assert_eq!(missing.status, 404);
}

#[tokio::test]
async fn a_symlink_a_command_planted_is_never_followed_by_a_download() {
    let app = spawn_with(|config| {
        config.commands.insert(
            "plant".into(),
            toml::from_str("program = \"ln\"\nargs = [\"-s\", \"/etc/passwd\", \"leak\"]").unwrap(),
        );
    })
    .await;
    let run = app
        .run_to_end(json!({
            "prompt": "plant",
            "commands": ["plant"],
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("c1", "run_command", json!({"command": "plant"}))]},
                {"content": "planted"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed");
    let id = run["id"].as_str().unwrap();
    assert!(
        app.dir
            .path()
            .join("workspaces")
            .join(id)
            .join("leak")
            .is_symlink()
    );
    let download = app.get(&format!("/v1/runs/{id}/workspace/leak")).await;
    assert_eq!(download.status, 400, "{}", download.text);
    assert_eq!(download.error_code(), "invalid_path");
    assert!(!download.text.contains("root:"));
    let listing = app.get(&format!("/v1/runs/{id}/workspace")).await;
    assert_eq!(
        listing.body,
        json!({"files": [], "truncated": false}),
        "symlinks are not listed"
    );
}
