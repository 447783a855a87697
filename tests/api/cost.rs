//! Prompt caching and cost (SPEC section 22) through the real server: the
//! cache marks and key each provider is sent, the cache usage each reports
//! in its own wire format, prices turned into `cost_usd` per call and per
//! run, `limits.max_cost_usd` ending a run `cost_limit`, a tenant's
//! `max_cost_usd_per_day`, and the metrics.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{Seen, mock_openai_profile};
use agent_runner::harness::Price;
use agent_runner::models::profile::{HttpProfile, ModelProfile};

/// The price every test's profile has: $3 a million input tokens, $15
/// output, $0.30 cached input, $3.75 cache writes.
const PRICE: Price = Price {
    input: 3.0,
    output: 15.0,
    cached_input: Some(0.3),
    cache_write: Some(3.75),
};

/// An Anthropic provider that asks for `list_dir`, then answers (and
/// again for the next run),
/// reporting each time 10 uncached input tokens, 100 written to its cache,
/// 1,000 read from it and 5 output tokens; it keeps the request bodies.
async fn anthropic_with_cache() -> (String, Seen) {
    let seen = Seen::default();
    let router = Router::new()
        .route(
            "/v1/messages",
            post(|State(seen): State<Seen>, body: axum::Json<Value>| async move {
                let first = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(body.0);
                    seen.len() % 2 == 1
                };
                let (content, stop) = if first {
                    (
                        json!([{"type": "tool_use", "id": "toolu_1", "name": "list_dir", "input": {}}]),
                        "tool_use",
                    )
                } else {
                    (json!([{"type": "text", "text": "Listed."}]), "end_turn")
                };
                axum::Json(json!({
                    "id": "msg_1", "type": "message", "role": "assistant", "model": "mock",
                    "content": content, "stop_reason": stop,
                    "usage": {"input_tokens": 10, "cache_creation_input_tokens": 100,
                              "cache_read_input_tokens": 1000, "output_tokens": 5}
                }))
            }),
        )
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (address, seen)
}

fn anthropic_profile(address: &str, cache: bool) -> ModelProfile {
    ModelProfile::Anthropic(HttpProfile {
        base_url: Some(address.to_owned()),
        model: Some("mock".into()),
        api_key_env: Some("PATH".into()),
        max_attempts: Some(1),
        cache,
        price: Some(PRICE),
        ..HttpProfile::default()
    })
}

/// One call's cost at [`PRICE`]: 10 uncached, 1,000 cached, 100 written,
/// 5 out.
const CALL_COST: f64 = (10.0 * 3.0 + 1000.0 * 0.3 + 100.0 * 3.75 + 5.0 * 15.0) / 1e6;

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-12)
}

#[tokio::test]
async fn anthropic_is_sent_cache_marks_and_its_cache_usage_is_counted_and_priced() {
    let (address, seen) = anthropic_with_cache().await;
    let app = spawn_with(|config| {
        config
            .models
            .insert("an".into(), anthropic_profile(&address, true));
        config
            .models
            .insert("plain".into(), anthropic_profile(&address, false));
    })
    .await;
    let run = app
        .run_to_end(
            json!({"prompt": "List it.", "model": "an", "tools": ["list_dir"],
                           "instructions": "Be brief."}),
        )
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let usage = &run["usage"];
    assert_eq!(usage["input_tokens"], 2 * 1110, "{usage}");
    assert_eq!(usage["cached_input_tokens"], 2 * 1000, "{usage}");
    assert_eq!(usage["cache_write_tokens"], 2 * 100, "{usage}");
    assert_eq!(usage["output_tokens"], 2 * 5, "{usage}");
    assert!(close(&usage["cost_usd"], 2.0 * CALL_COST), "{usage}");

    // The stable prefix is marked: the system prompt, the last tool, the
    // newest message's last block.
    let requests = seen.lock().unwrap().clone();
    let ephemeral = json!({"type": "ephemeral"});
    let second = &requests[1];
    assert_eq!(
        second["system"],
        json!([{"type": "text", "text": "Be brief.", "cache_control": ephemeral}])
    );
    let tools = second["tools"].as_array().unwrap();
    assert_eq!(tools.last().unwrap()["cache_control"], ephemeral);
    let newest = second["messages"].as_array().unwrap().last().unwrap();
    let block = newest["content"].as_array().unwrap().last().unwrap();
    assert_eq!(block["type"], "tool_result");
    assert_eq!(block["cache_control"], ephemeral);
    let marks = second.to_string().matches("cache_control").count();
    assert_eq!(marks, 3, "{second}");

    // Each call's usage and cost on its `model_end`.
    let id = run["id"].as_str().unwrap();
    let ends: Vec<Value> = app
        .events(id)
        .await
        .into_iter()
        .filter(|event| event.event == "model_end")
        .map(|event| event.data)
        .collect();
    assert_eq!(ends.len(), 2);
    for end in &ends {
        let usage = &end["usage"];
        assert_eq!(usage["input_tokens"], 1110, "{end}");
        assert_eq!(usage["cached_input_tokens"], 1000, "{end}");
        assert_eq!(usage["cache_write_tokens"], 100, "{end}");
        assert!(close(&usage["cost_usd"], CALL_COST), "{end}");
    }

    // Metrics: the cache's tokens, and the cost by tenant and profile.
    let text = app
        .wait_metrics(&[
            "agent_runner_tokens_total{direction=\"cached_input\"} 2000",
            "agent_runner_tokens_total{direction=\"cache_write\"} 200",
        ])
        .await;
    let cost = text
        .lines()
        .find_map(|line| {
            line.strip_prefix("agent_runner_cost_usd_total{tenant=\"default\",profile=\"an\"} ")
        })
        .unwrap_or_else(|| panic!("no cost metric in\n{text}"));
    assert!((cost.parse::<f64>().unwrap() - 2.0 * CALL_COST).abs() < 1e-9);

    // `cache = false`: nothing marked.
    let run = app
        .run_to_end(
            json!({"prompt": "List it.", "model": "plain", "tools": ["list_dir"],
                           "instructions": "Be brief."}),
        )
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = seen.lock().unwrap().clone();
    for unmarked in &requests[2..] {
        assert!(
            !unmarked.to_string().contains("cache_control"),
            "{unmarked}"
        );
        assert_eq!(unmarked["system"], "Be brief.");
    }
}

