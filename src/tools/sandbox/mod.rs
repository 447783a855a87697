//! The command sandbox: what a command's process tree can touch is bounded
//! by the kernel, not by trust in the preset (SPEC section 7). A preset
//! is chosen by name, but what it runs is usually the model's own code
//! (`cargo test` builds and runs what the model wrote).
//!
//! One [`Sandbox`] is detected when the server starts and shared by every
//! run; [`Sandbox::spawn`] starts one command under a [`CommandPolicy`].
//! The command tool uses it, and so will anything else that starts a
//! process for a run.
//!
//! - [`process_tree`]: a process group and cgroups per command, so the
//!   whole tree ends together, and its memory and process limits;
//! - [`cgroup`]: the cgroup hierarchies (v2, and v1 on hybrid machines);
//! - [`filesystem`]: the Landlock rules;
//! - [`network`]: the seccomp filters of a command without network;
//! - [`mounts`]: `/workspace`, `/tmp` and `/dev/shm` of its own;
//! - [`mounts`] also makes every other mount read-only in the command's
//!   namespace, and [`init`] gives it a PID namespace of its own, held by a
//!   small init;
//! - [`identity`]: the user a command runs as, and its workspace handed to
//!   it; [`uids`]: one user per live run;
//! - [`child`]: the steps the child takes between fork and exec;
//! - `report`: what the sandbox guarantees here, for the log and `/readyz`
//!   (where a guarantee cannot hold, presets are refused unless
//!   `[sandbox] allow_weaker`).
//!
//! With `mode = "off"` commands run unconfined (no Landlock, no seccomp,
//! capabilities kept) but still contained and limited: the limits protect
//! the server, not the command's secrets.

pub(crate) mod cgroup;
pub(crate) mod child;
pub(crate) mod filesystem;
pub(crate) mod identity;
pub(crate) mod init;
pub(crate) mod mounts;
pub(crate) mod network;
pub mod process_tree;
mod report;
pub mod uids;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use seccompiler::BpfProgram;
use serde::{Deserialize, Serialize};
use tokio::process::Command;

use child::{ChildSetup, Confinement};
use filesystem::Grant;
use mounts::{Layout, Pids};
pub(crate) use process_tree::ContainedChild;
pub use process_tree::{AppliedLimits, Containment, ContainmentKind, Resources};
pub use uids::{DEFAULT_UIDS, UidRange};
use uids::{Lease, UidPool};

/// `[sandbox] read_paths` when the config gives none (those that exist).
pub const DEFAULT_READ_PATHS: [&str; 11] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/dev", "/proc", "/sys",
];

/// A command's memory limit when neither the config nor the preset sets one.
pub const DEFAULT_MEMORY_MAX_BYTES: u64 = 1024 * 1024 * 1024;

/// A command's process limit when neither the config nor the preset sets one.
pub const DEFAULT_PIDS_MAX: u64 = 256;

/// Below this a program cannot even be loaded: a smaller limit is a
/// configuration error.
pub const MIN_MEMORY_MAX_BYTES: u64 = 1024 * 1024;

/// Whether commands are confined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Landlock, seccomp, no capabilities; the server refuses to start
    /// with presets when the kernel cannot.
    #[default]
    Enforce,
    /// Unconfined: the command has the server's own rights.
    Off,
}

/// The `[sandbox]` table of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// Where every command may read and execute (besides its workspace and
    /// TMPDIR). Replaces [`DEFAULT_READ_PATHS`] when given.
    pub read_paths: Vec<PathBuf>,
    pub memory_max_bytes: u64,
    pub pids_max: u64,
    /// The users (and groups of the same numbers) of commands when the
    /// server is root: one per live run.
    pub uids: UidRange,
    /// Run presets even where runs cannot be kept fully apart (no user
    /// or PID namespace, no `/proc` of their own, a root server that
    /// cannot change users).
    pub allow_weaker: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            mode: SandboxMode::Enforce,
            read_paths: DEFAULT_READ_PATHS.iter().map(PathBuf::from).collect(),
            memory_max_bytes: DEFAULT_MEMORY_MAX_BYTES,
            pids_max: DEFAULT_PIDS_MAX,
            uids: DEFAULT_UIDS,
            allow_weaker: false,
        }
    }
}

