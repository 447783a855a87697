//! The load benchmark: starts the real `agent-runner` binary as its own
//! process, on loopback with a fresh data directory, and drives it over HTTP.
//!
//! `cargo bench --bench load` runs both modes with their defaults;
//! `cargo bench --bench load -- throughput --clients 64 --seconds 10` or
//! `cargo bench --bench load -- live --runs 2000` runs one. `--help` lists the
//! options; docs/benchmarks.md says how to read the report.
//!
//! - `throughput`: concurrent clients each POST 2-step scripted runs (one tool
//!   call, then an answer) with `?wait=true`, back to back. Reports runs
//!   completed per second, latency percentiles and the server's peak RSS, then
//!   checks that every event and message of every run is in the database.
//! - `live`: holds many runs live at once (a scripted `delay_ms`), each with an
//!   SSE subscriber, and reports the server's memory per live run; then
//!   cancels them all and checks that every stream ends with `aborted`.
//!
//! Built as a bench, it starts the server binary cargo built with it (same
//! profile). Run by `cargo test --benches` (no `--bench` flag), it does a
//! short smoke run of both modes instead.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_runner::models::http::SseParser;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};
use tokio::sync::Semaphore;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = Error> = std::result::Result<T, E>;

const USAGE: &str = "\
Usage: cargo bench --bench load -- [MODE] [OPTIONS]

Modes:
  all          throughput, then live (the default)
  throughput   concurrent clients POST 2-step runs with ?wait=true
  live         many live runs, each with an SSE subscriber: memory per run

Options:
  --clients N      throughput: concurrent clients (default 64)
  --seconds S      throughput: measured duration (default 10)
  --warmup S       throughput: unmeasured warm-up first (default 2)
  --rate R         throughput: start R runs per second in all, on a fixed
                   schedule, instead of each client starting its next run as
                   soon as the last one ends; latency counts from the
                   scheduled start, so a server that falls behind shows it
  --runs K         live: runs held live at once (default 2000)
  --concurrency N  live: requests in flight while creating and cancelling (default 64)
  --server PATH    the agent-runner binary (default: the one cargo built)
  --data-dir DIR   where each server's fresh data directory is made (default:
                   cargo's target tmp directory, on the same disk as target/)
  --log FILTER     the server's RUST_LOG (default: info, its own default)
  --keep           keep the data directory (its path is printed)";

/// The run of the throughput mode: one `list_dir` call, then an answer.
fn two_step_run() -> Value {
    json!({
        "prompt": "bench",
        "tools": ["list_dir"],
        "model": {"scripted": [
            {"content": "", "tool_calls": [{"id": "1", "name": "list_dir", "arguments": {}}]},
            {"content": "done", "usage": {"input_tokens": 1, "output_tokens": 1}}
        ]}
    })
}

/// Events a two-step run stores: run_start, message (user), then per step
/// model_start, model_end, message, plus tool_start, tool_end, message for
/// the call, and run_end.
const TWO_STEP_EVENTS: i64 = 12;
/// Messages of its transcript: user, assistant, tool, assistant.
const TWO_STEP_MESSAGES: i64 = 4;

/// A run that stays live: its model answers only after `delay_ms`.
fn live_run(delay_ms: u64) -> Value {
    json!({
        "prompt": "bench",
        "model": {"scripted": [{"delay_ms": delay_ms, "content": "x"}]}
    })
}

/// How long a live run's model waits: far longer than the mode takes, since
/// every run is cancelled at the end.
const LIVE_DELAY_MS: u64 = 600_000;

#[derive(Debug, Clone)]
struct Options {
    throughput: bool,
    live: bool,
    clients: usize,
    seconds: f64,
    warmup: f64,
    /// Runs started per second, on a schedule (open loop); `None`: each
    /// client goes on as soon as its last run ends (closed loop).
    rate: Option<f64>,
    runs: usize,
    concurrency: usize,
    server: PathBuf,
    data_dir: PathBuf,
    log: String,
    keep: bool,
}

