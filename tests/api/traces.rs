//! Traces (SPEC section 17), sent to a real receiver: Arize Phoenix (pinned,
//! installed by `tests/phoenix/install.sh`), started here on free ports, the
//! spans read back through its own REST API.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

/// A Phoenix server of its own, stopped when dropped.
struct Phoenix {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Phoenix {
    /// Starts Phoenix and waits (two minutes at most: its first start
    /// makes its database) until it says it serves.
    async fn start() -> Self {
        let phoenix = installed("tests/phoenix/install.sh");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut child = std::process::Command::new(phoenix)
            .arg("serve")
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", free_port().to_string())
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("phoenix starts");
        // Its server's log line "Uvicorn running on ...", on either stream
        // (each read to its end, so that it never fills).
        let (serving, served) = tokio::sync::mpsc::unbounded_channel();
        let streams: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for stream in streams {
            let serving = serving.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stream)
                    .lines()
                    .map_while(Result::ok)
                {
                    if line.contains("Uvicorn running on") {
                        let _ = serving.send(());
                    }
                }
            });
        }
        drop(serving);
        let phoenix = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let mut served = served;
        let started = tokio::time::timeout(Duration::from_secs(120), served.recv()).await;
        assert!(
            matches!(started, Ok(Some(()))),
            "Phoenix did not serve in two minutes (or exited)"
        );
        phoenix
    }

    /// The spans of `trace_id` Phoenix has, once there are `count` of them.
    async fn spans(&self, trace_id: &str, count: usize) -> Vec<Value> {
        self.spans_once(trace_id, |spans| spans.len() >= count)
            .await
    }

    /// The spans of `trace_id` Phoenix has, once `enough` says so (spans
    /// arrive in batches, a run's executions in several).
    async fn spans_once(&self, trace_id: &str, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let client = http_client();
        let url = format!(
            "{}/v1/projects/default/spans?trace_id={trace_id}&limit=100",
            self.url
        );
        eventually(&format!("the spans of trace {trace_id}"), async || {
            let reply: Value = client.get(&url).send().await.ok()?.json().await.ok()?;
            let spans: Vec<Value> = reply["data"]
                .as_array()?
                .iter()
                .filter(|span| span["context"]["trace_id"] == trace_id)
                .cloned()
                .collect();
            enough(&spans).then_some(spans)
        })
        .await
    }
}

