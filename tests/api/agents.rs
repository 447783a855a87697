//! Agents (definitions stored once, versioned, named by runs) and
//! structured output, through the real server.

use agent_runner::config::TokenConfig;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{mock_openai_profile, scripted_openai};

fn token(tenant: &str, token: &str) -> TokenConfig {
    toml::from_str(&format!("tenant = \"{tenant}\"\ntoken = \"{token}\"")).unwrap()
}

impl TestApp {
    async fn post_agent(&self, body: Value) -> Reply {
        self.send(self.request(Method::POST, "/v1/agents").json(&body))
            .await
    }

    async fn put_agent(&self, name: &str, body: Value) -> Reply {
        self.send(
            self.request(Method::PUT, &format!("/v1/agents/{name}"))
                .json(&body),
        )
        .await
    }
}

/// A definition whose runs answer `answer`, with instructions of its own.
fn definition(name: &str, instructions: &str, answer: &str) -> Value {
    json!({
        "name": name,
        "description": "Sorts tickets",
        "instructions": instructions,
        "tools": [],
        "model": {"scripted": [{"content": answer}]},
        "limits": {"max_steps": 3, "timeout_ms": 5000},
        "metadata": {"team": "support"}
    })
}

fn names(list: &Value, key: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|agent| format!("{}@{}", agent["name"].as_str().unwrap(), agent["version"]))
        .collect()
}

