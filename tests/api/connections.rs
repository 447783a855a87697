//! The HTTP layer under hostile and unlucky clients, over raw TCP: heads that
//! never finish, connections that say nothing, many idle ones, oversized
//! targets and headers, bodies announced and never sent.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{TestApp, spawn_app, spawn_with};

/// Long enough for any refusal to arrive on a loaded machine; a test that
/// waits this long for something that should not happen is failing.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

async fn connect(app: &TestApp) -> TcpStream {
    connect_to(&app.address).await
}

/// A raw connection to the server at `address` (`http://HOST:PORT`).
pub(crate) async fn connect_to(address: &str) -> TcpStream {
    TcpStream::connect(address.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Whether the server closed the connection: a read sees its end (or a
/// reset) within [`PATIENCE`]. Bytes before the end are skipped.
pub(crate) async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Reads one response: status, headers, and a body of `Content-Length`.
pub(crate) async fn read_response(stream: &mut TcpStream) -> (u16, String, Value) {
    let mut data = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buffer))
            .await
            .expect("a response in time")
            .unwrap();
        assert!(n > 0, "the connection closed before a whole response");
        data.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&data).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                let body = if length == 0 {
                    Value::Null
                } else {
                    serde_json::from_str(&body[..length]).unwrap()
                };
                return (status, head.to_owned(), body);
            }
        }
    }
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

#[tokio::test]
async fn a_head_dribbled_slowly_is_cut_at_the_header_timeout_and_others_are_served() {
    let app = spawn_with(|config| config.server.request_header_timeout_ms = 500).await;
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut stream = connect(&app).await;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    // Keep every head unfinished, one header at a time, for as long as the
    // server keeps the connection: a deadline that a byte pushed back would
    // never come. Meanwhile others are served.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut open = slow.len();
    let mut round = 0;
    while open > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{open} dribbled heads were never cut"
        );
        open = 0;
        for stream in &mut slow {
            let mut byte = [0u8; 1];
            let closed = matches!(stream.try_read(&mut byte), Ok(0))
                || stream
                    .write_all(format!("X-Slow-{round}: 1\r\n").as_bytes())
                    .await
                    .is_err();
            if !closed {
                open += 1;
            }
        }
        assert_eq!(app.get("/healthz").await.status, 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
        round += 1;
    }
}

#[tokio::test]
async fn a_half_received_head_does_not_hold_up_a_shutdown() {
    let mut app = spawn_with(|config| config.server.request_header_timeout_ms = 300).await;
    let mut partial = connect(&app).await;
    partial.write_all(b"G").await.unwrap();
    app.begin_stop();
    assert!(
        closed_by_server(&mut partial).await,
        "the half-received connection was kept open through the shutdown"
    );
}

#[tokio::test]
async fn a_router_response_and_a_pipelined_bad_request_are_each_answered_as_they_are() {
    let app = spawn_app().await;
    let mut stream = connect(&app).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGARBAGE\r\n\r\n")
        .await
        .unwrap();
    // Both answers, until the server closes after the refusal.
    let mut bytes = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut bytes))
        .await
        .expect("the connection closes after the refusal")
        .unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let (ok, refusal) = text.split_at(text.find("HTTP/1.1 400").expect("a 400 follows"));
    assert!(ok.starts_with("HTTP/1.1 200"), "{text}");
    assert!(ok.ends_with(r#"{"status":"ok"}"#), "{text}");
    let (head, body) = refusal.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("content-type: application/json"), "{head}");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["error"]["code"], "bad_request");
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout() {
    let app = spawn_with(|config| config.server.request_header_timeout_ms = 300).await;
    let mut silent = connect(&app).await;
    assert!(closed_by_server(&mut silent).await);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_outlives_the_header_timeout_until_the_idle_timeout() {
    let app = spawn_with(|config| {
        config.server.request_header_timeout_ms = 300;
        config.server.idle_timeout_ms = 1_500;
    })
    .await;
    let mut stream = connect(&app).await;
    stream.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut stream).await.0, 200);
    // Idle for longer than the header timeout, shorter than the idle one.
    tokio::time::sleep(Duration::from_millis(800)).await;
    stream.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut stream).await.0, 200);
    let idle_from = tokio::time::Instant::now();
    assert!(closed_by_server(&mut stream).await);
    assert!(
        idle_from.elapsed() >= Duration::from_millis(1_000),
        "closed before the idle timeout: {:?}",
        idle_from.elapsed()
    );
}

#[tokio::test]
async fn a_long_request_in_flight_is_cut_by_neither_timeout() {
    let app = spawn_with(|config| {
        config.server.request_header_timeout_ms = 200;
        config.server.idle_timeout_ms = 400;
    })
    .await;
    let run = app
        .run_to_end(json!({
            "prompt": "take your time",
            "model": {"scripted": [{"delay_ms": 1500, "content": "slow but here"}]}
        }))
        .await;
    assert_eq!(run["answer"], "slow but here");
}

