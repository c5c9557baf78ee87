//! [`LockGuard`]: a held lock, its renewal, its lost-lock signal and what dropping it does.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::{Error, FencingToken, Lease, LockName, LossReason, OwnerToken, Result};

/// Where a hold stands; shared by the guard, its lost-lock signals and the watchdog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    /// The session that holds the lock is disconnected; the lock may or may not be held.
    Suspended,
    Lost(LossReason),
    Released,
}

/// The state of one hold, shared between its guard and the client's watchdog.
pub(crate) struct Hold {
    pub(crate) id: u64,
    lease: Mutex<Lease>,
    status: watch::Sender<Status>,
    pub(crate) auto_renew: bool,
    pub(crate) max_hold_until: Option<Instant>,
}

impl Hold {
    pub(crate) fn lease(&self) -> Lease {
        self.lease.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub(crate) fn set_lease(&self, lease: Lease) {
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = lease;
    }

    pub(crate) fn is_held(&self) -> bool {
        matches!(*self.status.borrow(), Status::Held | Status::Suspended)
    }

    /// Marks the hold suspended (its session is disconnected) or held again.
    pub(crate) fn set_suspended(&self, suspended: bool) {
        let (from, to) = match suspended {
            true => (Status::Held, Status::Suspended),
            false => (Status::Suspended, Status::Held),
        };
        let changed = self.status.send_if_modified(|status| {
            if *status == from {
                *status = to.clone();
                true
            } else {
                false
            }
        });
        if changed {
            tracing::info!(lock = %self.lease().name(), suspended, "distlock: session connection changed");
        }
    }

    /// Marks the hold lost (once; later calls and calls after release change nothing).
    pub(crate) fn lose(&self, reason: LossReason) {
        let name = self.lease().name().clone();
        let changed = self.status.send_if_modified(|status| {
            if matches!(status, Status::Held | Status::Suspended) {
                *status = Status::Lost(reason.clone());
                true
            } else {
                false
            }
        });
        if changed {
            tracing::warn!(lock = %name, %reason, "distlock: lock lost");
        }
    }

    fn mark_released(&self) {
        self.status.send_if_modified(|status| {
            if matches!(status, Status::Held | Status::Suspended) {
                *status = Status::Released;
                true
            } else {
                false
            }
        });
    }
}

static NEXT_HOLD_ID: AtomicU64 = AtomicU64::new(1);

/// A held lock. Obtained from [`LockClient`](crate::LockClient).
///
/// While the guard lives, the client's watchdog renews the lease at a third of its TTL (unless
/// renewal was turned off). If a renewal finds the lock gone or owned by someone else, or the
/// lease runs out while renewals fail, or the maximum hold time passes, the lost-lock signal
/// fires: [`LockGuard::is_lost`] turns true and [`LockGuard::lost`] resolves.
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
    pub(crate) fn start(
        client: Arc<ClientInner>,
        lease: Lease,
        auto_renew: bool,
        max_hold: Option<Duration>,
    ) -> Self {
        let max_hold_until = max_hold.and_then(|d| lease.acquired_at().checked_add(d));
        let (status, _) = watch::channel(Status::Held);
        let hold = Arc::new(Hold {
            id: NEXT_HOLD_ID.fetch_add(1, Ordering::Relaxed),
            lease: Mutex::new(lease),
            status,
            auto_renew,
            max_hold_until,
        });
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

    /// Whether the lost-lock signal has fired.
    pub fn is_lost(&self) -> bool {
        matches!(*self.hold.status.borrow(), Status::Lost(_))
    }

    /// Whether the session holding this lock is disconnected right now (session-bound
    /// backends only): the lock may or may not still be held. It turns back to false on
    /// reconnection to the same session, or the lock is declared lost.
    pub fn is_suspended(&self) -> bool {
        matches!(*self.hold.status.borrow(), Status::Suspended)
    }

    /// Resolves when the lock is lost, with the reason; at once if it already was. Never
    /// resolves after a normal release.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        self.lost_signal().lost().await
    }