impl Phoenix {
    /// Opens `trace_id` in Phoenix's UI in Chromium (`tests/browser/trace.mjs`)
    /// and saves a picture of it under `target/trace-screenshots/`.
    async fn screenshot(&self, trace_id: &str) {
        let projects: Value = http_client()
            .get(format!("{}/v1/projects", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let project = projects["data"][0]["id"].as_str().unwrap().to_owned();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let shot = root.join("target/trace-screenshots/trace.png");
        let mut command = tokio::process::Command::new("node");
        command
            .arg(root.join("tests/browser/trace.mjs"))
            .arg(installed("tests/browser/install.sh"))
            .arg(&self.url)
            .arg(project)
            .arg(trace_id)
            .arg(&shot)
            .kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(120), command.output())
            .await
            .expect("the trace's page within two minutes")
            .unwrap();
        assert!(
            output.status.success(),
            "Phoenix's page of the trace:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(shot.exists());
    }
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_runs_spans_reach_phoenix_in_the_callers_trace() {
    let phoenix = Phoenix::start().await;
    let endpoint = phoenix.url.clone();
    let app = spawn_with(move |config| {
        config.tracing.otlp_endpoint = Some(endpoint);
    })
    .await;
    let body = json!({
        "prompt": "look around",
        "tools": ["list_dir"],
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("c1", "list_dir", json!({}))],
             "usage": {"input_tokens": 7, "output_tokens": 3}, "finish_reason": "tool_calls"},
            {"content": "done", "usage": {"input_tokens": 9, "output_tokens": 2},
             "finish_reason": "stop"}
        ]}
    });
    let reply = app
        .send(
            app.request(reqwest::Method::POST, "/v1/runs?wait=true")
                .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
                .json(&body),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let run = reply.body;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["trace_id"], TRACE_ID);

    // The run's span, two model calls and the tool call; the request's own
    // span too.
    let spans = phoenix.spans(TRACE_ID, 5).await;
    let named =
        |name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["name"] == name).collect() };
    let agent = named("invoke_agent");
    assert_eq!(agent.len(), 1, "{spans:#?}");
    let agent = agent[0];
    assert_eq!(
        agent["parent_id"], CALLER_SPAN,
        "the caller's span is its parent"
    );
    let attributes = &agent["attributes"];
    assert_eq!(attributes["agent_runner.run_id"], run["id"]);
    assert_eq!(attributes["agent_runner.tenant"], "default");
    assert_eq!(attributes["agent_runner.status"], "completed");
    assert_eq!(attributes["gen_ai.agent.name"], "agent-runner");
    let agent_id = &agent["context"]["span_id"];
    let chats = named("chat scripted");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let mut calls: Vec<(i64, i64, String)> = chats
        .iter()
        .map(|chat| {
            assert_eq!(&chat["parent_id"], agent_id);
            let attributes = &chat["attributes"];
            assert_eq!(attributes["gen_ai.provider.name"], "scripted");
            (
                attributes["gen_ai.usage.input_tokens"].as_i64().unwrap(),
                attributes["gen_ai.usage.output_tokens"].as_i64().unwrap(),
                attributes["gen_ai.response.finish_reasons"].to_string(),
            )
        })
        .collect();
    calls.sort_unstable();
    assert_eq!(
        calls,
        [
            (7, 3, r#"["tool_calls"]"#.to_owned()),
            (9, 2, r#"["stop"]"#.to_owned())
        ]
    );
    let tool = named("execute_tool list_dir");
    assert_eq!(tool.len(), 1, "{spans:#?}");
    assert_eq!(&tool[0]["parent_id"], agent_id);
    assert_eq!(tool[0]["attributes"]["gen_ai.tool.name"], "list_dir");
    assert_eq!(tool[0]["attributes"]["gen_ai.tool.call.id"], "c1");
    let http = named("POST /v1/runs");
    assert_eq!(http.len(), 1, "{spans:#?}");
    assert_eq!(http[0]["parent_id"], CALLER_SPAN);
    assert_eq!(http[0]["attributes"]["http.response.status_code"], 201);
    // Without content recording, no prompt or answer is in any span.
    let text = serde_json::to_string(&spans).unwrap();
    assert!(!text.contains("look around"), "{text}");

    // And Phoenix's own UI shows the trace (docs/trace.png is this picture).
    phoenix.screenshot(TRACE_ID).await;

    // A run that pauses for a client tool: one execution up to the pause,
    // one after the answer, both in the run's own trace.
    let paused = app.create_run(asks_the_client()).await;
    let id = paused["id"].as_str().unwrap();
    let trace = paused["trace_id"].as_str().unwrap().to_owned();
    answer_to_the_end(&app, id).await;
    // Both executions' spans, the second's exported after the first's.
    let spans = phoenix
        .spans_once(&trace, |spans| {
            spans
                .iter()
                .filter(|span| span["name"] == "invoke_agent")
                .count()
                >= 2
        })
        .await;
    let mut events: Vec<Vec<String>> = spans
        .iter()
        .filter(|span| span["name"] == "invoke_agent")
        .map(|span| {
            span["events"]
                .as_array()
                .map(|events| {
                    events
                        .iter()
                        .map(|event| event["name"].as_str().unwrap_or_default().to_owned())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect();
    events.sort();
    assert_eq!(events, [vec!["paused"], vec!["resumed"]], "{spans:#?}");

    // A run that delegates: its child's run span sits under its
    // `execute_tool delegate` span, in its trace.
    let parent = app
        .run_to_end(json!({
            "prompt": "ask",
            "subagents": {"r": {"model": {"scripted": [{"content": "hi"}]}}},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("d1", "delegate", json!({"agent": "r", "prompt": "go"}))]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(parent["status"], "completed", "{parent}");
    let trace = parent["trace_id"].as_str().unwrap().to_owned();
    let spans = phoenix
        .spans_once(&trace, |spans| {
            spans.iter().filter(|s| s["name"] == "invoke_agent").count() >= 2
                && spans.iter().any(|s| s["name"] == "execute_tool delegate")
        })
        .await;
    let delegate = spans
        .iter()
        .find(|s| s["name"] == "execute_tool delegate")
        .unwrap();
    let child = spans
        .iter()
        .find(|s| {
            s["name"] == "invoke_agent" && s["attributes"]["agent_runner.run_id"] != parent["id"]
        })
        .unwrap_or_else(|| panic!("the child's span: {spans:#?}"));
    assert_eq!(
        child["parent_id"], delegate["context"]["span_id"],
        "{spans:#?}"
    );
}

#[tokio::test]
async fn an_unreachable_collector_never_holds_a_run_back_and_its_spans_are_counted_dropped() {
    // A port nothing listens on.
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let app = spawn_with(move |config| {
        config.tracing.otlp_endpoint = Some(endpoint);
    })
    .await;
    for _ in 0..10 {
        let run = app
            .run_to_end(two_step("list_dir", json!({}), "done"))
            .await;
        assert_eq!(run["status"], "completed", "{run}");
        // A run without a traceparent has a trace of its own.
        assert_eq!(run["trace_id"].as_str().unwrap().len(), 32, "{run}");
    }
    eventually("spans counted dropped", async || {
        let text = app.get("/metrics").await.text;
        let dropped: f64 = text
            .lines()
            .find_map(|line| line.strip_prefix("agent_runner_spans_dropped_total "))?
            .parse()
            .ok()?;
        (dropped >= 40.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn with_a_sample_ratio_of_zero_only_what_a_caller_samples_is_recorded() {
    let phoenix = Phoenix::start().await;
    let endpoint = phoenix.url.clone();
    let app = spawn_with(move |config| {
        config.tracing.otlp_endpoint = Some(endpoint);
        config.tracing.sample_ratio = 0.0;
    })
    .await;
    let create = async |traceparent: Option<String>, body: Value| {
        let mut request = app.request(reqwest::Method::POST, "/v1/runs").json(&body);
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        let reply = app.send(request).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        reply.body
    };
    // A trace of the run's own: the ratio (none) decides.
    let own = create(None, two_step("list_dir", json!({}), "done")).await;
    // A caller that does not record its trace, and a run of it that pauses
    // and resumes: both executions follow the caller's flag.
    let unsampled_trace = "0af7651916cd43dd8448eb211c80319c";
    let paused = create(
        Some(format!("00-{unsampled_trace}-b7ad6b7169203331-00")),
        asks_the_client(),
    )
    .await;
    assert_eq!(paused["trace_id"], unsampled_trace);
    let paused_id = paused["id"].as_str().unwrap();
    answer_to_the_end(&app, paused_id).await;
    assert_eq!(
        app.wait_terminal(own["id"].as_str().unwrap()).await["status"],
        "completed"
    );
    // A caller that records its trace, last: once its run's spans are in,
    // any span of what came before would be too (one export queue, in
    // order).
    let sampled = create(
        Some(format!("00-{TRACE_ID}-{CALLER_SPAN}-01")),
        two_step("list_dir", json!({}), "done"),
    )
    .await;
    assert_eq!(
        app.wait_terminal(sampled["id"].as_str().unwrap()).await["status"],
        "completed"
    );
    phoenix
        .spans_once(TRACE_ID, |spans| {
            spans.iter().any(|span| span["name"] == "invoke_agent")
        })
        .await;
    let all: Value = http_client()
        .get(format!(
            "{}/v1/projects/default/spans?limit=1000",
            phoenix.url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let traces: std::collections::BTreeSet<&str> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|span| span["context"]["trace_id"].as_str())
        .collect();
    assert_eq!(traces, [TRACE_ID].into(), "{all:#}");
}

/// A run that pauses for its client tool `ask` (call `c1`), then answers.
fn asks_the_client() -> Value {
    json!({
        "prompt": "ask",
        "tools": [],
        "client_tools": [{"name": "ask"}],
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("c1", "ask", json!({}))]},
            {"content": "answered"}
        ]}
    })
}

/// Answers the pause of an [`asks_the_client`] run, and waits for its end.
async fn answer_to_the_end(app: &TestApp, id: &str) {
    app.wait_status(id, "requires_action").await;
    let answered = app
        .answer(id, json!([{"call_id": "c1", "output": "yes"}]))
        .await;
    assert!(answered.status.is_success(), "{}", answered.text);
    assert_eq!(app.wait_terminal(id).await["status"], "completed");
}
