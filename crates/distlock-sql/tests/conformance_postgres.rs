//! The conformance suite against a real PostgreSQL (`postgres` in a temporary data directory).
//!
//! Cases share one server per test binary, except the outage case, which kills its server:
//! it gets one of its own.
#![cfg(feature = "postgres")]

use std::sync::Arc;

use distlock_conformance::{conformance_tests, Fixture};

#[path = "support/postgres.rs"]
mod support;

async fn fixture() -> Arc<dyn Fixture> {
    let kills_server = distlock_conformance::current_case() == Some("c12_store_going_away");
    let server = if kills_server {
        support::Server::Owned
    } else {
        support::Server::Shared
    };
    Arc::new(support::PostgresFixture::start(server).await)
}

conformance_tests!(fixture);
