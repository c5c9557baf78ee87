//! [`PgWaiters`]: which waiters of one PostgreSQL client may be in the database's queue of
//! waiters (`waiters_sql.rs`), so that a wait that ends takes its waiter out, and only then.
//!
//! A waiter's attempt that does not win may leave it queued (an error too: the statement may
//! have been applied); one that wins takes it out. When the waiter's watch is dropped (its
//! wait ended: it won, gave up, failed or was cancelled), a waiter that may be queued leaves
//! the queue, in the background (`lock/queue.rs`). If an attempt of the waiter is still
//! under way then (a cancelled wait's attempt finishes in the background), the leave waits
//! for it to end, so that the attempt cannot queue the waiter again after it left. This
//! module only keeps the books; it runs nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The waiters of one client that have a live watch or an attempt under way. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct PgWaiters {
    entries: Arc<Mutex<HashMap<Arc<str>, Entry>>>,
}

#[derive(Debug)]
struct Entry {
    /// The lock's key.
    key: String,
    /// Whether the waiter may be in the queue.
    queued: bool,
    /// Attempts under way.
    in_flight: usize,
    /// Whether its watch was dropped.
    left: bool,
}

impl PgWaiters {
    fn entries(&self) -> MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A waiter of the lock `key` got its watch.
    pub(crate) fn watching(&self, waiter: Arc<str>, key: String) {
        self.entries().insert(
            waiter,
            Entry {
                key,
                queued: false,
                in_flight: 0,
                left: false,
            },
        );
    }

    /// An attempt of `waiter` starts: from now on it may be queued. Returns whether the waiter
    /// is tracked (it has a watch of this client); if so, [`attempted`](Self::attempted)
    /// must follow.
    pub(crate) fn attempting(&self, waiter: &str) -> bool {
        match self.entries().get_mut(waiter) {
            Some(entry) => {
                entry.queued = true;
                entry.in_flight += 1;
                true
            }
            None => false,
        }
    }

    /// An attempt of `waiter` ended; `won` if it took the lock (which took it out of the
    /// queue). Returns the key of the lock whose queue the waiter must leave now: its watch
    /// was dropped while the attempt was under way, and it may be queued.
    pub(crate) fn attempted(&self, waiter: &str, won: bool) -> Option<String> {
        let mut entries = self.entries();
        let entry = entries.get_mut(waiter)?;
        entry.in_flight = entry.in_flight.saturating_sub(1);
        if won {
            entry.queued = false;
        }
        if !entry.left || entry.in_flight > 0 {
            return None;
        }
        let entry = entries.remove(waiter)?;
        entry.queued.then_some(entry.key)
    }

    /// The watch of `waiter` was dropped. Returns the key of the lock whose queue it must
    /// leave now, if it may be queued and no attempt of it is under way (else the last
    /// attempt to end says so).
    pub(crate) fn left(&self, waiter: &str) -> Option<String> {
        let mut entries = self.entries();
        let entry = entries.get_mut(waiter)?;
        entry.left = true;
        if entry.in_flight > 0 {
            return None;
        }
        let entry = entries.remove(waiter)?;
        entry.queued.then_some(entry.key)
    }

    /// How many waiters are tracked (a test hook: the books do not grow without bound).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracked(waiters: &PgWaiters, id: &str) -> Arc<str> {
        let id: Arc<str> = id.into();
        waiters.watching(id.clone(), "k".to_owned());
        id
    }

    #[test]
    fn a_waiter_that_won_leaves_nothing_to_do() {
        let waiters = PgWaiters::default();
        let id = tracked(&waiters, "a");
        assert!(waiters.attempting(&id));
        assert_eq!(waiters.attempted(&id, false), None);
        assert!(waiters.attempting(&id));
        assert_eq!(waiters.attempted(&id, true), None);
        assert_eq!(waiters.left(&id), None, "won: out of the queue already");
        assert_eq!(waiters.len(), 0);
    }

    #[test]
    fn a_waiter_that_gave_up_leaves_its_queue() {
        let waiters = PgWaiters::default();
        let id = tracked(&waiters, "a");
        assert_eq!(waiters.left(&id), None, "never attempted: never queued");
        let id = tracked(&waiters, "b");
        assert!(waiters.attempting(&id));
        assert_eq!(waiters.attempted(&id, false), None);
        assert_eq!(waiters.left(&id).as_deref(), Some("k"));
        assert_eq!(waiters.len(), 0);
    }

    #[test]
    fn a_leave_waits_for_the_attempt_under_way() {
        let waiters = PgWaiters::default();
        let id = tracked(&waiters, "a");
        assert!(waiters.attempting(&id));
        assert_eq!(waiters.left(&id), None, "the attempt may queue it after a leave");
        assert_eq!(waiters.attempted(&id, false).as_deref(), Some("k"));
        assert_eq!(waiters.len(), 0);

        let id = tracked(&waiters, "b");
        assert!(waiters.attempting(&id));
        assert_eq!(waiters.left(&id), None);
        assert_eq!(waiters.attempted(&id, true), None, "it won: out of the queue");
        assert_eq!(waiters.len(), 0);
    }

    #[test]
    fn unknown_waiters_are_not_tracked() {
        let waiters = PgWaiters::default();
        assert!(!waiters.attempting("stranger"));
        assert_eq!(waiters.attempted("stranger", false), None);
        assert_eq!(waiters.len(), 0);
    }
}
