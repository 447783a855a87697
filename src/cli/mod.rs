//! The command-line client: `agent-runner run`, `agent-runner runs ...` and
//! `agent-runner upload`, talking to a server over its HTTP API (the same
//! binary serves).
//!
//! - this module: the commands, their arguments and their exit codes;
//! - [`client`]: the API over HTTP;
//! - [`follow`]: a run's event stream, printed as it comes;
//! - [`out`]: standard output, where a closed pipe ends the client quietly.
//!
//! Exit codes: 0 when the command did what it was asked (for `run
//! --follow`: the run completed), or when whoever read its output stopped
//! reading (a closed pipe); 1 when the server refused it or the run ended
//! otherwise; 2 for a command line that makes no sense.

mod client;
mod follow;
mod out;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgMatches, Command};
use serde_json::{Value, json};

use client::{ApiClient, CliError};
use out::outln;

/// The server when neither `--server` nor `AGENT_RUNNER_URL` names one.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// Whether `command` (the first argument) starts a client command: one of
/// its commands, or one of its options given before the command.
pub fn is_client_command(command: &str) -> bool {
    matches!(
        command,
        "run" | "runs" | "upload" | "--server" | "--token" | "--json"
    ) || command.starts_with("--server=")
        || command.starts_with("--token=")
}

