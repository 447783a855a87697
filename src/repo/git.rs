//! Cloning a repository into a run's workspace, with the `git` CLI.
//!
//! Why the CLI rather than `gix`: the clone's checkout is what the model
//! and its commands then use with the same `git` (status, diff, log, a
//! commit), so the repository should be exactly what that `git` writes;
//! the CLI speaks every transport and credential form a remote needs
//! (smart HTTP, SSH, `file://`) without our building them; and each clone
//! is a process of its own, killed as a group at its deadline or its size
//! ceiling, whatever it is doing.
//!
//! What reaches git is pinned down: no system or user configuration (an
//! empty `HOME` of its own, `GIT_CONFIG_NOSYSTEM`), no prompt, no hooks,
//! no submodules, and only the protocol of the URL allowed (`file` only
//! when the URL is one, which `[workspaces] git_allow` must have listed).
//! A token is sent as an HTTP `Authorization` header given through git's
//! environment configuration (`GIT_CONFIG_COUNT`): it is never on a
//! command line, never written to the clone's `.git/config`, and scrubbed
//! from what git prints before any of it is shown.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::GitSeed;

/// How often the clone's size is measured while it runs.
const SIZE_CHECK_EVERY: Duration = Duration::from_millis(500);

/// Most of git's error output kept (its end, where the reason is).
const MAX_ERROR_BYTES: usize = 4096;

/// A clone's bounds.
#[derive(Debug, Clone, Copy)]
pub struct CloneLimits {
    pub timeout: Duration,
    pub max_bytes: u64,
}

/// Why a clone failed: a sentence for the run's `error`, credentials
/// scrubbed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CloneError(pub String);

/// Whether `reference` is a full commit id (SHA-1 or SHA-256): fetched by
/// id rather than cloned by name.
fn is_commit_id(reference: &str) -> bool {
    matches!(reference.len(), 40 | 64) && reference.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The URL's scheme (`https`, `file`, ...), for the one protocol allowed.
fn scheme(url: &str) -> Option<&str> {
    url.split_once("://").map(|(scheme, _)| scheme)
}

/// Checks a `workspace.git` as a request gives it, before anything is
/// stored: the reason it is refused, if it is.
pub fn check(seed: &GitSeed) -> Result<(), String> {
    let url = &seed.url;
    if url.is_empty() || url.len() > 2048 || url.chars().any(char::is_control) {
        return Err("url must be 1 to 2048 characters, none of them a control character".into());
    }
    let Some(scheme) = scheme(url) else {
        return Err(format!("url {url:?} is not a URL (scheme://...)"));
    };
    if !matches!(scheme, "https" | "http" | "file" | "ssh" | "git") {
        return Err(format!(
            "url: the scheme {scheme:?} is not supported (https, http, ssh, git, file)"
        ));
    }
    let authority = url[scheme.len() + 3..].split('/').next().unwrap_or("");
    if authority.contains('@') && scheme != "ssh" {
        return Err(
            "url must not hold credentials (user:password@): name a server variable in token_env"
                .into(),
        );
    }
    if url.starts_with('-') || url.contains("::") {
        return Err(format!("url {url:?} is not a plain URL"));
    }
    // `..` would take a URL out of the prefix `git_allow` matched (git and
    // curl remove dot segments before they fetch).
    let path = &url[scheme.len() + 3..];
    let lowered = path.to_ascii_lowercase();
    let dotted = path
        .split('/')
        .any(|segment| segment == "." || segment == "..")
        || lowered.contains("%2e")
        || lowered.contains("%2f");
    if dotted || path.contains(['\\', '?', '#']) || path.chars().any(char::is_whitespace) {
        return Err(format!(
            "url {url:?} must not hold `.` or `..` segments (or escapes of them), `\\`, `?`, `#` or spaces"
        ));
    }
    if let Some(reference) = &seed.reference {
        let well_formed = !reference.is_empty()
            && reference.len() <= 256
            && !reference.starts_with('-')
            && !reference.contains("..")
            && reference
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c));
        if !well_formed {
            return Err(format!(
                "ref {reference:?} is not a branch, tag or commit id (letters, digits and / . _ - +)"
            ));
        }
    }
    if seed.depth == 0 || seed.depth > 1_000_000 {
        return Err("depth must be between 1 and 1000000".into());
    }
    Ok(())
}

