//! The conformance suite against the in-process reference backend.

use std::sync::Arc;

use distlock_conformance::{conformance_tests, Fixture, MemoryFixture};

async fn fixture() -> Arc<dyn Fixture> {
    Arc::new(MemoryFixture::new())
}

conformance_tests!(fixture);
