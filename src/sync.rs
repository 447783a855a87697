//! Locks that say so when they were poisoned.
//!
//! A poisoned `std::sync::Mutex` means a thread panicked while it held the
//! lock: a bug. Treating that as "no lock, do nothing" (`if let Ok(..) =
//! lock()`) turns the bug into silence: a registry update skipped, a run
//! that can never be cancelled. Here the data is taken as the panicking
//! thread left it (every value behind these locks is kept consistent at
//! each step), and the poisoning is logged as the error it is.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`; a poisoned one is logged and its data taken as it is.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned: PoisonError<_>| {
        tracing::error!(
            "a lock was poisoned (a thread panicked while holding it): a bug; going on with its data"
        );
        poisoned.into_inner()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_locks() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let held = std::sync::Arc::clone(&mutex);
        let _ = std::thread::spawn(move || {
            let _guard = held.lock();
            panic!("poisons the lock");
        })
        .join();
        assert!(mutex.is_poisoned());
        *lock(&mutex) += 1;
        assert_eq!(*lock(&mutex), 2);
    }
}
