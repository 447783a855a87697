//! The store's single writer dying (a panic in its task) must not go
//! unseen: `/readyz` answers 503 saying why, new runs are refused, and the
//! server process exits with an error, for its supervisor to start it
//! again. The panic is the writer's test hook (debug builds only): it
//! panics on inserting a run with the prompt the server was given.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::{Remote, binary_command, spawn_listening};

const PANIC_PROMPT: &str = "the writer panics on this one";

#[tokio::test]
async fn a_writer_that_dies_makes_the_server_unready_and_exit_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = binary_command(&dir, &[("AGENT_RUNNER_TEST_WRITER_PANIC_ON", PANIC_PROMPT)]);
    command.stderr(std::process::Stdio::null());
    let (mut child, address) = spawn_listening(command);
    let server = Remote::new(address);
    assert_eq!(server.get("/readyz").await.status(), 200);
    let done = server
        .post_json("/v1/runs?wait=true", &json!({"prompt": "hi"}))
        .await;
    assert_eq!(done["status"], "completed", "{done}");

    let dying = server
        .client
        .post(format!("{}/v1/runs", server.address))
        .json(&json!({ "prompt": PANIC_PROMPT }))
        .send()
        .await
        .unwrap();
    assert!(
        dying.status().is_server_error(),
        "an insert the writer died on is the server's failure: {}",
        dying.status()
    );

    // Unready, refusing runs (while it still answers), then gone, with an
    // error.
    let deadline = Instant::now() + Duration::from_secs(15);
    let (mut saw_unready, mut saw_refused) = (false, false);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let url = |path: &str| format!("{}{path}", server.address);
        if let Ok(ready) = server.client.get(url("/readyz")).send().await
            && ready.status() == 503
        {
            let body: serde_json::Value = ready.json().await.unwrap_or_default();
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("writer died"), "{body}");
            saw_unready = true;
        }
        if !saw_refused
            && let Ok(refused) = server
                .client
                .post(url("/v1/runs"))
                .json(&json!({"prompt": "hi"}))
                .send()
                .await
        {
            assert_eq!(refused.status(), 503, "a new run is refused");
            saw_refused = true;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not stop after its writer died"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        !status.success(),
        "the server exits with an error: {status:?}"
    );
    assert!(
        saw_unready,
        "/readyz answered 503 before the server stopped"
    );
    assert!(
        saw_refused,
        "a new run was refused before the server stopped"
    );
}
