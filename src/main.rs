//! `agent-runner serve [--config FILE]`

use std::path::PathBuf;
use std::process::ExitCode;

use agent_runner::app::Application;
use agent_runner::config::Config;
use tracing_subscriber::EnvFilter;

const USAGE: &str = "Usage: agent-runner serve [--config FILE]
       agent-runner run PROMPT [--follow] ...     (see agent-runner run --help)
       agent-runner runs list|show|messages|cancel|approve|deny ...

`serve` runs the agent-runner HTTP service. With no config file it serves on
127.0.0.1:8080 with SQLite under data/. Every config key can be overridden
with an environment variable AGENT_RUNNER_SECTION__KEY (for example
AGENT_RUNNER_SERVER__BIND=127.0.0.1:0). RUST_LOG sets the log level. The client commands talk to a server at
--server (or AGENT_RUNNER_URL, default http://127.0.0.1:8080) with --token
(or AGENT_RUNNER_TOKEN).";

fn main() -> ExitCode {
    let all: Vec<String> = std::env::args().collect();
    if all
        .get(1)
        .is_some_and(|command| agent_runner::cli::is_client_command(command))
    {
        return agent_runner::cli::main(all);
    }
    let args: Vec<String> = all.into_iter().skip(1).collect();
    let config_path = match parse_args(&args) {
        Ok(Some(path)) => path,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                // The MCP SDK logs every session's handshake (a server's
                // whole instructions) and notifications at info.
                .unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = match Config::load(config_path.as_deref(), std::env::vars()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("agent-runner: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("agent-runner: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let app = match Application::build(config).await {
            Ok(app) => app,
            Err(error) => {
                eprintln!("agent-runner: {error}");
                return ExitCode::FAILURE;
            }
        };
        println!("listening on http://{}", app.local_addr());
        match app.run_until_stopped(shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("agent-runner: {error}");
                ExitCode::FAILURE
            }
        }
    })
}

/// `Ok(Some(path))` to serve, `Ok(None)` when help or version was printed.
fn parse_args(args: &[String]) -> Result<Option<Option<PathBuf>>, String> {
    match args.first().map(String::as_str) {
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(None)
        }
        Some("-V" | "--version") => {
            println!("agent-runner {}", env!("CARGO_PKG_VERSION"));
            Ok(None)
        }
        Some("serve") => match &args[1..] {
            [] => Ok(Some(None)),
            [flag, path] if flag == "--config" => Ok(Some(Some(PathBuf::from(path)))),
            [flag] if flag == "--config" => Err("--config needs a file".into()),
            other => Err(format!("unexpected arguments: {}", other.join(" "))),
        },
        Some(other) => Err(format!("unknown command {other:?}")),
        None => Err("a command is required".into()),
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
