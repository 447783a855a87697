//! Webhooks received by a real HTTP listener: signed as Standard Webhooks
//! gives it (checked here with HMAC-SHA256 independently of the server's
//! code), retried after a 500, posted when a run pauses and when it ends,
//! only to allowed hosts; durable (SPEC 14): never lost to a SIGKILL or a
//! graceful stop, and on PostgreSQL delivered once by one of the replicas.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::helpers::*;

/// A secret as Standard Webhooks writes one.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What a receiver received: each delivery with the answer it got, and
/// (from [`answering`]) each one's `webhook-id`, when it came and when it
/// was answered.
#[derive(Clone, Default)]
pub(crate) struct Received(
    pub(crate) Arc<Mutex<Vec<(HeaderMap, String, StatusCode)>>>,
    Arc<Mutex<Vec<(String, Instant, Instant)>>>,
);

/// A receiver at `/hook` that answers 500 to the first attempt of every
/// message and 200 after: its address and what it received.
pub(crate) async fn receiver() -> (String, Received) {
    let received = Received::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                let mut all = kept.0.lock().unwrap();
                let id = headers["webhook-id"].to_str().unwrap().to_owned();
                let seen = all
                    .iter()
                    .any(|(h, _, _)| h["webhook-id"].to_str().unwrap() == id);
                let status = if seen {
                    StatusCode::OK
                } else {
                    StatusCode::INTERNAL_SERVER_ERROR
                };
                all.push((headers, body, status));
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, received)
}

/// Checks a delivery's signature as a receiver would, from the secret.
fn verify(headers: &HeaderMap, body: &str) {
    assert!(signed_with(headers, body, SECRET));
}

/// Whether a delivery is signed with `secret` (`whsec_` and base64), as a
/// receiver checks it.
pub(crate) fn signed_with(headers: &HeaderMap, body: &str, secret: &str) -> bool {
    let key = BASE64
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let id = headers["webhook-id"].to_str().unwrap();
    let timestamp = headers["webhook-timestamp"].to_str().unwrap();
    let sent: i64 = timestamp.parse().unwrap();
    assert!(
        (chrono::Utc::now().timestamp() - sent).abs() < 300,
        "a fresh timestamp"
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    let expected = format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()));
    let signatures = headers["webhook-signature"].to_str().unwrap();
    signatures.split(' ').any(|signature| signature == expected)
}

