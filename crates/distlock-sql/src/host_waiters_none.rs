//! [`HostWaiters`] where there are no Unix sockets (Windows): no release wakes a waiter of
//! another client, so SQLite waiters only poll (and `LockClient` still wakes the waiters of
//! its own process). The same interface as the Unix module's, doing nothing.

use std::path::Path;

use distlock_core::{Primitive, ReleaseWatch};

/// No waiters to reach: every watch polls.
#[derive(Debug)]
pub(crate) struct HostWaiters;

impl HostWaiters {
    pub(crate) fn new(_database: &Path) -> Self {
        Self
    }

    /// Always `None`: the waiter polls.
    pub(crate) fn watch(&self, _key: &str) -> Option<ReleaseWatch> {
        None
    }

    pub(crate) fn won(&self, _id: &str) {}

    pub(crate) fn released(&self, _key: &str) {}

    pub(crate) fn released_hold(&self, _primitive: Primitive, _object: &str) {}
}
