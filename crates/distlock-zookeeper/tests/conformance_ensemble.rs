//! The conformance suite against a real 3-node ZooKeeper ensemble started by the harness
//! (every client is given all three members). The outage case kills a majority of an
//! ensemble of its own.

mod support;

// As on a standalone server (see conformance.rs).
distlock_conformance::conformance_tests!(
    support::ensemble_fixture,
    backend = "ZooKeeper ensemble",
    skips = [
        c03: Ttl,
        c05: Ttl,
        c19: Ttl,
        c29: HandOver,
        c43: StoreQueue,
        c44: PermitWakeOne,
        c51: StoreClock,
    ],
);
