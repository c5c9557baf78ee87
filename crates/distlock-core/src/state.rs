//! What a store records of a lock object right now: [`ObjectState`] and its holders'
//! [`LockState`]s, for status displays.

use std::time::Duration;

use crate::{FencingToken, LockKind};

/// The holders of one lock object (a mutex, a semaphore, a read-write lock), from
/// [`DistributedLock::inspect`](crate::DistributedLock::inspect). Not used for any decision.
///
/// For the mutex, `holders` has at most one entry, and a free mutex may still report the last
/// fencing token issued ([`last_fencing`](Self::last_fencing)); [`into_lock`](Self::into_lock)
/// gives it back as one [`LockState`].
///
/// ```
/// use distlock_core::{FencingToken, ObjectState};
///
/// let free = ObjectState::from(distlock_core::LockState::free(Some(FencingToken::new(7))));
/// assert!(free.holders.is_empty());
/// assert_eq!(free.into_lock().fencing, Some(FencingToken::new(7)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObjectState {
    /// The live holders, each with the kind of its hold.
    pub holders: Vec<LockState>,
    /// The fencing token of the latest hold of the object, held or not, if the store keeps it.
    pub last_fencing: Option<FencingToken>,
}

impl ObjectState {
    /// An object with these live holders (the last fencing token: the greatest of theirs).
    pub fn held_by(holders: Vec<LockState>) -> Self {
        let last_fencing = holders.iter().filter_map(|h| h.fencing).max();
        Self {
            holders,
            last_fencing,
        }
    }

    /// The mutex's state as one [`LockState`]: its holder, or free with the last fencing token.
    pub fn into_lock(self) -> LockState {
        match self.holders.into_iter().next() {
            Some(holder) => holder,
            None => LockState::free(self.last_fencing),
        }
    }
}

impl From<LockState> for ObjectState {
    /// A mutex's state: held by its holder, or free with the last fencing token.
    fn from(state: LockState) -> Self {
        let last_fencing = state.fencing;
        Self {
            holders: if state.is_held() { vec![state] } else { Vec::new() },
            last_fencing,
        }
    }
}

/// One holder of a lock object as the store sees it (or, for a free mutex, its last fencing
/// token): an entry of [`ObjectState`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// The stored owner value (an [`OwnerToken`](crate::OwnerToken) for distlock clients; other clients of the
    /// same layout may store anything), or `None` if the lock is free.
    pub owner: Option<String>,
    /// The fencing token of the current or last hold, if the store keeps one.
    pub fencing: Option<FencingToken>,
    /// Time left on the current hold, if known.
    pub remaining: Option<Duration>,
    /// What the hold is of ([`LockKind::Exclusive`] for the mutex).
    pub kind: LockKind,
    /// The note the current holder left beside its hold
    /// ([`DistributedLock::set_note`](crate::DistributedLock::set_note)), if any: a leader's
    /// value.
    pub note: Option<String>,
}

impl LockState {
    /// A free lock, optionally with the last fencing token issued.
    pub fn free(fencing: Option<FencingToken>) -> Self {
        Self {
            owner: None,
            fencing,
            remaining: None,
            kind: LockKind::Exclusive,
            note: None,
        }
    }

    /// A held lock.
    pub fn held(owner: String, fencing: Option<FencingToken>, remaining: Option<Duration>) -> Self {
        Self {
            owner: Some(owner),
            fencing,
            remaining,
            kind: LockKind::Exclusive,
            note: None,
        }
    }

    /// The same state, of a hold of `kind`.
    pub fn with_kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// The same state, with the holder's note.
    pub fn with_note(mut self, note: Option<String>) -> Self {
        self.note = note;
        self
    }

    /// Whether someone holds the lock.
    pub fn is_held(&self) -> bool {
        self.owner.is_some()
    }
}
