//! The load benchmark: starts the real `agent-runner` binary as its own
//! process, on loopback with a fresh data directory, and drives it over HTTP.
//!
//! `cargo bench --bench load` runs every mode with its defaults;
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
//! - `paused`: pauses many runs for an approval and reports the server's
//!   memory per paused run (a paused run lives in storage alone); then
//!   answers each while following its events, and reports the time from the
//!   answer to the resumed run's first `tool_start`.
//!
//! Built as a bench, it starts the server binary cargo built with it (same
//! profile). Run by `cargo test --benches` (no `--bench` flag), it does a
//! short smoke run of every mode instead.

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
use sqlx::Connection;
use tokio::sync::Semaphore;

mod live;
mod paused;
mod throughput;

/// The name of a server's config file in its data directory, when it has
/// one.
const CONFIG_FILE: &str = "agent-runner.toml";

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = Error> = std::result::Result<T, E>;

const USAGE: &str = "\
Usage: cargo bench --bench load -- [MODE] [OPTIONS]

Modes:
  all          throughput, live, then paused (the default)
  throughput   concurrent clients POST 2-step runs with ?wait=true
  live         many live runs, each with an SSE subscriber: memory per run
  paused       many runs paused for an approval: memory per paused run, and
               time from an answer to the resumed run's first tool start

Options:
  --clients N      throughput: concurrent clients (default 64)
  --seconds S      throughput: measured duration (default 10)
  --warmup S       throughput: unmeasured warm-up first (default 2)
  --rate R         throughput: start R runs per second in all, on a fixed
                   schedule, instead of each client starting its next run as
                   soon as the last one ends; latency counts from the
                   scheduled start, so a server that falls behind shows it
  --runs K         live: runs held live at once (default 2000)
  --paused K       paused: runs held paused at once (default 1000)
  --concurrency N  live: requests in flight while creating and cancelling (default 64)
  --server PATH    the agent-runner binary (default: the one cargo built)
  --replicas N     throughput: N servers on one PostgreSQL database (needs
                   --postgres), the clients spread over them (default 1)
  --tenants N      throughput: the server has N tenants (a token each), the
                   clients spread over them (default 0: no tokens at all)
  --otlp URL       throughput: the server exports its spans to this OTLP/HTTP
                   endpoint (default: no traces)
  --postgres URL   store in PostgreSQL: a fresh database on the server at
                   URL (its maintenance database) for each server started
  --data-dir DIR   where each server's fresh data directory is made (default:
                   cargo's target tmp directory, on the same disk as target/)
  --log FILTER     the server's RUST_LOG (default: info, its own default)
  --profile        throughput: each run names a scripted model profile of the
                   server's (the same two steps) instead of giving its script
  --priced         throughput: that profile has a price, and each run a
                   max_cost_usd (implies --profile)
  --agent          throughput: each run names a stored agent (made first, for
                   every tenant) that holds its definition, instead of
                   carrying it
  --files N        throughput: each run's request seeds its workspace with N
                   files of 1 KiB (its starting tree, recorded with it)
  --schedules N    throughput: the server holds N enabled schedules, made
                   first, none of which falls due during the run (what idle
                   schedules cost the run path)
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

