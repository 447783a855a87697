//! What the tests install for themselves (`tests/apt/install.sh`): many tests
//! ask for a package at once (every browser test does), and concurrent
//! apt-gets fail on dpkg's lock, so a fresh machine's first `cargo test`
//! must install each package once, whoever asks.

use std::path::Path;
use std::process::{Command, Stdio};

/// A stand-in for apt-get that fails as the real one does when another is
/// running, records each call, and whose `install` puts the tool in `bin`.
const FAKE_APT_GET: &str = r#"#!/bin/sh
if ! mkdir "$FAKE_STATE/running" 2>/dev/null; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2
  exit 100
fi
echo "$*" >> "$FAKE_STATE/calls"
# Long enough for the other askers to be waiting (or, without a lock of
# the script's own, to collide).
sleep 0.3
if [ "$1" = install ]; then
  printf '#!/bin/sh\n' > "$FAKE_BIN/fake-tool"
  chmod +x "$FAKE_BIN/fake-tool"
fi
rmdir "$FAKE_STATE/running"
"#;

#[test]
fn a_package_many_tests_ask_for_at_once_is_installed_once() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let apt_get = bin.join("apt-get");
    std::fs::write(&apt_get, FAKE_APT_GET).unwrap();
    make_executable(&apt_get);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apt/install.sh");
    let askers: Vec<_> = (0..6)
        .map(|_| {
            Command::new("bash")
                .arg(&script)
                .args(["fake-tool", "fake-package"])
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env("XDG_CACHE_HOME", dir.path().join("cache"))
                .env("FAKE_STATE", &state)
                .env("FAKE_BIN", &bin)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for asker in askers {
        let output = asker.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let calls = std::fs::read_to_string(state.join("calls")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["update -qq", "install -y -qq fake-package"]
    );
    assert!(bin.join("fake-tool").exists());
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
