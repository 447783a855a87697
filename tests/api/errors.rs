//! Every kind of bad request gets the JSON error shape and creates nothing.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn malformed_bodies_are_refused_with_json_errors() {
    let app = spawn_with(|config| config.server.max_body_bytes = 4096).await;
    let post = |body: &'static str, content_type: Option<&'static str>| {
        let mut request = app.request(Method::POST, "/v1/runs").body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        app.send(request)
    };
    let cases = [
        (
            post("{\"prompt\": ", Some("application/json")).await,
            400,
            "invalid_json",
        ),
        (
            post("", Some("application/json")).await,
            400,
            "invalid_json",
        ),
        (
            post("{} extra", Some("application/json")).await,
            400,
            "invalid_json",
        ),
        (
            post("{\"prompt\": \"hi\"}", Some("text/plain")).await,
            415,
            "unsupported_media_type",
        ),
        (
            post("{\"prompt\": \"hi\"}", None).await,
            415,
            "unsupported_media_type",
        ),
        (
            post("[1, 2]", Some("application/json")).await,
            422,
            "invalid_request",
        ),
    ];
    for (reply, status, code) in cases {
        assert_eq!(reply.status, status, "{}", reply.text);
        assert_eq!(reply.error_code(), code);
    }
    let big = json!({"prompt": "x".repeat(10_000)});
    let reply = app.post_run(big).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.error_code(), "payload_too_large");
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
}

#[tokio::test]
async fn invalid_fields_are_refused_with_422_naming_the_field() {
    let app = spawn_app().await;
    let cases: Vec<(Value, &str)> = vec![
        (json!({}), "prompt"),
        (json!({"prompt": ""}), "prompt"),
        (json!({"prompt": "  "}), "prompt"),
        (json!({"prompt": "a\u{0}b"}), "prompt"),
        (
            json!({"prompt": "x", "instructions": "be\u{0}"}),
            "instructions",
        ),
        (json!({"prompt": 5}), "prompt"),
        (json!({"prompt": "x", "colour": "red"}), "colour"),
        (
            json!({"prompt": "x", "limits": {"max_steps": 0}}),
            "limits.max_steps",
        ),
        (
            json!({"prompt": "x", "limits": {"max_steps": 101}}),
            "limits.max_steps",
        ),
        (
            json!({"prompt": "x", "limits": {"max_steps": "3"}}),
            "limits.max_steps",
        ),
        (
            json!({"prompt": "x", "limits": {"max_steps": -1}}),
            "limits.max_steps",
        ),
        (
            json!({"prompt": "x", "limits": {"max_tool_calls": 501}}),
            "limits.max_tool_calls",
        ),
        (
            json!({"prompt": "x", "limits": {"timeout_ms": 0}}),
            "limits.timeout_ms",
        ),
        (json!({"prompt": "x", "limits": {"steps": 1}}), "steps"),
        (
            json!({"prompt": "x", "context": {"max_context_chars": 0}}),
            "context.max_context_chars",
        ),
        (
            json!({"prompt": "x", "context": {"max_tool_result_chars": 2000000}}),
            "context.max_tool_result_chars",
        ),
        (
            json!({"prompt": "x", "tools": ["read_file", "format_disk"]}),
            "format_disk",
        ),
        (
            json!({"prompt": "x", "tools": ["read_file", "read_file"]}),
            "tools",
        ),
        (json!({"prompt": "x", "tools": "read_file"}), "tools"),
        (
            json!({"prompt": "x", "tools": ["run_command"]}),
            "run_command",
        ),
        (json!({"prompt": "x", "commands": ["deploy"]}), "deploy"),
        (
            json!({"prompt": "x", "model": {"profile": "gpt-9"}}),
            "gpt-9",
        ),
        (
            json!({"prompt": "x", "model": {"profile": "demo", "scripted": []}}),
            "model",
        ),
        (
            json!({"prompt": "x", "model": {"scripted": "nope"}}),
            "model.scripted",
        ),
        (
            json!({"prompt": "x", "model": {"scripted": [{"delay_ms": -5, "content": ""}]}}),
            "delay_ms",
        ),
        (
            json!({"prompt": "x", "workspace": {"files": {"../escape.txt": "x"}}}),
            "workspace.files",
        ),
        (
            json!({"prompt": "x", "workspace": {"files": {"/etc/passwd": "x"}}}),
            "workspace.files",
        ),
        (
            json!({"prompt": "x", "workspace": {"files": {"a//b": "x"}}}),
            "workspace.files",
        ),
        (
            json!({"prompt": "x", "workspace": {"files": {"a": 1}}}),
            "workspace.files",
        ),
        (json!({"prompt": "x", "workspace": {"dirs": []}}), "dirs"),
        (json!({"prompt": "x", "metadata": [1]}), "metadata"),
    ];
    for (body, field) in cases {
        let reply = app.post_run(body.clone()).await;
        assert_eq!(reply.status, 422, "{body}: {}", reply.text);
        assert_eq!(reply.error_code(), "invalid_request");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(field),
            "{body}: {message:?} does not name {field}"
        );
    }
    assert_eq!(
        app.get("/v1/runs").await.body["runs"],
        json!([]),
        "nothing was created"
    );
    let workspaces = std::fs::read_dir(app.dir.path().join("workspaces"))
        .unwrap()
        .count();
    assert_eq!(workspaces, 0, "no workspace was left behind");
}

