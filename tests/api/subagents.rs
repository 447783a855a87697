//! Sub-agents (SPEC section 24): a run's `delegate` calls start child runs
//! of its sub-agents, through the real server with scripted models.

use serde_json::{Value, json};

use crate::helpers::*;

/// A sub-agent whose model answers `answer` (after `delay_ms`).
fn answering(answer: &str, delay_ms: u64) -> Value {
    json!({"description": format!("answers {answer}"),
           "model": {"scripted": [{"delay_ms": delay_ms, "content": answer,
                                   "usage": {"input_tokens": 5, "output_tokens": 2}}]}})
}

async fn children_of(app: &TestApp, id: &str) -> Vec<Value> {
    let page = app.get(&format!("/v1/runs?parent_run_id={id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let mut runs = page.body["runs"].as_array().unwrap().clone();
    runs.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    runs
}

#[tokio::test]
async fn a_delegate_call_starts_a_child_run_and_answers_with_its_answer() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(json!({
            "prompt": "ask the reader",
            "subagents": {"reader": answering("the file says hi", 0)},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("d1", "delegate", json!({"agent": "reader", "prompt": "read a.txt"}))],
                 "usage": {"input_tokens": 10, "output_tokens": 3}},
                {"content": "done", "usage": {"input_tokens": 20, "output_tokens": 4}}
            ]}
        }))
        .await;
    let id = run["id"].as_str().unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    // Its own usage, and its children's added.
    assert_eq!(run["usage"]["input_tokens"], 30, "{run}");
    assert_eq!(run["usage_total"]["input_tokens"], 35, "{run}");
    assert_eq!(
        run["subagents"]["reader"]["description"], "answers the file says hi",
        "{run}"
    );
    let children = children_of(&app, id).await;
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!(child["parent_run_id"], id);
    assert_eq!(child["root_run_id"], id);
    assert_eq!(child["prompt"], "read a.txt");
    assert_eq!(child["status"], "completed");
    let messages = app.messages(id).await;
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("the call's result: {messages:?}"));
    assert_eq!(result["content"], "\"the file says hi\"", "{messages:?}");
    let events = app.events(id).await;
    let kinds = types(&events);
    let start = kinds
        .iter()
        .position(|k| *k == "subrun_start")
        .expect("subrun_start");
    let end = kinds
        .iter()
        .position(|k| *k == "subrun_end")
        .expect("subrun_end");
    assert!(start < end, "{kinds:?}");
    assert_eq!(events[start].data["run_id"], child["id"]);
    assert_eq!(events[start].data["call_id"], "d1");
    assert_eq!(events[start].data["agent"], "reader");
    assert_eq!(events[end].data["status"], "completed");
}

/// A run that delegates to `subagents` by the script `script`.
fn delegating(subagents: Value, script: Value) -> Value {
    json!({"prompt": "delegate", "subagents": subagents, "model": {"scripted": script}})
}

fn delegate(id: &str, agent: &str, prompt: &str) -> Value {
    call(id, "delegate", json!({"agent": agent, "prompt": prompt}))
}

fn time(run: &Value, field: &str) -> chrono::DateTime<chrono::Utc> {
    run[field].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn calls_in_one_batch_run_at_once_up_to_max_parallel_subruns() {
    for (parallel, overlap) in [(4, true), (1, false)] {
        let app = spawn_with(|config| config.runs.max_parallel_subruns = parallel).await;
        let run = app
            .run_to_end(delegating(
                json!({"a": answering("from a", 400), "b": answering("from b", 400)}),
                json!([
                    {"content": "", "tool_calls": [delegate("c1", "a", "one"), delegate("c2", "b", "two")]},
                    {"content": "both answered"}
                ]),
            ))
            .await;
        assert_eq!(run["status"], "completed", "{run}");
        let children = children_of(&app, run["id"].as_str().unwrap()).await;
        assert_eq!(children.len(), 2);
        let (first, second) = (&children[0], &children[1]);
        let overlapped = time(second, "started_at") < time(first, "finished_at");
        assert_eq!(overlapped, overlap, "parallel {parallel}: {children:?}");
        // Each call's result is its own child's answer, in call order.
        let results: Vec<Value> = app
            .messages(run["id"].as_str().unwrap())
            .await
            .into_iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].clone())
            .collect();
        assert_eq!(results, [json!("\"from a\""), json!("\"from b\"")]);
    }
}