#[tokio::test]
async fn an_agent_is_defined_once_and_each_change_is_a_new_version() {
    let app = spawn_app().await;
    let created = app
        .post_agent(definition("triage", "Sort it.", "low"))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.headers["location"], "/v1/agents/triage");
    let agent = &created.body;
    assert_eq!(agent["name"], "triage");
    assert_eq!(agent["version"], 1);
    assert_eq!(agent["description"], "Sorts tickets");
    assert_eq!(agent["archived"], false);
    assert!(agent["created_at"].as_str().unwrap().ends_with('Z'));
    // The definition as accepted: the run body's fields, no name.
    let mut expected = definition("triage", "Sort it.", "low");
    expected.as_object_mut().unwrap().remove("name");
    expected.as_object_mut().unwrap().remove("description");
    assert_eq!(agent["definition"], expected);

    let again = app.post_agent(definition("triage", "Other.", "high")).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert_eq!(again.error_code(), "agent_exists");

    let updated = app
        .put_agent("triage", definition("triage", "Sort it well.", "high"))
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.text);
    assert_eq!(updated.body["version"], 2);
    // Without a name in the body, the path's.
    let third = app
        .put_agent("triage", json!({"instructions": "Third.", "tools": []}))
        .await;
    assert_eq!(third.body["version"], 3, "{}", third.text);
    assert_eq!(third.body["description"], Value::Null);

    let latest = app.get("/v1/agents/triage").await;
    assert_eq!(latest.body, third.body);
    // A version is never changed.
    let first = app.get("/v1/agents/triage/versions/1").await;
    assert_eq!(first.body, created.body);
    let versions = app.get("/v1/agents/triage/versions").await;
    assert_eq!(
        names(&versions.body, "versions"),
        ["triage@3", "triage@2", "triage@1"]
    );
    assert_eq!(versions.body["next_cursor"], Value::Null);
    let page = app.get("/v1/agents/triage/versions?limit=2").await;
    assert_eq!(names(&page.body, "versions"), ["triage@3", "triage@2"]);
    let cursor = page.body["next_cursor"].as_str().unwrap().to_owned();
    let rest = app
        .get(&format!(
            "/v1/agents/triage/versions?limit=2&cursor={cursor}"
        ))
        .await;
    assert_eq!(names(&rest.body, "versions"), ["triage@1"]);
    assert_eq!(rest.body["next_cursor"], Value::Null);

    for path in [
        "/v1/agents/triage/versions/4",
        "/v1/agents/triage/versions/0",
        "/v1/agents/triage/versions/one",
        "/v1/agents/other",
        "/v1/agents/Not-A-Name",
        "/v1/agents/other/versions",
        "/v1/agents/other/versions/1",
    ] {
        let reply = app.get(path).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(reply.error_code(), "agent_not_found", "{path}");
    }
    let unknown = app.put_agent("other", json!({"tools": []})).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.error_code(), "agent_not_found");
    let renamed = app
        .put_agent("triage", json!({"name": "other", "tools": []}))
        .await;
    assert_eq!(renamed.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(renamed.text.contains("name:"), "{}", renamed.text);

    // The tenant's agents, latest versions, by name, paged.
    for name in ["b-agent", "a-agent"] {
        let reply = app.post_agent(json!({"name": name})).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    let all = app.get("/v1/agents").await;
    assert_eq!(
        names(&all.body, "agents"),
        ["a-agent@1", "b-agent@1", "triage@3"]
    );
    let page = app.get("/v1/agents?limit=2").await;
    assert_eq!(names(&page.body, "agents"), ["a-agent@1", "b-agent@1"]);
    assert_eq!(page.body["next_cursor"], "b-agent");
    let rest = app.get("/v1/agents?limit=2&cursor=b-agent").await;
    assert_eq!(names(&rest.body, "agents"), ["triage@3"]);
    for query in ["limit=0", "limit=101", "archived=maybe", "cursor=B%20A"] {
        let reply = app.get(&format!("/v1/agents?{query}")).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(reply.error_code(), "invalid_query", "{query}");
    }
}

#[tokio::test]
async fn a_definition_is_validated_as_a_run_body_and_nothing_is_kept_of_a_refusal() {
    let app = spawn_app().await;
    for (body, field) in [
        (json!({"name": "a", "tools": ["nope"]}), "tools"),
        (
            json!({"name": "a", "limits": {"max_steps": 0}}),
            "limits.max_steps",
        ),
        (
            json!({"name": "a", "limits": {"output_retries": 99}}),
            "limits.output_retries",
        ),
        (
            json!({"name": "a", "model": {"profile": "none"}}),
            "model.profile",
        ),
        (json!({"name": "a", "colour": "red"}), "colour"),
        (json!({"name": "a", "prompt": "p"}), "prompt"),
        (
            json!({"name": "a", "workspace": {"files": {}}}),
            "workspace",
        ),
        (
            json!({"name": "a", "previous_run_id": "x"}),
            "previous_run_id",
        ),
        (json!({"name": "a", "agent": "b"}), "agent"),
        (
            json!({"name": "a", "output_schema": {"type": "objekt"}}),
            "output_schema",
        ),
        (json!({"name": "a", "description": 7}), "description"),
        (json!({"name": "Triage"}), "name"),
        (json!({"name": "-a"}), "name"),
        (json!({"name": "a".repeat(65)}), "name"),
        (json!({"tools": []}), "name"),
        (json!(["a"]), "body"),
    ] {
        let reply = app.post_agent(body.clone()).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(reply.error_code(), "invalid_request", "{body}");
        if field != "body" {
            assert!(
                reply.body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains(field),
                "{body}: {}",
                reply.text
            );
        }
    }
    assert_eq!(app.get("/v1/agents").await.body["agents"], json!([]));
    assert_eq!(
        app.get("/v1/agents?archived=true").await.body["agents"],
        json!([])
    );
}

#[tokio::test]
async fn a_run_names_an_agent_and_its_own_fields_replace_the_definition_s() {
    let app = spawn_app().await;
    app.post_agent(definition("triage", "Sort it.", "one"))
        .await;
    let run = app
        .run_to_end(json!({
            "agent": "triage",
            "prompt": "Ticket 1",
            "limits": {"max_steps": 2},
            "metadata": {"ticket": "1"}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "one");
    assert_eq!(run["agent"], json!({"name": "triage", "version": 1}));
    assert_eq!(run["prompt"], "Ticket 1");
    assert_eq!(run["instructions"], "Sort it.");
    assert_eq!(run["tools"], json!([]));
    // `limits` key by key, the rest whole.
    assert_eq!(run["limits"]["max_steps"], 2);
    assert_eq!(run["limits"]["timeout_ms"], 5000);
    assert_eq!(run["metadata"], json!({"ticket": "1"}));
    assert_eq!(run["output_schema"], Value::Null);
    assert_eq!(run["output"], Value::Null);

    app.put_agent("triage", definition("triage", "Sort it well.", "two"))
        .await;
    let latest = app
        .run_to_end(json!({"agent": "triage", "prompt": "Ticket 2"}))
        .await;
    assert_eq!(latest["agent"]["version"], 2);
    assert_eq!(latest["instructions"], "Sort it well.");
    assert_eq!(latest["answer"], "two");
    assert_eq!(latest["metadata"], json!({"team": "support"}));
    let pinned = app
        .run_to_end(json!({"agent": "triage@1", "prompt": "Ticket 3", "instructions": "Mine."}))
        .await;
    assert_eq!(pinned["agent"]["version"], 1);
    assert_eq!(pinned["instructions"], "Mine.");
    assert_eq!(pinned["answer"], "one");
    let plain = app
        .run_to_end(json!({"prompt": "No agent", "model": {"scripted": [{"content": "x"}]}}))
        .await;
    assert_eq!(plain["agent"], Value::Null);

    // Its runs, newest first, with the other filters.
    let listed = app.get("/v1/runs?agent=triage").await;
    let ids: Vec<&Value> = listed.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| &run["id"])
        .collect();
    assert_eq!(ids, [&pinned["id"], &latest["id"], &run["id"]]);
    let page = app.get("/v1/runs?agent=triage&limit=1").await;
    assert_eq!(page.body["runs"][0]["id"], pinned["id"]);
    let cursor = page.body["next_cursor"].as_str().unwrap().to_owned();
    let next = app
        .get(&format!("/v1/runs?agent=triage&limit=1&cursor={cursor}"))
        .await;
    assert_eq!(next.body["runs"][0]["id"], latest["id"]);
    let failed = app.get("/v1/runs?agent=triage&status=failed").await;
    assert_eq!(failed.body["runs"], json!([]));
    let thread = app
        .get(&format!(
            "/v1/runs?agent=triage&status=completed&thread_id={}",
            run["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(thread.body["runs"].as_array().unwrap().len(), 1);
    assert_eq!(
        app.get("/v1/runs?agent=other").await.body["runs"],
        json!([])
    );
    let bad = app.get("/v1/runs?agent=Not%20A%20Name").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.error_code(), "invalid_query");

    // What a run names is checked as its body is.
    for (agent, status, code) in [
        (json!("triage@0"), 422, "invalid_request"),
        (json!("triage@x"), 422, "invalid_request"),
        (json!("Triage"), 422, "invalid_request"),
        (json!(7), 422, "invalid_request"),
        (json!("triage@3"), 404, "agent_not_found"),
        (json!("nobody"), 404, "agent_not_found"),
    ] {
        let reply = app.post_run(json!({"agent": agent, "prompt": "p"})).await;
        assert_eq!(reply.status.as_u16(), status, "{agent}: {}", reply.text);
        assert_eq!(reply.error_code(), code, "{agent}");
    }
    // A field of the request that is not valid is refused naming it.
    let reply = app
        .post_run(json!({"agent": "triage", "prompt": "p", "limits": {"max_steps": 0}}))
        .await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(reply.text.contains("limits.max_steps"), "{}", reply.text);
}

#[tokio::test]
async fn an_archived_or_another_tenant_s_agent_cannot_be_named() {
    let mut app = spawn_with(|config| {
        config.auth.tokens = vec![token("team-a", "secret-a"), token("team-b", "secret-b")];
    })
    .await;
    app.post_agent(definition("triage", "Sort it.", "one"))
        .await;
    let before = app
        .run_to_end(json!({"agent": "triage", "prompt": "p"}))
        .await;

    // Another tenant sees none of it, and may have its own of the name.
    app.token = Some("secret-b".into());
    for path in ["/v1/agents/triage", "/v1/agents/triage/versions/1"] {
        assert_eq!(app.get(path).await.error_code(), "agent_not_found");
    }
    assert_eq!(app.get("/v1/agents").await.body["agents"], json!([]));
    let named = app
        .post_run(json!({"agent": "triage", "prompt": "p"}))
        .await;
    assert_eq!(named.status, StatusCode::NOT_FOUND);
    assert_eq!(named.error_code(), "agent_not_found");
    assert_eq!(app.delete("/v1/agents/triage").await.status, 404);
    let own = app.post_agent(definition("triage", "B's.", "b")).await;
    assert_eq!(own.status, StatusCode::CREATED);
    assert_eq!(own.body["version"], 1);
    assert_eq!(
        app.get("/v1/runs?agent=triage").await.body["runs"],
        json!([])
    );

    app.token = Some("secret-a".into());
    let archived = app.delete("/v1/agents/triage").await;
    assert_eq!(archived.status, StatusCode::NO_CONTENT);
    assert_eq!(app.delete("/v1/agents/triage").await.status, 204);
    let named = app
        .post_run(json!({"agent": "triage", "prompt": "p"}))
        .await;
    assert_eq!(named.status, StatusCode::NOT_FOUND);
    assert_eq!(named.error_code(), "agent_not_found");
    let pinned = app
        .post_run(json!({"agent": "triage@1", "prompt": "p"}))
        .await;
    assert_eq!(pinned.error_code(), "agent_not_found");
    assert_eq!(
        app.put_agent("triage", json!({"tools": []})).await.status,
        404
    );
    // Its record stays, and the runs that used it keep theirs.
    let kept = app.get("/v1/agents/triage").await;
    assert_eq!(kept.body["archived"], true);
    assert_eq!(kept.body["version"], 1);
    assert_eq!(app.get("/v1/agents").await.body["agents"], json!([]));
    assert_eq!(
        names(&app.get("/v1/agents?archived=true").await.body, "agents"),
        ["triage@1"]
    );
    let run = app
        .get(&format!("/v1/runs/{}", before["id"].as_str().unwrap()))
        .await;
    assert_eq!(run.body["agent"], json!({"name": "triage", "version": 1}));
    assert_eq!(
        app.get("/v1/runs?agent=triage").await.body["runs"][0]["id"],
        before["id"]
    );
    // Defined again, it comes back with its next version.
    let again = app.post_agent(definition("triage", "Again.", "two")).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.text);
    assert_eq!(again.body["version"], 2);
    assert_eq!(again.body["archived"], false);
    let run = app
        .run_to_end(json!({"agent": "triage", "prompt": "p"}))
        .await;
    assert_eq!(run["answer"], "two");
    // The tenant's own of that name was never touched.
    app.token = Some("secret-b".into());
    assert_eq!(app.get("/v1/agents/triage").await.body["version"], 1);
}

/// A schema of a ticket: its severity and labels.
fn ticket_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "severity": {"enum": ["low", "high"]},
            "labels": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["severity", "labels"],
        "additionalProperties": false
    })
}

