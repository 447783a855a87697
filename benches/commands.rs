//! The cost of the sandbox per command: a trivial preset (`/bin/true`) run
//! through the real `run_command` path, from spawn to reaped, with
//! - `unconfined`: process groups only, no limits, no Landlock or seccomp;
//! - `contained`: what this machine offers for containment and limits
//!   (cgroups), no kernel confinement (`mode = "off"`);
//! - `sandboxed`: the same plus Landlock, seccomp and dropped capabilities
//!   (`mode = "enforce"`, the default).
//!
//! `cargo bench --bench commands`. The difference between the last two is
//! the confinement's own cost; between the first two, the cgroups'.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use tokio_util::sync::CancellationToken;

use agent_runner::tools::{
    CommandPreset, CommandRunner, Containment, Sandbox, SandboxConfig, SandboxMode,
};

fn runner(sandbox: Sandbox) -> CommandRunner {
    let presets = [(
        "true",
        CommandPreset::new("/bin/true", Vec::<String>::new()),
    )]
    .into_iter()
    .collect();
    CommandRunner::new(presets, Arc::new(sandbox))
}

fn spawn(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let workspace = tempfile::tempdir().expect("a workspace");
    let off = SandboxConfig {
        mode: SandboxMode::Off,
        ..SandboxConfig::default()
    };
    let cases = [
        ("unconfined", Sandbox::unconfined()),
        (
            "contained",
            Sandbox::with_containment(&off, Containment::detect()),
        ),
        ("sandboxed", Sandbox::detect(&SandboxConfig::default())),
    ];
    let mut group = c.benchmark_group("run_command /bin/true");
    for (name, sandbox) in cases {
        let runner = runner(sandbox);
        let cancel = CancellationToken::new();
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let output = runner
                    .run("true", workspace.path(), &cancel)
                    .await
                    .expect("the command runs");
                assert_eq!(output.exit_code, Some(0));
            });
        });
    }
    group.finish();
}

criterion_group!(benches, spawn);
criterion_main!(benches);
