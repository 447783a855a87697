//! The console in a real browser: headless Chromium (Debian's) driven by
//! Playwright (`tests/browser/console.mjs`, its `playwright-core` installed
//! by `tests/browser/install.sh`) against the real server. Each scenario
//! saves screenshots under `target/console-screenshots/`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::helpers::*;

fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots")
}

/// Runs `scenario` of the browser driver against `app`: what it reports.
async fn browse(app: &TestApp, scenario: &str) -> Value {
    browse_with(app, scenario, &[]).await
}

/// The same, with more variables for the driver.
async fn browse_with(app: &TestApp, scenario: &str, env: &[(&str, &str)]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/console.mjs");
    let base = app.url("");
    let token = app.token.clone();
    let scenario = scenario.to_owned();
    let mut command = tokio::process::Command::new("node");
    command
        .arg(script)
        .arg(installed("tests/browser/install.sh"))
        .arg(base)
        .arg(&scenario)
        .arg(screenshots())
        .envs(env.iter().copied())
        .kill_on_drop(true);
    if let Some(token) = token {
        command.arg(token);
    }
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), command.output())
        .await
        .unwrap_or_else(|_| panic!("the browser scenario {scenario} took over two minutes"))
        .unwrap();
    assert!(
        output.status.success(),
        "the browser scenario failed (screenshots in {}):\n{}",
        screenshots().display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test]
async fn the_console_shows_a_run_s_attempts_side_by_side_with_their_diffs() {
    let app = spawn_with(|config| {
        let check = "program = \"true\"\ncheck = true";
        config
            .commands
            .insert("check".into(), toml::from_str(check).unwrap());
    })
    .await;
    let seen = browse(&app, "attempts").await;
    assert_eq!(seen["attempts"], 2);
}

#[tokio::test]
async fn the_console_shows_a_runs_sub_agents_as_a_tree_and_answers_a_childs_pause() {
    let app = spawn_app().await;
    let seen = browse(&app, "subruns").await;
    assert_eq!(seen["subruns"], 3, "{seen}");
    assert_eq!(seen["nested"], 1, "{seen}");
}

#[tokio::test]
async fn the_console_shows_a_fallback_and_approves_edited_arguments() {
    let app = spawn_with(|config| {
        let flaky = "kind = \"scripted\"\nfallback = [\"steady\"]\n\
                     script = [{unavailable = \"HTTP 529 Overloaded\"}, {content = \"noted\"}]";
        let steady = "kind = \"scripted\"\nscript = ['{\"content\": \"\", \"tool_calls\": \
                      [{\"id\": \"w1\", \"name\": \"write_file\", \"arguments\": \
                      {\"path\": \"notes.txt\", \"content\": \"proposed\"}}, \
                      {\"id\": \"w2\", \"name\": \"write_file\", \"arguments\": \
                      {\"path\": \"other.txt\", \"content\": \"as proposed\"}}]}']";
        config
            .models
            .insert("flaky".into(), toml::from_str(flaky).unwrap());
        config
            .models
            .insert("steady".into(), toml::from_str(steady).unwrap());
    })
    .await;
    let seen = browse(&app, "edited").await;
    assert!(
        seen["edited"].as_str().unwrap().contains("edited\\n"),
        "{seen}"
    );
    let id = seen["run"].as_str().unwrap();
    let file = app.get(&format!("/v1/runs/{id}/workspace/notes.txt")).await;
    assert_eq!(file.text, "edited\n");
    let other = app.get(&format!("/v1/runs/{id}/workspace/other.txt")).await;
    assert_eq!(other.text, "as proposed");
}