fn scripted_output(answers: &[&str], retries: Option<u64>) -> Value {
    let script: Vec<Value> = answers
        .iter()
        .map(|answer| json!({"content": answer}))
        .collect();
    let mut limits = json!({"max_steps": 5});
    if let Some(retries) = retries {
        limits["output_retries"] = json!(retries);
    }
    json!({
        "prompt": "Sort the ticket: the printer is on fire.",
        "tools": [],
        "model": {"scripted": script},
        "output_schema": ticket_schema(),
        "limits": limits
    })
}

#[tokio::test]
async fn a_valid_final_answer_is_the_run_s_output_and_its_run_end_s() {
    let app = spawn_app().await;
    let answer = "```json\n{\"severity\": \"high\", \"labels\": [\"fire\"]}\n```";
    let run = app.run_to_end(scripted_output(&[answer], None)).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], answer);
    let output = json!({"severity": "high", "labels": ["fire"]});
    assert_eq!(run["output"], output);
    assert_eq!(run["output_schema"], ticket_schema());
    assert_eq!(run["limits"]["output_retries"], 2);
    let id = run["id"].as_str().unwrap();
    assert_eq!(
        app.get(&format!("/v1/runs/{id}")).await.body["output"],
        output
    );
    let events = app.events(id).await;
    let end = events.last().unwrap();
    assert_eq!(end.event, "run_end");
    assert_eq!(end.data["output"], output);
    // The schema is told the model, never stored in the transcript.
    let messages = app.messages(id).await;
    assert_eq!(messages.len(), 2);
    let stored = serde_json::to_string(&messages).unwrap();
    assert!(!stored.contains("additionalProperties"), "{stored}");
    // Without a schema, `output` is null, in the run and in its end.
    let plain = app
        .run_to_end(json!({"prompt": "p", "tools": [], "model": {"scripted": [{"content": "{}"}]}}))
        .await;
    assert_eq!(plain["output"], Value::Null);
    let events = app.events(plain["id"].as_str().unwrap()).await;
    assert_eq!(events.last().unwrap().data["output"], Value::Null);
}

