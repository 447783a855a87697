//! A server that is not root (the image's user): its commands still get
//! their workspace at `/workspace`, a `/tmp` and a `/dev/shm` of their own,
//! in a user namespace where its user is mapped to itself.

use std::os::unix::process::CommandExt;

use serde_json::{Value, json};

use crate::helpers::*;

/// The user the server runs as: `nobody`, whatever the machine calls it.
const USER: u32 = 65534;

#[tokio::test]
async fn a_server_that_is_not_root_gives_commands_their_layout_in_a_user_namespace() {
    if !rustix::process::geteuid().is_root() {
        // Only root can start a server as another user; the suite as a
        // user is that server already (see `layout.rs`).
        return;
    }
    // What a root server would have made; the image has it.
    std::fs::create_dir_all("/workspace").unwrap();
    let dir = tempfile::tempdir().unwrap();
    rustix::fs::chown(
        dir.path(),
        Some(rustix::fs::Uid::from_raw(USER)),
        Some(rustix::fs::Gid::from_raw(USER)),
    )
    .unwrap();
    let mut command = binary_command(
        &dir,
        &[
            ("AGENT_RUNNER_COMMANDS__PY__PROGRAM", "python3"),
            ("AGENT_RUNNER_COMMANDS__PY__ARGS", "[\"main.py\"]"),
            ("RUST_LOG", "info"),
        ],
    );
    command.uid(USER).gid(USER);
    let log = dir.path().join("server.log");
    command.stderr(std::fs::File::create(&log).unwrap());
    let (mut server, address) = spawn_listening(command);
    let remote = Remote::new(address);

    let script = r#"
import json, multiprocessing, os
out = {'cwd': os.getcwd(), 'tmpdir': os.environ['TMPDIR'], 'uid': os.getuid()}
with multiprocessing.Pool(2) as pool:
    out['pool'] = pool.map(abs, [-1, -2])
open('/dev/shm/mine', 'w').write('x')
out['shm'] = os.listdir('/dev/shm')
try:
    open('/etc/shadow').read()
    out['shadow'] = 'read'
except OSError as error:
    out['shadow'] = type(error).__name__
open('made.txt', 'w').write('by the command')
print(json.dumps(out, sort_keys=True))
raise SystemExit(open('no-such-file.txt'))
"#;
    let run = remote
        .post_json("/v1/runs?wait=true", &super::python_run(script))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let run = remote.wait_status(&id, "completed").await;
    assert_eq!(run["status"], "completed", "{run}");
    let messages = remote.get_json(&format!("/v1/runs/{id}/messages")).await;
    let result: Value =
        serde_json::from_str(messages["messages"][2]["content"].as_str().unwrap()).unwrap();
    let out: Value = serde_json::from_str(result["stdout"].as_str().unwrap())
        .unwrap_or_else(|_| panic!("{result}"));
    assert_eq!(
        out,
        json!({"cwd": "/workspace", "tmpdir": "/tmp", "uid": USER, "pool": [1, 2],
               "shm": ["mine"], "shadow": "PermissionError"}),
        "{result}"
    );
    let stderr = result["stderr"].as_str().unwrap();
    assert!(stderr.contains("File \"/workspace/main.py\""), "{stderr}");
    assert!(!stderr.contains(&id), "{stderr}");
    let file = remote
        .get(&format!("/v1/runs/{id}/workspace/made.txt"))
        .await;
    assert_eq!(file.text().await.unwrap(), "by the command");
    let status = terminate(&mut server);
    assert!(status.success(), "{status:?}");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("a mount namespace in a user namespace mapping the server's user to itself"),
        "{log}"
    );
}
