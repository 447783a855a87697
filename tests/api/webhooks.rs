//! Webhooks received by a real HTTP listener: signed as Standard Webhooks
//! gives it (checked here with HMAC-SHA256 independently of the server's
//! code), retried after a 500, posted when a run pauses and when it ends,
//! only to allowed hosts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::helpers::*;

/// A secret as Standard Webhooks writes one.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(HeaderMap, String, StatusCode)>>>);

/// A receiver at `/hook` that answers 500 to the first attempt of every
/// message and 200 after: its address and what it received.
async fn receiver() -> (String, Received) {
    let received = Received::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                let mut all = kept.0.lock().unwrap();
                let id = headers["webhook-id"].to_str().unwrap().to_owned();
                let seen = all
                    .iter()
                    .any(|(h, _, _)| h["webhook-id"].to_str().unwrap() == id);
                let status = if seen {
                    StatusCode::OK
                } else {
                    StatusCode::INTERNAL_SERVER_ERROR
                };
                all.push((headers, body, status));
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, received)
}

/// Checks a delivery's signature as a receiver would, from the secret.
fn verify(headers: &HeaderMap, body: &str) {
    let key = BASE64
        .decode(SECRET.strip_prefix("whsec_").unwrap())
        .unwrap();
    let id = headers["webhook-id"].to_str().unwrap();
    let timestamp = headers["webhook-timestamp"].to_str().unwrap();
    let sent: i64 = timestamp.parse().unwrap();
    assert!(
        (chrono::Utc::now().timestamp() - sent).abs() < 300,
        "a fresh timestamp"
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    let expected = format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()));
    let signatures = headers["webhook-signature"].to_str().unwrap();
    assert!(
        signatures.split(' ').any(|signature| signature == expected),
        "{signatures} is not {expected}"
    );
}

/// Waits for a delivery that was taken (200) of run `id` in `status`.
async fn taken(received: &Received, id: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let found = received
            .0
            .lock()
            .unwrap()
            .iter()
            .find_map(|(_, body, answered)| {
                let run: Value = serde_json::from_str(body).unwrap();
                (*answered == StatusCode::OK && run["id"] == id && run["status"] == status)
                    .then_some(run)
            });
        if let Some(run) = found {
            return run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {status} delivery for {id}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_run_s_pause_and_end_are_posted_signed_and_retried_after_a_failure() {
    let (hooks, received) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_WEBHOOKS__ALLOWED_HOSTS", "[\"127.0.0.1\"]"),
            ("AGENT_RUNNER_WEBHOOKS__SECRET_ENV", "TEST_WEBHOOK_SECRET"),
            ("TEST_WEBHOOK_SECRET", SECRET),
        ],
    );
    let server = Remote::new(address.clone());
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "write it, with permission",
                "approval": {"tools": ["write_file"]},
                "webhook": {"url": format!("{hooks}/hook")},
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": "a.txt", "content": "x"}))]},
                    {"content": "written"}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    assert_eq!(run["webhook"], json!({"url": format!("{hooks}/hook")}));
    let paused = taken(&received, &id, "requires_action").await;
    assert_eq!(paused["pending_actions"][0]["call_id"], "w1");
    server
        .post_json(
            &format!("/v1/runs/{id}/actions"),
            &json!({"actions": [{"call_id": "w1", "decision": "approve"}]}),
        )
        .await;
    let ended = taken(&received, &id, "completed").await;
    assert_eq!(ended["answer"], "written");
    assert_eq!(ended, server.get_json(&format!("/v1/runs/{id}")).await);
    let all = received.0.lock().unwrap().clone();
    // Each message: a 500, then the same message (same id) taken.
    assert_eq!(all.len(), 4, "{all:?}");
    for (headers, body, _) in &all {
        verify(headers, body);
        assert_eq!(headers["content-type"], "application/json");
    }
    for pair in all.chunks(2) {
        assert_eq!(pair[0].2, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(pair[1].2, StatusCode::OK);
        assert_eq!(pair[0].0["webhook-id"], pair[1].0["webhook-id"]);
    }
    assert_ne!(all[0].0["webhook-id"], all[2].0["webhook-id"]);
    // A host not allowed is refused, and nothing is made.
    let refused = server
        .client
        .post(format!("{address}/v1/runs"))
        .json(&json!({"prompt": "x", "webhook": {"url": "http://localhost:9/hook"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("webhook.url:") && message.contains("allowed_hosts"),
        "{message}"
    );
    assert!(terminate(&mut child).success());
}

#[tokio::test]
async fn a_webhook_on_a_server_without_webhooks_is_refused() {
    let app = spawn_app().await;
    let refused = app
        .post_run(json!({"prompt": "x", "webhook": {"url": "http://127.0.0.1:9/hook"}}))
        .await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(refused.text.contains("not enabled"), "{}", refused.text);
    let shapeless = app
        .post_run(
            json!({"prompt": "x", "webhook": {"url": "http://127.0.0.1:9/hook", "secret": "x"}}),
        )
        .await;
    assert_eq!(shapeless.status, 422, "{}", shapeless.text);
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
}