#[tokio::test]
async fn a_shared_child_works_in_its_parents_directory_and_a_copied_one_brings_back_its_diff() {
    let app = spawn_app().await;
    let writer = |path: &str| {
        json!({"tools": ["write_file"], "workspace": if path == "copied.txt" { "copy" } else { "shared" },
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("w", "write_file", json!({"path": path, "content": "written\n"}))]},
            {"content": "wrote it"}
        ]}})
    };
    let run = app
        .run_to_end(json!({
            "prompt": "have files written",
            "tools": ["read_file"],
            "workspace": {"files": {"start.txt": "here first\n"}},
            "subagents": {"sharer": writer("shared.txt"), "copier": writer("copied.txt")},
            "model": {"scripted": [
                {"content": "", "tool_calls": [delegate("s", "sharer", "write shared.txt"), delegate("c", "copier", "write copied.txt")]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    // The shared child's file is in the parent's workspace; the copied
    // one's is not, and came back as a diff.
    assert_eq!(app.workspace_file(&run, "shared.txt").await, "written\n");
    // What its shared child wrote counts among the parent's changes.
    assert_eq!(run["changes"]["files"], 1, "{run}");
    let id = run["id"].as_str().unwrap();
    let missing = app
        .get(&format!("/v1/runs/{id}/workspace/copied.txt"))
        .await;
    assert_eq!(missing.status, 404, "{}", missing.text);
    let results: Vec<Value> = app
        .messages(id)
        .await
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results[0]["content"], "\"wrote it\"", "{results:?}");
    let copied: Value = serde_json::from_str(results[1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(copied["answer"], "wrote it", "{copied}");
    let diff = copied["diff"].as_str().unwrap();
    assert!(
        diff.contains("+++ b/copied.txt") && diff.contains("+written"),
        "{diff}"
    );
    // The copy started from the parent's files.
    let children = children_of(&app, id).await;
    let copier = children
        .iter()
        .find(|c| c["prompt"] == "write copied.txt")
        .unwrap();
    assert_eq!(
        app.workspace_file(copier, "start.txt").await,
        "here first\n"
    );
}

#[tokio::test]
async fn a_childs_limits_are_capped_by_what_its_parent_has_left() {
    let app = spawn_app().await;
    let mut roomy = answering("ok", 0);
    roomy["limits"] = json!({"timeout_ms": 600000, "max_tool_calls": 50});
    let run = app
        .run_to_end(json!({
            "prompt": "delegate",
            "limits": {"timeout_ms": 20000, "max_tool_calls": 3},
            "subagents": {"roomy": roomy},
            "model": {"scripted": [
                {"content": "", "tool_calls": [delegate("d", "roomy", "go")]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let child = &children_of(&app, run["id"].as_str().unwrap()).await[0];
    let timeout = child["limits"]["timeout_ms"].as_u64().unwrap();
    assert!(timeout <= 20000 && timeout > 10000, "{child}");
    // Its parent had 3 tool calls, and its delegate call is one of them.
    assert_eq!(child["limits"]["max_tool_calls"], 2, "{child}");
}

#[tokio::test]
async fn children_delegate_in_turn_down_to_max_depth_and_usage_total_adds_them_all() {
    let leaf = answering("leaf", 0);
    let middle = json!({"description": "delegates again", "subagents": {"leaf": leaf},
    "model": {"scripted": [
        {"content": "", "tool_calls": [delegate("m", "leaf", "go deeper")],
         "usage": {"input_tokens": 3, "output_tokens": 1}},
        {"content": "middle done", "usage": {"input_tokens": 3, "output_tokens": 1}}
    ]}});
    let body = delegating(
        json!({"middle": middle}),
        json!([
            {"content": "", "tool_calls": [delegate("r", "middle", "go")],
             "usage": {"input_tokens": 1, "output_tokens": 1}},
            {"content": "root done", "usage": {"input_tokens": 1, "output_tokens": 1}}
        ]),
    );
    // Depth 2 (the default): the middle child delegates to the leaf.
    let app = spawn_app().await;
    let run = app.run_to_end(body.clone()).await;
    assert_eq!(run["status"], "completed", "{run}");
    let id = run["id"].as_str().unwrap();
    let middle_run = &children_of(&app, id).await[0];
    let leaves = children_of(&app, middle_run["id"].as_str().unwrap()).await;
    assert_eq!(leaves.len(), 1);
    assert_eq!(leaves[0]["root_run_id"], id);
    assert_eq!(leaves[0]["parent_run_id"], middle_run["id"]);
    // 2 (root) + 6 (middle) + 5 (leaf).
    assert_eq!(run["usage"]["input_tokens"], 2, "{run}");
    assert_eq!(
        middle_run["usage_total"]["input_tokens"], 11,
        "{middle_run}"
    );
    let run = app.get(&format!("/v1/runs/{id}")).await.body;
    assert_eq!(run["usage_total"]["input_tokens"], 13, "{run}");

    // Depth 1: the middle child is not offered the tool.
    let app = spawn_with(|config| config.runs.max_depth = 1).await;
    let run = app.run_to_end(body).await;
    let middle_run = &children_of(&app, run["id"].as_str().unwrap()).await[0];
    assert!(
        children_of(&app, middle_run["id"].as_str().unwrap())
            .await
            .is_empty()
    );
    let result = app
        .messages(middle_run["id"].as_str().unwrap())
        .await
        .into_iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .starts_with("Unknown tool"),
        "{result}"
    );
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_children_even_one_waiting_for_an_approval() {
    let app = spawn_app().await;
    let slow = answering("too late", 60_000);
    let asking = json!({"tools": ["write_file"], "approval": {"tools": ["write_file"]},
    "model": {"scripted": [
        {"content": "", "tool_calls": [call("w", "write_file", json!({"path": "x", "content": "y"}))]},
        {"content": "written"}
    ]}});
    let run = app
        .create_run(delegating(
            json!({"slow": slow, "asking": asking}),
            json!([{"content": "", "tool_calls": [delegate("s", "slow", "wait"), delegate("a", "asking", "write")]},
                   {"content": "never"}]),
        ))
        .await;
    let id = run["id"].as_str().unwrap();
    let children = eventually("both children", async || {
        let children = children_of(&app, id).await;
        (children.len() == 2).then_some(children)
    })
    .await;
    let asking = children.iter().find(|c| c["prompt"] == "write").unwrap();
    app.wait_status(asking["id"].as_str().unwrap(), "requires_action")
        .await;
    let cancelled = app.delete(&format!("/v1/runs/{id}")).await;
    assert!(cancelled.status.is_success(), "{}", cancelled.text);
    app.wait_status(id, "aborted").await;
    for child in &children {
        app.wait_status(child["id"].as_str().unwrap(), "aborted")
            .await;
    }
}

#[tokio::test]
async fn a_tenant_allowed_one_run_at_a_time_still_delegates() {
    // The parent gives its slot to its children while it waits for them.
    let app = spawn_with(|config| config.runs.max_concurrent = 1).await;
    let run = app
        .run_to_end(delegating(
            json!({"a": answering("from a", 0), "b": answering("from b", 0)}),
            json!([
                {"content": "", "tool_calls": [delegate("c1", "a", "one"), delegate("c2", "b", "two")]},
                {"content": "", "tool_calls": [delegate("c3", "a", "three")]},
                {"content": "done"}
            ]),
        ))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        children_of(&app, run["id"].as_str().unwrap()).await.len(),
        3
    );
}

#[tokio::test]
async fn a_stored_agent_is_a_subagent_by_name_and_version() {
    let app = spawn_app().await;
    let created = app
        .send(
            app.request(reqwest::Method::POST, "/v1/agents")
                .json(&json!({
                    "name": "researcher", "description": "reads and reports",
                    "model": {"scripted": [{"content": "researched"}]}
                })),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let run = app
        .run_to_end(delegating(
            json!({"r": {"agent": "researcher@1"}}),
            json!([{"content": "", "tool_calls": [delegate("d", "r", "look into it")]},
                   {"content": "done"}]),
        ))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["subagents"]["r"],
        json!({"description": "reads and reports", "workspace": "shared",
        "agent": {"name": "researcher", "version": 1}})
    );
    let child = &children_of(&app, run["id"].as_str().unwrap()).await[0];
    assert_eq!(child["agent"], json!({"name": "researcher", "version": 1}));
    assert_eq!(child["answer"], "researched");
    // An agent's own sub-agents are checked as a run's are.
    let refused = app
        .send(
            app.request(reqwest::Method::POST, "/v1/agents")
                .json(&json!({
                    "name": "lead", "subagents": {"x": {"agent": "nobody"}}
                })),
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(
        refused.text.contains("subagents.x: agent \\\"nobody\\\""),
        "{}",
        refused.text
    );
}

#[tokio::test]
async fn bad_subagents_are_refused_naming_what_is_wrong_and_nothing_is_made() {
    let app = spawn_app().await;
    let script = json!([{"content": "hi"}]);
    let nine: serde_json::Map<String, Value> = (0..9)
        .map(|i| (format!("a{i}"), answering("x", 0)))
        .collect();
    let cases = [
        (
            json!({"Bad Name": answering("x", 0)}),
            422,
            "subagents.Bad Name",
        ),
        (Value::Object(nine), 422, "at most 8"),
        (json!({"a": {"agent": "nobody"}}), 404, "nobody"),
        (
            json!({"a": {"prompt": "mine", "model": {"scripted": script}}}),
            422,
            "subagents.a: prompt",
        ),
        (
            json!({"a": {"tools": ["no_such_tool"]}}),
            422,
            "subagents.a: ",
        ),
        (
            json!({"a": {"workspace": "elsewhere"}}),
            422,
            "subagents.a: workspace",
        ),
        (
            json!({"a": {"agent": "x", "tools": []}}),
            422,
            "subagents.a: tools",
        ),
        (json!("reader"), 422, "subagents: must be an object"),
    ];
    for (subagents, status, says) in cases {
        let reply = app
            .post_run(delegating(subagents.clone(), script.clone()))
            .await;
        assert_eq!(reply.status, status, "{subagents}: {}", reply.text);
        assert!(reply.text.contains(says), "{subagents}: {}", reply.text);
    }
    let clash = app
        .post_run(json!({"prompt": "p", "subagents": {"a": answering("x", 0)},
            "client_tools": [{"name": "delegate"}], "model": {"scripted": script}}))
        .await;
    assert_eq!(clash.status, 422, "{}", clash.text);
    assert!(clash.text.contains("client_tools"), "{}", clash.text);
    let listed = app.get("/v1/runs").await;
    assert_eq!(listed.body["runs"], json!([]), "nothing was made");
}

/// The real binary on SQLite in `dir`, with `config` as its config file.
fn start_binary_in(dir: &tempfile::TempDir, config: &str) -> (ServerProcess, Remote) {
    let file = dir.path().join("subagents.toml");
    std::fs::write(&file, config).unwrap();
    let database = format!("sqlite://{}/runs.db", dir.path().display());
    let mut command = binary_command(dir, &[("AGENT_RUNNER_STORAGE__DATABASE_URL", &database)]);
    command.arg("--config").arg(&file);
    command.stderr(std::process::Stdio::null());
    let (child, address) = spawn_listening(command);
    (child, Remote::new(address))
}

#[tokio::test]
async fn a_server_killed_while_two_children_run_starts_neither_twice_and_the_parent_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, remote) = start_binary_in(&dir, "");
    let run = remote
        .post_json(
            "/v1/runs",
            &delegating(
                json!({"a": answering("from a", 1500), "b": answering("from b", 1500)}),
                json!([
                    {"content": "", "tool_calls": [delegate("c1", "a", "one"), delegate("c2", "b", "two")]},
                    {"content": "combined"}
                ]),
            ),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    eventually("both children running", async || {
        let listed = listed_children(&remote, &id).await;
        (listed.len() == 2 && listed.iter().all(|c| c["status"] == "running")).then_some(())
    })
    .await;
    server.kill().unwrap();
    server.wait().unwrap();

    let (_server, remote) = start_binary_in(&dir, "");
    let done = remote.wait_status(&id, "completed").await;
    assert_eq!(done["answer"], "combined", "{done}");
    let listed = listed_children(&remote, &id).await;
    assert_eq!(listed.len(), 2, "no child started twice: {listed:?}");
    for child in &listed {
        assert_eq!(child["status"], "completed", "{child}");
    }
    let messages = remote.get_json(&format!("/v1/runs/{id}/messages")).await;
    let results: Vec<&Value> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| &m["content"])
        .collect();
    assert_eq!(results, [&json!("\"from a\""), &json!("\"from b\"")]);
}

async fn listed_children(remote: &Remote, id: &str) -> Vec<Value> {
    remote
        .get_json(&format!("/v1/runs?parent_run_id={id}"))
        .await["runs"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_childs_pause_shows_on_its_parent_and_is_answered_through_either_run() {
    let app = spawn_app().await;
    let asking = |file: &str| {
        json!({"tools": ["write_file"], "approval": {"tools": ["write_file"]},
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("w", "write_file", json!({"path": file, "content": "y"}))]},
            {"content": format!("wrote {file}")}
        ]}})
    };
    let run = app
        .create_run(delegating(
            json!({"one": asking("one.txt"), "two": asking("two.txt")}),
            json!([{"content": "", "tool_calls": [delegate("a", "one", "write one"), delegate("b", "two", "write two")]},
                   {"content": "both written"}]),
        ))
        .await;
    let id = run["id"].as_str().unwrap();
    // Both children wait for a decision: the parent lists both actions,
    // each naming its child.
    let waiting = eventually("the parent to list both children's actions", async || {
        let run = app.get(&format!("/v1/runs/{id}")).await.body;
        (run["status"] == "requires_action" && run["pending_actions"].as_array()?.len() == 2)
            .then_some(run)
    })
    .await;
    let children = children_of(&app, id).await;
    let of = |prompt: &str| children.iter().find(|c| c["prompt"] == prompt).unwrap()["id"].clone();
    let (one, two) = (of("write one"), of("write two"));
    let actions = waiting["pending_actions"].as_array().unwrap();
    let mut named: Vec<&Value> = actions.iter().map(|a| &a["run_id"]).collect();
    named.sort_by_key(|id| id.as_str());
    let mut expected = vec![&one, &two];
    expected.sort_by_key(|id| id.as_str());
    assert_eq!(named, expected, "{waiting}");
    assert!(
        actions
            .iter()
            .all(|a| a["call_id"] == "w" && a["name"] == "write_file")
    );

    // Both wait on a call `w`: through the parent, the run must be named.
    let ambiguous = app
        .answer(id, json!([{"call_id": "w", "decision": "approve"}]))
        .await;
    assert_eq!(ambiguous.status, 422, "{}", ambiguous.text);
    assert!(ambiguous.text.contains("run_id"), "{}", ambiguous.text);
    let wrong = app
        .answer(id, json!([{"call_id": "w", "run_id": one, "output": "x"}]))
        .await;
    assert_eq!(wrong.status, 422, "{}", wrong.text);
    // One answered through the parent, the other through its own run.
    let answered = app
        .answer(
            id,
            json!([{"call_id": "w", "run_id": one, "decision": "approve"}]),
        )
        .await;
    assert_eq!(answered.status, 200, "{}", answered.text);
    let direct = app
        .answer(
            two.as_str().unwrap(),
            json!([{"call_id": "w", "decision": "approve"}]),
        )
        .await;
    assert_eq!(direct.status, 200, "{}", direct.text);
    let done = app.wait_status(id, "completed").await;
    assert_eq!(done["pending_actions"], json!([]));
    assert_eq!(app.workspace_file(&done, "one.txt").await, "y");
    assert_eq!(app.workspace_file(&done, "two.txt").await, "y");
}

#[tokio::test]
async fn a_parent_handed_over_at_shutdown_waits_for_the_same_child_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[runs]\nshutdown_grace_ms = 200\n";
    let (mut server, remote) = start_binary_in(&dir, config);
    let run = remote
        .post_json(
            "/v1/runs",
            &delegating(
                json!({"slow": answering("slowly", 2500)}),
                json!([
                    {"content": "", "tool_calls": [delegate("c1", "slow", "take your time")]},
                    {"content": "waited"}
                ]),
            ),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    eventually("the child running", async || {
        let listed = listed_children(&remote, &id).await;
        (listed.len() == 1 && listed[0]["status"] == "running").then_some(())
    })
    .await;
    let status = crate::helpers::terminate(&mut server);
    assert!(status.success(), "a graceful stop exits 0: {status:?}");

    let (_server, remote) = start_binary_in(&dir, config);
    let done = remote.wait_status(&id, "completed").await;
    assert_eq!(done["resumes"], 1, "{done}");
    let listed = listed_children(&remote, &id).await;
    assert_eq!(listed.len(), 1, "the same child: {listed:?}");
    assert_eq!(listed[0]["status"], "completed");
    let messages = remote.get_json(&format!("/v1/runs/{id}/messages")).await;
    let results: Vec<&Value> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| &m["content"])
        .collect();
    assert_eq!(results, [&json!("\"slowly\"")], "{messages}");
}