/// Waits for a delivery that was taken (200) of run `id` in `status`.
pub(crate) async fn taken(received: &Received, id: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let found = received
            .0
            .lock()
            .unwrap()
            .iter()
            .find_map(|(_, body, answered)| {
                let run: Value = serde_json::from_str(body).unwrap();
                (*answered == StatusCode::OK && run["id"] == id && run["status"] == status)
                    .then_some(run)
            });
        if let Some(run) = found {
            return run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {status} delivery for {id}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_run_s_pause_and_end_are_posted_signed_and_retried_after_a_failure() {
    let (hooks, received) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    // Traced (to a collector that is not there): each attempt carries the
    // `traceparent` of a span of the run's trace.
    let (mut child, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_WEBHOOKS__ALLOWED_HOSTS", "[\"127.0.0.1\"]"),
            ("AGENT_RUNNER_WEBHOOKS__SECRET_ENV", "TEST_WEBHOOK_SECRET"),
            ("TEST_WEBHOOK_SECRET", SECRET),
            ("AGENT_RUNNER_TRACING__OTLP_ENDPOINT", "http://127.0.0.1:9"),
        ],
    );
    let server = Remote::new(address.clone());
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "write it, with permission",
                "approval": {"tools": ["write_file"]},
                "webhook": {"url": format!("{hooks}/hook")},
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": "a.txt", "content": "x"}))]},
                    {"content": "written"}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    assert_eq!(run["webhook"], json!({"url": format!("{hooks}/hook")}));
    let paused = taken(&received, &id, "requires_action").await;
    assert_eq!(paused["pending_actions"][0]["call_id"], "w1");
    server
        .post_json(
            &format!("/v1/runs/{id}/actions"),
            &json!({"actions": [{"call_id": "w1", "decision": "approve"}]}),
        )
        .await;
    let mut ended = taken(&received, &id, "completed").await;
    assert_eq!(ended["answer"], "written");
    // The run object, and its tenant (none named, without tokens).
    assert_eq!(
        ended.as_object_mut().unwrap().remove("tenant"),
        Some(Value::Null)
    );
    assert_eq!(ended, server.get_json(&format!("/v1/runs/{id}")).await);
    let all = received.0.lock().unwrap().clone();
    // Each message: a 500, then the same message (same id) taken.
    assert_eq!(all.len(), 4, "{all:?}");
    let trace = format!("00-{}-", run["trace_id"].as_str().unwrap());
    for (headers, body, _) in &all {
        verify(headers, body);
        assert_eq!(headers["content-type"], "application/json");
        let traceparent = headers["traceparent"].to_str().unwrap();
        assert!(traceparent.starts_with(&trace), "{traceparent} of {trace}");
    }
    for pair in all.chunks(2) {
        assert_eq!(pair[0].2, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(pair[1].2, StatusCode::OK);
        assert_eq!(pair[0].0["webhook-id"], pair[1].0["webhook-id"]);
    }
    assert_ne!(all[0].0["webhook-id"], all[2].0["webhook-id"]);
    // A host not allowed is refused, and nothing is made.
    let refused = server
        .client
        .post(format!("{address}/v1/runs"))
        .json(&json!({"prompt": "x", "webhook": {"url": "http://localhost:9/hook"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("webhook.url:") && message.contains("allowed_hosts"),
        "{message}"
    );
    assert!(terminate(&mut child).success());
}

#[tokio::test]
async fn a_webhook_on_a_server_without_webhooks_is_refused() {
    let app = spawn_app().await;
    let refused = app
        .post_run(json!({"prompt": "x", "webhook": {"url": "http://127.0.0.1:9/hook"}}))
        .await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(refused.text.contains("not enabled"), "{}", refused.text);
    let shapeless = app
        .post_run(
            json!({"prompt": "x", "webhook": {"url": "http://127.0.0.1:9/hook", "secret": "x"}}),
        )
        .await;
    assert_eq!(shapeless.status, 422, "{}", shapeless.text);
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
}

/// A receiver at `/hook` that answers 503 until `accept` is set, then 200,
/// each answer after `delay`: its address and what it received (each
/// delivery recorded as it arrives, with the answer it gets).
async fn switched(accept: Arc<AtomicBool>, delay: Duration) -> (String, Received) {
    answering(delay, move |_, _| {
        if accept.load(Ordering::SeqCst) {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        }
    })
    .await
}

/// A receiver at `/hook` whose answer `answer` decides from what it
/// received before and the delivery's `webhook-id`, given after `delay`.
async fn answering(
    delay: Duration,
    answer: impl Fn(&[(HeaderMap, String, StatusCode)], &str) -> StatusCode
    + Clone
    + Send
    + Sync
    + 'static,
) -> (String, Received) {
    let received = Received::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let (kept, answer) = (kept.clone(), answer.clone());
            async move {
                let came = Instant::now();
                let id = headers["webhook-id"].to_str().unwrap().to_owned();
                let status = {
                    let mut all = kept.0.lock().unwrap();
                    let status = answer(&all, &id);
                    all.push((headers, body, status));
                    status
                };
                tokio::time::sleep(delay).await;
                kept.1.lock().unwrap().push((id, came, Instant::now()));
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, received)
}

/// The deliveries received of each run in `status`, by run id: each one's
/// `webhook-id` and the answer it got, in order.
fn by_run(received: &Received, status: &str) -> HashMap<String, Vec<(String, StatusCode)>> {
    let mut runs: HashMap<String, Vec<(String, StatusCode)>> = HashMap::new();
    for (headers, body, answered) in received.0.lock().unwrap().iter() {
        verify(headers, body);
        let run: Value = serde_json::from_str(body).unwrap();
        if run["status"] == status {
            runs.entry(run["id"].as_str().unwrap().to_owned())
                .or_default()
                .push((
                    headers["webhook-id"].to_str().unwrap().to_owned(),
                    *answered,
                ));
        }
    }
    runs
}

/// Waits until each of `ids` has a delivery in `status` answered `answer`.
async fn until_each(received: &Received, ids: &[String], status: &str, answer: StatusCode) {
    eventually(
        &format!("a {status} delivery of each run answered {answer}"),
        async || {
            let runs = by_run(received, status);
            ids.iter()
                .all(|id| {
                    runs.get(id)
                        .is_some_and(|seen| seen.iter().any(|(_, got)| *got == answer))
                })
                .then_some(())
        },
    )
    .await;
}

/// Each of `ids` was delivered (200) exactly once in `status`, with one
/// `webhook-id` on every attempt, and each run's id its own.
fn assert_delivered_once(received: &Received, ids: &[String], status: &str) {
    let runs = by_run(received, status);
    let mut distinct = BTreeSet::new();
    for id in ids {
        let seen = &runs[id];
        let taken = seen
            .iter()
            .filter(|(_, got)| *got == StatusCode::OK)
            .count();
        assert_eq!(taken, 1, "run {id} was delivered {taken} times: {seen:?}");
        let webhook_ids: BTreeSet<_> = seen.iter().map(|(webhook_id, _)| webhook_id).collect();
        assert_eq!(
            webhook_ids.len(),
            1,
            "run {id}: one id on every attempt: {seen:?}"
        );
        distinct.extend(webhook_ids);
    }
    assert_eq!(
        distinct.len(),
        ids.len(),
        "each run's delivery has its own id"
    );
}

/// No delivery was attempted while another attempt of it was under way:
/// each came after the one before it was answered.
fn assert_one_attempt_at_a_time(received: &Received) {
    let mut spans = received.1.lock().unwrap().clone();
    spans.sort_by_key(|(id, came, _)| (id.clone(), *came));
    for pair in spans.windows(2) {
        let ((id, _, answered), (next, came, _)) = (&pair[0], &pair[1]);
        assert!(
            id != next || came >= answered,
            "{id} was attempted twice at once"
        );
    }
}

/// The real binary serving from `dir` with webhooks to 127.0.0.1 (and
/// `more` of its config file), its address.
fn start_with_webhooks(dir: &tempfile::TempDir, more: &str) -> (ServerProcess, Remote) {
    let file = dir.path().join("webhooks.toml");
    std::fs::write(
        &file,
        format!(
            "[webhooks]\nallowed_hosts = [\"127.0.0.1\"]\n\
             secret_env = \"TEST_WEBHOOK_SECRET\"\ntimeout_ms = 2000\n{more}"
        ),
    )
    .unwrap();
    let mut command = binary_command(dir, &[("TEST_WEBHOOK_SECRET", SECRET)]);
    command.arg("--config").arg(&file);
    command.stderr(std::process::Stdio::null());
    let (child, address) = spawn_listening(command);
    (child, Remote::new(address))
}

/// A run that ends at once (after `delay_ms`), posted to `hooks`.
fn hooked(hooks: &str, delay_ms: u64) -> Value {
    json!({
        "prompt": "end",
        "webhook": {"url": format!("{hooks}/hook")},
        "model": {"scripted": [{"delay_ms": delay_ms, "content": "done"}]}
    })
}

/// Stops a server with SIGTERM and waits for it on a thread of its own,
/// while this test's receiver goes on answering; whether it exited 0.
async fn stop(mut child: ServerProcess) -> bool {
    tokio::task::spawn_blocking(move || terminate(&mut child).success())
        .await
        .unwrap()
}

async fn create(server: &Remote, body: &Value) -> String {
    let run = server.post_json("/v1/runs", body).await;
    run["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{run}"))
        .to_owned()
}

#[tokio::test]
async fn deliveries_pending_at_a_sigkill_are_made_after_the_restart() {
    let accept = Arc::new(AtomicBool::new(false));
    let (hooks, received) = switched(Arc::clone(&accept), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start_with_webhooks(&dir, "");
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(create(&server, &hooked(&hooks, 0)).await);
    }
    // Every end is stored and was refused at least once: pending.
    until_each(
        &received,
        &ids,
        "completed",
        StatusCode::SERVICE_UNAVAILABLE,
    )
    .await;
    child.kill().unwrap();
    child.wait().unwrap();

    accept.store(true, Ordering::SeqCst);
    let (child, _server) = start_with_webhooks(&dir, "");
    until_each(&received, &ids, "completed", StatusCode::OK).await;
    assert_delivered_once(&received, &ids, "completed");
    assert!(stop(child).await);
}

#[tokio::test]
async fn a_graceful_stop_keeps_delivering_through_its_grace_and_loses_nothing() {
    let accept = Arc::new(AtomicBool::new(false));
    let (hooks, received) = switched(Arc::clone(&accept), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let grace = "[runs]\nshutdown_grace_ms = 10000\n";
    let (child, server) = start_with_webhooks(&dir, grace);
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(create(&server, &hooked(&hooks, 0)).await);
    }
    // One run still running when the stop comes, to end in the grace.
    let last = create(&server, &hooked(&hooks, 1500)).await;
    until_each(
        &received,
        &ids,
        "completed",
        StatusCode::SERVICE_UNAVAILABLE,
    )
    .await;
    server.wait_status(&last, "running").await;
    assert!(stop(child).await, "a graceful stop exits 0");
    // The run that ended in the grace was posted before the server exited.
    let runs = by_run(&received, "completed");
    assert!(
        runs.get(&last).is_some_and(|seen| !seen.is_empty()),
        "the end stored in the grace was tried before the exit: {runs:?}"
    );
    ids.push(last);

    accept.store(true, Ordering::SeqCst);
    let (child, _server) = start_with_webhooks(&dir, grace);
    until_each(&received, &ids, "completed", StatusCode::OK).await;
    assert_delivered_once(&received, &ids, "completed");
    assert!(stop(child).await);
}

#[tokio::test]
async fn an_end_stored_by_the_restart_is_posted() {
    let (hooks, received) = switched(Arc::new(AtomicBool::new(true)), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, server) = start_with_webhooks(&dir, "");
    let mut body = hooked(&hooks, 60_000);
    body["limits"] = json!({"max_resumes": 0});
    let id = create(&server, &body).await;
    // Its start is stored (a run with no event would start again).
    Following::new(server.get(&format!("/v1/runs/{id}/events")).await)
        .until("run_start")
        .await;
    child.kill().unwrap();
    child.wait().unwrap();
    // The next start ends it `interrupted`, and posts that.
    let (child, _server) = start_with_webhooks(&dir, "");
    let ids = [id];
    until_each(&received, &ids, "interrupted", StatusCode::OK).await;
    assert_delivered_once(&received, &ids, "interrupted");
    assert!(stop(child).await);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn two_replicas_deliver_each_webhook_once() {
    require_postgres();
    // The first attempt of each delivery is refused, so that it is due
    // again later, for either replica. Each answer takes longer than a
    // replica waits between two looks at the outbox, so that the other
    // replica looks while a delivery is under way (and must pass it over).
    let (hooks, received) = answering(Duration::from_millis(1200), |before, id| {
        let tried = before
            .iter()
            .any(|(headers, _, _)| headers["webhook-id"].to_str().unwrap() == id);
        if tried {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (a, server_a) = start_with_webhooks(&dir, "");
    let (b, server_b) = start_with_webhooks(&dir, "");
    let mut ids = Vec::new();
    for i in 0..12 {
        let server = if i % 2 == 0 { &server_a } else { &server_b };
        ids.push(create(server, &hooked(&hooks, 0)).await);
    }
    until_each(&received, &ids, "completed", StatusCode::OK).await;
    // Once the outbox is empty, no replica has anything left to deliver:
    // what was received is all there will be.
    let mut database = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&database_url(dir.path()))
            .await
            .unwrap()
    };
    eventually("the outbox to be empty", async || {
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM webhook_deliveries")
            .fetch_one(&mut database)
            .await
            .unwrap();
        (left == 0).then_some(())
    })
    .await;
    assert_delivered_once(&received, &ids, "completed");
    assert_one_attempt_at_a_time(&received);
    assert!(stop(a).await);
    assert!(stop(b).await);
}