#[tokio::test]
async fn the_console_shows_what_a_run_cost_and_its_cache() {
    // Two calls, each of 1,000 input tokens (600 read from the cache, 200
    // written to it) and 10 output: at the price below $0.0006 + $0.00018
    // + $0.00075 + $0.00015, $0.00168 each.
    let usage = "{\"input_tokens\": 1000, \"cached_input_tokens\": 600, \
                 \"cache_write_tokens\": 200, \"output_tokens\": 10}";
    let profile = format!(
        "kind = \"scripted\"\nscript = [\
         '{{\"content\": \"\", \"tool_calls\": [{{\"id\": \"l1\", \"name\": \"list_dir\", \"arguments\": {{}}}}], \"usage\": {usage}}}', \
         '{{\"content\": \"looked\", \"usage\": {usage}}}']\n\
         [price]\ninput = 3.0\noutput = 15.0\ncached_input = 0.3\ncache_write = 3.75\n"
    );
    let app = spawn_with(move |config| {
        config
            .models
            .insert("priced".into(), toml::from_str(&profile).unwrap());
    })
    .await;
    let seen = browse(&app, "cost").await;
    assert!(seen["facts"].as_str().unwrap().contains("Cost"), "{seen}");
}

#[tokio::test]
async fn the_console_lists_runs_live_and_filters_them() {
    let app = spawn_app().await;
    let seen = browse(&app, "list").await;
    assert_eq!(seen["runs"].as_array().unwrap().len(), 3);
    assert_eq!(seen["streams"], 1, "the list needs the status stream only");
}

#[tokio::test]
async fn the_console_shows_a_run_s_events_as_they_happen_and_its_text_as_text() {
    let app = spawn_app().await;
    let seen = browse(&app, "run").await;
    let id = seen["run"].as_str().unwrap();
    let stored = app.events(id).await;
    assert_eq!(seen["events"], stored.len(), "every stored event is shown");
    assert_eq!(seen["streams"], 2, "the status stream and the run's");
}

#[tokio::test]
async fn the_console_cancels_a_run() {
    let app = spawn_app().await;
    let seen = browse(&app, "cancel").await;
    let run = app
        .get(&format!("/v1/runs/{}", seen["run"].as_str().unwrap()))
        .await;
    assert_eq!(run.body["status"], "aborted");
}

#[tokio::test]
async fn the_console_approves_a_pending_call() {
    let app = spawn_app().await;
    let seen = browse(&app, "approve").await;
    let id = seen["run"].as_str().unwrap();
    let file = app.get(&format!("/v1/runs/{id}/workspace/note.txt")).await;
    assert_eq!(file.text, "approved in the browser");
    let run = app.get(&format!("/v1/runs/{id}")).await;
    assert_eq!(run.body["answer"], "written");
}

#[tokio::test]
async fn the_console_creates_a_run_from_its_form() {
    let app = spawn_app().await;
    let seen = browse(&app, "create").await;
    let run = app
        .get(&format!("/v1/runs/{}", seen["run"].as_str().unwrap()))
        .await;
    assert_eq!(run.body["prompt"], "hello from the form");
    assert_eq!(run.body["instructions"], "Be brief.");
    assert_eq!(run.body["model"]["profile"], "demo");
    assert_eq!(
        run.body["tools"],
        serde_json::json!(["list_dir", "read_file", "edit_file", "search"])
    );
    assert_eq!(run.body["status"], "completed");
    let all = app.get("/v1/runs").await;
    assert_eq!(
        all.body["runs"].as_array().unwrap().len(),
        1,
        "the refused one made nothing"
    );
}

#[tokio::test]
async fn the_console_lists_agents_their_versions_and_runs_and_shows_a_run_s_output() {
    let app = spawn_app().await;
    let seen = browse(&app, "agents").await;
    assert_eq!(seen["streams"], 2, "the status stream and the open run's");
    let agent = app.get("/v1/agents/triage").await;
    assert_eq!(agent.body["version"], 2);
    let run = app
        .get(&format!("/v1/runs/{}", seen["run"].as_str().unwrap()))
        .await;
    assert_eq!(
        run.body["agent"],
        serde_json::json!({"name": "triage", "version": 2})
    );
    assert_eq!(run.body["output"]["label"], "bug");
    let older = app
        .get(&format!("/v1/runs/{}", seen["older"].as_str().unwrap()))
        .await;
    assert_eq!(older.body["agent"]["version"], 1);
    assert_eq!(older.body["output"]["label"], "question");
    let listed = app.get("/v1/runs?agent=triage").await;
    assert_eq!(
        listed.body["runs"].as_array().unwrap().len(),
        2,
        "what the page showed as the agent's runs"
    );
}

