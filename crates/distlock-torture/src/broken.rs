//! Deliberately broken backends, to prove that the checker catches what it claims to: each
//! wraps a real backend and breaks one rule the real ones keep.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock::{
    renew_each, Attempt, Capabilities, DistributedLock, DistributedLockExt, Error, FencingToken, Holder,
    Lease, LockKind, LockName, LockState, LossReason, ObjectState, OwnerToken, Primitive, ReleaseWatch,
    Result, Session, TryAcquire,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

/// Which rule to break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Breakage {
    /// `release` frees whoever holds the name, without the owner check.
    UncheckedRelease,
    /// The lease outlives the store's hold: the store is asked for a quarter of the TTL, the
    /// guard believes the whole TTL (the class of a missing safety margin, made blatant).
    OverlongLease,
    /// Every grant gets the same fencing token.
    RepeatedToken,
    /// A semaphore admits one holder too many: the store is asked for one permit more than
    /// the guard says (run with `--primitive semaphore`).
    OverAdmit,
    /// A writer gets in beside readers: the store is asked for a read lock where the guard
    /// says write lock (run with `--primitive rw`).
    WriterAsReader,
    /// A lock that never frees: the store is asked to hold each grant for an hour (the guard
    /// believes the TTL), and a release does nothing.
    NeverFrees,
    /// A waiter never woken: once a process has found a name held, its attempts on that name
    /// find it held forever after.
    NeverWoken,
}

/// How long a [`Breakage::NeverFrees`] grant stays held on the store.
const NEVER: Duration = Duration::from_secs(3600);

/// A backend with one rule broken.
pub struct Broken {
    inner: Arc<dyn DistributedLock>,
    breakage: Breakage,
    /// [`Breakage::NeverWoken`]: the names this process found held.
    waited: Mutex<HashSet<LockName>>,
}

impl std::fmt::Debug for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broken")
            .field("breakage", &self.breakage)
            .finish_non_exhaustive()
    }
}

impl Broken {
    /// Wraps `inner`, breaking `breakage`.
    pub fn new(inner: Arc<dyn DistributedLock>, breakage: Breakage) -> Self {
        Self {
            inner,
            breakage,
            waited: Mutex::new(HashSet::new()),
        }
    }

    /// [`Breakage::NeverWoken`]: whether this process already found `name` held (its attempt
    /// then finds it held again, without asking the store).
    fn never_woken(&self, name: &LockName) -> bool {
        self.breakage == Breakage::NeverWoken
            && self
                .waited
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(name)
    }

    /// Notes what an attempt on `name` got (a lease granted is believed for `ttl`).
    fn attempted(&self, name: &LockName, outcome: TryAcquire, ttl: Duration) -> TryAcquire {
        match outcome {
            TryAcquire::Acquired(lease) => TryAcquire::Acquired(self.as_granted(lease, ttl)),
            held => {
                if self.breakage == Breakage::NeverWoken {
                    self.waited
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(name.clone());
                }
                held
            }
        }
    }

    fn store_ttl(&self, ttl: Duration) -> Duration {
        match self.breakage {
            Breakage::OverlongLease => (ttl / 4).max(self.inner.capabilities().min_ttl),
            Breakage::NeverFrees => NEVER,
            _ => ttl,
        }
    }

    fn as_granted(&self, lease: Lease, ttl: Duration) -> Lease {
        match self.breakage {
            Breakage::OverlongLease | Breakage::NeverFrees => lease.renewed(ttl, lease.acquired_at()),
            Breakage::RepeatedToken => lease.with_fencing(FencingToken::new(1)),
            Breakage::UncheckedRelease
            | Breakage::OverAdmit
            | Breakage::WriterAsReader
            | Breakage::NeverWoken => lease,
        }
    }

    /// Whether the breakage is of the semaphores and read-write locks (the others break the
    /// mutex only, and the wrapper then offers nothing else).
    fn of_primitives(&self) -> bool {
        matches!(self.breakage, Breakage::OverAdmit | Breakage::WriterAsReader)
    }

    /// The kind the store is asked for in place of `kind` (what the guard believes).
    fn store_kind(&self, kind: LockKind) -> LockKind {
        match (self.breakage, kind) {
            (Breakage::OverAdmit, LockKind::Permit { permits, .. }) => LockKind::Permit {
                permits: permits.saturating_add(1),
                weight: 1,
            },
            (Breakage::WriterAsReader, LockKind::Write) => LockKind::Read,
            _ => kind,
        }
    }

    /// `lease` as the store knows it.
    fn store_lease(&self, lease: &Lease) -> Lease {
        lease.clone().with_kind(self.store_kind(lease.kind()))
    }
}

#[async_trait]
impl DistributedLock for Broken {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    /// The store's, for a breakage of the mutex without the other primitives, which it does
    /// not break, and without notes, which it does not pass on.
    fn capabilities(&self) -> Capabilities {
        let capabilities = self.inner.capabilities().with_notes(false);
        match self.of_primitives() {
            true => capabilities,
            false => capabilities.with_primitives(false, false),
        }
    }

    /// The store's, without hand-overs: every release goes through `release`, where the
    /// breakage lives.
    fn mechanics(&self) -> distlock::Mechanics {
        self.inner.mechanics().with_hands_over(false)
    }

    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let Attempt { name, kind, ttl, .. } = attempt;
        if self.never_woken(name) {
            return Ok(TryAcquire::Held(Holder::unknown()));
        }
        let mut stored = Attempt::new(
            name.clone(),
            self.store_kind(*kind),
            attempt.owner,
            self.store_ttl(*ttl),
        );
        stored.waiter = attempt.waiter.clone();
        let outcome = self.inner.attempt(&stored).await?;
        Ok(match self.attempted(name, outcome, *ttl) {
            // The guard believes it holds what was asked for.
            TryAcquire::Acquired(lease) if *kind != LockKind::Exclusive => {
                TryAcquire::Acquired(lease.with_kind(*kind))
            }
            outcome => outcome,
        })
    }

    fn store_identity(&self) -> Option<String> {
        self.inner.store_identity()
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        if self.breakage == Breakage::NeverFrees {
            return Ok(true);
        }
        if self.breakage != Breakage::UncheckedRelease {
            return self.inner.release(&self.store_lease(lease)).await;
        }
        // Whoever holds the name now is released, as a release by name alone would.
        let state: LockState = self.inner.inspect_lock(lease.name()).await?;
        let Some(owner) = state.owner.and_then(|o| o.parse::<OwnerToken>().ok()) else {
            return Ok(false);
        };
        let theirs = Lease::new(lease.name().clone(), owner, lease.ttl(), Instant::now());
        self.inner.release(&theirs).await
    }

    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        renew_each(leases, |lease| async move {
            let ttl = lease.ttl();
            Ok(self
                .inner
                .extend(&self.store_lease(&lease), self.store_ttl(ttl))
                .await?
                .map(|renewed| self.as_granted(renewed, ttl).with_kind(lease.kind())))
        })
        .await
    }

    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.inner.withdraw(name, self.store_kind(kind), waiter).await
    }

    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        self.inner.watch(name, primitive).await
    }

    fn session(&self) -> Option<watch::Receiver<Session>> {
        self.inner.session()
    }

    fn watch_lease(&self, lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        self.inner.watch_lease(&self.store_lease(lease))
    }

    /// The mutex only.
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        if primitive != Primitive::Mutex {
            return Err(Error::NotSupported {
                backend: self.backend(),
                what: "listing the holders of a semaphore or read-write lock",
            });
        }
        self.inner.inspect(name, primitive).await
    }

    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
}
