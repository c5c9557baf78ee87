//! [`LocalWaiters`]: wakes this process's waiters of a lock, one per release, when a client of
//! this process releases it, and the [`Inbox`] a lock handed over to a waiter arrives in.
//!
//! The memory store wakes its waiters with it. Stores that publish nothing (SQL, memcached)
//! use it too: their waiters still poll for releases by other processes, but a release by
//! any client of the same store in this process wakes one of them at once instead of at its
//! next poll. Where the store can pass a lock from one owner to the next in one operation
//! ([`DistributedLock::hand_over`]), such a release hands it straight to that waiter. And a
//! poll of a waiter that no release here woke is a read ([`DistributedLock::inspect`]) while
//! the lock stays held: it writes only when a read found it free. How the client calls
//! these tables around a polling store is in `local_wake`.
//!
//! [`DistributedLock::hand_over`]: crate::DistributedLock::hand_over
//! [`DistributedLock::inspect`]: crate::DistributedLock::inspect

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::cleanup::release_in_background;
use crate::store::Store;
use crate::{Lease, LockName, OwnerToken, ReleaseWatch};

/// The waiter queues of every store identity in this process (see [`LocalWaiters::for_store`]).
static STORES: LazyLock<Mutex<HashMap<String, Weak<Mutex<Names>>>>> = LazyLock::new(Mutex::default);

/// The waiters of one store in this process, by lock name. Cheap to clone; clones share them.
///
/// A backend hands out [`watch`](Self::watch)es, [`queue`](Self::queue)s a waiter whose
/// attempt found the lock held, [`dequeue`](Self::dequeue)s one that won, and calls
/// [`released`](Self::released) after each successful release, which wakes the first queued
/// waiter. A waiter woken but dropped before its next attempt passes the wake on.
///
/// ```
/// use distlock_core::{LocalWaiters, LockName, Woke};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let waiters = LocalWaiters::for_store("sqlite:/var/lib/app/locks.db#distlock_locks");
/// let name = LockName::new("report").unwrap();
/// let mut watch = waiters.watch(&name, true);
/// let id = watch.waiter().unwrap().clone();
/// let seen = waiters.releases(&name);
/// // ... an attempt finds the lock held ...
/// waiters.queue(&name, &id, Duration::from_secs(5), seen);
/// waiters.released(&name);
/// assert_eq!(watch.wait(Duration::from_secs(1)).await, Woke::Released);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct LocalWaiters {
    names: Arc<Mutex<Names>>,
}

struct Names {
    by_name: HashMap<LockName, Waiters>,
    next_id: u64,
    /// Random, and part of every waiter id handed out: the ids reach the store (a semaphore's
    /// or a waiting writer's record), where the waiters of every process meet, so they must
    /// not be a count that every process starts from 1.
    tag: String,
}

impl Default for Names {
    fn default() -> Self {
        Self {
            by_name: HashMap::new(),
            next_id: 0,
            tag: uuid::Uuid::new_v4().simple().to_string(),
        }
    }
}

impl Names {
    /// The id handed out for waiter `id`: `<tag>-<id>` (at most 53 characters of
    /// `[0-9a-f-]`, which every store's waiter column takes as it is).
    fn waiter_id(&self, id: u64) -> String {
        format!("{}-{id}", self.tag)
    }

    /// The waiter an id handed out by this table stands for.
    fn parse(&self, waiter: &str) -> Option<u64> {
        waiter
            .strip_prefix(self.tag.as_str())?
            .strip_prefix('-')?
            .parse()
            .ok()
    }
}

/// The waiters of one name.
#[derive(Default)]
struct Waiters {
    /// Releases announced so far (see [`LocalWaiters::releases`]).
    releases: u64,
    /// Every live watch, by waiter id.
    watches: HashMap<u64, Watcher>,
    /// The waiters queued by their last attempt, the next to wake first.
    queue: VecDeque<Queued>,
}

/// One live watch.
struct Watcher {
    tx: watch::Sender<u64>,
    /// Woken and has not tried since.
    woken: bool,
    /// Where a lock handed over to this waiter waits for it (shared with the waiter).
    inbox: Inbox,
}

