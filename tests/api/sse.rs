//! The event stream: order, replay, resume, close, keep-alives, many
//! subscribers.

use serde_json::json;

use crate::helpers::*;

fn slow_two_step() -> serde_json::Value {
    json!({
        "prompt": "slowly",
        "model": {"scripted": [
            {"delay_ms": 200, "content": "", "tool_calls": [call("c1", "list_dir", json!({}))]},
            {"delay_ms": 200, "content": "done", "usage": {"input_tokens": 1, "output_tokens": 1}}
        ]}
    })
}

#[tokio::test]
async fn a_finished_run_replays_every_event_in_order_then_closes() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(two_step("list_dir", json!({}), "done"))
        .await;
    let id = run["id"].as_str().unwrap();
    let events = app.events(id).await;
    assert_eq!(
        types(&events),
        [
            "run_start",
            "message",
            "model_start",
            "model_end",
            "message",
            "tool_start",
            "tool_end",
            "message",
            "model_start",
            "model_end",
            "message",
            "run_end"
        ]
    );
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.id, Some(i as u64 + 1));
        assert_eq!(event.data["sequence"], i as u64 + 1);
        assert_eq!(event.data["run_id"], id);
        assert_eq!(event.data["type"], event.event);
        assert!(event.data["timestamp"].as_str().unwrap().ends_with('Z'));
    }
    let end = &events.last().unwrap().data;
    assert_eq!(end["status"], "completed");
    assert_eq!(end["answer"], "done");
    assert_eq!(end["steps"], 2);
    assert_eq!(end["usage"]["model_calls_with_usage"], 1);
    // The message events are the transcript.
    let messages: Vec<_> = events
        .iter()
        .filter(|e| e.event == "message")
        .map(|e| e.data["message"].clone())
        .collect();
    assert_eq!(messages, app.messages(id).await);
}

#[tokio::test]
async fn a_live_stream_follows_the_run_with_no_gap_and_no_duplicate() {
    let app = spawn_app().await;
    let run = app.create_run(slow_two_step()).await;
    let id = run["id"].as_str().unwrap();
    let events = app.events(id).await;
    let sequences: Vec<_> = events.iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(sequences, (1..=12).collect::<Vec<_>>());
    assert_eq!(events.last().unwrap().event, "run_end");
    // When a client sees run_end, the run and its transcript are stored.
    let stored = app.get(&format!("/v1/runs/{id}")).await.body;
    assert_eq!(stored["status"], "completed");
    assert_eq!(app.messages(id).await.len(), 4);
}

#[tokio::test]
async fn a_stream_resumes_after_last_event_id_or_after() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(two_step("list_dir", json!({}), "done"))
        .await;
    let id = run["id"].as_str().unwrap();
    let (events, _) = app.events_from(id, Some(9)).await;
    assert_eq!(
        events.iter().map(|e| e.id.unwrap()).collect::<Vec<_>>(),
        [10, 11, 12]
    );
    let response = app
        .request(
            reqwest::Method::GET,
            &format!("/v1/runs/{id}/events?after=11"),
        )
        .send()
        .await
        .unwrap();
    let (events, _) = read_sse(response).await;
    assert_eq!(types(&events), ["run_end"]);
    let bad = app.get(&format!("/v1/runs/{id}/events?after=x")).await;
    assert_eq!(bad.status, 400);
    bad.error_code();
}

#[tokio::test]
async fn many_subscribers_each_see_the_whole_stream_and_idle_streams_get_keep_alives() {
    let app = spawn_app().await;
    let run = app
        .create_run(json!({
            "prompt": "slow",
            "model": {"scripted": [{"delay_ms": 700, "content": "done"}]}
        }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut readers = Vec::new();
    for _ in 0..40 {
        let request = app.request(reqwest::Method::GET, &format!("/v1/runs/{id}/events"));
        readers.push(tokio::spawn(async move {
            read_sse(request.send().await.unwrap()).await
        }));
    }
    let mut saw_keep_alive = false;
    for reader in readers {
        let (events, comments) = reader.await.unwrap();
        assert_eq!(
            types(&events),
            [
                "run_start",
                "message",
                "model_start",
                "model_end",
                "message",
                "run_end"
            ]
        );
        saw_keep_alive |= comments > 0;
    }
    assert!(saw_keep_alive, "idle streams carry keep-alive comments");
}

/// What an EventSource needs: a reconnection time with the first event, no
/// proxy buffering, and a 204 (which stops its reconnecting) once there is
/// nothing more to come.
#[tokio::test]
async fn a_stream_tells_event_sources_when_to_retry_and_when_to_stop() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(two_step("list_dir", json!({}), "done"))
        .await;
    let id = run["id"].as_str().unwrap();
    let response = app
        .request(reqwest::Method::GET, &format!("/v1/runs/{id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let text = response.text().await.unwrap();
    let mut frames = text.split("\n\n");
    let first = frames.next().unwrap();
    assert!(first.lines().any(|line| line == "retry: 1000"), "{first:?}");
    assert!(
        first.lines().any(|line| line == "event: run_start"),
        "{first:?}"
    );
    assert!(
        frames.all(|frame| !frame.contains("retry:")),
        "only the first event carries it"
    );
    // Resuming at or past the end: nothing more will come.
    for resume in ["12", "13", "99"] {
        let ended = app
            .request(reqwest::Method::GET, &format!("/v1/runs/{id}/events"))
            .header("Last-Event-ID", resume)
            .send()
            .await
            .unwrap();
        assert_eq!(ended.status(), 204, "after {resume}");
        assert!(ended.bytes().await.unwrap().is_empty());
    }
    let after = app.get(&format!("/v1/runs/{id}/events?after=12")).await;
    assert_eq!(after.status, 204);
    // Just before the end, the end is still to come.
    let (events, _) = app.events_from(id, Some(11)).await;
    assert_eq!(types(&events), ["run_end"]);
    // A live run's stream that begins empty carries it with its first event.
    let live = app
        .create_run(
            json!({"prompt": "wait", "model": {"scripted": [{"delay_ms": 300, "content": "x"}]}}),
        )
        .await;
    let live_id = live["id"].as_str().unwrap();
    let text = app
        .request(reqwest::Method::GET, &format!("/v1/runs/{live_id}/events"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let first = text
        .split("\n\n")
        .find(|frame| frame.contains("event:"))
        .unwrap();
    assert!(first.contains("retry: 1000"), "{first:?}");
}
