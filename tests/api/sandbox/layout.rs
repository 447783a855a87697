//! Who a command runs as and what it sees: not root, its workspace at
//! `/workspace`, a `/tmp` and a `/dev/shm` of its own, and what its preset
//! adds (read paths, environment).

use std::path::{Path, PathBuf};

use agent_runner::tools::SandboxMode;
use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn a_command_is_not_root_and_cannot_read_what_only_root_may() {
    let root = rustix::process::geteuid().is_root();
    for mode in [SandboxMode::Enforce, SandboxMode::Off] {
        let app = server(mode, |_| {}).await;
        let shadow = attack(&app, "got = open('/etc/shadow').read()").await;
        let listing = attack(&app, "got = os.listdir('/root')").await;
        let who = attack(&app, "got = (os.getuid(), os.getgid(), os.getgroups())").await;
        match mode {
            SandboxMode::Enforce => {
                assert_denied(&shadow);
                assert_denied(&listing);
                if root {
                    // A user of its run's, from `[sandbox] uids`, and the
                    // group of the same number.
                    let (uid, gid): (u32, u32) = {
                        let got = stdout(&who).trim_start_matches("OK (");
                        let mut parts = got.split(", ");
                        let uid = parts.next().unwrap().parse().unwrap();
                        let gid = parts.next().unwrap().parse().unwrap();
                        (uid, gid)
                    };
                    assert!((100_000..=165_535).contains(&uid), "{who}");
                    assert_eq!(uid, gid, "{who}");
                    assert!(stdout(&who).contains(", [])"), "{who}");
                } else {
                    let expected = format!("OK ({}, ", rustix::process::geteuid().as_raw());
                    assert!(stdout(&who).starts_with(&expected), "{who}");
                }
            }
            // The same scripts, unconfined, as the root server they then are.
            SandboxMode::Off if root => {
                assert_allowed(&shadow);
                assert_allowed(&listing);
                assert!(stdout(&who).starts_with("OK (0, 0"), "{who}");
            }
            SandboxMode::Off => {}
        }
    }
}

#[tokio::test]
async fn a_command_sees_its_workspace_tmp_and_shm_and_real_programs_work() {
    let app = server(SandboxMode::Enforce, |_| {}).await;
    let script = r#"
import json, multiprocessing, os, tempfile
out = {'cwd': os.getcwd(), 'home': os.environ['HOME'], 'tmpdir': os.environ['TMPDIR']}
with multiprocessing.Pool(2) as pool:
    out['pool'] = pool.map(abs, [-1, -2, -3])
open('/dev/shm/mine', 'w').write('shared memory')
out['shm'] = os.listdir('/dev/shm')
with tempfile.NamedTemporaryFile('w', delete=False) as f:
    f.write('scratch')
out['tmp'] = os.path.dirname(f.name)
os.makedirs('made/by', exist_ok=True)
open('made/by/command.txt', 'w').write('the command wrote this')
os.chmod('made/by/command.txt', 0o600)
os.chmod('made/by', 0o700)
print(json.dumps(out, sort_keys=True))
raise SystemExit(open('no-such-file.txt'))
"#;
    let (id, result) = run_with_files(&app, "py", json!({"main.py": script})).await;
    let out: Value = serde_json::from_str(stdout(&result)).unwrap_or_else(|_| panic!("{result}"));
    assert_eq!(
        out,
        json!({"cwd": "/workspace", "home": "/workspace", "tmpdir": "/tmp",
               "pool": [1, 2, 3], "shm": ["mine"], "tmp": "/tmp"}),
        "{result}"
    );
    // What the model reads of a traceback names the workspace as the
    // command saw it, never the server's own layout.
    let stderr = result["stderr"].as_str().unwrap();
    assert!(stderr.contains("File \"/workspace/main.py\""), "{stderr}");
    let workspaces = app.dir.path().join("workspaces");
    assert!(!stderr.contains(workspaces.to_str().unwrap()), "{stderr}");
    assert!(!stderr.contains(&id), "{stderr}");
    // The server's /dev/shm never saw the command's file.
    assert!(!Path::new("/dev/shm/mine").exists());
    // What the command wrote, private to its user, the server still serves
    // and removes.
    let file = app
        .get(&format!("/v1/runs/{id}/workspace/made/by/command.txt"))
        .await;
    assert_eq!(file.status, 200, "{}", file.text);
    assert_eq!(file.text, "the command wrote this");
    let purged = app
        .send(app.request(reqwest::Method::POST, &format!("/v1/runs/{id}/purge")))
        .await;
    assert_eq!(purged.status, 204, "{}", purged.text);
    assert!(!workspaces.join(&id).exists());
}

