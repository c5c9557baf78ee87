//! [`ReleaseWatch`]: how a waiter hears that a lock was released without polling.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// A subscription to release events of one lock name, returned by
/// [`DistributedLock::watch`](crate::DistributedLock::watch).
///
/// Backends with notifications hand out a receiver whose value changes on every release they
/// hear of; [`ReleaseWatch::wait`] then returns as soon as one arrives after the subscription.
/// A polling backend returns [`ReleaseWatch::polling`], whose `wait` just sleeps.
///
/// A backend that wakes one waiter per release hands out a watch
/// [`for_waiter`](Self::for_waiter): it carries a waiter id, which the waiter's next attempts
/// ([`DistributedLock::attempt`] with that waiter) put in the store's queue of waiters, and a
/// release then wakes the first waiter in that queue, not all of them.
///
/// [`DistributedLock::attempt`]: crate::DistributedLock::attempt
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
    waiter: Option<Arc<str>>,
    /// Whether the waiter must poll too: only releases by this process are announced.
    polls: bool,
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
            waiter: None,
            polls: false,
            _keep: None,
        }
    }

    /// A watch fed by `rx`; every change of its value is a release. `keep` lives as long as
    /// the watch (drop it to unsubscribe).
    pub fn notified(mut rx: watch::Receiver<u64>, keep: impl Any + Send + Sync) -> Self {
        rx.mark_unchanged();
        Self {
            rx: Some(rx),
            waiter: None,
            polls: false,
            _keep: Some(Box::new(keep)),
        }
    }

    /// A watch of one waiter, `waiter`, fed by `rx`, whose value changes when a release wakes
    /// this waiter (or every waiter). `keep` lives as long as the watch; dropping it is the
    /// backend's cue to take the waiter out of the store's queue (and, if the waiter was woken
    /// but never tried, to wake the next one).
    pub fn for_waiter(
        rx: watch::Receiver<u64>,
        keep: impl Any + Send + Sync,
        waiter: impl Into<Arc<str>>,
    ) -> Self {
        Self {
            waiter: Some(waiter.into()),
            ..Self::notified(rx, keep)
        }
    }

    /// The same watch for a store that announces only some releases (those by clients of
    /// this process, see [`LocalWaiters`](crate::LocalWaiters)): the waiter still polls, and
    /// [`is_notified`](Self::is_notified) says `false`.
    pub fn polling_too(mut self) -> Self {
        self.polls = true;
        self
    }

    /// The waiter id of a watch [`for_waiter`](Self::for_waiter). It stays after the
    /// notifications stop (the backend closed the subscription): the waiter then polls, and
    /// its attempts keep its place in the store's queue of waiters.
    pub fn waiter(&self) -> Option<&Arc<str>> {
        self.waiter.as_ref()
    }

    /// Whether every release is announced (else the waiter must poll).
    pub fn is_notified(&self) -> bool {
        self.rx.is_some() && !self.polls
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
                // fall back to polling for the rest of this wait (`is_notified` turns false,
                // and the waiter backs off from its shortest poll interval).
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
            .field("waiter", &self.waiter)
            .finish()
    }
}
