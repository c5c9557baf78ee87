//! [`Released`]: what a release script's reply means when the request may have run twice.
//!
//! A release whose connection broke after the request was written is sent once more by
//! [`Node`](crate::node::Node), and a second run sees what the first did: the key gone, or
//! already taken by a waiter the first run woke. Its "not ours" then says nothing about
//! whether the lock was still ours when the first run came. This module owns that reading;
//! the scripts and their round trips belong to the callers.
//!
//! On a cluster the cluster client also sends a request again after a dropped connection,
//! unseen by us. There a release that deletes its hold also writes a release marker
//! (`{<slot tag>}` `0xFF` `released:` `<owner>` `:` `<lock key>`, see [`keys`](crate::keys))
//! holding the request's nonce, in the same script, for a few operation timeouts
//! ([`marker_ttl_arg`]); a run of that same request that finds the hold not ours but the
//! marker reports it released, as its first run did. The marker is written only by a release
//! that found the hold ours, and answers only the same request of the same owner token: a
//! stale holder, whose lock expired and was taken by another, finds no marker of its own and
//! is told "not ours", and a second release of a released lease (a new request) is told "not
//! ours" too. On one server the resend is seen, and releases stay as they were (no marker,
//! so no write a full server would refuse inside a script without `flags=allow-oom`).

use std::time::Duration;

use distlock_core::{Error, Lease, Result};

use crate::node::{Node, BACKEND};

/// How long a release marker outlives its release: the cluster client's resends of a request
/// all run within the request's bound `limit`; a few of them leave room for one that waited
/// in a socket buffer.
const MARKER_LIFETIMES: u32 = 4;

/// The release marker's TTL in ms as a script argument: a few of `limit` on a cluster, `0`
/// (no marker) on one server.
pub(crate) fn marker_ttl_arg(node: &Node, limit: Duration) -> String {
    if !node.is_cluster() {
        return "0".to_owned();
    }
    let ttl = (limit * MARKER_LIFETIMES).max(Duration::from_secs(1));
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).to_string()
}

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