/// What one command may do beyond the server-wide rules: a preset's own
/// settings. Owned, so that the spawn can take it to a blocking thread.
#[derive(Debug, Clone)]
pub struct CommandPolicy {
    /// Read, write and execute; the command's working directory.
    pub workspace: PathBuf,
    /// Read and execute, besides `[sandbox] read_paths`.
    pub read_paths: Vec<PathBuf>,
    /// The host's network; without it, no socket at all.
    pub network: bool,
    /// Overrides `[sandbox] memory_max_bytes`.
    pub memory_max_bytes: Option<u64>,
    /// Overrides `[sandbox] pids_max`.
    pub pids_max: Option<u64>,
    /// `HOME` is the process's private TMPDIR rather than what the caller
    /// set: for a long-lived server (an MCP server), whose caches and
    /// settings are not the run's files.
    pub private_home: bool,
}

/// What confined a command, as its result reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxReport {
    /// `"landlock"`, or `"none"` with `mode = "off"`.
    pub filesystem: &'static str,
    /// `"blocked"` or `"allowed"`.
    pub network: &'static str,
    /// Null where nothing could bound it.
    pub memory_max_bytes: Option<u64>,
    /// Null where nothing could bound it.
    pub pids_max: Option<u64>,
}

/// How commands are confined on this machine: detected once at start.
#[derive(Debug)]
pub struct Sandbox {
    mode: SandboxMode,
    containment: Containment,
    landlock: filesystem::Support,
    /// `None` where seccomp is missing or the filters cannot be built for
    /// this architecture.
    no_network: Option<Arc<[BpfProgram]>>,
    /// The rules of `[sandbox] read_paths`, opened once.
    read: Vec<Grant>,
    defaults: Resources,
    /// Where each command's private TMPDIR is created.
    temp_root: PathBuf,
    /// The users of the runs' commands, when the server can give them.
    uids: Option<Arc<UidPool>>,
    /// Whether commands get `/workspace`, `/tmp` and `/dev/shm` of their
    /// own (and a PID namespace), or why not.
    layout: Result<mounts::Support, String>,
    allow_weaker: bool,
}

impl Sandbox {
    /// Probes the kernel (Landlock, seccomp, cgroups) under `config`. Never
    /// fails: [`Sandbox::missing`] says what an enforcing sandbox lacks.
    pub fn detect(config: &SandboxConfig) -> Self {
        Self::with_containment(config, Containment::detect())
    }

    /// What `config` asks of the kernel, found without changing anything
    /// (no cgroup made, no namespace tried): enough to say what an
    /// enforcing sandbox lacks and what it lets commands read, as
    /// `agent-runner config` does before anything is created. Its commands
    /// would run in process groups only: it is for checking, not spawning.
    pub fn probe(config: &SandboxConfig) -> Self {
        Self::assemble(
            config,
            Containment::process_group_only(),
            Err("not probed".into()),
        )
    }

    /// Under `config`, with the given containment (tests choose process
    /// groups only).
    pub fn with_containment(config: &SandboxConfig, containment: Containment) -> Self {
        let layout = if config.mode == SandboxMode::Enforce {
            mounts::available()
        } else {
            Err("the sandbox is off".into())
        };
        Self::assemble(config, containment, layout)
    }

    fn assemble(
        config: &SandboxConfig,
        containment: Containment,
        layout: Result<mounts::Support, String>,
    ) -> Self {
        let no_network = if network::supported() {
            match network::no_network_filters() {
                Ok(filters) => Some(filters.into()),
                Err(reason) => {
                    tracing::warn!(%reason, "cannot build the seccomp filters");
                    None
                }
            }
        } else {
            None
        };
        Self {
            mode: config.mode,
            containment,
            landlock: filesystem::Support::probe(),
            no_network,
            read: config
                .read_paths
                .iter()
                .flat_map(|path| filesystem::read_grants(path))
                .collect(),
            defaults: Resources {
                memory_max_bytes: config.memory_max_bytes,
                pids_max: config.pids_max,
            },
            temp_root: std::env::temp_dir(),
            uids: identity::can_give_users().then(|| UidPool::new(config.uids)),
            layout,
            allow_weaker: config.allow_weaker,
        }
    }

    /// Unconfined, process groups only, no limits: for tests of what is
    /// not the sandbox.
    pub fn unconfined() -> Self {
        let config = SandboxConfig {
            mode: SandboxMode::Off,
            ..SandboxConfig::default()
        };
        Self::with_containment(&config, Containment::process_group_only())
    }

