//! The conformance suite against a real MariaDB (`mariadbd` in a temporary data directory).
//!
//! Cases share one server per test binary (or the one `DISTLOCK_TEST_*_URL` names), except the
//! outage case, which kills its server: it always gets one of its own.
#![cfg(feature = "mysql")]

use std::sync::Arc;

use distlock_conformance::{conformance_tests, Fixture, Needs};

#[path = "sql/support/mysql.rs"]
mod support;

async fn fixture(needs: Needs) -> Arc<dyn Fixture> {
    Arc::new(support::MySqlFixture::start(needs).await)
}

// MariaDB publishes nothing (waiters poll, so a release wakes every one of them). Expiry is
// judged by the server's wall clock: a forward step of it frees a held lock (docs/src/stores/mysql.md).
conformance_tests!(
    fixture,
    backend = "MariaDB",
    skips = [
        c24: Notification,
        c27: WakeOne,
        c44: PermitWakeOne,
        c49: NoQueue,
        c51: StoreClockDeclared,
        c52: Members,
        c53: Failover,
        c61: Notification,
    ],
);