/// An OpenAI-dialect provider that asks for `list_dir` once and then
/// answers, reporting 40 of its 100 prompt tokens as cached.
async fn openai_with_cache() -> (String, Seen) {
    let seen = Seen::default();
    let router = Router::new()
        .route(
            "/v1/chat/completions",
            post(|State(seen): State<Seen>, body: axum::Json<Value>| async move {
                let first = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(body.0);
                    seen.len() % 2 == 1
                };
                let message = if first {
                    json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                           "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}]})
                } else {
                    json!({"role": "assistant", "content": "Listed."})
                };
                axum::Json(json!({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "mock",
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": if first { "tool_calls" } else { "stop" }}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                              "prompt_tokens_details": {"cached_tokens": 40}}
                }))
            }),
        )
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (address, seen)
}

#[tokio::test]
async fn openai_is_sent_one_cache_key_per_run_and_its_cached_tokens_are_counted() {
    let (address, seen) = openai_with_cache().await;
    let app = spawn_with(|config| {
        let mut profile = mock_openai_profile(&address);
        if let ModelProfile::OpenAi(http) = &mut profile {
            http.price = Some(PRICE);
        }
        config.models.insert("oa".into(), profile);
        let mut plain = mock_openai_profile(&address);
        if let ModelProfile::OpenAi(http) = &mut plain {
            http.cache = false;
        }
        config.models.insert("plain".into(), plain);
    })
    .await;
    let first = app
        .run_to_end(json!({"prompt": "List it.", "model": "oa", "tools": ["list_dir"]}))
        .await;
    let second = app
        .run_to_end(json!({"prompt": "List it.", "model": "oa", "tools": ["list_dir"]}))
        .await;
    for run in [&first, &second] {
        assert_eq!(run["status"], "completed", "{run}");
        let usage = &run["usage"];
        assert_eq!(usage["input_tokens"], 200, "{usage}");
        assert_eq!(usage["cached_input_tokens"], 80, "{usage}");
        assert_eq!(usage["cache_write_tokens"], 0, "{usage}");
        // 60 uncached at $3, 40 cached at $0.30, 10 out at $15, twice.
        let cost = 2.0 * (60.0 * 3.0 + 40.0 * 0.3 + 10.0 * 15.0) / 1e6;
        assert!(close(&usage["cost_usd"], cost), "{usage}");
    }
    let requests = seen.lock().unwrap().clone();
    let keys: Vec<&Value> = requests
        .iter()
        .map(|request| &request["prompt_cache_key"])
        .collect();
    assert_eq!(keys[0], &first["id"], "the run's calls share its id as key");
    assert_eq!(keys[1], &first["id"]);
    assert_eq!(keys[2], &second["id"]);
    assert_eq!(keys[3], &second["id"]);

    // Without a price the cost is unknown (null), not free; `cache =
    // false` sends no key.
    let plain = app
        .run_to_end(json!({"prompt": "List it.", "model": "plain", "tools": ["list_dir"]}))
        .await;
    assert_eq!(plain["usage"]["cost_usd"], Value::Null, "{plain}");
    assert_eq!(plain["usage"]["cached_input_tokens"], 80, "{plain}");
    let requests = seen.lock().unwrap().clone();
    assert!(requests[4].get("prompt_cache_key").is_none());
}

