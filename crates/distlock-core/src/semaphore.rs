//! [`Semaphore`]: at most a given number of holders at once, across processes and hosts.

use std::fmt;
use std::future::Future;

use crate::client::run_under;
use crate::{
    AcquireOptions, Error, IntoLockName, LockClient, LockContext, LockGuard, LockKind, LockName, LockState,
    Primitive, Result,
};

/// A counting semaphore on the client's store: at most `permits` guards of it are held at once,
/// by any clients of the store. Built by [`LockClient::semaphore`].
///
/// Each guard holds one permit, or with [`acquire_many`](Semaphore::acquire_many) several taken
/// and given back together as one hold (several one-permit guards taken in turn are not a
/// substitute: two jobs each holding part of what they need can wait for each other forever).
/// It is the same [`LockGuard`] the mutex gives: renewed by the
/// client's watchdog, with the lost-lock signal, owner-checked release, release on drop, and a
/// fencing token where the store fences (greater than that of every earlier permit of this
/// semaphore). Every holder must agree on `permits`: an attempt that names another count than
/// the live holders fails with [`Error::PermitsMismatch`], and once no permit is held a new
/// count may be used.
///
/// ```
/// use distlock_core::{LockClient, MemoryLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(MemoryLock::new());
/// let exports = client.semaphore("exports", 2)?;
/// let first = exports.acquire().await?;
/// let second = exports.try_acquire().await?.expect("a second permit is free");
/// assert!(exports.try_acquire().await?.is_none(), "both permits are taken");
/// first.release().await?;
/// let third = exports.try_acquire().await?.expect("a permit came back");
/// assert!(third.fencing_token() > second.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: LockClient,
    name: LockName,
    permits: u32,
}

impl LockClient {
    /// The semaphore `name` with `permits` permits on this client's store. Nothing is sent to
    /// the store until a permit is asked for.
    ///
    /// # Errors
    /// [`Error::InvalidName`]; [`Error::InvalidOptions`] for zero permits;
    /// [`Error::NotSupported`] if the backend has no semaphores
    /// ([`Capabilities::semaphores`](crate::Capabilities::semaphores)).
    pub fn semaphore(&self, name: impl IntoLockName, permits: u32) -> Result<Semaphore> {
        let name = name.into_lock_name()?;
        if permits == 0 {
            return Err(Error::invalid_options("a semaphore needs at least one permit"));
        }
        self.require(Primitive::Semaphore)?;
        Ok(Semaphore {
            client: self.clone(),
            name,
            permits,
        })
    }

    /// [`Error::NotSupported`] unless the backend offers `primitive`.
    pub(crate) fn require(&self, primitive: Primitive) -> Result<()> {
        if self.capabilities().offers(primitive) {
            return Ok(());
        }
        Err(Error::NotSupported {
            backend: self.backend().backend(),
            what: match primitive {
                Primitive::Semaphore => "semaphores",
                Primitive::RwLock => "read-write locks",
                Primitive::Mutex => "locks",
            },
        })
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    fn kind(&self) -> LockKind {
        LockKind::permit(self.permits)
    }

    /// The kind of a hold of `n` permits, or why it cannot be asked for.
    fn kind_of(&self, n: u32) -> Result<LockKind> {
        if n == 0 {
            return Err(Error::invalid_options("a hold takes at least one permit"));
        }
        if n > self.permits {
            return Err(Error::invalid_options(format!(
                "{n} permits asked of semaphore {:?}, which has {}",
                self.name.as_str(),
                self.permits
            )));
        }
        if n > 1 && !self.client.capabilities().weighted_permits {
            return Err(Error::NotSupported {
                backend: self.client.backend().backend(),
                what: "holds of several permits",
            });
        }
        Ok(LockKind::permits(self.permits, n))
    }

    /// Takes a permit with the client's default options (by default waiting until one is
    /// free).
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LockClient::acquire_with`].
    pub async fn acquire(&self) -> Result<LockGuard> {
        let opts = self.client.defaults().clone();
        self.acquire_with(&opts).await
    }

    /// Takes a permit with `opts`, waiting as they say.
    ///
    /// # Errors
    /// [`Error::Timeout`] if no permit came free in time; [`Error::PermitsMismatch`];
    /// [`Error::InvalidOptions`]; store errors.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LockClient::acquire_with`]: a permit taken by an attempt whose caller
    /// went away is released.
    pub async fn acquire_with(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        self.client
            .acquire_kind(self.name.clone(), self.kind(), opts)
            .await
    }