/// The scripted profile `bench` of the server's config: [`two_step_run`]'s
/// script, with a price when `priced`.
fn bench_profile(priced: bool) -> String {
    let script = two_step_run()["model"]["scripted"].clone();
    let steps: Vec<String> = script
        .as_array()
        .into_iter()
        .flatten()
        .map(|step| toml_string(&step.to_string()))
        .collect();
    let mut profile = format!(
        "[models.bench]\nkind = \"scripted\"\nscript = [{}]\n",
        steps.join(", ")
    );
    if priced {
        profile.push_str("[models.bench.price]\ninput = 3.0\noutput = 15.0\ncached_input = 0.3\n");
    }
    profile
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A run's `workspace` of `count` files of 1 KiB, in a few directories.
fn seed_files(count: usize) -> Value {
    let line = "x = 1  # a line of a small source file, to fill a KiB\n";
    let content: String = line.repeat(1024 / line.len() + 1)[..1024].to_owned();
    let files: serde_json::Map<String, Value> = (0..count)
        .map(|n| {
            (
                format!("src/m{}/f{n}.py", n % 4),
                Value::String(content.clone()),
            )
        })
        .collect();
    json!({"files": files})
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
    paused: bool,
    clients: usize,
    seconds: f64,
    warmup: f64,
    /// Runs started per second, on a schedule (open loop); `None`: each
    /// client goes on as soon as its last run ends (closed loop).
    rate: Option<f64>,
    runs: usize,
    paused_runs: usize,
    concurrency: usize,
    server: PathBuf,
    data_dir: PathBuf,
    log: String,
    keep: bool,
    /// A PostgreSQL server's URL (its maintenance database): each server
    /// started gets a fresh database there instead of a SQLite file.
    postgres: Option<String>,
    /// Servers sharing one database in the throughput mode.
    replicas: usize,
    /// Tenants of the throughput mode's server, a token each (0: none).
    tenants: usize,
    /// Where the throughput mode's server exports spans, if anywhere.
    otlp: Option<String>,
    /// Throughput: the runs name a stored agent holding their definition.
    agent: bool,
    /// Throughput: files each run's request seeds its workspace with.
    files: usize,
    /// Throughput: idle schedules the server holds.
    schedules: usize,
    /// Throughput: the runs name the server's scripted profile `bench`.
    profile: bool,
    /// Throughput: that profile is priced and each run bounds its cost.
    priced: bool,
}

impl Options {
    fn set_modes(&mut self, throughput: bool, live: bool, paused: bool) {
        (self.throughput, self.live, self.paused) = (throughput, live, paused);
    }

    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        // cargo passes --bench when benchmarking; without it (cargo test) the
        // smoke run keeps things short.
        let benching = args.iter().any(|a| a == "--bench");
        let mut options = Options {
            throughput: true,
            live: true,
            paused: true,
            clients: if benching { 64 } else { 4 },
            seconds: if benching { 10.0 } else { 1.0 },
            warmup: if benching { 2.0 } else { 0.2 },
            rate: None,
            runs: if benching { 2000 } else { 50 },
            paused_runs: if benching { 1000 } else { 20 },
            concurrency: 64,
            server: PathBuf::from(env!("CARGO_BIN_EXE_agent-runner")),
            data_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
            log: "info".into(),
            keep: false,
            postgres: None,
            replicas: 1,
            tenants: 0,
            otlp: None,
            agent: false,
            profile: false,
            priced: false,
            files: 0,
            schedules: 0,
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
                "all" => options.set_modes(true, true, true),
                "throughput" => options.set_modes(true, false, false),
                "live" => options.set_modes(false, true, false),
                "paused" => options.set_modes(false, false, true),
                "--clients" => options.clients = number("--clients", &value("--clients")?)?,
                "--seconds" => options.seconds = number("--seconds", &value("--seconds")?)?,
                "--warmup" => options.warmup = number("--warmup", &value("--warmup")?)?,
                "--rate" => options.rate = Some(number("--rate", &value("--rate")?)?),
                "--runs" => options.runs = number("--runs", &value("--runs")?)?,
                "--paused" => options.paused_runs = number("--paused", &value("--paused")?)?,
                "--concurrency" => {
                    options.concurrency = number("--concurrency", &value("--concurrency")?)?
                }
                "--server" => options.server = PathBuf::from(value("--server")?),
                "--data-dir" => options.data_dir = PathBuf::from(value("--data-dir")?),
                "--log" => options.log = value("--log")?,
                "--keep" => options.keep = true,
                "--postgres" => options.postgres = Some(value("--postgres")?),
                "--replicas" => options.replicas = number("--replicas", &value("--replicas")?)?,
                "--tenants" => options.tenants = number("--tenants", &value("--tenants")?)?,
                "--otlp" => options.otlp = Some(value("--otlp")?),
                "--agent" => options.agent = true,
                "--profile" => options.profile = true,
                "--priced" => {
                    options.profile = true;
                    options.priced = true;
                }
                "--files" => options.files = number("--files", &value("--files")?)?,
                "--schedules" => options.schedules = number("--schedules", &value("--schedules")?)?,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if options.clients == 0
            || options.runs == 0
            || options.paused_runs == 0
            || options.concurrency == 0
        {
            return Err("--clients, --runs, --paused and --concurrency must be at least 1".into());
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
        if options.replicas == 0 || (options.replicas > 1 && options.postgres.is_none()) {
            return Err("--replicas must be at least 1, and more than 1 needs --postgres".into());
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
        throughput::throughput(&options).await?;
    }
    if options.live {
        live::live(&options).await?;
    }
    if options.paused {
        paused::paused(&options).await?;
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
    /// Where it stores: a SQLite file in `data`, or a PostgreSQL database.
    database_url: String,
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
    /// A server on a fresh data directory; `config`: the text of its
    /// config file, if it needs one.
    fn start(options: &Options, settings: &[(&str, String)], config: Option<&str>) -> Result<Self> {
        let data = tempfile::Builder::new()
            .prefix("load-")
            .tempdir_in(&options.data_dir)?;
        let database_url = match &options.postgres {
            Some(server) => fresh_postgres_database(server)?,
            None => format!("sqlite://{}", database(data.path()).display()),
        };
        let dir = data.path().to_owned();
        if let Some(config) = config {
            std::fs::write(dir.join(CONFIG_FILE), config)?;
        }
        Self::spawn(
            options,
            settings,
            &dir,
            database_url,
            Some(data),
            "server.log",
        )
    }

    /// Starts another replica of `first`: the same database and workspaces.
    fn replica(
        options: &Options,
        settings: &[(&str, String)],
        first: &Self,
        number: usize,
    ) -> Result<Self> {
        let dir = first
            .data
            .as_ref()
            .ok_or("the first server stopped")?
            .path();
        Self::spawn(
            options,
            settings,
            dir,
            first.database_url.clone(),
            None,
            &format!("server-{number}.log"),
        )
    }

    fn spawn(
        options: &Options,
        settings: &[(&str, String)],
        dir: &Path,
        database_url: String,
        data: Option<tempfile::TempDir>,
        log_name: &str,
    ) -> Result<Self> {
        let log = std::fs::File::create(dir.join(log_name))?;
        let mut command = Command::new(&options.server);
        command.arg("serve");
        if dir.join(CONFIG_FILE).exists() {
            command.arg("--config").arg(dir.join(CONFIG_FILE));
        }
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", &options.log)
            .env("AGENT_RUNNER_SERVER__BIND", "127.0.0.1:0")
            .env("AGENT_RUNNER_STORAGE__DATABASE_URL", &database_url)
            .env(
                "AGENT_RUNNER_STORAGE__WORKSPACES_DIR",
                dir.join("workspaces"),
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
            let log = std::fs::read_to_string(dir.join(log_name)).unwrap_or_default();
            return Err(format!("the server did not start: {line:?}\n{log}").into());
        };
        println!(
            "load: server pid {} on {address}, data in {}",
            child.id(),
            dir.display()
        );
        Ok(Self {
            address: address.to_owned(),
            child,
            database_url,
            data,
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
    async fn stop(mut self, keep: bool) -> Result<Option<tempfile::TempDir>> {
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
        // A replica's data is the first server's.
        let Some(mut data) = self.data.take() else {
            return Ok(None);
        };
        if keep {
            println!("load: data kept in {}", data.path().display());
        }
        data.disable_cleanup(keep);
        Ok(Some(data))
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

/// The fixed costs (pools, threads, caches) belong to a mode's baseline:
/// 50 runs first, then a moment's rest.
async fn warm_up(http: &reqwest::Client, server: &Server) -> Result<()> {
    let two_step = serde_json::to_vec(&two_step_run())?;
    let url = server.url("/v1/runs?wait=true");
    for _ in 0..50 {
        post_and_wait(http, &url, &two_step, None).await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(())
}

/// Creates `count` runs of `body`, `gate` bounding the requests in flight;
/// their ids, in order. With `until`, each request is done only once its
/// run has that status, so that no more runs are live at once than requests
/// are in flight.
async fn create_runs(
    http: &reqwest::Client,
    server: &Server,
    gate: &Arc<Semaphore>,
    body: &[u8],
    count: usize,
    until: Option<&'static str>,
) -> Result<Vec<String>> {
    let mut creating = Vec::with_capacity(count);
    for _ in 0..count {
        let permit = Arc::clone(gate).acquire_owned().await?;
        let (http, url, body) = (http.clone(), server.url("/v1/runs"), body.to_vec());
        let address = server.url("/v1/runs/");
        creating.push(tokio::spawn(async move {
            let _permit = permit;
            let response = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            if response.status() != reqwest::StatusCode::CREATED {
                return Err(format!("creating a run: HTTP {}", response.status()).into());
            }
            let id = response.json::<RunObject>().await?.id;
            let Some(until) = until else {
                return Ok::<_, Error>(id);
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let run: RunObject = http
                    .get(format!("{address}{id}"))
                    .send()
                    .await?
                    .json()
                    .await?;
                match run.status.as_str() {
                    status if status == until => return Ok(id),
                    "queued" | "running" if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    other => return Err(format!("a run did not reach {until}: {other}").into()),
                }
            }
        }));
    }
    let mut ids = Vec::with_capacity(count);
    for task in creating {
        ids.push(task.await??);
    }
    Ok(ids)
}

/// One `POST ?wait=true`; the error is a short description, for counting.
async fn post_and_wait(
    http: &reqwest::Client,
    url: &str,
    body: &[u8],
    token: Option<&str>,
) -> Result<RunObject, String> {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request
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

struct DatabaseCounts {
    runs: i64,
    completed: i64,
    events: i64,
    messages: i64,
}

/// A new database on the PostgreSQL server at `server`, and its URL.
fn fresh_postgres_database(server: &str) -> Result<String> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "load_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let (base, _) = server
        .rsplit_once('/')
        .ok_or("a PostgreSQL URL ends with its database")?;
    let url = format!("{base}/{name}");
    let server = server.to_owned();
    // On a thread of its own: it may be called from the benchmark's runtime.
    std::thread::spawn(move || -> std::result::Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let mut connection = sqlx::PgConnection::connect(&server)
                .await
                .map_err(|e| e.to_string())?;
            sqlx::Executor::execute(&mut connection, format!("CREATE DATABASE {name}").as_str())
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        })
    })
    .join()
    .map_err(|_| "creating the database panicked")??;
    Ok(url)
}

/// Counts rows of the database at `url` (SQLite or PostgreSQL).
async fn database_counts(url: &str) -> Result<DatabaseCounts> {
    sqlx::any::install_default_drivers();
    let mut db = sqlx::AnyConnection::connect(url).await?;
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
