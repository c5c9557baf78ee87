//! The conformance suite against the in-process reference backend.

use std::sync::Arc;

use distlock_conformance::{conformance_tests, Fixture, MemoryFixture, Needs};

async fn fixture(_needs: Needs) -> Arc<dyn Fixture> {
    Arc::new(MemoryFixture::new())
}

// No other process shares the store, and no network lies between client and store.
conformance_tests!(
    fixture,
    backend = "memory",
    skips = [
        c17: CrossProcess,
        c21: FaultProxy,
        c22: FaultProxy,
        c23: FaultProxy,
        c24: FaultProxy,
        c25: FaultProxy,
        c26: CrossProcess,
        c35: CrossProcess,
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
        c59: CrossProcess,
        c61: FaultProxy,
        c62: FaultProxy,
    ],
);