impl Watcher {
    fn wake(&mut self) {
        self.woken = true;
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// One queued waiter.
struct Queued {
    id: u64,
    /// The end of its stay.
    until: Instant,
    /// Whom a lock handed over to this waiter goes to, if it can take one.
    ticket: Option<Ticket>,
}

/// The owner token and TTL a lock handed over to a waiter is taken with (those of the waiter's
/// last attempt).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    pub(crate) owner: OwnerToken,
    pub(crate) ttl: Duration,
}

/// The first queued waiter of a name, taken out of the queue to be handed the lock.
#[derive(Debug)]
pub(crate) struct Taker {
    name: LockName,
    id: u64,
    pub(crate) ticket: Ticket,
}

/// Where a lock handed over to a waiter is left until the waiter takes it: the hand-over's
/// channel, shared by the waiter and its entry in the table. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Inbox(Arc<Mutex<Option<Handed>>>);

impl Inbox {
    /// Leaves `handed` for the waiter; returns what was left before and not taken.
    fn put(&self, handed: Handed) -> Option<Handed> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(handed)
    }

    /// A lease handed over to the waiter by a release in this process, now the waiter's.
    pub(crate) fn take(&self) -> Option<Lease> {
        let handed = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        handed.and_then(Handed::into_lease)
    }
}

/// A lock handed over to a waiter. If the waiter is gone before it takes it, dropping it
/// releases the lock in the background (through the client's waiting layer that handed it
/// over, so the next waiter gets it).
struct Handed {
    lease: Option<Lease>,
    store: Store,
}

impl Handed {
    /// The lease, now the waiter's to hold.
    fn into_lease(mut self) -> Option<Lease> {
        self.lease.take()
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                release_in_background(
                    self.store.clone(),
                    lease,
                    "a lock handed over to a waiter that had gone",
                );
            }
        }
    }
}

impl Waiters {
    fn dequeue(&mut self, id: u64) {
        self.queue.retain(|queued| queued.id != id);
        if let Some(watcher) = self.watches.get_mut(&id) {
            watcher.woken = false;
        }
    }

    /// Wakes the first queued waiter still there and within its stay.
    fn wake_next(&mut self, now: Instant) {
        while let Some(queued) = self.queue.pop_front() {
            if queued.until <= now {
                continue;
            }
            if let Some(watcher) = self.watches.get_mut(&queued.id) {
                watcher.wake();
                return;
            }
        }
    }
}

impl LocalWaiters {
    /// Waiters of a store of its own (the memory store: each store is its own identity).
    pub fn new() -> Self {
        Self::default()
    }

    /// The waiters of the store `identity` in this process, shared by every client that gives
    /// the same identity (for example `sqlite:<absolute path>#<table>`): clients of one store
    /// must give one identity, and clients of different stores different ones.
    pub fn for_store(identity: &str) -> Self {
        let mut stores = STORES.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(names) = stores.get(identity).and_then(Weak::upgrade) {
            return Self { names };
        }
        stores.retain(|_, names| names.strong_count() > 0);
        let waiters = Self::default();
        stores.insert(identity.to_owned(), Arc::downgrade(&waiters.names));
        waiters
    }

    fn names(&self) -> MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new waiter's watch of `name`, with a waiter id unique across processes (a random tag
    /// of this table and a count), since stores record it. With `polls`, the watch also tells
    /// the waiter to keep polling (its store does not announce releases by other processes):
    /// see [`ReleaseWatch::is_notified`].
    pub fn watch(&self, name: &LockName, polls: bool) -> ReleaseWatch {
        self.watch_with_inbox(name, polls).0
    }

    /// As [`watch`](Self::watch), with the inbox a lock handed over to this waiter arrives in
    /// (see [`deliver`](Self::deliver)).
    pub(crate) fn watch_with_inbox(&self, name: &LockName, polls: bool) -> (ReleaseWatch, Inbox) {
        let mut names = self.names();
        names.next_id += 1;
        let id = names.next_id;
        let (tx, rx) = watch::channel(0);
        let inbox = Inbox::default();
        names.by_name.entry(name.clone()).or_default().watches.insert(
            id,
            Watcher {
                tx,
                woken: false,
                inbox: inbox.clone(),
            },
        );
        let keep = Leave {
            waiters: self.clone(),
            name: name.clone(),
            id,
        };
        let watch = ReleaseWatch::for_waiter(rx, keep, names.waiter_id(id));
        let watch = if polls { watch.polling_too() } else { watch };
        (watch, inbox)
    }

    /// How many releases of `name` were announced while it had waiters: read it before an
    /// attempt and give it to [`queue`](Self::queue) after, so a release in between is not
    /// missed.
    pub fn releases(&self, name: &LockName) -> u64 {
        self.names().by_name.get(name).map_or(0, |w| w.releases)
    }