    pub fn containment(&self) -> &Containment {
        &self.containment
    }

    /// The server-wide read paths that exist.
    pub fn read_paths(&self) -> impl Iterator<Item = &Path> {
        self.read.iter().map(Grant::path)
    }

    /// Refuses storage a command could reach: Landlock only allows, so a
    /// database, workspaces directory or config file beneath a read path
    /// (or a read path inside one of them) would be readable by every
    /// command. `extra` are the presets' own read paths.
    pub fn check_storage<'a>(
        &self,
        extra: impl IntoIterator<Item = &'a Path>,
        protected: &[(&str, &Path)],
    ) -> Result<(), String> {
        if self.mode == SandboxMode::Off {
            return Ok(());
        }
        let mut readable: Vec<PathBuf> = self.read_paths().filter_map(canonical).collect();
        readable.extend(extra.into_iter().filter_map(canonical));
        for (what, path) in protected {
            let Some(path) = canonical(path) else {
                continue;
            };
            if let Some(read) = readable
                .iter()
                .find(|read| path.starts_with(read) || read.starts_with(&path))
            {
                return Err(format!(
                    "the {what} {} overlaps the sandbox read path {}, so every command could \
                     read it: move it outside the read paths, or change [sandbox] read_paths \
                     (or the preset's read_paths)",
                    path.display(),
                    read.display()
                ));
            }
        }
        Ok(())
    }

    /// Starts `command` under `policy`: its own process group and cgroups,
    /// its limits, a private TMPDIR and, when enforcing, the Landlock rules,
    /// no capabilities and (without network) the socket filters. The
    /// command's environment, stdio and working directory are the caller's.
    ///
    /// All of that is file system work and a fork, which can block for a
    /// while on a busy machine, so it runs on a blocking thread. The child
    /// and its pipes are registered with the runtime there just the same. If
    /// this future is dropped meanwhile, the command, once started, is
    /// killed as the unused handle drops.
    pub(crate) async fn spawn(
        self: &Arc<Self>,
        command: Command,
        policy: CommandPolicy,
    ) -> io::Result<SandboxedChild> {
        let sandbox = Arc::clone(self);
        tokio::task::spawn_blocking(move || sandbox.spawn_here(command, &policy))
            .await
            .unwrap_or_else(|error| match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(error) => Err(io::Error::other(format!("the spawn was stopped: {error}"))),
            })
    }

    /// [`Sandbox::spawn`] on the calling thread, which it blocks.
    fn spawn_here(
        &self,
        mut command: Command,
        policy: &CommandPolicy,
    ) -> io::Result<SandboxedChild> {
        let enforce = self.mode == SandboxMode::Enforce;
        if enforce && !self.presets_allowed() {
            return Err(io::Error::other(format!(
                "the sandbox cannot keep runs apart on this server ({}), so it runs no \
                 command; its operator may accept that with [sandbox] allow_weaker = true",
                self.weaker().join("; ")
            )));
        }
        // The run's user, held while the command runs.
        let lease = match (&self.uids, enforce) {
            (Some(pool), true) => Some(pool.lease(&policy.workspace).ok_or_else(|| {
                io::Error::other(format!(
                    "every uid of [sandbox] uids ({}) belongs to a run with a command under \
                     way; retry when one has ended",
                    pool.range()
                ))
            })?),
            _ => None,
        };
        let run_as = lease.as_ref().map(Lease::owner);
        // The command's own directories: `tmp` (its TMPDIR) and `shm`.
        let private = tempfile::Builder::new()
            .prefix("agent-runner-cmd-")
            .tempdir_in(&self.temp_root)?;
        let tmp = private.path().join("tmp");
        let shm = private.path().join("shm");
        std::fs::create_dir(&tmp)?;
        std::fs::create_dir(&shm)?;
        // Covering the server's /tmp would hide a read path there.
        let hide_tmp = !self
            .read_paths()
            .chain(policy.read_paths.iter().map(PathBuf::as_path))
            .any(|path| path.starts_with(mounts::TMP));
        let support = self.layout.as_ref().ok().filter(|_| enforce);
        let layout = match support {
            Some(support) => {
                let mut layout = Layout::new(
                    &policy.workspace,
                    hide_tmp.then_some(tmp.as_path()),
                    &shm,
                    support.namespaces,
                )?;
                layout.pids = support.pids;
                if !hide_tmp {
                    layout.keep_writable(&tmp)?;
                }
                Some(layout)
            }
            None => None,
        };
        let seen_tmp = match layout {
            Some(_) if hide_tmp => Path::new(mounts::TMP),
            _ => tmp.as_path(),
        };
        let seen_workspace = match layout {
            Some(_) => Path::new(mounts::WORKSPACE),
            None => policy.workspace.as_path(),
        };
        command.env("TMPDIR", seen_tmp);
        command.env(
            "HOME",
            if policy.private_home {
                seen_tmp
            } else {
                seen_workspace
            },
        );
        if let Some(owner) = run_as {
            let done =
                identity::hand_over(&policy.workspace, owner, identity::MAX_HAND_OVER_ENTRIES)?;
            if done.cut {
                tracing::warn!(
                    workspace = %policy.workspace.display(),
                    entries = done.read,
                    "a workspace holds more entries than a command's hand-over reads: what \
                     lies past them keeps its owner"
                );
            }
            identity::hand_over(private.path(), owner, identity::MAX_HAND_OVER_ENTRIES)?;
        }
        // The init and the process that waits for it count too.
        let init_processes = match &layout {
            Some(layout) if layout.pids != Pids::Shared => 2,
            _ => 0,
        };
        let mut setup = ChildSetup::default();
        if enforce {
            let mut confinement = self.confinement(policy, &tmp, &shm)?;
            confinement.layout = layout;
            confinement.run_as = run_as;
            setup.confinement = Some(confinement);
        }
        let resources = Resources {
            memory_max_bytes: policy
                .memory_max_bytes
                .unwrap_or(self.defaults.memory_max_bytes),
            pids_max: policy.pids_max.unwrap_or(self.defaults.pids_max) + init_processes,
        };
        let (process, applied) = self.containment.spawn(command, resources, setup)?;
        let report = SandboxReport {
            filesystem: if enforce { "landlock" } else { "none" },
            network: if enforce && !policy.network {
                "blocked"
            } else {
                "allowed"
            },
            memory_max_bytes: applied.memory_max_bytes,
            pids_max: applied.pids_max.map(|max| max - init_processes),
        };
        Ok(SandboxedChild {
            process,
            report,
            _tmp: PrivateTmp(Some(private)),
            _user: lease,
        })
    }

    /// The rules of a command whose own directories are `tmp` and `shm`.
    /// Each is granted itself: bound elsewhere (`/tmp`, `/dev/shm`), a
    /// directory's ancestors are the mount point's, so a grant of their
    /// parent would not reach them.
    fn confinement(
        &self,
        policy: &CommandPolicy,
        tmp: &Path,
        shm: &Path,
    ) -> io::Result<Confinement> {
        let filters = if policy.network {
            Arc::from(Vec::new())
        } else {
            self.no_network
                .clone()
                .ok_or_else(|| io::Error::other("sandbox: seccomp filters are unavailable"))?
        };
        let own = [
            filesystem::full_grant(&policy.workspace).map_err(io::Error::other)?,
            filesystem::full_grant(tmp).map_err(io::Error::other)?,
            filesystem::full_grant(shm).map_err(io::Error::other)?,
        ];
        let extra: Vec<Grant> = policy
            .read_paths
            .iter()
            .flat_map(|path| filesystem::read_grants(path))
            .collect();
        let landlock =
            filesystem::ruleset(self.read.iter().chain(&extra).chain(&own), policy.network)
                .map_err(io::Error::other)?;
        let landlock_fd = landlock.try_clone()?.into();
        Ok(Confinement {
            landlock,
            landlock_fd,
            filters,
            layout: None,
            run_as: None,
        })
    }
}

