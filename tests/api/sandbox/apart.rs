//! Runs cannot touch each other (SPEC section 7, third step), tried from
//! outside against the server binary in each way it can run: as root, as
//! a user with user namespaces, and as a user without them (a seccomp
//! profile refusing `unshare` and `clone(CLONE_NEWUSER)`, as container
//! runtimes' default profiles do).
//!
//! One run's command sleeps; another run's command, told the machine's
//! pids of that command and of the server, tries to stop them, to change
//! the mode of the first run's file, and reads its mountinfo and `/proc`.
//! Where the server cannot keep runs apart, it refuses presets (the
//! `run_command` result is an error that says why) unless `[sandbox]
//! allow_weaker = true`, and `/readyz` says which guarantees hold.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::{PYTHON, process_with, python_run, visible_dir};
use crate::helpers::*;

/// The user the servers that are not root run as.
const USER: u32 = 65534;

/// How a server is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Root,
    UserWithNamespaces,
    UserWithoutNamespaces,
}

/// A server of `mode` with the presets `py` (`python3 main.py`) and
/// `sleeper` (a sleep whose command line is `marker`'s).
fn start(
    mode: Mode,
    dir: &tempfile::TempDir,
    marker: &str,
    extra: &[(&str, &str)],
) -> (ServerProcess, String) {
    let sleeper_args = format!("[\"{marker}\"]");
    let mut settings = vec![
        ("AGENT_RUNNER_COMMANDS__PY__PROGRAM", PYTHON),
        ("AGENT_RUNNER_COMMANDS__PY__ARGS", "[\"main.py\"]"),
        ("AGENT_RUNNER_COMMANDS__SLEEPER__PROGRAM", "/usr/bin/sleep"),
        (
            "AGENT_RUNNER_COMMANDS__SLEEPER__ARGS",
            sleeper_args.as_str(),
        ),
        ("RUST_LOG", "info"),
    ];
    settings.extend_from_slice(extra);
    let mut command = binary_command(dir, &settings);
    command.stderr(std::fs::File::create(dir.path().join("server.log")).unwrap());
    if mode != Mode::Root {
        // What a root server would have made; the image has it.
        std::fs::create_dir_all("/workspace").unwrap();
        rustix::fs::chown(
            dir.path(),
            Some(rustix::fs::Uid::from_raw(USER)),
            Some(rustix::fs::Gid::from_raw(USER)),
        )
        .unwrap();
        command.uid(USER).gid(USER);
    }
    if mode == Mode::UserWithoutNamespaces {
        let filters = no_user_namespaces();
        // SAFETY: installs prepared filters: prctl and seccomp calls only.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                for filter in &filters {
                    seccompiler::apply_filter(filter).map_err(std::io::Error::other)?;
                }
                Ok(())
            });
        }
    }
    spawn_listening(command)
}

/// Seccomp filters refusing new user namespaces: `unshare` at all and
/// `clone` with `CLONE_NEWUSER` (EPERM), and `clone3` (ENOSYS: its flags
/// cannot be read, and the C library then falls back to `clone`).
fn no_user_namespaces() -> [seccompiler::BpfProgram; 2] {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    let arch = std::env::consts::ARCH.try_into().unwrap();
    let newuser = SeccompRule::new(vec![
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
            libc::CLONE_NEWUSER as u64,
        )
        .unwrap(),
    ])
    .unwrap();
    let namespaces = SeccompFilter::new(
        [
            (libc::SYS_unshare, vec![]),
            (libc::SYS_clone, vec![newuser]),
        ]
        .into_iter()
        .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .unwrap();
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .unwrap();
    [namespaces.try_into().unwrap(), clone3.try_into().unwrap()]
}

/// What the attacker's command found.
struct Findings {
    /// The attacks, each `OK` or the name of the error it met.
    attacks: Value,
    mountinfo: String,
    /// The pids its `/proc` lists.
    pids: Vec<i64>,
    /// The victim's state after the attack ('T' when stopped).
    victim_state: Option<char>,
    /// The victim's file's mode after the attack.
    victim_mode: u32,
    /// Whether the server answered after the attack.
    server_answers: bool,
}

