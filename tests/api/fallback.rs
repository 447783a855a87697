//! Model fallback (SPEC section 25) through the real binary: a provider
//! answering 529 until the call's retries are spent, and a second provider
//! taking the same request over; a chain that fails whole.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{Seen, scripted_openai};

/// An Anthropic provider that is overloaded (529) for every request, or
/// answers 503 when `status` says so; it keeps the request bodies.
async fn unavailable_anthropic(status: u16) -> (String, Seen) {
    let seen = Seen::default();
    let router = Router::new()
        .route(
            "/v1/messages",
            post(
                move |State(seen): State<Seen>, body: axum::Json<Value>| async move {
                    seen.lock().unwrap().push(body.0);
                    let status = axum::http::StatusCode::from_u16(status).unwrap();
                    let body = json!({"type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"}});
                    (status, axum::Json(body))
                },
            ),
        )
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (address, seen)
}

/// The real binary with the profile `primary` (Anthropic at `primary`,
/// three attempts a call, priced at $1 a million tokens either way) falling
/// back to `backup` (OpenAI at `backup`, one attempt, $10 either way).
fn start(dir: &tempfile::TempDir, primary: &str, backup: &str) -> (ServerProcess, Remote) {
    let file = dir.path().join("fallback.toml");
    std::fs::write(
        &file,
        format!(
            "[models.primary]\nkind = \"anthropic\"\nbase_url = \"{primary}\"\nmodel = \"mock\"\n\
             api_key_env = \"PATH\"\nmax_attempts = 3\nretry_base_ms = 1\nretry_max_ms = 2\n\
             price = {{input = 1.0, output = 1.0}}\nfallback = [\"backup\"]\n\n\
             [models.backup]\nkind = \"openai\"\nbase_url = \"{backup}/v1\"\nmodel = \"mock\"\n\
             api_key_env = \"PATH\"\nmax_attempts = 1\nprice = {{input = 10.0, output = 10.0}}\n"
        ),
    )
    .unwrap();
    let mut command = binary_command(dir, &[]);
    command.arg("--config").arg(&file);
    let log = server_log(&mut command);
    command.stderr(log);
    let (child, address) = spawn_listening(command);
    (child, Remote::new(address))
}

/// Every event of the ended run `id`.
async fn events_of(server: &Remote, id: &str) -> Vec<SseEvent> {
    let response = server.get(&format!("/v1/runs/{id}/events")).await;
    read_sse(response).await.0
}

#[tokio::test]
async fn a_provider_out_of_retries_hands_the_same_request_to_the_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let (primary, overloaded) = unavailable_anthropic(529).await;
    let (backup, answered) = scripted_openai(vec![
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
            "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}]}),
        json!({"role": "assistant", "content": "Listed."}),
    ])
    .await;
    let (_child, server) = start(&dir, &primary, &backup);
    let run = server
        .post_json(
            "/v1/runs",
            &json!({"prompt": "List the workspace.", "model": "primary",
                    "tools": ["list_dir"], "limits": {"max_steps": 4, "max_cost_usd": 1.0}}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let run = server.wait_status(&id, "completed").await;
    assert_eq!(run["answer"], "Listed.", "{run}");

    // Each of the two calls spent the primary's three attempts, then went
    // to the backup, with the same tools and the same conversation.
    let overloaded = overloaded.lock().unwrap().clone();
    let answered = answered.lock().unwrap().clone();
    assert_eq!((overloaded.len(), answered.len()), (6, 2));
    for (sent, taken) in [
        (&overloaded[0], &answered[0]),
        (&overloaded[3], &answered[1]),
    ] {
        assert_eq!(sent["tools"][0]["name"], "list_dir", "{sent}");
        assert_eq!(taken["tools"][0]["function"]["name"], "list_dir", "{taken}");
        // The same instructions, and the same conversation after them.
        assert_eq!(sent["system"][0]["text"], taken["messages"][0]["content"]);
        assert_eq!(
            sent["messages"].as_array().unwrap().len() + 1,
            taken["messages"].as_array().unwrap().len(),
            "{sent} {taken}"
        );
    }
    assert_eq!(answered[1]["messages"][2]["tool_calls"][0]["id"], "call_1");

    let events = events_of(&server, &id).await;
    let fallbacks: Vec<&Value> = events
        .iter()
        .filter(|event| event.event == "model_fallback")
        .map(|event| &event.data)
        .collect();
    assert_eq!(fallbacks.len(), 2, "{:?}", types(&events));
    for fallback in &fallbacks {
        assert_eq!(
            (&fallback["from"], &fallback["to"]),
            (&json!("primary"), &json!("backup"))
        );
        let reason = fallback["reason"].as_str().unwrap();
        assert!(
            reason.contains("529") && reason.contains("3 attempts"),
            "{reason}"
        );
    }
    // The answering profile's: each call's `model_end`, usage and cost
    // (3 + 1 tokens at $10 a million, not at the primary's $1).
    let ends: Vec<&Value> = events
        .iter()
        .filter(|event| event.event == "model_end")
        .map(|event| &event.data)
        .collect();
    assert_eq!(ends.len(), 2);
    for end in ends {
        assert_eq!(end["profile"], "backup", "{end}");
        let cost = end["usage"]["cost_usd"].as_f64().unwrap();
        assert!((cost - 40e-6).abs() < 1e-12, "{end}");
    }
    let cost = run["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 80e-6).abs() < 1e-12, "{run}");
    // A fallback changed neither the model the run names nor its limits.
    assert_eq!(run["model"]["profile"], "primary");
    assert_eq!(run["limits"]["max_steps"], 4);

    let metrics = server.get("/metrics").await.text().await.unwrap();
    for line in [
        "agent_runner_model_fallbacks_total{from=\"primary\",to=\"backup\"} 2",
        "agent_runner_model_calls_total{profile=\"backup\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    assert!(!metrics.contains("agent_runner_model_calls_total{profile=\"primary\"}"));
}

#[tokio::test]
async fn a_chain_that_fails_whole_ends_the_run_model_error_naming_each_profile() {
    let dir = tempfile::tempdir().unwrap();
    let (primary, overloaded) = unavailable_anthropic(503).await;
    let (backup, _) = unavailable_anthropic(529).await;
    // The backup speaks Anthropic's dialect here: the profile's kind is
    // OpenAI, so it reaches `{backup}/v1/chat/completions`, which is 404,
    // a failure that may not pass and ends the chain.
    let (_child, server) = start(&dir, &primary, &backup);
    let run = server
        .post_json("/v1/runs", &json!({"prompt": "Hello.", "model": "primary"}))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let run = server.wait_status(&id, "model_error").await;
    let error = run["error"].as_str().unwrap();
    assert!(
        error.contains("`primary`") && error.contains("503"),
        "{error}"
    );
    assert!(
        error.contains("`backup`") && error.contains("404"),
        "{error}"
    );
    assert_eq!(overloaded.lock().unwrap().len(), 3);
    let events = events_of(&server, &id).await;
    assert_eq!(
        types(&events)
            .iter()
            .filter(|kind| **kind == "model_fallback")
            .count(),
        1
    );
}
