//! Clients that hold what they do not use (SPEC section 26): a body that
//! stops arriving, an HTTP/2 connection kept up by PINGs alone, one client
//! opening every connection it can.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::connections::{PATIENCE, closed_by_server, connect_to, read_response};
use crate::helpers::{Remote, eventually, http_client, spawn_with, start_binary_with};

/// A `POST /v1/runs` head announcing a JSON body of `length` bytes.
fn post_head(token: Option<&str>, length: usize) -> String {
    let authorization = token.map_or(String::new(), |token| {
        format!("authorization: Bearer {token}\r\n")
    });
    format!(
        "POST /v1/runs HTTP/1.1\r\nhost: 127.0.0.1\r\n{authorization}\
         content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// With idle 3 s and header 2 s, a body that stopped one byte short was
/// still held after 20 s: now it is answered 408 at its own deadline, the
/// connection is closed, and no run was made of it.
#[tokio::test]
async fn a_body_that_stops_arriving_is_answered_408_and_its_connection_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_SERVER__IDLE_TIMEOUT_MS", "3000"),
            ("AGENT_RUNNER_SERVER__REQUEST_HEADER_TIMEOUT_MS", "2000"),
            ("AGENT_RUNNER_SERVER__BODY_TIMEOUT_MS", "1000"),
        ],
    );
    let body = json!({"prompt": "never whole"}).to_string();
    let mut stream = connect_to(&address).await;
    stream
        .write_all(post_head(None, body.len()).as_bytes())
        .await
        .unwrap();
    stream
        .write_all(&body.as_bytes()[..body.len() - 1])
        .await
        .unwrap();
    let (status, head, error) = read_response(&mut stream).await;
    assert_eq!(status, 408, "{head}");
    assert_eq!(error["error"]["code"], "request_timeout", "{error}");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert!(closed_by_server(&mut stream).await);
    let listed = Remote::new(address).get_json("/v1/runs").await;
    assert_eq!(listed["runs"], json!([]), "nothing was created");
}

/// An HTTP/2 frame: length, type, flags, stream 0, payload.
fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags, 0, 0, 0, 0];
    frame.extend_from_slice(payload);
    frame
}

/// PINGs keep no HTTP/2 connection open: with nothing requested it is
/// idle, and closed (a GOAWAY, then the end) however often it pings.
#[tokio::test]
async fn an_http2_connection_that_only_pings_is_closed_when_idle() {
    let app = spawn_with(|config| config.server.idle_timeout_ms = 1_000).await;
    let stream = TcpStream::connect(app.address.trim_start_matches("http://"))
        .await
        .unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let mut opening = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    opening.extend(frame(4, 0, &[]));
    writer.write_all(&opening).await.unwrap();
    let pinger = tokio::spawn(async move {
        let mut pings = 0u64;
        // A PING every 100 ms, far more often than the idle timeout.
        let mut every = tokio::time::interval(Duration::from_millis(100));
        loop {
            every.tick().await;
            if writer
                .write_all(&frame(6, 0, &pings.to_be_bytes()))
                .await
                .is_err()
            {
                return pings;
            }
            pings += 1;
        }
    });
    // The server's frames (settings, PING acknowledgements, a GOAWAY)
    // until it closes; a connection still open at the deadline fails.
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let closed = loop {
        match tokio::time::timeout_at(deadline, reader.read(&mut buffer)).await {
            Err(_) => break false,
            Ok(Ok(0) | Err(_)) => break true,
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
        }
    };
    pinger.abort();
    assert!(closed, "a connection of PINGs alone was still open");
    // It was answered all along: the PINGs arrived, and were not activity.
    let acknowledged = received
        .windows(5)
        .filter(|window| window[3] == 6 && window[4] == 1 && window[..3] == [0, 0, 8])
        .count();
    assert!(acknowledged >= 3, "{acknowledged} PINGs acknowledged");
}