    /// One attempt with the default options: `Ok(None)` if every permit is held.
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with), without the timeout.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        let opts = self.client.defaults().clone().no_wait();
        optional(self.acquire_with(&opts).await)
    }

    /// Takes `n` permits as one hold with the client's default options, waiting until that many
    /// are free at once: the guard gives them all back together. Waiters for fewer permits may
    /// get in first while fewer than `n` are free.
    ///
    /// ```
    /// use distlock_core::{LockClient, MemoryLock};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(MemoryLock::new());
    /// let gpus = client.semaphore("gpus", 4)?;
    /// let big = gpus.acquire_many(3).await?;
    /// assert!(gpus.try_acquire_many(2).await?.is_none(), "only one permit is left");
    /// let small = gpus.try_acquire().await?.expect("the last permit");
    /// assert!(gpus.try_acquire_many(5).await.is_err(), "more than the semaphore has");
    /// big.release().await?;
    /// small.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for zero permits or more than the semaphore has;
    /// [`Error::NotSupported`] for more than one on a backend without
    /// [`Capabilities::weighted_permits`](crate::Capabilities::weighted_permits); as
    /// [`acquire_with`](Self::acquire_with) otherwise.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_many(&self, n: u32) -> Result<LockGuard> {
        let opts = self.client.defaults().clone();
        self.acquire_many_with(n, &opts).await
    }

    /// Takes `n` permits as one hold with `opts`, as [`acquire_many`](Self::acquire_many).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    pub async fn acquire_many_with(&self, n: u32, opts: &AcquireOptions) -> Result<LockGuard> {
        let kind = self.kind_of(n)?;
        self.client.acquire_kind(self.name.clone(), kind, opts).await
    }

    /// One attempt at `n` permits as one hold: `Ok(None)` if fewer than `n` are free.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many), without the timeout.
    pub async fn try_acquire_many(&self, n: u32) -> Result<Option<LockGuard>> {
        let opts = self.client.defaults().clone().no_wait();
        optional(self.acquire_many_with(n, &opts).await)
    }

    /// Runs `work` while holding `n` permits, then gives them back, as
    /// [`LockClient::with_lock`].
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many), plus [`Error::LockLost`].
    pub async fn with_permits<F, Fut, T>(&self, n: u32, opts: &AcquireOptions, work: F) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.acquire_many_with(n, opts).await?, work).await
    }

    /// Runs `work` while holding a permit, then releases it, as [`LockClient::with_lock`].
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with), plus [`Error::LockLost`].
    pub async fn with_permit<F, Fut, T>(&self, opts: &AcquireOptions, work: F) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.acquire_with(opts).await?, work).await
    }

    /// The live holders of the semaphore as the store sees them.
    ///
    /// # Errors
    /// [`Error::NotSupported`] if the backend cannot list them; store errors.
    pub async fn holders(&self) -> Result<Vec<LockState>> {
        self.client
            .backend()
            .inspect(&self.name, Primitive::Semaphore)
            .await
            .map(|state| state.holders)
    }
}

/// `Ok(None)` for a timeout (a try that found no room).
pub(crate) fn optional(outcome: Result<LockGuard>) -> Result<Option<LockGuard>> {
    match outcome {
        Ok(guard) => Ok(Some(guard)),
        Err(Error::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}
