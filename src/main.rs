//! `agent-runner serve [--config FILE] [--bind ADDR]`, `agent-runner config`,
//! `agent-runner hash-token`; the client commands (`run`, `runs`) are
//! [`agent_runner::cli`]'s.

use std::io::{IsTerminal, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use agent_runner::app::Application;
use agent_runner::config::Config;
use clap::{Arg, ArgMatches, Command};
use tracing_subscriber::EnvFilter;

const ABOUT: &str = "agent-runner: an HTTP service that runs AI-agent loops, and its client.

With no config file `serve` serves on 127.0.0.1:8080 with SQLite under
data/. Every config key can be overridden with an environment variable
AGENT_RUNNER_SECTION__KEY (for example AGENT_RUNNER_SERVER__BIND=127.0.0.1:0).
RUST_LOG sets the log level, RUST_LOG_FORMAT=json writes JSON lines.

The client commands talk to a server at --server (or AGENT_RUNNER_URL,
default http://127.0.0.1:8080) with --token (or AGENT_RUNNER_TOKEN):
  agent-runner run PROMPT [--follow] ...        (agent-runner run --help)
  agent-runner runs list|show|messages|cancel|approve|deny ...";

fn config_arg() -> Arg {
    Arg::new("config")
        .long("config")
        .short('c')
        .value_name("FILE")
        .value_parser(clap::value_parser!(PathBuf))
        .help("The TOML configuration file (default: none, every key at its default)")
}

fn command() -> Command {
    Command::new("agent-runner")
        .version(env!("CARGO_PKG_VERSION"))
        .about(ABOUT)
        .subcommand_required(true)
        .subcommand(
            Command::new("serve")
                .about("Runs the HTTP service until SIGTERM or SIGINT")
                .arg(config_arg())
                .arg(
                    Arg::new("bind")
                        .long("bind")
                        .value_name("ADDR")
                        .value_parser(clap::value_parser!(SocketAddr))
                        .help("The address to serve on, as IP:PORT (overrides server.bind)"),
                ),
        )
        .subcommand(
            Command::new("config")
                .about(
                    "Checks the configuration as `serve` does before it starts (model \
                     profiles and their keys, the default model, MCP servers, webhooks, the \
                     database URL, the sandbox), then prints it (the file, the environment's \
                     overrides and every default; secrets redacted) as TOML and exits; \
                     exits 2 saying why when `serve` would refuse it",
                )
                .arg(config_arg()),
        )
        .subcommands(agent_runner::cli::commands())
        .subcommand(Command::new("hash-token").about(
            "Reads a bearer token on stdin and prints its token_sha256 for [[auth.tokens]] \
             (one trailing newline is not part of the token)",
        ))
}

fn main() -> ExitCode {
    let all: Vec<String> = std::env::args().collect();
    if all
        .get(1)
        .is_some_and(|command| agent_runner::cli::is_client_command(command))
    {
        return agent_runner::cli::main(all);
    }
    let matches = match command().try_get_matches_from(all) {
        Ok(matches) => matches,
        Err(error) => {
            let code = if error.use_stderr() { 2 } else { 0 };
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    match matches.subcommand() {
        Some(("serve", serve)) => serve_command(serve),
        Some(("config", config)) => config_command(config),
        Some(("hash-token", _)) => hash_token(),
        _ => ExitCode::from(2),
    }
}

/// The configuration `matches` names, or the exit code of its refusal.
/// `--bind` is one more override, checked with the rest (a server without
/// tokens binds loopback only, whichever way its address is given).
fn load(matches: &ArgMatches) -> Result<Config, ExitCode> {
    let path = matches.get_one::<PathBuf>("config");
    let bind = matches
        .try_get_one::<SocketAddr>("bind")
        .ok()
        .flatten()
        .map(|bind| {
            (
                format!("{}SERVER__BIND", agent_runner::config::ENV_PREFIX),
                format!("\"{bind}\""),
            )
        });
    // It wins over the variable.
    let env = std::env::vars()
        .filter(|(name, _)| bind.as_ref().is_none_or(|(bound, _)| name != bound))
        .chain(bind.clone());
    Config::load(path.map(PathBuf::as_path), env).map_err(|error| {
        eprintln!("agent-runner: {error}");
        ExitCode::from(2)
    })
}

/// Prints the effective configuration once every check `serve` makes
/// before it starts passes; exits 2 (saying why) when one does not.
fn config_command(matches: &ArgMatches) -> ExitCode {
    let config = match load(matches) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Err(error) = agent_runner::app::check(&config) {
        eprintln!("agent-runner: {error}");
        return ExitCode::from(2);
    }
    match agent_runner::config::effective(&config) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("agent-runner: {error}");
            ExitCode::FAILURE
        }
    }
}

fn hash_token() -> ExitCode {
    let mut input = String::new();
    if let Err(error) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("agent-runner: cannot read the token from stdin: {error}");
        return ExitCode::FAILURE;
    }
    let token = input
        .strip_suffix("\r\n")
        .or_else(|| input.strip_suffix('\n'))
        .unwrap_or(&input);
    if token.is_empty() {
        eprintln!("agent-runner: no token on stdin");
        return ExitCode::from(2);
    }
    if token.chars().any(char::is_whitespace) {
        eprintln!("agent-runner: the token holds whitespace, which a bearer token cannot carry");
        return ExitCode::from(2);
    }
    println!("{}", agent_runner::api::auth::token_sha256(token));
    ExitCode::SUCCESS
}

fn serve_command(matches: &ArgMatches) -> ExitCode {
    init_logs();
    let config = match load(matches) {
        Ok(config) => config,
        Err(code) => return code,
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

/// Logs to stderr: text (coloured only on a terminal), or JSON lines with
/// `RUST_LOG_FORMAT=json`; `RUST_LOG` sets the level.
fn init_logs() {
    let filter = EnvFilter::try_from_default_env()
        // The MCP SDK logs every session's handshake (a server's whole
        // instructions) and notifications at info.
        .unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    let json = std::env::var("RUST_LOG_FORMAT").is_ok_and(|format| format == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init();
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).init();
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