#[tokio::test]
async fn the_console_lists_schedules_with_their_next_and_last_runs() {
    let app = spawn_app().await;
    let seen = browse(&app, "schedules").await;
    let schedule = app
        .get(&format!(
            "/v1/schedules/{}",
            seen["schedule"].as_str().unwrap()
        ))
        .await;
    assert_eq!(schedule.body["last_run_id"], seen["run"]);
}

#[tokio::test]
async fn the_console_asks_for_a_token_and_keeps_it_in_the_tab() {
    let mut app = spawn_with(|config| {
        config.auth.tokens =
            vec![toml::from_str("tenant = \"team-a\"\ntoken = \"console-secret\"").unwrap()];
    })
    .await;
    app.token = Some("console-secret".into());
    let seen = browse(&app, "token").await;
    assert!(seen["run"].is_string());
}

#[tokio::test]
async fn the_console_is_served_with_a_policy_that_runs_its_own_code_only() {
    let app = spawn_app().await;
    let page = app.get("/").await;
    assert_eq!(page.status, 200);
    assert!(
        page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let policy = page.headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"));
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    for (path, kind) in [
        ("/console/app.js", "text/javascript"),
        ("/console/app.css", "text/css"),
    ] {
        let asset = app.get(path).await;
        assert_eq!(asset.status, 200, "{path}");
        assert!(
            asset.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        assert!(page.text.contains(path), "the page loads {path}");
    }
    let missing = app.get("/console/other.js").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "not_found");
    // The page needs no token; the API it calls does.
    let guarded = spawn_with(|config| {
        config.auth.tokens = vec![toml::from_str("tenant = \"a\"\ntoken = \"t\"").unwrap()];
    })
    .await;
    let page = guarded.client.get(guarded.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
}

/// An OpenAI-compatible provider that streams `Once upon` once released
/// (`GET /release`), then the rest of its answer once released again: its
/// address. (Deltas are live only: a page that subscribes after the first
/// was sent never sees it, so the test releases it once the page follows.)
async fn gated_provider() -> String {
    use std::sync::Arc;
    let gate = Arc::new(tokio::sync::Notify::new());
    let chunk = |delta: Value, finish: Value| {
        let event = serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk",
            "created": 1694268190, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        });
        format!("data: {event}\n\n")
    };
    let answer = {
        let gate = Arc::clone(&gate);
        move || {
            let gate = Arc::clone(&gate);
            async move {
                let first = chunk(
                    serde_json::json!({"role": "assistant", "content": "Once upon"}),
                    Value::Null,
                );
                let rest = [
                    chunk(
                        serde_json::json!({"content": " a time, a run ended well."}),
                        Value::Null,
                    ),
                    chunk(serde_json::json!({}), serde_json::json!("stop")),
                    "data: [DONE]\n\n".to_owned(),
                ]
                .concat();
                let body = async_stream::stream! {
                    gate.notified().await;
                    yield Ok::<_, std::convert::Infallible>(first);
                    gate.notified().await;
                    yield Ok(rest);
                };
                axum::response::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(axum::body::Body::from_stream(body))
                    .unwrap()
            }
        }
    };
    let release = move || {
        let gate = Arc::clone(&gate);
        async move {
            gate.notify_one();
            "released"
        }
    };
    let router = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(answer))
        .route("/release", axum::routing::get(release));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

#[tokio::test]
async fn the_console_shows_a_streaming_model_s_text_as_it_comes() {
    let provider = gated_provider().await;
    let profile = toml::from_str(&format!(
        "kind = \"openai\"\nbase_url = \"{provider}/v1\"\nmodel = \"m\"\nstream = true\nmax_attempts = 1"
    ))
    .unwrap();
    let app = spawn_with(|config| {
        config.models.insert("gated".into(), profile);
    })
    .await;
    let seen = browse_with(&app, "streaming", &[("PROVIDER", &provider)]).await;
    let id = seen["run"].as_str().unwrap();
    let run = app.get(&format!("/v1/runs/{id}")).await;
    assert_eq!(run.body["answer"], "Once upon a time, a run ended well.");
}
