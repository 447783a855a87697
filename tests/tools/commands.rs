//! `run_command` with real child processes. The presets here use `sh -c` to
//! build process trees (forking grandchildren, `setsid`); the tool itself
//! never runs a shell.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runner::harness::Tool;
use agent_runner::tools::{
    CommandPreset, CommandPresets, CommandRunner, Containment, ContainmentKind, RunCommand,
    RunWorkspace, Sandbox, SandboxConfig, Workspace,
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// How long a killed process may take to disappear on a loaded machine.
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// A grandchild that writes its pid to `gc.pid` and sleeps; with `setsid`, it
/// first calls `setsid`, leaving the command's process group.
/// (`token` holds the fixture's own number, which makes the sleeper's
/// command line its own on the machine: its pid is its PID namespace's.)
const FORKS_A_SLEEPER: &str = r#"sh -c 'echo $$ > gc.pid; exec sleep 300.$(cat token)' & wait"#;
const FORKS_A_SETSID_SLEEPER: &str =
    r#"setsid sh -c 'echo $$ > gc.pid; exec sleep 300.$(cat token)' & wait"#;

struct Fixture {
    _dir: TempDir,
    /// What the sleepers of [`FORKS_A_SLEEPER`] sleep for past 300 s.
    token: String,
    workspace: Arc<Workspace>,
    runner: Arc<CommandRunner>,
    tool: RunCommand,
}

impl Fixture {
    /// An enforcing sandbox with the given containment.
    fn new(containment: Containment, presets: &[(&str, CommandPreset)]) -> Self {
        Self::with_sandbox(
            Sandbox::with_containment(&SandboxConfig::default(), containment),
            presets,
        )
    }

    fn with_sandbox(sandbox: Sandbox, presets: &[(&str, CommandPreset)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        static FIXTURES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        let token = format!(
            "{}{:04}",
            std::process::id(),
            FIXTURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        std::fs::write(dir.path().join("token"), &token).unwrap();
        let workspace = Arc::new(Workspace::open(dir.path()).unwrap());
        let presets: CommandPresets = presets.iter().cloned().collect();
        let names: Vec<String> = presets.names().map(str::to_owned).collect();
        let runner = Arc::new(CommandRunner::new(presets, Arc::new(sandbox)));
        let tool = RunCommand::new(
            runner.clone(),
            Arc::new(RunWorkspace::from(Arc::clone(&workspace))),
            names,
        )
        .unwrap();
        Self {
            _dir: dir,
            token,
            workspace,
            runner,
            tool,
        }
    }

    /// With whatever containment this machine offers (a cgroup, here).
    fn detected(presets: &[(&str, CommandPreset)]) -> Self {
        let fixture = Self::new(Containment::detect(), presets);
        assert_eq!(
            fixture.runner.sandbox().containment().kind(),
            ContainmentKind::Cgroup,
            "this machine offers a writable cgroup v2"
        );
        fixture
    }

    async fn run(&self, name: &str) -> Result<Value, String> {
        self.run_until(name, &CancellationToken::new()).await
    }

    async fn run_until(&self, name: &str, cancel: &CancellationToken) -> Result<Value, String> {
        self.tool
            .execute(&json!({ "command": name }), cancel)
            .await
            .map_err(|error| error.message().to_owned())
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.workspace.root().join(relative)
    }

    /// The grandchild, once it has written its pid (its pid in its
    /// command's PID namespace).
    async fn grandchild(&self) -> Grandchild {
        let file = self.path("gc.pid");
        eventually(|| {
            std::fs::read_to_string(&file)
                .is_ok_and(|text| !text.trim().is_empty())
                .then_some(())
        })
        .await
        .expect("the grandchild never started");
        Grandchild(format!("300.{}", self.token))
    }

    /// The per-command cgroups left under the server's cgroup.
    fn leftover_cgroups(&self) -> Vec<String> {
        let Some(dir) = self.runner.sandbox().containment().cgroup_dir() else {
            return vec![];
        };
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|entry| {
                let entry = entry.unwrap();
                entry
                    .file_type()
                    .unwrap()
                    .is_dir()
                    .then(|| entry.file_name().to_string_lossy().into_owned())
            })
            .collect()
    }
}

/// What this machine's sandbox reports for a preset without settings of
/// its own.
fn enforced() -> Value {
    json!({"filesystem": "landlock", "network": "blocked",
           "memory_max_bytes": 1_073_741_824u64, "pids_max": 256})
}

fn sh(script: &str) -> CommandPreset {
    CommandPreset::new("sh", ["-c", script])
}

/// A sleeper of [`FORKS_A_SLEEPER`], known by its command line.
#[derive(Debug)]
struct Grandchild(String);

impl Grandchild {
    /// Its pid once it runs as `sleep`: its pid file is written before its
    /// shell execs the sleep, whose command line names it.
    async fn running(&self) -> i32 {
        let never = format!("{self} never ran");
        eventually(|| self.pid()).await.expect(&never)
    }

    /// Its pid on this machine while it is alive.
    fn pid(&self) -> Option<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|&pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                    line.split(|&b| b == 0)
                        .any(|part| part == self.0.as_bytes())
                }) && is_alive(pid)
            })
    }
}

