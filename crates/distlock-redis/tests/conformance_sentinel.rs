//! The conformance suite against a Redis Sentinel set (`redis+sentinel://`, a primary, one
//! replica, three Sentinels) with `wait_for_replicas=1`: the cases that leave it alone share
//! one set per test binary; the outage case kills both data servers of a set of its own, and
//! the failover case kills the primary of a set of its own. The set offers no fault proxies
//! (see `support::sentinel`).

mod support;

// Redis has no operation that releases a lock and takes it for the next owner; the fault
// cases need proxies between the client and the data servers it learns from the Sentinels.
distlock_conformance::conformance_tests!(
    support::sentinel::sentinel,
    backend = "Redis Sentinel",
    skips = [
        c21: FaultProxy,
        c22: FaultProxy,
        c23: FaultProxy,
        c24: FaultProxy,
        c25: FaultProxy,
        c29: HandOver,
        c41: FaultProxy,
        c42: FaultProxy,
        c48: FaultProxy,
        c49: NoQueue,
        c50: FaultProxy,
        c51: StoreClock,
        c52: Members,
        c58: FaultProxy,
        c61: FaultProxy,
        c62: FaultProxy,
    ],
);
