//! What the sandbox says of itself: what an enforcing sandbox lacks on
//! this machine, which of its guarantees do not hold (and so whether
//! presets run), the line the log gets at start and the JSON `/readyz`
//! answers.

use super::mounts::{self, Pids};
use super::{Sandbox, SandboxMode};

impl Sandbox {
    /// Where runs' commands cannot be kept apart on this machine, each
    /// reason a sentence; empty when every guarantee of the sandbox holds
    /// (or it is off).
    pub fn weaker(&self) -> Vec<String> {
        if self.mode == SandboxMode::Off {
            return Vec::new();
        }
        let mut weaker = Vec::new();
        match &self.layout {
            Err(why) => weaker.push(format!(
                "commands get no namespaces of their own, so they see the server's paths and \
                 processes, and can signal those of their user: {why}"
            )),
            Ok(support) => match support.pids {
                Pids::Own => {}
                Pids::OwnWithoutProc => weaker.push(
                    "no /proc can be mounted for a command's PID namespace: /proc lists every \
                     process of the machine"
                        .into(),
                ),
                Pids::Shared => weaker.push(
                    "no PID namespace can be made for a command: it sees the machine's \
                     processes, and can signal those of its user"
                        .into(),
                ),
            },
        }
        if rustix::process::geteuid().is_root() && self.uids.is_none() {
            weaker.push(
                "the server is root without CAP_SETUID, CAP_SETGID and CAP_CHOWN: commands run \
                 as root (uid 0), not as a user of their run"
                    .into(),
            );
        }
        weaker
    }

    /// Whether presets may run: every guarantee holds, or the operator
    /// accepts weaker ones.
    pub fn presets_allowed(&self) -> bool {
        self.allow_weaker || self.weaker().is_empty()
    }

    /// What the sandbox guarantees here, for `/readyz`.
    pub fn guarantees(&self) -> serde_json::Value {
        let support = self.layout.as_ref().ok();
        let enforce = self.mode == SandboxMode::Enforce;
        let weaker = self.weaker();
        let presets = if weaker.is_empty() {
            "enabled"
        } else if self.allow_weaker {
            "enabled_weaker"
        } else {
            "refused"
        };
        serde_json::json!({
            "mode": if enforce { "enforce" } else { "off" },
            "own_mount_namespace": enforce && support.is_some(),
            "rest_read_only": enforce && support.is_some(),
            "own_pid_namespace": enforce && support.is_some_and(|s| s.pids != Pids::Shared),
            "own_proc": enforce && support.is_some_and(|s| s.pids == Pids::Own),
            "user_per_run": enforce && self.uids.is_some(),
            "signals_scoped_by_landlock": enforce && self.landlock.scopes,
            "weaker": weaker,
            "allow_weaker": self.allow_weaker,
            "presets": presets,
        })
    }

    /// What the kernel lacks for `mode = "enforce"`, if anything.
    pub fn missing(&self) -> Option<String> {
        if self.mode == SandboxMode::Off {
            return None;
        }
        let mut missing = Vec::new();
        if !self.landlock.filesystem {
            missing.push("Landlock (Linux 5.13 or newer, with landlock in the kernel's lsm= list)");
        }
        if self.no_network.is_none() {
            missing.push("seccomp filters (CONFIG_SECCOMP_FILTER)");
        }
        (!missing.is_empty()).then(|| missing.join(" and "))
    }

    /// One line for the start-up log: what every command is held by.
    pub fn describe(&self) -> String {
        let limits = format!(
            "memory by {}, processes by {}",
            self.containment.memory_mechanism(),
            self.containment.pids_mechanism()
        );
        if self.mode == SandboxMode::Off {
            return format!("sandbox off: commands run unconfined; {limits}");
        }
        if let Some(missing) = self.missing() {
            return format!(
                "sandbox cannot be enforced: this kernel lacks {missing}, so command presets \
                 are refused; {limits}"
            );
        }
        let landlock = &self.landlock;
        let euid = rustix::process::geteuid();
        let user = match &self.uids {
            Some(pool) => format!("commands run as a user of their run ({})", pool.range()),
            None if euid.is_root() => "commands run as root (uid 0): the server lacks \
                 CAP_SETUID, CAP_SETGID or CAP_CHOWN"
                .to_owned(),
            None => format!(
                "commands run as the server's own user (uid {}: the server is not root)",
                euid.as_raw()
            ),
        };
        let layout = match &self.layout {
            Ok(support) => format!(
                "their workspace at {}, private {} and /dev/shm, every other mount read-only \
                 ({}); {}",
                mounts::WORKSPACE,
                mounts::TMP,
                match support.namespaces {
                    mounts::Namespaces::Privileged => "a mount namespace",
                    mounts::Namespaces::User =>
                        "a mount namespace in a user namespace mapping the server's user to itself",
                },
                match support.pids {
                    Pids::Own => "a PID namespace and /proc of their own",
                    Pids::OwnWithoutProc =>
                        "a PID namespace of their own, but the machine's /proc (none can be mounted)",
                    Pids::Shared => "the server's PID namespace (none can be made)",
                }
            ),
            Err(why) => format!("their workspace at its own path, /dev/shm not writable ({why})"),
        };
        let weaker = self.weaker();
        let weaker = if weaker.is_empty() {
            String::new()
        } else if self.allow_weaker {
            format!(
                "; runs are not fully kept apart ({}), and allow_weaker runs presets anyway",
                weaker.join("; ")
            )
        } else {
            format!(
                "; runs cannot be fully kept apart ({}), so command presets are refused unless \
                 [sandbox] allow_weaker = true",
                weaker.join("; ")
            )
        };
        format!(
            "sandbox enforced: filesystem by Landlock, network by seccomp{}{}; \
             capabilities dropped, no_new_privs; {user}; {layout}; {limits}{weaker}",
            if landlock.tcp {
                " and Landlock TCP rules"
            } else {
                ""
            },
            if landlock.scopes {
                "; signals and abstract sockets scoped to the command"
            } else {
                "; signals not scoped (Landlock before ABI 6): a command can signal \
                 processes of its own user"
            },
        )
    }
}