impl std::fmt::Display for Grandchild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sleep {}", self.0)
    }
}

/// Alive: it exists and is not a zombie waiting for its new parent to reap
/// it.
fn is_alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// Field 6 of `/proc/PID/stat`: the id `setsid` sets (the process's own
/// pid once it has called it).
fn sid_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(") ").unwrap();
    rest.split(' ').nth(3).unwrap().parse().unwrap()
}

async fn eventually_gone(grandchild: &Grandchild) -> bool {
    eventually(|| grandchild.pid().is_none().then_some(()))
        .await
        .is_some()
}

/// What `probe` finds once it finds something, looking again every 10 ms
/// for [`GONE_WITHIN`]; `None` if it never did.
async fn eventually<T>(mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn kill(pid: i32) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    );
}

#[tokio::test]
async fn output_and_exit_codes_are_reported() {
    let f = Fixture::detected(&[
        ("fails", sh("echo out; echo err >&2; exit 3")),
        ("succeeds", CommandPreset::new("true", Vec::<String>::new())),
        ("terminated", sh("echo before; kill -TERM $$; echo after")),
        ("where", CommandPreset::new("pwd", Vec::<String>::new())),
        (
            "reads_stdin",
            CommandPreset::new("cat", Vec::<String>::new()),
        ),
    ]);
    assert_eq!(
        f.run("fails").await,
        Ok(json!({"exit_code": 3, "stdout": "out\n", "stderr": "err\n",
                  "timed_out": false, "truncated": false, "sandbox": enforced()}))
    );
    assert_eq!(
        f.run("succeeds").await,
        Ok(
            json!({"exit_code": 0, "stdout": "", "stderr": "", "timed_out": false, "truncated": false,
                   "sandbox": enforced()})
        )
    );
    assert_eq!(
        f.run("terminated").await,
        Ok(
            json!({"exit_code": null, "signal": "SIGTERM", "stdout": "before\n", "stderr": "",
                  "timed_out": false, "truncated": false, "sandbox": enforced()})
        )
    );
    // A command sees its workspace at /workspace, and runs there.
    assert_eq!(f.run("where").await.unwrap()["stdout"], "/workspace\n");
    // stdin is closed: `cat` sees its end at once.
    assert_eq!(f.run("reads_stdin").await.unwrap()["exit_code"], 0);
    assert_eq!(f.leftover_cgroups(), Vec::<String>::new());
}

