//! Context compaction (SPEC section 22) through the real server, with a
//! provider mock in OpenAI's wire format that answers summary requests: a
//! run that reads twenty files with a context a fraction of what they
//! take completes, and its answer needs the first file and the last.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::mock_openai_profile;

const FILES: usize = 20;

/// The code file `n` holds (1-based).
fn code(n: usize) -> usize {
    (n * 7) % 10 + 1
}

/// Twenty files, each a code among 600 characters of filler.
fn workspace() -> Value {
    let files: serde_json::Map<String, Value> = (1..=FILES)
        .map(|n| {
            let filler = "This line is here to take room in the context. ".repeat(12);
            let text = format!("{filler}\nfile {n:02} says: the code is {}\n", code(n));
            (format!("f{n:02}.txt"), json!(text))
        })
        .collect();
    json!({"files": files})
}

/// The codes a text names, by file: "file 03 says: the code is 2".
fn codes_in(text: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("file ") {
        let rest = &text[at + 5..];
        let (Some(number), Some(says)) = (rest.get(..2), rest.find(" says: the code is ")) else {
            continue;
        };
        let after = &rest[says + " says: the code is ".len()..];
        let value: String = after.chars().take_while(char::is_ascii_digit).collect();
        if let (Ok(file), Ok(value)) = (number.parse(), value.parse()) {
            found.push((file, value));
        }
    }
    found
}

/// What the mock was sent: every request, and how many steps (requests
/// with tools) it answered.
#[derive(Default)]
struct Mock {
    requests: Vec<Value>,
    steps: usize,
    fail_summaries: bool,
}

/// A provider that answers a summary request (no tools, the harness's ask
/// last) with the codes the conversation shows, and otherwise reads the
/// twenty files one by one, then answers the sum of the first and last
/// codes it can see (`unknown` when one is not in its context).
async fn provider(fail_summaries: bool) -> (String, Arc<Mutex<Mock>>) {
    let state = Arc::new(Mutex::new(Mock {
        fail_summaries,
        ..Mock::default()
    }));
    let router = Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State(state): State<Arc<Mutex<Mock>>>, body: axum::Json<Value>| async move {
                    let mut mock = state.lock().unwrap();
                    let body = body.0;
                    mock.requests.push(body.clone());
                    let text = body["messages"].to_string();
                    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
                    let summary = body.get("tools").is_none()
                        && last["content"]
                            .as_str()
                            .is_some_and(|c| c.starts_with("[agent-runner] The conversation above"));
                    let message = if summary {
                        if mock.fail_summaries {
                            return Err(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
                        }
                        let notes: Vec<String> = codes_in(&text)
                            .into_iter()
                            .map(|(file, value)| format!("file {file:02} says: the code is {value}"))
                            .collect();
                        json!({"role": "assistant",
                               "content": format!("Task: read f01 to f20, sum the first and last codes. Found: {}", notes.join("; "))})
                    } else if mock.steps < FILES {
                        mock.steps += 1;
                        let path = format!("f{:02}.txt", mock.steps);
                        json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("r{}", mock.steps),
                               "type": "function", "function": {"name": "read_file",
                               "arguments": json!({"path": path}).to_string()}}]})
                    } else {
                        mock.steps += 1;
                        let codes = codes_in(&text);
                        let of = |n: usize| codes.iter().find(|(file, _)| *file == n).map(|(_, v)| *v);
                        let answer = match (of(1), of(FILES)) {
                            (Some(a), Some(b)) => format!("The sum is {}.", a + b),
                            _ => "The sum is unknown.".to_owned(),
                        };
                        json!({"role": "assistant", "content": answer})
                    };
                    let finish = if message.get("tool_calls").is_some() { "tool_calls" } else { "stop" };
                    Ok(axum::Json(json!({
                        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "mock",
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
                    })))
                },
            ),
        )
        .with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (address, state)
}