/// A victim run whose command sleeps, and an attacker run whose command
/// goes after it and the server; `None` when the attacker's command was
/// refused, with the refusal.
async fn attack(
    remote: &Remote,
    dir: &Path,
    server_pid: u32,
    marker: &str,
) -> Result<Findings, String> {
    let victim = remote
        .post_json(
            "/v1/runs",
            &json!({"prompt": "sleep", "commands": ["sleeper"],
                    "workspace": {"files": {"keep.txt": "the victim's"}},
                    "limits": {"timeout_ms": 120000},
                    "model": {"scripted": [
                        {"content": "", "tool_calls": [call("1", "run_command", json!({"command": "sleeper"}))]},
                        {"content": "done"}]}}),
        )
        .await;
    let victim_id = victim["id"].as_str().unwrap().to_owned();
    let kept = dir.join("workspaces").join(&victim_id).join("keep.txt");
    // Its sleeper running, or its command refused (or never run): then so
    // will the attacker's be.
    let victim_pid = eventually("the sleeper to start, or its refusal", async || {
        if let Some((pid, _)) = process_with(marker) {
            return Some(Ok(pid));
        }
        let run = remote.get_json(&format!("/v1/runs/{victim_id}")).await;
        if run["status"] == "running" {
            return None;
        }
        let messages = remote
            .get_json(&format!("/v1/runs/{victim_id}/messages"))
            .await;
        Some(Err(messages["messages"][2]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()))
    })
    .await?;
    let script = format!(
        r#"
import json, os, signal
out = {{}}
def attempt(name, action):
    try:
        action()
        out[name] = 'OK'
    except Exception as error:
        out[name] = type(error).__name__
attempt('stop_other_runs_command', lambda: os.kill({victim_pid}, signal.SIGSTOP))
attempt('stop_the_server', lambda: os.kill({server_pid}, signal.SIGSTOP))
attempt('chmod_other_runs_file', lambda: os.chmod({kept:?}, 0))
attempt('read_the_inits_environment', lambda: open('/proc/1/environ').read())
attempt('read_the_inits_memory', lambda: open('/proc/1/mem', 'rb').read(1))
out['mountinfo'] = open('/proc/self/mountinfo').read()
out['pids'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print(json.dumps(out))
"#
    );
    let run = remote
        .post_json("/v1/runs?wait=true", &python_run(&script))
        .await;
    let id = run["id"].as_str().unwrap();
    let messages = remote.get_json(&format!("/v1/runs/{id}/messages")).await;
    let result = &messages["messages"][2];
    let content = result["content"].as_str().unwrap().to_owned();
    if result["is_error"] == true {
        return Err(content);
    }
    let result: Value = serde_json::from_str(&content).unwrap();
    let out: Value = serde_json::from_str(result["stdout"].as_str().unwrap())
        .unwrap_or_else(|_| panic!("{result}"));
    let victim_state = process_with(marker).map(|(_, state)| state);
    let victim_mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
    let server_answers = tokio::time::timeout(Duration::from_secs(5), remote.get("/healthz"))
        .await
        .is_ok();
    // Whatever happened, nothing stays stopped.
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(server_pid as i32).unwrap(),
        rustix::process::Signal::CONT,
    );
    let _ = remote
        .client
        .delete(format!("{}/v1/runs/{victim_id}", remote.address))
        .send()
        .await;
    Ok(Findings {
        attacks: json!({
            "stop_other_runs_command": out["stop_other_runs_command"],
            "stop_the_server": out["stop_the_server"],
            "chmod_other_runs_file": out["chmod_other_runs_file"],
            "read_the_inits_environment": out["read_the_inits_environment"],
            "read_the_inits_memory": out["read_the_inits_memory"],
        }),
        mountinfo: out["mountinfo"].as_str().unwrap().to_owned(),
        pids: out["pids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pid| pid.as_i64().unwrap())
            .collect(),
        victim_state,
        victim_mode,
        server_answers,
    })
}

/// The attacks all fail, and leave the victim and the server as they were.
fn assert_kept_apart(mode: Mode, dir: &Path, found: &Findings) {
    assert_eq!(
        found.attacks,
        json!({"stop_other_runs_command": "ProcessLookupError",
               "stop_the_server": "ProcessLookupError",
               "chmod_other_runs_file": "OSError",
               "read_the_inits_environment": "PermissionError",
               "read_the_inits_memory": "PermissionError"}),
        "{mode:?}"
    );
    assert_eq!(found.victim_state.map(|s| s != 'T'), Some(true), "{mode:?}");
    assert_eq!(found.victim_mode, 0o644, "{mode:?}");
    assert!(found.server_answers, "{mode:?}");
    // Its /proc lists its own processes: the init, itself, python.
    assert!(found.pids.len() <= 4, "{mode:?}: {:?}", found.pids);
    // Mountinfo names the server's directory only as what its /workspace
    // is (the root column of that line): no other server path.
    let data = dir.to_str().unwrap();
    let naming: Vec<&str> = found
        .mountinfo
        .lines()
        .filter(|line| line.contains(data))
        .filter(|line| line.split(' ').nth(4) != Some("/workspace"))
        .collect();
    assert_eq!(naming, Vec::<&str>::new(), "{mode:?}");
    // And every mount but its own directories (and its /proc) is
    // read-only.
    for line in found.mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (point, options) = (fields[4], fields[5]);
        let own = ["/workspace", "/tmp", "/dev/shm", "/proc"].contains(&point);
        assert!(
            own || options.starts_with("ro"),
            "{mode:?}: {point} is writable: {line}"
        );
    }
}