#[tokio::test]
async fn arguments_reach_the_program_literally_with_no_shell() {
    let args = [
        "$HOME", ";", "|", "ls", "`id`", "$(id)", "*", "&&", ">", "x",
    ];
    let f = Fixture::detected(&[("echo", CommandPreset::new("echo", args))]);
    let output = f.run("echo").await.unwrap();
    assert_eq!(output["stdout"], "$HOME ; | ls `id` $(id) * && > x\n");
    assert!(!f.path("x").exists(), "no redirection happened");
}

#[tokio::test]
#[allow(unsafe_code)]
async fn the_environment_is_cleared_to_an_allowlist() {
    // SAFETY: only Rust code runs in this test binary, and std serialises its
    // own environment reads and writes; the variable is unique to this test.
    unsafe { std::env::set_var("AGENT_RUNNER_TEST_SECRET", "do-not-leak") };
    let f = Fixture::detected(&[("env", CommandPreset::new("env", Vec::<String>::new()))]);
    let output = f.run("env").await.unwrap();
    let stdout = output["stdout"].as_str().unwrap();
    assert!(!stdout.contains("do-not-leak"), "{stdout}");
    let mut names: Vec<&str> = stdout
        .lines()
        .map(|line| line.split_once('=').unwrap().0)
        .collect();
    names.sort();
    names.retain(|name| !matches!(*name, "LANG" | "TZ"));
    assert_eq!(names, ["HOME", "PATH", "TMPDIR"]);
    assert!(
        stdout.lines().any(|line| line == "HOME=/workspace"),
        "{stdout}"
    );
    assert!(stdout.lines().any(|line| line == "TMPDIR=/tmp"), "{stdout}");
}

#[tokio::test]
async fn a_commands_private_tmpdir_is_removed_after_it() {
    // The command sees its TMPDIR as /tmp; the test finds the directory
    // behind it by a file only this command writes there, and lets the
    // command end once it has.
    let marker = format!("marker-{}", uuid::Uuid::now_v7());
    let f = Fixture::detected(&[(
        "fill",
        sh(&format!(
            r#"mkdir "$TMPDIR/d" && for i in 1 2 3; do echo $i > "$TMPDIR/d/$i"; done && \
               touch "$TMPDIR/{marker}" && echo "$TMPDIR" && \
               while [ ! -e "$TMPDIR/go" ]; do sleep 0.02; done"#
        )),
    )]);
    let find = async {
        let tmp = eventually(|| {
            std::fs::read_dir(std::env::temp_dir())
                .unwrap()
                .filter_map(Result::ok)
                .map(|entry| entry.path().join("tmp"))
                .find(|tmp| tmp.join(&marker).exists())
        })
        .await
        .expect("the command's TMPDIR was not found");
        std::fs::write(tmp.join("go"), "").unwrap();
        tmp
    };
    let (output, tmp) = tokio::join!(f.run("fill"), find);
    let output = output.unwrap();
    assert_eq!(output["exit_code"], 0, "{output}");
    assert_eq!(output["stdout"], "/tmp\n", "{output}");
    // The removal runs on a blocking thread, after the result.
    let gone = eventually(|| (!tmp.exists()).then_some(())).await;
    assert!(gone.is_some(), "{} is still there", tmp.display());
}

#[tokio::test]
async fn a_preset_that_cannot_start_is_a_tool_error_and_unlisted_names_are_refused() {
    let f = Fixture::detected(&[("missing", CommandPreset::new("/nonexistent/program", ["x"]))]);
    assert_eq!(
        f.run("missing").await,
        Err("Command could not start: missing (/nonexistent/program): program not found".into())
    );
    assert_eq!(
        f.run("deploy").await,
        Err("Command not permitted: deploy (allowed: missing)".into())
    );
    assert_eq!(f.leftover_cgroups(), Vec::<String>::new());
}

