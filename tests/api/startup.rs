//! Starting the real binary: one server per SQLite file, `config` refusing
//! what `serve` refuses, and a start that fails leaving nothing behind and
//! saying which database it could not open.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::helpers::*;

/// How long a refused start may take to exit.
const EXIT_DEADLINE: Duration = Duration::from_secs(30);

/// Runs the binary with `args` in `cwd`, with only the given settings of
/// ours in its environment, to its exit.
fn run_binary(cwd: &Path, args: &[&str], settings: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-runner"));
    command
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in settings {
        command.env(name, value);
    }
    exited(command)
}

/// What `command` printed once it exited; a failed test (and the process
/// killed) if it still runs after [`EXIT_DEADLINE`].
fn exited(mut command: Command) -> Output {
    let child = command.spawn().unwrap();
    let pid = child.id();
    let (done, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match output.recv_timeout(EXIT_DEADLINE) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            panic!("{command:?} still runs after {EXIT_DEADLINE:?}")
        }
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The names in `dir`.
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test]
async fn a_second_server_on_the_same_sqlite_file_refuses_to_start_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    // A SQLite file, whichever engine the suite runs on.
    let sqlite = format!("sqlite://{}/runs.db", dir.path().display());
    let on_sqlite = [("AGENT_RUNNER_STORAGE__DATABASE_URL", sqlite.as_str())];
    let (mut first, address) = start_binary_with(&dir, &on_sqlite);
    let server = Remote::new(address);
    let run = server
        .post_json("/v1/runs?wait=true", &serde_json::json!({"prompt": "hi"}))
        .await;
    assert_eq!(run["status"], "completed", "{run}");

    let mut second = binary_command(&dir, &on_sqlite);
    second.stderr(Stdio::piped());
    let second = exited(second);
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    let said = stderr(&second);
    assert!(
        said.contains("in use by another agent-runner server"),
        "{said}"
    );
    assert!(said.contains(&format!("pid {}", first.id())), "{said}");
    assert!(said.contains("runs.db.lock"), "{said}");
    // The first one never noticed.
    assert_eq!(server.get("/readyz").await.status(), 200);
    let id = run["id"].as_str().unwrap();
    assert_eq!(
        server.get_json(&format!("/v1/runs/{id}")).await["status"],
        "completed"
    );

    // Once it is gone, the file is another server's to open.
    assert!(terminate(&mut first).success());
    let (_again, address) = start_binary_with(&dir, &on_sqlite);
    let again = Remote::new(address);
    assert_eq!(
        again.get_json(&format!("/v1/runs/{id}")).await["status"],
        "completed"
    );
}

/// `AGENT_RUNNER_...` variables and their values.
type Settings<'a> = &'a [(&'a str, &'a str)];

/// Each configuration `serve` refuses, `config` refuses too, with the same
/// reason and exit code 2; neither creates anything (the default database
/// and workspaces would be under `./data`).
#[test]
fn config_refuses_what_serve_refuses_and_neither_creates_anything() {
    let missing_key = "AGENT_RUNNER_TEST_UNSET_KEY";
    let refused: [(&str, Settings, &str); 4] = [
        (
            "an unknown default model",
            &[("AGENT_RUNNER_RUNS__DEFAULT_MODEL", "\"nope\"")],
            "runs.default_model",
        ),
        (
            "a profile whose key variable is unset",
            &[(
                "AGENT_RUNNER_MODELS__LOCAL",
                "{kind = \"openai\", model = \"m\", api_key_env = \"AGENT_RUNNER_TEST_UNSET_KEY\"}",
            )],
            missing_key,
        ),
        (
            "workspaces that every command could read",
            &[
                (
                    "AGENT_RUNNER_STORAGE__WORKSPACES_DIR",
                    "\"/etc/agent-runs\"",
                ),
                (
                    "AGENT_RUNNER_COMMANDS__TEST",
                    "{program = \"true\", args = []}",
                ),
            ],
            "overlaps the sandbox read path /etc",
        ),
        (
            "profiles that fall back to each other",
            &[
                (
                    "AGENT_RUNNER_MODELS__ONE",
                    "{kind = \"scripted\", script = [{content = \"hi\"}], fallback = [\"two\"]}",
                ),
                (
                    "AGENT_RUNNER_MODELS__TWO",
                    "{kind = \"scripted\", script = [{content = \"hi\"}], fallback = [\"one\"]}",
                ),
            ],
            "`fallback` makes a cycle: one -> two -> one",
        ),
    ];
    for (what, settings, reason) in refused {
        let cwd = tempfile::tempdir().unwrap();
        let checked = run_binary(cwd.path(), &["config"], settings);
        assert_eq!(
            checked.status.code(),
            Some(2),
            "config, {what}: {checked:?}"
        );
        assert!(
            stderr(&checked).contains(reason),
            "config, {what}: {checked:?}"
        );
        assert!(checked.stdout.is_empty(), "config, {what}: {checked:?}");
        let mut serving = settings.to_vec();
        serving.push(("AGENT_RUNNER_SERVER__BIND", "\"127.0.0.1:0\""));
        let served = run_binary(cwd.path(), &["serve"], &serving);
        assert!(!served.status.success(), "serve, {what}: {served:?}");
        assert!(
            stderr(&served).contains(reason),
            "serve, {what}: {served:?}"
        );
        assert_eq!(entries(cwd.path()), Vec::<String>::new(), "{what}");
    }
    assert!(!Path::new("/etc/agent-runs").exists());
    // A configuration both take is printed.
    let cwd = tempfile::tempdir().unwrap();
    let printed = run_binary(cwd.path(), &["config"], &[]);
    assert_eq!(printed.status.code(), Some(0), "{printed:?}");
    assert!(entries(cwd.path()).is_empty());
}

/// A database that cannot be opened is named in the error (its password
/// redacted), and the workspaces directory is not made for it.
#[test]
fn a_database_that_cannot_be_opened_is_named_and_nothing_is_created() {
    let cwd = tempfile::tempdir().unwrap();
    let workspaces = cwd.path().join("srv/workspaces");
    let url = format!(
        "\"postgres://runner:pg-secret@127.0.0.1:{}/agents\"",
        free_port()
    );
    let workspaces_setting = format!("\"{}\"", workspaces.display());
    let served = run_binary(
        cwd.path(),
        &["serve"],
        &[
            ("AGENT_RUNNER_SERVER__BIND", "\"127.0.0.1:0\""),
            ("AGENT_RUNNER_STORAGE__DATABASE_URL", &url),
            ("AGENT_RUNNER_STORAGE__WORKSPACES_DIR", &workspaces_setting),
        ],
    );
    assert_eq!(served.status.code(), Some(1), "{served:?}");
    let said = stderr(&served);
    assert!(
        said.contains("cannot open the database postgres://runner:<redacted>@127.0.0.1:"),
        "{said}"
    );
    assert!(!said.contains("pg-secret"), "{said}");
    assert_eq!(entries(cwd.path()), Vec::<String>::new());
}