#[tokio::test]
async fn unknown_routes_wrong_methods_and_bad_queries_are_json_errors() {
    let app = spawn_app().await;
    let cases = [
        (app.get("/v2/nothing").await, 404, "not_found"),
        (
            app.send(app.request(Method::PUT, "/v1/runs")).await,
            405,
            "method_not_allowed",
        ),
        (
            app.send(app.request(Method::POST, "/healthz")).await,
            405,
            "method_not_allowed",
        ),
        (app.get("/v1/runs/not-a-uuid").await, 404, "not_found"),
        (
            app.get("/v1/runs/0190a8c4-1234-7000-8000-000000000000")
                .await,
            404,
            "not_found",
        ),
        (app.get("/v1/runs?limit=0").await, 400, "invalid_query"),
        (app.get("/v1/runs?limit=101").await, 400, "invalid_query"),
        (app.get("/v1/runs?limit=ten").await, 400, "invalid_query"),
        (
            app.get("/v1/runs?status=finished").await,
            400,
            "invalid_query",
        ),
        (app.get("/v1/runs?cursor=abc").await, 400, "invalid_query"),
        // Unknown and repeated parameters are not silently ignored.
        (app.get("/v1/runs?colour=red").await, 400, "invalid_query"),
        (
            app.get("/v1/runs?limit=5&limit=6").await,
            400,
            "invalid_query",
        ),
        (app.get("/v1/models?verbose=1").await, 400, "invalid_query"),
        (
            app.send(
                app.request(Method::POST, "/v1/runs?wait=true&wait=false")
                    .json(&json!({"prompt": "x"})),
            )
            .await,
            400,
            "invalid_query",
        ),
        (
            app.send(
                app.request(Method::POST, "/v1/runs?wait=maybe")
                    .json(&json!({"prompt": "x"})),
            )
            .await,
            400,
            "invalid_query",
        ),
    ];
    for (reply, status, code) in cases {
        assert_eq!(reply.status, status, "{}", reply.text);
        assert_eq!(reply.error_code(), code, "{}", reply.text);
    }
}

#[tokio::test]
async fn probes_metrics_and_models_answer() {
    let app = spawn_app().await;
    assert_eq!(app.get("/healthz").await.body, json!({"status": "ok"}));
    let ready = app.get("/readyz").await.body;
    assert_eq!(ready["status"], "ready");
    // What the command sandbox guarantees on this machine, which can
    // hold them all.
    assert_eq!(ready["sandbox"]["mode"], "enforce", "{ready}");
    assert_eq!(ready["sandbox"]["weaker"], json!([]), "{ready}");
    assert_eq!(ready["sandbox"]["presets"], "enabled", "{ready}");
    app.run_to_end(json!({"prompt": "hi"})).await;
    let metrics = app.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    for line in [
        "agent_runner_runs_finished_total{status=\"completed\"} 1",
        "agent_runner_active_runs 0",
        "agent_runner_queue_length 0",
        "agent_runner_model_calls_total{profile=\"demo\"} 2",
        "agent_runner_tool_calls_total{tool=\"list_dir\"} 1",
        "agent_runner_run_duration_seconds_count 1",
    ] {
        assert!(
            metrics.text.lines().any(|l| l == line),
            "missing {line:?} in\n{}",
            metrics.text
        );
    }
    let models = app.get("/v1/models").await.body;
    assert_eq!(
        models,
        json!({"models": [{"name": "demo", "kind": "scripted"}]})
    );
}

#[tokio::test]
async fn a_key_given_twice_is_refused_not_silently_the_last() {
    let app = spawn_app().await;
    for (body, named) in [
        (
            r#"{"prompt": "read the notes", "prompt": "delete everything"}"#,
            "prompt",
        ),
        (
            r#"{"prompt": "x", "workspace": {"files": {"a.txt": "1", "a.txt": "2"}}}"#,
            "a.txt",
        ),
        (
            r#"{"prompt": "x", "metadata": {"k": [{"v": 1, "v": 2}]}}"#,
            "v",
        ),
    ] {
        let reply = app
            .send(
                app.request(Method::POST, "/v1/runs")
                    .header("content-type", "application/json")
                    .body(body),
            )
            .await;
        assert_eq!(reply.status, 400, "{}", reply.text);
        assert_eq!(reply.error_code(), "invalid_json");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("the key \"{named}\" appears twice")),
            "{message}"
        );
    }
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
}

#[tokio::test]
async fn unknown_and_repeated_query_parameters_are_refused() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(json!({"prompt": "x", "model": {"scripted": [{"content": "ok"}]}}))
        .await;
    let id = run["id"].as_str().unwrap();
    for (path, named) in [
        ("/v1/runs?wiat=true".to_owned(), "wiat"),
        ("/v1/runs?limit=1&limit=2".to_owned(), "limit"),
        ("/healthz?verbose=1".to_owned(), "verbose"),
        (format!("/v1/runs/{id}/events?from=3"), "from"),
        (format!("/v1/runs/{id}?after=1"), "after"),
    ] {
        let reply = app.get(&path).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.text);
        assert_eq!(reply.error_code(), "invalid_query");
        assert!(reply.text.contains(named), "{path}: {}", reply.text);
    }
    // A resume point must be one, wherever it comes from; the header wins.
    let events = format!("/v1/runs/{id}/events");
    for (header, query) in [("", ""), ("3", "?after=x"), ("x", "?after=3")] {
        let reply = app
            .send(
                app.request(Method::GET, &format!("{events}{query}"))
                    .header("last-event-id", header),
            )
            .await;
        assert_eq!(reply.status, 400, "{header:?} {query:?}: {}", reply.text);
    }
    // What a route takes is still taken.
    assert_eq!(
        app.get("/v1/runs?limit=1&status=completed").await.status,
        200
    );
    let reply = app
        .send(
            app.request(Method::POST, "/v1/runs?wait=true&wait=false")
                .json(&json!({"prompt": "x"})),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        app.get("/v1/runs").await.body["runs"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}
