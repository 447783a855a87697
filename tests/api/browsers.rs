//! What browsers need of the API: CORS for the configured origins.

use agent_runner::config::TokenConfig;
use reqwest::Method;

use crate::helpers::*;

const ORIGIN: &str = "https://app.example";

fn preflight(app: &TestApp, origin: &str) -> reqwest::RequestBuilder {
    app.client
        .request(Method::OPTIONS, app.url("/v1/runs"))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization,content-type,idempotency-key",
        )
}

#[tokio::test]
async fn configured_origins_may_call_the_api_from_a_browser_and_others_may_not() {
    let app = spawn_with(|config| {
        config.server.cors_origins = vec![ORIGIN.into()];
        config.auth.tokens = vec![TokenConfig {
            tenant: "web".into(),
            token: Some("secret".into()),
            token_sha256: None,
        }];
    })
    .await;
    // A preflight needs no token: a browser never sends one with it.
    let allowed = preflight(&app, ORIGIN).send().await.unwrap();
    assert_eq!(allowed.status(), 200);
    let headers = allowed.headers();
    assert_eq!(headers["access-control-allow-origin"], ORIGIN);
    let methods = headers["access-control-allow-methods"].to_str().unwrap();
    for method in ["GET", "POST", "DELETE"] {
        assert!(methods.contains(method), "{methods}");
    }
    let allowed_headers = headers["access-control-allow-headers"].to_str().unwrap();
    for name in [
        "authorization",
        "content-type",
        "idempotency-key",
        "last-event-id",
    ] {
        assert!(allowed_headers.contains(name), "{allowed_headers}");
    }
    // The request itself, and its refusal without a token, are readable.
    let listed = app
        .client
        .get(app.url("/v1/runs"))
        .header("Origin", ORIGIN)
        .bearer_auth("secret")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert_eq!(listed.headers()["access-control-allow-origin"], ORIGIN);
    let refused = app
        .client
        .get(app.url("/v1/runs"))
        .header("Origin", ORIGIN)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.headers()["access-control-allow-origin"], ORIGIN);
    // Another origin is told nothing that lets its page read the answer.
    let other = preflight(&app, "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    let other = app
        .client
        .get(app.url("/v1/runs"))
        .header("Origin", "https://evil.example")
        .bearer_auth("secret")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn without_configured_origins_there_is_no_cors() {
    let app = spawn_app().await;
    let reply = preflight(&app, ORIGIN).send().await.unwrap();
    assert_eq!(reply.status(), 405);
    assert!(reply.headers().get("access-control-allow-origin").is_none());
    let listed = app
        .client
        .get(app.url("/v1/runs"))
        .header("Origin", ORIGIN)
        .send()
        .await
        .unwrap();
    assert!(
        listed
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
}

#[test]
fn an_origin_that_is_not_one_is_refused_at_start() {
    for bad in [
        "app.example",
        "ftp://app.example",
        "https://app.example/",
        "https://",
        "https://App.example",
        "https://app.example:443",
        "https://app\texample",
    ] {
        let text = format!("[server]\ncors_origins = [{bad:?}]\n");
        let error = agent_runner::config::Config::from_toml(&text, [])
            .unwrap_err()
            .to_string();
        assert!(error.contains("server.cors_origins"), "{bad}: {error}");
    }
    let good = "[server]\ncors_origins = [\"https://app.example\", \"http://127.0.0.1:5173\"]\n";
    assert!(agent_runner::config::Config::from_toml(good, []).is_ok());
}

fn tokens(pairs: &[(&str, &str)]) -> Vec<TokenConfig> {
    pairs
        .iter()
        .map(|(tenant, token)| TokenConfig {
            tenant: (*tenant).into(),
            token: Some((*token).into()),
            token_sha256: None,
        })
        .collect()
}

/// An EventSource cannot send a header: a stream token, made with the
/// tenant's token, lets it follow one run's events, and does nothing else.
#[tokio::test]
async fn a_stream_token_opens_its_run_s_stream_and_nothing_else() {
    let app = spawn_with(|config| {
        config.auth.tokens = tokens(&[("team-a", "secret-a"), ("team-b", "secret-b")]);
    })
    .await;
    let create = |prompt: &str| {
        app.client
            .post(app.url("/v1/runs?wait=true"))
            .bearer_auth("secret-a")
            .json(
                &serde_json::json!({"prompt": prompt, "model": {"scripted": [{"content": "ok"}]}}),
            )
            .send()
    };
    let run: serde_json::Value = create("one").await.unwrap().json().await.unwrap();
    let other: serde_json::Value = create("two").await.unwrap().json().await.unwrap();
    let (id, other_id) = (run["id"].as_str().unwrap(), other["id"].as_str().unwrap());
    let issue = |id: &str, token: &str, body: Option<serde_json::Value>| {
        let request = app
            .client
            .post(app.url(&format!("/v1/runs/{id}/stream_tokens")))
            .bearer_auth(token);
        match body {
            Some(body) => request.json(&body),
            None => request,
        }
        .send()
    };
    let issued = issue(id, "secret-a", None).await.unwrap();
    assert_eq!(issued.status(), 201);
    let issued: serde_json::Value = issued.json().await.unwrap();
    assert_eq!(issued["expires_in"], 300);
    assert_eq!(issued["run_id"], id);
    assert!(issued["expires_at"].is_string());
    let token = issued["token"].as_str().unwrap();
    // Its run's stream, with no header.
    let stream = |path: String| app.client.get(app.url(&path)).send();
    let followed = stream(format!("/v1/runs/{id}/events?stream_token={token}"))
        .await
        .unwrap();
    assert_eq!(followed.status(), 200);
    let (events, _) = read_sse(followed).await;
    assert_eq!(events.last().unwrap().event, "run_end");
    // Not another run's stream, nor any other route of its run.
    for path in [
        format!("/v1/runs/{other_id}/events?stream_token={token}"),
        format!("/v1/runs/{id}/messages?stream_token={token}"),
        format!("/v1/runs/{id}?stream_token={token}"),
        format!("/v1/runs/{id}/events?stream_token=garbage"),
    ] {
        let refused = stream(path.clone()).await.unwrap();
        assert!(
            [400, 401].contains(&refused.status().as_u16()),
            "{path}: {}",
            refused.status()
        );
    }
    // Made only with a token of the run's own tenant.
    assert_eq!(issue(id, "secret-b", None).await.unwrap().status(), 404);
    let anonymous = app
        .client
        .post(app.url(&format!("/v1/runs/{id}/stream_tokens")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    // A lifetime of its own, within bounds; then it expires.
    for bad in [
        serde_json::json!({"expires_in": 0}),
        serde_json::json!({"expires_in": 86401}),
        serde_json::json!({"other": 1}),
    ] {
        assert_eq!(
            issue(id, "secret-a", Some(bad)).await.unwrap().status(),
            422
        );
    }
    for same in [
        serde_json::json!({"expires_in": null}),
        serde_json::json!({"expires_in": 300.0}),
        serde_json::json!({}),
    ] {
        let issued = issue(id, "secret-a", Some(same)).await.unwrap();
        let issued: serde_json::Value = issued.json().await.unwrap();
        assert_eq!(issued["expires_in"], 300);
    }
    let short: serde_json::Value =
        issue(id, "secret-a", Some(serde_json::json!({"expires_in": 1})))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(short["expires_in"], 1);
    let short = short["token"].as_str().unwrap().to_owned();
    let path = format!("/v1/runs/{id}/events?stream_token={short}");
    eventually("the short-lived token to expire", async || {
        let status = stream(path.clone()).await.unwrap().status().as_u16();
        assert!([200, 401].contains(&status), "{status}");
        (status == 401).then_some(())
    })
    .await;
}

/// A stand-in for an OpenAI-compatible provider that streams its answer at
/// once: a client that subscribes after its POST would miss its first text.
async fn eager_provider() -> (String, tokio::task::JoinHandle<()>) {
    async fn answer() -> axum::response::Response {
        let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
            let event = serde_json::json!({
                "id": "chatcmpl-1", "object": "chat.completion.chunk",
                "created": 1694268190, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
            });
            format!("data: {event}\n\n")
        };
        let body = [
            chunk(
                serde_json::json!({"role": "assistant", "content": "Hel"}),
                serde_json::Value::Null,
            ),
            chunk(
                serde_json::json!({"content": "lo"}),
                serde_json::Value::Null,
            ),
            chunk(serde_json::json!({}), serde_json::json!("stop")),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(axum::body::Body::from(body))
            .unwrap()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, axum::Router::new().fallback(answer)).await;
    });
    (base, task)
}

#[tokio::test]
async fn a_run_created_with_stream_answers_with_its_events_from_the_first_delta() {
    let (base, provider) = eager_provider().await;
    let profile = toml::from_str(&format!(
        "kind = \"openai\"\nbase_url = \"{base}\"\nmodel = \"m\"\nstream = true\nmax_attempts = 1"
    ))
    .unwrap();
    let app = spawn_with(|config| {
        config.models.insert("eager".into(), profile);
    })
    .await;
    for _ in 0..5 {
        let response = app
            .client
            .post(app.url("/v1/runs?stream=true"))
            .json(&serde_json::json!({"prompt": "hi", "model": {"profile": "eager"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let location = response.headers()["location"].to_str().unwrap().to_owned();
        let (events, _) = read_sse(response).await;
        let kinds = types(&events);
        // In order: the deltas inside their model call.
        assert_eq!(
            kinds,
            [
                "run_start",
                "message",
                "model_start",
                "model_delta",
                "model_delta",
                "model_end",
                "message",
                "run_end"
            ]
        );
        let text: String = events
            .iter()
            .filter(|event| event.event == "model_delta")
            .map(|event| event.data["text"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(text, "Hello", "every delta, from the first: {kinds:?}");
        let stored: Vec<_> = events
            .iter()
            .filter(|event| event.id.is_some())
            .cloned()
            .collect();
        assert_gap_free(&stored);
        assert_eq!(events.last().unwrap().data["status"], "completed");
        let id = events[0].data["run_id"].as_str().unwrap();
        assert_eq!(location, format!("/v1/runs/{id}"));
    }
    // With stream, wait changes nothing: the stream ends with the run.
    let both = app
        .client
        .post(app.url("/v1/runs?wait=true&stream=true"))
        .json(&serde_json::json!({"prompt": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(both.status(), 201);
    let (events, _) = read_sse(both).await;
    assert_eq!(events.last().unwrap().event, "run_end");
    provider.abort();
}
