//! The throughput mode: concurrent clients POST 2-step runs with
//! `?wait=true`; runs per second, latency, CPU per run, and a check that
//! everything was stored.

use super::*;

/// What one client saw.
#[derive(Default)]
struct ClientLog {
    latencies: Vec<Duration>,
    ids: Vec<String>,
    errors: BTreeMap<String, u64>,
}

pub(super) async fn throughput(options: &Options) -> Result<()> {
    let concurrency = options.clients.max(1);
    let mut settings = vec![
        // Enough slots that no run of the benchmark waits in the queue.
        (
            "RUNS__MAX_CONCURRENT",
            (concurrency * 2).max(256).to_string(),
        ),
        ("RUNS__MAX_QUEUED", "100000".into()),
    ];
    if let Some(otlp) = &options.otlp {
        settings.push(("TRACING__OTLP_ENDPOINT", otlp.clone()));
    }
    // Each tenant a token: the clients take them in turn.
    let tokens: Vec<String> = (0..options.tenants)
        .map(|n| format!("token-t{n}"))
        .collect();
    let mut config: String = (0..options.tenants)
        .map(|n| format!("[[auth.tokens]]\ntenant = \"t{n}\"\ntoken = \"token-t{n}\"\n"))
        .collect();
    if options.profile {
        config.push_str(&bench_profile(options.priced));
    }
    let config = (!config.is_empty()).then_some(config);
    let server = Server::start(options, &settings, config.as_deref())?;
    let mut replicas = Vec::new();
    for number in 1..options.replicas {
        replicas.push(Server::replica(options, &settings, &server, number)?);
    }
    let servers: Vec<&Server> = std::iter::once(&server).chain(&replicas).collect();
    let http = client(Some(Duration::from_secs(30)))?;
    let urls: Vec<String> = servers
        .iter()
        .map(|server| server.url("/v1/runs?wait=true"))
        .collect();
    make_schedules(&http, &server, &tokens, options.schedules).await?;
    let body = if options.agent {
        define_agent(&http, &server, &tokens).await?;
        json!({"agent": "bench", "prompt": "bench"})
    } else if options.profile {
        let mut body = json!({"prompt": "bench", "tools": ["list_dir"], "model": "bench"});
        if options.priced {
            body["limits"] = json!({"max_cost_usd": 1000});
        }
        body
    } else {
        two_step_run()
    };
    let mut body = body;
    if options.files > 0 {
        body["workspace"] = seed_files(options.files);
    }
    let body = Arc::new(serde_json::to_vec(&body)?);
    let pace = match options.rate {
        Some(rate) => format!("open loop, {rate} runs/s scheduled"),
        None => "closed loop".to_owned(),
    };
    println!(
        "\n== throughput: {} clients ({pace}) over {} server(s), {} tenant(s), {} s measured after {} s of warm-up",
        options.clients,
        servers.len(),
        options.tenants.max(1),
        options.seconds,
        options.warmup
    );

    if options.warmup > 0.0 {
        drive(&http, &urls, &tokens, &body, options, options.warmup).await;
    }
    let before = total_stats(&servers);
    let metrics_before = total_metrics(&http, &servers).await?;
    let sampler = RssSampler::start(&server);
    let started = Instant::now();
    let logs = drive(&http, &urls, &tokens, &body, options, options.seconds).await;
    let elapsed = started.elapsed();
    let sampled_peak = sampler.finish().await;
    let after = total_stats(&servers);
    let metrics_after = total_metrics(&http, &servers).await?;

    let mut latencies: Vec<Duration> = logs.iter().flat_map(|l| l.latencies.clone()).collect();
    latencies.sort_unstable();
    let mut errors = BTreeMap::new();
    for log in &logs {
        for (kind, count) in &log.errors {
            *errors.entry(kind.clone()).or_insert(0) += count;
        }
    }
    let completed = latencies.len();
    let rate = completed as f64 / elapsed.as_secs_f64();
    let delta = |name: &str| {
        metrics_after.get(name).copied().unwrap_or(0.0)
            - metrics_before.get(name).copied().unwrap_or(0.0)
    };
    let batches = delta("agent_runner_store_batches_total");
    let writes = delta("agent_runner_store_writes_total");
    let server_cpu = after.cpu.saturating_sub(before.cpu);
    let client_cpu = process_stats("/proc/self").cpu;

    println!(
        "runs completed     {completed} in {:.2} s",
        elapsed.as_secs_f64()
    );
    println!("throughput         {rate:.0} runs/s");
    println!(
        "latency            p50 {}  p90 {}  p99 {}  max {}",
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.90)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default()),
    );
    println!(
        "errors             {}",
        if errors.is_empty() {
            "none".to_owned()
        } else {
            format!("{errors:?}")
        }
    );
    println!(
        "server RSS         peak {} (measured phase {}), now {} (the first server)",
        kib(after.peak_rss_kib),
        kib(sampled_peak),
        kib(after.rss_kib)
    );
    println!(
        "server CPU         {:.0} ms per s ({:.0} us per run), {} threads",
        server_cpu.as_secs_f64() * 1000.0 / elapsed.as_secs_f64(),
        server_cpu.as_secs_f64() * 1e6 / completed.max(1) as f64,
        after.threads
    );
    println!(
        "load tool CPU      {:.0} ms in all (warm-up included)",
        client_cpu.as_secs_f64() * 1000.0
    );
    println!(
        "store writer       {batches:.0} transactions, {writes:.0} writes ({:.1} per transaction, {:.1} per run)",
        writes / batches.max(1.0),
        writes / (completed.max(1) as f64),
    );

    // Spot checks through the API, on runs spread over the whole phase.
    // Each with the token of the client that made it (client i takes the
    // tenant i mod N, as in `drive`).
    let token_of =
        |client: usize| (!tokens.is_empty()).then(|| tokens[client % tokens.len()].as_str());
    let ids: Vec<(&String, Option<&str>)> = logs
        .iter()
        .enumerate()
        .flat_map(|(client, l)| l.ids.iter().map(move |id| (id, token_of(client))))
        .collect();
    let step = (ids.len() / 20).max(1);
    let mut checked = 0;
    for (id, token) in ids.iter().step_by(step) {
        check_stored_run(&http, &server, id, *token).await?;
        checked += 1;
    }
    // The whole database, once the servers have stopped.
    let database_url = server.database_url.clone();
    for replica in replicas {
        replica.stop(false).await?;
    }
    let _data = server.stop(options.keep).await?;
    let counts = database_counts(&database_url).await?;
    let total_runs = counts.runs;
    let all_complete = counts.completed == total_runs
        && counts.events == total_runs * TWO_STEP_EVENTS
        && counts.messages == total_runs * TWO_STEP_MESSAGES;
    println!(
        "persistence        {checked} runs checked through the API; database: {} runs ({} completed), {} events, {} messages {}",
        counts.runs,
        counts.completed,
        counts.events,
        counts.messages,
        if all_complete {
            "(12 events and 4 messages for every run)"
        } else {
            "(MISSING ROWS)"
        }
    );
    if !all_complete {
        return Err("some runs are not completely stored".into());
    }
    if !errors.is_empty() {
        return Err(format!("{} requests failed", errors.values().sum::<u64>()).into());
    }
    Ok(())
}

