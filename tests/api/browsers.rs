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
