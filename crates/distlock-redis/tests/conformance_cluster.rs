//! The conformance suite against a real three-master Redis Cluster (`redis+cluster://`): the
//! cases that leave it alone share one cluster per test binary; the outage case kills every
//! master of a cluster of its own, and the fault cases get one whose masters announce no
//! address, so their client stays behind a proxy per master across redirects.

mod support;

// Redis has no operation that releases a lock and takes it for the next owner.
distlock_conformance::conformance_tests!(
    support::cluster,
    backend = "Redis Cluster",
    skips = [
        c29: HandOver,
        c49: NoQueue,
        c51: StoreClock,
        c52: Members,
        c53: Failover,
    ],
);