/// Stores the benchmark's run as the agent `bench` (of each tenant).
async fn define_agent(http: &reqwest::Client, server: &Server, tokens: &[String]) -> Result<()> {
    let mut definition = two_step_run();
    let fields = definition
        .as_object_mut()
        .ok_or("a run body is an object")?;
    fields.remove("prompt");
    fields.insert("name".into(), json!("bench"));
    let tokens: Vec<Option<&str>> = if tokens.is_empty() {
        vec![None]
    } else {
        tokens.iter().map(|token| Some(token.as_str())).collect()
    };
    for token in tokens {
        let mut request = http.post(server.url("/v1/agents")).json(&definition);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        if response.status() != reqwest::StatusCode::CREATED {
            return Err(format!("the agent was not made: {}", response.text().await?).into());
        }
    }
    Ok(())
}

/// Makes `count` enabled schedules that never fall due during a run (at
/// midnight on the first of January, in a timezone of their own), the
/// first tenant's.
async fn make_schedules(
    http: &reqwest::Client,
    server: &Server,
    tokens: &[String],
    count: usize,
) -> Result<()> {
    for n in 0..count {
        let schedule = json!({"cron": "0 0 1 1 *", "timezone": "Pacific/Kiritimati",
                              "name": format!("idle {n}"), "run": two_step_run()});
        let mut request = http.post(server.url("/v1/schedules")).json(&schedule);
        if let Some(token) = tokens.first() {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        if response.status() != reqwest::StatusCode::CREATED {
            return Err(format!("a schedule was not made: {}", response.text().await?).into());
        }
    }
    Ok(())
}

/// The clients POST runs for `seconds`: each as soon as its last run ended,
/// or, with a rate, each taking the next start of a fixed schedule.
async fn drive(
    http: &reqwest::Client,
    urls: &[String],
    tokens: &[String],
    body: &Arc<Vec<u8>>,
    options: &Options,
    seconds: f64,
) -> Vec<ClientLog> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let scheduled = Arc::new(AtomicU64::new(0));
    let rate = options.rate;
    let tasks: Vec<_> = (0..options.clients)
        .map(|client| {
            // Clients spread over the servers, as behind a load balancer.
            let url = urls[client % urls.len()].clone();
            // And over the tenants, if there are any.
            let token = (!tokens.is_empty()).then(|| tokens[client % tokens.len()].clone());
            let (http, body) = (http.clone(), Arc::clone(body));
            let scheduled = Arc::clone(&scheduled);
            tokio::spawn(async move {
                let mut log = ClientLog::default();
                loop {
                    let began = match rate {
                        None => Instant::now(),
                        Some(rate) => {
                            let n = scheduled.fetch_add(1, Ordering::Relaxed);
                            let at = start + Duration::from_secs_f64(n as f64 / rate);
                            tokio::time::sleep_until(at.into()).await;
                            at
                        }
                    };
                    if began >= deadline {
                        break;
                    }
                    match post_and_wait(&http, &url, &body, token.as_deref()).await {
                        Ok(run) => {
                            log.latencies.push(began.elapsed());
                            log.ids.push(run.id);
                        }
                        Err(kind) => *log.errors.entry(kind).or_insert(0) += 1,
                    }
                }
                log
            })
        })
        .collect();
    let mut logs = Vec::with_capacity(options.clients);
    for task in tasks {
        if let Ok(log) = task.await {
            logs.push(log);
        }
    }
    logs
}