#[tokio::test]
async fn an_answer_that_is_not_valid_is_sent_back_with_what_is_wrong() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(scripted_output(
            &[
                "The ticket is urgent.",
                r#"{"severity": "urgent", "labels": ["fire", 3]}"#,
                r#"{"severity": "high", "labels": ["fire"]}"#,
            ],
            None,
        ))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["output"],
        json!({"severity": "high", "labels": ["fire"]})
    );
    // Each retry is a step.
    assert_eq!(run["steps"], 3);
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    let notes: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .skip(1)
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), 2, "{messages:?}");
    assert!(notes[0].contains("not one JSON document"), "{}", notes[0]);
    assert!(
        notes[1].contains("$.severity: not an allowed value")
            && notes[1].contains("$.labels[1]: expected string"),
        "{}",
        notes[1]
    );
}

#[tokio::test]
async fn past_its_retries_a_run_fails_output_invalid_keeping_its_last_answer() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(scripted_output(
            &[
                r#"{"severity": "low"}"#,
                r#"{"severity": "low", "labels": "x"}"#,
            ],
            Some(1),
        ))
        .await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(error.starts_with("output_invalid"), "{error}");
    assert!(error.contains("$.labels: expected array"), "{error}");
    assert_eq!(run["answer"], r#"{"severity": "low", "labels": "x"}"#);
    assert_eq!(run["output"], Value::Null);
    assert_eq!(run["steps"], 2);
    let events = app.events(run["id"].as_str().unwrap()).await;
    let end = &events.last().unwrap().data;
    assert_eq!(end["status"], "failed");
    assert_eq!(end["output"], Value::Null);
    // No retry at all: the first answer decides.
    let run = app
        .run_to_end(scripted_output(&["no", "{}"], Some(0)))
        .await;
    assert_eq!(run["status"], "failed");
    assert_eq!(run["steps"], 1);
    assert!(run["error"].as_str().unwrap().contains("with no retry"));
}

