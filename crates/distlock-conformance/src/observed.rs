//! [`Observed`]: a backend that counts the acquisition attempts made through it, and can make
//! those that carry a waiter (those that may queue the waiter or record it on the store) start
//! late, so that a case can cut a wait off while such an attempt is under way and know when
//! the attempt has ended. It can also make the first acquisition the store grants end in a
//! [`Fault`], so that the grant's outcome is unknown to the client.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Error, Lease, LockKind, LockName, LossReason, ObjectState,
    OwnerToken, Primitive, ReleaseWatch, Result, Session, TryAcquire,
};
use futures::future::BoxFuture;
use tokio::sync::watch;

/// What becomes of the first acquisition the store grants through [`Observed::faulty`], once
/// the store has applied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The reply is lost: the attempt ends in an ambiguous error ([`Error::is_ambiguous`]).
    LostReply,
    /// The backend panics (a bug in it).
    Panic,
}

/// Passes everything to `inner`, counting every attempt in `attempts`; each attempt that
/// carries a waiter waits `delay` first, and `started` and `ended` count those. The first
/// acquisition granted ends in `fault`, if there is one.
#[derive(Debug)]
pub(crate) struct Observed {
    inner: Arc<dyn DistributedLock>,
    attempts: Arc<AtomicUsize>,
    delay: Duration,
    started: watch::Sender<usize>,
    ended: watch::Sender<usize>,
    fault: Option<Fault>,
    faulted: Arc<AtomicBool>,
}

impl Observed {
    /// Counts the attempts through `inner` in `attempts`.
    pub(crate) fn counting(inner: Arc<dyn DistributedLock>, attempts: Arc<AtomicUsize>) -> Self {
        Self {
            inner,
            attempts,
            delay: Duration::ZERO,
            started: watch::channel(0).0,
            ended: watch::channel(0).0,
            fault: None,
            faulted: Arc::default(),
        }
    }

    /// Makes the first acquisition the store grants through `inner` (by any method: an
    /// attempt, with or without a waiter, or a queued wait) end in `fault` once applied.
    pub(crate) fn faulty(inner: Arc<dyn DistributedLock>, fault: Fault) -> Self {
        Self {
            fault: Some(fault),
            ..Self::counting(inner, Arc::default())
        }
    }

    /// Makes the attempts through `inner` that carry a waiter start `delay` late.
    pub(crate) fn delaying(inner: Arc<dyn DistributedLock>, delay: Duration) -> Self {
        Self {
            delay,
            ..Self::counting(inner, Arc::default())
        }
    }

    /// Whether a grant has ended in the fault.
    pub(crate) fn faulted(&self) -> Arc<AtomicBool> {
        self.faulted.clone()
    }

    /// How many attempts with a waiter have started.
    pub(crate) fn started(&self) -> watch::Receiver<usize> {
        self.started.subscribe()
    }

    /// How many attempts with a waiter have ended.
    pub(crate) fn ended(&self) -> watch::Receiver<usize> {
        self.ended.subscribe()
    }

    /// Counts an attempt without a waiter.
    fn counted(&self) {
        self.attempts.fetch_add(1, Ordering::SeqCst);
    }

    /// `outcome` of an acquisition, or the fault if `won` is the first grant to end in one.
    fn granted<T>(&self, outcome: Result<T>, won: impl FnOnce(&T) -> bool) -> Result<T> {
        let Some(fault) = self.fault else {
            return outcome;
        };
        if !outcome.as_ref().is_ok_and(won) || self.faulted.swap(true, Ordering::SeqCst) {
            return outcome;
        }
        match fault {
            Fault::LostReply => Err(Error::unavailable(
                self.inner.backend(),
                "the reply to an acquisition the store applied was lost",
            )),
            Fault::Panic => panic!("a backend bug after the store applied an acquisition"),
        }
    }

    /// Runs `attempt`, which carries a waiter, after the delay, counting it.
    async fn late<T>(&self, attempt: impl std::future::Future<Output = T>) -> T {
        self.counted();
        self.started.send_modify(|n| *n += 1);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let outcome = attempt.await;
        self.ended.send_modify(|n| *n += 1);
        outcome
    }
}

#[async_trait]
impl DistributedLock for Observed {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn mechanics(&self) -> distlock_core::Mechanics {
        self.inner.mechanics()
    }

    /// An attempt of a waiter (one with a waiter record) may be made late; the others are
    /// counted.
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let outcome = match attempt.waiter {
            Some(_) => self.late(self.inner.attempt(attempt)).await,
            None => {
                self.counted();
                self.inner.attempt(attempt).await
            }
        };
        self.granted(outcome, acquired)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }

    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.inner.renew(leases).await
    }

    async fn hand_over(&self, lease: &Lease, next: OwnerToken, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.hand_over(lease, next, ttl).await
    }

    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        self.inner.watch(name, primitive).await
    }

    async fn wait_queued(
        &self,
        attempt: &Attempt,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<Lease>> {
        self.counted();
        let outcome = self.inner.wait_queued(attempt, deadline).await;
        self.granted(outcome, Option::is_some)
    }

    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.inner.withdraw(name, kind, waiter).await
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        self.inner.set_note(lease, note).await
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

/// Whether an attempt won.
fn acquired(outcome: &TryAcquire) -> bool {
    matches!(outcome, TryAcquire::Acquired(_))
}
