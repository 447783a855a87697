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

mod http;
mod lifecycle;

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
