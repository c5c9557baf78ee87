//! The conformance suite against a real 3-member etcd cluster started by the harness (every
//! client is given all three members). The outage case kills a majority of a cluster of its
//! own.

mod support;

// As on a single member (see conformance.rs).
distlock_conformance::conformance_tests!(
    support::cluster_fixture,
    backend = "etcd cluster",
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
