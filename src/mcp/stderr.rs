//! A stdio server's stderr: drained for as long as the server lives (a full
//! pipe would block it), keeping only its last few kilobytes, which name the
//! cause when the server fails to start.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::ChildStderr;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::sync::lock;

/// Bytes of stderr kept.
const KEPT_BYTES: usize = 4096;

/// Lines of it an error quotes.
const QUOTED_LINES: usize = 10;

/// Values shorter than this are not scrubbed from what is quoted: they
/// would match too much, and are no credential.
const MIN_SCRUBBED_CHARS: usize = 8;

pub(super) struct StderrTail {
    kept: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
    /// The server's configured `env` values, scrubbed from what is logged
    /// and quoted.
    secrets: Arc<[String]>,
}

impl StderrTail {
    /// Starts draining `stderr` (if there is one) in a task of its own.
    /// `secrets` (the server's `env` values) never appear in what it logs
    /// or quotes.
    pub(super) fn start(stderr: Option<ChildStderr>, server: &str, secrets: &[&str]) -> Self {
        let kept: Arc<Mutex<Vec<u8>>> = Arc::default();
        let secrets: Arc<[String]> = secrets
            .iter()
            .filter(|secret| secret.chars().count() >= MIN_SCRUBBED_CHARS)
            .map(|secret| (*secret).to_owned())
            .collect();
        let reader = stderr.map(|stderr| {
            let span = tracing::debug_span!("mcp_stderr", server);
            tokio::spawn(drain(stderr, Arc::clone(&kept), Arc::clone(&secrets)).instrument(span))
        });
        Self {
            kept,
            reader,
            secrets,
        }
    }

    /// The last lines written, once the pipe has closed or `within` has
    /// passed.
    pub(super) async fn last_lines(mut self, within: Duration) -> String {
        if let Some(reader) = self.reader.as_mut() {
            let _ = tokio::time::timeout(within, reader).await;
        }
        let text = String::from_utf8_lossy(&lock(&self.kept)).into_owned();
        let mut lines: Vec<&str> = text
            .lines()
            .map(str::trim_end)
            .filter(|line| !line.is_empty())
            .collect();
        let skip = lines.len().saturating_sub(QUOTED_LINES);
        lines.drain(..skip);
        scrub(&lines.join("\n"), &self.secrets)
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(reader) = &self.reader {
            reader.abort();
        }
    }
}

/// `text` with every one of `secrets` replaced.
fn scrub(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_owned(), |text, secret| {
        text.replace(secret, "[redacted]")
    })
}

async fn drain(mut stderr: ChildStderr, kept: Arc<Mutex<Vec<u8>>>, secrets: Arc<[String]>) {
    let mut buffer = [0u8; 4096];
    loop {
        match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                let chunk = &buffer[..read];
                if tracing::enabled!(tracing::Level::DEBUG) {
                    let text = scrub(String::from_utf8_lossy(chunk).trim_end(), &secrets);
                    tracing::debug!(%text, "stderr");
                }
                let mut tail = lock(&kept);
                tail.extend_from_slice(chunk);
                let excess = tail.len().saturating_sub(KEPT_BYTES);
                tail.drain(..excess);
            }
        }
    }
}