/// The run's `compaction` events.
async fn compactions(app: &TestApp, id: &str) -> Vec<Value> {
    let events = app.events(id).await;
    events
        .into_iter()
        .filter(|e| e.event == "compaction")
        .map(|e| e.data)
        .collect()
}

async fn spawn(address: &str) -> TestApp {
    let address = address.to_owned();
    spawn_with(move |config| {
        config
            .models
            .insert("oa".into(), mock_openai_profile(&address));
    })
    .await
}

/// The context is 5,000 characters; the twenty files take over 13,000.
fn request(compaction: Value) -> Value {
    let mut body = json!({
        "prompt": "Read f01.txt to f20.txt one by one, then tell me the sum of the codes in the first and the last file.",
        "model": "oa", "tools": ["read_file"], "instructions": "",
        "workspace": workspace(),
        "limits": {"max_steps": 30, "max_tool_calls": 30},
        "context": {"max_context_chars": 5000, "compaction": compaction}
    });
    // Null: no compaction asked for (the key left out).
    if body["context"]["compaction"].is_null() {
        body["context"]
            .as_object_mut()
            .unwrap()
            .remove("compaction");
    }
    body
}

#[tokio::test]
async fn a_run_many_times_longer_than_its_context_completes_through_summaries() {
    let (address, mock) = provider(false).await;
    let app = spawn(&address).await;
    let run = app.run_to_end(request(json!({"at": 0.7}))).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["answer"],
        format!("The sum is {}.", code(1) + code(FILES)),
        "{run}"
    );
    assert_eq!(run["context"]["compaction"], json!({"at": 0.7}));
    let id = run["id"].as_str().unwrap();

    // Each summary request: no tools, the conversation then the ask.
    let requests = std::mem::take(&mut mock.lock().unwrap().requests);
    let summaries: Vec<&Value> = requests
        .iter()
        .filter(|r| r.get("tools").is_none())
        .collect();
    assert!(summaries.len() >= 2, "{} summaries", summaries.len());
    for request in &requests {
        if request.get("tools").is_some() {
            let sent = request["messages"].to_string().chars().count();
            assert!(sent <= 5000, "a step was sent {sent} characters");
        }
    }

    // The transcript keeps every message and gains the summaries.
    let messages = app.messages(id).await;
    let reads = messages.iter().filter(|m| m["role"] == "tool").count();
    assert_eq!(reads, FILES);
    let stored: Vec<&Value> = messages.iter().filter(|m| m["role"] == "summary").collect();
    assert_eq!(stored.len(), summaries.len());
    let mut last_replaced = 0;
    for summary in &stored {
        let replaces = summary["replaces"].as_u64().unwrap();
        assert!(replaces > last_replaced, "{summary}");
        last_replaced = replaces;
        assert!(
            summary["content"]
                .as_str()
                .unwrap()
                .contains("file 01 says")
        );
    }

    // One `compaction` event each, what is sent made smaller.
    let compactions = compactions(&app, id).await;
    assert_eq!(compactions.len(), stored.len());
    for (event, summary) in compactions.iter().zip(&stored) {
        assert_eq!(event["replaced_messages"], summary["replaces"], "{event}");
        let (before, after) = (
            event["before_chars"].as_u64().unwrap(),
            event["after_chars"].as_u64().unwrap(),
        );
        assert!(before > 3500 && after < before, "{event}");
        assert_eq!(event["usage"]["input_tokens"], 10, "{event}");
    }
    // The summaries' usage counts in the run's.
    assert_eq!(
        run["usage"]["model_calls_with_usage"],
        (FILES + 1 + summaries.len()) as u64,
        "{run}"
    );

    // A follow-up starts from the latest summary, not the first prompt.
    mock.lock().unwrap().steps = FILES;
    let follow = app
        .run_to_end(
            json!({"prompt": "And again?", "model": "oa", "tools": ["read_file"],
                           "instructions": "", "previous_run_id": id,
                           "context": {"max_context_chars": 5000}}),
        )
        .await;
    assert_eq!(follow["status"], "completed", "{follow}");
    let requests = mock.lock().unwrap().requests.clone();
    let first = &requests[0]["messages"][0];
    assert_eq!(first["role"], "user");
    assert_eq!(
        first["content"],
        stored.last().unwrap()["content"],
        "{first}"
    );
}