/// A scripted profile, priced: each response lists the workspace and
/// reports 1,000,000 input and 100,000 output tokens ($3 + $1.50).
fn priced_script() -> ModelProfile {
    let step = |i: usize| {
        json!({"content": "", "tool_calls": [call(&format!("c{i}"), "list_dir", json!({}))],
               "usage": {"input_tokens": 1_000_000, "output_tokens": 100_000}})
    };
    let toml = format!(
        "kind = \"scripted\"\nscript = {}\n[price]\ninput = 3.0\noutput = 15.0\n",
        serde_json::to_string(&(0..6).map(step).map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap()
    );
    toml::from_str(&toml).unwrap()
}

#[tokio::test]
async fn a_run_ends_cost_limit_after_the_call_that_reaches_its_max_cost() {
    let app = spawn_with(|config| {
        config.models.insert("priced".into(), priced_script());
        let unmetered = "kind = \"scripted\"\nscript = [\
            '{\"content\": \"\", \"tool_calls\": [{\"id\": \"l\", \"name\": \"list_dir\", \"arguments\": {}}]}', \
            '{\"content\": \"done\", \"usage\": {\"input_tokens\": 1000000}}']\n\
            [price]\ninput = 3.0\noutput = 15.0\n";
        config
            .models
            .insert("unmetered".into(), toml::from_str(unmetered).unwrap());
    })
    .await;
    // Each call costs $4.50: the second reaches $9 >= $8.
    let run = app
        .run_to_end(
            json!({"prompt": "Go.", "model": "priced", "tools": ["list_dir"],
                           "limits": {"max_cost_usd": 8, "max_steps": 6}}),
        )
        .await;
    assert_eq!(run["status"], "cost_limit", "{run}");
    assert_eq!(run["steps"], 2, "{run}");
    assert_eq!(run["limits"]["max_cost_usd"], 8.0, "{run}");
    assert!(close(&run["usage"]["cost_usd"], 9.0), "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(error.contains("max_cost_usd of $8"), "{error}");
    // The call that reached it is recorded; none of its tool calls ran.
    let id = run["id"].as_str().unwrap();
    let events = app.events(id).await;
    let started: Vec<&Value> = events
        .iter()
        .filter(|event| event.event == "tool_start")
        .map(|event| &event.data["call_id"])
        .collect();
    assert_eq!(started, [&json!("c0")]);
    let messages = app.messages(id).await;
    let last = messages.last().unwrap();
    assert_eq!(last["tool_calls"][0]["id"], "c1", "{last}");
    assert_eq!(events.last().unwrap().data["status"], "cost_limit");
    assert_eq!(
        app.get("/v1/runs?status=cost_limit").await.body["runs"][0]["id"],
        run["id"]
    );
    app.wait_metrics(&["agent_runner_runs_finished_total{status=\"cost_limit\"} 1"])
        .await;

    // A bound the run stays under changes nothing.
    let run = app
        .run_to_end(
            json!({"prompt": "Go.", "model": "priced", "tools": ["list_dir"],
                           "limits": {"max_cost_usd": 100, "max_steps": 3}}),
        )
        .await;
    assert_eq!(run["status"], "step_limit", "{run}");
    assert!(close(&run["usage"]["cost_usd"], 13.5), "{run}");

    // A call that reports no usage: the cost is unknown, and the bound
    // holds the calls it knows.
    let run = app
        .run_to_end(
            json!({"prompt": "Go.", "model": "unmetered", "tools": ["list_dir"],
                           "limits": {"max_cost_usd": 5}}),
        )
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["usage"]["cost_usd"], Value::Null, "{run}");
}

#[tokio::test]
async fn a_cost_bound_is_refused_without_a_price_or_a_positive_amount() {
    let app = spawn_with(|config| {
        config.models.insert("priced".into(), priced_script());
    })
    .await;
    for (body, names) in [
        (
            json!({"prompt": "Go.", "limits": {"max_cost_usd": 1}}),
            "model profile \"demo\" has none",
        ),
        (
            json!({"prompt": "Go.", "model": {"scripted": [{"content": "x"}]},
                   "limits": {"max_cost_usd": 1}}),
            "a scripted model has none",
        ),
        (
            json!({"prompt": "Go.", "model": "priced", "limits": {"max_cost_usd": 0}}),
            "limits.max_cost_usd must be a number of US dollars above 0",
        ),
        (
            json!({"prompt": "Go.", "model": "priced", "limits": {"max_cost_usd": -2.5}}),
            "limits.max_cost_usd must be",
        ),
        (
            json!({"prompt": "Go.", "model": "priced", "limits": {"max_cost_usd": "1"}}),
            "max_cost_usd",
        ),
    ] {
        let reply = app.post_run(body.clone()).await;
        assert_eq!(reply.status, 422, "{body}: {}", reply.text);
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{body}: {message}");
    }
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
}

#[tokio::test]
async fn a_price_that_is_not_a_price_refuses_the_configuration() {
    for (table, names) in [
        ("[price]\ninput = -1.0\noutput = 1.0\n", "price.input"),
        ("[price]\ninput = 1.0\n", "output"),
        ("[price]\ninput = 1.0\noutput = 1.0\nfree = 2.0\n", "free"),
    ] {
        let toml = format!("kind = \"scripted\"\nscript = [\"{{}}\"]\n{table}");
        let error = toml::from_str::<ModelProfile>(&toml)
            .unwrap_err()
            .to_string();
        assert!(error.contains(names), "{table}: {error}");
    }
    let error = toml::from_str::<ModelProfile>("kind = \"scripted\"\nscript = []\ncache = false\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`cache` is not a setting of kind scripted"),
        "{error}"
    );
}