#[tokio::test]
async fn fifteen_hundred_idle_connections_starve_neither_healthz_nor_run_creation() {
    // All from one address, which may hold this many.
    let app = spawn_with(|config| config.server.max_connections_per_client = 2_000).await;
    let mut idle = Vec::new();
    for _ in 0..1_500 {
        idle.push(connect(&app).await);
    }
    assert_eq!(app.get("/healthz").await.status, 200);
    let run = app
        .run_to_end(json!({"prompt": "still here", "model": {"scripted": [{"content": "yes"}]}}))
        .await;
    assert_eq!(run["status"], "completed");
    // They are all still open: held, not refused.
    let mut buffer = [0u8; 1];
    let still_open = idle
        .iter_mut()
        .take(10)
        .map(|stream| stream.try_read(&mut buffer))
        .filter(|read| matches!(read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock))
        .count();
    assert_eq!(still_open, 10);
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once_and_served_again_below_it() {
    let app = spawn_with(|config| config.server.max_connections = Some(3)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = connect(&app).await;
        // Served, then kept alive: each holds a slot.
        stream.write_all(HEALTHZ).await.unwrap();
        assert_eq!(read_response(&mut stream).await.0, 200);
        held.push(stream);
    }
    let mut refused = connect(&app).await;
    assert!(closed_by_server(&mut refused).await);
    drop(held);
    // The slots come back as the server notices the closes.
    let mut served = false;
    for _ in 0..100 {
        let mut stream = connect(&app).await;
        if stream.write_all(HEALTHZ).await.is_ok()
            && tokio::time::timeout(Duration::from_millis(500), read_status(&mut stream))
                .await
                .is_ok_and(|status| status == Some(200))
        {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "no connection was served after the others closed");
}

/// The status of a response, or `None` if the connection closed first.
async fn read_status(stream: &mut TcpStream) -> Option<u16> {
    let mut buffer = [0u8; 64];
    let n = stream.read(&mut buffer).await.ok()?;
    let text = String::from_utf8_lossy(&buffer[..n]).into_owned();
    text.split(' ').nth(1)?.parse().ok()
}

#[tokio::test]
async fn a_body_announced_over_the_limit_is_refused_before_it_is_sent() {
    let app = spawn_with(|config| config.server.max_body_bytes = 4096).await;
    let mut stream = connect(&app).await;
    stream
        .write_all(
            b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Content-Length: 100000000\r\n\r\n{\"prompt\": ",
        )
        .await
        .unwrap();
    // Nothing more is sent: the answer must not wait for the body.
    let (status, _, body) = read_response(&mut stream).await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["code"], "payload_too_large");
    assert!(body["error"]["message"].as_str().unwrap().contains("4096"));
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
}

#[tokio::test]
async fn an_oversized_target_or_header_block_gets_a_json_414_or_431() {
    let app = spawn_app().await;
    let long_target = format!("/v1/runs?cursor={}", "a".repeat(20 * 1024));
    let cases = [
        (
            format!("GET {long_target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
            414,
            "uri_too_long",
        ),
        (
            format!(
                "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {}\r\n\r\n",
                "b".repeat(70 * 1024)
            ),
            431,
            "headers_too_large",
        ),
        (
            format!(
                "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n{}\r\n",
                (0..150)
                    .map(|i| format!("X-H{i}: v\r\n"))
                    .collect::<String>()
            ),
            431,
            "headers_too_large",
        ),
    ];
    for (request, status, code) in cases {
        assert_json_refusal(&app, request.as_bytes(), status, code).await;
    }
}

/// Sends `request` on a fresh connection and asserts the JSON refusal.
async fn assert_json_refusal(app: &TestApp, request: &[u8], status: u16, code: &str) {
    let mut stream = connect(app).await;
    // The server may refuse before it has read everything.
    let _ = stream.write_all(request).await;
    let (got, head, body) = read_response(&mut stream).await;
    assert_eq!(got, status, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    assert_eq!(body["error"]["code"], code, "{body}");
}

#[tokio::test]
async fn what_hyper_refuses_itself_is_answered_in_json_too() {
    let app = spawn_app().await;
    let cases: [(Vec<u8>, u16, &str); 3] = [
        (b"GARBAGE\r\n\r\n".to_vec(), 400, "bad_request"),
        (
            b"GET /healthz HTTP/9.9\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            // Past even hyper's buffer: the router never sees it.
            [
                b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: ".as_slice(),
                &vec![b'h'; 300 * 1024],
                b"\r\n\r\n",
            ]
            .concat(),
            431,
            "headers_too_large",
        ),
    ];
    for (request, status, code) in cases {
        assert_json_refusal(&app, &request, status, code).await;
    }
    // And the server goes on serving.
    assert_eq!(app.get("/healthz").await.status, 200);
}

#[tokio::test]
async fn an_answer_given_before_the_body_was_read_says_the_connection_closes() {
    let app = spawn_app().await;
    // Refused before its body matters (no such run): the body is not read,
    // so the connection cannot carry another request, and says so.
    let mut stream = connect(&app).await;
    let head = format!(
        "POST /v1/runs/{}/actions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: 40\r\n\r\n",
        uuid::Uuid::now_v7()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (status, head, _) = read_response(&mut stream).await;
    assert_eq!(status, 404, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert!(closed_by_server(&mut stream).await);

    // A body read whole: the connection stays open for the next request.
    let mut stream = connect(&app).await;
    let body = json!({"prompt": "hi"}).to_string();
    let request = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let (status, head, _) = read_response(&mut stream).await;
    assert_eq!(status, 201, "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    stream.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_response(&mut stream).await.0, 200);
}
