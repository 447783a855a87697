//! The command sandbox, attacked the way a model's code would attack it:
//! through the documented API, a real preset (`python3 main.py`) running a
//! `main.py` the run seeded, real processes under the real kernel. Each
//! attack prints what it got; a denied access is the command's own
//! failure, a result like any other.
//!
//! Where an attack could pass for denied by accident (a wrong path, a
//! typo), the same script also runs with `mode = "off"` and succeeds, so
//! the test would notice a sandbox that stopped holding.
//!
//! A command has a `/tmp` of its own, so the servers here keep their data
//! in a directory under `/var/tmp` that every user may traverse: what the
//! attacks aim at is then in view, and Landlock (or, for a change of mode
//! or times, the read-only mounts of the command's namespace), not a
//! hidden path or the directory's mode, is what stops them.
//!
//! [`apart`]: runs cannot touch each other, with the server as root, as a
//! user with user namespaces and as a user without them.
//!
//! [`layout`]: who a command runs as and what it sees (its user, its
//! `/workspace`, `/tmp` and `/dev/shm`, its preset's read paths and
//! environment).

mod apart;
mod layout;
mod unprivileged;

use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::time::Duration;

use agent_runner::app::Application;
use agent_runner::config::Config;
use agent_runner::tools::{CommandPreset, SandboxMode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, call, spawn_in, test_config};

/// Debian's interpreter: `/usr` is a read path, wherever the server's own
/// `PATH` points.
const PYTHON: &str = "/usr/bin/python3";

/// A preset running the run's `main.py`.
fn python() -> CommandPreset {
    CommandPreset::new(PYTHON, ["main.py"])
}

/// A directory outside `/tmp` (which a command does not see), wherever the
/// checkout is, that every user may traverse, as `/srv` would be.
fn visible_dir() -> tempfile::TempDir {
    traversable(tempfile::tempdir_in("/var/tmp").unwrap())
}

fn traversable(dir: tempfile::TempDir) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

async fn server(mode: SandboxMode, configure: impl FnOnce(&mut Config)) -> TestApp {
    let dir = visible_dir();
    let mut config = test_config(&dir);
    config.sandbox.mode = mode;
    config.commands.insert("py".into(), python());
    configure(&mut config);
    spawn_in(dir, config).await
}

/// Runs `script` as `main.py` through the preset `preset`, and returns the
/// `run_command` result.
async fn run_script(app: &TestApp, preset: &str, script: &str) -> Value {
    run_with_files(app, preset, json!({"main.py": script}))
        .await
        .1
}

