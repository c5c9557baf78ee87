//! [`ClockedStore`]: a store of a case's own whose server runs on a wall clock the case can
//! move ([`Fixture::store_clock`](crate::Fixture::store_clock)), and [`Clocked`], the one
//! implementation every server-backed fixture builds.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{DistributedLock, Result};
use distlock_testkit::StoreClock;
use futures::future::BoxFuture;

/// A store whose server's wall clock the case jumps (Redlock: one master's).
#[async_trait]
pub trait ClockedStore: Send + Sync {
    /// A new, independent client of this store.
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>>;

    /// Sets the server's wall clock to the true time plus `offset_secs` while it runs (a
    /// real clock step: the monotonic clock does not move). Panics if it cannot: a fault that
    /// did not happen never passes.
    fn jump(&self, offset_secs: i64);

    /// The backend's docs page that declares the loss of a lock to a forward jump, if they
    /// do: the case then reports what it saw as that declared loss instead of failing.
    fn declared_loss(&self) -> Option<&'static str>;

    /// How long its clients' sessions last on a session-bound store, where they differ from
    /// the fixture's [`Fixture::session_lifetime`](crate::Fixture::session_lifetime): the
    /// unit of the case's waits there.
    fn session_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// Opens a client of the store at a URL.
pub type OpenClient = fn(String) -> BoxFuture<'static, Result<Arc<dyn DistributedLock>>>;

/// Servers started on a [`StoreClock`], kept running as long as this lives.
pub struct Clocked<S> {
    /// The servers (dropped, and so stopped, with this).
    pub servers: S,
    /// The clock they run on.
    pub clock: StoreClock,
    /// The URL clients open.
    pub url: String,
    /// How a client is opened.
    pub open: OpenClient,
    /// See [`ClockedStore::declared_loss`].
    pub declared_loss: Option<&'static str>,
    /// See [`ClockedStore::session_lifetime`].
    pub session_lifetime: Option<Duration>,
}

#[async_trait]
impl<S: Send + Sync + 'static> ClockedStore for Clocked<S> {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        (self.open)(self.url.clone()).await
    }

    fn jump(&self, offset_secs: i64) {
        self.clock
            .jump(offset_secs)
            .unwrap_or_else(|e| panic!("jumping the store's clock failed: {e}"));
    }

    fn declared_loss(&self) -> Option<&'static str> {
        self.declared_loss
    }

    fn session_lifetime(&self) -> Option<Duration> {
        self.session_lifetime
    }
}