#[tokio::test]
async fn an_output_schema_or_its_retries_out_of_bounds_are_refused() {
    let app = spawn_with(|config| config.limits.output_retries = 3).await;
    for (body, field) in [
        (json!({"type": "objekt"}), "output_schema"),
        (json!({"minimum": "one"}), "output_schema"),
        (json!("object"), "output_schema"),
        (json!({"type": "object", "pattern": "("}), "output_schema"),
    ] {
        let reply = app
            .post_run(json!({"prompt": "p", "output_schema": body}))
            .await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(reply.text.contains(field), "{}", reply.text);
    }
    let big = json!({"type": "object", "description": "x".repeat(70_000)});
    let reply = app
        .post_run(json!({"prompt": "p", "output_schema": big}))
        .await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        reply.text.contains("output_schema: at most"),
        "{}",
        reply.text
    );
    // A schema that leaves the context no room is refused at once, not
    // found out at the first step.
    let wide = json!({"type": "object", "description": "x".repeat(3_000)});
    let reply = app
        .post_run(
            json!({"prompt": "p", "output_schema": wide, "context": {"max_context_chars": 2000}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(reply.text.contains("max_context_chars"), "{}", reply.text);
    let reply = app
        .post_run(json!({"prompt": "p", "limits": {"output_retries": 4}}))
        .await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        reply.text.contains("limits.output_retries"),
        "{}",
        reply.text
    );
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
}

#[tokio::test]
async fn a_provider_is_told_the_schema_natively_unless_its_profile_says_not() {
    let (address, seen) = scripted_openai(vec![
        json!({"role": "assistant", "content": "{\"severity\": \"low\", \"labels\": []}"}),
    ])
    .await;
    let app = spawn_with(|config| {
        config
            .models
            .insert("oa".into(), mock_openai_profile(&address));
        let mut plain = mock_openai_profile(&address);
        if let agent_runner::models::profile::ModelProfile::OpenAi(http) = &mut plain {
            http.native_output_schema = false;
        }
        config.models.insert("plain".into(), plain);
    })
    .await;
    for profile in ["oa", "plain"] {
        let mut body = scripted_output(&[], None);
        body["model"] = json!({"profile": profile});
        body["instructions"] = json!("Be brief.");
        let run = app.run_to_end(body).await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["output"], json!({"severity": "low", "labels": []}));
        let sent = seen.lock().unwrap().pop().unwrap();
        let system = sent["messages"][0]["content"].as_str().unwrap();
        assert!(system.starts_with("Be brief.\n\n"), "{system}");
        assert!(system.contains(&ticket_schema().to_string()), "{system}");
        if profile == "oa" {
            assert_eq!(
                sent["response_format"],
                json!({"type": "json_schema", "json_schema": {
                    "name": "output", "schema": ticket_schema(), "strict": false}})
            );
        } else {
            assert!(sent.get("response_format").is_none(), "{sent}");
        }
    }
}

