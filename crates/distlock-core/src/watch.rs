//! [`ReleaseWatch`]: how a waiter hears that a lock was released without polling.

use std::any::Any;
use std::fmt;
use std::time::Duration;

use tokio::sync::watch;

/// A subscription to release events of one lock name, returned by
/// [`DistributedLock::watch`](crate::DistributedLock::watch).
///
/// Backends with notifications hand out a receiver whose value changes on every release they
/// hear of; [`ReleaseWatch::wait`] then returns as soon as one arrives after the subscription.
/// A polling backend returns [`ReleaseWatch::polling`], whose `wait` just sleeps.
///
/// ```
/// use distlock_core::{ReleaseWatch, Woke};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let (tx, rx) = tokio::sync::watch::channel(0u64);
/// let mut watch = ReleaseWatch::notified(rx, ());
/// tx.send_modify(|n| *n += 1);
/// assert_eq!(watch.wait(Duration::from_secs(5)).await, Woke::Released);
/// assert_eq!(ReleaseWatch::polling().wait(Duration::from_millis(1)).await, Woke::TimedOut);
/// # }
/// ```
pub struct ReleaseWatch {
    rx: Option<watch::Receiver<u64>>,
    // Kept alive while the watch lives (for example a subscription's reference count).
    _keep: Option<Box<dyn Any + Send + Sync>>,
}

/// Why [`ReleaseWatch::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// A release was announced.
    Released,
    /// The time ran out (or the backend does not notify).
    TimedOut,
}

impl ReleaseWatch {
    /// A watch that never hears anything: waiting is pure backoff.
    pub fn polling() -> Self {
        Self {
            rx: None,
            _keep: None,
        }
    }

    /// A watch fed by `rx`; every change of its value is a release. `keep` lives as long as
    /// the watch (drop it to unsubscribe).
    pub fn notified(mut rx: watch::Receiver<u64>, keep: impl Any + Send + Sync) -> Self {
        rx.mark_unchanged();
        Self {
            rx: Some(rx),
            _keep: Some(Box::new(keep)),
        }
    }

    /// Whether releases are announced (else the waiter must poll).
    pub fn is_notified(&self) -> bool {
        self.rx.is_some()
    }

    /// Waits until a release is announced or `timeout` passes.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future loses nothing; an announcement that arrived stays
    /// pending for the next `wait`.
    pub async fn wait(&mut self, timeout: Duration) -> Woke {
        let Some(rx) = self.rx.as_mut() else {
            tokio::time::sleep(timeout).await;
            return Woke::TimedOut;
        };
        match tokio::time::timeout(timeout, rx.changed()).await {
            Ok(Ok(())) => {
                rx.mark_unchanged();
                Woke::Released
            }
            Ok(Err(_closed)) => {
                // The backend dropped the subscription (for example its connection broke):
                // fall back to polling for the rest of this wait.
                self.rx = None;
                Woke::TimedOut
            }
            Err(_elapsed) => Woke::TimedOut,
        }
    }
}

impl fmt::Debug for ReleaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseWatch")
            .field("notified", &self.is_notified())
            .finish()
    }
}
