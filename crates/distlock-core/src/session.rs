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
/// Every reader of a guard ([`LockGuard::is_lost`](crate::LockGuard::is_lost), the lost-lock
/// signal, `with_lock`) applies [`keeps`](Self::keeps) to the session as published, so an
/// expired session (or a newer epoch) ends its guards at once even if the watchdog has not
/// run since, and even without a [`valid_until`](Self::valid_until).
///
/// **The session's local deadline.** A process that stops running (a long GC or SIGSTOP, a
/// starved host) learns nothing from its session while the server expires it; when it runs
/// again, its guards must not say "held" for a moment. A backend that knows when it last
/// heard from the server publishes [`valid_until`](Self::valid_until): that contact plus the
/// session timeout, less a safety margin. Guards of the session count as lost from then on
/// by the clock, like a TTL lease past its deadline, whatever the watchdog has managed to
/// record. The backend moves it forward with each contact (without notifying receivers:
/// readers look at it when they check).
///
/// ```
/// use distlock_core::{Session, SessionState};
///
/// let s = Session::connected(1);
/// assert!(s.keeps(1) && !s.keeps(0));
/// assert!(!Session::connected(1).with_state(SessionState::Expired).keeps(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// Which session this is; a new session gets a new, higher epoch.
    pub epoch: u64,
    /// Where it stands.
    pub state: SessionState,
    /// When the session must be presumed expired unless the backend hears from the server
    /// again (`None`: the backend does not say).
    pub valid_until: Option<tokio::time::Instant>,
}

impl Session {
    /// A connected session.
    pub const fn connected(epoch: u64) -> Self {
        Self {
            epoch,
            state: SessionState::Connected,
            valid_until: None,
        }
    }

    /// This session in state `state`.
    #[must_use]
    pub const fn with_state(mut self, state: SessionState) -> Self {
        self.state = state;
        self
    }

    /// This session with its local deadline at `until`.
    #[must_use]
    pub const fn with_valid_until(mut self, until: tokio::time::Instant) -> Self {
        self.valid_until = Some(until);
        self
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
