//! [`Session`]: the state of a session-bound backend's connection, which decides whether the
//! locks taken in it are still held.

/// One client's session with a session-bound store (ZooKeeper), published by
/// [`DistributedLock::session`](crate::DistributedLock::session).
///
/// Locks belong to the session they were taken in ([`Lease::session_epoch`](crate::Lease)).
/// The guard's watchdog follows it:
/// - [`SessionState::Suspended`]: the connection dropped but the session may still be alive
///   on the store; guards report [`LockGuard::is_suspended`](crate::LockGuard::is_suspended)
///   without declaring loss yet (they cannot know whether another client took over);
/// - back to [`SessionState::Connected`] with the same epoch: the locks were kept;
/// - [`SessionState::Expired`], or a new epoch (a new session): every lock of the old session
///   is lost, and their guards' lost-lock signal fires with
///   [`LossReason::SessionExpired`](crate::LossReason::SessionExpired).
///
/// A backend that cannot tell whether a session survived a disconnection declares it expired
/// once the session timeout has passed without reconnecting.
///
/// ```
/// use distlock_core::{Session, SessionState};
///
/// let s = Session::connected(1);
/// assert!(s.keeps(1) && !s.keeps(0));
/// assert!(!Session { epoch: 1, state: SessionState::Expired }.keeps(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// Which session this is; a new session gets a new, higher epoch.
    pub epoch: u64,
    /// Where it stands.
    pub state: SessionState,
}

impl Session {
    /// A connected session.
    pub const fn connected(epoch: u64) -> Self {
        Self {
            epoch,
            state: SessionState::Connected,
        }
    }

    /// Whether locks taken in session `epoch` may still be held.
    pub fn keeps(&self, epoch: u64) -> bool {
        self.epoch == epoch && self.state != SessionState::Expired
    }
}

/// Where a [`Session`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionState {
    /// Connected: the session's locks are held.
    Connected,
    /// Disconnected, the session may still be alive: the locks are uncertain.
    Suspended,
    /// The session ended: its locks are gone.
    Expired,
}
