//! Conversations (SPEC section 9): a run's instructions, and runs that
//! continue others, with their transcripts and workspaces.

use agent_runner::models::profile::{HttpProfile, ModelProfile};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::mock_providers;

/// A server with an OpenAI profile `oa` and an Anthropic profile `an`, both
/// on the mock, `oa` with instructions of its own.
async fn spawn_with_providers(address: &str) -> TestApp {
    let address = address.to_owned();
    spawn_with(move |config| {
        let http = |base_url: String, instructions: Option<&str>| HttpProfile {
            base_url: Some(base_url),
            model: Some("mock".into()),
            // Any variable that is set: the mock reads no key.
            api_key_env: Some("PATH".into()),
            instructions: instructions.map(str::to_owned),
            max_attempts: Some(1),
            ..HttpProfile::default()
        };
        config.models.insert(
            "oa".into(),
            ModelProfile::OpenAi(http(
                format!("{address}/v1"),
                Some("You are the profile's agent."),
            )),
        );
        config.models.insert(
            "an".into(),
            ModelProfile::Anthropic(http(address.clone(), None)),
        );
    })
    .await
}

fn roles(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn instructions_reach_both_providers_as_their_system_prompt_and_stay_out_of_the_transcript() {
    let (address, seen) = mock_providers().await;
    let app = spawn_with_providers(&address).await;

    let profiles = app
        .run_to_end(json!({"prompt": "hello", "model": {"profile": "oa"}}))
        .await;
    assert_eq!(profiles["status"], "completed", "{profiles}");
    assert_eq!(profiles["instructions"], "You are the profile's agent.");
    let own = app
        .run_to_end(json!({"prompt": "hello", "model": {"profile": "oa"}, "instructions": "Answer in French."}))
        .await;
    assert_eq!(own["instructions"], "Answer in French.");
    let none = app
        .run_to_end(json!({"prompt": "hello", "model": {"profile": "oa"}, "instructions": ""}))
        .await;
    assert_eq!(none["instructions"], Value::Null);
    let claude = app
        .run_to_end(
            json!({"prompt": "hello", "model": {"profile": "an"}, "instructions": "Be brief."}),
        )
        .await;
    assert_eq!(claude["status"], "completed", "{claude}");
    // Each provider's own reason for stopping is on its model_end event.
    for (run, reason) in [(&profiles, "stop"), (&claude, "end_turn")] {
        let events = app.events(run["id"].as_str().unwrap()).await;
        let ends: Vec<&Value> = events
            .iter()
            .filter(|event| event.event == "model_end")
            .map(|event| &event.data["finish_reason"])
            .collect();
        assert_eq!(ends, [reason], "{events:?}");
    }

    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    assert_eq!(
        requests[0]["messages"][0],
        json!({"role": "system", "content": "You are the profile's agent."})
    );
    assert_eq!(requests[0]["messages"][1]["role"], "user");
    assert_eq!(
        requests[1]["messages"][0],
        json!({"role": "system", "content": "Answer in French."})
    );
    assert_eq!(roles(requests[2]["messages"].as_array().unwrap()), ["user"]);
    // Anthropic's system prompt, as a block marked for the prompt cache.
    assert_eq!(
        requests[3]["system"],
        json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(roles(requests[3]["messages"].as_array().unwrap()), ["user"]);
    for run in [&profiles, &own, &none, &claude] {
        let messages = app.messages(run["id"].as_str().unwrap()).await;
        assert_eq!(
            roles(&messages),
            ["user", "assistant"],
            "never in the transcript"
        );
    }

    // Counted against the context budget: instructions larger than it end
    // the run before the model is called.
    let too_big = app
        .run_to_end(json!({"prompt": "hello", "model": {"profile": "oa"},
                           "instructions": "x".repeat(2000), "context": {"max_context_chars": 1000}}))
        .await;
    assert_eq!(too_big["status"], "context_limit", "{too_big}");
    assert_eq!(seen.lock().unwrap().len(), 4);
}

fn writes(path: &str, content: &str, answer: &str) -> Value {
    json!({"scripted": [
        {"content": "", "tool_calls": [call("w", "write_file", json!({"path": path, "content": content}))]},
        {"content": answer}
    ]})
}

#[tokio::test]
async fn a_thread_of_runs_shares_its_history_and_each_workspace_stays_as_it_ended() {
    let (address, seen) = mock_providers().await;
    let app = spawn_with_providers(&address).await;
    let first = app
        .run_to_end(json!({"prompt": "write one", "model": writes("a.txt", "one", "wrote one")}))
        .await;
    let first_id = first["id"].as_str().unwrap();
    assert_eq!(first["thread_id"], first_id);
    assert_eq!(first["previous_run_id"], Value::Null);
    let second = app
        .run_to_end(json!({"prompt": "write two", "previous_run_id": first_id,
                           "model": writes("b.txt", "two", "wrote two")}))
        .await;
    let second_id = second["id"].as_str().unwrap();
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(second["thread_id"], first_id);
    assert_eq!(second["previous_run_id"], first_id);
    assert_eq!(second["steps"], 2, "counters count this run only");
    // The third run's model (a real provider's wire format) sees it all.
    let third = app
        .run_to_end(
            json!({"prompt": "what did we do?", "previous_run_id": second_id,
                           "model": {"profile": "oa"}, "instructions": ""}),
        )
        .await;
    let third_id = third["id"].as_str().unwrap();
    assert_eq!(third["status"], "completed", "{third}");
    assert_eq!(third["thread_id"], first_id);
    let sent = seen.lock().unwrap()[0]["messages"].clone();
    let contents: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["write one", "write two", "what did we do?"]);

    // Each transcript: the inherited messages first, then its own.
    let first_messages = app.messages(first_id).await;
    let second_messages = app.messages(second_id).await;
    let third_messages = app.messages(third_id).await;
    assert_eq!(first_messages.len(), 4);
    assert_eq!(second_messages[..4], first_messages[..]);
    assert_eq!(second_messages[4]["content"], "write two");
    assert_eq!(third_messages[..8], second_messages[..]);
    assert_eq!(roles(&third_messages[8..]), ["user", "assistant"]);
    // Its own events only: it starts at run_start, its prompt the first message.
    let events = app.events(second_id).await;
    assert_eq!(events[0].event, "run_start");
    assert_eq!(events[1].data["message"]["content"], "write two");

    // Workspaces: each as its run ended.
    let files = |id: &str| {
        let app = &app;
        let id = id.to_owned();
        async move {
            let listed = app.get(&format!("/v1/runs/{id}/workspace")).await.body;
            let mut files = Vec::new();
            for file in listed["files"].as_array().unwrap() {
                let path = file["path"].as_str().unwrap().to_owned();
                let text = app
                    .get(&format!("/v1/runs/{id}/workspace/{path}"))
                    .await
                    .text;
                files.push((path, text));
            }
            files
        }
    };
    let pair = |p: &str, t: &str| (p.to_owned(), t.to_owned());
    assert_eq!(files(first_id).await, [pair("a.txt", "one")]);
    assert_eq!(
        files(second_id).await,
        [pair("a.txt", "one"), pair("b.txt", "two")]
    );
    assert_eq!(
        files(third_id).await,
        [pair("a.txt", "one"), pair("b.txt", "two")]
    );

    // A fork: continuing the first run again.
    let fork = app
        .run_to_end(json!({"prompt": "write three", "previous_run_id": first_id,
                           "model": writes("a.txt", "three", "overwrote")}))
        .await;
    let fork_id = fork["id"].as_str().unwrap();
    assert_eq!(fork["thread_id"], first_id);
    assert_eq!(files(fork_id).await, [pair("a.txt", "three")]);
    assert_eq!(
        files(first_id).await,
        [pair("a.txt", "one")],
        "the first stays"
    );

    // The listing by thread, newest first; other runs are not in it.
    app.run_to_end(json!({"prompt": "unrelated", "model": {"scripted": [{"content": "x"}]}}))
        .await;
    let listed = app.get(&format!("/v1/runs?thread_id={first_id}")).await;
    assert_eq!(listed.status, StatusCode::OK);
    let ids: Vec<&str> = listed.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [fork_id, third_id, second_id, first_id]);
    let bad = app.get("/v1/runs?thread_id=nope").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn continuing_an_unknown_or_live_run_is_refused_and_creates_nothing() {
    let app = spawn_app().await;
    let unknown = app
        .post_run(json!({"prompt": "go on", "previous_run_id": uuid::Uuid::now_v7().to_string()}))
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{}", unknown.text);
    assert!(unknown.text.contains("previous_run_id"), "{}", unknown.text);
    let malformed = app
        .post_run(json!({"prompt": "go on", "previous_run_id": "yesterday"}))
        .await;
    assert_eq!(malformed.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        malformed.text.contains("previous_run_id"),
        "{}",
        malformed.text
    );
    let long = app
        .create_run(json!({"prompt": "slow", "model": {"scripted": [{"delay_ms": 10000, "content": "late"}]}}))
        .await;
    let long_id = long["id"].as_str().unwrap();
    let live = app
        .post_run(json!({"prompt": "go on", "previous_run_id": long_id}))
        .await;
    assert_eq!(live.status, StatusCode::CONFLICT, "{}", live.text);
    assert_eq!(live.error_code(), "run_live");
    let listed = app.get("/v1/runs").await;
    assert_eq!(
        listed.body["runs"].as_array().unwrap().len(),
        1,
        "nothing was created"
    );
    app.delete(&format!("/v1/runs/{long_id}")).await;
}

#[tokio::test]
async fn a_small_context_still_sends_the_first_and_the_newest_user_messages() {
    let (address, seen) = mock_providers().await;
    let app = spawn_with_providers(&address).await;
    let long = "x".repeat(2000);
    let first = app
        .run_to_end(json!({"prompt": "first", "model": {"scripted": [{"content": long}]}}))
        .await;
    let second = app
        .run_to_end(json!({"prompt": "second", "previous_run_id": first["id"],
                           "model": {"scripted": [{"content": long}]}}))
        .await;
    let third = app
        .run_to_end(json!({"prompt": "third", "previous_run_id": second["id"],
                           "model": {"profile": "oa"}, "instructions": "",
                           "context": {"max_context_chars": 1000}}))
        .await;
    assert_eq!(third["status"], "completed", "{third}");
    let sent = seen.lock().unwrap()[0]["messages"].clone();
    assert_eq!(
        sent,
        json!([{"role": "user", "content": "first"}, {"role": "user", "content": "third"}])
    );
    // The transcript keeps everything.
    assert_eq!(app.messages(third["id"].as_str().unwrap()).await.len(), 6);
}

#[tokio::test]
async fn a_run_stopped_mid_batch_is_continued_with_every_call_answered() {
    let (address, seen) = mock_providers().await;
    let app = spawn_with_providers(&address).await;
    let paused = app
        .create_run(json!({
            "prompt": "list, with permission",
            "approval": {"tools": ["list_dir"]},
            "model": {"scripted": [{"content": "", "tool_calls": [call("l1", "list_dir", json!({}))]}]}
        }))
        .await;
    let paused_id = paused["id"].as_str().unwrap();
    app.wait_status(paused_id, "requires_action").await;
    let aborted = app.delete(&format!("/v1/runs/{paused_id}")).await;
    assert_eq!(aborted.body["status"], "aborted");
    let next = app
        .run_to_end(
            json!({"prompt": "never mind, just answer", "previous_run_id": paused_id,
                           "model": {"profile": "oa"}, "instructions": ""}),
        )
        .await;
    assert_eq!(next["status"], "completed", "{next}");
    let sent = seen.lock().unwrap()[0]["messages"].clone();
    let roles: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"]);
    assert_eq!(sent[2]["tool_call_id"], "l1");
    assert_eq!(sent[2]["content"], "The run ended before this call ran");
    // Recorded in the new run's transcript, never in the old one's.
    assert_eq!(app.messages(paused_id).await.len(), 2);
    let messages = app.messages(next["id"].as_str().unwrap()).await;
    assert_eq!(messages[2]["is_error"], true);
}

#[tokio::test]
async fn a_continued_run_pauses_and_resumes_with_its_history() {
    let app = spawn_app().await;
    let first = app
        .run_to_end(json!({"prompt": "write one", "model": writes("a.txt", "one", "wrote one")}))
        .await;
    let first_id = first["id"].as_str().unwrap();
    let next = app
        .create_run(json!({
            "prompt": "now two, with permission", "previous_run_id": first_id,
            "approval": {"tools": ["write_file"]},
            "model": writes("b.txt", "two", "wrote two")
        }))
        .await;
    let id = next["id"].as_str().unwrap();
    app.wait_status(id, "requires_action").await;
    let answered = app
        .send(
            app.request(reqwest::Method::POST, &format!("/v1/runs/{id}/actions"))
                .json(&json!({"actions": [{"call_id": "w", "decision": "approve"}]})),
        )
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    let done = app.wait_status(id, "completed").await;
    assert_eq!(done["answer"], "wrote two");
    assert_eq!(done["steps"], 2);
    let messages = app.messages(id).await;
    assert_eq!(messages[..4], app.messages(first_id).await[..]);
    assert_eq!(
        roles(&messages[4..]),
        ["user", "assistant", "tool", "assistant"]
    );
    let events = app.events(id).await;
    assert_gap_free(&events);
    assert_eq!(events[0].event, "run_start");
}

#[tokio::test]
async fn a_continued_run_left_queued_by_a_restart_starts_from_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let one_slot = [("AGENT_RUNNER_RUNS__MAX_CONCURRENT", "1")];
    let (mut child, address) = start_binary_with(&dir, &one_slot);
    let server = Remote::new(address);
    let first = server
        .post_json(
            "/v1/runs?wait=true",
            &json!({"prompt": "write one", "model": writes("a.txt", "one", "wrote one")}),
        )
        .await;
    let first_id = first["id"].as_str().unwrap();
    // The only slot is taken: the continued run waits, queued.
    server
        .post_json(
            "/v1/runs",
            // Not resumed after the kill: it frees the slot.
            &json!({"prompt": "long", "limits": {"max_resumes": 0},
                    "model": {"scripted": [{"delay_ms": 60000, "content": "late"}]}}),
        )
        .await;
    let next = server
        .post_json(
            "/v1/runs",
            &json!({"prompt": "write two", "previous_run_id": first_id,
                    "model": writes("b.txt", "two", "wrote two")}),
        )
        .await;
    let id = next["id"].as_str().unwrap().to_owned();
    assert_eq!(next["status"], "queued");
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, address) = start_binary_with(&dir, &one_slot);
    let server = Remote::new(address);
    let done = server.wait_status(&id, "completed").await;
    assert_eq!(done["answer"], "wrote two");
    assert_eq!(done["thread_id"], first_id);
    let messages = server.get_json(&format!("/v1/runs/{id}/messages")).await;
    let messages = messages["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 8, "the inherited four, then its own");
    assert_eq!(messages[4]["content"], "write two");
    let file = server.get(&format!("/v1/runs/{id}/workspace/a.txt")).await;
    assert_eq!(file.text().await.unwrap(), "one", "its copied workspace");
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
}

