//! [`LocalWake`]: the component of [`LockClient`](crate::LockClient) that wakes this process's
//! waiters of a polling store when a client of this process releases, and hands a released
//! mutex straight to the first of them where the store can
//! ([`Mechanics::hands_over`](crate::Mechanics::hands_over)).
//!
//! It is not a backend: [`Store`] calls it around the client's attempts, releases (a guard's,
//! a dropped guard's, every owner-checked cleanup, [`LockClient::release_lease`]), watches and
//! withdrawals, and it calls the backend's primitives; a new method of the trait is the
//! client's to call, and never needs forwarding here. It owns the waiter tables of its store
//! ([`LocalWaiters`]) and the hand-over, which passes the lease to the waiter through the
//! waiter's [`Inbox`]; it may not touch holds, renewal or the wait loop.
//!
//! [`LockClient::release_lease`]: crate::LockClient::release_lease

use std::sync::{Arc, Weak};

use tokio::time::Instant;

use crate::cleanup::release_in_background;
use crate::local::{Inbox, Taker, Ticket};
use crate::store::Store;
use crate::{
    Attempt, DistributedLock, Error, Holder, Lease, LocalWaiters, LockKind, LockName, LockState, ObjectState,
    Primitive, ReleaseWatch, Result, TryAcquire, WakeUp,
};

/// This process's waiters of one polling store that names itself
/// ([`DistributedLock::store_identity`]), woken by this process's releases.
pub(crate) struct LocalWake {
    lock: Arc<dyn DistributedLock>,
    waiters: LocalWaiters,
    /// Whether a release hands the lock to the first waiter ([`Mechanics::hands_over`]).
    ///
    /// [`Mechanics::hands_over`]: crate::Mechanics::hands_over
    hands_over: bool,
    /// Whether a waiter's poll reads first ([`Capabilities::inspect`](crate::Capabilities::inspect)).
    probes: bool,
    /// This process's waiters of semaphores and of read-write locks on the store.
    semaphore_waiters: LocalWaiters,
    rw_lock_waiters: LocalWaiters,
    /// This layer, for what a handed-over lock is released through if its waiter is gone.
    me: Weak<LocalWake>,
}

impl LocalWake {
    /// The layer for `lock`, if it polls and names its store.
    pub(crate) fn for_store(lock: &Arc<dyn DistributedLock>) -> Option<Arc<Self>> {
        if lock.capabilities().wake_up != WakeUp::Polling {
            return None;
        }
        let identity = lock.store_identity()?;
        Some(Arc::new_cyclic(|me| Self {
            waiters: LocalWaiters::for_store(&identity),
            semaphore_waiters: LocalWaiters::for_store(&format!("{identity}#{}", Primitive::Semaphore)),
            rw_lock_waiters: LocalWaiters::for_store(&format!("{identity}#{}", Primitive::RwLock)),
            hands_over: lock.mechanics().hands_over,
            probes: lock.capabilities().inspect,
            lock: lock.clone(),
            me: me.clone(),
        }))
    }

    /// This process's waiters of the `primitive` objects (the mutex's are `waiters`).
    fn waiters_of(&self, primitive: Primitive) -> &LocalWaiters {
        match primitive {
            Primitive::Semaphore => &self.semaphore_waiters,
            Primitive::RwLock => &self.rw_lock_waiters,
            Primitive::Mutex => &self.waiters,
        }
    }

    /// The backend with this layer, for releases in the background (`None` while the layer
    /// is being dropped).
    fn store(&self) -> Option<Store> {
        let me = self.me.upgrade()?;
        Some(Store::with_local(self.lock.clone(), Some(me)))
    }

    /// A mutex attempt by a waiter queues it here if the lock is held (and, if its last
    /// attempt found the lock held and no release here woke it since, reads first: most
    /// polls find the lock still held and write nothing). Other attempts go to the store.
    pub(crate) async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let (Some(waiter), LockKind::Exclusive) = (&attempt.waiter, attempt.kind) else {
            return self.lock.attempt(attempt).await;
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
                .lock
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
        let outcome = self.lock.attempt(attempt).await;
        match &outcome {
            Ok(TryAcquire::Held(_)) => self.waiters.queue_with(name, waiter, stay, seen, ticket),
            _ => self.waiters.dequeue(name, waiter),
        }
        outcome
    }

    /// Releases `lease`: a mutex goes to this process's first waiter if the store can hand it
    /// over, else it is released and that waiter woken; a permit's or a read-write lock's
    /// release wakes every waiter of it here.
    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        if lease.kind() != LockKind::Exclusive {
            let released = self.lock.release(lease).await;
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

    /// The mutex's watch is woken by this process's releases (still polling for others'), and
    /// comes with the inbox a lock handed over to its waiter arrives in; a semaphore's or
    /// read-write lock's is the store's if it announces releases, else one woken by this
    /// process's releases.
    pub(crate) async fn watch(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<(ReleaseWatch, Option<Inbox>)> {
        if primitive == Primitive::Mutex {
            let (watch, inbox) = self.waiters.watch_with_inbox(name, true);
            return Ok((watch, Some(inbox)));
        }
        let watch = self.lock.watch(name, primitive).await?;
        if watch.is_notified() {
            return Ok((watch, None));
        }
        Ok((self.waiters_of(primitive).watch(name, true), None))
    }

    /// Withdraws the waiter; a waiting writer's withdrawal wakes this process's waiting
    /// readers.
    pub(crate) async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.lock.withdraw(name, kind, waiter).await?;
        if kind == LockKind::Write {
            self.waiters_of(kind.primitive()).released_all(name);
        }
        Ok(())
    }

    /// Releases `lease` by handing it to `taker` in one store operation. If the outcome is
    /// unknown, the lock may now be the taker's, which never hears of it: it is released by
    /// the taker's owner token in the background. A taker not handed the lock is woken to try
    /// itself.
    async fn hand_to(&self, lease: &Lease, taker: Taker) -> Result<bool> {
        let ticket = taker.ticket;
        let mut pending = PendingHandOver {
            waiters: &self.waiters,
            store: self.store(),
            taker: Some(taker),
            sent: Instant::now(),
            name: lease.name(),
        };
        match self.lock.hand_over(lease, ticket.owner, ticket.ttl).await {
            Ok(Some(next)) => {
                if let Some(taker) = pending.taker.take() {
                    match self.store() {
                        Some(store) => self.waiters.deliver(&taker, next, store),
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
        let released = self.lock.release(lease).await;
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
    store: Option<Store>,
    taker: Option<Taker>,
    sent: Instant,
    name: &'a LockName,
}

impl Drop for PendingHandOver<'_> {
    fn drop(&mut self) {
        let Some(taker) = self.taker.take() else { return };
        if let (Some(store), Ok(_)) = (self.store.take(), tokio::runtime::Handle::try_current()) {
            let lease = Lease::new(self.name.clone(), taker.ticket.owner, taker.ticket.ttl, self.sent);
            release_in_background(store, lease, "a hand-over whose outcome is unknown");
        }
        self.waiters.wake(&taker);
    }
}
