//! [`LocalWaiters`]: wakes this process's waiters of a lock, one per release, when a client of
//! this process releases it.
//!
//! The memory store wakes its waiters with it. Stores that publish nothing (SQL, memcached)
//! use it too: their waiters still poll for releases by other processes, but a release by
//! any client of the same store in this process wakes one of them at once instead of at its
//! next poll. Where the store can pass a lock from one owner to the next in one operation
//! ([`DistributedLock::hand_over`]), such a release hands it straight to that waiter. And a
//! poll of a waiter that no release here woke is a read ([`DistributedLock::inspect`]) while
//! the lock stays held: it writes only when a read found it free.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cleanup::release_in_background;
use crate::{
    Attempt, Capabilities, DistributedLock, Error, Holder, Lease, LockKind, LockName, LockState, LossReason,
    Mechanics, ObjectState, OwnerToken, Primitive, ReleaseWatch, Result, Session, TryAcquire, WakeUp,
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
    /// Where a lock handed over to this waiter waits for it (shared with its watch).
    handed: HandedSlot,
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

/// Where a lock handed over to a waiter is left until the waiter takes it.
pub(crate) type HandedSlot = Arc<Mutex<Option<Handed>>>;

/// A lock handed over to a waiter. If the waiter is gone before it takes it, dropping it
/// releases the lock in the background (through the client that handed it over, so the next
/// waiter gets it).
pub(crate) struct Handed {
    lease: Option<Lease>,
    lock: Arc<dyn DistributedLock>,
}

impl Handed {
    /// The lease, now the waiter's to hold.
    pub(crate) fn into_lease(mut self) -> Option<Lease> {
        self.lease.take()
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                release_in_background(
                    self.lock.clone(),
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
        let mut names = self.names();
        names.next_id += 1;
        let id = names.next_id;
        let (tx, rx) = watch::channel(0);
        let handed = HandedSlot::default();
        names.by_name.entry(name.clone()).or_default().watches.insert(
            id,
            Watcher {
                tx,
                woken: false,
                handed: handed.clone(),
            },
        );
        let keep = Leave {
            waiters: self.clone(),
            name: name.clone(),
            id,
        };
        let watch = ReleaseWatch::for_waiter(rx, keep, names.waiter_id(id)).with_handed_slot(handed);
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

    /// Leaves `lease`, handed over to `taker`, for it to take, and wakes it; if it is gone,
    /// the lease is dropped, which releases it (see [`Handed`]).
    pub(crate) fn deliver(&self, taker: &Taker, lease: Lease, lock: Arc<dyn DistributedLock>) {
        let handed = Handed {
            lease: Some(lease),
            lock,
        };
        let mut names = self.names();
        let watcher = names
            .by_name
            .get_mut(&taker.name)
            .and_then(|waiters| waiters.watches.get_mut(&taker.id));
        let undelivered = match watcher {
            Some(watcher) => {
                let earlier = watcher
                    .handed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .replace(handed);
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

/// A polling backend with this process's waiters woken by this process's releases: what
/// [`LockClient`](crate::LockClient) puts around a backend that polls and names its store
/// ([`DistributedLock::store_identity`]).
#[derive(Debug)]
pub(crate) struct LocallyWoken {
    inner: Arc<dyn DistributedLock>,
    waiters: LocalWaiters,
    /// Whether a release hands the lock to the first waiter ([`Mechanics::hands_over`]).
    hands_over: bool,
    /// Whether a waiter's poll reads first ([`Capabilities::inspect`]).
    probes: bool,
    /// This process's waiters of semaphores and of read-write locks on the store.
    semaphore_waiters: LocalWaiters,
    rw_lock_waiters: LocalWaiters,
    /// This wrapper, for what a handed-over lock is released through if its waiter is gone.
    me: Weak<LocallyWoken>,
}

impl LocallyWoken {
    /// `lock` wrapped, if it polls and names its store; else `lock` itself.
    pub(crate) fn wrap(lock: Arc<dyn DistributedLock>) -> Arc<dyn DistributedLock> {
        if lock.capabilities().wake_up != WakeUp::Polling {
            return lock;
        }
        match lock.store_identity() {
            Some(identity) => Arc::new_cyclic(|me| Self {
                waiters: LocalWaiters::for_store(&identity),
                semaphore_waiters: LocalWaiters::for_store(&format!("{identity}#{}", Primitive::Semaphore)),
                rw_lock_waiters: LocalWaiters::for_store(&format!("{identity}#{}", Primitive::RwLock)),
                hands_over: lock.mechanics().hands_over,
                probes: lock.capabilities().inspect,
                inner: lock,
                me: me.clone(),
            }),
            None => lock,
        }
    }

    /// This process's waiters of the `primitive` objects (the mutex's are `waiters`).
    fn waiters_of(&self, primitive: Primitive) -> &LocalWaiters {
        match primitive {
            Primitive::Semaphore => &self.semaphore_waiters,
            Primitive::RwLock => &self.rw_lock_waiters,
            Primitive::Mutex => &self.waiters,
        }
    }

    /// This wrapper as a backend (for releases in the background).
    fn as_lock(&self) -> Option<Arc<dyn DistributedLock>> {
        self.me.upgrade().map(|me| me as Arc<dyn DistributedLock>)
    }

    /// Releases `lease` by handing it to `taker` in one store operation. If the outcome is
    /// unknown, the lock may now be the taker's, which never hears of it: it is released by
    /// the taker's owner token in the background. A taker not handed the lock is woken to try
    /// itself.
    async fn hand_to(&self, lease: &Lease, taker: Taker) -> Result<bool> {
        let ticket = taker.ticket;
        let mut pending = PendingHandOver {
            waiters: &self.waiters,
            lock: self.as_lock(),
            taker: Some(taker),
            sent: Instant::now(),
            name: lease.name(),
        };
        match self.inner.hand_over(lease, ticket.owner, ticket.ttl).await {
            Ok(Some(next)) => {
                if let Some(taker) = pending.taker.take() {
                    match self.as_lock() {
                        Some(lock) => self.waiters.deliver(&taker, next, lock),
                        None => self.waiters.wake(&taker),
                    }
                }
                Ok(true)
            }
            Ok(None) => {
                if let Some(taker) = pending.taker.take() {
                    self.waiters.wake(&taker);
                }
                Ok(false)
            }
            Err(Error::NotSupported { .. }) => {
                // A backend (or a wrapper around one) that declares hands_over without
                // implementing it: an ordinary release, and the taker tries itself.
                tracing::debug!("distlock: hand-over not supported after all; releasing");
                let taker = pending.taker.take();
                let released = self.release_and_wake(lease).await;
                if let Some(taker) = taker {
                    self.waiters.wake(&taker);
                }
                released
            }
            Err(error) => {
                if !error.is_ambiguous() {
                    if let Some(taker) = pending.taker.take() {
                        self.waiters.wake(&taker);
                    }
                }
                Err(error)
            }
        }
    }

    /// Releases `lease` and, if it was ours, wakes this process's first waiter.
    async fn release_and_wake(&self, lease: &Lease) -> Result<bool> {
        let released = self.inner.release(lease).await;
        if matches!(released, Ok(true)) {
            self.waiters.released(lease.name());
        }
        released
    }
}

/// A hand-over under way. Dropped before it was settled (its outcome unknown: an ambiguous
/// error, or the release's future dropped mid-flight), it releases by the taker's owner token
/// in the background and wakes the taker.
struct PendingHandOver<'a> {
    waiters: &'a LocalWaiters,
    lock: Option<Arc<dyn DistributedLock>>,
    taker: Option<Taker>,
    sent: Instant,
    name: &'a LockName,
}

impl Drop for PendingHandOver<'_> {
    fn drop(&mut self) {
        let Some(taker) = self.taker.take() else { return };
        if let (Some(lock), Ok(_)) = (self.lock.take(), tokio::runtime::Handle::try_current()) {
            let lease = Lease::new(self.name.clone(), taker.ticket.owner, taker.ticket.ttl, self.sent);
            release_in_background(lock, lease, "a hand-over whose outcome is unknown");
        }
        self.waiters.wake(&taker);
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

    fn mechanics(&self) -> Mechanics {
        self.inner.mechanics()
    }

    /// A mutex attempt by a waiter queues it here if the lock is held (and, if its last
    /// attempt found the lock held and no release here woke it since, reads first: most
    /// polls find the lock still held and write nothing).
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let (Some(waiter), LockKind::Exclusive) = (&attempt.waiter, attempt.kind) else {
            return self.inner.attempt(attempt).await;
        };
        let Attempt { name, owner, ttl, .. } = attempt;
        let (waiter, stay) = (&*waiter.id, waiter.stay);
        let seen = self.waiters.releases(name);
        let ticket = self.hands_over.then_some(Ticket {
            owner: *owner,
            ttl: *ttl,
        });
        if self.probes && self.waiters.is_queued(name, waiter) {
            // Its last attempt found the lock held and no release here woke it since: a poll
            // for a release elsewhere. A read says whether a write could win.
            match self
                .inner
                .inspect(name, Primitive::Mutex)
                .await
                .map(ObjectState::into_lock)
            {
                Ok(LockState {
                    owner: Some(holder),
                    remaining: Some(left),
                    ..
                }) if !left.is_zero() => {
                    self.waiters.queue_with(name, waiter, stay, seen, ticket);
                    return Ok(TryAcquire::Held(Holder::expiring_in(left).with_owner(holder)));
                }
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, "distlock: a waiter's read failed; trying instead"),
            }
        }
        let outcome = self.inner.attempt(attempt).await;
        match &outcome {
            Ok(TryAcquire::Held(_)) => self.waiters.queue_with(name, waiter, stay, seen, ticket),
            _ => self.waiters.dequeue(name, waiter),
        }
        outcome
    }

    /// Hands the lock to this process's first waiter if the store can; else releases it and
    /// wakes that waiter.
    async fn release(&self, lease: &Lease) -> Result<bool> {
        if lease.kind() != LockKind::Exclusive {
            let released = self.inner.release(lease).await;
            if matches!(released, Ok(true)) {
                self.waiters_of(lease.kind().primitive())
                    .released_all(lease.name());
            }
            return released;
        }
        if self.hands_over {
            if let Some(taker) = self.waiters.take_next(lease.name()) {
                return self.hand_to(lease, taker).await;
            }
        }
        self.release_and_wake(lease).await
    }

    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.inner.renew(leases).await
    }

    async fn hand_over(&self, lease: &Lease, next: OwnerToken, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.hand_over(lease, next, ttl).await
    }

    /// The mutex's watch is woken by this process's releases (still polling for others'); a
    /// semaphore's or read-write lock's is the store's if it announces releases, else one
    /// woken by this process's releases.
    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        if primitive == Primitive::Mutex {
            return Ok(self.waiters.watch(name, true));
        }
        let watch = self.inner.watch(name, primitive).await?;
        if watch.is_notified() {
            return Ok(watch);
        }
        Ok(self.waiters_of(primitive).watch(name, true))
    }

    async fn wait_queued(&self, attempt: &Attempt, deadline: Option<Instant>) -> Result<Option<Lease>> {
        self.inner.wait_queued(attempt, deadline).await
    }

    /// Withdraws the waiter; a waiting writer's withdrawal wakes this process's waiting
    /// readers.
    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.inner.withdraw(name, kind, waiter).await?;
        if kind == LockKind::Write {
            self.waiters_of(kind.primitive()).released_all(name);
        }
        Ok(())
    }

    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        self.inner.inspect(name, primitive).await
    }

    fn session(&self) -> Option<watch::Receiver<Session>> {
        self.inner.session()
    }

    fn watch_lease(&self, lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        self.inner.watch_lease(lease)
    }

    fn store_identity(&self) -> Option<String> {
        self.inner.store_identity()
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