#[tokio::test]
async fn a_presets_read_paths_extend_what_it_can_read() {
    let tools = visible_dir();
    std::fs::write(tools.path().join("helper.txt"), "from the toolchain").unwrap();
    let script = attempt(&format!(
        "got = open({}).read()",
        python_str(&tools.path().join("helper.txt"))
    ));
    let reads: PathBuf = tools.path().to_owned();
    let app = server(SandboxMode::Enforce, |config| {
        let mut with_tools = python();
        with_tools.read_paths = vec![reads];
        config.commands.insert("tools".into(), with_tools);
    })
    .await;
    assert_denied(&run_script(&app, "py", &script).await);
    let result = run_script(&app, "tools", &script).await;
    assert!(stdout(&result).contains("from the toolchain"), "{result}");
    let write = run_script(
        &app,
        "tools",
        &attempt(&format!(
            "got = open({}, 'w')",
            python_str(&tools.path().join("helper.txt"))
        )),
    )
    .await;
    assert_denied(&write);
}

#[tokio::test]
async fn a_presets_env_reaches_it_as_written_and_nothing_else_of_the_servers() {
    let app = server(SandboxMode::Enforce, |config| {
        config.commands.insert(
            "env".into(),
            python()
                .with_env("CARGO_HOME", "/opt/cargo")
                .with_env("LITERAL", "$PATH ${HOME} `id` $(id)"),
        );
    })
    .await;
    let script = r#"
import json, os
names = ['CARGO_HOME', 'LITERAL', 'USER', 'AGENT_RUNNER_TOKENS']
print(json.dumps({name: os.environ.get(name) for name in names}))
"#;
    let result = run_script(&app, "env", script).await;
    let seen: Value = serde_json::from_str(stdout(&result)).unwrap_or_else(|_| panic!("{result}"));
    assert_eq!(
        seen,
        json!({"CARGO_HOME": "/opt/cargo", "LITERAL": "$PATH ${HOME} `id` $(id)",
               "USER": null, "AGENT_RUNNER_TOKENS": null}),
        "{result}"
    );
    // Another preset of the same server gets none of it.
    let plain = run_script(&app, "py", script).await;
    let seen: Value = serde_json::from_str(stdout(&plain)).unwrap();
    assert_eq!(seen["CARGO_HOME"], Value::Null, "{plain}");
}

#[tokio::test]
async fn a_read_path_under_the_servers_tmp_stays_in_view() {
    // A checkout under /tmp, say: covering /tmp would hide the preset's
    // own files, so its command keeps its TMPDIR at its real path instead.
    let tools = traversable(tempfile::tempdir_in("/tmp").unwrap());
    std::fs::write(tools.path().join("helper.txt"), "from the toolchain").unwrap();
    let reads = tools.path().to_owned();
    let app = server(SandboxMode::Enforce, |config| {
        let mut with_tools = python();
        with_tools.read_paths = vec![reads];
        config.commands.insert("tools".into(), with_tools);
    })
    .await;
    let script = attempt(&format!(
        "got = (open({}).read(), os.environ['TMPDIR'], os.getcwd())",
        python_str(&tools.path().join("helper.txt"))
    ));
    let result = run_script(&app, "tools", &script).await;
    let out = stdout(&result);
    assert!(
        out.starts_with("OK ('from the toolchain', '/tmp/"),
        "{result}"
    );
    assert!(out.contains("'/workspace')"), "{result}");
    // Without that read path, /tmp is the command's own.
    let plain = run_script(&app, "py", &attempt("got = os.environ['TMPDIR']")).await;
    assert_eq!(stdout(&plain), "OK '/tmp'\n", "{plain}");
}
