//! What one run may make the server store and hold (SPEC section 26): its
//! transcript has a ceiling (`[limits] max_run_bytes`), checked before
//! anything is written; reading it back holds a page at a time.

use serde_json::{Value, json};

use crate::helpers::*;

/// `n` calls reading `big.txt` whole (up to 2000 lines) in one batch.
fn reads_of_big_txt(n: usize) -> Vec<Value> {
    (0..n)
        .map(|n| {
            json!({"id": format!("r{n}"), "name": "read_file",
                   "arguments": {"path": "big.txt", "limit": 2000}})
        })
        .collect()
}

/// The bytes of a SQLite database with its journal.
fn database_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().contains(".db"))
        .filter_map(|entry| entry.metadata().ok())
        .map(|metadata| metadata.len())
        .sum()
}

/// A 900 KB file read 100 times in one step, with results of up to a
/// million characters allowed: the database grew by 290 MB in a second
/// before the run ended. Now the result that crosses the ceiling is cut,
/// the calls after it do not run, the run ends `context_limit`, and the
/// database holds about twice the ceiling (the transcript and its events).
#[tokio::test]
async fn a_batch_crossing_the_run_ceiling_is_cut_before_it_is_written() {
    const CEILING: u64 = 4 * 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_binary_with(
        &dir,
        &[("AGENT_RUNNER_LIMITS__MAX_RUN_BYTES", &CEILING.to_string())],
    );
    let server = Remote::new(address);
    let line = format!("{}\n", "x".repeat(999));
    let big = line.repeat(900);
    let reads = reads_of_big_txt(100);
    let before = database_bytes(dir.path());
    let run = server
        .post_json(
            "/v1/runs?wait=true",
            &json!({
                "prompt": "read it, a lot",
                "context": {"max_tool_result_chars": 1_000_000, "max_context_chars": 1_000_000},
                "limits": {"max_tool_calls": 100},
                "workspace": {"files": {"big.txt": big}},
                "model": {"scripted": [
                    {"content": "", "tool_calls": reads},
                    {"content": "never asked"}
                ]}
            }),
        )
        .await;
    assert_eq!(run["status"], "context_limit", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(error.contains("max_run_bytes"), "{error}");
    let id = run["id"].as_str().unwrap();
    let messages = server
        .get_json(&format!("/v1/runs/{id}/messages"))
        .await
        .get("messages")
        .cloned()
        .unwrap();
    let messages = messages.as_array().unwrap();
    let stored: usize = messages.iter().map(|m| m.to_string().len()).sum();
    // Every call has its result: a few whole, one cut, the rest not run.
    let results: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(results.len(), 100);
    assert!(
        results[0].len() > 800_000,
        "a whole read: {}",
        results[0].len()
    );
    let cut = results
        .iter()
        .position(|r| r.contains("[cut: the run's transcript reached its ceiling"))
        .expect("one result cut");
    assert!((1..10).contains(&cut), "cut at {cut}");
    assert!(
        results[cut + 1..].iter().all(|r| r.starts_with("Not run:")),
        "{:?}",
        results[cut + 1..]
            .iter()
            .map(|r| &r[..40.min(r.len())])
            .collect::<Vec<_>>()
    );
    assert!(
        stored as u64 <= CEILING + 100 * 200,
        "{stored} bytes stored for a ceiling of {CEILING}"
    );
    let grown = database_bytes(dir.path()).saturating_sub(before);
    assert!(
        grown < 6 * CEILING,
        "the database grew by {grown} bytes for a ceiling of {CEILING}"
    );
}

/// Ten `/messages` and ten event streams of a 16 MiB transcript that
/// nobody reads held the whole transcript each (1.74 GB for ten of each of
/// a larger one; 269 MiB here). Now each holds a page (256 KiB, or one
/// larger message): the server's peak grows by a few MiB per reader (a
/// page and its copies on the way out), whatever the transcript's size.
#[tokio::test]
async fn unread_transcripts_and_replays_hold_a_page_each() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const CEILING: usize = 16 * 1024 * 1024;
    const READERS: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let (server, address) = start_binary_with(
        &dir,
        &[("AGENT_RUNNER_LIMITS__MAX_RUN_BYTES", &CEILING.to_string())],
    );
    let remote = Remote::new(address.clone());
    let line = format!("{}\n", "y".repeat(999));
    let reads = reads_of_big_txt(40);
    let run = remote
        .post_json(
            "/v1/runs?wait=true",
            &json!({
                "prompt": "fill it",
                "context": {"max_tool_result_chars": 1_000_000, "max_context_chars": 1_000_000},
                "limits": {"max_tool_calls": 40},
                "workspace": {"files": {"big.txt": line.repeat(900)}},
                "model": {"scripted": [{"content": "", "tool_calls": reads}]}
            }),
        )
        .await;
    assert_eq!(run["status"], "context_limit", "{run}");
    let id = run["id"].as_str().unwrap();
    let before = peak_mib(server.id());
    let mut readers = Vec::new();
    for path in ["messages", "events"] {
        for _ in 0..READERS {
            let mut stream = crate::connections::connect_to(&address).await;
            let request = format!("GET /v1/runs/{id}/{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            // The answer began; the rest is left unread.
            let mut head = [0u8; 12];
            tokio::time::timeout(crate::connections::PATIENCE, stream.read_exact(&mut head))
                .await
                .expect("an answer in time")
                .unwrap();
            assert_eq!(&head, b"HTTP/1.1 200", "{path}");
            readers.push(stream);
        }
    }
    let grown = peak_mib(server.id()).saturating_sub(before);
    assert!(
        grown < 100,
        "{} unread readers of a 16 MiB transcript grew the server by {grown} MiB",
        2 * READERS
    );
    // And the transcript reads back whole, streamed.
    let reply = remote.get(&format!("/v1/runs/{id}/messages")).await;
    assert!(reply.headers().get("content-length").is_none());
    let messages: Value = reply.json().await.unwrap();
    assert_eq!(messages["messages"].as_array().unwrap().len(), 42);
}
