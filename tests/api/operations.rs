//! What the person on call uses: the log formats on a pipe, the access log,
//! `serve --help` and `--bind`, `agent-runner config`, `hash-token`.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::helpers::*;

const TOKEN: &str = "log-secret-token";

/// Serves from `dir` with a token, logging at info in `format` to a file;
/// makes a run and a refused request, stops, and answers the log.
async fn logs_of_a_server(format: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr.log");
    let tokens = format!("[{{tenant = \"team-log\", token = \"{TOKEN}\"}}]");
    let mut settings = vec![
        ("AGENT_RUNNER_AUTH__TOKENS", tokens.as_str()),
        ("RUST_LOG", "info"),
    ];
    if let Some(format) = format {
        settings.push(("RUST_LOG_FORMAT", format));
    }
    let mut command = binary_command(&dir, &settings);
    if format.is_none() {
        command.env_remove("RUST_LOG_FORMAT");
    }
    command.stderr(std::fs::File::create(&log).unwrap());
    let (mut child, address) = spawn_listening(command);
    let client = http_client();
    let created = client
        .post(format!("{address}/v1/runs?wait=true"))
        .bearer_auth(TOKEN)
        .json(&json!({"prompt": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let refused = client
        .get(format!("{address}/v1/runs"))
        .bearer_auth("wrong-token")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert!(terminate(&mut child).success());
    std::fs::read_to_string(log).unwrap()
}

#[tokio::test]
async fn plain_logs_on_a_pipe_have_no_colour_and_an_access_line_per_request() {
    let log = logs_of_a_server(None).await;
    assert!(!log.contains('\u{1b}'), "no escape codes on a pipe:\n{log}");
    let access: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("agent_runner::access"))
        .collect();
    assert!(
        access.iter().any(|l| l.contains("method=POST")
            && l.contains("route=\"/v1/runs\"")
            && l.contains("status=201")
            && l.contains("tenant=\"team-log\"")),
        "{log}"
    );
    assert!(
        access
            .iter()
            .any(|l| l.contains("status=401") && l.contains("tenant=\"-\"")),
        "a refusal is logged too:\n{log}"
    );
    assert!(
        !log.contains(TOKEN) && !log.contains("wrong-token"),
        "{log}"
    );
    // The run's lines carry its id.
    assert!(log.contains("run_id="), "{log}");
}

#[tokio::test]
async fn json_logs_are_one_object_a_line() {
    let log = logs_of_a_server(Some("json")).await;
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let access = lines
        .iter()
        .find(|l| l["target"] == "agent_runner::access" && l["route"] == "/v1/runs")
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!(access["method"], "POST");
    assert_eq!(access["status"], 201);
    assert_eq!(access["tenant"], "team-log");
    assert!(access["duration_ms"].as_f64().is_some(), "{access}");
    assert!(
        lines
            .iter()
            .all(|l| l["timestamp"].is_string() && l["level"].is_string())
    );
    assert!(!log.contains(TOKEN), "{log}");
}

fn binary(args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-runner"))
        .args(args)
        .env_remove("AGENT_RUNNER_AUTH__TOKENS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

#[test]
fn serve_help_describes_its_flags() {
    let help = binary(&["serve", "--help"], None);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in ["--config", "--bind"] {
        assert!(text.contains(flag), "{text}");
    }
    // Without tokens, only loopback, however the address is given.
    let open = binary(&["serve", "--bind", "0.0.0.0:0"], None);
    assert_eq!(open.status.code(), Some(2), "{open:?}");
    assert!(
        String::from_utf8_lossy(&open.stderr).contains("loopback"),
        "{open:?}"
    );
    let wrong = binary(&["serve", "--bind", "not-an-address"], None);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("--bind"));
    let top = binary(&["--help"], None);
    assert_eq!(top.status.code(), Some(0));
    let text = String::from_utf8_lossy(&top.stdout);
    for command in ["serve", "config", "hash-token", "runs list"] {
        assert!(text.contains(command), "{text}");
    }
}

#[test]
fn config_prints_the_effective_configuration_with_secrets_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.toml");
    std::fs::write(
        &file,
        r#"
[storage]
database_url = "postgres://runner:db-password@db.internal/agents"

[[auth.tokens]]
tenant = "team-a"
token = "plain-secret"

[models.local]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "m"
headers = { "x-team-key" = "header-secret" }

[mcp.files]
command = "server"
env = { API_TOKEN = "env-secret" }
"#,
    )
    .unwrap();
    let printed = binary(&["config", "--config", file.to_str().unwrap()], None);
    assert_eq!(printed.status.code(), Some(0), "{printed:?}");
    let text = String::from_utf8(printed.stdout).unwrap();
    for secret in ["db-password", "plain-secret", "header-secret", "env-secret"] {
        assert!(!text.contains(secret), "{secret} in\n{text}");
    }
    let effective: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(
        effective["storage"]["database_url"].as_str(),
        Some("postgres://runner:<redacted>@db.internal/agents")
    );
    // Defaults are there too.
    assert_eq!(effective["runs"]["max_concurrent"].as_integer(), Some(32));
    assert_eq!(
        effective["auth"]["tokens"][0]["tenant"].as_str(),
        Some("team-a")
    );
    assert_eq!(
        effective["models"]["local"]["headers"]["x-team-key"].as_str(),
        Some("<redacted>")
    );
    // What it prints is for reading: a redacted token is not taken.
    let printed_file = dir.path().join("printed.toml");
    std::fs::write(&printed_file, &text).unwrap();
    let reloaded = binary(
        &["config", "--config", printed_file.to_str().unwrap()],
        None,
    );
    assert_eq!(reloaded.status.code(), Some(2), "{reloaded:?}");
    assert!(
        String::from_utf8_lossy(&reloaded.stderr).contains("auth.tokens[0].token"),
        "{reloaded:?}"
    );
    let broken = binary(
        &["config", "--config", "/nonexistent/agent-runner.toml"],
        None,
    );
    assert_eq!(broken.status.code(), Some(2));
}

#[test]
fn hash_token_prints_the_digest_the_server_matches() {
    use sha2::{Digest, Sha256};
    let expected = hex::encode(Sha256::digest(b"my-token"));
    // What `echo my-token |` gives: the newline is not part of the token.
    for input in ["my-token\n", "my-token", "my-token\r\n"] {
        let hashed = binary(&["hash-token"], Some(input));
        assert_eq!(hashed.status.code(), Some(0));
        assert_eq!(String::from_utf8_lossy(&hashed.stdout).trim(), expected);
    }
    for bad in ["", "\n", "two words\n"] {
        assert_eq!(
            binary(&["hash-token"], Some(bad)).status.code(),
            Some(2),
            "{bad:?}"
        );
    }
}
