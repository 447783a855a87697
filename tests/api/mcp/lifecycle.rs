//! An MCP server's process and its calls over a run's life: gone after
//! every kind of end, a long call cancelled, a call past its timeout, a
//! server that fails to start, a stop while servers start.

use std::time::Duration;

use serde_json::json;

use super::*;

#[tokio::test]
async fn the_server_process_is_gone_after_every_kind_of_run_end() {
    let app = with_servers(vec![("everything", everything())]).await;
    let long = |duration: u64| {
        call(
            "long",
            "mcp__everything__trigger-long-running-operation",
            json!({"duration": duration, "steps": duration}),
        )
    };

    // Alive while the run is, gone at its end, whatever the end.
    for (limits, script, status) in [
        (
            json!({}),
            json!([{"delay_ms": 300, "content": "done"}]),
            "completed",
        ),
        (
            json!({"timeout_ms": 1500}),
            json!([{"content": "", "tool_calls": [long(30)]}, {"content": "done"}]),
            "timeout",
        ),
        (
            json!({}),
            json!([{"delay_ms": 300, "error": "the provider is down"}]),
            "model_error",
        ),
    ] {
        let run = app
            .create_run(json!({
                "prompt": "wait", "mcp_servers": ["everything"], "limits": limits,
                "model": {"scripted": script}
            }))
            .await;
        wait_for_server(&app, &run).await;
        assert_eq!(app.wait_terminal(id(&run)).await["status"], status);
        assert_server_gone(&app, &run, status);
    }

    // The server shutting down: the run (not to be resumed) is
    // interrupted, its server killed.
    let run = app
        .create_run(json!({
            "prompt": "wait", "mcp_servers": ["everything"], "limits": {"max_resumes": 0},
            "model": {"scripted": [{"content": "", "tool_calls": [long(60)]}, {"content": "done"}]}
        }))
        .await;
    wait_for_server(&app, &run).await;
    let dir = workspace(&app, &run);
    let data = app.stop().await;
    assert!(
        processes_in(&dir).is_empty(),
        "the MCP server outlived the server's shutdown"
    );
    let config = crate::helpers::test_config(&data);
    let again = spawn_in(data, config).await;
    let ended = again.get(&format!("/v1/runs/{}", id(&run))).await.body;
    assert_eq!(ended["status"], "interrupted", "{ended}");
}

