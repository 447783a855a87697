//! A real provider profile through the whole service: an OpenAI-compatible
//! mock on loopback, a key in the server's environment, streaming on. The key
//! reaches the provider and nothing else: no stored row, no event, no log
//! line, no tool command.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};

use crate::helpers::*;

const KEY: &str = "sk-test-4f1d2c9a8b7e6d5c";

fn chunk(delta: Value, finish_reason: Option<&str>) -> String {
    let event = json!({
        "id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
        "model": "mock-model",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]
    });
    format!("data: {event}\n\n")
}

#[derive(Default)]
struct Seen {
    authorizations: Vec<String>,
    requests: Vec<Value>,
}

/// Answers the first call with a `run_command` call and the second with text
/// in pieces, both streamed as Chat Completions chunks.
async fn completions(
    State(seen): State<Arc<Mutex<Seen>>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> impl IntoResponse {
    let request: Value = serde_json::from_slice(&body).unwrap();
    let step = {
        let mut seen = seen.lock().unwrap();
        seen.authorizations.push(
            headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default(),
        );
        seen.requests.push(request);
        seen.requests.len()
    };
    let mut body = chunk(json!({"role": "assistant", "content": ""}), None);
    if step == 1 {
        body += &chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                   "function": {"name": "run_command", "arguments": ""}}]}),
            None,
        );
        body += &chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\": \"env\"}"}}]}),
            None,
        );
        body += &chunk(json!({}), Some("tool_calls"));
    } else {
        for piece in ["The environment ", "is ", "clean."] {
            body += &chunk(json!({"content": piece}), None);
        }
        body += &chunk(json!({}), Some("stop"));
    }
    body += "data: [DONE]\n\n";
    ([("content-type", "text/event-stream")], body)
}

#[tokio::test]
async fn a_key_reaches_the_provider_and_nothing_else() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mock = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock_address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, mock).await });

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent-runner.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
bind = "127.0.0.1:0"
[storage]
database_url = "sqlite://{dir}/runs.db"
workspaces_dir = "{dir}/workspaces"
[runs]
default_model = "mock"
[commands.env]
program = "env"
[models.mock]
kind = "openai"
base_url = "http://{mock_address}/v1"
model = "mock-model"
api_key_env = "MOCK_PROVIDER_KEY"
stream = true
"#,
            dir = dir.path().display()
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-runner"));
    command
        .args(["serve", "--config"])
        .arg(&config)
        .env("MOCK_PROVIDER_KEY", KEY)
        .env("RUST_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut server, address, log_reader) = spawn_logging(command);

    let remote = Remote::new(address);
    let run = remote
        .post_json(
            "/v1/runs",
            &json!({"prompt": "check the environment", "commands": ["env"]}),
        )
        .await;
    let id = run["id"].as_str().unwrap();
    let (events, _) = read_sse(remote.get(&format!("/v1/runs/{id}/events")).await).await;
    let run = remote.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "The environment is clean.");
    assert_eq!(
        run["model"],
        json!({"provider": "openai", "profile": "mock", "name": "mock-model"})
    );

    // Streamed text arrives live, without ids, and is not stored.
    let deltas: Vec<_> = events.iter().filter(|e| e.event == "model_delta").collect();
    assert!(!deltas.is_empty());
    assert!(deltas.iter().all(|e| e.id.is_none()));
    let text: String = deltas
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "The environment is clean.");
    let sequenced: Vec<_> = events.iter().filter_map(|e| e.id).collect();
    assert_eq!(sequenced, (1..=sequenced.len() as u64).collect::<Vec<_>>());

    // The provider got the key; the tool call id went round.
    {
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.authorizations,
            [format!("Bearer {KEY}"), format!("Bearer {KEY}")]
        );
        let second = &seen.requests[1]["messages"];
        assert!(second.to_string().contains("call_abc"));
    }
    let messages = remote.get_json(&format!("/v1/runs/{id}/messages")).await;
    let tool_output = messages["messages"][2]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        tool_output.contains("HOME="),
        "the command ran: {tool_output}"
    );
    assert!(!tool_output.contains("MOCK_PROVIDER_KEY"), "{tool_output}");

    assert!(terminate(&mut server).success());
    let logs = log_reader.join().unwrap();
    assert!(logs.contains(id), "the logs name the run");

    let mut everything = logs;
    everything.push_str(
        &serde_json::to_string(&events.iter().map(|e| &e.data).collect::<Vec<_>>()).unwrap(),
    );
    everything.push_str(&tool_output);
    everything.push_str(&run.to_string());
    for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            everything.push_str(&String::from_utf8_lossy(
                &std::fs::read(entry.path()).unwrap(),
            ));
        }
    }
    assert!(!everything.contains(KEY), "the key leaked");
    assert!(!everything.contains(&KEY[3..15]), "part of the key leaked");
}

/// A provider's error that quotes the key where the error is cut (300
/// characters): the key is taken out before the cut, so not even its start
/// reaches the run's error, its `model_error` event or the log.
#[tokio::test]
async fn a_key_quoted_across_the_cut_of_a_providers_error_leaves_nothing() {
    async fn refuse() -> impl IntoResponse {
        let message = format!("{} {KEY} was refused", "x".repeat(280));
        (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": {"type": "server_error", "message": message}})),
        )
    }
    let mock = Router::new().route("/v1/chat/completions", post(refuse));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock_address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, mock).await });
    let dir = tempfile::tempdir().unwrap();
    let profile = format!(
        "{{kind = \"openai\", base_url = \"http://{mock_address}/v1\", model = \"m\", \
         api_key_env = \"MOCK_PROVIDER_KEY\", max_attempts = 1}}"
    );
    let mut command = binary_command(&dir, &[("AGENT_RUNNER_MODELS__MOCK", profile.as_str())]);
    command
        .env("MOCK_PROVIDER_KEY", KEY)
        .env("RUST_LOG", "debug")
        .stderr(Stdio::piped());
    let (mut server, address, log_reader) = spawn_logging(command);
    let remote = Remote::new(address);
    let run = remote
        .post_json(
            "/v1/runs?wait=true",
            &json!({"prompt": "hi", "model": "mock", "tools": []}),
        )
        .await;
    assert_eq!(run["status"], "model_error", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.contains("[reda"),
        "the key's place is marked: {error}"
    );
    let id = run["id"].as_str().unwrap();
    let (events, _) = read_sse(remote.get(&format!("/v1/runs/{id}/events")).await).await;
    assert!(terminate(&mut server).success());
    let mut everything = log_reader.join().unwrap();
    everything.push_str(&run.to_string());
    for event in &events {
        everything.push_str(&event.data.to_string());
    }
    assert!(!everything.contains(&KEY[..7]), "the key's start leaked");
}

/// Starts `command` (its stderr piped) like [`spawn_listening`], with a
/// thread that reads its log until it exits.
fn spawn_logging(
    command: std::process::Command,
) -> (ServerProcess, String, std::thread::JoinHandle<String>) {
    let (mut server, address) = spawn_listening(command);
    let mut logs = server.stderr.take().unwrap();
    let log_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = logs.read_to_string(&mut text);
        text
    });
    (server, address, log_reader)
}
