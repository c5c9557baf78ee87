//! [`MemoryLock`]: the in-process reference backend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::memory_holds::Objects;
use crate::{
    renew_each, Attempt, Capabilities, DistributedLock, Error, Fencing, FencingToken, Holder, Lease,
    LocalWaiters, LockKind, LockName, LockState, Mechanics, ObjectState, OwnerToken, Primitive, ReleaseWatch,
    Result, TryAcquire, WakeUp,
};

const BACKEND: &str = "memory";
/// The fewest operations between two sweeps of expired entries.
const SWEEP_EVERY: usize = 64;

/// An in-process lock store: the reference implementation of the contract.
///
/// **Single process only**: it excludes tasks and threads of one process that share it (clones
/// share one store), never other processes. Use it in unit tests and to learn the API; it
/// passes every conformance case that applies to it. Expiry follows tokio's clock, so tests
/// can use paused time. Fencing tokens come from one counter and strictly increase. A release
/// wakes one waiter: the first in the lock's queue of waiters.
///
/// It also has fault hooks for tests ([`MemoryLock::steal`], [`MemoryLock::set_available`]).
///
/// ```
/// use distlock_core::{LockClient, MemoryLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let store = MemoryLock::new();
/// let (a, b) = (LockClient::new(store.clone()), LockClient::new(store.clone()));
/// let guard = a.acquire("job").await?;
/// assert!(b.try_acquire("job").await?.is_none());
/// guard.release().await?;
/// assert!(b.try_acquire("job").await?.is_some());
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryLock {
    store: Arc<Mutex<Store>>,
    waiters: LocalWaiters,
}

#[derive(Default)]
struct Store {
    locks: HashMap<LockName, Entry>,
    /// Semaphores and read-write locks.
    objects: Objects,
    last_fencing: u64,
    unavailable: bool,
    /// Operations since the last sweep of expired entries.
    since_sweep: usize,
}

struct Entry {
    owner: OwnerToken,
    expires_at: Instant,
    fencing: u64,
    /// The holder's note ([`DistributedLock::set_note`]).
    note: Option<String>,
}

impl Store {
    /// Drops expired entries once every so many operations, so that a store used with ever
    /// new names stays as small as what is live (amortized O(1) per operation: a sweep costs
    /// the store's size, and comes after as many operations).
    fn sweep(&mut self, now: Instant) {
        self.since_sweep += 1;
        if self.since_sweep < SWEEP_EVERY.max(self.locks.len() + self.objects.len()) {
            return;
        }
        self.since_sweep = 0;
        self.locks.retain(|_, entry| entry.expires_at > now);
        self.objects.sweep(now);
    }

    /// The live entry of `name`, dropping it if it expired.
    fn live(&mut self, name: &LockName, now: Instant) -> Option<&mut Entry> {
        self.sweep(now);
        if self.locks.get(name).is_some_and(|e| e.expires_at <= now) {
            self.locks.remove(name);
        }
        self.locks.get_mut(name)
    }

    fn check_available(&self) -> Result<()> {
        if self.unavailable {
            return Err(Error::unavailable(
                BACKEND,
                "the memory store was switched off by a test",
            ));
        }
        Ok(())
    }
}

impl MemoryLock {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fault hook: gives a held lock to a new random owner behind its holder's back (as a
    /// competing writer or an operator would). Returns whether the lock was held.
    pub fn steal(&self, name: &LockName) -> bool {
        let mut store = self.store();
        match store.live(name, Instant::now()) {
            Some(entry) => {
                entry.owner = OwnerToken::new();
                true
            }
            None => false,
        }
    }

    /// Fault hook: while `false`, every operation fails with [`Error::Unavailable`], like a
    /// store that went away.
    pub fn set_available(&self, available: bool) {
        self.store().unavailable = !available;
    }

    /// How many entries (held or expired locks, and names with waiters) the store keeps right
    /// now: a test hook showing that unique names do not make it grow without bound.
    pub fn footprint(&self) -> usize {
        let store = self.store();
        store.locks.len() + store.objects.len() + self.waiters.len()
    }

    /// How many locks are held now whose names start with `prefix`.
    pub fn held_count(&self, prefix: &str) -> usize {
        let now = Instant::now();
        self.store()
            .locks
            .iter()
            .filter(|(name, e)| e.expires_at > now && name.as_str().starts_with(prefix))
            .count()
    }
}

impl MemoryLock {
    /// One attempt at the mutex; `waiter` (id, stay) is queued if the lock is held, dequeued
    /// if won.
    fn attempt_mutex(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        waiter: Option<(&str, Duration)>,
    ) -> Result<TryAcquire> {
        let mut store = self.store();
        store.check_available()?;
        let now = Instant::now();
        if let Some(entry) = store.live(name, now) {
            let remaining = entry.expires_at - now;
            // Queued under the store's lock, so a release cannot slip in between.
            if let Some((id, stay)) = waiter {
                let seen = self.waiters.releases(name);
                self.waiters.queue(name, id, stay, seen);
            }
            return Ok(TryAcquire::Held(Holder::expiring_in(remaining)));
        }
        if let Some((id, _)) = waiter {
            self.waiters.dequeue(name, id);
        }
        let expires_at = now
            .checked_add(ttl)
            .ok_or_else(|| Error::invalid_options(format!("a TTL of {ttl:?} overflows the clock")))?;
        store.last_fencing += 1;
        let fencing = store.last_fencing;
        store.locks.insert(
            name.clone(),
            Entry {
                owner,
                expires_at,
                fencing,
                note: None,
            },
        );
        Ok(TryAcquire::Acquired(
            Lease::new(name.clone(), owner, ttl, now).with_fencing(FencingToken::new(fencing)),
        ))
    }
}