/// Runs the preset `preset` once in a workspace seeded with `files`, and
/// returns the run's id and the `run_command` result.
async fn run_with_files(app: &TestApp, preset: &str, files: Value) -> (String, Value) {
    let run = app
        .run_to_end(json!({
            "prompt": "run it",
            "commands": [preset],
            "workspace": {"files": files},
            "limits": {"timeout_ms": 60000},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("1", "run_command", json!({"command": preset}))]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let messages = app.messages(&id).await;
    let result = &messages[2];
    assert_eq!(result["is_error"], false, "{result}");
    let result = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    (id, result)
}

/// Runs [`attempt`] of `statements` through the plain Python preset.
async fn attack(app: &TestApp, statements: &str) -> Value {
    run_script(app, "py", &attempt(statements)).await
}

/// A script that tries `attempt` (Python statements) and prints `OK` and
/// what it got, or `DENIED` and the error.
fn attempt(attempt: &str) -> String {
    let body: String = attempt
        .lines()
        .map(|line| format!("    {line}\n"))
        .collect();
    format!(
        "import os, socket, sys\ntry:\n{body}    print('OK', repr(got)[:200])\n\
         except Exception as error:\n    print('DENIED', type(error).__name__, error)\n"
    )
}

fn stdout(result: &Value) -> &str {
    result["stdout"].as_str().unwrap()
}

/// Refused by Landlock (`EACCES`), or, for a change outside the command's
/// own directories, by their mount being read-only (`EROFS`).
fn assert_denied(result: &Value) {
    let out = stdout(result);
    assert!(
        out.starts_with("DENIED PermissionError") || out.starts_with("DENIED OSError [Errno 30]"),
        "{result}"
    );
}

fn assert_allowed(result: &Value) {
    assert!(stdout(result).starts_with("OK"), "{result}");
}

fn python_str(path: &Path) -> String {
    serde_json::to_string(path.to_str().unwrap()).unwrap()
}

#[tokio::test]
async fn a_command_cannot_read_or_rewrite_the_database() {
    for mode in [SandboxMode::Enforce, SandboxMode::Off] {
        // A database that is a file, whatever the suite's backend.
        let app = server(mode, |config| {
            let dir = config.storage.workspaces_dir.parent().unwrap().to_owned();
            config.storage.database_url = format!("sqlite://{}/runs.db", dir.display());
        })
        .await;
        let db = python_str(&app.dir.path().join("runs.db"));
        let read = attack(&app, &format!("got = open({db}, 'rb').read(16)")).await;
        let write = attack(&app, &format!("got = open({db}, 'r+b')")).await;
        match mode {
            SandboxMode::Enforce => {
                assert_denied(&read);
                assert_denied(&write);
                assert_eq!(
                    read["sandbox"],
                    json!({"filesystem": "landlock", "network": "blocked",
                           "memory_max_bytes": 1_073_741_824u64, "pids_max": 256})
                );
            }
            SandboxMode::Off => {
                assert!(stdout(&read).contains("SQLite format 3"), "{read}");
                assert_eq!(read["sandbox"]["filesystem"], "none");
                assert_eq!(read["sandbox"]["network"], "allowed");
            }
        }
    }
}

#[tokio::test]
async fn a_command_cannot_read_the_config_file_with_the_tokens() {
    let dir = visible_dir();
    let file = dir.path().join("agent-runner.toml");
    std::fs::write(
        &file,
        format!(
            "[[auth.tokens]]\ntenant = \"a\"\ntoken = \"tenant-a-secret-token\"\n\
             [commands.py]\nprogram = \"{PYTHON}\"\nargs = [\"main.py\"]\n"
        ),
    )
    .unwrap();
    let mut config = Config::load(Some(&file), Vec::new()).unwrap();
    let defaults = test_config(&dir);
    config.server = defaults.server;
    config.storage = defaults.storage;
    let app = spawn_in(dir, config).await;
    let result = attack(&app, &format!("got = open({}).read()", python_str(&file))).await;
    assert_denied(&result);
    assert!(!result.to_string().contains("tenant-a-secret-token"));
}

#[tokio::test]
async fn a_command_cannot_read_the_servers_environment_through_proc() {
    for mode in [SandboxMode::Enforce, SandboxMode::Off] {
        let app = server(mode, |_| {}).await;
        // The parent of the command is the server (here, the test binary).
        let result = attack(
            &app,
            "got = open(f'/proc/{os.getppid()}/environ', 'rb').read()",
        )
        .await;
        match mode {
            SandboxMode::Enforce => assert_denied(&result),
            SandboxMode::Off => assert_allowed(&result),
        }
    }
}

#[tokio::test]
async fn a_command_cannot_read_list_or_overwrite_another_runs_workspace() {
    let app = server(SandboxMode::Enforce, |_| {}).await;
    let other = app
        .run_to_end(json!({
            "prompt": "keep this",
            "workspace": {"files": {"secret.txt": "the other tenant's work"}},
            "model": {"scripted": [{"content": "kept"}]}
        }))
        .await;
    let workspaces = app.dir.path().join("workspaces");
    let secret = workspaces
        .join(other["id"].as_str().unwrap())
        .join("secret.txt");
    // Read and write: Landlock. Changing its mode (which Landlock does not
    // mediate): its mount is read-only in the command's namespace.
    let read = attack(&app, &format!("got = open({}).read()", python_str(&secret))).await;
    assert_denied(&read);
    let write = attack(
        &app,
        &format!("got = open({}, 'w').write('forged')", python_str(&secret)),
    )
    .await;
    assert_denied(&write);
    let chmod = attack(&app, &format!("got = os.chmod({}, 0)", python_str(&secret))).await;
    assert!(
        stdout(&chmod).starts_with("DENIED OSError [Errno 30]"),
        "{chmod}"
    );
    let list = attack(
        &app,
        &format!("got = os.listdir({})", python_str(&workspaces)),
    )
    .await;
    assert_denied(&list);
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "the other tenant's work"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o644
    );
}

#[tokio::test]
async fn a_command_cannot_write_outside_its_workspace_and_tmpdir() {
    let app = server(SandboxMode::Enforce, |_| {}).await;
    let target = app.dir.path().join("escape.txt");
    let result = attack(
        &app,
        &format!("got = open({}, 'w').write('x')", python_str(&target)),
    )
    .await;
    assert_denied(&result);
    assert!(!target.exists());
    let home = attack(&app, "got = open('/root/planted', 'w')").await;
    assert_denied(&home);
}

#[tokio::test]
async fn a_command_cannot_open_a_tcp_connection_or_send_a_udp_datagram() {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let app = server(SandboxMode::Enforce, |_| {}).await;
    let connect = attack(
        &app,
        &format!(
            "got = socket.create_connection(('127.0.0.1', {}), timeout=2)",
            tcp.local_addr().unwrap().port()
        ),
    )
    .await;
    assert_denied(&connect);
    let send = attack(
        &app,
        &format!(
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             got = s.sendto(b'leak', ('127.0.0.1', {}))",
            udp.local_addr().unwrap().port()
        ),
    )
    .await;
    assert_denied(&send);
    let ipv6 = attack(
        &app,
        "got = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)",
    )
    .await;
    assert_denied(&ipv6);
    // A UNIX socket reaches host daemons by path: none either.
    let unix = attack(&app, "got = socket.socket(socket.AF_UNIX)").await;
    assert_denied(&unix);
    assert_eq!(
        tcp.accept().map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::WouldBlock),
        "the TCP listener saw a connection"
    );
    let mut buffer = [0u8; 16];
    assert!(udp.recv_from(&mut buffer).is_err(), "a datagram arrived");
}