    /// A handle on the lost-lock signal that outlives borrows of the guard (for another task).
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal {
            rx: self.hold.status.subscribe(),
        }
    }

    /// Resets the TTL now (the watchdog does this by itself). Returns whether we still own it;
    /// if not, the lost-lock signal fires.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for a TTL the backend refuses; store errors.
    ///
    /// # Cancel safety
    /// Cancel safe: the renewal runs to completion in a background task.
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        let ttl = self.client.capabilities.validate_ttl(ttl)?;
        let hold = self.hold.clone();
        let lock = self.client.lock.clone();
        let task = self.runtime.spawn(async move {
            let sent_at = Instant::now();
            let lease = hold.lease();
            match lock.extend(&lease, ttl).await? {
                Some(renewed) => {
                    hold.set_lease(renewed.renewed(ttl, sent_at));
                    Ok(true)
                }
                None => {
                    hold.lose(LossReason::NotOwned);
                    Ok(false)
                }
            }
        });
        join(task, self.client.lock.backend()).await
    }

    /// Releases the lock. Returns `true` if we still owned it, `false` if it had already
    /// expired or been taken (then the lost-lock signal fires, as the hold did end early).
    ///
    /// # Errors
    /// Store errors; the lock then frees itself at the end of its TTL.
    ///
    /// # Cancel safety
    /// Cancel safe: the release runs to completion in a background task even if this future
    /// is dropped.
    pub async fn release(mut self) -> Result<bool> {
        self.armed = false;
        self.client.watchdog.unregister(self.hold.id);
        let task = self
            .runtime
            .spawn(release_task(self.client.clone(), self.hold.clone()));
        join(task, self.client.lock.backend()).await
    }

    /// Stops renewing and gives up the guard without releasing: the lock stays held until its
    /// TTL (or session) runs out. Returns the lease, for example to release it later through
    /// [`DistributedLock::release`](crate::DistributedLock::release).
    pub fn leak(mut self) -> Lease {
        self.armed = false;
        self.client.watchdog.unregister(self.hold.id);
        self.hold.lease()
    }
}

async fn release_task(client: Arc<ClientInner>, hold: Arc<Hold>) -> Result<bool> {
    let lease = hold.lease();
    let owned = client.lock.release(&lease).await?;
    if owned {
        hold.mark_released();
        tracing::debug!(lock = %lease.name(), "distlock: released");
    } else {
        hold.lose(LossReason::NotOwned);
    }
    Ok(owned)
}

async fn join<T>(task: tokio::task::JoinHandle<Result<T>>, backend: &'static str) -> Result<T> {
    task.await
        .map_err(|e| Error::backend(backend, format!("background task failed: {e}")))?
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.client.watchdog.unregister(self.hold.id);
        // Spawning onto a runtime that has shut down drops the task: the TTL then frees it.
        let client = self.client.clone();
        let hold = self.hold.clone();
        self.runtime.spawn(async move {
            if let Err(e) = release_task(client, hold).await {
                tracing::warn!(error = %e, "distlock: background release of a dropped guard failed; the TTL will free the lock");
            }
        });
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.hold.lease())
            .field("status", &*self.hold.status.borrow())
            .finish()
    }
}

/// A cloneable handle on a guard's lost-lock signal, for `select!` in another task.
///
/// ```
/// use distlock_core::{LockClient, MemoryLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(MemoryLock::new());
/// let guard = client.acquire("job").await?;
/// let signal = guard.lost_signal();
/// let watcher = tokio::spawn(async move {
///     tokio::select! {
///         reason = signal.lost() => Some(reason),
///         _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => None,
///     }
/// });
/// assert_eq!(watcher.await.expect("joined"), None);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LostSignal {
    rx: watch::Receiver<Status>,
}

impl LostSignal {
    /// Whether the lock was lost.
    pub fn is_lost(&self) -> bool {
        matches!(*self.rx.borrow(), Status::Lost(_))
    }

    /// Resolves when the lock is lost (at once if it already was); never after a normal
    /// release.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        let mut rx = self.rx.clone();
        let outcome = rx
            .wait_for(|status| matches!(status, Status::Lost(_)))
            .await
            .map(|status| status.clone());
        match outcome {
            Ok(Status::Lost(reason)) => reason,
            // Released (the sender is gone and it never was lost): never resolves.
            _ => std::future::pending().await,
        }
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostSignal")
            .field("lost", &self.is_lost())
            .finish()
    }
}