/// Without tokens, an address past its share is answered 429 at the accept
/// and its connection closed; a slot comes back as one of its own closes.
#[tokio::test]
async fn an_address_past_its_share_of_connections_is_refused_429() {
    let app = spawn_with(|config| config.server.max_connections_per_client = 3).await;
    let healthz = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = connect_to(&app.address).await;
        stream.write_all(healthz).await.unwrap();
        assert_eq!(read_response(&mut stream).await.0, 200);
        held.push(stream);
    }
    let mut refused = connect_to(&app.address).await;
    let (status, head, error) = read_response(&mut refused).await;
    assert_eq!(status, 429, "{head}");
    assert_eq!(error["error"]["code"], "too_many_connections", "{error}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: "),
        "{head}"
    );
    assert!(closed_by_server(&mut refused).await);
    drop(held.pop());
    eventually("a slot to come back", async || {
        let mut stream = connect_to(&app.address).await;
        stream.write_all(healthz).await.ok()?;
        let (status, _, _) = tokio::time::timeout(PATIENCE, read_response(&mut stream))
            .await
            .ok()?;
        (status == 200).then_some(())
    })
    .await;
}

/// The server's resident memory, in KiB (`VmRSS` or, for the peak,
/// `VmHWM`).
fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// Tenant a opens 500 connections, each with a body it never finishes.
/// Before, they took every slot of `max_connections` (300 here) and b was
/// turned away; now a holds its share (256) and the rest are refused, b's
/// runs are answered as usual, and the server holds at most a's share of
/// bodies: 256 of 64 KiB, 16 MiB, well within the bound asserted.
#[tokio::test]
async fn five_hundred_slow_bodies_of_one_tenant_leave_another_tenant_answered() {
    const SLOW: usize = 500;
    const SHARE: usize = 256;
    const BODY: usize = 64 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let tokens = "[{tenant = \"a\", token = \"token-a\"}, {tenant = \"b\", token = \"token-b\"}]";
    let (server, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_AUTH__TOKENS", tokens),
            ("AGENT_RUNNER_SERVER__MAX_CONNECTIONS", "300"),
            ("AGENT_RUNNER_SERVER__MAX_BODY_BYTES", &BODY.to_string()),
            ("AGENT_RUNNER_SERVER__BODY_TIMEOUT_MS", "600000"),
            ("AGENT_RUNNER_SERVER__REQUEST_HEADER_TIMEOUT_MS", "600000"),
        ],
    );
    let before = memory_kib(server.id(), "VmRSS");
    let head = post_head(Some("token-a"), BODY);
    let partial = format!("{{\"prompt\": \"{}", "a".repeat(BODY - 20));
    let (ended, mut ends) = tokio::sync::mpsc::unbounded_channel();
    let mut slow = tokio::task::JoinSet::new();
    for _ in 0..SLOW {
        let Ok(mut stream) = TcpStream::connect(address.trim_start_matches("http://")).await else {
            continue;
        };
        let (head, partial, ended) = (head.clone(), partial.clone(), ended.clone());
        // Each waits for its answer: the refused get one (or their end),
        // the held never do while the test runs.
        slow.spawn(async move {
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(partial.as_bytes()).await;
            let mut buffer = [0u8; 512];
            let answer = match stream.read(&mut buffer).await {
                Ok(n) if n > 0 => Some(String::from_utf8_lossy(&buffer[..n]).into_owned()),
                _ => None,
            };
            let _ = ended.send(answer);
            std::future::pending::<()>().await;
        });
    }
    // Every connection past a's share ends, answered 429 (or reset: it is
    // closed with its body unread).
    let mut refused = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while refused < SLOW - SHARE {
        let answer = tokio::time::timeout_at(deadline, ends.recv())
            .await
            .unwrap_or_else(|_| panic!("only {refused} of a's connections were refused"))
            .unwrap();
        if let Some(answer) = answer {
            assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
            assert!(answer.contains("too_many_connections"), "{answer}");
        }
        refused += 1;
    }
    // b is answered as usual while a's share is held.
    let client = http_client();
    let healthz = client
        .get(format!("{address}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(healthz.status(), 200);
    for n in 0..3 {
        let run: Value = client
            .post(format!("{address}/v1/runs?wait=true"))
            .bearer_auth("token-b")
            .json(&json!({"prompt": "still here?", "model": {"scripted": [{"content": format!("yes {n}")}]}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["answer"], format!("yes {n}"));
    }
    assert!(ends.try_recv().is_err(), "a's share is still held");
    let grown_mib = memory_kib(server.id(), "VmHWM").saturating_sub(before) / 1024;
    assert!(
        grown_mib < 96,
        "the server grew by {grown_mib} MiB holding 256 bodies of 64 KiB"
    );
    slow.abort_all();
}