/// Clones `seed` into `into` (which must not exist). `token` is the
/// credential's value, if the seed names one.
pub async fn clone(
    seed: &GitSeed,
    token: Option<&str>,
    into: &Path,
    limits: CloneLimits,
) -> Result<(), CloneError> {
    let home = tempfile::tempdir().map_err(|e| CloneError(format!("git's home: {e}")))?;
    let git = Git {
        seed,
        token,
        home: home.path().to_owned(),
    };
    // Cloned beside the workspace under a name of this attempt's own, then
    // renamed into place: a git left running by a process that stopped
    // writes into its own directory, never into a later attempt's.
    let mut name = into.as_os_str().to_owned();
    name.push(format!(".clone-{}", uuid::Uuid::now_v7()));
    let cloning = PathBuf::from(name);
    let cloned = clone_into(&git, &cloning, limits).await.and_then(|()| {
        std::fs::rename(&cloning, into)
            .map_err(|e| CloneError(format!("the clone could not be put in place: {e}")))
    });
    if cloned.is_err() {
        let _ = super::places::remove_tree(&cloning);
    }
    cloned
}

async fn clone_into(git: &Git<'_>, into: &Path, limits: CloneLimits) -> Result<(), CloneError> {
    let seed = git.seed;
    let into_text = into
        .to_str()
        .ok_or_else(|| CloneError("the workspace's path is not UTF-8".into()))?;
    let depth = seed.depth.to_string();
    let steps: Vec<Vec<&str>> = match seed.reference.as_deref() {
        Some(commit) if is_commit_id(commit) => vec![
            vec!["init", "-q", into_text],
            vec!["-C", into_text, "remote", "add", "origin", &seed.url],
            vec![
                "-C", into_text, "fetch", "-q", "--depth", &depth, "origin", commit,
            ],
            vec!["-C", into_text, "checkout", "-q", "--detach", "FETCH_HEAD"],
        ],
        reference => {
            let mut clone = vec!["clone", "-q", "--depth", &depth, "--single-branch"];
            clone.push("--no-recurse-submodules");
            if let Some(reference) = reference {
                clone.extend(["--branch", reference]);
            }
            clone.extend(["--", &seed.url, into_text]);
            vec![clone]
        }
    };
    let work = async {
        for args in &steps {
            git.run(args, into, limits.max_bytes).await?;
        }
        Ok(())
    };
    match tokio::time::timeout(limits.timeout, work).await {
        Ok(done) => done,
        Err(_) => Err(CloneError(format!(
            "the clone of {} took longer than workspaces.git_timeout_ms ({} ms)",
            seed.url,
            limits.timeout.as_millis()
        ))),
    }
}

struct Git<'a> {
    seed: &'a GitSeed,
    token: Option<&'a str>,
    home: PathBuf,
}

