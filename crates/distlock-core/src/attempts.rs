//! One acquisition attempt of [`LockClient`], run to completion whatever happens to its caller:
//! a lease won but not delivered is released, an attempt whose outcome is unknown (an
//! ambiguous error, a backend that panicked) is followed by an owner-checked release in the
//! background; and the wait in a store's own queue, run the same way.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::{oneshot, OwnedMutexGuard};
use tokio::time::Instant;

use crate::cleanup::release_in_background;
use crate::client::LockClient;
use crate::detach::Detaching;
use crate::guard::LockGuard;
use crate::hold::HoldOptions;
use crate::{AcquireOptions, Attempt, Error, Holder, LockKind, LockName, OwnerToken, Result, TryAcquire};

/// What one attempt of a wait came to.
pub(crate) enum Outcome {
    Acquired(LockGuard),
    Held(Holder),
}

impl LockClient {
    /// One attempt, run to completion even if the caller goes away ([`Detaching`]), so that
    /// dropping the caller can never strand a lock: a guard that cannot be delivered is
    /// dropped, which releases it, and an attempt whose outcome is unknown (a timeout, a cut
    /// connection, a backend that panicked) is followed by an owner-checked release under the
    /// same owner token, in the background. `in_flight` is held until the attempt has ended, wherever it runs.
    pub(crate) async fn attempt(
        &self,
        name: &LockName,
        kind: LockKind,
        ttl: std::time::Duration,
        opts: &AcquireOptions,
        waiting: Option<(Arc<str>, std::time::Duration)>,
        in_flight: Option<OwnedMutexGuard<()>>,
    ) -> Result<Outcome> {
        let inner = self.inner.clone();
        let name = name.clone();
        let options = HoldOptions::from(opts);
        let owner = opts.owner.unwrap_or_else(OwnerToken::new);
        let attempt = Detaching::new(async move {
            let _in_flight = in_flight;
            let mut request = Attempt::new(name.clone(), kind, owner, ttl);
            if let Some((waiter, stay)) = waiting {
                request = request.waiting(waiter, stay);
            }
            let sent_at = Instant::now();
            let attempt = inner.store.attempt(&request);
            // A backend that panicked may have had the store apply the attempt first: its
            // outcome is unknown, and it is cleaned up by owner below like any such attempt.
            let outcome = AssertUnwindSafe(attempt)
                .catch_unwind()
                .await
                .unwrap_or_else(|_panic| {
                    Err(Error::backend(
                        inner.store.lock().backend(),
                        "the backend panicked during the attempt",
                    ))
                });
            inner.meter.attempt(&name, kind, sent_at, &outcome);
            match outcome {
                Ok(TryAcquire::Acquired(lease)) => {
                    let lease = lease.bounded_by(sent_at, ttl);
                    tracing::debug!(lock = %name, fencing = ?lease.fencing_token(), "distlock: acquired");
                    Ok(Outcome::Acquired(LockGuard::start(inner.clone(), lease, options)))
                }
                Ok(TryAcquire::Held(holder)) => Ok(Outcome::Held(holder)),
                Err(error) => {
                    if error.is_ambiguous() {
                        tracing::debug!(lock = %name, %error, "distlock: acquisition outcome unknown; cleaning up by owner");
                        release_in_background(
                            inner.store.clone(),
                            request.cleanup_lease(sent_at),
                            "an acquisition whose outcome is unknown",
                        );
                    }
                    Err(error)
                }
            }
        });
        attempt.await.map_err(|_panic| self.task_failed())?
    }

    /// Waits in the store's own FIFO queue ([`DistributedLock::wait_queued`]) in a task.
    /// If the caller goes away, the task drops the queued future, which removes the queue
    /// entry; a guard won meanwhile but not delivered is dropped, which releases it.
    ///
    /// [`DistributedLock::wait_queued`]: crate::DistributedLock::wait_queued
    pub(crate) async fn queued(
        &self,
        name: &LockName,
        kind: LockKind,
        ttl: std::time::Duration,
        opts: &AcquireOptions,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        let inner = self.inner.clone();
        let name = name.clone();
        let options = HoldOptions::from(opts);
        let owner = opts.owner.unwrap_or_else(OwnerToken::new);
        let (mut tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let request = Attempt::new(name.clone(), kind, owner, ttl);
            let sent_at = Instant::now();
            // The store may have applied a wait that ended in an ambiguous error, or in a
            // panic: either way it is cleaned up by owner, as an attempt is.
            let cleanup = request.cleanup_lease(sent_at);
            let waiting = AssertUnwindSafe(inner.store.lock().wait_queued(&request, deadline)).catch_unwind();
            let outcome = tokio::select! {
                outcome = waiting => outcome,
                _ = tx.closed() => return,
            };
            let outcome = match outcome {
                Ok(Err(error)) if error.is_ambiguous() => {
                    tracing::debug!(lock = %name, %error, "distlock: queued acquisition outcome unknown; cleaning up by owner");
                    release_in_background(
                        inner.store.clone(),
                        cleanup,
                        "a queued acquisition whose outcome is unknown",
                    );
                    Err(error)
                }
                Ok(outcome) => outcome,
                Err(_panic) => {
                    release_in_background(
                        inner.store.clone(),
                        cleanup,
                        "a queued acquisition whose backend panicked",
                    );
                    Err(Error::backend(
                        inner.store.lock().backend(),
                        "the backend panicked while waiting in the queue",
                    ))
                }
            };
            // The store took it at the latest when the answer came.
            let answered_at = Instant::now();
            let outcome = outcome.map(|lease| {
                lease.map(|lease| {
                    let lease = lease.bounded_by(answered_at, ttl);
                    tracing::debug!(lock = %name, fencing = ?lease.fencing_token(), "distlock: acquired in queue");
                    LockGuard::start(inner.clone(), lease, options)
                })
            });
            let _ = tx.send(outcome);
        });
        rx.await.map_err(|_| self.task_failed())?
    }
}

impl LockClient {
    /// The error for an acquisition that ended without an answer (it panicked).
    pub(crate) fn task_failed(&self) -> Error {
        Error::backend(
            self.inner.store.lock().backend(),
            "the acquisition task ended unexpectedly",
        )
    }
}