impl MemoryLock {
    /// Renews one hold for its lease's TTL, owner-checked.
    fn renew_one(&self, lease: &Lease) -> Result<Option<Lease>> {
        let ttl = lease.ttl();
        let mut store = self.store();
        store.check_available()?;
        let now = Instant::now();
        if lease.kind() != LockKind::Exclusive {
            return store.objects.extend(lease, ttl, now);
        }
        match store.live(lease.name(), now) {
            Some(entry) if entry.owner == lease.owner() => {
                entry.expires_at = now
                    .checked_add(ttl)
                    .ok_or_else(|| Error::invalid_options(format!("a TTL of {ttl:?} overflows the clock")))?;
                Ok(Some(lease.renewed(ttl, now)))
            }
            _ => Ok(None),
        }
    }
}

impl std::fmt::Debug for MemoryLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLock").finish_non_exhaustive()
    }
}

#[async_trait]
impl DistributedLock for MemoryLock {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Fencing::Monotonic, WakeUp::Notification)
            .with_cross_process(false)
            .with_primitives(true, true)
            .with_weights_and_upgrades(true, true)
            .with_notes(true)
    }

    fn mechanics(&self) -> Mechanics {
        Mechanics::default().with_hands_over(true)
    }

    /// The mutex: if held, queues the waiter (at the back), else takes it out. Permits,
    /// reads and writes: the holds table (a waiting writer is recorded there).
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let Attempt {
            name,
            kind,
            owner,
            ttl,
            ..
        } = attempt;
        let waiter = attempt.waiter_parts();
        if *kind == LockKind::Exclusive {
            return self.attempt_mutex(name, *owner, *ttl, waiter);
        }
        let mut store = self.store();
        store.check_available()?;
        let now = Instant::now();
        store.sweep(now);
        let Store {
            objects,
            last_fencing,
            ..
        } = &mut *store;
        objects.try_acquire(name, *kind, *owner, *ttl, waiter, now, last_fencing)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let mut store = self.store();
        store.check_available()?;
        if lease.kind() != LockKind::Exclusive {
            return Ok(store.objects.release(lease, Instant::now()));
        }
        let ours = store
            .live(lease.name(), Instant::now())
            .is_some_and(|e| e.owner == lease.owner());
        if ours {
            store.locks.remove(lease.name());
            self.waiters.released(lease.name());
        }
        Ok(ours)
    }

    async fn hand_over(&self, lease: &Lease, next: OwnerToken, ttl: Duration) -> Result<Option<Lease>> {
        let mut store = self.store();
        store.check_available()?;
        let now = Instant::now();
        let expires_at = now
            .checked_add(ttl)
            .ok_or_else(|| Error::invalid_options(format!("a TTL of {ttl:?} overflows the clock")))?;
        let fencing = store.last_fencing + 1;
        match store.live(lease.name(), now) {
            Some(entry) if entry.owner == lease.owner() => {
                *entry = Entry {
                    owner: next,
                    expires_at,
                    fencing,
                    note: None,
                };
            }
            _ => return Ok(None),
        }
        store.last_fencing = fencing;
        Ok(Some(
            Lease::new(lease.name().clone(), next, ttl, now).with_fencing(FencingToken::new(fencing)),
        ))
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        let mut store = self.store();
        store.check_available()?;
        match store.live(lease.name(), Instant::now()) {
            Some(entry) if lease.kind() == LockKind::Exclusive && entry.owner == lease.owner() => {
                entry.note = Some(note.to_owned());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        renew_each(leases, |lease| async move { self.renew_one(&lease) }).await
    }

    /// The mutex's waiters are queued one per release; every watcher of a semaphore or
    /// read-write lock wakes on each release (a permit or a writer's release can let several
    /// waiters in).
    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        let mut store = self.store();
        store.check_available()?;
        Ok(match primitive {
            Primitive::Mutex => self.waiters.watch(name, false),
            primitive => ReleaseWatch::notified(store.objects.watch(name, primitive), ()),
        })
    }

    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        let mut store = self.store();
        store.check_available()?;
        store.objects.withdraw(name, kind, waiter);
        Ok(())
    }

    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        let mut store = self.store();
        store.check_available()?;
        let now = Instant::now();
        if primitive != Primitive::Mutex {
            return Ok(ObjectState::held_by(store.objects.holders(name, primitive, now)));
        }
        Ok(ObjectState::from(match store.live(name, now) {
            Some(e) => LockState::held(
                e.owner.to_string(),
                Some(FencingToken::new(e.fencing)),
                Some(e.expires_at - now),
            )
            .with_note(e.note.clone()),
            None => LockState::free(None),
        }))
    }

    async fn ping(&self) -> Result<()> {
        self.store().check_available()
    }
}
