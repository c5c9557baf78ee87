//! The conformance suite against a real 3-node ZooKeeper ensemble started by the harness
//! (every client is given all three members). The outage case is skipped: the ensemble is
//! shared by the binary's cases, and `ensemble.rs` covers losing members.

use std::sync::Arc;

use distlock_conformance::Fixture;

mod support;

async fn fixture() -> Arc<dyn Fixture> {
    Arc::new(support::ZkFixture::ensemble().await)
}

distlock_conformance::conformance_tests!(fixture);
