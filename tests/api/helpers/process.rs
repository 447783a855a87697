//! The real binary as a process of its own: started on a free port with a
//! fresh data directory, reached over HTTP, stopped with SIGTERM or killed;
//! and the installs (npm, PyPI) that some tests need first.

use super::*;

/// A server running as its own process (the real binary), reached over HTTP.
pub struct Remote {
    pub client: reqwest::Client,
    pub address: String,
}

impl Remote {
    pub fn new(address: String) -> Self {
        Self {
            client: http_client(),
            address,
        }
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.address))
            .send()
            .await
            .unwrap()
    }

    pub async fn get_json(&self, path: &str) -> Value {
        self.get(path).await.json().await.unwrap()
    }

    /// Polls a run until it has the given status (within
    /// [`WAIT_AT_MOST`](super::WAIT_AT_MOST): a replica's takeover on a busy
    /// machine).
    pub async fn wait_status(&self, id: &str, status: &str) -> Value {
        super::eventually(&format!("run {id} to reach {status}"), async || {
            let run = self.get_json(&format!("/v1/runs/{id}")).await;
            (run["status"] == status).then_some(run)
        })
        .await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Value {
        self.client
            .post(format!("{}{path}", self.address))
            .json(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// Sends SIGTERM to a server process and waits (15 s at most) for its
/// exit; a server still there then is killed, and the test fails.
pub fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    let signal = |name: &str| {
        std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap()
    };
    signal("-TERM");
    std::thread::scope(|scope| {
        let (sender, exited) = std::sync::mpsc::channel();
        scope.spawn(move || sender.send(child.wait()));
        match exited.recv_timeout(Duration::from_secs(15)) {
            Ok(status) => status.unwrap(),
            Err(_) => {
                // The waiting thread returns once the server is gone.
                signal("-KILL");
                panic!("the server did not stop on SIGTERM");
            }
        }
    })
}

/// The real binary, serving from `dir`.
pub fn start_binary(dir: &TempDir) -> (ServerProcess, String) {
    start_binary_with(dir, &[])
}

/// The real binary, serving from `dir`, with more settings (`AGENT_RUNNER_...`
/// variables).
pub fn start_binary_with(dir: &TempDir, settings: &[(&str, &str)]) -> (ServerProcess, String) {
    let mut command = binary_command(dir, settings);
    let log = server_log(&mut command);
    command.stderr(log);
    spawn_listening(command)
}

/// Where a server's log goes: nowhere, unless `AGENT_RUNNER_TEST_LOGS`
/// names a directory, where each server then logs at `info` to a file of
/// its own (for a failure that only a full run shows).
pub fn server_log(command: &mut std::process::Command) -> std::process::Stdio {
    static SERVERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let Some(logs) = std::env::var_os("AGENT_RUNNER_TEST_LOGS") else {
        return std::process::Stdio::null();
    };
    let number = SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("server-{}-{number}.log", std::process::id());
    let file = std::fs::File::create(std::path::Path::new(&logs).join(name))
        .expect("a server's log file can be created");
    command.env("RUST_LOG", "info");
    file.into()
}

/// The command that serves the real binary from `dir` (a free loopback
/// port, its database and workspaces there, logging warnings), with more
/// settings; its stdout is piped (see [`spawn_listening`]).
pub fn binary_command(dir: &TempDir, settings: &[(&str, &str)]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agent-runner"));
    command
        .arg("serve")
        .env("AGENT_RUNNER_SERVER__BIND", "127.0.0.1:0")
        .env(
            "AGENT_RUNNER_STORAGE__DATABASE_URL",
            database_url(dir.path()),
        )
        .env(
            "AGENT_RUNNER_STORAGE__WORKSPACES_DIR",
            dir.path().join("workspaces"),
        )
        .env("AGENT_RUNNER_RUNS__LEASE_MS", TEST_LEASE_MS.to_string())
        .env("RUST_LOG", "warn");
    for (name, value) in settings {
        command.env(name, value);
    }
    command.stdout(std::process::Stdio::piped());
    command
}

/// Starts `command` (a server whose stdout is piped) and waits for the
/// address it prints it listens on.
pub fn spawn_listening(mut command: std::process::Command) -> (ServerProcess, String) {
    use std::io::{BufRead, BufReader};
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (ServerProcess(child), address)
}

/// A server process of a test, killed when dropped: a failed assertion
/// leaves none running behind it.
pub struct ServerProcess(std::process::Child);

impl std::ops::Deref for ServerProcess {
    type Target = std::process::Child;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for ServerProcess {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the install script `script` (a path under the project's root) and
/// returns the folder it prints: where it installed what a test drives.
pub fn installed(script: &str) -> String {
    let output = std::process::Command::new("bash")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(script))
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// The peak resident memory of the process `pid`, in MiB.
pub fn peak_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap();
    kib / 1024
}
