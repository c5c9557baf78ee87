//! [`UpgradeableReadGuard`]: a read lock that can become the write lock without letting go.

use std::fmt;
use std::ops::Deref;

use crate::{AcquireOptions, Error, LockClient, LockGuard, LockKind, LockName, Result, RwLock};

/// An upgradeable read hold of a [`RwLock`], from [`RwLock::upgradeable_read`].
///
/// It reads beside plain readers, but only one upgradeable reader holds at a time and no
/// writer gets in while it does. [`upgrade`](Self::upgrade) waits for the plain readers to
/// leave (new readers wait behind it meanwhile) and turns the hold into the write lock in one
/// store operation, so no other writer can come between what was read and what is written.
/// The guard then holds the write lock (with a fencing token of its own, greater than every
/// earlier one where the store fences); release or drop it as any guard.
///
/// It dereferences to the [`LockGuard`] it holds now. After an upgrade, take the lost-lock
/// signal again ([`LockGuard::lost_signal`]): one taken before speaks of the read hold, which
/// ended in the upgrade.
///
/// ```
/// use distlock_core::{LockClient, LockKind, MemoryLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(MemoryLock::new());
/// let config = client.rw_lock("config")?;
/// let mut guard = config.upgradeable_read().await?;
/// let reader = config.read().await?;
/// assert!(config.try_upgradeable_read().await?.is_none(), "one upgradeable reader at a time");
/// assert!(!guard.try_upgrade().await?, "a plain reader is still in");
/// reader.release().await?;
/// guard.upgrade().await?;
/// assert_eq!(guard.kind(), LockKind::Write);
/// assert!(config.try_read().await?.is_none(), "the writer keeps readers out");
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock"]
pub struct UpgradeableReadGuard {
    client: LockClient,
    guard: LockGuard,
}

impl RwLock {
    /// Takes the upgradeable read lock with the client's default options.
    ///
    /// # Errors
    /// [`Error::NotSupported`] on a backend without
    /// [`Capabilities::upgradeable_reads`](crate::Capabilities::upgradeable_reads); as
    /// [`LockClient::acquire_with`] otherwise.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LockClient::acquire_with`].
    pub async fn upgradeable_read(&self) -> Result<UpgradeableReadGuard> {
        let opts = self.client().defaults().clone();
        self.upgradeable_read_with(&opts).await
    }

    /// Takes the upgradeable read lock with `opts`.
    ///
    /// # Errors
    /// As [`upgradeable_read`](Self::upgradeable_read).
    pub async fn upgradeable_read_with(&self, opts: &AcquireOptions) -> Result<UpgradeableReadGuard> {
        let client = self.client().clone();
        if !client.capabilities().upgradeable_reads {
            return Err(Error::NotSupported {
                backend: client.backend().backend(),
                what: "upgradeable read locks",
            });
        }
        let guard = client
            .acquire_kind(self.name().clone(), LockKind::UpgradeableRead, opts)
            .await?;
        Ok(UpgradeableReadGuard { client, guard })
    }

    /// One attempt at the upgradeable read lock: `Ok(None)` if a writer or another
    /// upgradeable reader holds it (or a writer waits).
    ///
    /// # Errors
    /// As [`upgradeable_read`](Self::upgradeable_read), without the timeout.
    pub async fn try_upgradeable_read(&self) -> Result<Option<UpgradeableReadGuard>> {
        let opts = self.client().defaults().clone().no_wait();
        match self.upgradeable_read_with(&opts).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

impl UpgradeableReadGuard {
    /// Whether the guard holds the write lock now.
    pub fn is_upgraded(&self) -> bool {
        self.guard.kind() == LockKind::Write
    }

    /// Becomes the write lock, with the client's default options: waits until no plain
    /// reader holds. Does nothing if already upgraded.
    ///
    /// # Errors
    /// As [`upgrade_with`](Self::upgrade_with).
    pub async fn upgrade(&mut self) -> Result<()> {
        let opts = self.client.defaults().clone();
        self.upgrade_with(&opts).await
    }

    /// Becomes the write lock, waiting as `opts` say (its TTL is the write lock's).
    ///
    /// # Errors
    /// [`Error::Timeout`] if plain readers held on past the wait: the guard still holds the
    /// upgradeable read. [`Error::LockLost`] if the read hold was lost before the upgrade or
    /// while it waited (the wait stops then: an upgrade never becomes a plain write).
    /// Store errors: after an ambiguous one the guard still speaks of the read hold, and
    /// its lost-lock signal fires if the store no longer has it.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped upgrade leaves the guard holding the upgradeable read (an
    /// upgrade the store granted meanwhile is released, as any acquisition whose caller went
    /// away, and then the read hold is gone too: its lost-lock signal tells).
    pub async fn upgrade_with(&mut self, opts: &AcquireOptions) -> Result<()> {
        if self.is_upgraded() {
            return Ok(());
        }
        if let Some(reason) = self.guard.lost_signal_reason() {
            return Err(Error::LockLost {
                name: self.guard.name().to_string(),
                reason,
            });
        }
        let mut opts = opts.clone();
        opts.owner = Some(self.guard.owner());
        // The write attempts are an upgrade only while the read hold lives: the wait stops
        // when its lost-lock signal fires (at the hold's local deadline, ahead of the store's
        // expiry), so no attempt is sent once the store may have let the read hold go and a
        // writer in.
        let write = tokio::select! {
            write = self.client.acquire_kind(self.guard.name(), LockKind::Write, &opts) => write?,
            reason = self.guard.lost() => {
                return Err(Error::LockLost {
                    name: self.guard.name().to_string(),
                    reason,
                })
            }
        };
        // The store turned the read hold into the write hold: the read guard ends here
        // without a release, and the write guard renews the hold from now on.
        let read = std::mem::replace(&mut self.guard, write);
        let _ = read.leak();
        Ok(())
    }

    /// One attempt at the upgrade: `Ok(false)` if plain readers hold (the guard still holds
    /// the upgradeable read).
    ///
    /// # Errors
    /// As [`upgrade_with`](Self::upgrade_with), without the timeout.
    pub async fn try_upgrade(&mut self) -> Result<bool> {
        let opts = self.client.defaults().clone().no_wait();
        optional_done(self.upgrade_with(&opts).await)
    }

    /// The guard of the hold as it stands (read or, after the upgrade, write).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The lock's name.
    pub fn lock_name(&self) -> LockName {
        self.guard.name()
    }

    /// Releases the hold (read or write), as [`LockGuard::release`].
    ///
    /// # Errors
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<bool> {
        self.guard.release().await
    }

    /// The underlying guard, to keep or pass on as any other.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

/// `Ok(false)` for a timeout (a try that found readers in).
fn optional_done(outcome: Result<()>) -> Result<bool> {
    match outcome {
        Ok(()) => Ok(true),
        Err(Error::Timeout { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

impl Deref for UpgradeableReadGuard {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl fmt::Debug for UpgradeableReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpgradeableReadGuard")
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}
