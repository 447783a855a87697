//! The configurations under `examples/` as a user starts them: the real
//! binary with `--config examples/NAME.toml`, only the address, storage
//! and keys given by the environment.

use serde_json::json;

use crate::helpers::*;
use crate::providers::scripted_openai;

/// Serves `examples/NAME.toml` from a fresh data directory, with `env`.
fn serve_example(name: &str, env: &[(&str, &str)]) -> (ServerProcess, Remote, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.toml"));
    let mut command = binary_command(&dir, env);
    command.arg("--config").arg(config);
    let log = server_log(&mut command);
    command.stderr(log);
    let (child, address) = spawn_listening(command);
    (child, Remote::new(address), dir)
}

/// The profiles a server lists.
async fn profiles(server: &Remote) -> Vec<String> {
    let models = server.get_json("/v1/models").await;
    models["models"]
        .as_array()
        .unwrap_or_else(|| panic!("{models}"))
        .iter()
        .map(|model| model["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_local_model_example_runs_against_an_openai_compatible_server() {
    // The local server it names, on another port: an OpenAI-compatible
    // mock that answers once.
    let (address, seen) =
        scripted_openai(vec![json!({"role": "assistant", "content": "hello"})]).await;
    let base_url = format!("{address}/v1");
    // (The mock answers whole: the example's streaming is turned off.)
    let (mut child, server, _dir) = serve_example(
        "local",
        &[
            ("AGENT_RUNNER_MODELS__LOCAL__BASE_URL", &base_url),
            ("AGENT_RUNNER_MODELS__LOCAL__STREAM", "false"),
        ],
    );
    assert_eq!(server.get("/readyz").await.status(), 200);
    assert!(profiles(&server).await.contains(&"local".to_owned()));
    // A bare prompt goes to the example's default model.
    let run = server
        .post_json("/v1/runs?wait=true", &json!({"prompt": "hi"}))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "hello");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests[0]["model"], "qwen2.5-coder");
    assert!(terminate(&mut child).success());
}

#[tokio::test]
async fn the_hosted_model_examples_start_with_their_keys_in_the_environment() {
    for (name, variable, profile) in [
        ("openai", "OPENAI_API_KEY", "gpt"),
        ("anthropic", "ANTHROPIC_API_KEY", "claude"),
    ] {
        let (mut child, server, _dir) = serve_example(name, &[(variable, "not-a-real-key")]);
        assert_eq!(server.get("/readyz").await.status(), 200, "{name}");
        assert!(
            profiles(&server).await.contains(&profile.to_owned()),
            "{name}"
        );
        // The key is nowhere in what the server shows of its profile.
        let models = server.get("/v1/models").await.text().await.unwrap();
        assert!(!models.contains("not-a-real-key"), "{models}");
        assert!(terminate(&mut child).success());
    }
}

#[tokio::test]
async fn the_replicas_example_starts_and_serves() {
    // Its database and workspaces from the environment, as it says (on
    // PostgreSQL when the suite runs there).
    let (mut child, server, _dir) = serve_example("replicas", &[]);
    assert_eq!(server.get("/readyz").await.status(), 200);
    let run = server
        .post_json("/v1/runs?wait=true", &json!({"prompt": "hi"}))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert!(terminate(&mut child).success());
}