#[tokio::test]
async fn runs_cannot_touch_each_other_as_root_or_as_a_user_with_namespaces() {
    if !rustix::process::geteuid().is_root() {
        // Only root can start servers as root and as another user.
        return;
    }
    for mode in [Mode::Root, Mode::UserWithNamespaces] {
        let dir = visible_dir();
        let marker = format!("300.{}{}", std::process::id(), mode as u8);
        let (server, address) = start(mode, &dir, &marker, &[]);
        let remote = Remote::new(address);
        let ready = remote.get_json("/readyz").await;
        assert_eq!(ready["sandbox"]["presets"], "enabled", "{mode:?}: {ready}");
        assert_eq!(ready["sandbox"]["own_pid_namespace"], true, "{ready}");
        assert_eq!(ready["sandbox"]["own_proc"], true, "{ready}");
        assert_eq!(ready["sandbox"]["rest_read_only"], true, "{ready}");
        // A user of their run's: a root server's alone can give them.
        assert_eq!(
            ready["sandbox"]["user_per_run"],
            mode == Mode::Root,
            "{ready}"
        );
        let found = attack(&remote, dir.path(), server.id(), &marker)
            .await
            .unwrap_or_else(|refused| panic!("{mode:?}: {refused}"));
        assert_kept_apart(mode, dir.path(), &found);
    }
}

#[tokio::test]
async fn without_user_namespaces_presets_are_refused_unless_allowed_weaker() {
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let dir = visible_dir();
    let marker = format!("300.{}9", std::process::id());
    let (mut server, address) = start(Mode::UserWithoutNamespaces, &dir, &marker, &[]);
    let remote = Remote::new(address);
    let ready = remote.get_json("/readyz").await;
    assert_eq!(ready["sandbox"]["presets"], "refused", "{ready}");
    assert_eq!(ready["sandbox"]["own_pid_namespace"], false, "{ready}");
    let weaker = ready["sandbox"]["weaker"].to_string();
    assert!(weaker.contains("no namespaces of their own"), "{weaker}");
    let refused = attack(&remote, dir.path(), server.id(), &marker)
        .await
        .err()
        .expect("the command is refused");
    assert!(
        refused.contains("cannot keep runs apart") && refused.contains("allow_weaker"),
        "{refused}"
    );
    terminate(&mut server);
    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    assert!(log.contains("command presets are refused"), "{log}");

    // The operator accepts it: commands run, and /readyz says so.
    let dir = visible_dir();
    let (server, address) = start(
        Mode::UserWithoutNamespaces,
        &dir,
        &marker,
        &[("AGENT_RUNNER_SANDBOX__ALLOW_WEAKER", "true")],
    );
    let remote = Remote::new(address);
    let ready = remote.get_json("/readyz").await;
    assert_eq!(ready["sandbox"]["presets"], "enabled_weaker", "{ready}");
    let found = attack(&remote, dir.path(), server.id(), &marker)
        .await
        .unwrap_or_else(|refused| panic!("{refused}"));
    // What such a server cannot keep: its commands see the machine's
    // processes.
    assert!(found.pids.len() > 4, "{:?}", found.pids);
}
