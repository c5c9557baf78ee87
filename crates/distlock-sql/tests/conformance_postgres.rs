//! The conformance suite against a real PostgreSQL (`postgres` in a temporary data directory).
//!
//! Cases share one server per test binary (or the one `DISTLOCK_TEST_*_URL` names), except the
//! outage case, which kills its server: it always gets one of its own.
#![cfg(feature = "postgres")]

use std::sync::Arc;

use distlock_conformance::{conformance_tests, Fixture, Needs};

#[path = "sql/support/postgres.rs"]
mod support;

async fn fixture(needs: Needs) -> Arc<dyn Fixture> {
    Arc::new(support::PostgresFixture::start(needs).await)
}

// A permit's release notifies every waiter of the semaphore (NOTIFY has no addressee). Expiry is
// judged by the server's wall clock: a forward step of it frees a held lock (docs/src/stores/postgres.md).
conformance_tests!(
    fixture,
    backend = "PostgreSQL",
    skips = [
        c44: PermitWakeOne,
        c49: NoQueue,
        c51: StoreClockDeclared,
        c52: Members,
        c53: Failover,
    ],
);
