//! [`RwLock`]: many readers or one writer, across processes and hosts.

use std::fmt;
use std::future::Future;

use crate::client::run_under;
use crate::semaphore::optional;
use crate::{
    AcquireOptions, IntoLockName, LockClient, LockContext, LockGuard, LockKind, LockName, LockState,
    Primitive, Result,
};

/// A read-write lock on the client's store: any number of readers, or one writer. Built by
/// [`LockClient::rw_lock`].
///
/// Guards are the same [`LockGuard`] the mutex gives (renewal, lost-lock signal, owner-checked
/// release, release on drop, fencing where the store fences: every hold of the lock, read or
/// write, gets a token greater than all earlier ones).
///
/// # Policy
/// - **A waiting writer is not starved.** Once a writer waits, no new reader gets in; readers
///   already in keep their hold until they release, then the writer gets in. (Readers that
///   wait meanwhile get in after it.) A writer that stops waiting withdraws at once; one whose
///   process died is forgotten after its next-retry interval.
/// - **Upgrades only from the upgradeable read.** A plain read guard cannot become a write
///   guard: two readers upgrading at once would wait for each other forever. Read with
///   [`upgradeable_read`](RwLock::upgradeable_read) instead (one such reader at a time, beside
///   plain readers), and [`upgrade`](crate::UpgradeableReadGuard::upgrade) it.
///
/// ```
/// use distlock_core::{LockClient, MemoryLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(MemoryLock::new());
/// let prices = client.rw_lock("price-table")?;
/// let (a, b) = (prices.read().await?, prices.read().await?);
/// assert!(prices.try_write().await?.is_none(), "readers keep the writer out");
/// a.release().await?;
/// b.release().await?;
/// let writer = prices.try_write().await?.expect("free now");
/// assert!(prices.try_read().await?.is_none(), "the writer keeps readers out");
/// writer.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: LockClient,
    name: LockName,
}

impl LockClient {
    /// The read-write lock `name` on this client's store. Nothing is sent to the store until a
    /// side is asked for.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName); [`Error::NotSupported`](crate::Error::NotSupported)
    /// if the backend has no read-write locks ([`Capabilities::rw_locks`](crate::Capabilities::rw_locks)).
    pub fn rw_lock(&self, name: impl IntoLockName) -> Result<RwLock> {
        let name = name.into_lock_name()?;
        self.require(Primitive::RwLock)?;
        Ok(RwLock {
            client: self.clone(),
            name,
        })
    }
}

impl RwLock {
    /// The client the lock was built by.
    pub(crate) fn client(&self) -> &LockClient {
        &self.client
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Takes a read lock with the client's default options.
    ///
    /// # Errors
    /// As [`LockClient::acquire_with`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LockClient::acquire_with`].
    pub async fn read(&self) -> Result<LockGuard> {
        let opts = self.client.defaults().clone();
        self.read_with(&opts).await
    }

    /// Takes a read lock with `opts`.
    ///
    /// # Errors
    /// As [`LockClient::acquire_with`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LockClient::acquire_with`].
    pub async fn read_with(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        self.client
            .acquire_kind(self.name.clone(), LockKind::Read, opts)
            .await
    }

    /// One attempt at a read lock: `Ok(None)` if a writer holds or waits for the lock.
    ///
    /// # Errors
    /// As [`LockClient::acquire_with`], without the timeout.
    pub async fn try_read(&self) -> Result<Option<LockGuard>> {
        let opts = self.client.defaults().clone().no_wait();
        optional(self.read_with(&opts).await)
    }

    /// Takes the write lock with the client's default options.
    ///
    /// # Errors
    /// As [`LockClient::acquire_with`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LockClient::acquire_with`]; a dropped wait also withdraws its claim
    /// to be the next writer.
    pub async fn write(&self) -> Result<LockGuard> {
        let opts = self.client.defaults().clone();
        self.write_with(&opts).await
    }

    /// Takes the write lock with `opts`.
    ///
    /// # Errors
    /// As [`LockClient::acquire_with`].
    ///
    /// # Cancel safety
    /// As [`write`](Self::write).
    pub async fn write_with(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        self.client
            .acquire_kind(self.name.clone(), LockKind::Write, opts)
            .await
    }

    /// One attempt at the write lock: `Ok(None)` if anyone holds the lock.
    ///
    /// # Errors
    /// As [`LockClient::acquire_with`], without the timeout.
    pub async fn try_write(&self) -> Result<Option<LockGuard>> {
        let opts = self.client.defaults().clone().no_wait();
        optional(self.write_with(&opts).await)
    }

    /// Runs `work` under a read lock, then releases it, as [`LockClient::with_lock`].
    ///
    /// # Errors
    /// As [`LockClient::with_lock`].
    pub async fn with_read<F, Fut, T>(&self, opts: &AcquireOptions, work: F) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.read_with(opts).await?, work).await
    }

    /// Runs `work` under the write lock, then releases it, as [`LockClient::with_lock`].
    ///
    /// # Errors
    /// As [`LockClient::with_lock`].
    pub async fn with_write<F, Fut, T>(&self, opts: &AcquireOptions, work: F) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.write_with(opts).await?, work).await
    }

    /// The live readers and writer as the store sees them.
    ///
    /// # Errors
    /// [`Error::NotSupported`](crate::Error::NotSupported) if the backend cannot list them;
    /// store errors.
    pub async fn holders(&self) -> Result<Vec<LockState>> {
        self.client
            .backend()
            .inspect(&self.name, Primitive::RwLock)
            .await
            .map(|state| state.holders)
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
