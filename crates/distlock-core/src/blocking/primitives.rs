//! [`Semaphore`] and [`RwLock`] for synchronous programs: the async primitives' calls, run to
//! completion on the calling thread, handing out the blocking [`LockGuard`].

use std::fmt;

use super::{finish, LockClient, LockGuard};
use crate::{AcquireOptions, IntoLockName, LockName, LockState, Result};

impl LockClient {
    /// The semaphore `name` with `permits` permits, as [`crate::LockClient::semaphore`].
    ///
    /// ```
    /// use distlock_core::blocking::LockClient;
    /// use distlock_core::MemoryLock;
    ///
    /// # fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(MemoryLock::new())?;
    /// let exports = client.semaphore("exports", 2)?;
    /// let (first, second) = (exports.acquire()?, exports.acquire()?);
    /// assert!(exports.try_acquire()?.is_none(), "both permits are taken");
    /// drop(first); // released before drop returns
    /// assert!(exports.try_acquire()?.is_some());
    /// # drop(second);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::LockClient::semaphore`].
    pub fn semaphore(&self, name: impl IntoLockName, permits: u32) -> Result<Semaphore> {
        Ok(Semaphore {
            semaphore: self.client.semaphore(name, permits)?,
            client: self.clone(),
        })
    }

    /// The read-write lock `name`, as [`crate::LockClient::rw_lock`].
    ///
    /// ```
    /// use distlock_core::blocking::LockClient;
    /// use distlock_core::MemoryLock;
    ///
    /// # fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(MemoryLock::new())?;
    /// let prices = client.rw_lock("price-table")?;
    /// let (a, b) = (prices.read()?, prices.read()?);
    /// assert!(prices.try_write()?.is_none(), "readers keep the writer out");
    /// drop((a, b));
    /// assert!(prices.write()?.release()?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::LockClient::rw_lock`].
    pub fn rw_lock(&self, name: impl IntoLockName) -> Result<RwLock> {
        Ok(RwLock {
            rw_lock: self.client.rw_lock(name)?,
            client: self.clone(),
        })
    }
}

/// The blocking counterpart of [`crate::Semaphore`]: each guard holds one permit. Built by
/// [`LockClient::semaphore`]; cheap to clone.
#[derive(Clone)]
pub struct Semaphore {
    semaphore: crate::Semaphore,
    client: LockClient,
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &LockName {
        self.semaphore.name()
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.semaphore.permits()
    }

    /// Takes a permit with the client's default options (by default waiting for one).
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn acquire(&self) -> Result<LockGuard> {
        self.client.held(self.semaphore.acquire())
    }

    /// Takes a permit, waiting as `opts` say.
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire_with`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn acquire_with(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        self.client.held(self.semaphore.acquire_with(opts))
    }

    /// One attempt: `Ok(None)` if every permit is held.
    ///
    /// # Errors
    /// As [`crate::Semaphore::try_acquire`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.client.maybe_held(self.semaphore.try_acquire())
    }

    /// Runs `work` while holding a permit, then releases it; a loss while `work` ran is
    /// reported when it returns, as [`LockClient::with_lock`] does.
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with), plus [`Error::LockLost`](crate::Error::LockLost).
    pub fn with_permit<T>(&self, opts: &AcquireOptions, work: impl FnOnce(&LockGuard) -> T) -> Result<T> {
        let guard = self.acquire_with(opts)?;
        let output = work(&guard);
        finish(guard, output)
    }

    /// The live holders of its permits.
    ///
    /// # Errors
    /// As [`crate::Semaphore::holders`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn holders(&self) -> Result<Vec<LockState>> {
        self.client.engine.block_on(self.semaphore.holders())?
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Semaphore")
            .field("name", self.name())
            .field("permits", &self.permits())
            .finish()
    }
}

/// The blocking counterpart of [`crate::RwLock`]: many readers or one writer, with the same
/// policy (a waiting writer is not starved; no upgrade). Built by [`LockClient::rw_lock`];
/// cheap to clone.
#[derive(Clone)]
pub struct RwLock {
    rw_lock: crate::RwLock,
    client: LockClient,
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        self.rw_lock.name()
    }

    /// Takes a read hold with the client's default options.
    ///
    /// # Errors
    /// As [`crate::RwLock::read`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn read(&self) -> Result<LockGuard> {
        self.client.held(self.rw_lock.read())
    }

    /// Takes a read hold, waiting as `opts` say.
    ///
    /// # Errors
    /// As [`crate::RwLock::read_with`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn read_with(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        self.client.held(self.rw_lock.read_with(opts))
    }

    /// One read attempt: `Ok(None)` if a writer holds or waits.
    ///
    /// # Errors
    /// As [`crate::RwLock::try_read`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn try_read(&self) -> Result<Option<LockGuard>> {
        self.client.maybe_held(self.rw_lock.try_read())
    }

    /// Takes the write hold with the client's default options.
    ///
    /// # Errors
    /// As [`crate::RwLock::write`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn write(&self) -> Result<LockGuard> {
        self.client.held(self.rw_lock.write())
    }

    /// Takes the write hold, waiting as `opts` say.
    ///
    /// # Errors
    /// As [`crate::RwLock::write_with`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn write_with(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        self.client.held(self.rw_lock.write_with(opts))
    }

    /// One write attempt: `Ok(None)` if anyone holds it.
    ///
    /// # Errors
    /// As [`crate::RwLock::try_write`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn try_write(&self) -> Result<Option<LockGuard>> {
        self.client.maybe_held(self.rw_lock.try_write())
    }

    /// Runs `work` while holding a read hold, then releases it (a loss is reported as
    /// [`LockClient::with_lock`] does).
    ///
    /// # Errors
    /// As [`read_with`](Self::read_with), plus [`Error::LockLost`](crate::Error::LockLost).
    pub fn with_read<T>(&self, opts: &AcquireOptions, work: impl FnOnce(&LockGuard) -> T) -> Result<T> {
        let guard = self.read_with(opts)?;
        let output = work(&guard);
        finish(guard, output)
    }

    /// Runs `work` while holding the write hold, then releases it (a loss is reported as
    /// [`LockClient::with_lock`] does).
    ///
    /// # Errors
    /// As [`write_with`](Self::write_with), plus [`Error::LockLost`](crate::Error::LockLost).
    pub fn with_write<T>(&self, opts: &AcquireOptions, work: impl FnOnce(&LockGuard) -> T) -> Result<T> {
        let guard = self.write_with(opts)?;
        let output = work(&guard);
        finish(guard, output)
    }

    /// Its live readers, or its writer.
    ///
    /// # Errors
    /// As [`crate::RwLock::holders`]; [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime).
    pub fn holders(&self) -> Result<Vec<LockState>> {
        self.client.engine.block_on(self.rw_lock.holders())?
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::RwLock")
            .field("name", self.name())
            .finish()
    }
}
