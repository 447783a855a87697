//! The paused mode: many runs paused for an approval at once. A paused run
//! holds no slot, no task and no memory beyond its row, so the server's
//! memory should barely grow with them. Then each is answered while a
//! subscriber follows its events, timing the answer to the resumed run's
//! first `tool_start`.

use super::*;

/// A run that pauses for the approval of its one `list_dir` call.
fn pausing_run() -> Value {
    json!({
        "prompt": "list, with permission",
        "approval": {"tools": ["list_dir"]},
        "tools": ["list_dir"],
        "model": {"scripted": [
            {"content": "", "tool_calls": [{"id": "l1", "name": "list_dir", "arguments": {}}]},
            {"content": "listed"}
        ]}
    })
}

pub(super) async fn paused(options: &Options) -> Result<()> {
    let runs = options.paused_runs;
    let server = Server::start(
        options,
        &[("RUNS__MAX_QUEUED", (runs + 64).to_string())],
        None,
    )?;
    let http = client(Some(Duration::from_secs(30)))?;
    let streams = client(Some(Duration::from_secs(60)))?;
    println!("\n== paused: {runs} runs paused for an approval");

    warm_up(&http, &server).await?;
    let (two_step, url) = (
        serde_json::to_vec(&two_step_run())?,
        server.url("/v1/runs?wait=true"),
    );
    let baseline = server.stats();
    let gate = Arc::new(Semaphore::new(options.concurrency));

    // A control: as many runs that complete, at the same concurrency (each
    // waited for, as a pausing run is live only until it pauses). What the
    // server keeps after them (caches, the allocator's high-water mark) is
    // the cost of the activity, not of holding runs.
    let mut control = Vec::with_capacity(runs);
    for _ in 0..runs {
        let permit = Arc::clone(&gate).acquire_owned().await?;
        let (http, url, body) = (http.clone(), url.clone(), two_step.clone());
        control.push(tokio::spawn(async move {
            let _permit = permit;
            post_and_wait(&http, &url, &body, None).await
        }));
    }
    for task in control {
        task.await??;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_control = server.stats();
    let database_before = file_size(&database_dir(&server));

    let started = Instant::now();
    let body = serde_json::to_vec(&pausing_run())?;
    let ids = create_runs(&http, &server, &gate, &body, runs, Some("requires_action")).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let paused = metrics(&http, &server)
            .await?
            .get("agent_runner_runs_paused_total")
            .copied()
            .unwrap_or(0.0);
        if paused as usize >= runs {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("only {paused} of {runs} runs paused").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_paused = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = server.stats();
    let gauges = metrics(&http, &server).await?;
    let per_run = (held.rss_kib as f64 - after_control.rss_kib as f64) / runs as f64;
    let database_after = file_size(&database_dir(&server));
    println!(
        "runs paused        {runs} in {:.2} s (server: {} active, {} queued)",
        all_paused.as_secs_f64(),
        gauges
            .get("agent_runner_active_runs")
            .copied()
            .unwrap_or(0.0),
        gauges
            .get("agent_runner_queue_length")
            .copied()
            .unwrap_or(0.0),
    );
    println!(
        "server RSS         baseline {}, after {runs} completed runs {}, then with {runs} paused runs {}",
        kib(baseline.rss_kib),
        kib(after_control.rss_kib),
        kib(held.rss_kib),
    );
    println!(
        "memory per run     {per_run:.2} KiB (RSS growth over the control / paused runs); database +{:.1} KiB per run",
        (database_after.saturating_sub(database_before)) as f64 / 1024.0 / runs as f64
    );

    // Answer each while following its stream: from the answer's send to
    // the resumed run's first tool_start. The first ones one at a time
    // (an idle server), the rest with many in flight.
    let alone = (runs / 10).clamp(1, 50);
    let mut idle = Vec::with_capacity(alone);
    for id in &ids[..alone] {
        let events = server.url(&format!("/v1/runs/{id}/events"));
        let actions = server.url(&format!("/v1/runs/{id}/actions"));
        let (latency, end) = answer_and_follow(&http, &streams, &events, &actions).await?;
        if end != "completed" {
            return Err(format!("a resumed run ended {end}").into());
        }
        idle.push(latency);
    }
    idle.sort();
    println!(
        "answer to resume   one at a time: p50 {}  p90 {}  max {} ({alone} runs)",
        ms(percentile(&idle, 0.50)),
        ms(percentile(&idle, 0.90)),
        ms(*idle.last().unwrap_or(&Duration::ZERO)),
    );
    let answering = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for id in &ids[alone..] {
        let permit = Arc::clone(&gate).acquire_owned().await?;
        let (http, streams) = (http.clone(), streams.clone());
        let events = server.url(&format!("/v1/runs/{id}/events"));
        let actions = server.url(&format!("/v1/runs/{id}/actions"));
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            answer_and_follow(&http, &streams, &events, &actions).await
        }));
    }
    let mut latencies = Vec::with_capacity(runs);
    let mut ends: BTreeMap<String, usize> = BTreeMap::new();
    for task in tasks {
        let (latency, end) = task.await??;
        latencies.push(latency);
        *ends.entry(end).or_insert(0) += 1;
    }
    let answered = answering.elapsed();
    latencies.sort();
    println!(
        "answer to resume   {} in flight: p50 {}  p90 {}  p99 {}  max {} ({} runs in {:.2} s)",
        options.concurrency,
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.90)),
        ms(percentile(&latencies, 0.99)),
        ms(*latencies.last().unwrap_or(&Duration::ZERO)),
        latencies.len(),
        answered.as_secs_f64()
    );
    println!("runs ended         {ends:?} (and {alone} answered one at a time)");
    server.stop(options.keep).await?;
    if ends.get("completed") != Some(&(runs - alone)) {
        return Err(format!("expected {runs} runs to complete, got {ends:?}").into());
    }
    Ok(())
}

