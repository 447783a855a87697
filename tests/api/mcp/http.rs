//! MCP servers over streamable HTTP: the reference server in its HTTP mode,
//! and the fixture's HTTP server for what the reference server has no
//! switch for (a bearer token, the headers it was sent).

use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use serde_json::{Value, json};

use super::*;

/// Starts the reference server in its streamable HTTP mode on a free
/// port: its process (killed when dropped) and its endpoint.
async fn everything_over_http() -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new("node")
        .arg(everything_entry())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // It says so on stderr once it listens ("... listening on port N").
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(&format!("listening on port {port}")) {
                // The rest of its output is read, so that it never blocks.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return true;
            }
        }
        false
    };
    let listened = tokio::time::timeout(Duration::from_secs(20), listening).await;
    assert!(
        matches!(listened, Ok(true)),
        "the reference server did not listen on {port}"
    );
    (child, format!("http://127.0.0.1:{port}/mcp"))
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
    let mut server = tokio::process::Command::new(PYTHON)
        .arg(fixtures_dir().join("fixture.py"))
        .args(["http", token])
        .current_dir(fixtures.path())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Its port, printed once it listens.
    let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let port = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the fixture listens within 10 s")
        .unwrap()
        .expect("the fixture prints its port");
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