#[tokio::test]
async fn an_agent_s_output_schema_holds_for_its_runs() {
    let app = spawn_app().await;
    let mut body = definition("typed", "Sort it.", r#"{"severity": "low", "labels": []}"#);
    body["output_schema"] = ticket_schema();
    assert_eq!(app.post_agent(body).await.status, StatusCode::CREATED);
    let run = app
        .run_to_end(json!({"agent": "typed", "prompt": "p"}))
        .await;
    assert_eq!(run["output"], json!({"severity": "low", "labels": []}));
    assert_eq!(run["output_schema"], ticket_schema());
    // A run may replace it with its own.
    let run = app
        .run_to_end(json!({"agent": "typed", "prompt": "p", "output_schema": {"type": "object"}}))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output_schema"], json!({"type": "object"}));
    assert_eq!(run["output"], json!({"severity": "low", "labels": []}));
}

#[tokio::test]
async fn a_repeat_of_a_run_stays_that_run_once_its_agent_is_archived() {
    let app = spawn_app().await;
    app.post_agent(definition("triage", "Sort it.", "one"))
        .await;
    let body = json!({"agent": "triage", "prompt": "Ticket 1"});
    let post = |key: &'static str| {
        app.send(
            app.request(Method::POST, "/v1/runs")
                .header("idempotency-key", key)
                .json(&body),
        )
    };
    let first = post("ticket-1").await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    assert_eq!(app.delete("/v1/agents/triage").await.status, 204);
    let again = post("ticket-1").await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.body["id"], first.body["id"]);
    // Another run of that agent is refused.
    assert_eq!(post("ticket-2").await.error_code(), "agent_not_found");
}

