//! [`LockGuard`]: a held lock, its renewal, its lost-lock signal and what dropping it does.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::cleanup::release_in_background;
use crate::client::ClientInner;
use crate::detach::Detaching;
use crate::hold::{Hold, HoldOptions, Renewal, Status};
use crate::{
    DistributedLockExt, Error, FencingToken, Lease, LockName, LossReason, LostSignal, OwnerToken, Result,
};

static NEXT_HOLD_ID: AtomicU64 = AtomicU64::new(1);

/// A held lock. Obtained from [`LockClient`](crate::LockClient).
///
/// While the guard lives, the client's watchdog renews the lease at a third of its TTL (unless
/// renewal was turned off). If a renewal finds the lock gone or owned by someone else, or the
/// maximum hold time passes, or the lease's local deadline comes (its TTL measured from when
/// the request was sent, minus the [safety margin](crate::AcquireOptions::safety_margin)) while
/// renewals fail, the lost-lock signal fires: [`LockGuard::is_lost`] turns true and
/// [`LockGuard::lost`] resolves. The deadline and the maximum hold time are checked against
/// the clock by every reader, by the same rule the watchdog applies, so a starved or dead
/// watchdog can never leave a guard saying "held" past either.
///
/// # Dropping
///
/// Prefer [`LockGuard::release`], which tells you whether you still owned the lock. Dropping
/// the guard without it stops renewal at once and, if the tokio runtime the guard was created
/// on is still running, releases the lock in a background task (one round trip, owner-checked
/// like every release). If that runtime has shut down, nothing is sent and the store frees
/// the lock when its TTL (or session) runs out. [`LockGuard::leak`] keeps the lock held until
/// then on purpose. Drop never blocks and never panics.
///
/// ```
/// use distlock_core::{LockClient, MemoryLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(MemoryLock::new());
/// let guard = client.acquire("report").await?;
/// println!("fencing token {:?}", guard.fencing_token());
/// tokio::select! {
///     reason = guard.lost() => eprintln!("lost the lock: {reason}"),
///     _ = async { /* the protected work */ } => {}
/// }
/// assert!(guard.release().await?, "we still owned it");
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    hold: Arc<Hold>,
    client: Arc<ClientInner>,
    runtime: Handle,
    armed: bool,
}

impl LockGuard {
    /// Wraps a fresh lease and hands it to the watchdog. Must run inside a tokio runtime.
    pub(crate) fn start(client: Arc<ClientInner>, lease: Lease, options: HoldOptions) -> Self {
        let meter = client.meter.hold(lease.name(), lease.kind());
        let hold = Arc::new(Hold::new(
            NEXT_HOLD_ID.fetch_add(1, Ordering::Relaxed),
            lease,
            options,
            client.watchdog.session(),
            meter,
        ));
        client.watchdog.register(hold.clone());
        Self {
            hold,
            client,
            runtime: Handle::current(),
            armed: true,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> LockName {
        self.hold.lease().name().clone()
    }

    /// What this guard holds: the lock of its name, a semaphore permit, a read or the write
    /// lock of a read-write lock.
    pub fn kind(&self) -> crate::LockKind {
        self.hold.lease().kind()
    }

    /// This acquisition's fencing token, if the backend issues them.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.hold.lease().fencing_token()
    }

    /// The owner token stored as the lock's value.
    pub fn owner(&self) -> OwnerToken {
        self.hold.lease().owner()
    }

    /// A copy of the current lease (it changes with each renewal).
    pub fn lease(&self) -> Lease {
        self.hold.lease()
    }

    /// How long the lock is still ours for sure: until the lease's local deadline minus the
    /// safety margin, unless renewed before. `None` for session-bound leases.
    pub fn remaining(&self) -> Option<Duration> {
        self.hold
            .lease_deadline()
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// Whether the lost-lock signal has fired, or the lease's local deadline or the maximum
    /// hold time has passed (then the signal fires now).
    pub fn is_lost(&self) -> bool {
        self.hold.check_lost().is_some()
    }

    /// Why the lock is lost, if it is (checked against the clock as [`is_lost`](Self::is_lost)).
    pub(crate) fn lost_signal_reason(&self) -> Option<LossReason> {
        self.hold.check_lost()
    }

    /// Whether the session holding this lock is disconnected right now (session-bound
    /// backends only): the lock may or may not still be held. It turns back to false on
    /// reconnection to the same session, or the lock is declared lost.
    pub fn is_suspended(&self) -> bool {
        self.hold.status() == Status::Suspended
    }

    /// Resolves when the lock is lost, with the reason; at once if it already was, and at the
    /// latest at the lease's local deadline. Never resolves after a normal release.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        self.lost_signal().lost().await
    }

    /// The hold, shared with the watchdog.
    pub(crate) fn hold(&self) -> Arc<Hold> {
        self.hold.clone()
    }

    /// A handle on the lost-lock signal that outlives borrows of the guard (for another task).
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::new(self.hold.clone())
    }

