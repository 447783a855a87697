//! A2A (SPEC section 25) at the wire, where the official SDKs' suites
//! (clients/python/tests/test_a2a.py, clients/typescript/test/a2a.test.mjs)
//! do not reach: tasks of another tenant or another agent, JSON-RPC
//! errors, a fast task's stream ending, a context waiting for input.

use agent_runner::config::TokenConfig;
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

fn token(tenant: &str, token: &str) -> TokenConfig {
    toml::from_str(&format!("tenant = \"{tenant}\"\ntoken = \"{token}\"")).unwrap()
}

/// A server with tenants `a` and `b`, and agents `greeter` and `writer` of
/// `a` (the app's token is `a`'s).
async fn two_tenants() -> TestApp {
    let app = spawn_with(|config| {
        config.auth.tokens = vec![token("a", "secret-a"), token("b", "secret-b")];
    })
    .await;
    let mut app = app;
    app.token = Some("secret-a".into());
    for (name, definition) in [
        (
            "greeter",
            json!({"model": {"scripted": [{"content": "hello"}]}}),
        ),
        (
            "writer",
            json!({"tools": ["write_file"], "approval": {"tools": ["write_file"]},
                   "model": {"scripted": [
                       {"content": "", "tool_calls": [call("w", "write_file", json!({"path": "a.txt", "content": "x"}))]},
                       {"content": "written"}]}}),
        ),
    ] {
        let mut body = definition;
        body["name"] = json!(name);
        let created = app
            .send(app.request(Method::POST, "/v1/agents").json(&body))
            .await;
        assert_eq!(created.status, 201, "{}", created.text);
    }
    app
}

/// One JSON-RPC call to `agent`: the reply's body.
async fn rpc(app: &TestApp, agent: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let reply = app
        .send(
            app.request(Method::POST, &format!("/a2a/{agent}"))
                .json(&body),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["id"], 7, "{}", reply.text);
    reply.body
}

fn message(text: &str) -> Value {
    json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]})
}

fn code(reply: &Value) -> i64 {
    reply["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error in {reply}"))
}

#[tokio::test]
async fn tasks_of_another_tenant_or_agent_are_not_found() {
    let mut app = two_tenants().await;
    let sent = rpc(
        &app,
        "greeter",
        "SendMessage",
        json!({"message": message("hi")}),
    )
    .await;
    assert_eq!(
        sent["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{sent}"
    );
    let id = sent["result"]["task"]["id"].clone();
    // The same tenant's other agent does not have it.
    let other = rpc(&app, "writer", "GetTask", json!({"id": id})).await;
    assert_eq!(code(&other), -32001, "{other}");
    // A plain run of the tenant is no agent's task.
    let plain = app.create_run(json!({"prompt": "plain"})).await;
    let plain = rpc(&app, "greeter", "GetTask", json!({"id": plain["id"]})).await;
    assert_eq!(code(&plain), -32001, "{plain}");
    // Tenant b has the agent name of its own, and sees none of a's.
    app.token = Some("secret-b".into());
    let created = app
        .send(
            app.request(Method::POST, "/v1/agents")
                .json(&json!({"name": "greeter", "model": {"scripted": [{"content": "b's"}]}})),
        )
        .await;
    assert_eq!(created.status, 201);
    for method in ["GetTask", "CancelTask", "SubscribeToTask"] {
        let reply = rpc(&app, "greeter", method, json!({"id": id})).await;
        assert_eq!(code(&reply), -32001, "{method}: {reply}");
    }
    let answer = rpc(
        &app,
        "greeter",
        "SendMessage",
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "taskId": id,
                           "parts": [{"data": {"actions": []}}]}}),
    )
    .await;
    assert_eq!(code(&answer), -32001, "{answer}");
}