#[tokio::test]
async fn a_timeout_kills_a_forking_grandchild() {
    let f = Fixture::detected(&[("forks", sh(FORKS_A_SLEEPER).with_timeout_ms(1500))]);
    let started = Instant::now();
    let output = f.run("forks").await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(output["timed_out"], true);
    assert_eq!(output["exit_code"], Value::Null);
    assert_eq!(output["signal"], "SIGKILL");
    let grandchild = f.grandchild().await;
    assert!(
        eventually_gone(&grandchild).await,
        "grandchild {grandchild} survived"
    );
    assert_eq!(f.leftover_cgroups(), Vec::<String>::new());
}

#[tokio::test]
async fn a_timeout_kills_a_grandchild_that_called_setsid() {
    let f = Fixture::detected(&[("escapes", sh(FORKS_A_SETSID_SLEEPER).with_timeout_ms(1500))]);
    let output = f.run("escapes").await.unwrap();
    assert_eq!(output["timed_out"], true);
    let grandchild = f.grandchild().await;
    assert!(
        eventually_gone(&grandchild).await,
        "grandchild {grandchild} survived"
    );
    assert_eq!(f.leftover_cgroups(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_kills_the_whole_tree_within_500_ms() {
    let f = Fixture::detected(&[(
        "escapes",
        sh(FORKS_A_SETSID_SLEEPER).with_timeout_ms(60_000),
    )]);
    let cancel = CancellationToken::new();
    let run = async {
        let result = f.run_until("escapes", &cancel).await;
        (result, Instant::now())
    };
    let canceller = async {
        let grandchild = f.grandchild().await;
        // It really called setsid, so its process group is no longer the
        // command's.
        let pid = grandchild.running().await;
        assert_eq!(sid_of(pid), pid);
        let cancelled_at = Instant::now();
        cancel.cancel();
        (grandchild, cancelled_at)
    };
    let ((result, returned_at), (grandchild, cancelled_at)) = tokio::join!(run, canceller);
    let took = returned_at - cancelled_at;
    println!("cancel to return: {took:?}");
    assert!(took < Duration::from_millis(500), "took {took:?}");
    assert_eq!(
        result,
        Err("Command cancelled: the run was stopped before escapes finished".into())
    );
    assert!(
        eventually_gone(&grandchild).await,
        "grandchild {grandchild} survived"
    );
    assert_eq!(f.leftover_cgroups(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_running_command_kills_its_tree() {
    let f = Fixture::detected(&[(
        "escapes",
        sh(FORKS_A_SETSID_SLEEPER).with_timeout_ms(60_000),
    )]);
    let grandchild = tokio::select! {
        _ = f.run("escapes") => panic!("the command ended on its own"),
        grandchild = f.grandchild() => grandchild,
    };
    // The run's future is dropped here, as the harness drops a tool that
    // ignores cancellation.
    assert!(
        eventually_gone(&grandchild).await,
        "grandchild {grandchild} survived"
    );
    eventually(|| f.leftover_cgroups().is_empty().then_some(())).await;
    assert_eq!(f.leftover_cgroups(), Vec::<String>::new());
}

#[tokio::test]
async fn what_a_command_leaves_running_is_ended_with_it() {
    let f = Fixture::detected(&[(
        "background",
        // It ends once the sleeper has written its pid (it is then there
        // to be left running).
        sh("sh -c 'echo $$ > gc.pid; exec sleep 300.$(cat token)' & \
             while [ ! -s gc.pid ]; do sleep 0.01; done; echo started"),
    )]);
    let started = Instant::now();
    let output = f.run("background").await.unwrap();
    // Not held up by the sleeper, which still had the pipes open.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(output["stdout"], "started\n");
    assert_eq!(output["exit_code"], 0);
    let grandchild = f.grandchild().await;
    assert!(
        eventually_gone(&grandchild).await,
        "grandchild {grandchild} survived"
    );
}

#[tokio::test]
async fn overflowing_stdout_kills_the_command_and_keeps_65536_characters() {
    let f = Fixture::detected(&[("floods", sh("yes"))]);
    let output = f.run("floods").await.unwrap();
    assert_eq!(output["truncated"], true);
    assert_eq!(output["timed_out"], false);
    assert_eq!(output["exit_code"], Value::Null, "{}", output["signal"]);
    let stdout = output["stdout"].as_str().unwrap();
    assert_eq!(stdout.chars().count(), 65_536);
    assert!(stdout.starts_with("y\ny\n"));
    assert_eq!(f.leftover_cgroups(), Vec::<String>::new());
}

#[tokio::test]
async fn overflowing_stderr_kills_the_command_and_keeps_65536_characters() {
    let f = Fixture::detected(&[("floods", sh("echo visible; yes err >&2"))]);
    let output = f.run("floods").await.unwrap();
    assert_eq!(output["truncated"], true);
    assert_eq!(output["stdout"], "visible\n");
    assert_eq!(output["stderr"].as_str().unwrap().chars().count(), 65_536);
}

#[tokio::test]
async fn the_limit_counts_characters_not_bytes() {
    let f = Fixture::detected(&[
        // 30,000 lines of "é\n": 60,000 characters in 90,000 bytes.
        ("accents", sh("yes é | head -n 30000")),
        // Exactly the limit.
        ("exact", sh("head -c 65536 /dev/zero | tr '\\0' a")),
    ]);
    let output = f.run("accents").await.unwrap();
    assert_eq!(output["truncated"], false);
    assert_eq!(output["stdout"].as_str().unwrap().chars().count(), 60_000);
    let output = f.run("exact").await.unwrap();
    assert_eq!(output["truncated"], false);
    assert_eq!(output["stdout"].as_str().unwrap().len(), 65_536);
}

#[tokio::test]
async fn with_process_groups_only_a_timeout_still_kills_a_forking_grandchild() {
    let f = Fixture::new(
        Containment::process_group_only(),
        &[("forks", sh(FORKS_A_SLEEPER).with_timeout_ms(1500))],
    );
    let output = f.run("forks").await.unwrap();
    assert_eq!(output["timed_out"], true);
    let grandchild = f.grandchild().await;
    assert!(
        eventually_gone(&grandchild).await,
        "grandchild {grandchild} survived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_process_groups_only_cancellation_returns_within_500_ms() {
    let f = Fixture::new(
        Containment::process_group_only(),
        &[("forks", sh(FORKS_A_SLEEPER).with_timeout_ms(60_000))],
    );
    let cancel = CancellationToken::new();
    let run = async { (f.run_until("forks", &cancel).await, Instant::now()) };
    let canceller = async {
        let grandchild = f.grandchild().await;
        let cancelled_at = Instant::now();
        cancel.cancel();
        (grandchild, cancelled_at)
    };
    let ((result, returned_at), (grandchild, cancelled_at)) = tokio::join!(run, canceller);
    assert!(result.is_err());
    assert!(returned_at - cancelled_at < Duration::from_millis(500));
    assert!(
        eventually_gone(&grandchild).await,
        "grandchild {grandchild} survived"
    );
}

/// A process group alone cannot hold a descendant that calls `setsid`;
/// the command's PID namespace does: its init's end kills all of it.
#[tokio::test]
async fn with_process_groups_only_a_setsid_grandchild_ends_with_its_namespace() {
    let f = Fixture::new(
        Containment::process_group_only(),
        &[("escapes", sh(FORKS_A_SETSID_SLEEPER).with_timeout_ms(1000))],
    );
    let output = f.run("escapes").await.unwrap();
    assert_eq!(output["timed_out"], true);
    let grandchild = f.grandchild().await;
    let gone = eventually_gone(&grandchild).await;
    if let Some(pid) = grandchild.pid() {
        kill(pid);
    }
    assert!(gone, "the setsid grandchild outlived its command");
}

#[test]
fn the_cgroup_lives_under_this_process_cgroup_v2() {
    let containment = Containment::detect();
    let dir: &Path = containment.cgroup_dir().unwrap();
    assert!(dir.join("cgroup.kill").is_file());
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(&format!("agent-runner-{}-", std::process::id())));
}