#[tokio::test]
async fn without_compaction_or_when_a_summary_fails_old_results_are_masked() {
    // Masking alone: the first file's code leaves the context.
    let (address, _) = provider(false).await;
    let app = spawn(&address).await;
    let body = request(Value::Null);
    let run = app.run_to_end(body).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "The sum is unknown.", "{run}");
    assert!(run["context"].get("compaction").is_none(), "{run}");

    // A summary that fails: the event says so, masking goes on.
    let (address, mock) = provider(true).await;
    let app = spawn(&address).await;
    let run = app.run_to_end(request(json!({}))).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["context"]["compaction"]["at"], 0.8);
    let id = run["id"].as_str().unwrap();
    let compactions = compactions(&app, id).await;
    assert_eq!(compactions.len(), 1, "tried once a drive");
    assert_eq!(compactions[0]["fallback"], "masking");
    assert_eq!(compactions[0]["replaced_messages"], 0);
    assert!(
        compactions[0]["error"]
            .as_str()
            .unwrap()
            .contains("summary")
    );
    let summaries = mock
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|r| r.get("tools").is_none())
        .count();
    assert_eq!(summaries, 1);
    let messages = app.messages(id).await;
    assert!(messages.iter().all(|m| m["role"] != "summary"));
}

#[tokio::test]
async fn a_compaction_that_cannot_be_is_refused() {
    let (address, _) = provider(false).await;
    let app = spawn(&address).await;
    for (compaction, names) in [
        (json!({"at": 0}), "context.compaction.at must be"),
        (json!({"at": 1.5}), "context.compaction.at must be"),
        (
            json!({"profile": "nope"}),
            "context.compaction.profile: unknown model profile",
        ),
        (json!({"every": 3}), "every"),
    ] {
        let reply = app.post_run(request(compaction.clone())).await;
        assert_eq!(reply.status, 422, "{compaction}: {}", reply.text);
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{compaction}: {message}");
    }
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
}

#[tokio::test]
async fn another_profile_may_write_the_summaries_and_a_profile_may_compact_by_default() {
    let (runs, run_mock) = provider(false).await;
    let (summaries, summary_mock) = provider(false).await;
    let app = spawn_with(move |config| {
        config
            .models
            .insert("oa".into(), mock_openai_profile(&runs));
        config
            .models
            .insert("writer".into(), mock_openai_profile(&summaries));
        let mut compacting = mock_openai_profile(&runs);
        if let agent_runner::models::profile::ModelProfile::OpenAi(http) = &mut compacting {
            http.compaction_at = Some(0.7);
        }
        config.models.insert("compacting".into(), compacting);
    })
    .await;
    let run = app
        .run_to_end(request(json!({"at": 0.7, "profile": "writer"})))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["context"]["compaction"],
        json!({"at": 0.7, "profile": "writer"})
    );
    // The run's provider was asked for steps only; the writer's for the
    // summaries only.
    let asked_runs = std::mem::take(&mut run_mock.lock().unwrap().requests);
    assert!(asked_runs.iter().all(|r| r.get("tools").is_some()));
    let written = summary_mock.lock().unwrap().requests.clone();
    assert!(!written.is_empty());
    assert!(written.iter().all(|r| r.get("tools").is_none()));
    assert_eq!(
        run["answer"],
        format!("The sum is {}.", code(1) + code(FILES)),
        "{run}"
    );

    // A profile's `compaction_at`: its runs compact unless they say.
    run_mock.lock().unwrap().steps = 0;
    let mut body = request(Value::Null);
    body["model"] = json!("compacting");
    let run = app.run_to_end(body).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["context"]["compaction"], json!({"at": 0.7}));
    let id = run["id"].as_str().unwrap();
    assert!(!compactions(&app, id).await.is_empty());
}
