//! One SQLite file, one server: while it runs, a server holds an exclusive
//! lock (`flock`) on a file beside its database (`NAME.lock`), which holds
//! its pid. A second server started on the same file finds it taken and
//! refuses to start, naming the first one's pid, instead of recovering
//! that one's running runs and executing them a second time. The kernel
//! lets go of the lock with the process, however it ends; the file itself
//! stays (removing it would race with a server starting).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{FlockOperation, flock};
use rustix::io::Errno;

use super::StoreError;
use crate::sync::lock;

/// The lock on a database, held until [`DatabaseLock::release`] or until
/// the last clone is dropped.
#[derive(Clone, Debug)]
pub struct DatabaseLock {
    file: Arc<Mutex<Option<File>>>,
}

impl DatabaseLock {
    /// Takes the lock of the SQLite file `database` (whose directory
    /// exists), or says who holds it.
    pub(super) fn take(database: &Path) -> Result<Self, StoreError> {
        let path = lock_path(database);
        let io = |error: std::io::Error| StoreError::Lock {
            path: path.display().to_string(),
            error: error.to_string(),
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(StoreError::InUse {
                    database: database.display().to_string(),
                    lock: path.display().to_string(),
                    pid: holder.trim().parse().ok(),
                });
            }
            Err(error) => return Err(io(error.into())),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self {
            file: Arc::new(Mutex::new(Some(file))),
        })
    }

    /// Lets go of the lock (the server closed its store): another server
    /// may take the database from now on.
    pub fn release(&self) {
        lock(&self.file).take();
    }
}

/// The lock file of the SQLite file `database`: `NAME.lock` beside it.
pub fn lock_path(database: &Path) -> PathBuf {
    let mut name = database.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    database.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_told_the_holders_pid_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("runs.db");
        let held = DatabaseLock::take(&database).unwrap();
        match DatabaseLock::take(&database) {
            Err(StoreError::InUse { pid, lock, .. }) => {
                assert_eq!(pid, Some(std::process::id()));
                assert!(lock.ends_with("runs.db.lock"), "{lock}");
            }
            other => panic!("{other:?}"),
        }
        held.release();
        let again = DatabaseLock::take(&database).unwrap();
        drop(again);
        DatabaseLock::take(&database).unwrap();
    }
}