#[tokio::test]
async fn a_tenants_daily_cost_refuses_its_new_runs_and_spares_the_others() {
    use agent_runner::config::TenantLimits;
    let limits = TenantLimits {
        max_cost_usd_per_day: Some(10.0),
        ..TenantLimits::default()
    };
    let mut app = spawn_with(move |config| {
        crate::fairness::with_tenants(config, 4, limits);
        config.models.insert("priced".into(), priced_script());
    })
    .await;
    // Three calls at $4.50: $13.50, past the $10 a day of tenant a; the
    // run under way is not stopped by it.
    let body = json!({"prompt": "Go.", "model": "priced", "tools": ["list_dir"],
                      "limits": {"max_steps": 3}});
    let run = crate::fairness::create_as(&mut app, "a", body.clone()).await;
    let run = app.wait_terminal(run["id"].as_str().unwrap()).await;
    assert_eq!(run["status"], "step_limit", "{run}");
    let refused = app.post_run(body.clone()).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.error_code(), "quota_exceeded");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("$13.50 of its $10 (max_cost_usd_per_day)"),
        "{message}"
    );
    let wait: u64 = refused.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((86_300..=86_400).contains(&wait), "Retry-After: {wait}");
    let tenant = app.get("/v1/tenant").await;
    assert_eq!(tenant.status, 200, "{}", tenant.text);
    assert_eq!(tenant.body["cost_usd_last_24h"], 13.5, "{}", tenant.text);
    assert_eq!(tenant.body["limits"]["max_cost_usd_per_day"], 10.0);
    // Tenant b has no such quota.
    let other = crate::fairness::create_as(&mut app, "b", body).await;
    assert_ne!(other["status"], Value::Null, "{other}");
}

#[tokio::test]
async fn attempts_share_the_runs_cost_bound_and_their_costs_add_up() {
    let app = spawn_with(|config| {
        config.models.insert("priced".into(), priced_script());
        let check = "program = \"true\"\ncheck = true";
        config
            .commands
            .insert("check".into(), toml::from_str(check).unwrap());
    })
    .await;
    // $9 for two attempts: $4.50 each, which one call spends.
    let run = app
        .run_to_end(
            json!({"prompt": "Go.", "model": "priced", "tools": ["list_dir"],
                           "commands": ["check"], "attempts": {"n": 2, "until": "all"},
                           "limits": {"max_cost_usd": 9, "max_steps": 6}}),
        )
        .await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .starts_with("no_attempt_passed"),
        "{run}"
    );
    let id = run["id"].as_str().unwrap();
    let attempts = app.get(&format!("/v1/runs?parent_run_id={id}")).await;
    for attempt in attempts.body["runs"].as_array().unwrap() {
        assert_eq!(attempt["status"], "cost_limit", "{attempt}");
        assert_eq!(attempt["limits"]["max_cost_usd"], 4.5, "{attempt}");
        assert!(close(&attempt["usage"]["cost_usd"], 4.5), "{attempt}");
    }
    assert!(close(&run["usage"]["cost_usd"], 9.0), "{run}");
}
