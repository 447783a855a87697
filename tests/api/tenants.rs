//! Bearer tokens and tenant isolation.

use agent_runner::config::TokenConfig;
use reqwest::Method;
use serde_json::json;

use crate::helpers::*;

fn token(tenant: &str, token: &str) -> TokenConfig {
    toml::from_str(&format!("tenant = \"{tenant}\"\ntoken = \"{token}\"")).unwrap()
}

#[tokio::test]
async fn requests_need_a_valid_token() {
    let app = spawn_with(|config| config.auth.tokens = vec![token("team-a", "secret-a")]).await;
    let anonymous = app.client.get(app.url("/v1/runs")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
    let wrong = app
        .client
        .get(app.url("/v1/runs"))
        .bearer_auth("secret-b")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let body: serde_json::Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    assert_eq!(app.get("/v1/runs").await.status, 200);
    // Probes need no token.
    let health = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn another_tenants_run_is_invisible_on_every_route() {
    let mut app = spawn_with(|config| {
        config.auth.tokens = vec![token("team-a", "secret-a"), token("team-b", "secret-b")];
    })
    .await;
    let run = app
        .run_to_end(two_step(
            "write_file",
            json!({"path": "f.txt", "content": "x"}),
            "done",
        ))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    app.token = Some("secret-b".into());
    for path in [
        format!("/v1/runs/{id}"),
        format!("/v1/runs/{id}/messages"),
        format!("/v1/runs/{id}/events"),
        format!("/v1/runs/{id}/workspace"),
        format!("/v1/runs/{id}/workspace/f.txt"),
    ] {
        let reply = app.get(&path).await;
        assert_eq!(reply.status, 404, "{path}");
        assert_eq!(reply.error_code(), "not_found");
    }
    assert_eq!(
        app.send(app.request(Method::DELETE, &format!("/v1/runs/{id}")))
            .await
            .status,
        404
    );
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
    // Nor can it be answered, continued, or listed by its thread.
    let answered = app
        .send(
            app.request(Method::POST, &format!("/v1/runs/{id}/actions"))
                .json(&json!({"actions": [{"call_id": "x", "decision": "approve"}]})),
        )
        .await;
    assert_eq!(answered.status, 404);
    let continued = app
        .post_run(json!({"prompt": "go on", "previous_run_id": id}))
        .await;
    assert_eq!(continued.status, 404, "{}", continued.text);
    let thread = app.get(&format!("/v1/runs?thread_id={id}")).await;
    assert_eq!(thread.body["runs"], json!([]));
    assert_eq!(
        app.get("/v1/runs").await.body["runs"],
        json!([]),
        "nothing was created"
    );
    app.token = Some("secret-a".into());
    assert_eq!(app.get(&format!("/v1/runs/{id}")).await.status, 200);
    assert_eq!(
        app.get("/v1/runs").await.body["runs"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}
