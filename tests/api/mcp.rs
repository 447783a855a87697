//! Tools from MCP servers (SPEC section 10), against servers no one here
//! wrote: the reference server `@modelcontextprotocol/server-everything`
//! (installed from npm by `tests/mcp/install.sh`), over stdio under the
//! real sandbox and over streamable HTTP; and, for what it has no switch
//! for (dying at start, hanging, a bearer token), the small servers of
//! `tests/mcp/fixture.py`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent_runner::config::Config;
use agent_runner::mcp::McpServerConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{mock_openai_profile, mock_providers};

/// Debian's interpreter, for the fixtures: `/usr` is a sandbox read path.
const PYTHON: &str = "/usr/bin/python3";

/// The reference server's install folder (installed on first use).
fn everything_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| PathBuf::from(installed("tests/mcp/install.sh")))
}

fn everything_entry() -> PathBuf {
    everything_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

fn table(value: Value) -> McpServerConfig {
    serde_json::from_value(value).unwrap()
}

/// The reference server over stdio.
fn everything() -> McpServerConfig {
    table(json!({
        "command": "node",
        "args": [everything_entry(), "stdio"],
        "read_paths": [everything_dir()],
        "env": {"LOG_LEVEL": "warn"},
        "startup_timeout_ms": 20000
    }))
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

/// One of the fixture servers over stdio.
fn fixture(mode: &str) -> McpServerConfig {
    table(json!({
        "command": PYTHON,
        "args": [fixtures_dir().join("fixture.py"), mode],
        "read_paths": [fixtures_dir()],
    }))
}

async fn with_servers(servers: Vec<(&str, McpServerConfig)>) -> TestApp {
    with_servers_and(servers, |_| {}).await
}

async fn with_servers_and(
    servers: Vec<(&str, McpServerConfig)>,
    configure: impl FnOnce(&mut Config),
) -> TestApp {
    spawn_with(move |config| {
        for (name, server) in servers {
            config.mcp.insert(name.to_owned(), server);
        }
        configure(config);
    })
    .await
}

fn id(run: &Value) -> &str {
    run["id"].as_str().unwrap()
}

/// The processes whose working directory is `dir` (a run's workspace): its
/// stdio MCP servers.
fn processes_in(dir: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    // By the directory itself, not its name: a command sees its workspace
    // at /workspace, and that is the name its cwd link reads as.
    let here = std::fs::metadata(dir)
        .unwrap_or_else(|e| panic!("the workspace {} exists: {e}", dir.display()));
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cwd = std::fs::metadata(entry.path().join("cwd")).ok()?;
            // A zombie has no working directory; a live one in `dir` counts.
            (cwd.dev() == here.dev() && cwd.ino() == here.ino()).then_some(pid)
        })
        .collect()
}

fn workspace(app: &TestApp, run: &Value) -> PathBuf {
    app.dir.path().join("workspaces").join(id(run))
}