    /// Queues `waiter` (at the back, for `stay`): its attempt found `name` held. `seen` is
    /// [`releases`](Self::releases) from before the attempt: if a release was announced since,
    /// the waiter is woken at once instead.
    pub fn queue(&self, name: &LockName, waiter: &str, stay: Duration, seen: u64) {
        self.queue_with(name, waiter, stay, seen, None);
    }

    /// As [`queue`](Self::queue); with a `ticket`, a release by this process may hand the
    /// lock straight to this waiter, taken with the ticket's owner and TTL.
    pub(crate) fn queue_with(
        &self,
        name: &LockName,
        waiter: &str,
        stay: Duration,
        seen: u64,
        ticket: Option<Ticket>,
    ) {
        let now = Instant::now();
        let until = now.checked_add(stay).unwrap_or(now + Duration::from_secs(3600));
        let mut names = self.names();
        let Some(id) = names.parse(waiter) else { return };
        if let Some(waiters) = names.by_name.get_mut(name) {
            waiters.dequeue(id);
            if waiters.releases != seen {
                if let Some(watcher) = waiters.watches.get_mut(&id) {
                    watcher.wake();
                }
                return;
            }
            waiters.queue.push_back(Queued { id, until, ticket });
        }
    }

    /// Whether `waiter` is in the queue of `name`: its last attempt found the lock held, and no
    /// release by this process woke it since (nor handed it the lock).
    pub(crate) fn is_queued(&self, name: &LockName, waiter: &str) -> bool {
        let names = self.names();
        let Some(id) = names.parse(waiter) else {
            return false;
        };
        names
            .by_name
            .get(name)
            .is_some_and(|waiters| waiters.queue.iter().any(|queued| queued.id == id))
    }

    /// Takes the first queued waiter of `name` out of the queue to hand it the lock, if it
    /// is live, within its stay, and queued with a ticket.
    pub(crate) fn take_next(&self, name: &LockName) -> Option<Taker> {
        let now = Instant::now();
        let mut names = self.names();
        let waiters = names.by_name.get_mut(name)?;
        while let Some(queued) = waiters.queue.pop_front() {
            if queued.until <= now || !waiters.watches.contains_key(&queued.id) {
                continue;
            }
            let Some(ticket) = queued.ticket else {
                waiters.queue.push_front(queued);
                return None;
            };
            return Some(Taker {
                name: name.clone(),
                id: queued.id,
                ticket,
            });
        }
        None
    }

    /// Leaves `lease`, handed over to `taker`, in its inbox and wakes it; if it is gone, the
    /// lease is released through `store` in the background (see [`Handed`]).
    pub(crate) fn deliver(&self, taker: &Taker, lease: Lease, store: Store) {
        let handed = Handed {
            lease: Some(lease),
            store,
        };
        let mut names = self.names();
        let watcher = names
            .by_name
            .get_mut(&taker.name)
            .and_then(|waiters| waiters.watches.get_mut(&taker.id));
        let undelivered = match watcher {
            Some(watcher) => {
                let earlier = watcher.inbox.put(handed);
                watcher.tx.send_modify(|n| *n = n.wrapping_add(1));
                earlier
            }
            None => Some(handed),
        };
        drop(names);
        drop(undelivered);
    }

    /// Wakes `taker`, to whom the lock was not handed after all, so that it tries itself.
    pub(crate) fn wake(&self, taker: &Taker) {
        if let Some(waiters) = self.names().by_name.get_mut(&taker.name) {
            if let Some(watcher) = waiters.watches.get_mut(&taker.id) {
                watcher.wake();
            }
        }
    }

    /// Takes `waiter` out of the queue of `name`: it won the lock.
    pub fn dequeue(&self, name: &LockName, waiter: &str) {
        let mut names = self.names();
        let Some(id) = names.parse(waiter) else { return };
        if let Some(waiters) = names.by_name.get_mut(name) {
            waiters.dequeue(id);
        }
    }

    /// A hold of the semaphore or read-write lock `name` was released by a client of this
    /// process: wakes every waiter of it here (a permit or a writer's release may let several
    /// in; each tries once and the losers go back to waiting).
    pub(crate) fn released_all(&self, name: &LockName) {
        if let Some(waiters) = self.names().by_name.get_mut(name) {
            waiters.releases = waiters.releases.wrapping_add(1);
            for watcher in waiters.watches.values_mut() {
                watcher.wake();
            }
        }
    }

