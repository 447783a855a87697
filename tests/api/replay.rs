//! Replaying a long run's history to many clients at once: each stream holds
//! a page of the history at a time, not the whole of it, so the server's
//! memory does not grow with the run's length times its readers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::helpers::{Remote, call, start_binary_with};

/// Tool calls in each of the run's steps (each makes three events:
/// `tool_start`, `tool_end` and the result's `message`).
const CALLS_PER_STEP: usize = 500;
/// Steps with tool calls (each also makes `model_start`, `model_end` and
/// the assistant's `message`).
const TOOL_STEPS: usize = 34;
/// The events of the run: `run_start` and the prompt's `message`, the tool
/// steps, then the answer's step (`model_start`, `model_end`, `message`)
/// and `run_end`.
const EVENTS: u64 = 2 + (TOOL_STEPS * (3 + 3 * CALLS_PER_STEP)) as u64 + 4;
const _: () = assert!(EVENTS >= 50_000);
/// Clients replaying the run at once.
const CLIENTS: usize = 20;
/// The most the server's resident memory may grow while they do. With
/// each stream holding the whole history (as replays once did), it grew by
/// some 500 MiB; with a page each, by 17 MiB at most (on SQLite, most of
/// it its readers' page caches).
const MAX_GROWTH_KIB: u64 = 64 * 1024;

/// The resident memory of process `pid`, in KiB (`None` once it is gone).
fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?;
    line.trim().strip_suffix("kB")?.trim().parse().ok()
}

/// A run of `EVENTS` events: many steps of many tool calls, then an answer.
fn long_run() -> Value {
    let mut script: Vec<Value> = (0..TOOL_STEPS)
        .map(|step| {
            let calls: Vec<Value> = (0..CALLS_PER_STEP)
                .map(|i| call(&format!("c{step}-{i}"), "list_dir", json!({})))
                .collect();
            json!({"content": "", "tool_calls": calls})
        })
        .collect();
    script.push(json!({"content": "done"}));
    json!({
        "prompt": "look around, many times",
        "model": {"scripted": script},
        "limits": {"max_steps": TOOL_STEPS + 1, "max_tool_calls": TOOL_STEPS * CALLS_PER_STEP},
        // A step's calls and their results, which the next step's context
        // must hold whole.
        "context": {"max_context_chars": 1_000_000}
    })
}

/// Reads a run's event stream to its end, checking that its events are
/// numbered 1, 2, 3, ... with no gap, and that the last is `run_end`;
/// returns how many there were. Only the `id` and `event` fields are read
/// (a data line, one line of JSON, is never taken for them): a million
/// events are parsed here, by a test built without optimisations.
async fn replay(client: &reqwest::Client, address: &str, id: &str) -> u64 {
    let response = client
        .get(format!("{address}/v1/runs/{id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let mut body = response.bytes_stream();
    // Bytes of a line not yet ended.
    let mut partial = Vec::new();
    let mut received = 0;
    let mut last = String::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), body.next())
        .await
        .expect("the stream goes on or ends")
    {
        partial.extend_from_slice(&chunk.unwrap());
        let Some(end) = partial.iter().rposition(|&byte| byte == b'\n') else {
            continue;
        };
        let lines = std::str::from_utf8(&partial[..end]).unwrap();
        for line in lines.split('\n') {
            if let Some(sequence) = line.strip_prefix("id: ") {
                received += 1;
                assert_eq!(
                    sequence,
                    received.to_string(),
                    "events in order, none missing"
                );
            } else if let Some(kind) = line.strip_prefix("event: ") {
                kind.clone_into(&mut last);
            }
        }
        partial.drain(..=end);
    }
    assert!(partial.is_empty(), "the stream ends with a whole line");
    assert_eq!(last, "run_end");
    received
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_clients_replay_a_fifty_thousand_event_run_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let calls = (TOOL_STEPS * CALLS_PER_STEP).to_string();
    // Killed when dropped, at the end or at a failed assertion.
    let (server, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_LIMITS__MAX_TOOL_CALLS", &calls),
            ("AGENT_RUNNER_SERVER__MAX_BODY_BYTES", "8388608"),
            // On PostgreSQL, a lease that a machine busy with the replays
            // (and whatever else runs beside them) cannot let lapse: the
            // only replica stopping would end the streams early.
            ("AGENT_RUNNER_RUNS__LEASE_MS", "30000"),
        ],
    );
    let pid = server.id();
    let remote = Remote::new(address);

    let began = Instant::now();
    let run = remote.post_json("/v1/runs", &long_run()).await;
    let id = run["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the run is not created: {run}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        let run = remote.get_json(&format!("/v1/runs/{id}")).await;
        if !matches!(run["status"].as_str(), Some("queued" | "running")) {
            break run;
        }
        assert!(Instant::now() < deadline, "the run did not end: {run}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(run["status"], "completed", "{run}");
    eprintln!("the run of {EVENTS} events took {:?}", began.elapsed());

    // The server's resident memory, sampled until the replays end.
    let before = resident_kib(pid).expect("the server's memory");
    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = std::thread::spawn({
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        move || {
            while !done.load(Ordering::Relaxed)
                && let Some(resident) = resident_kib(pid)
            {
                peak.fetch_max(resident, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let began = Instant::now();
    // Without the helpers' client's deadline for a whole response: a stream
    // is given as long as it keeps going. (The helpers' client, made above,
    // installed the TLS provider reqwest wants.)
    let client = reqwest::Client::new();
    let replays: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, address, id) = (client.clone(), remote.address.clone(), id.clone());
            tokio::spawn(async move { replay(&client, &address, &id).await })
        })
        .collect();
    for replay in replays {
        assert_eq!(replay.await.unwrap(), EVENTS, "every event, once");
    }
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    eprintln!(
        "{CLIENTS} replays took {:?}; resident memory {before} KiB before, {peak} KiB at most",
        began.elapsed()
    );
    assert!(
        peak - before < MAX_GROWTH_KIB,
        "the server grew by {} KiB replaying to {CLIENTS} clients",
        peak - before
    );
}
