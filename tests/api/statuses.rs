//! `GET /v1/runs/events`: the tenant-wide stream of changes of status.

use std::collections::HashMap;
use std::time::Duration;

use agent_runner::models::http::SseParser;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::helpers::*;

/// An open status stream, read as far as asked.
pub struct Statuses {
    stream: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>,
    >,
    parser: SseParser,
    /// Everything received, as text.
    pub text: String,
    /// The statuses of each run read so far, in order.
    seen: HashMap<String, Vec<String>>,
}

impl Statuses {
    pub async fn open(response: reqwest::Response) -> Self {
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-accel-buffering"], "no");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Self {
            stream: Box::pin(response.bytes_stream()),
            parser: SseParser::new(),
            text: String::new(),
            seen: HashMap::new(),
        }
    }

    /// Reads `run_status` events until `done` holds of what was read so far
    /// (the statuses of each run, in order), or the stream ends.
    pub async fn until(
        &mut self,
        done: impl Fn(&HashMap<String, Vec<String>>) -> bool,
    ) -> HashMap<String, Vec<String>> {
        let seen = &mut self.seen;
        // Keep-alive comments come often: the deadline is for the whole.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !done(seen) {
            let chunk = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .unwrap_or_else(|_| panic!("the changes waited for did not come; saw {seen:?}"));
            let Some(chunk) = chunk else { break };
            let chunk = chunk.unwrap();
            self.text.push_str(&String::from_utf8_lossy(&chunk));
            for event in self.parser.push_and_take(&chunk) {
                assert_eq!(event.event.as_deref(), Some("run_status"));
                assert!(event.id.is_none(), "status events have no id");
                let data: Value = serde_json::from_str(&event.data).unwrap();
                let object = data.as_object().unwrap();
                assert_eq!(object.len(), 3, "{data}");
                assert!(
                    chrono::DateTime::parse_from_rfc3339(data["at"].as_str().unwrap()).is_ok(),
                    "{data}"
                );
                seen.entry(data["run_id"].as_str().unwrap().to_owned())
                    .or_default()
                    .push(data["status"].as_str().unwrap().to_owned());
            }
        }
        seen.clone()
    }
}

fn ended(seen: &HashMap<String, Vec<String>>, id: &str, last: &str) -> bool {
    seen.get(id)
        .is_some_and(|statuses| statuses.last().map(String::as_str) == Some(last))
}

fn token(tenant: &str, token: &str) -> agent_runner::config::TokenConfig {
    toml::from_str(&format!("tenant = \"{tenant}\"\ntoken = \"{token}\"")).unwrap()
}

#[tokio::test]
async fn the_tenant_stream_tells_of_every_change_of_its_own_runs() {
    let mut app = spawn_with(|config| {
        config.auth.tokens = vec![token("team-a", "secret-a"), token("team-b", "secret-b")];
        config.runs.max_concurrent = 1;
    })
    .await;
    let unauthorized = app
        .client
        .get(app.url("/v1/runs/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    let open = |token: &'static str| {
        app.client
            .get(app.url("/v1/runs/events"))
            .bearer_auth(token)
            .send()
    };
    let mut a = Statuses::open(open("secret-a").await.unwrap()).await;
    let mut b = Statuses::open(open("secret-b").await.unwrap()).await;

    // One that holds the only slot until it is cancelled, one queued
    // behind it that pauses for an approval and is answered.
    app.token = Some("secret-a".into());
    let first = app
        .create_run(json!({"prompt": "slow", "model": {"scripted": [
            {"content": "late", "delay_ms": 60000}]}}))
        .await;
    let first = first["id"].as_str().unwrap().to_owned();
    let second = app
        .create_run(json!({
            "prompt": "ask first",
            "approval": {"tools": ["write_file"]},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": "a.txt", "content": "hi"}))]},
                {"content": "written"}
            ]}
        }))
        .await;
    let second = second["id"].as_str().unwrap().to_owned();
    a.until(|seen| seen.contains_key(&second)).await;
    assert_eq!(app.delete(&format!("/v1/runs/{first}")).await.status, 202);
    let seen = a
        .until(|seen| ended(seen, &first, "aborted") && ended(seen, &second, "requires_action"))
        .await;
    assert!(a.text.starts_with("retry: 1000\n"), "{:?}", a.text);
    assert_eq!(
        seen[&first],
        ["running", "aborted"],
        "it had a slot at once"
    );
    assert_eq!(seen[&second], ["queued", "running", "requires_action"]);
    let answered = app
        .send(
            app.request(reqwest::Method::POST, &format!("/v1/runs/{second}/actions"))
                .json(&json!({"actions": [{"call_id": "w1", "decision": "approve"}]})),
        )
        .await;
    assert_eq!(answered.status, 200, "{}", answered.text);
    let seen = a.until(|seen| ended(seen, &second, "completed")).await;
    assert_eq!(
        seen[&second],
        [
            "queued",
            "running",
            "requires_action",
            "queued",
            "running",
            "completed"
        ]
    );
    // A cancel while queued behind a running one.
    let slow = app
        .create_run(
            json!({"prompt": "slow", "model": {"scripted": [{"content": "", "delay_ms": 5000}]}}),
        )
        .await;
    let slow = slow["id"].as_str().unwrap().to_owned();
    let queued = app.create_run(json!({"prompt": "wait"})).await;
    let queued = queued["id"].as_str().unwrap().to_owned();
    assert_eq!(app.delete(&format!("/v1/runs/{queued}")).await.status, 202);
    assert_eq!(app.delete(&format!("/v1/runs/{slow}")).await.status, 202);
    let seen = a
        .until(|seen| ended(seen, &queued, "aborted") && ended(seen, &slow, "aborted"))
        .await;
    assert_eq!(seen[&queued], ["queued", "aborted"]);
    // Queued a moment if it came before the last run's slot was let go.
    let slow = &seen[&slow];
    assert!(
        *slow == ["running", "aborted"] || *slow == ["queued", "running", "aborted"],
        "{slow:?}"
    );

    // The other tenant heard nothing of those: its first change is of its
    // own run.
    app.token = Some("secret-b".into());
    let own = app.run_to_end(json!({"prompt": "mine"})).await;
    let own = own["id"].as_str().unwrap().to_owned();
    let seen = b.until(|seen| ended(seen, &own, "completed")).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), [&own]);
}

#[tokio::test]
async fn the_status_stream_ends_when_the_server_stops() {
    let mut app = spawn_app().await;
    let response = app
        .client
        .get(app.url("/v1/runs/events"))
        .send()
        .await
        .unwrap();
    let mut statuses = Statuses::open(response).await;
    app.begin_stop();
    let seen = statuses.until(|_| false).await;
    assert!(seen.is_empty());
}
