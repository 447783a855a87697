//! A real EventSource client (npm's `eventsource`, installed by
//! `tests/eventsource/install.sh`) against the real server: it stops once a
//! run has ended instead of reconnecting forever, and it resumes across a
//! dropped connection with no gap.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::helpers::*;

/// Follows `url` with EventSource for at most `wait_ms`: what it saw.
async fn follow(url: String, wait_ms: u64) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/eventsource/follow.mjs");
    let output = tokio::task::spawn_blocking(move || {
        let dir = installed("tests/eventsource/install.sh");
        std::process::Command::new("node")
            .arg(script)
            .arg(dir)
            .arg(url)
            .arg(wait_ms.to_string())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The stored events' ids, in the order seen.
fn ids(seen: &Value) -> Vec<u64> {
    seen["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["type"] != "model_delta")
        .map(|event| event["id"].as_str().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn an_event_source_stops_once_the_run_has_ended() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(two_step("list_dir", json!({}), "done"))
        .await;
    let id = run["id"].as_str().unwrap();
    let seen = follow(app.url(&format!("/v1/runs/{id}/events")), 10_000).await;
    assert_eq!(ids(&seen), (1..=12).collect::<Vec<_>>());
    assert_eq!(seen["closed"], true, "it stopped of itself: {seen}");
    assert_eq!(seen["opens"], 1, "one stream, then a 204: {seen}");
}

/// A proxy to `upstream` that cuts its first connection once it has passed
/// `limit` bytes of the answer, as a flaky network would; later ones pass
/// whole. Its address, and how many connections it took.
pub async fn flaky_proxy(upstream: String, limit: u64) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
            let upstream = upstream.trim_start_matches("http://").to_owned();
            tokio::spawn(async move {
                let server = TcpStream::connect(upstream).await.unwrap();
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let requests = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                if first {
                    let mut cut = tokio::io::AsyncReadExt::take(&mut server_read, limit);
                    let _ = tokio::io::copy(&mut cut, &mut client_write).await;
                    let _ = client_write.shutdown().await;
                    requests.abort();
                } else {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                }
            });
        }
    });
    (address, connections)
}

#[tokio::test]
async fn an_event_source_resumes_across_a_dropped_connection_with_no_gap() {
    let app = spawn_app().await;
    let steps: Vec<Value> = (0..6)
        .map(|i| {
            json!({"delay_ms": 150, "content": "",
                   "tool_calls": [call(&format!("c{i}"), "list_dir", json!({}))]})
        })
        .chain(std::iter::once(json!({"content": "done"})))
        .collect();
    let run = app
        .create_run(json!({"prompt": "slowly", "model": {"scripted": steps}}))
        .await;
    let id = run["id"].as_str().unwrap();
    // The head of the answer and a few events, then the cut, mid-run.
    let (proxy, connections) = flaky_proxy(app.address.clone(), 1_200).await;
    let seen = follow(format!("{proxy}/v1/runs/{id}/events"), 20_000).await;
    let ids = ids(&seen);
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "every event once, in order: {seen}"
    );
    assert_eq!(
        seen["events"].as_array().unwrap().last().unwrap()["type"],
        "run_end"
    );
    assert!(
        seen["opens"].as_u64().unwrap() >= 2,
        "it reconnected: {seen}"
    );
    assert!(connections.load(Ordering::SeqCst) >= 2);
    assert_eq!(seen["closed"], true, "and stopped after the end: {seen}");
    let stored = app.events(id).await;
    assert_eq!(ids.len(), stored.len());
}
