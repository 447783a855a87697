//! The README's quickstart, run as written: its `sh` blocks, taken from the
//! README itself, in one shell, against a fresh server started as the
//! quickstart starts it, each block's output checked against the `text`
//! block shown after it.
//!
//! What differs from a person's terminal, and only this: `cargo install
//! --path .` is not run (the binary under test is put first on the PATH
//! instead); the server's port is a free one, not 8080 (the commands' and
//! outputs' `localhost:8080` and `127.0.0.1:8080` name it, and the CLI is
//! pointed at it with `AGENT_RUNNER_URL`); and the shell starts in an empty
//! directory of its own.
//!
//! In a shown output, a line `...` stands for any lines (none included) and
//! `...` within a line for any text on that line.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::helpers::*;

/// How long one block may take.
const BLOCK_DEADLINE: Duration = Duration::from_secs(60);

/// One fenced block of the quickstart: its language and its text.
#[derive(Debug)]
struct Block {
    language: String,
    text: String,
}

/// The fenced blocks of the README's `## Quickstart` section, in order.
fn quickstart_blocks(readme: &str) -> Vec<Block> {
    let section = readme
        .split("\n## ")
        .find(|section| section.starts_with("Quickstart\n"))
        .expect("the README has a Quickstart section");
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for line in section.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(language)) => {
                open = Some(Block {
                    language: language.trim().to_owned(),
                    text: String::new(),
                });
            }
            (Some(_), Some("")) => blocks.extend(open.take()),
            (Some(block), _) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a block of the quickstart is not closed");
    blocks
}

/// Whether `actual` is what `shown` shows (see the module's comment).
fn matches_shown(shown: &str, actual: &str) -> bool {
    let mut pattern = String::from("^");
    for line in shown.lines() {
        if line.trim() == "..." {
            pattern.push_str(r"(?:[^\n]*\n)*?");
        } else {
            let parts: Vec<String> = line.split("...").map(regex::escape).collect();
            pattern.push_str(&parts.join(r"[^\n]*?"));
            pattern.push_str(r"\n");
        }
    }
    pattern.push('$');
    let mut actual = actual.to_owned();
    if !actual.is_empty() && !actual.ends_with('\n') {
        actual.push('\n');
    }
    regex::Regex::new(&pattern)
        .expect("a shown output makes a pattern")
        .is_match(&actual)
}

/// A bash the blocks run in, one after another, keeping its variables;
/// stderr goes with stdout, as on a terminal. Its environment is only what
/// a terminal's would need (nothing of the test's leaks in).
struct Shell {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    blocks: usize,
}

impl Shell {
    fn start(dir: &std::path::Path, path: &str, url: &str) -> Shell {
        let mut child = Command::new("bash")
            .current_dir(dir)
            .env_clear()
            .env("PATH", path)
            .env("AGENT_RUNNER_URL", url)
            .env("HOME", dir)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Shell {
            child,
            lines,
            blocks: 0,
        };
        shell.run("exec 2>&1; set -o pipefail");
        shell
    }

    /// Runs `script`; its output, and its last command's exit status.
    fn run(&mut self, script: &str) -> (String, i32) {
        self.blocks += 1;
        let marker = format!("--- end of block {} ---", self.blocks);
        let stdin = self.child.stdin.as_mut().unwrap();
        // The block reads nothing of the shell's input (the marker's line is
        // there); a block whose last line has no newline still ends before
        // the marker.
        write!(
            stdin,
            "{{ {script}\n}} </dev/null\nprintf '\\n%s %s\\n' \"{marker}\" \"$?\"\n"
        )
        .unwrap();
        stdin.flush().unwrap();
        let deadline = std::time::Instant::now() + BLOCK_DEADLINE;
        let mut output = String::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{script}\ndid not end in time; so far:\n{output}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "{script}\nended the shell (or printed what is not UTF-8); so far:\n{output}"
                ),
            };
            if let Some(status) = line.strip_prefix(&marker) {
                // The newline printed before the marker is not the block's.
                if output.ends_with("\n\n") || output == "\n" {
                    output.pop();
                }
                return (output, status.trim().parse().unwrap());
            }
            output.push_str(&line);
            output.push('\n');
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        // A command of it still following a stream ends with the server,
        // which the test stops next.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_readme_quickstart_works_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("the README can be read");
    let blocks = quickstart_blocks(&readme);
    let dir = tempfile::tempdir().unwrap();
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_agent-runner"));
    let path = format!(
        "{}:{}",
        binary.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut server: Option<(ServerProcess, String)> = None;
    let mut shell: Option<Shell> = None;
    let mut ran = 0;
    let mut index = 0;
    while index < blocks.len() {
        let block = &blocks[index];
        index += 1;
        if block.language != "sh" {
            continue;
        }
        let shown = blocks
            .get(index)
            .filter(|next| next.language == "text")
            .map(|next| next.text.clone());
        if shown.is_some() {
            index += 1;
        }
        let script = block.text.trim();
        if script.starts_with("cargo install") {
            continue;
        }
        if script.starts_with("agent-runner serve") {
            // Started as written, in the empty directory, on a free port;
            // what it prints first is checked like any block's output.
            assert!(server.is_none(), "the quickstart starts one server");
            let words: Vec<&str> = script.split_whitespace().collect();
            let mut command = Command::new(binary);
            command
                .args(&words[1..])
                .current_dir(dir.path())
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .env("HOME", dir.path())
                .env("AGENT_RUNNER_SERVER__BIND", "127.0.0.1:0")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped());
            let log = server_log(&mut command);
            command.stderr(log);
            let (child, address) = spawn_listening(command);
            let (host, _port) = address.rsplit_once(':').unwrap();
            let printed = format!("listening on {host}:8080\n");
            if let Some(shown) = &shown {
                assert!(
                    matches_shown(shown, &printed),
                    "`{script}` printed\n{printed}\nthe README shows\n{shown}"
                );
            }
            shell = Some(Shell::start(dir.path(), &path, &address));
            server = Some((child, address));
            ran += 1;
            continue;
        }
        let (_, address) = server
            .as_ref()
            .expect("the quickstart starts the server before it uses it");
        let host = address.trim_start_matches("http://");
        let script = script
            .replace("localhost:8080", host)
            .replace("127.0.0.1:8080", host);
        let (output, status) = shell.as_mut().unwrap().run(&script);
        let output = output.replace(host, "localhost:8080");
        assert_eq!(status, 0, "`{script}` failed:\n{output}");
        if let Some(shown) = &shown {
            let shown_here = shown.replace("127.0.0.1:8080", "localhost:8080");
            assert!(
                matches_shown(&shown_here, &output),
                "`{script}` printed\n{output}\nthe README shows\n{shown}"
            );
        }
        ran += 1;
    }
    assert!(ran >= 5, "the quickstart has {ran} commands to run");
    let (mut child, _) = server.unwrap();
    drop(shell);
    assert!(terminate(&mut child).success());
}

#[test]
fn a_shown_output_matches_what_it_shows_only() {
    let shown = "run ...\n...\ncompleted after ... steps\n";
    assert!(matches_shown(
        shown,
        "run 01\n  -> list_dir\ncompleted after 2 steps\n"
    ));
    assert!(matches_shown(shown, "run 01\ncompleted after 2 steps"));
    assert!(!matches_shown(
        shown,
        "run 01\ncompleted after 2 steps\nmore\n"
    ));
    assert!(!matches_shown(shown, "walk 01\ncompleted after 2 steps\n"));
    assert!(!matches_shown("a...b\n", "a\nb\n"));
}