    /// Resets the TTL now (the watchdog does this by itself) and moves the next renewal to a
    /// third of the new TTL. Returns whether we still own it; if not, the lost-lock signal
    /// fires. A guard already lost (also by the clock: past its local deadline) stays lost:
    /// this returns `false` without asking the store. If the store does not answer, the renewal may still be applied later, so the
    /// local deadline never outruns `ttl` from now until a later renewal settles it.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for a TTL the backend refuses, or one the safety margin does
    /// not fit ([`AcquireOptions::safety_margin`](crate::AcquireOptions::safety_margin));
    /// store errors.
    ///
    /// # Cancel safety
    /// Cancel safe: if this future is dropped, the renewal still runs to completion, in a
    /// background task on the caller's runtime.
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        let ttl = self.client.capabilities.validate_ttl(ttl)?;
        if self.hold.lease_deadline().is_some() {
            let margin = self.hold.margin_for(ttl);
            crate::options::check_safety_margin(margin, ttl, self.hold.auto_renew)?;
        }
        if self.hold.check_lost().is_some() {
            // Lost by the clock (or earlier): the lock may be someone else's by now, and a
            // renewal the store still accepted would not make the guard held again.
            return Ok(false);
        }
        let hold = self.hold.clone();
        let client = self.client.clone();
        let task = Detaching::new(async move {
            let _one_at_a_time = hold.renewing.clone().lock_owned().await;
            let sent_at = Instant::now();
            let outcome = client.store.lock().extend(&hold.lease(), ttl).await;
            let (renewal, answer) = match outcome {
                Ok(Some(renewed)) => (Renewal::Renewed(renewed), Ok(true)),
                Ok(None) => (Renewal::NotOwned, Ok(false)),
                Err(error) => (Renewal::Unknown(error.to_string()), Err(error)),
            };
            hold.settle(sent_at, ttl, renewal);
            client.watchdog.reschedule(&hold);
            match answer {
                // Lost while the renewal was out (its deadline came first): still lost.
                Ok(true) if hold.check_lost().is_some() => Ok(false),
                answer => answer,
            }
        });
        join(task, self.client.store.lock().backend()).await
    }

    /// Releases the lock. Returns `true` if we still owned it, `false` if it had already
    /// expired or been taken (then the lost-lock signal fires, as the hold did end early).
    ///
    /// # Errors
    /// Store errors. The release may or may not have been applied; it is retried in the
    /// background (owner-checked) until the store answers or the lease would have expired.
    ///
    /// # Cancel safety
    /// Cancel safe: if this future is dropped, the release still runs to completion, in a
    /// background task on the caller's runtime.
    pub async fn release(mut self) -> Result<bool> {
        self.armed = false;
        self.client.watchdog.unregister(self.hold.id);
        let task = Detaching::new(release_task(self.client.clone(), self.hold.clone()));
        join(task, self.client.store.lock().backend()).await
    }

    /// Stops renewing and gives up the guard without releasing: the lock stays held until its
    /// TTL (or session) runs out. Returns the lease, for example to release it later through
    /// [`LockClient::release_lease`](crate::LockClient::release_lease) (which wakes this
    /// process's waiters, as a guard's release does). Lost-lock signals report
    /// the hold as ended ([`HoldEnd::Released`](crate::HoldEnd::Released)).
    pub fn leak(mut self) -> Lease {
        self.armed = false;
        self.client.watchdog.unregister(self.hold.id);
        self.hold.end();
        self.hold.lease()
    }
}

/// Releases a hold once; on an error, retries in the background.
async fn release_task(client: Arc<ClientInner>, hold: Arc<Hold>) -> Result<bool> {
    let lease = hold.lease();
    match client.store.release(&lease).await {
        Ok(true) => {
            hold.end();
            tracing::debug!(lock = %lease.name(), "distlock: released");
            Ok(true)
        }
        Ok(false) => {
            hold.lose(LossReason::NotOwned);
            Ok(false)
        }
        Err(error) => {
            hold.end();
            release_in_background(client.store.clone(), lease, "a release whose outcome is unknown");
            Err(error)
        }
    }
}

/// The outcome of a release or renewal that runs to completion even if its caller goes away.
async fn join<T: Send + 'static>(operation: Detaching<Result<T>>, backend: &'static str) -> Result<T> {
    operation
        .await
        .map_err(|_panic| Error::backend(backend, "the backend panicked"))?
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.client.watchdog.unregister(self.hold.id);
        self.hold.end();
        // Spawning onto a runtime that has shut down drops the task: the TTL then frees it.
        let client = self.client.clone();
        let hold = self.hold.clone();
        self.runtime.spawn(async move {
            if let Err(e) = release_task(client, hold).await {
                tracing::debug!(error = %e, "distlock: background release of a dropped guard failed; retrying");
            }
        });
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.hold.lease())
            .field("status", &self.hold.status())
            .finish()
    }
}