/// When a thread's history does not fit, its oldest tool results are
/// masked before any group is dropped (SPEC section 15): the model sees the
/// placeholder, the stored transcript keeps everything.
#[tokio::test]
async fn old_tool_results_are_masked_before_groups_are_dropped() {
    let (address, seen) = mock_providers().await;
    let app = spawn_with_providers(&address).await;
    let big = "line of the file\n".repeat(180);
    let read = |id: &str| call(id, "read_file", json!({"path": "big.txt"}));
    let first = app
        .run_to_end(json!({
            "prompt": "read it twice",
            "workspace": {"files": {"big.txt": big}},
            "model": {"scripted": [
                {"content": "", "tool_calls": [read("r1")]},
                {"content": "", "tool_calls": [read("r2")]},
                {"content": "read"}
            ]}
        }))
        .await;
    assert_eq!(first["status"], "completed", "{first}");
    let second = app
        .run_to_end(json!({
            "prompt": "and now?", "previous_run_id": first["id"],
            "model": {"profile": "oa"}, "instructions": "",
            "context": {"max_context_chars": big.len() + 2_000}
        }))
        .await;
    assert_eq!(second["status"], "completed", "{second}");
    let sent = seen.lock().unwrap().last().cloned().unwrap();
    let results: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(results.len(), 2, "no group was dropped: {sent}");
    assert!(
        results[0].starts_with("[result omitted to fit the context: "),
        "the older result is masked: {}",
        results[0]
    );
    assert_eq!(results[1], big, "the newer one is whole");
    // Stored whole.
    let stored = app
        .get(&format!(
            "/v1/runs/{}/messages",
            second["id"].as_str().unwrap()
        ))
        .await;
    let stored_results = stored.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(stored_results, 2);
    assert!(!stored.text.contains("result omitted"), "{}", stored.text);
}

