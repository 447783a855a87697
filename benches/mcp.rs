//! What an MCP stdio server adds to a run's start: the server started under
//! the sandbox in the run's workspace, the `initialize` handshake, its tools
//! listed; then its tree killed and reaped, as at the run's end. For
//! - `everything`: the reference server (Node), as the tests run it;
//! - `fixture`: the tests' minimal Python server, a floor for an
//!   interpreter's start;
//! - `everything-http`: a session with the reference server in its
//!   streamable HTTP mode, already running (one process for every run),
//!   opened, listed and closed.
//!
//! `cargo bench --bench mcp` (installs the reference server from npm into a
//! cache folder on first use, as the tests do).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

use agent_runner::mcp::{McpServerConfig, McpServers};
use agent_runner::tools::{CommandPresets, CommandRunner, Sandbox, SandboxConfig};

fn everything_dir() -> PathBuf {
    let output = std::process::Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/install.sh"))
        .output()
        .expect("bash runs");
    assert!(output.status.success(), "tests/mcp/install.sh failed");
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

fn servers(http_url: &str) -> McpServers {
    let dir = everything_dir();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
    let table = |value| serde_json::from_value::<McpServerConfig>(value).expect("a table");
    let configs = [
        (
            "everything".to_owned(),
            table(json!({
                "command": "node",
                "args": [dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
                "read_paths": [dir],
            })),
        ),
        (
            "everything-http".to_owned(),
            table(json!({"url": http_url})),
        ),
        (
            "fixture".to_owned(),
            table(json!({
                "command": "/usr/bin/python3",
                "args": [fixtures.join("fixture.py"), "calls"],
                "read_paths": [fixtures],
            })),
        ),
    ]
    .into_iter()
    .collect();
    McpServers::new(&configs, &|_| None).expect("the servers resolve")
}

fn start(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let workspace = tempfile::tempdir().expect("a workspace");
    // The reference server over HTTP, for the whole benchmark.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let entry =
        everything_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mut http_server = std::process::Command::new("node")
        .arg(entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("node starts");
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let servers = servers(&format!("http://127.0.0.1:{port}/mcp"));
    let commands = CommandRunner::new(
        CommandPresets::new(),
        Arc::new(Sandbox::detect(&SandboxConfig::default())),
    );
    let mut group = c.benchmark_group("mcp start and end");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(15));
    for name in ["everything", "fixture", "everything-http"] {
        let names = [name.to_owned()];
        let abandon = tokio_util::sync::CancellationToken::new();
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let mut session = servers
                    .connect(&names, &commands, workspace.path(), None, &abandon)
                    .await
                    .expect("the server starts");
                assert!(!session.tools(&[], &[]).expect("its tools").is_empty());
                session.close().await;
            });
        });
    }
    group.finish();
    let _ = http_server.kill();
    let _ = http_server.wait();
}

criterion_group!(benches, start);
criterion_main!(benches);