impl Options {
    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        // cargo passes --bench when benchmarking; without it (cargo test) the
        // smoke run keeps things short.
        let benching = args.iter().any(|a| a == "--bench");
        let mut options = Options {
            throughput: true,
            live: true,
            clients: if benching { 64 } else { 4 },
            seconds: if benching { 10.0 } else { 1.0 },
            warmup: if benching { 2.0 } else { 0.2 },
            rate: None,
            runs: if benching { 2000 } else { 50 },
            concurrency: 64,
            server: PathBuf::from(env!("CARGO_BIN_EXE_agent-runner")),
            data_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
            log: "info".into(),
            keep: false,
        };
        let mut args = args.iter().filter(|a| *a != "--bench");
        while let Some(arg) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                "-h" | "--help" => return Ok(None),
                "all" => (options.throughput, options.live) = (true, true),
                "throughput" => (options.throughput, options.live) = (true, false),
                "live" => (options.throughput, options.live) = (false, true),
                "--clients" => options.clients = number("--clients", &value("--clients")?)?,
                "--seconds" => options.seconds = number("--seconds", &value("--seconds")?)?,
                "--warmup" => options.warmup = number("--warmup", &value("--warmup")?)?,
                "--rate" => options.rate = Some(number("--rate", &value("--rate")?)?),
                "--runs" => options.runs = number("--runs", &value("--runs")?)?,
                "--concurrency" => {
                    options.concurrency = number("--concurrency", &value("--concurrency")?)?
                }
                "--server" => options.server = PathBuf::from(value("--server")?),
                "--data-dir" => options.data_dir = PathBuf::from(value("--data-dir")?),
                "--log" => options.log = value("--log")?,
                "--keep" => options.keep = true,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if options.clients == 0 || options.runs == 0 || options.concurrency == 0 {
            return Err("--clients, --runs and --concurrency must be at least 1".into());
        }
        if !(options.seconds > 0.0 && options.warmup >= 0.0) {
            return Err("--seconds must be positive and --warmup nonnegative".into());
        }
        if options
            .rate
            .is_some_and(|rate| rate.is_nan() || rate <= 0.0)
        {
            return Err("--rate must be positive".into());
        }
        Ok(Some(options))
    }
}