impl Git<'_> {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("git");
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("LANG", "C")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_PROTOCOL_FROM_USER", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let scheme = scheme(&self.seed.url).unwrap_or("https");
        let mut config: Vec<(&str, String)> = vec![
            ("protocol.allow", "never".into()),
            ("core.hooksPath", "/dev/null".into()),
            ("submodule.recurse", "false".into()),
            ("advice.detachedHead", "false".into()),
        ];
        let allowed = format!("protocol.{scheme}.allow");
        config.push((allowed.as_str(), "always".into()));
        // The credential goes with requests to the repository's own URL
        // alone (git matches `http.<url>.*` by scheme, host and path
        // prefix): not to a host a redirect leads to.
        let header_key = format!("http.{}.extraHeader", self.seed.url);
        if let Some(token) = self.token {
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
            config.push((header_key.as_str(), format!("Authorization: Basic {basic}")));
        }
        command.env("GIT_CONFIG_COUNT", config.len().to_string());
        for (i, (key, value)) in config.iter().enumerate() {
            command.env(format!("GIT_CONFIG_KEY_{i}"), key);
            command.env(format!("GIT_CONFIG_VALUE_{i}"), value);
        }
        command
    }

    /// Runs one git command, measuring `into` as it grows.
    async fn run(&self, args: &[&str], into: &Path, max_bytes: u64) -> Result<(), CloneError> {
        let mut child = self
            .command(args)
            .spawn()
            .map_err(|e| CloneError(format!("git could not be started: {e}")))?;
        // Killed as a group (git's own helpers too) if this is dropped: a
        // deadline, or the run's stop.
        let group = Group(child.id());
        let mut stderr = child.stderr.take();
        // The end of what git prints (where the reason is), however much a
        // remote makes it print.
        let errors = async {
            let mut text = Vec::new();
            let mut chunk = [0u8; 4096];
            if let Some(stderr) = stderr.as_mut() {
                while let Ok(read) = stderr.read(&mut chunk).await {
                    if read == 0 {
                        break;
                    }
                    text.extend_from_slice(&chunk[..read]);
                    if text.len() > 2 * MAX_ERROR_BYTES {
                        text.drain(..text.len() - MAX_ERROR_BYTES);
                    }
                }
            }
            text
        };
        tokio::pin!(errors);
        let mut measure = tokio::time::interval(SIZE_CHECK_EVERY);
        let mut text = None;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                read = &mut errors, if text.is_none() => text = Some(read),
                _ = measure.tick() => {
                    let dir = into.to_owned();
                    let size = tokio::task::spawn_blocking(move || tree_bytes(&dir, max_bytes))
                        .await
                        .unwrap_or(0);
                    if size > max_bytes {
                        return Err(CloneError(format!(
                            "the clone of {} grew past workspaces.max_git_bytes ({max_bytes} bytes)",
                            self.seed.url
                        )));
                    }
                }
            }
        };
        let text = match text {
            Some(text) => text,
            None => errors.await,
        };
        drop(group);
        let status = status.map_err(|e| CloneError(format!("git failed: {e}")))?;
        let size = {
            let dir = into.to_owned();
            tokio::task::spawn_blocking(move || tree_bytes(&dir, max_bytes))
                .await
                .unwrap_or(0)
        };
        if size > max_bytes {
            return Err(CloneError(format!(
                "the clone of {} grew past workspaces.max_git_bytes ({max_bytes} bytes)",
                self.seed.url
            )));
        }
        if status.success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&text);
        let text = self.scrub(text.trim());
        let start = text.len().saturating_sub(MAX_ERROR_BYTES);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        Err(CloneError(format!(
            "git {} of {} failed ({status}): {}",
            args.iter()
                .find(|arg| !arg.starts_with('-') && **arg != "-C" && !arg.contains('/'))
                .unwrap_or(&"clone"),
            self.seed.url,
            &text[start..]
        )))
    }

    /// `text` without the token, in any form it was given git.
    fn scrub(&self, text: &str) -> String {
        let Some(token) = self.token.filter(|token| !token.is_empty()) else {
            return text.to_owned();
        };
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
        text.replace(token, "***").replace(&basic, "***")
    }
}

/// Kills a process group when dropped (the group has ended by then, or
/// must).
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        let pid = self
            .0
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Bytes of the files under `dir` (links not followed), counted until past
/// `max`.
fn tree_bytes(dir: &Path, max: u64) -> u64 {
    let mut total = 0u64;
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                total += meta.len();
                if total > max {
                    return total;
                }
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(url: &str) -> GitSeed {
        GitSeed {
            url: url.into(),
            reference: None,
            depth: 1,
            token_env: None,
        }
    }

    #[test]
    fn urls_with_credentials_or_odd_schemes_are_refused() {
        assert!(check(&seed("https://github.com/a/b.git")).is_ok());
        assert!(check(&seed("file:///srv/repo")).is_ok());
        for bad in [
            "https://user:secret@github.com/a/b",
            "ext::sh -c touch% /tmp/x",
            "-uhttps://x/",
            "github.com/a/b",
            "ftp://x/y",
            "https://github.com/acme/../other/private.git",
            "https://github.com/acme/%2E%2E/other",
            "file:///srv/repos/../../etc",
            "https://github.com/acme/r?x=1",
            "",
        ] {
            assert!(check(&seed(bad)).is_err(), "{bad}");
        }
        let mut with_ref = seed("https://github.com/a/b");
        for (reference, ok) in [
            ("main", true),
            ("v1.2.3", true),
            ("feature/x", true),
            ("--upload-pack=x", false),
            ("a..b", false),
            ("a b", false),
        ] {
            with_ref.reference = Some(reference.into());
            assert_eq!(check(&with_ref).is_ok(), ok, "{reference}");
        }
    }

    #[test]
    fn a_token_is_scrubbed_in_either_form() {
        let seed = seed("https://example.com/r");
        let git = Git {
            seed: &seed,
            token: Some("s3cret"),
            home: PathBuf::new(),
        };
        let basic = base64::engine::general_purpose::STANDARD.encode("x-access-token:s3cret");
        assert_eq!(
            git.scrub(&format!("fatal: s3cret and {basic}")),
            "fatal: *** and ***"
        );
    }
}
