//! A run's workspace as its tools reach it: the directory is made on the
//! run's first write (or command), not when the run is accepted. Until then
//! reads see an empty workspace (one empty directory the server shares, so
//! they go through the same confinement and give the same answers as any
//! other), and a run that never writes costs no directory at all. Making a
//! directory was the largest single cost of a short run.
//!
//! A run seeded from its request's files alone has its workspace from the
//! start, and its starting tree is kept on its first write: until then the
//! workspace is that tree, and a run that never writes costs nothing for it.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::workspace::{Workspace, WorkspaceOptions};
use crate::sync::lock;

/// Name of the shared empty directory beside the runs' workspaces; never a
/// run id, which is a UUID.
pub const EMPTY_DIR: &str = ".empty";

/// Where the runs' workspaces live, and the empty one reads fall back to.
#[derive(Debug)]
pub struct Workspaces {
    root: PathBuf,
    options: WorkspaceOptions,
    empty: OnceLock<Arc<Workspace>>,
}

impl Workspaces {
    pub fn new(root: impl Into<PathBuf>, options: WorkspaceOptions) -> Self {
        Self {
            root: root.into(),
            options,
            empty: OnceLock::new(),
        }
    }

    /// The directory the workspaces are in.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// The directory of the workspace named `name` (a run id).
    pub fn dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The workspace of `name`, made on its first write.
    pub fn run(self: &Arc<Self>, name: &str) -> RunWorkspace {
        RunWorkspace {
            dir: self.dir(name),
            workspaces: Some(Arc::clone(self)),
            opened: OnceLock::new(),
            creating: Mutex::new(()),
            written: AtomicBool::new(false),
            keep_base: None,
        }
    }

    fn empty(&self) -> io::Result<Arc<Workspace>> {
        if let Some(empty) = self.empty.get() {
            return Ok(Arc::clone(empty));
        }
        let dir = self.root.join(EMPTY_DIR);
        std::fs::create_dir_all(&dir)?;
        let workspace = Arc::new(Workspace::open_with(&dir, self.options.clone())?);
        Ok(Arc::clone(self.empty.get_or_init(|| workspace)))
    }
}

/// One run's workspace: opened when first needed, made on its first write.
#[derive(Debug)]
pub struct RunWorkspace {
    dir: PathBuf,
    /// `None` for a workspace that was open from the start.
    workspaces: Option<Arc<Workspaces>>,
    opened: OnceLock<Arc<Workspace>>,
    creating: Mutex<()>,
    /// Opened for a write (or a command, or an MCP server) by this run's
    /// tools: its files may have changed.
    written: AtomicBool,
    /// Where its starting tree is copied before its first write, unless it
    /// is there already (see [`RunWorkspace::keeping_starting_tree`]).
    keep_base: Option<PathBuf>,
}

impl From<Arc<Workspace>> for RunWorkspace {
    /// A workspace that is already open (and so exists).
    fn from(workspace: Arc<Workspace>) -> Self {
        Self {
            dir: workspace.root().to_owned(),
            workspaces: None,
            opened: OnceLock::from(workspace),
            creating: Mutex::new(()),
            written: AtomicBool::new(false),
            keep_base: None,
        }
    }
}

impl From<Workspace> for RunWorkspace {
    fn from(workspace: Workspace) -> Self {
        Arc::new(workspace).into()
    }
}

impl RunWorkspace {
    /// Copies the workspace as it is to `base` before the first write
    /// opens it (once: a `base` that exists, kept by an earlier execution
    /// of the run, is its starting tree already).
    pub fn keeping_starting_tree(mut self, base: PathBuf) -> Self {
        self.keep_base = Some(base);
        self
    }

    /// The read limit of the workspace's files.
    pub fn max_read_bytes(&self) -> u64 {
        match (self.opened.get(), &self.workspaces) {
            (Some(workspace), _) => workspace.max_read_bytes(),
            (None, Some(workspaces)) => workspaces.options.max_read_bytes,
            (None, None) => super::workspace::DEFAULT_MAX_READ_BYTES,
        }
    }