#[tokio::test]
async fn requests_that_are_not_right_get_the_json_rpc_error_that_says_why() {
    let app = two_tenants().await;
    let raw = app
        .send(
            app.request(Method::POST, "/a2a/greeter")
                .header("content-type", "application/json")
                .body("{not json"),
        )
        .await;
    assert_eq!(
        (raw.status.as_u16(), code(&raw.body)),
        (200, -32700),
        "{}",
        raw.text
    );
    assert_eq!(raw.body["id"], Value::Null);
    let cases = [
        ("message/send", json!({"message": message("hi")}), -32601),
        ("SendMessage", json!({}), -32602),
        (
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": []}}),
            -32602,
        ),
        (
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}),
            -32602,
        ),
        (
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER",
                                          "parts": [{"url": "https://example.com/a.txt"}]}}),
            -32005,
        ),
        ("GetTask", json!({"id": "not-a-task"}), -32001),
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": "x"}),
            -32003,
        ),
        ("ListTasks", json!({}), -32004),
    ];
    for (method, params, expected) in cases {
        let reply = rpc(&app, "greeter", method, params.clone()).await;
        assert_eq!(code(&reply), expected, "{method} {params}: {reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // Nothing of those made a run.
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
    // An unknown agent is 404, as any route of one.
    let missing = app
        .send(app.request(Method::POST, "/a2a/nobody").json(&json!({})))
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "agent_not_found");
}

#[tokio::test]
async fn a_fast_tasks_stream_ends_with_its_end_and_a_waiting_context_takes_no_new_task() {
    let app = two_tenants().await;
    let body = json!({"jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage",
                      "params": {"message": message("hi")}});
    let response = app
        .request(Method::POST, "/a2a/greeter")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // The stream ends by itself once the task ended (the test's deadline
    // is the helper's).
    let (events, _) = read_sse(response).await;
    let results: Vec<&Value> = events.iter().map(|event| &event.data["result"]).collect();
    assert!(results[0].get("task").is_some(), "{results:?}");
    let last = results.last().unwrap();
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{results:?}"
    );
    assert!(events.iter().all(|event| event.data["id"] == "s"));

    // A context whose latest task waits for input takes no new message:
    // its task is answered first.
    let waiting = rpc(
        &app,
        "writer",
        "SendMessage",
        json!({"message": message("write")}),
    )
    .await;
    let task = &waiting["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{waiting}"
    );
    let mut again = message("write more");
    again["contextId"] = task["contextId"].clone();
    let refused = rpc(&app, "writer", "SendMessage", json!({"message": again})).await;
    assert_eq!(code(&refused), -32004, "{refused}");
    assert_eq!(
        app.get("/v1/runs").await.body["runs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn an_archived_agent_is_no_a2a_server_and_a_card_needs_a_token() {
    let mut app = two_tenants().await;
    let card = app.get("/a2a/greeter/.well-known/agent-card.json").await;
    assert_eq!(card.status, 200, "{}", card.text);
    assert_eq!(card.body["name"], "greeter");
    assert_eq!(
        card.body["supportedInterfaces"][0]["url"],
        app.url("/a2a/greeter")
    );
    assert_eq!(card.body["capabilities"]["streaming"], true);
    assert_eq!(
        card.body["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    let archived = app
        .send(app.request(Method::DELETE, "/v1/agents/greeter"))
        .await;
    assert!(archived.status.is_success(), "{}", archived.text);
    let card = app.get("/a2a/greeter/.well-known/agent-card.json").await;
    assert_eq!(
        (card.status.as_u16(), card.error_code()),
        (404, "agent_not_found")
    );
    let call = app
        .send(
            app.request(Method::POST, "/a2a/greeter")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                              "params": {"message": message("hi")}})),
        )
        .await;
    assert_eq!(
        (call.status.as_u16(), call.error_code()),
        (404, "agent_not_found")
    );
    app.token = None;
    let anonymous = app.get("/a2a/writer/.well-known/agent-card.json").await;
    assert_eq!(anonymous.status, 401);
}
