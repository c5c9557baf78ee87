//! [`Released`]: what a release script's reply means when the request may have run twice.
//!
//! A release whose connection broke after the request was written is sent once more by
//! [`Node`](crate::node::Node), and a second run sees what the first did: the key gone, or
//! already taken by a waiter the first run woke. Its "not ours" then says nothing about
//! whether the lock was still ours when the first run came. This module owns that reading;
//! the scripts and their round trips belong to the callers. (On a cluster, the cluster
//! client's own resends after a dropped connection are not seen, and their "not ours" is
//! taken as it comes.)

use distlock_core::{Error, Lease, Result};

use crate::node::BACKEND;

/// A release's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The hold was ours and is gone.
    Yes,
    /// The hold was not ours, and the request ran once.
    NotOurs,
    /// The hold was not ours when a request that may have run before looked: the earlier run
    /// may have released it.
    Unknown,
}

impl Released {
    /// From a release script's reply (1: released) and whether the request may have run more
    /// than once.
    pub(crate) fn from_reply(released: i64, resent: bool) -> Self {
        match (released == 1, resent) {
            (true, _) => Self::Yes,
            (false, false) => Self::NotOurs,
            (false, true) => Self::Unknown,
        }
    }

    /// As `release` reports it for `lease`: an unknown outcome is an ambiguous
    /// [`Error::Unavailable`] while the lease is still valid by the local clock (it was ours
    /// until the request's first run, as far as this client knows), and `false` once it is
    /// past its local deadline (it may have expired, and its holder was told so).
    pub(crate) fn for_lease(self, lease: &Lease) -> Result<bool> {
        match self {
            Self::Yes => Ok(true),
            Self::NotOurs => Ok(false),
            Self::Unknown if lease.remaining().is_some_and(|left| left.is_zero()) => Ok(false),
            Self::Unknown => Err(unknown()),
        }
    }

    /// As a yes or no, an unknown outcome being an ambiguous [`Error::Unavailable`].
    pub(crate) fn strict(self) -> Result<bool> {
        match self {
            Self::Yes => Ok(true),
            Self::NotOurs => Ok(false),
            Self::Unknown => Err(unknown()),
        }
    }
}

fn unknown() -> Error {
    Error::unavailable(
        BACKEND,
        "a release sent again found the hold no longer ours: its first run may have released it; the outcome is unknown",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::{LockName, OwnerToken};
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn only_a_request_sent_once_says_not_ours_for_a_valid_lease() {
        let name = LockName::new("n").expect("valid");
        let valid = Lease::new(
            name.clone(),
            OwnerToken::new(),
            Duration::from_secs(30),
            Instant::now(),
        );
        assert_eq!(Released::from_reply(1, true).for_lease(&valid).ok(), Some(true));
        assert_eq!(Released::from_reply(0, false).for_lease(&valid).ok(), Some(false));
        assert!(Released::from_reply(0, true)
            .for_lease(&valid)
            .is_err_and(|e| e.is_ambiguous()));
        let past = Lease::new(name, OwnerToken::new(), Duration::ZERO, Instant::now());
        assert_eq!(Released::from_reply(0, true).for_lease(&past).ok(), Some(false));
        assert!(Released::Unknown.strict().is_err());
    }
}