/// A command started by [`Sandbox::spawn`]. Dropping it kills the tree,
/// then removes the TMPDIR: fields drop in declaration order.
#[derive(Debug)]
pub(crate) struct SandboxedChild {
    pub(crate) process: ContainedChild,
    pub(crate) report: SandboxReport,
    /// Held only to be removed, after `process`.
    _tmp: PrivateTmp,
    /// The run's user, given back once the command has ended.
    _user: Option<Lease>,
}

/// A command's private TMPDIR, removed when dropped. A command may have left
/// any number of files there, so inside the runtime the removal goes to a
/// blocking thread rather than holding up an async worker.
#[derive(Debug)]
struct PrivateTmp(Option<tempfile::TempDir>);

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let Some(tmp) = self.0.take() else {
            return;
        };
        let remove = move || {
            let path = tmp.path().to_owned();
            if let Err(error) = tmp.close() {
                tracing::warn!(%error, path = %path.display(), "could not remove a command's TMPDIR");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

/// `path` made absolute and free of symbolic links: its deepest existing
/// ancestor canonicalised, joined with the rest (a database about to be
/// created in a directory about to be created). `None` if the rest climbs
/// with `..`, which cannot be resolved without the directories.
fn canonical(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(found) = std::fs::canonicalize(existing) {
            let mut full = found;
            for part in rest.iter().rev() {
                full.push(part);
            }
            return Some(full);
        }
        let name = existing.file_name()?;
        rest.push(name.to_owned());
        existing = existing.parent()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_can_sandbox() {
        let sandbox = Sandbox::detect(&SandboxConfig::default());
        assert_eq!(sandbox.missing(), None, "{}", sandbox.describe());
        assert!(sandbox.describe().starts_with("sandbox enforced"));
    }

    #[test]
    fn a_kernel_without_landlock_is_named_as_what_is_missing() {
        let mut sandbox = Sandbox::detect(&SandboxConfig::default());
        sandbox.landlock.filesystem = false;
        let missing = sandbox.missing().unwrap();
        assert!(missing.starts_with("Landlock"), "{missing}");
        assert!(
            sandbox.describe().starts_with("sandbox cannot be enforced"),
            "{}",
            sandbox.describe()
        );
        sandbox.no_network = None;
        assert!(sandbox.missing().unwrap().contains("seccomp"));
        // Off asks nothing of the kernel.
        sandbox.mode = SandboxMode::Off;
        assert_eq!(sandbox.missing(), None);
    }

    #[test]
    fn a_root_server_that_cannot_change_users_says_so_and_refuses_presets() {
        let mut sandbox = Sandbox::detect(&SandboxConfig::default());
        if !rustix::process::geteuid().is_root() {
            return; // only root has users to give
        }
        assert!(sandbox.presets_allowed(), "{}", sandbox.describe());
        assert!(sandbox.describe().contains("a user of their run"));
        // A container's root without CAP_SETUID: its commands are root.
        sandbox.uids = None;
        let describe = sandbox.describe();
        assert!(
            describe.contains("commands run as root (uid 0)"),
            "{describe}"
        );
        assert!(!describe.contains("not root"), "{describe}");
        assert!(sandbox.weaker()[0].contains("without CAP_SETUID"));
        assert!(!sandbox.presets_allowed());
        assert_eq!(sandbox.guarantees()["presets"], "refused");
        sandbox.allow_weaker = true;
        assert!(sandbox.presets_allowed());
        assert_eq!(sandbox.guarantees()["presets"], "enabled_weaker");
    }

    #[test]
    fn storage_under_a_read_path_is_refused_and_elsewhere_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let config = SandboxConfig {
            read_paths: vec![dir.path().join("shared")],
            ..SandboxConfig::default()
        };
        std::fs::create_dir_all(dir.path().join("shared/data")).unwrap();
        std::fs::create_dir_all(dir.path().join("private")).unwrap();
        let sandbox = Sandbox::with_containment(&config, Containment::process_group_only());
        let db = dir.path().join("shared/data/runs.db");
        let error = sandbox.check_storage([], &[("database", &db)]).unwrap_err();
        assert!(error.contains("database"), "{error}");
        assert!(error.contains("shared"), "{error}");
        let private = dir.path().join("private");
        assert_eq!(
            sandbox.check_storage([], &[("workspaces directory", &private)]),
            Ok(())
        );
        // A preset's read path counts too, and so does one inside storage.
        let inside = private.join("one-run");
        std::fs::create_dir(&inside).unwrap();
        assert!(
            sandbox
                .check_storage([inside.as_path()], &[("workspaces directory", &private)])
                .is_err()
        );
        let off = Sandbox::unconfined();
        assert_eq!(off.check_storage([], &[("database", &db)]), Ok(()));
    }

    #[test]
    fn dev_is_narrowed_to_harmless_devices() {
        let grants = filesystem::read_grants(Path::new("/dev"));
        let paths: Vec<_> = grants.iter().map(|g| g.path().to_owned()).collect();
        assert!(paths.contains(&PathBuf::from("/dev/null")));
        assert!(
            !paths
                .iter()
                .any(|p| p.starts_with("/dev/vda") || p == Path::new("/dev/mem"))
        );
    }
}