/// A run with built-in tools and no instructions of its own or its
/// profile's gets the server's default; `""` asks for none, and a run
/// without built-in tools has none.
#[tokio::test]
async fn runs_with_built_in_tools_get_the_default_instructions() {
    let (address, seen) = mock_providers().await;
    let app = spawn_with_providers(&address).await;
    let defaulted = app
        .run_to_end(json!({"prompt": "hello", "model": {"profile": "an"}}))
        .await;
    let default = agent_runner::config::DEFAULT_INSTRUCTIONS;
    assert_eq!(defaulted["instructions"], default, "{defaulted}");
    assert_eq!(
        seen.lock().unwrap().last().unwrap()["system"][0]["text"],
        default,
        "sent as the system prompt"
    );
    let none = app
        .run_to_end(json!({"prompt": "hello", "model": {"profile": "an"}, "instructions": ""}))
        .await;
    assert_eq!(none["instructions"], Value::Null);
    assert!(seen.lock().unwrap().last().unwrap().get("system").is_none());
    let toolless = app
        .run_to_end(json!({"prompt": "hello", "model": {"profile": "an"}, "tools": []}))
        .await;
    assert_eq!(toolless["instructions"], Value::Null);
    // A profile's own instructions win.
    let profiled = app
        .run_to_end(json!({"prompt": "hello", "model": {"profile": "oa"}}))
        .await;
    assert_eq!(profiled["instructions"], "You are the profile's agent.");
}
