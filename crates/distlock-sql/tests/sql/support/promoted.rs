//! A replicated pair for the failover case (c53): a primary whose commits wait for its
//! replica, behind the address clients know. A failover is the primary's `kill -9` (its host
//! gone: the address falls silent), [`DETECTION`] later the replica's promotion and the address
//! moved to it, as an operator's failover manager does. Shared by the MySQL and PostgreSQL
//! supports, each naming its pair's operations ([`Pair`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_conformance::Failover;
use distlock_core::{DistributedLock, Error, Result};
use distlock_testkit::HarnessError;

/// How long a failover manager takes to notice the primary gone: renewals and other clients'
/// tries meet a silent address meanwhile.
pub const DETECTION: Duration = Duration::from_secs(3);

/// A testkit pair's failover operations.
pub trait Pair: Send + 'static {
    /// The backend's name, for errors.
    const BACKEND: &'static str;
    /// The address clients know.
    fn url(&self) -> String;
    /// `kill -9` of the primary; its address falls silent.
    fn kill_primary(&mut self) -> std::result::Result<(), HarnessError>;
    /// Promotes the replica once it applied what it received, and moves the address to it.
    fn promote(&mut self) -> std::result::Result<(), HarnessError>;
}

/// Opens a client of the store at a URL.
pub type Open = fn(String) -> Pin<Box<dyn Future<Output = Result<Arc<dyn DistributedLock>>> + Send>>;

/// Starts a pair with `start` (off the runtime's threads) for the failover case; `install`
/// names what to install when it does not start.
pub async fn start<P: Pair>(
    start: impl FnOnce() -> std::result::Result<P, HarnessError> + Send + 'static,
    open: Open,
    install: &str,
) -> Result<Box<dyn Failover>> {
    let pair = tokio::task::spawn_blocking(start)
        .await
        .map_err(|e| Error::backend(P::BACKEND, e))?
        .map_err(|e| {
            Error::backend(
                P::BACKEND,
                format!("the pair did not start (run scripts/install-test-deps to install {install}): {e}"),
            )
        })?;
    Ok(Box::new(Promoted {
        url: pair.url(),
        pair: Arc::new(Mutex::new(pair)),
        open,
    }))
}

/// A started pair, as the failover case uses it.
struct Promoted<P> {
    pair: Arc<Mutex<P>>,
    url: String,
    open: Open,
}

#[async_trait::async_trait]
impl<P: Pair> Failover for Promoted<P> {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        (self.open)(self.url.clone()).await
    }

    /// Renewed every 5 s; a promotion takes a few seconds.
    fn ttl(&self) -> Duration {
        Duration::from_secs(15)
    }

    /// The primary's host goes silent, and [`DETECTION`] later the replica is promoted and the
    /// address moved to it; the new primary waits for no replica (there is none left).
    async fn fail_over(&self) -> Result<()> {
        self.on_pair(P::kill_primary).await?;
        tokio::time::sleep(DETECTION).await;
        self.on_pair(P::promote).await
    }
}

impl<P: Pair> Promoted<P> {
    /// Runs `f` on the pair off the runtime's threads (the testkit blocks).
    async fn on_pair(&self, f: fn(&mut P) -> std::result::Result<(), HarnessError>) -> Result<()> {
        let pair = self.pair.clone();
        tokio::task::spawn_blocking(move || f(&mut pair.lock().unwrap_or_else(PoisonError::into_inner)))
            .await
            .map_err(|e| Error::backend(P::BACKEND, e))?
            .map_err(|e| Error::backend(P::BACKEND, e))
    }
}