    /// The workspace for a read: the run's own once it exists, else the
    /// shared empty one. Blocking.
    pub fn for_reading(&self) -> io::Result<Arc<Workspace>> {
        if let Some(workspace) = self.opened.get() {
            return Ok(Arc::clone(workspace));
        }
        let Some(workspaces) = &self.workspaces else {
            return Err(io::Error::other("the workspace is not open"));
        };
        // One stat, rather than the failing canonicalisation (a readlink per
        // component) of opening a directory that is not there.
        if let Err(error) = std::fs::symlink_metadata(&self.dir)
            && error.kind() == io::ErrorKind::NotFound
        {
            return workspaces.empty();
        }
        match Workspace::open_with(&self.dir, workspaces.options.clone()) {
            Ok(workspace) => Ok(self.keep(workspace)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => workspaces.empty(),
            Err(error) => Err(error),
        }
    }

    /// The run's own workspace, made if it does not exist yet: for a write
    /// or a command. Blocking.
    pub fn for_writing(&self) -> io::Result<Arc<Workspace>> {
        if self.keep_base.is_some() && !self.written.load(Ordering::Acquire) {
            self.keep_starting_tree()?;
        }
        self.written.store(true, Ordering::Release);
        if let Some(workspace) = self.opened.get() {
            return Ok(Arc::clone(workspace));
        }
        let Some(workspaces) = &self.workspaces else {
            return Err(io::Error::other("the workspace is not open"));
        };
        // One maker at a time; the others find it made.
        let _making = lock(&self.creating);
        if let Some(workspace) = self.opened.get() {
            return Ok(Arc::clone(workspace));
        }
        match std::fs::create_dir(&self.dir) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
        let workspace = Workspace::open_with(&self.dir, workspaces.options.clone())?;
        Ok(self.keep(workspace))
    }

    /// Whether anything asked for the workspace to write to it: if not,
    /// its files are as they were seeded.
    pub fn was_written(&self) -> bool {
        self.written.load(Ordering::Relaxed)
    }

    /// The first write's: copies the workspace to its `keep_base` unless
    /// that is there. The others wait for it, and a copy that failed fails
    /// the write (and is tried again by the next).
    fn keep_starting_tree(&self) -> io::Result<()> {
        let Some(base) = &self.keep_base else {
            return Ok(());
        };
        let _making = lock(&self.creating);
        if self.written.load(Ordering::Acquire) || std::fs::symlink_metadata(base).is_ok() {
            return Ok(());
        }
        super::copy::keep_starting_tree(&self.dir, base)
    }

    fn keep(&self, workspace: Workspace) -> Arc<Workspace> {
        Arc::clone(self.opened.get_or_init(|| Arc::new(workspace)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_made_on_the_first_write_and_reads_before_see_it_empty() {
        let root = tempfile::tempdir().unwrap();
        let workspaces = Arc::new(Workspaces::new(root.path(), WorkspaceOptions::default()));
        let run = workspaces.run("run");
        let read = run.for_reading().unwrap();
        assert!(read.list_dir(".").unwrap().is_empty());
        assert!(read.read_file("a.txt").is_err());
        assert!(!root.path().join("run").exists(), "a read makes nothing");
        run.for_writing()
            .unwrap()
            .write_file("a.txt", b"x")
            .unwrap();
        assert!(root.path().join("run").is_dir());
        assert_eq!(run.for_reading().unwrap().read_file("a.txt").unwrap(), "x");
        // The shared empty workspace stayed empty.
        let other = workspaces.run("other").for_reading().unwrap();
        assert!(other.list_dir(".").unwrap().is_empty());
    }

    #[test]
    fn the_starting_tree_is_kept_on_the_first_write_once() {
        let root = tempfile::tempdir().unwrap();
        let workspaces = Arc::new(Workspaces::new(root.path(), WorkspaceOptions::default()));
        std::fs::create_dir_all(root.path().join("run/src")).unwrap();
        std::fs::write(root.path().join("run/src/a.py"), "x = 1\n").unwrap();
        let base = root.path().join(".bases/run");
        let run = workspaces.run("run").keeping_starting_tree(base.clone());
        assert_eq!(
            run.for_reading().unwrap().read_file("src/a.py").unwrap(),
            "x = 1\n"
        );
        assert!(!base.exists(), "a read keeps nothing");
        run.for_writing()
            .unwrap()
            .write_file("src/a.py", b"x = 2\n")
            .unwrap();
        assert_eq!(std::fs::read(base.join("src/a.py")).unwrap(), b"x = 1\n");
        run.for_writing()
            .unwrap()
            .write_file("src/b.py", b"y\n")
            .unwrap();
        assert!(
            !base.join("src/b.py").exists(),
            "kept once, before the first"
        );

        // Another execution of the run (resumed elsewhere) keeps the tree
        // that is there.
        let again = workspaces.run("run").keeping_starting_tree(base.clone());
        again.for_writing().unwrap();
        assert_eq!(std::fs::read(base.join("src/a.py")).unwrap(), b"x = 1\n");
        assert!(!base.join("src/b.py").exists());
    }
}
