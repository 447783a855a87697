//! Mock model providers on loopback, in the providers' real wire formats,
//! that keep the request bodies they were sent.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};

/// The request bodies a mock provider was sent, in order.
pub type Seen = Arc<Mutex<Vec<Value>>>;

pub async fn openai(State(seen): State<Seen>, body: axum::Json<Value>) -> axum::Json<Value> {
    seen.lock().unwrap().push(body.0);
    axum::Json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "mock",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    }))
}

pub async fn anthropic(State(seen): State<Seen>, body: axum::Json<Value>) -> axum::Json<Value> {
    seen.lock().unwrap().push(body.0);
    axum::Json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "mock",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1}
    }))
}

/// Both providers' wire formats on one loopback server.
pub async fn mock_providers() -> (String, Seen) {
    let seen = Seen::default();
    let router = Router::new()
        .route("/v1/chat/completions", post(openai))
        .route("/v1/messages", post(anthropic))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (address, seen)
}

/// An OpenAI-dialect provider that answers with `replies` (assistant
/// `message` objects), one a request in order, the last one again after
/// them, keeping the request bodies it was sent.
pub async fn scripted_openai(replies: Vec<Value>) -> (String, Seen) {
    let seen = Seen::default();
    let state = (Arc::clone(&seen), Arc::new(replies));
    let router = Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State((seen, replies)): State<(Seen, Arc<Vec<Value>>)>,
                 body: axum::Json<Value>| async move {
                    let mut message = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(body.0);
                        replies[(seen.len() - 1).min(replies.len() - 1)].clone()
                    };
                    // A reply may come late (`"_delay_ms": 30000`).
                    let delay = message
                        .as_object_mut()
                        .and_then(|reply| reply.remove("_delay_ms"))
                        .and_then(|ms| ms.as_u64());
                    if let Some(ms) = delay {
                        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    }
                    // A reply may name its finish reason (`"_finish": "length"`).
                    let named = message
                        .as_object_mut()
                        .and_then(|reply| reply.remove("_finish"));
                    let finish = match named {
                        Some(Value::String(finish)) => finish,
                        _ if message.get("tool_calls").is_some() => "tool_calls".to_owned(),
                        _ => "stop".to_owned(),
                    };
                    axum::Json(json!({
                        "id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                        "model": "mock",
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
                    }))
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (address, seen)
}

/// An OpenAI profile on a mock provider at `address` (its root URL): one
/// attempt, any set variable as its key (the mock reads none).
pub fn mock_openai_profile(address: &str) -> agent_runner::models::profile::ModelProfile {
    use agent_runner::models::profile::{HttpProfile, ModelProfile};
    ModelProfile::OpenAi(HttpProfile {
        base_url: Some(format!("{address}/v1")),
        model: Some("mock".into()),
        api_key_env: Some("PATH".into()),
        max_attempts: Some(1),
        ..HttpProfile::default()
    })
}
