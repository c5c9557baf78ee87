//! The conformance suite against SQLite files.
#![cfg(feature = "sqlite")]

use std::sync::Arc;

use distlock_conformance::{conformance_tests, Fixture};

#[path = "support/sqlite.rs"]
mod support;

async fn fixture() -> Arc<dyn Fixture> {
    Arc::new(support::SqliteFixture::start().await)
}

conformance_tests!(fixture);