#[tokio::test]
async fn a_definition_the_server_no_longer_takes_is_refused_naming_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    config.limits.max_steps = 50;
    let app = spawn_in(dir, config).await;
    let mut body = definition("long", "Go on.", "done");
    body["limits"] = json!({"max_steps": 40});
    assert_eq!(app.post_agent(body).await.status, StatusCode::CREATED);
    let dir = app.stop().await;
    // The same database, a lower ceiling.
    let mut config = test_config(&dir);
    config.limits.max_steps = 20;
    let app = spawn_in(dir, config).await;
    let reply = app.post_run(json!({"agent": "long", "prompt": "p"})).await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("limits.max_steps")
            && message.ends_with("(the request on agent long@1)"),
        "{message}"
    );
    // The request's own value mends it.
    let run = app
        .run_to_end(json!({"agent": "long", "prompt": "p", "limits": {"max_steps": 5}}))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
}

/// Two replicas on one PostgreSQL database see the same versions: one made
/// on either is the one the next run names on the other.
#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn two_replicas_see_the_same_versions() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let (_a, a) = start_binary_with(&dir, &[]);
    let (_b, b) = start_binary_with(&dir, &[]);
    let (a, b) = (Remote::new(a), Remote::new(b));
    let created = a
        .post_json("/v1/agents", &definition("triage", "One.", "one"))
        .await;
    assert_eq!(created["version"], 1, "{created}");
    assert_eq!(b.get_json("/v1/agents/triage").await["version"], 1);
    let run = b
        .post_json(
            "/v1/runs?wait=true",
            &json!({"agent": "triage", "prompt": "p"}),
        )
        .await;
    assert_eq!(run["answer"], "one");
    // A new version on one replica, named at once on the other.
    let updated = b
        .client
        .put(format!("{}/v1/agents/triage", b.address))
        .json(&definition("triage", "Two.", "two"))
        .send()
        .await
        .unwrap();
    assert_eq!(updated.status(), 200);
    let run = a
        .post_json(
            "/v1/runs?wait=true",
            &json!({"agent": "triage", "prompt": "p"}),
        )
        .await;
    assert_eq!(run["agent"]["version"], 2);
    assert_eq!(run["answer"], "two");
    let versions = a.get_json("/v1/agents/triage/versions").await;
    assert_eq!(names(&versions, "versions"), ["triage@2", "triage@1"]);
    // Archived on one, refused on the other.
    let archived = a
        .client
        .delete(format!("{}/v1/agents/triage", a.address))
        .send()
        .await
        .unwrap();
    assert_eq!(archived.status(), 204);
    let refused = b
        .client
        .post(format!("{}/v1/runs", b.address))
        .json(&json!({"agent": "triage", "prompt": "p"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);
    // Both make a version of one agent at once: each gets its own number.
    a.post_json("/v1/agents", &json!({"name": "race"})).await;
    let put = |remote: &Remote| {
        remote
            .client
            .put(format!("{}/v1/agents/race", remote.address))
            .json(&json!({"tools": []}))
            .send()
    };
    let (one, two) = tokio::join!(put(&a), put(&b));
    let mut numbers = Vec::new();
    for reply in [one.unwrap(), two.unwrap()] {
        assert_eq!(reply.status(), 200);
        numbers.push(reply.json::<Value>().await.unwrap()["version"].clone());
    }
    numbers.sort_by_key(|n| n.as_u64());
    assert_eq!(numbers, [json!(2), json!(3)]);
}
