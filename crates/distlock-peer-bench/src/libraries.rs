//! The three libraries under measurement, behind one small trait: open an independent client,
//! try once, wait with the library's own blocking acquire, release. Every library asks for the
//! same lease, [`TTL`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distributed_lock_core::traits::{DistributedLock as _, LockHandle as _, LockProvider as _};

/// Any library's error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A result with [`BoxError`].
pub type Result<T> = std::result::Result<T, BoxError>;

/// The lease every library asks for: longer than any step of the benchmark.
pub const TTL: Duration = Duration::from_secs(30);

/// How long a blocking acquire may wait before the benchmark gives up on it.
pub const WAIT: Duration = Duration::from_secs(60);

/// One lock library, used the way its documentation shows.
pub trait Library: Send + Sync + 'static {
    /// The row label in the table, with the version measured.
    const LABEL: &'static str;
    /// A short tag for the lock names of this library.
    const TAG: &'static str;
    /// One independent client, with its own connection(s) to the server.
    type Client: Clone + Send + Sync + 'static;
    /// A held lock.
    type Guard: Send + 'static;

    /// Opens a client and makes sure it has reached the server.
    fn connect(url: &str) -> impl Future<Output = Result<Self::Client>> + Send;

    /// One attempt (the library's own notion of one): `None` if the lock is held.
    fn try_acquire(
        client: &Self::Client,
        name: &str,
    ) -> impl Future<Output = Result<Option<Self::Guard>>> + Send;

    /// The library's own blocking acquire, waiting up to [`WAIT`] where it takes a limit.
    fn acquire(client: &Self::Client, name: &str) -> impl Future<Output = Result<Self::Guard>> + Send;

    /// Releases a held lock.
    fn release(guard: Self::Guard) -> impl Future<Output = Result<()>> + Send;
}

/// distlock through [`distlock::LockClient`] on the default Redis backend
/// (`distlock::connect("redis://…")`): owner-checked release, a fencing token with every
/// acquisition, release notifications for waiters.
#[derive(Debug)]
pub struct Distlock;

impl Distlock {
    fn options() -> distlock::AcquireOptions {
        distlock::AcquireOptions::new().ttl(TTL).wait_for(WAIT)
    }
}

impl Library for Distlock {
    const LABEL: &'static str = "distlock 0.1 (LockClient)";
    const TAG: &'static str = "distlock";
    type Client = distlock::LockClient;
    type Guard = distlock::LockGuard;

    async fn connect(url: &str) -> Result<Self::Client> {
        let client = distlock::connect(url).await?;
        client.backend().ping().await?;
        Ok(client)
    }

    async fn try_acquire(client: &Self::Client, name: &str) -> Result<Option<Self::Guard>> {
        Ok(client.try_acquire_with(name, &Self::options()).await?)
    }

    async fn acquire(client: &Self::Client, name: &str) -> Result<Self::Guard> {
        Ok(client.acquire_with(name, &Self::options()).await?)
    }

    async fn release(guard: Self::Guard) -> Result<()> {
        if guard.release().await? {
            Ok(())
        } else {
            Err("distlock: the lock was no longer held at release".into())
        }
    }
}

/// rslock's [`rslock::LockManager`] over one server. Its `lock` tries up to 3 times, with a
/// random pause of up to 200 ms between tries (the defaults); its blocking `acquire` repeats
/// `lock` until it wins, with no limit.
#[derive(Debug)]
pub struct Rslock;

impl Library for Rslock {
    const LABEL: &'static str = "rslock 0.10";
    const TAG: &'static str = "rslock";
    type Client = rslock::LockManager;
    type Guard = rslock::LockGuard;

    async fn connect(url: &str) -> Result<Self::Client> {
        let manager = rslock::LockManager::from_clients(vec![redis::Client::open(url)?]);
        // The manager connects on first use: take and release a lock once to do it here.
        manager.lock(b"peer-bench-connect", TTL).await?.release().await;
        Ok(manager)
    }

    async fn try_acquire(client: &Self::Client, name: &str) -> Result<Option<Self::Guard>> {
        match client.lock(name.as_bytes(), TTL).await {
            Ok(lock) => Ok(Some(rslock::LockGuard { lock })),
            Err(rslock::LockError::Unavailable) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn acquire(client: &Self::Client, name: &str) -> Result<Self::Guard> {
        Ok(client.acquire(name.as_bytes(), TTL).await?)
    }

    async fn release(guard: Self::Guard) -> Result<()> {
        guard.release().await;
        Ok(())
    }
}

/// distributed-lock-redis's [`distributed_lock_redis::RedisLockProvider`] over one server,
/// expiry [`TTL`] (its handles renew in the background, the first time right after the
/// acquisition).
#[derive(Debug)]
pub struct DistributedLockRedis;

impl Library for DistributedLockRedis {
    const LABEL: &'static str = "distributed-lock-redis 0.2";
    const TAG: &'static str = "dlr";
    type Client = Arc<distributed_lock_redis::RedisLockProvider>;
    type Guard = distributed_lock_redis::RedisLockHandle;

    async fn connect(url: &str) -> Result<Self::Client> {
        let provider = distributed_lock_redis::RedisLockProvider::builder()
            .url(url)
            .expiry(TTL)
            .build()
            .await?;
        Ok(Arc::new(provider))
    }

    async fn try_acquire(client: &Self::Client, name: &str) -> Result<Option<Self::Guard>> {
        Ok(client.create_lock(name).try_acquire().await?)
    }

    async fn acquire(client: &Self::Client, name: &str) -> Result<Self::Guard> {
        Ok(client.create_lock(name).acquire(Some(WAIT)).await?)
    }

    async fn release(guard: Self::Guard) -> Result<()> {
        Ok(guard.release().await?)
    }
}
