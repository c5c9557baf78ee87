//! [`Mechanics`]: what [`LockClient`](crate::LockClient) switches on when it composes its
//! waiting around a backend. Not a promise to users (those are
//! [`Capabilities`](crate::Capabilities)); the conformance suite checks that each switch a
//! backend turns on works.

/// The switches [`LockClient`](crate::LockClient) dispatches on, from
/// [`DistributedLock::mechanics`](crate::DistributedLock::mechanics). The default turns every
/// one off, which is always safe: the client then uses the plain primitives only.
///
/// ```
/// use distlock_core::Mechanics;
///
/// assert!(!Mechanics::default().hands_over);
/// assert!(Mechanics::default().with_hands_over(true).hands_over);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mechanics {
    /// Whether [`DistributedLock::hand_over`](crate::DistributedLock::hand_over) works: one
    /// store operation releases a mutex and takes it for the next owner. On a polling store
    /// that names itself ([`DistributedLock::store_identity`](crate::DistributedLock::store_identity)),
    /// the client then hands a mutex released in this process straight to this process's
    /// first waiter (see [`LocalWaiters`](crate::LocalWaiters)).
    pub hands_over: bool,
}

impl Mechanics {
    /// Sets [`Mechanics::hands_over`].
    pub const fn with_hands_over(mut self, hands_over: bool) -> Self {
        self.hands_over = hands_over;
        self
    }
}
