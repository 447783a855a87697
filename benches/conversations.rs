//! What continuing a conversation costs: copying a workspace as it ended
//! (10,000 files of 1 KiB in 100 directories, on the disk of `target/`),
//! and selecting the context of a 100-run thread at each step.
//!
//! `cargo bench --bench conversations`.

use std::path::Path;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::json;

use agent_runner::harness::{ContextIndex, Message, ToolCall};
use agent_runner::tools::copy::copy_workspace;

/// A workspace of `files` files of 1 KiB, 100 to a directory.
fn workspace(root: &Path, files: usize) {
    let content = vec![b'x'; 1024];
    for i in 0..files {
        let dir = root.join(format!("dir{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).expect("a directory");
        }
        std::fs::write(dir.join(format!("file{i}.txt")), &content).expect("a file");
    }
}

fn copy(c: &mut Criterion) {
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory");
    let from = data.path().join("from");
    workspace(&from, 10_000);
    let mut n = 0;
    c.bench_function("copy a 10,000-file workspace", |b| {
        b.iter_batched(
            || {
                n += 1;
                data.path().join(format!("to{n}"))
            },
            |to| {
                let stats = copy_workspace(&from, &to).expect("a copy");
                assert_eq!(stats.files, 10_000);
                to
            },
            BatchSize::PerIteration,
        );
    });
}

/// The transcript of a 100-run thread: each run a prompt, a tool call with
/// a 2,000-character result, and an answer.
fn thread(runs: usize) -> Vec<Arc<Message>> {
    let mut messages = Vec::with_capacity(runs * 4);
    for run in 0..runs {
        let id = format!("call-{run}");
        messages.push(Message::user(format!(
            "Task number {run}: look at the files"
        )));
        messages.push(Message::assistant(
            "",
            vec![ToolCall::new(
                &id,
                "read_file",
                json!({"path": "src/lib.rs"}),
            )],
        ));
        messages.push(Message::tool(&id, "y".repeat(2000), false));
        messages.push(Message::assistant(
            format!("Done with task {run}."),
            Vec::new(),
        ));
    }
    messages.into_iter().map(Arc::new).collect()
}

fn select(c: &mut Criterion) {
    let messages = thread(100);
    let mut index = ContextIndex::default();
    for message in &messages {
        index.push(message, message.serialized_chars());
    }
    for (name, limit) in [("32,000 characters", 32_000), ("all of it", 10_000_000)] {
        c.bench_function(&format!("select a 100-run thread's context, {name}"), |b| {
            b.iter(|| index.select(std::hint::black_box(limit)).expect("it fits"));
        });
    }
    c.bench_function("index a 100-run thread's transcript (a run's start)", |b| {
        b.iter(|| {
            let mut index = ContextIndex::default();
            for message in &messages {
                index.push(message, message.serialized_chars());
            }
            index
        });
    });
}

criterion_group!(benches, copy, select);
criterion_main!(benches);