    /// `name` was released by a client of this process: wakes its first queued waiter.
    pub fn released(&self, name: &LockName) {
        if let Some(waiters) = self.names().by_name.get_mut(name) {
            waiters.releases = waiters.releases.wrapping_add(1);
            waiters.wake_next(Instant::now());
        }
    }

    /// How many names have live watches (a test hook: the table does not grow without bound).
    pub fn len(&self) -> usize {
        self.names().by_name.len()
    }

    /// Whether no name has a live watch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for LocalWaiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalWaiters")
            .field("names", &self.len())
            .finish()
    }
}

/// Held by a waiter's watch: dropping it takes the waiter out, passing on a wake it got and
/// did not use.
struct Leave {
    waiters: LocalWaiters,
    name: LockName,
    id: u64,
}

impl Drop for Leave {
    fn drop(&mut self) {
        let mut names = self.waiters.names();
        let Some(waiters) = names.by_name.get_mut(&self.name) else {
            return;
        };
        waiters.queue.retain(|queued| queued.id != self.id);
        if let Some(watcher) = waiters.watches.remove(&self.id) {
            if watcher.woken {
                waiters.wake_next(Instant::now());
            }
        }
        if waiters.watches.is_empty() {
            names.by_name.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Woke;

    fn name() -> LockName {
        LockName::new("l").expect("valid")
    }

    #[tokio::test]
    async fn a_release_wakes_the_first_queued_waiter_only() {
        let waiters = LocalWaiters::new();
        let (mut a, mut b) = (waiters.watch(&name(), false), waiters.watch(&name(), false));
        for w in [&a, &b] {
            waiters.queue(&name(), w.waiter().expect("id"), Duration::from_secs(5), 0);
        }
        waiters.released(&name());
        assert_eq!(a.wait(Duration::from_secs(1)).await, Woke::Released);
        assert_eq!(b.wait(Duration::from_millis(50)).await, Woke::TimedOut);
        waiters.released(&name());
        assert_eq!(b.wait(Duration::from_secs(1)).await, Woke::Released);
    }

    #[tokio::test]
    async fn a_woken_waiter_that_goes_passes_the_wake_on() {
        let waiters = LocalWaiters::new();
        let (a, mut b) = (waiters.watch(&name(), false), waiters.watch(&name(), false));
        for w in [&a, &b] {
            waiters.queue(&name(), w.waiter().expect("id"), Duration::from_secs(5), 0);
        }
        waiters.released(&name());
        drop(a);
        assert_eq!(b.wait(Duration::from_secs(1)).await, Woke::Released);
        drop(b);
        assert!(waiters.is_empty());
    }

    #[tokio::test]
    async fn a_release_during_the_attempt_wakes_the_waiter_at_once() {
        let waiters = LocalWaiters::new();
        let mut w = waiters.watch(&name(), true);
        let seen = waiters.releases(&name());
        waiters.released(&name()); // while the attempt was on its way
        waiters.queue(&name(), w.waiter().expect("id"), Duration::from_secs(5), seen);
        assert_eq!(w.wait(Duration::from_secs(1)).await, Woke::Released);
    }

    /// Waiter ids reach the store (a semaphore's or writer's record on a polling store), where
    /// waiters of every process meet: two tables, as two processes have, each counting its
    /// waiters from the start, must never give the same id.
    #[test]
    fn waiter_ids_are_unique_across_processes() {
        let (here, there) = (LocalWaiters::new(), LocalWaiters::new());
        let (a, b) = (here.watch(&name(), true), there.watch(&name(), true));
        assert_ne!(a.waiter(), b.waiter(), "two processes' first waiters share an id");
    }

    #[tokio::test]
    async fn one_identity_one_queue() {
        let (x, y) = (LocalWaiters::for_store("s#1"), LocalWaiters::for_store("s#1"));
        let other = LocalWaiters::for_store("s#2");
        let mut w = x.watch(&name(), true);
        assert!(!w.is_notified(), "a polling store's waiter keeps polling");
        y.queue(&name(), w.waiter().expect("id"), Duration::from_secs(5), 0);
        other.released(&name());
        assert_eq!(w.wait(Duration::from_millis(50)).await, Woke::TimedOut);
        y.released(&name());
        assert_eq!(w.wait(Duration::from_secs(1)).await, Woke::Released);
    }
}