/// Waits until a process runs in the run's workspace (its server started).
async fn wait_for_server(app: &TestApp, run: &Value) {
    let dir = workspace(app, run);
    for _ in 0..1000 {
        // The workspace is made just before its servers start.
        if dir.exists() && !processes_in(&dir).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no MCP server started for run {}", id(run));
}

/// Asserts that no process is left in the run's workspace, once its end
/// (or pause) can be seen: it is told only after its servers are gone.
fn assert_server_gone(app: &TestApp, run: &Value, after: &str) {
    let left = processes_in(&workspace(app, run));
    assert!(
        left.is_empty(),
        "the MCP server outlived the run ({after}): {left:?}"
    );
}

/// Cancels a run, and asserts that it ends `aborted` promptly (in well
/// under the minute its call or its server's start would take).
async fn cancel_promptly(app: &TestApp, run: &Value) {
    let asked = Instant::now();
    let cancelled = app.delete(&format!("/v1/runs/{}", id(run))).await;
    assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{}", cancelled.text);
    let ended = app.wait_terminal(id(run)).await;
    assert_eq!(ended["status"], "aborted", "{ended}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "ended promptly ({:?})",
        asked.elapsed()
    );
}

/// Asserts that `message` is an error result whose content has `part`.
fn assert_error_result(message: &Value, part: &str) {
    assert_eq!(message["is_error"], true, "{message}");
    let content = message["content"].as_str().unwrap();
    assert!(content.contains(part), "{content}");
}

/// A tool result's content, as JSON.
fn content(message: &Value) -> Value {
    serde_json::from_str(message["content"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn the_reference_servers_tools_are_listed_and_called_over_stdio() {
    let app = with_servers(vec![("everything", everything())]).await;
    let listed = app.get("/v1/mcp").await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(
        listed.body,
        json!({"servers": [{"name": "everything", "transport": "stdio"}]})
    );

    let run = app
        .run_to_end(json!({
            "prompt": "use them",
            "mcp_servers": ["everything"],
            "tools": ["read_file"],
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("1", "mcp__everything__get-sum", json!({"a": 2, "b": 3})),
                    call("2", "mcp__everything__get-structured-content", json!({"location": "Chicago"})),
                    call("3", "mcp__everything__echo", json!({"message": 7})),
                    call("4", "mcp__everything__get-resource-reference", json!({"resourceId": -1})),
                    call("5", "mcp__everything__echo", json!({"message": "hi"})),
                ]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["mcp_servers"], json!(["everything"]));
    assert_eq!(run["tool_calls"], 5);
    let tools: Vec<&str> = run["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools[0], "read_file",
        "the built-in tools it asked for first"
    );
    for tool in [
        "mcp__everything__echo",
        "mcp__everything__get-sum",
        "mcp__everything__get-env",
        "mcp__everything__trigger-long-running-operation",
    ] {
        assert!(tools.contains(&tool), "{tool} in {tools:?}");
    }
    // As stored, not only as answered.
    assert_eq!(
        app.get(&format!("/v1/runs/{}", id(&run))).await.body["tools"],
        run["tools"]
    );

    let messages = app.messages(id(&run)).await;
    assert_eq!(messages.len(), 8, "{messages:?}");
    assert_eq!(messages[2]["is_error"], false);
    assert_eq!(
        content(&messages[2]),
        json!([{"type": "text", "text": "The sum of 2 and 3 is 5."}])
    );
    // Structured content is the result, when there is some.
    let weather = content(&messages[3]);
    assert!(weather["temperature"].is_number(), "{weather}");
    assert!(weather["conditions"].is_string(), "{weather}");
    // The schema (draft-07, as the server declares it) is enforced first.
    assert_eq!(messages[4]["is_error"], true);
    assert_eq!(
        messages[4]["content"],
        "Invalid arguments: $.message: expected string"
    );
    // `isError` makes an error result, its content the server's.
    assert_error_result(&messages[5], "Invalid resourceId");
    assert_eq!(
        content(&messages[6]),
        json!([{"type": "text", "text": "Echo: hi"}])
    );

    let events = app.events(id(&run)).await;
    let ends: Vec<(&str, bool)> = events
        .iter()
        .filter(|e| e.event == "tool_end")
        .map(|e| {
            (
                e.data["name"].as_str().unwrap(),
                e.data["is_error"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("mcp__everything__get-sum", false),
            ("mcp__everything__get-structured-content", false),
            ("mcp__everything__echo", true),
            ("mcp__everything__get-resource-reference", true),
            ("mcp__everything__echo", false),
        ]
    );
    assert_server_gone(&app, &run, "completed");
}

#[tokio::test]
async fn the_model_is_shown_each_tools_description_and_schema() {
    let (address, seen) = mock_providers().await;
    let app = with_servers_and(vec![("everything", everything())], |config| {
        config
            .models
            .insert("oa".into(), mock_openai_profile(&address));
    })
    .await;
    let run = app
        .run_to_end(json!({
            "prompt": "hello", "model": {"profile": "oa"}, "tools": [],
            "mcp_servers": ["everything"]
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = seen.lock().unwrap().clone();
    let sum = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__everything__get-sum")
        .expect("get-sum is offered")
        .clone();
    assert!(
        sum["function"]["description"]
            .as_str()
            .unwrap()
            .contains("sum"),
        "{sum}"
    );
    let parameters = &sum["function"]["parameters"];
    assert_eq!(parameters["type"], "object");
    assert_eq!(parameters["properties"]["a"]["type"], "number");
    assert_eq!(parameters["required"], json!(["a", "b"]));
    assert!(
        parameters.get("$schema").is_none(),
        "the dialect stays with the check: {parameters}"
    );
}

#[tokio::test]
async fn the_servers_secrets_never_reach_an_mcp_server() {
    let dir = tempfile::tempdir().unwrap();
    let args = serde_json::to_string(&json!([everything_entry(), "stdio"])).unwrap();
    let read_paths = serde_json::to_string(&json!([everything_dir()])).unwrap();
    let secret = "sk-live-0123456789abcdef";
    let (mut server, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_MCP__EVERYTHING__COMMAND", "node"),
            ("AGENT_RUNNER_MCP__EVERYTHING__ARGS", &args),
            ("AGENT_RUNNER_MCP__EVERYTHING__READ_PATHS", &read_paths),
            (
                "AGENT_RUNNER_MCP__EVERYTHING__ENV",
                "{ LOG_LEVEL = \"warn\" }",
            ),
            ("OPENAI_API_KEY", secret),
            ("DOCS_MCP_TOKEN", secret),
        ],
    );
    let remote = Remote::new(address);
    let run = remote
        .post_json(
            "/v1/runs?wait=true",
            &json!({
                "prompt": "what is set?",
                "mcp_servers": ["everything"],
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("1", "mcp__everything__get-env", json!({}))]},
                    {"content": "done"}
                ]}
            }),
        )
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let messages = remote
        .get_json(&format!("/v1/runs/{}/messages", id(&run)))
        .await;
    let blocks: Value =
        serde_json::from_str(messages["messages"][2]["content"].as_str().unwrap()).unwrap();
    let env: Value = serde_json::from_str(blocks[0]["text"].as_str().unwrap()).unwrap();
    let names: Vec<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for name in &names {
        assert!(
            ["PATH", "HOME", "LANG", "TZ", "TMPDIR", "LOG_LEVEL"].contains(name),
            "{name} reached the MCP server: {env}"
        );
    }
    assert_eq!(env["LOG_LEVEL"], "warn", "the configured env is added");
    assert!(!env.to_string().contains(secret), "{env}");
    // Its HOME is its own, not the run's files.
    assert_eq!(env["HOME"], env["TMPDIR"]);
    assert!(
        !env["HOME"]
            .as_str()
            .unwrap()
            .starts_with(dir.path().to_str().unwrap())
    );
    terminate(&mut server);
}

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
async fn a_call_of_an_mcp_tool_can_wait_for_approval() {
    let app = with_servers(vec![("everything", everything())]).await;
    let run = app
        .create_run(json!({
            "prompt": "add", "mcp_servers": ["everything"],
            "approval": {"tools": ["mcp__everything__get-sum"]},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("1", "mcp__everything__get-sum", json!({"a": 1, "b": 1}))]},
                {"content": "two"}
            ]}
        }))
        .await;
    let paused = app.wait_status(id(&run), "requires_action").await;
    assert_eq!(
        paused["pending_actions"][0]["name"],
        "mcp__everything__get-sum"
    );
    // A paused run holds no server.
    assert_server_gone(&app, &run, "paused");
    let answered = app
        .send(
            app.request(
                reqwest::Method::POST,
                &format!("/v1/runs/{}/actions", id(&run)),
            )
            .json(&json!({"actions": [{"call_id": "1", "decision": "approve"}]})),
        )
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    let ended = app.wait_terminal(id(&run)).await;
    assert_eq!(ended["status"], "completed", "{ended}");
    let messages = app.messages(id(&run)).await;
    assert_eq!(
        content(&messages[2]),
        json!([{"type": "text", "text": "The sum of 1 and 1 is 2."}]),
        "approved, it ran on the resumed run's server"
    );
    assert_server_gone(&app, &run, "completed after a pause");
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

#[tokio::test]
async fn tools_narrows_a_servers_tools_and_the_request_is_checked() {
    let app = with_servers(vec![("everything", everything())]).await;
    let run = app
        .run_to_end(json!({
            "prompt": "go", "mcp_servers": ["everything"],
            "tools": ["list_dir", "mcp__everything__echo"],
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("1", "mcp__everything__get-sum", json!({"a": 1, "b": 2}))]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["tools"], json!(["list_dir", "mcp__everything__echo"]));
    let messages = app.messages(id(&run)).await;
    assert_eq!(
        messages[2]["content"], "Unknown tool: mcp__everything__get-sum",
        "a tool left out is not the run's"
    );

    for (request, field) in [
        (
            json!({"mcp_servers": ["nope"]}),
            "mcp_servers: unknown MCP server \"nope\"",
        ),
        (
            json!({"mcp_servers": ["everything", "everything"]}),
            "mcp_servers",
        ),
        (
            json!({"tools": ["mcp__everything__echo"]}),
            "tools: \"mcp__everything__echo\"",
        ),
        (
            json!({"mcp_servers": ["everything"], "tools": ["mcp__other__echo"]}),
            "tools: \"mcp__other__echo\"",
        ),
        (
            json!({"approval": {"tools": ["mcp__everything__echo"]}}),
            "approval.tools",
        ),
        (
            json!({"mcp_servers": ["everything"], "tools": ["mcp__everything__get-sum"],
                   "approval": {"tools": ["mcp__everything__echo"]}}),
            "approval.tools: \"mcp__everything__echo\"",
        ),
        (
            json!({"client_tools": [{"name": "mcp__everything__mine"}]}),
            "client_tools[0].name",
        ),
    ] {
        let mut body = json!({"prompt": "go"});
        body.as_object_mut()
            .unwrap()
            .extend(request.as_object().unwrap().clone());
        let reply = app.post_run(body).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{request}");
        assert_eq!(reply.error_code(), "invalid_request");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{request}: {message}");
    }
    let runs = app.get("/v1/runs").await.body;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "nothing created");
}

/// Starts the reference server in its streamable HTTP mode on a free
/// port: its process (killed when dropped) and its endpoint.
async fn everything_over_http() -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new("node")
        .arg(everything_entry())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..1000 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (child, format!("http://127.0.0.1:{port}/mcp"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the reference server did not listen on {port}");
}

#[tokio::test]
async fn the_reference_server_over_streamable_http() {
    let (_server, url) = everything_over_http().await;
    let app = with_servers(vec![("web", table(json!({"url": url})))]).await;
    assert_eq!(
        app.get("/v1/mcp").await.body,
        json!({"servers": [{"name": "web", "transport": "streamable_http"}]})
    );
    let run = app
        .run_to_end(json!({
            "prompt": "add", "mcp_servers": ["web"], "tools": [],
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("1", "mcp__web__get-sum", json!({"a": 20, "b": 22})),
                    call("2", "mcp__web__get-structured-content", json!({"location": "New York"})),
                ]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let messages = app.messages(id(&run)).await;
    assert_eq!(
        content(&messages[2]),
        json!([{"type": "text", "text": "The sum of 20 and 22 is 42."}])
    );
    assert!(content(&messages[3])["temperature"].is_number());
}

/// The fixture's HTTP server, asking for `token`, in a folder of its own
/// (where it logs what it was sent); its URL.
async fn fixture_over_http(token: &str) -> (tokio::process::Child, String, tempfile::TempDir) {
    let fixtures = tempfile::tempdir().unwrap();
    let port_file = fixtures.path().join("port");
    let server = tokio::process::Command::new(PYTHON)
        .arg(fixtures_dir().join("fixture.py"))
        .args(["http", port_file.to_str().unwrap(), token])
        .current_dir(fixtures.path())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut port = String::new();
    for _ in 0..1000 {
        if let Ok(text) = std::fs::read_to_string(&port_file) {
            port = text;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!port.is_empty(), "the fixture listens");
    (server, format!("http://127.0.0.1:{port}/mcp"), fixtures)
}

#[tokio::test]
async fn an_http_server_gets_the_bearer_token_from_its_variable() {
    let token = "mcp-token-5f1d2e";
    let (_server, url, fixtures) = fixture_over_http(token).await;

    for (given, works) in [(token, true), ("not-the-token-3a9c", false)] {
        let dir = tempfile::tempdir().unwrap();
        let (mut server, address) = start_binary_with(
            &dir,
            &[
                ("AGENT_RUNNER_MCP__DOCS__URL", &url),
                ("AGENT_RUNNER_MCP__DOCS__BEARER_TOKEN_ENV", "DOCS_MCP_TOKEN"),
                ("DOCS_MCP_TOKEN", given),
            ],
        );
        let remote = Remote::new(address);
        let listed = remote.get_json("/v1/mcp").await;
        assert!(
            !listed.to_string().contains(given),
            "never a token: {listed}"
        );
        let run = remote
            .post_json(
                "/v1/runs?wait=true",
                &json!({
                    "prompt": "record", "mcp_servers": ["docs"],
                    "model": {"scripted": [
                        {"content": "", "tool_calls": [call("1", "mcp__docs__record", json!({"n": 5}))]},
                        {"content": "done"}
                    ]}
                }),
            )
            .await;
        if works {
            assert_eq!(run["status"], "completed", "{run}");
            let messages = remote
                .get_json(&format!("/v1/runs/{}/messages", id(&run)))
                .await;
            assert_eq!(messages["messages"][2]["is_error"], false, "{messages}");
            let closed = std::fs::read_to_string(fixtures.path().join("sessions.log"))
                .expect("the session was closed");
            assert_eq!(closed, "closed fixture-session\n", "one close per run");
        } else {
            assert_eq!(run["status"], "failed", "{run}");
            let error = run["error"].as_str().unwrap();
            assert!(
                error.starts_with("MCP server docs failed to start"),
                "{error}"
            );
            assert!(!error.contains(given), "the token is never shown: {error}");
        }
        terminate(&mut server);
    }
}

#[tokio::test]
async fn an_http_servers_requests_carry_the_runs_traceparent() {
    let token = "mcp-token-77c0a1";
    let (_server, url, fixtures) = fixture_over_http(token).await;
    let dir = tempfile::tempdir().unwrap();
    // Traces on (to a collector that is not there: spans are made all the
    // same, and dropped).
    let collector = format!("http://127.0.0.1:{}", free_port());
    let (_agent, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_MCP__DOCS__URL", &url),
            ("AGENT_RUNNER_MCP__DOCS__BEARER_TOKEN_ENV", "DOCS_MCP_TOKEN"),
            ("DOCS_MCP_TOKEN", token),
            ("AGENT_RUNNER_TRACING__OTLP_ENDPOINT", &collector),
        ],
    );
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = "00f067aa0ba902b7";
    let run: Value = http_client()
        .post(format!("{address}/v1/runs?wait=true"))
        .header("traceparent", format!("00-{trace_id}-{caller}-01"))
        .json(&json!({
            "prompt": "record", "mcp_servers": ["docs"],
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("1", "mcp__docs__record", json!({"n": 5}))]},
                {"content": "done"}
            ]}
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    // Every request of the session (initialize, the list, the call) is a
    // child of the run's span, in the caller's trace.
    let sent = std::fs::read_to_string(fixtures.path().join("traceparents.log")).unwrap();
    let lines: Vec<&str> = sent.lines().collect();
    assert!(lines.len() >= 3, "{sent}");
    for line in &lines {
        let parts: Vec<&str> = line.split('-').collect();
        assert_eq!(parts.len(), 4, "{sent}");
        assert_eq!(
            (parts[0], parts[1], parts[3]),
            ("00", trace_id, "01"),
            "{sent}"
        );
        assert_ne!(parts[2], caller, "the run's own span: {sent}");
    }
    assert!(lines.iter().all(|line| line == &lines[0]), "{sent}");
}
