//! [`LocalWaiters`]: wakes this process's waiters of a lock, one per release, when a client of
//! this process releases it.
//!
//! The memory store wakes its waiters with it. Stores that publish nothing (SQL, memcached)
//! use it too: their waiters still poll for releases by other processes, but a release by
//! any client of the same store in this process wakes one of them at once instead of at its
//! next poll.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{
    Capabilities, DistributedLock, Lease, LockName, LockState, LossReason, OwnerToken, ReleaseWatch, Result,
    Session, TryAcquire, WakeUp,
};

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

#[derive(Default)]
struct Names {
    by_name: HashMap<LockName, Waiters>,
    next_id: u64,
}

/// The waiters of one name.
#[derive(Default)]
struct Waiters {
    /// Releases announced so far (see [`LocalWaiters::releases`]).
    releases: u64,
    /// Every live watch, by waiter id, and whether it was woken and has not tried since.
    watches: HashMap<u64, (watch::Sender<u64>, bool)>,
    /// The waiters queued by their last attempt, the next to wake first, each with the end
    /// of its stay.
    queue: VecDeque<(u64, Instant)>,
}

impl Waiters {
    fn dequeue(&mut self, id: u64) {
        self.queue.retain(|(queued, _)| *queued != id);
        if let Some((_, woken)) = self.watches.get_mut(&id) {
            *woken = false;
        }
    }

    /// Wakes the first queued waiter still there and within its stay.
    fn wake_next(&mut self, now: Instant) {
        while let Some((id, until)) = self.queue.pop_front() {
            if until <= now {
                continue;
            }
            if let Some((tx, woken)) = self.watches.get_mut(&id) {
                *woken = true;
                tx.send_modify(|n| *n = n.wrapping_add(1));
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

    /// A new waiter's watch of `name`. With `polls`, the watch also tells the waiter to keep
    /// polling (its store does not announce releases by other processes): see
    /// [`ReleaseWatch::is_notified`].
    pub fn watch(&self, name: &LockName, polls: bool) -> ReleaseWatch {
        let mut names = self.names();
        names.next_id += 1;
        let id = names.next_id;
        let (tx, rx) = watch::channel(0);
        names
            .by_name
            .entry(name.clone())
            .or_default()
            .watches
            .insert(id, (tx, false));
        let keep = Leave {
            waiters: self.clone(),
            name: name.clone(),
            id,
        };
        let watch = ReleaseWatch::for_waiter(rx, keep, id.to_string());
        if polls {
            watch.polling_too()
        } else {
            watch
        }
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
        let Ok(id) = waiter.parse::<u64>() else { return };
        let now = Instant::now();
        let until = now.checked_add(stay).unwrap_or(now + Duration::from_secs(3600));
        if let Some(waiters) = self.names().by_name.get_mut(name) {
            waiters.dequeue(id);
            if waiters.releases != seen {
                if let Some((tx, woken)) = waiters.watches.get_mut(&id) {
                    *woken = true;
                    tx.send_modify(|n| *n = n.wrapping_add(1));
                }
                return;
            }
            waiters.queue.push_back((id, until));
        }
    }

    /// Takes `waiter` out of the queue of `name`: it won the lock.
    pub fn dequeue(&self, name: &LockName, waiter: &str) {
        let Ok(id) = waiter.parse::<u64>() else { return };
        if let Some(waiters) = self.names().by_name.get_mut(name) {
            waiters.dequeue(id);
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

/// A polling backend with this process's waiters woken by this process's releases: what
/// [`LockClient`](crate::LockClient) puts around a backend that polls and names its store
/// ([`DistributedLock::store_identity`]).
#[derive(Debug)]
pub(crate) struct LocallyWoken {
    inner: Arc<dyn DistributedLock>,
    waiters: LocalWaiters,
}

impl LocallyWoken {
    /// `lock` wrapped, if it polls and names its store; else `lock` itself.
    pub(crate) fn wrap(lock: Arc<dyn DistributedLock>) -> Arc<dyn DistributedLock> {
        if lock.capabilities().wake_up != WakeUp::Polling {
            return lock;
        }
        match lock.store_identity() {
            Some(identity) => Arc::new(Self {
                waiters: LocalWaiters::for_store(&identity),
                inner: lock,
            }),
            None => lock,
        }
    }
}

#[async_trait]
impl DistributedLock for LocallyWoken {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn try_acquire(&self, name: &LockName, owner: OwnerToken, ttl: Duration) -> Result<TryAcquire> {
        self.inner.try_acquire(name, owner, ttl).await
    }

    async fn try_acquire_waiting(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        waiter: &str,
        stay: Duration,
    ) -> Result<TryAcquire> {
        let seen = self.waiters.releases(name);
        let outcome = self.inner.try_acquire(name, owner, ttl).await;
        match &outcome {
            Ok(TryAcquire::Held(_)) => self.waiters.queue(name, waiter, stay, seen),
            _ => self.waiters.dequeue(name, waiter),
        }
        outcome
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let released = self.inner.release(lease).await;
        if matches!(released, Ok(true)) {
            self.waiters.released(lease.name());
        }
        released
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.extend(lease, ttl).await
    }

    async fn extend_many(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.inner.extend_many(leases).await
    }

    async fn watch(&self, name: &LockName) -> Result<ReleaseWatch> {
        Ok(self.waiters.watch(name, true))
    }

    fn store_identity(&self) -> Option<String> {
        self.inner.store_identity()
    }

    fn session(&self) -> Option<watch::Receiver<Session>> {
        self.inner.session()
    }

    fn watch_lease(&self, lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        self.inner.watch_lease(lease)
    }

    async fn inspect(&self, name: &LockName) -> Result<LockState> {
        self.inner.inspect(name).await
    }

    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
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
        waiters.queue.retain(|(queued, _)| *queued != self.id);
        if let Some((_, woken)) = waiters.watches.remove(&self.id) {
            if woken {
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
