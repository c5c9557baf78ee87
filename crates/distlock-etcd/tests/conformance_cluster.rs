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
        c33: Semaphores,
        c34: Semaphores,
        c35: Semaphores,
        c36: RwLocks,
        c37: RwLocks,
        c38: RwLocks,
        c39: Primitives,
        c40: Primitives,
        c41: Primitives,
        c42: Primitives,
        c43: StoreQueue,
        c44: Semaphores,
        c51: StoreClock,
        c52: Members,
        c53: Failover,
    ],
    partial = [
        c49: Semaphores,
        c50: Semaphores,
    ],
);