/// Follows a paused run's events up to its `actions_required` (the stream
/// then waits for it), answers it, and returns the time from the answer to
/// the first `tool_start`, with the status the run ended with.
async fn answer_and_follow(
    http: &reqwest::Client,
    streams: &reqwest::Client,
    events: &str,
    actions: &str,
) -> Result<(Duration, String)> {
    let response = streams.get(events).send().await?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(format!("subscribing: HTTP {}", response.status()).into());
    }
    let mut body = response.bytes_stream();
    let mut parser = SseParser::new();
    let mut answered_at = None;
    let mut latency = None;
    while let Some(chunk) = body.next().await {
        for event in parser.push_and_take(&chunk?) {
            match event.event.as_deref().unwrap_or("message") {
                "actions_required" if answered_at.is_none() => {
                    answered_at = Some(Instant::now());
                    let status = http
                        .post(actions)
                        .json(&json!({"actions": [{"call_id": "l1", "decision": "approve"}]}))
                        .send()
                        .await?
                        .status();
                    if status != reqwest::StatusCode::OK {
                        return Err(format!("answering: HTTP {status}").into());
                    }
                }
                "tool_start" if latency.is_none() => {
                    latency = answered_at.map(|at| at.elapsed());
                }
                "run_end" => {
                    let data: Value = serde_json::from_str(&event.data)?;
                    let end = data["status"].as_str().unwrap_or("?").to_owned();
                    return Ok((latency.ok_or("no tool_start after the answer")?, end));
                }
                _ => {}
            }
        }
    }
    Err("the stream closed before run_end".into())
}

fn database_dir(server: &Server) -> PathBuf {
    server
        .data
        .as_ref()
        .map(|data| database(data.path()))
        .unwrap_or_default()
}

/// Bytes of the database with its write-ahead log.
fn file_size(database: &Path) -> u64 {
    let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
    let mut wal = database.as_os_str().to_owned();
    wal.push("-wal");
    size(database) + size(Path::new(&wal))
}
