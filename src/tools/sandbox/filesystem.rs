//! The filesystem rules of a command, as a Landlock ruleset.
//!
//! Landlock only allows: a ruleset handles every filesystem right the
//! kernel knows, and each rule grants some of them beneath one directory
//! (or on one file). A command gets:
//! - every right in its workspace and its private `TMPDIR` (including
//!   execute: `cargo test` runs what it built there);
//! - read and execute beneath each read path;
//! - for `/dev`, far less than its hierarchy: the listing, read and write
//!   on `null`, `zero`, `full` and `tty`, and read on `random` and
//!   `urandom`. A read rule for all of `/dev` would let a command running
//!   as root read the raw disk (`/dev/vda` is root's, mode 0600) and with
//!   it the database.
//!
//! The ruleset also handles TCP `bind`/`connect` for a command without
//! network (Landlock ABI 4, the second lock beside seccomp) and scopes
//! signals and abstract UNIX sockets to the command's own domain (ABI 6),
//! so a command cannot signal the server or reach a socket it listens on.
//! Reading another process's `/proc/PID/environ`, `mem` or `root` is a
//! ptrace access, which Landlock refuses outside the command's domain.
//!
//! Rules are written for [`TARGET`]; on an older kernel the crate's
//! best-effort mode drops what the kernel lacks (the start-up log says
//! what is enforced), and a kernel without Landlock fails the command.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};

/// The newest Landlock ABI these rules are written for.
const TARGET: ABI = ABI::V6;

/// The device files under `/dev` a command may open: the ones every user
/// may, and that reveal nothing of the machine.
const DEVICES: [(&str, bool); 6] = [
    ("null", true),
    ("zero", true),
    ("full", true),
    ("tty", true),
    ("random", false),
    ("urandom", false),
];

/// What this kernel's Landlock enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Support {
    /// Filesystem rules (ABI 1, Linux 5.13).
    pub(super) filesystem: bool,
    /// TCP bind and connect rules (ABI 4, Linux 6.7).
    pub(super) tcp: bool,
    /// Signal and abstract UNIX socket scoping (ABI 6, Linux 6.12).
    pub(super) scopes: bool,
}

impl Support {
    /// Asks the kernel, feature by feature, with hard requirements.
    pub(super) fn probe() -> Self {
        let hard = || Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
        Self {
            filesystem: hard()
                .handle_access(AccessFs::from_all(ABI::V1))
                .and_then(Ruleset::create)
                .is_ok(),
            tcp: hard()
                .handle_access(AccessNet::from_all(ABI::V4))
                .and_then(Ruleset::create)
                .is_ok(),
            scopes: hard()
                .scope(Scope::from_all(ABI::V6))
                .and_then(Ruleset::create)
                .is_ok(),
        }
    }
}

/// One rule: rights beneath an opened path.
#[derive(Debug)]
pub(super) struct Grant {
    path: PathBuf,
    fd: PathFd,
    access: BitFlags<AccessFs>,
}

impl Grant {
    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

/// The rules for a read path: read and execute beneath it (or on it, for
/// a file), narrowed for `/dev`. A path that does not exist grants nothing.
pub(super) fn read_grants(path: &Path) -> Vec<Grant> {
    if path == Path::new("/dev") {
        let mut grants: Vec<Grant> = grant(path, AccessFs::ReadDir.into()).into_iter().collect();
        for (name, writable) in DEVICES {
            let access = if writable {
                AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
            } else {
                AccessFs::ReadFile.into()
            };
            grants.extend(grant(&path.join(name), access));
        }
        return grants;
    }
    let Ok(metadata) = std::fs::metadata(path) else {
        return Vec::new();
    };
    let mut access = AccessFs::from_read(TARGET);
    if !metadata.is_dir() {
        access &= AccessFs::from_file(TARGET);
    }
    grant(path, access).into_iter().collect()
}

/// Every right, beneath a directory the command owns (workspace, TMPDIR).
pub(super) fn full_grant(path: &Path) -> Result<Grant, String> {
    grant(path, AccessFs::from_all(TARGET)).ok_or_else(|| format!("cannot open {}", path.display()))
}

fn grant(path: &Path, access: BitFlags<AccessFs>) -> Option<Grant> {
    let fd = PathFd::new(path).ok()?;
    Some(Grant {
        path: path.to_owned(),
        fd,
        access,
    })
}

/// The ruleset of one command. `network: false` also handles TCP, with no
/// rule that allows any port.
pub(super) fn ruleset<'a>(
    grants: impl IntoIterator<Item = &'a Grant>,
    network: bool,
) -> Result<RulesetCreated, String> {
    let failed = |error: landlock::RulesetError| format!("landlock: {error}");
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(TARGET))
        .map_err(failed)?
        .scope(Scope::from_all(TARGET))
        .map_err(failed)?;
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET))
            .map_err(failed)?;
    }
    let mut created = ruleset.create().map_err(failed)?;
    for grant in grants {
        created = created
            .add_rule(PathBeneath::new(&grant.fd, grant.access))
            .map_err(|error| format!("landlock rule for {}: {error}", grant.path.display()))?;
    }
    Ok(created)
}
