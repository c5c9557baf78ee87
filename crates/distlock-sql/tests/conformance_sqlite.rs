//! The conformance suite against SQLite files.
#![cfg(feature = "sqlite")]

use std::sync::Arc;

use distlock_conformance::{conformance_tests, Fixture, Needs};

#[path = "sql/support/sqlite.rs"]
mod support;

async fn fixture(_needs: Needs) -> Arc<dyn Fixture> {
    Arc::new(support::SqliteFixture::start().await)
}

// An embedded store: no network between client and store to put a fault proxy in; SQLite
// publishes nothing (waiters poll, so a release wakes every one of them).
conformance_tests!(
    fixture,
    backend = "SQLite",
    skips = [
        c21: FaultProxy,
        c22: FaultProxy,
        c23: FaultProxy,
        c24: Notification,
        c25: FaultProxy,
        c27: WakeOne,
        c41: FaultProxy,
        c42: FaultProxy,
        c44: PermitWakeOne,
        c48: FaultProxy,
        c49: NoQueue,
        c50: FaultProxy,
        c51: StoreClock,
        c52: Members,
        c53: Failover,
        c58: FaultProxy,
        c61: Notification,
        c62: FaultProxy,
    ],
);
