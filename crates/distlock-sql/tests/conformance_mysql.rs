//! The conformance suite against a real MariaDB (`mariadbd` in a temporary data directory).
//!
//! Cases share one server per test binary, except the outage case, which kills its server:
//! it gets one of its own.
#![cfg(feature = "mysql")]

use std::sync::Arc;

use distlock_conformance::{conformance_tests, Fixture};

#[path = "support/mysql.rs"]
mod support;

async fn fixture() -> Arc<dyn Fixture> {
    let kills_server = distlock_conformance::current_case() == Some("c12_store_going_away");
    let server = if kills_server {
        support::Server::Owned
    } else {
        support::Server::Shared
    };
    Arc::new(support::MySqlFixture::start(server).await)
}

conformance_tests!(fixture);