/// The servers' CPU time, and the first one's memory and threads.
fn total_stats(servers: &[&Server]) -> ProcessStats {
    let mut stats = servers[0].stats();
    stats.cpu = servers.iter().map(|server| server.stats().cpu).sum();
    stats
}

/// The servers' metrics, summed.
async fn total_metrics(
    http: &reqwest::Client,
    servers: &[&Server],
) -> Result<BTreeMap<String, f64>> {
    let mut total = BTreeMap::new();
    for server in servers {
        for (name, value) in metrics(http, server).await? {
            *total.entry(name).or_insert(0.0) += value;
        }
    }
    Ok(total)
}

/// Checks one run through the API: completed in 2 steps, 4 messages, 12
/// events in sequence ending with `run_end`.
async fn check_stored_run(
    http: &reqwest::Client,
    server: &Server,
    id: &str,
    token: Option<&str>,
) -> Result<()> {
    let get = |path: String| {
        let request = http.get(server.url(&path));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    };
    let run: RunObject = get(format!("/v1/runs/{id}")).send().await?.json().await?;
    if run.status != "completed" || run.steps != 2 || run.tool_calls != 1 {
        return Err(format!("run {id}: {run:?}").into());
    }
    let messages: Value = get(format!("/v1/runs/{id}/messages"))
        .send()
        .await?
        .json()
        .await?;
    let count = messages["messages"].as_array().map_or(0, Vec::len);
    if count as i64 != TWO_STEP_MESSAGES {
        return Err(format!("run {id}: {count} messages stored").into());
    }
    let text = get(format!("/v1/runs/{id}/events"))
        .send()
        .await?
        .text()
        .await?;
    let mut parser = SseParser::new();
    parser.push(text.as_bytes());
    parser.finish();
    let events: Vec<_> = std::iter::from_fn(|| parser.next_event()).collect();
    let sequences: Vec<u64> = events
        .iter()
        .filter_map(|e| e.id.as_deref()?.parse().ok())
        .collect();
    let expected: Vec<u64> = (1..=TWO_STEP_EVENTS as u64).collect();
    if sequences != expected || events.last().and_then(|e| e.event.as_deref()) != Some("run_end") {
        return Err(format!("run {id}: events {sequences:?}").into());
    }
    Ok(())
}