#[tokio::test]
async fn a_preset_with_network_connects() {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let app = server(SandboxMode::Enforce, |config| {
        let mut net = python();
        net.network = true;
        config.commands.insert("net".into(), net);
    })
    .await;
    let accepted = std::thread::spawn(move || {
        let (mut stream, _) = tcp.accept().unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut stream, &mut got).unwrap();
        got
    });
    let result = run_script(
        &app,
        "net",
        &attempt(&format!(
            "s = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n\
             s.sendall(b'hello')\ns.close()\ngot = 'sent'"
        )),
    )
    .await;
    assert_allowed(&result);
    assert_eq!(result["sandbox"]["network"], "allowed");
    assert_eq!(accepted.join().unwrap(), "hello");
}

#[tokio::test]
async fn a_command_cannot_leave_its_cgroup_or_make_a_sibling() {
    let app = server(SandboxMode::Enforce, |_| {}).await;
    // Its own cgroup v2 is `.../agent-runner-PID-N/cmd-M`: the server's is
    // the parent.
    let script = r#"
import os, subprocess
own = [l for l in open('/proc/self/cgroup').read().splitlines() if l.startswith('0::')][0][3:]
server = '/sys/fs/cgroup/unified' + os.path.dirname(own)
tries = {
    'sibling': lambda: os.mkdir(server + '/escape'),
    'join_server': lambda: open(server + '/cgroup.procs', 'w').write(str(os.getpid())),
    'join_root': lambda: open('/sys/fs/cgroup/unified/cgroup.procs', 'w').write(str(os.getpid())),
    'v1_sibling': lambda: os.mkdir('/sys/fs/cgroup/pids/escape'),
    'own_cgroup': lambda: open('/sys/fs/cgroup/unified' + own + '/cgroup.procs', 'w').write('0'),
}
for name, attempt in tries.items():
    try:
        attempt()
        print(name, 'OK')
    except Exception as error:
        print(name, type(error).__name__, getattr(error, 'errno', ''))
# A descendant that leaves the process group, and would like to outlive the run.
child = subprocess.Popen(['setsid', 'sleep', '300.4242'])
print('server', server)
"#;
    let (_, result) = run_with_files(&app, "py", json!({"main.py": script})).await;
    let out = stdout(&result);
    for name in [
        "sibling",
        "join_server",
        "join_root",
        "v1_sibling",
        "own_cgroup",
    ] {
        assert!(
            out.contains(&format!("{name} PermissionError"))
                || out.contains(&format!("{name} OSError 30")),
            "{name}: {result}"
        );
    }
    assert!(
        !Path::new(out.lines().last().unwrap().trim_start_matches("server "))
            .join("escape")
            .exists()
    );
    // Its pid is its namespace's: found by what it runs.
    crate::helpers::eventually("the setsid sleeper to end with its run", async || {
        process_with("300.4242").is_none().then_some(())
    })
    .await;
}

/// A live (not zombie) process of the machine with `argument` on its
/// command line, and its state letter.
fn process_with(argument: &str) -> Option<(i32, char)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find_map(|pid| {
            let line = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            if !line
                .split(|&b| b == 0)
                .any(|part| part == argument.as_bytes())
            {
                return None;
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            (state != 'Z').then_some((pid, state))
        })
}

/// A run of the preset `py` on `script` as `main.py`, waited for.
fn python_run(script: &str) -> Value {
    json!({"prompt": "run it", "commands": ["py"],
           "workspace": {"files": {"main.py": script}},
           "limits": {"timeout_ms": 60000},
           "model": {"scripted": [
               {"content": "", "tool_calls": [call("1", "run_command", json!({"command": "py"}))]},
               {"content": "done"}]}})
}