/// Runs the client with the process's arguments (the program name first).
pub fn main(args: Vec<String>) -> ExitCode {
    let matches = match cli().try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(error) => {
            let _ = error.print();
            return match error.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(2),
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("agent-runner: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(&matches)) {
        Ok(code) => code,
        // Whoever read the output has what it wanted.
        Err(CliError::ClosedPipe) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("agent-runner: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

/// The client's commands (`run`, `runs`, `upload`), as the server's own command line
/// lists them in its help (they are run by [`main`]).
pub fn commands() -> Vec<Command> {
    cli().get_subcommands().cloned().collect()
}

fn cli() -> Command {
    let server = Arg::new("server")
        .long("server")
        .env("AGENT_RUNNER_URL")
        .default_value(DEFAULT_SERVER)
        .global(true)
        .help("The server's URL");
    let token = Arg::new("token")
        .long("token")
        .env("AGENT_RUNNER_TOKEN")
        .hide_env_values(true)
        .global(true)
        .help("A bearer token of the server's");
    let json = Arg::new("json")
        .long("json")
        .action(ArgAction::SetTrue)
        .global(true)
        .help("Print the raw JSON objects (events one per line)");
    let id = || Arg::new("id").required(true).help("The run's id");
    Command::new("agent-runner")
        .about("The agent-runner client")
        .subcommand_required(true)
        .arg(server)
        .arg(token)
        .arg(json)
        .subcommand(
            Command::new("run")
                .about("Create a run (and with --follow, print its events until it ends)")
                .arg(Arg::new("prompt").required(true).help("The prompt"))
                .arg(
                    Arg::new("profile")
                        .long("profile")
                        .help("A model profile of the server's"),
                )
                .arg(
                    Arg::new("instructions")
                        .long("instructions")
                        .help("The run's system prompt"),
                )
                .arg(
                    Arg::new("tool")
                        .long("tool")
                        .action(ArgAction::Append)
                        .help("A tool the run may use (repeat; default: every built-in one)"),
                )
                .arg(
                    Arg::new("file")
                        .long("file")
                        .action(ArgAction::Append)
                        .value_name("LOCAL[=AT]")
                        .help(
                            "A local file to seed the workspace with, at AT or under its own \
                             relative path (repeat)",
                        ),
                )
                .arg(
                    Arg::new("upload")
                        .long("upload")
                        .value_name("ID")
                        .help("Start from an upload's files (see `agent-runner upload`)"),
                )
                .arg(
                    Arg::new("git")
                        .long("git")
                        .value_name("URL")
                        .help("Start from a clone of this repository (the server must allow it)"),
                )
                .arg(
                    Arg::new("ref")
                        .long("ref")
                        .requires("git")
                        .help("The branch, tag or commit of --git to check out"),
                )
                .arg(
                    Arg::new("follow")
                        .long("follow")
                        .short('f')
                        .action(ArgAction::SetTrue)
                        .help("Print its events as they come; exit 0 only if it completes"),
                ),
        )
        .subcommand(
            Command::new("upload")
                .about("Upload a .tar.gz or .zip to start runs from (prints its id)")
                .arg(
                    Arg::new("archive")
                        .required(true)
                        .value_parser(clap::value_parser!(PathBuf))
                        .help("The archive: a .tar.gz (or .tgz) or a .zip"),
                ),
        )
        .subcommand(
            Command::new("runs")
                .about("Look at and act on runs")
                .subcommand_required(true)
                .subcommand(
                    Command::new("list")
                        .about("Runs, newest first")
                        .arg(
                            Arg::new("status")
                                .long("status")
                                .help("Only runs of this status"),
                        )
                        .arg(
                            Arg::new("limit")
                                .long("limit")
                                .value_parser(clap::value_parser!(u32).range(1..=100))
                                .help("How many (1 to 100)"),
                        ),
                )
                .subcommand(Command::new("show").about("A run").arg(id()))
                .subcommand(
                    Command::new("messages")
                        .about("A run's transcript")
                        .arg(id()),
                )
                .subcommand(
                    Command::new("diff")
                        .about(
                            "A run's changes to the tree it started from, as a unified diff \
                             (`git apply` takes it)",
                        )
                        .arg(id()),
                )
                .subcommand(
                    Command::new("archive")
                        .about("Download a run's workspace as a .tar.gz")
                        .arg(id())
                        .arg(
                            Arg::new("out")
                                .long("out")
                                .short('o')
                                .value_name("FILE")
                                .value_parser(clap::value_parser!(PathBuf))
                                .help(
                                    "Where to write it (default: ID.tar.gz; - for standard output)",
                                ),
                        )
                        .arg(
                            Arg::new("include_git")
                                .long("include-git")
                                .action(ArgAction::SetTrue)
                                .help("Keep the workspace's .git directory"),
                        ),
                )
                .subcommand(
                    Command::new("cancel")
                        .about("Cancel a run (a run that has ended is shown as it ended)")
                        .arg(id()),
                )
                .subcommand(
                    Command::new("approve")
                        .about("Approve a paused run's pending calls (all, or those named)")
                        .arg(id())
                        .arg(Arg::new("call").action(ArgAction::Append).help("Call ids")),
                )
                .subcommand(
                    Command::new("deny")
                        .about("Deny a paused run's pending calls (all, or those named)")
                        .arg(id())
                        .arg(Arg::new("call").action(ArgAction::Append).help("Call ids"))
                        .arg(Arg::new("reason").long("reason").help("Told to the model")),
                ),
        )
}

async fn dispatch(matches: &ArgMatches) -> Result<ExitCode, CliError> {
    let server = matches
        .get_one::<String>("server")
        .map_or(DEFAULT_SERVER, String::as_str);
    let token = matches.get_one::<String>("token").cloned();
    let json = matches.get_flag("json");
    let client = ApiClient::new(server, token)?;
    match matches.subcommand() {
        Some(("run", run)) => create(&client, run, json).await,
        Some(("upload", upload)) => send_upload(&client, upload, json).await,
        Some(("runs", runs)) => match runs.subcommand() {
            Some(("list", list)) => {
                let mut query = Vec::new();
                if let Some(status) = list.get_one::<String>("status") {
                    query.push(("status", status.clone()));
                }
                if let Some(limit) = list.get_one::<u32>("limit") {
                    query.push(("limit", limit.to_string()));
                }
                let page = client.get("/v1/runs", &query).await?;
                print_list(&page, json)?;
                Ok(ExitCode::SUCCESS)
            }
            Some(("show", show)) => {
                let run = client.get(&run_path(show, ""), &[]).await?;
                print_run(&run, json)?;
                Ok(ExitCode::SUCCESS)
            }
            Some(("messages", messages)) => {
                let list = client.get(&run_path(messages, "/messages"), &[]).await?;
                print_messages(&list, json)?;
                Ok(ExitCode::SUCCESS)
            }
            // The diff as the server wrote it, byte for byte: `| git apply`.
            Some(("diff", diff)) => {
                let response = client.get_bytes(&run_path(diff, "/diff")).await?;
                client::copy_body(response, &mut std::io::stdout().lock(), "standard output")
                    .await?;
                Ok(ExitCode::SUCCESS)
            }
            Some(("archive", archive)) => download_archive(&client, archive).await,
            // As `POST .../cancel`: repeatable, a run that has ended is
            // shown as it ended.
            Some(("cancel", cancel)) => {
                let run = client.post_empty(&run_path(cancel, "/cancel")).await?;
                print_run(&run, json)?;
                Ok(ExitCode::SUCCESS)
            }
            Some((decision @ ("approve" | "deny"), answer)) => {
                decide(&client, answer, decision, json).await
            }
            _ => Err(CliError::Usage("a runs command is needed".into())),
        },
        _ => Err(CliError::Usage("a command is needed".into())),
    }
}

fn run_path(matches: &ArgMatches, rest: &str) -> String {
    let id = matches.get_one::<String>("id").map_or("", String::as_str);
    format!("/v1/runs/{}{rest}", client::path_segment(id))
}

/// `agent-runner run`: the request from the arguments; with `--follow`
/// its stream (`POST /v1/runs?stream=true`), printed until its end.
async fn create(client: &ApiClient, run: &ArgMatches, json: bool) -> Result<ExitCode, CliError> {
    let prompt = run.get_one::<String>("prompt").cloned().unwrap_or_default();
    let mut request = json!({"prompt": prompt});
    if let Some(profile) = run.get_one::<String>("profile") {
        request["model"] = json!({"profile": profile});
    }
    if let Some(instructions) = run.get_one::<String>("instructions") {
        request["instructions"] = json!(instructions);
    }
    if let Some(tools) = run.get_many::<String>("tool") {
        request["tools"] = json!(tools.collect::<Vec<_>>());
    }
    let mut workspace = serde_json::Map::new();
    if let Some(files) = run.get_many::<String>("file") {
        let mut seeded = serde_json::Map::new();
        for file in files {
            let (local, at) = seed_file(file)?;
            let content = std::fs::read_to_string(&local)
                .map_err(|e| CliError::Usage(format!("--file {}: {e}", local.display())))?;
            seeded.insert(at, Value::String(content));
        }
        workspace.insert("files".into(), Value::Object(seeded));
    }
    if let Some(upload) = run.get_one::<String>("upload") {
        workspace.insert("archive".into(), json!(upload));
    }
    if let Some(url) = run.get_one::<String>("git") {
        let mut git = json!({"url": url});
        if let Some(reference) = run.get_one::<String>("ref") {
            git["ref"] = json!(reference);
        }
        workspace.insert("git".into(), git);
    }
    if !workspace.is_empty() {
        request["workspace"] = Value::Object(workspace);
    }
    if run.get_flag("follow") {
        let response = client.post_stream("/v1/runs?stream=true", &request).await?;
        let status = follow::print_stream(client, response, json).await?;
        return Ok(if status.as_deref() == Some("completed") {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let created = client.post("/v1/runs", &request).await?;
    print_run(&created, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `--file LOCAL[=AT]`: the local file, and its path in the workspace: AT,
/// or LOCAL itself (`./` and `.` components dropped) when that is a
/// relative path inside the current directory.
fn seed_file(argument: &str) -> Result<(PathBuf, String), CliError> {
    let (local, at) = match argument.split_once('=') {
        Some((local, at)) if !local.is_empty() && !at.is_empty() => (local, Some(at)),
        _ => (argument, None),
    };
    let local = PathBuf::from(local);
    let at = match at {
        Some(at) => at.to_owned(),
        None => {
            use std::path::Component;
            let mut parts = Vec::new();
            for component in local.components() {
                match component {
                    Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
                    Component::CurDir => {}
                    _ => {
                        return Err(CliError::Usage(format!(
                            "--file {}: a path outside the current directory needs its place in \
                             the workspace: --file {}=PATH",
                            local.display(),
                            local.display()
                        )));
                    }
                }
            }
            parts.join("/")
        }
    };
    Ok((local, at))
}

/// `upload FILE`: the archive sent whole (as `Content-Type` its name
/// says), and the upload's id printed, to be named by `run --upload`.
async fn send_upload(
    client: &ApiClient,
    upload: &ArgMatches,
    json: bool,
) -> Result<ExitCode, CliError> {
    let Some(path) = upload.get_one::<PathBuf>("archive") else {
        return Err(CliError::Usage("an archive is needed".into()));
    };
    let name = path.to_string_lossy().to_lowercase();
    let content_type = if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        "application/gzip"
    } else if name.ends_with(".zip") {
        "application/zip"
    } else {
        return Err(CliError::Usage(format!(
            "{}: an upload is a .tar.gz (or .tgz) or a .zip, named so",
            path.display()
        )));
    };
    let body =
        std::fs::read(path).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    let made = client.post_bytes("/v1/uploads", content_type, body).await?;
    if json {
        outln!("{made}")?;
    } else {
        outln!(
            "{}  {} files, {} bytes",
            made["id"].as_str().unwrap_or("-"),
            made["files"],
            made["size"]
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `runs archive ID`: the workspace's `.tar.gz`, written to `--out` (made
/// only once the server has answered it, and removed if the download is
/// cut short) or to standard output with `-`.
async fn download_archive(client: &ApiClient, archive: &ArgMatches) -> Result<ExitCode, CliError> {
    let id = archive.get_one::<String>("id").map_or("", String::as_str);
    let out = archive
        .get_one::<PathBuf>("out")
        .cloned()
        .unwrap_or_else(|| PathBuf::from(format!("{id}.tar.gz")));
    let mut path = run_path(archive, "/archive");
    if archive.get_flag("include_git") {
        path.push_str("?include_git=true");
    }
    let response = client.get_bytes(&path).await?;
    if out.as_os_str() == "-" {
        client::copy_body(response, &mut std::io::stdout().lock(), "standard output").await?;
        return Ok(ExitCode::SUCCESS);
    }
    let what = out.display().to_string();
    let mut file = std::fs::File::create(&out)
        .map_err(|e| CliError::Refused(format!("cannot write {what}: {e}")))?;
    if let Err(error) = client::copy_body(response, &mut file, &what).await {
        drop(file);
        let _ = std::fs::remove_file(&out);
        return Err(error);
    }
    outln!("{what}")?;
    Ok(ExitCode::SUCCESS)
}

/// `runs approve|deny ID [CALL...]`: answers the named pending approvals,
/// or every one of them.
async fn decide(
    client: &ApiClient,
    answer: &ArgMatches,
    decision: &str,
    json: bool,
) -> Result<ExitCode, CliError> {
    let run = client.get(&run_path(answer, ""), &[]).await?;
    let named: Vec<&String> = answer
        .get_many::<String>("call")
        .map(Iterator::collect)
        .unwrap_or_default();
    let pending = run["pending_actions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let calls: Vec<String> = if named.is_empty() {
        pending
            .iter()
            .filter(|action| action["kind"] == "approval")
            .filter_map(|action| action["call_id"].as_str().map(str::to_owned))
            .collect()
    } else {
        named.into_iter().cloned().collect()
    };
    if calls.is_empty() {
        let client_tools: Vec<&str> = pending
            .iter()
            .filter(|action| action["kind"] == "client_tool")
            .filter_map(|action| action["call_id"].as_str())
            .collect();
        if !client_tools.is_empty() {
            return Err(CliError::Refused(format!(
                "the run waits on client tools, not approvals (calls {}): answer them with \
                 their output, POST /v1/runs/ID/actions",
                client_tools.join(", ")
            )));
        }
        return Err(CliError::Refused(format!(
            "the run has no pending approval (status {})",
            run["status"].as_str().unwrap_or("unknown")
        )));
    }
    let reason = answer
        .try_get_one::<String>("reason")
        .ok()
        .flatten()
        .cloned();
    let actions: Vec<Value> = calls
        .iter()
        .map(|call| {
            let mut action = json!({"call_id": call, "decision": decision});
            if let Some(reason) = &reason {
                action["reason"] = json!(reason);
            }
            action
        })
        .collect();
    let answered = client
        .post(&run_path(answer, "/actions"), &json!({"actions": actions}))
        .await?;
    print_run(&answered, json)?;
    Ok(ExitCode::SUCCESS)
}

fn print_run(run: &Value, json: bool) -> Result<(), CliError> {
    if json {
        return outln!("{run}");
    }
    let text = |key: &str| run[key].as_str().unwrap_or("-").to_owned();
    outln!("{}  {}", text("id"), text("status"))?;
    outln!("  prompt      {}", one_line(&text("prompt"), 100))?;
    outln!(
        "  steps       {}   tool calls {}",
        run["steps"],
        run["tool_calls"]
    )?;
    outln!("  created     {}", text("created_at"))?;
    if let Some(finished) = run["finished_at"].as_str() {
        outln!("  finished    {finished}")?;
    }
    if let Some(answer) = run["answer"].as_str() {
        outln!("  answer      {}", one_line(answer, 200))?;
    }
    if let Some(error) = run["error"].as_str() {
        outln!("  error       {}", one_line(error, 200))?;
    }
    for action in run["pending_actions"].as_array().into_iter().flatten() {
        outln!(
            "  pending     {} {} {} {}",
            action["call_id"].as_str().unwrap_or("-"),
            action["kind"].as_str().unwrap_or("-"),
            action["name"].as_str().unwrap_or("-"),
            action["arguments"]
        )?;
    }
    Ok(())
}

fn print_list(page: &Value, json: bool) -> Result<(), CliError> {
    if json {
        return outln!("{page}");
    }
    for run in page["runs"].as_array().into_iter().flatten() {
        outln!(
            "{}  {:<15}  {}  {}",
            run["id"].as_str().unwrap_or("-"),
            run["status"].as_str().unwrap_or("-"),
            run["created_at"].as_str().unwrap_or("-"),
            one_line(run["prompt"].as_str().unwrap_or(""), 60)
        )?;
    }
    Ok(())
}

fn print_messages(list: &Value, json: bool) -> Result<(), CliError> {
    if json {
        return outln!("{list}");
    }
    for message in list["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or("-");
        let content = message["content"].as_str().unwrap_or("");
        outln!("[{role}] {content}")?;
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            outln!(
                "  -> {}({})",
                call["name"].as_str().unwrap_or("-"),
                call["arguments"]
            )?;
        }
    }
    Ok(())
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let line: String = text.replace(['\n', '\r'], " ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max).collect();
    cut.push('…');
    cut
}