fn number<T: FromStr>(name: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{name}: not a number: {text:?}"))
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match Options::parse(&args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("{message}\n\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(run(options)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("load: FAILED: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(options: Options) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let files = raise_fd_limit();
    println!(
        "load: server {} | open files limit {files} | {} CPUs",
        options.server.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if options.throughput {
        throughput(&options).await?;
    }
    if options.live {
        live(&options).await?;
    }
    Ok(())
}

/// Both sides hold a socket per connection (and the server a workspace
/// descriptor per live run): raise the soft limit to the hard one. The server
/// inherits it.
fn raise_fd_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if let Some(hard) = limit.maximum
        && limit.current.is_some_and(|soft| soft < hard)
    {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(hard),
                maximum: Some(hard),
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------
// The server process

struct Server {
    child: Child,
    address: String,
    /// The database and workspaces; `None` once the server has stopped.
    data: Option<tempfile::TempDir>,
    /// Held so the server's stdout stays open.
    _stdout: BufReader<ChildStdout>,
}

/// What `/proc/PID/status` and `/proc/PID/stat` say of a process.
#[derive(Debug, Clone, Copy, Default)]
struct ProcessStats {
    rss_kib: u64,
    peak_rss_kib: u64,
    threads: u64,
    /// User plus system CPU time.
    cpu: Duration,
}

impl Server {
    /// Starts the server on a free loopback port, with its data in a fresh
    /// directory, and waits for its `listening on` line.
    fn start(options: &Options, settings: &[(&str, String)]) -> Result<Self> {
        let data = tempfile::Builder::new()
            .prefix("load-")
            .tempdir_in(&options.data_dir)?;
        let log = std::fs::File::create(data.path().join("server.log"))?;
        let mut command = Command::new(&options.server);
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", &options.log)
            .env("AGENT_RUNNER_SERVER__BIND", "127.0.0.1:0")
            .env(
                "AGENT_RUNNER_STORAGE__DATABASE_URL",
                format!("sqlite://{}", database(data.path()).display()),
            )
            .env(
                "AGENT_RUNNER_STORAGE__WORKSPACES_DIR",
                data.path().join("workspaces"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        for (key, value) in settings {
            command.env(format!("AGENT_RUNNER_{key}"), value);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", options.server.display()))?;
        let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let Some(address) = line.trim().split("listening on ").nth(1) else {
            let _ = child.kill();
            let log = std::fs::read_to_string(data.path().join("server.log")).unwrap_or_default();
            return Err(format!("the server did not start: {line:?}\n{log}").into());
        };
        println!(
            "load: server pid {} on {address}, data in {}",
            child.id(),
            data.path().display()
        );
        Ok(Self {
            address: address.to_owned(),
            child,
            data: Some(data),
            _stdout: stdout,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    fn stats(&self) -> ProcessStats {
        process_stats(&format!("/proc/{}", self.child.id()))
    }

    /// Descriptors the server holds open.
    fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).map_or(0, |d| d.count())
    }

    /// Stops the server as an operator would (SIGTERM) and waits for it.
    async fn stop(mut self, keep: bool) -> Result<tempfile::TempDir> {
        use rustix::process::{Pid, Signal, kill_process};
        let pid = Pid::from_child(&self.child);
        kill_process(pid, Signal::TERM)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    return Err(format!("the server exited with {status}").into());
                }
                break;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return Err("the server did not stop within 30 s of SIGTERM".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut data = self.data.take().ok_or("the server was stopped twice")?;
        if keep {
            println!("load: data kept in {}", data.path().display());
        }
        data.disable_cleanup(keep);
        Ok(data)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A benchmark that failed half way must not leave a server behind.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn database(dir: &Path) -> PathBuf {
    dir.join("runs.db")
}

fn process_stats(proc_dir: &str) -> ProcessStats {
    let mut stats = ProcessStats::default();
    let status = std::fs::read_to_string(format!("{proc_dir}/status")).unwrap_or_default();
    for line in status.lines() {
        let field = |prefix: &str| {
            line.strip_prefix(prefix)
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        };
        if let Some(v) = field("VmRSS:") {
            stats.rss_kib = v;
        } else if let Some(v) = field("VmHWM:") {
            stats.peak_rss_kib = v;
        } else if let Some(v) = field("Threads:") {
            stats.threads = v;
        }
    }
    // Fields 14 and 15 (utime, stime), in clock ticks, after the command name.
    let stat = std::fs::read_to_string(format!("{proc_dir}/stat")).unwrap_or_default();
    if let Some((_, rest)) = stat.rsplit_once(')') {
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
            stats.cpu = Duration::from_millis((user + system) * 1000 / clock_ticks());
        }
    }
    stats
}

/// The kernel's USER_HZ, which is 100 on every Linux this runs on.
fn clock_ticks() -> u64 {
    100
}

/// The server's RSS, sampled while a phase runs: its largest value.
struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    fn start(server: &Server) -> Self {
        let proc_dir = format!("/proc/{}", server.child.id());
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
            async move {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(process_stats(&proc_dir).rss_kib, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        Self { stop, peak, task }
    }

    async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.peak.load(Ordering::Relaxed)
    }
}

fn client(timeout: Option<Duration>) -> Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(60));
    if let Some(timeout) = timeout {
        builder = builder.timeout(timeout);
    }
    Ok(builder.build()?)
}

/// The fields of a run object the benchmark looks at.
#[derive(Debug, Deserialize)]
struct RunObject {
    id: String,
    status: String,
    #[serde(default)]
    steps: u32,
    #[serde(default)]
    tool_calls: u32,
}

// ---------------------------------------------------------------------------
// Throughput

/// What one client saw.
#[derive(Default)]
struct ClientLog {
    latencies: Vec<Duration>,
    ids: Vec<String>,
    errors: BTreeMap<String, u64>,
}

async fn throughput(options: &Options) -> Result<()> {
    let concurrency = options.clients.max(1);
    let server = Server::start(
        options,
        &[
            // Enough slots that no run of the benchmark waits in the queue.
            (
                "RUNS__MAX_CONCURRENT",
                (concurrency * 2).max(256).to_string(),
            ),
            ("RUNS__MAX_QUEUED", "100000".into()),
        ],
    )?;
    let http = client(Some(Duration::from_secs(30)))?;
    let url = server.url("/v1/runs?wait=true");
    let body = Arc::new(serde_json::to_vec(&two_step_run())?);
    let pace = match options.rate {
        Some(rate) => format!("open loop, {rate} runs/s scheduled"),
        None => "closed loop".to_owned(),
    };
    println!(
        "\n== throughput: {} clients ({pace}), {} s measured after {} s of warm-up",
        options.clients, options.seconds, options.warmup
    );

    if options.warmup > 0.0 {
        drive(&http, &url, &body, options, options.warmup).await;
    }
    let before = server.stats();
    let metrics_before = metrics(&http, &server).await?;
    let sampler = RssSampler::start(&server);
    let started = Instant::now();
    let logs = drive(&http, &url, &body, options, options.seconds).await;
    let elapsed = started.elapsed();
    let sampled_peak = sampler.finish().await;
    let after = server.stats();
    let metrics_after = metrics(&http, &server).await?;

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
        "server RSS         peak {} (measured phase {}), now {}",
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
    let ids: Vec<&String> = logs.iter().flat_map(|l| l.ids.iter()).collect();
    let step = (ids.len() / 20).max(1);
    let mut checked = 0;
    for id in ids.iter().step_by(step) {
        check_stored_run(&http, &server, id).await?;
        checked += 1;
    }
    // The whole database, once the server has stopped.
    let data = server.stop(options.keep).await?;
    let counts = database_counts(&database(data.path())).await?;
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

/// The clients POST runs for `seconds`: each as soon as its last run ended,
/// or, with a rate, each taking the next start of a fixed schedule.
async fn drive(
    http: &reqwest::Client,
    url: &str,
    body: &Arc<Vec<u8>>,
    options: &Options,
    seconds: f64,
) -> Vec<ClientLog> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let scheduled = Arc::new(AtomicU64::new(0));
    let rate = options.rate;
    let tasks: Vec<_> = (0..options.clients)
        .map(|_| {
            let (http, url, body) = (http.clone(), url.to_owned(), Arc::clone(body));
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
                    match post_and_wait(&http, &url, &body).await {
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

/// One `POST ?wait=true`; the error is a short description, for counting.
async fn post_and_wait(
    http: &reqwest::Client,
    url: &str,
    body: &[u8],
) -> Result<RunObject, String> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .map_err(|e| format!("request: {}", error_kind(&e)))?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("body: {}", error_kind(&e)))?;
    if status != reqwest::StatusCode::CREATED {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    let run: RunObject =
        serde_json::from_slice(&bytes).map_err(|_| "unreadable run object".to_owned())?;
    if run.status != "completed" {
        return Err(format!("ended {}", run.status));
    }
    Ok(run)
}

fn error_kind(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connect"
    } else {
        "other"
    }
}

/// Checks one run through the API: completed in 2 steps, 4 messages, 12
/// events in sequence ending with `run_end`.
async fn check_stored_run(http: &reqwest::Client, server: &Server, id: &str) -> Result<()> {
    let run: RunObject = http
        .get(server.url(&format!("/v1/runs/{id}")))
        .send()
        .await?
        .json()
        .await?;
    if run.status != "completed" || run.steps != 2 || run.tool_calls != 1 {
        return Err(format!("run {id}: {run:?}").into());
    }
    let messages: Value = http
        .get(server.url(&format!("/v1/runs/{id}/messages")))
        .send()
        .await?
        .json()
        .await?;
    let count = messages["messages"].as_array().map_or(0, Vec::len);
    if count as i64 != TWO_STEP_MESSAGES {
        return Err(format!("run {id}: {count} messages stored").into());
    }
    let text = http
        .get(server.url(&format!("/v1/runs/{id}/events")))
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

struct DatabaseCounts {
    runs: i64,
    completed: i64,
    events: i64,
    messages: i64,
}

async fn database_counts(path: &Path) -> Result<DatabaseCounts> {
    let mut db = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .connect()
        .await?;
    let count = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql);
    let counts = DatabaseCounts {
        runs: count("SELECT COUNT(*) FROM runs")
            .fetch_one(&mut db)
            .await?,
        completed: count("SELECT COUNT(*) FROM runs WHERE status = 'completed'")
            .fetch_one(&mut db)
            .await?,
        events: count("SELECT COUNT(*) FROM events")
            .fetch_one(&mut db)
            .await?,
        messages: count("SELECT COUNT(*) FROM messages")
            .fetch_one(&mut db)
            .await?,
    };
    db.close().await?;
    Ok(counts)
}

/// The samples of `/metrics` (labels included in the name).
async fn metrics(http: &reqwest::Client, server: &Server) -> Result<BTreeMap<String, f64>> {
    let text = http
        .get(server.url("/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn kib(k: u64) -> String {
    format!("{:.1} MiB", k as f64 / 1024.0)
}

// ---------------------------------------------------------------------------
// Live runs

async fn live(options: &Options) -> Result<()> {
    let runs = options.runs;
    let server = Server::start(
        options,
        &[
            ("RUNS__MAX_CONCURRENT", (runs + 64).to_string()),
            ("RUNS__MAX_QUEUED", (runs + 64).to_string()),
        ],
    )?;
    let http = client(Some(Duration::from_secs(30)))?;
    // Streams last as long as their runs: no overall timeout.
    let streams = client(None)?;
    println!("\n== live: {runs} live runs, each with an SSE subscriber");

    // Warm up: the fixed costs (pools, threads, caches) belong to the baseline.
    let two_step = serde_json::to_vec(&two_step_run())?;
    let url = server.url("/v1/runs?wait=true");
    for _ in 0..50 {
        post_and_wait(&http, &url, &two_step).await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline = server.stats();
    let baseline_files = server.open_files();

    // Create the runs.
    let started = Instant::now();
    let body = serde_json::to_vec(&live_run(LIVE_DELAY_MS))?;
    let gate = Arc::new(Semaphore::new(options.concurrency));
    let mut creating = Vec::with_capacity(runs);
    for _ in 0..runs {
        let permit = Arc::clone(&gate).acquire_owned().await?;
        let (http, url, body) = (http.clone(), server.url("/v1/runs"), body.clone());
        creating.push(tokio::spawn(async move {
            let _permit = permit;
            let response = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            if response.status() != reqwest::StatusCode::CREATED {
                return Err(format!("creating a live run: HTTP {}", response.status()).into());
            }
            Ok::<_, Error>(response.json::<RunObject>().await?.id)
        }));
    }
    let mut ids = Vec::with_capacity(runs);
    for task in creating {
        ids.push(task.await??);
    }
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
    let data = server.stop(options.keep).await?;
    let counts = database_counts(&database(data.path())).await?;
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
