//! The live mode: many runs live at once, each with an SSE subscriber; the
//! server's memory per live run.

use super::*;

pub(super) async fn live(options: &Options) -> Result<()> {
    let runs = options.runs;
    let server = Server::start(
        options,
        &[
            ("RUNS__MAX_CONCURRENT", (runs + 64).to_string()),
            ("RUNS__MAX_QUEUED", (runs + 64).to_string()),
        ],
        None,
    )?;
    let http = client(Some(Duration::from_secs(30)))?;
    // Streams last as long as their runs: no overall timeout.
    let streams = client(None)?;
    println!("\n== live: {runs} live runs, each with an SSE subscriber");

    warm_up(&http, &server).await?;
    let baseline = server.stats();
    let baseline_files = server.open_files();

    // Create the runs.
    let started = Instant::now();
    let body = serde_json::to_vec(&live_run(LIVE_DELAY_MS))?;
    let gate = Arc::new(Semaphore::new(options.concurrency));
    let ids = create_runs(&http, &server, &gate, &body, runs, None).await?;
    let created = started.elapsed();

    // Subscribe to each; a subscriber counts itself in once it has seen the
    // run's model start (the run is running, waiting on its model).
    let subscribed = Arc::new(AtomicUsize::new(0));
    let subscribers: Vec<_> = ids
        .iter()
        .map(|id| {
            let (streams, subscribed) = (streams.clone(), Arc::clone(&subscribed));
            let url = server.url(&format!("/v1/runs/{id}/events"));
            tokio::spawn(async move { subscribe(&streams, &url, &subscribed).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while subscribed.load(Ordering::Acquire) < runs {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {runs} subscribers saw their run start",
                subscribed.load(Ordering::Acquire)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = server.stats();
    let held_files = server.open_files();
    let active = metrics(&http, &server)
        .await?
        .get("agent_runner_active_runs")
        .copied()
        .unwrap_or(0.0);
    let per_run = (held.rss_kib as f64 - baseline.rss_kib as f64) / runs as f64;

    println!(
        "runs created       {runs} in {:.2} s; all running and subscribed after {:.2} s (server: {active} active)",
        created.as_secs_f64(),
        ready.as_secs_f64()
    );
    println!(
        "server RSS         baseline {}, with {runs} live runs {} (peak {})",
        kib(baseline.rss_kib),
        kib(held.rss_kib),
        kib(held.peak_rss_kib)
    );
    println!("memory per run     {per_run:.1} KiB (RSS growth / live runs)");
    println!(
        "server files       {baseline_files} open before, {held_files} with the live runs; {} threads",
        held.threads
    );

    // Cancel them all; every stream must end with `aborted`.
    let cancelling = Instant::now();
    let mut cancels = Vec::with_capacity(runs);
    for id in &ids {
        let permit = Arc::clone(&gate).acquire_owned().await?;
        let (http, url) = (http.clone(), server.url(&format!("/v1/runs/{id}")));
        cancels.push(tokio::spawn(async move {
            let _permit = permit;
            let status = http.delete(url).send().await?.status();
            if status != reqwest::StatusCode::ACCEPTED {
                return Err(format!("cancelling: HTTP {status}").into());
            }
            Ok::<_, Error>(())
        }));
    }
    for task in cancels {
        task.await??;
    }
    let mut ends: BTreeMap<String, usize> = BTreeMap::new();
    for task in subscribers {
        let end = tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .map_err(|_| "a stream did not end within 60 s of its cancel")???;
        *ends.entry(end).or_insert(0) += 1;
    }
    let ended = cancelling.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = server.stats();
    println!(
        "cancelled          all in {:.2} s; streams ended: {ends:?}; server RSS then {}",
        ended.as_secs_f64(),
        kib(after.rss_kib)
    );
    let database_url = server.database_url.clone();
    let _data = server.stop(options.keep).await?;
    let counts = database_counts(&database_url).await?;
    println!(
        "persistence        database: {} runs, {} events",
        counts.runs, counts.events
    );
    if ends.get("aborted") != Some(&runs) {
        return Err(format!("expected {runs} streams to end aborted, got {ends:?}").into());
    }
    Ok(())
}

/// Follows one run's event stream to its end; returns the `run_end` status.
async fn subscribe(http: &reqwest::Client, url: &str, subscribed: &AtomicUsize) -> Result<String> {
    let response = http.get(url).send().await?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(format!("subscribing: HTTP {}", response.status()).into());
    }
    let mut body = response.bytes_stream();
    let mut parser = SseParser::new();
    let mut counted = false;
    while let Some(chunk) = body.next().await {
        for event in parser.push_and_take(&chunk?) {
            let kind = event.event.as_deref().unwrap_or("message");
            if kind == "model_start" && !counted {
                counted = true;
                subscribed.fetch_add(1, Ordering::AcqRel);
            }
            if kind == "run_end" {
                let data: Value = serde_json::from_str(&event.data)?;
                return Ok(data["status"].as_str().unwrap_or("?").to_owned());
            }
        }
    }
    Err("the stream closed before run_end".into())
}