#[tokio::test]
async fn memory_past_the_limit_kills_the_command() {
    let app = server(SandboxMode::Enforce, |config| {
        let mut small = python();
        small.memory_max_bytes = Some(64 * 1024 * 1024);
        config.commands.insert("small".into(), small);
    })
    .await;
    let result = run_script(
        &app,
        "small",
        "data = b'x' * (300 * 1024 * 1024)\nprint('allocated', len(data))\n",
    )
    .await;
    assert!(!stdout(&result).contains("allocated"), "{result}");
    assert_ne!(result["exit_code"], 0, "{result}");
    assert_eq!(result["sandbox"]["memory_max_bytes"], 64 * 1024 * 1024);
    // The same allocation fits the default limit.
    let result = run_script(
        &app,
        "py",
        "data = b'x' * (300 * 1024 * 1024)\nprint('allocated', len(data))\n",
    )
    .await;
    assert_eq!(stdout(&result), "allocated 314572800\n", "{result}");
}

#[tokio::test]
async fn processes_past_the_limit_cannot_be_started() {
    let app = server(SandboxMode::Enforce, |config| {
        let mut few = python();
        few.pids_max = Some(32);
        config.commands.insert("few".into(), few);
    })
    .await;
    let script = r#"
import subprocess
children = []
try:
    for _ in range(100):
        children.append(subprocess.Popen(['sleep', '30']))
except OSError as error:
    print('refused', type(error).__name__)
print('started', len(children))
for child in children:
    child.kill()
"#;
    let result = run_script(&app, "few", script).await;
    let out = stdout(&result);
    let started: usize = out
        .lines()
        .find_map(|line| line.strip_prefix("started "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(started < 32, "{out}");
    assert!(out.contains("refused BlockingIOError"), "{out}");
    assert_eq!(result["sandbox"]["pids_max"], 32);
}

#[tokio::test]
async fn ordinary_work_still_works_under_the_sandbox() {
    let app = server(SandboxMode::Enforce, |config| {
        config
            .commands
            .insert("sh".into(), CommandPreset::new("sh", ["build.sh"]));
    })
    .await;
    let script = r#"
import json, os, socket, subprocess, sys, tempfile
out = {}
out['system_file'] = len(open('/etc/passwd').read()) > 0
out['stdlib'] = os.path.exists(os.__file__)
open('result.txt', 'w').write('written by the command')
os.makedirs('pkg/sub', exist_ok=True)
open('pkg/sub/mod.py', 'w').write('VALUE = 42\n')
with tempfile.NamedTemporaryFile('w', delete=False) as f:
    f.write('scratch')
out['tmpdir'] = f.name.startswith(os.environ['TMPDIR'])
out['subprocess'] = subprocess.run(['sh', '-c', 'echo hi | tr a-z A-Z; ls /usr/bin > /dev/null'],
                                   capture_output=True, text=True).stdout
sys.path.insert(0, 'pkg/sub')
import mod
out['import'] = mod.VALUE
out['socketpair'] = len(socket.socketpair())
print(json.dumps(out, sort_keys=True))
"#;
    let result = run_script(&app, "py", script).await;
    assert_eq!(result["exit_code"], 0, "{result}");
    let out: Value = serde_json::from_str(stdout(&result)).unwrap();
    assert_eq!(
        out,
        json!({"system_file": true, "stdlib": true, "tmpdir": true,
               "subprocess": "HI\n", "import": 42, "socketpair": 2})
    );
    // A shell preset: pipes, redirections, a temporary file, an executable
    // the command built itself.
    let build = "set -e\n\
        t=$(mktemp)\n\
        echo 'echo built and ran' > tool.sh\n\
        chmod +x tool.sh\n\
        ./tool.sh > \"$t\"\n\
        cat \"$t\" 2>/dev/null\n\
        rm \"$t\"\n\
        echo done >&2\n";
    let (_, result) = run_with_files(&app, "sh", json!({"build.sh": build})).await;
    assert_eq!(
        (&result["exit_code"], &result["stdout"], &result["stderr"]),
        (&json!(0), &json!("built and ran\n"), &json!("done\n")),
        "{result}"
    );
}

#[tokio::test]
async fn the_server_refuses_to_start_with_storage_under_a_read_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    config.sandbox.read_paths.push(dir.path().to_owned());
    let error = Application::build(config).await.err().unwrap().to_string();
    assert!(error.contains("overlaps the sandbox read path"), "{error}");
    assert!(error.contains("[sandbox] read_paths"), "{error}");

    // A preset's read path counts too: here, one run's workspace.
    let mut config = test_config(&dir);
    let mut nosy = python();
    nosy.read_paths = vec![dir.path().join("workspaces")];
    config.commands.insert("nosy".into(), nosy);
    let error = Application::build(config).await.err().unwrap().to_string();
    assert!(error.contains("workspaces directory"), "{error}");

    // Off: nothing to protect from, so nothing refused.
    let mut config = test_config(&dir);
    config.sandbox.mode = SandboxMode::Off;
    config.sandbox.read_paths.push(dir.path().to_owned());
    assert!(Application::build(config).await.is_ok());
}