#[tokio::test]
async fn a_long_call_is_cancelled_promptly_by_delete() {
    let app = with_servers(vec![("everything", everything())]).await;
    let run = app
        .create_run(json!({
            "prompt": "wait", "mcp_servers": ["everything"],
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("long", "mcp__everything__trigger-long-running-operation",
                                                    json!({"duration": 60, "steps": 60}))]},
                {"content": "done"}
            ]}
        }))
        .await;
    // Wait for the call to be in flight.
    let mut started = false;
    for _ in 0..1000 {
        let events = app
            .get(&format!("/v1/runs/{}/messages", id(&run)))
            .await
            .body;
        if events["messages"].as_array().is_some_and(|m| m.len() >= 2) {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(started, "the model's call was recorded");
    wait_for_server(&app, &run).await;
    cancel_promptly(&app, &run).await;
    let messages = app.messages(id(&run)).await;
    assert_eq!(messages[2]["is_error"], true, "{messages:?}");
    assert_server_gone(&app, &run, "aborted");
}

#[tokio::test]
async fn a_call_past_its_timeout_is_cancelled_and_invalid_ones_never_reach_the_server() {
    let mut calls = fixture("calls");
    calls.tool_timeout_ms = 300;
    let app = with_servers(vec![("fx", calls)]).await;
    let run = app
        .run_to_end(json!({
            "prompt": "go", "mcp_servers": ["fx"],
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("1", "mcp__fx__record", json!({"n": 1})),
                    call("2", "mcp__fx__record", json!({"n": "two"})),
                    call("3", "mcp__fx__record", json!({"n": 3, "extra": true})),
                    call("4", "mcp__fx__wait", json!({})),
                ]},
                // Time for the server to note the cancel before the run ends.
                {"delay_ms": 500, "content": "done"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let messages = app.messages(id(&run)).await;
    assert_eq!(
        content(&messages[2]),
        json!([{"type": "text", "text": "recorded 1"}])
    );
    assert_eq!(
        messages[3]["content"],
        "Invalid arguments: $.n: expected integer"
    );
    assert_eq!(
        messages[4]["content"],
        "Invalid arguments: $.extra: unexpected property"
    );
    assert_error_result(&messages[5], "did not answer wait within 300 ms");
    let file = |name: &str| format!("/v1/runs/{}/workspace/{name}", id(&run));
    let recorded = app.get(&file("calls.log")).await;
    assert_eq!(
        recorded.text, "1\n",
        "only the valid call reached the server"
    );
    let cancelled = app.get(&file("cancelled.log")).await;
    assert_eq!(
        cancelled.status,
        StatusCode::OK,
        "notifications/cancelled was sent"
    );
    assert_eq!(cancelled.text.lines().count(), 1, "{}", cancelled.text);
}

#[tokio::test]
async fn a_server_that_fails_to_start_fails_the_run_naming_it() {
    let mut hangs = fixture("hangs");
    hangs.startup_timeout_ms = 500;
    let missing = table(json!({"command": "/nonexistent/mcp-server"}));
    let app = with_servers(vec![
        ("broken", fixture("dies")),
        ("slow", hangs),
        ("missing", missing),
        ("everything", everything()),
    ])
    .await;
    let start = |server: &str| {
        json!({
            "prompt": "go", "mcp_servers": [server],
            "model": {"scripted": [{"content": "never asked"}]}
        })
    };

    let run = app.run_to_end(start("broken")).await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.starts_with("MCP server broken failed to start"),
        "{error}"
    );
    assert!(error.contains("exited with code 3"), "{error}");
    assert!(
        error.contains("fixture: cannot start: FIXTURE_DATABASE is not set"),
        "its stderr's last lines: {error}"
    );
    assert_eq!(run["steps"], 0, "before the first model call");
    let events = app.events(id(&run)).await;
    assert!(
        events.iter().all(|e| e.event != "model_start"),
        "{events:?}"
    );
    assert_eq!(events.last().unwrap().event, "run_end");
    assert_server_gone(&app, &run, "a server that died at start");

    let run = app.run_to_end(start("slow")).await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.contains("MCP server slow failed to start") && error.contains("within 500 ms"),
        "{error}"
    );
    assert_server_gone(&app, &run, "a start that timed out");

    let run = app.run_to_end(start("missing")).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/mcp-server: program not found"),
        "{run}"
    );
    assert_server_gone(&app, &run, "a program not found");

    // A tool the request names that the server does not list.
    let run = app
        .run_to_end(json!({
            "prompt": "go", "mcp_servers": ["everything"],
            "tools": ["mcp__everything__no-such-tool"],
            "model": {"scripted": [{"content": "never asked"}]}
        }))
        .await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.contains("has no tool mcp__everything__no-such-tool")
            && error.contains("mcp__everything__echo"),
        "{error}"
    );
    assert_server_gone(&app, &run, "a named tool it lacks");

    // Nor one that approval.tools names.
    let run = app
        .run_to_end(json!({
            "prompt": "go", "mcp_servers": ["everything"],
            "approval": {"tools": ["mcp__everything__no-such-tool"]},
            "model": {"scripted": [{"content": "never asked"}]}
        }))
        .await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .starts_with("approval.tools: the MCP server everything has no tool"),
        "{run}"
    );
    assert_server_gone(&app, &run, "an approval of a tool it lacks");
}

#[tokio::test]
async fn a_stop_or_the_deadline_while_servers_start_ends_the_run_at_once() {
    let mut hangs = fixture("hangs");
    hangs.startup_timeout_ms = 60_000;
    let app = with_servers(vec![("slow", hangs)]).await;
    let start = |limits: Value| {
        json!({
            "prompt": "go", "mcp_servers": ["slow"], "limits": limits,
            "model": {"scripted": [{"content": "never asked"}]}
        })
    };
    let run = app.create_run(start(json!({}))).await;
    wait_for_server(&app, &run).await;
    cancel_promptly(&app, &run).await;
    assert_server_gone(&app, &run, "cancelled while starting");

    // Starting is running time: the run's own deadline bounds it.
    let run = app.run_to_end(start(json!({"timeout_ms": 700}))).await;
    assert_eq!(run["status"], "timeout", "{run}");
    assert_eq!(run["steps"], 0);
    assert_server_gone(&app, &run, "timed out while starting");
}
