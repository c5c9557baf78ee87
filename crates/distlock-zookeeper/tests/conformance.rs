//! The conformance suite against a real standalone ZooKeeper started by the harness.

mod support;

// Locks live as long as the client's session: there is no TTL to extend, renew or run out.
// Waits go through ZooKeeper's own queue of sequential nodes. No operation releases a lock
// and takes it for the next owner, and a permit's release wakes every waiter of the semaphore.
distlock_conformance::conformance_tests!(
    support::fixture,
    backend = "ZooKeeper",
    skips = [
        c03: Ttl,
        c05: Ttl,
        c19: Ttl,
        c29: HandOver,
        c43: StoreQueue,
        c44: PermitWakeOne,
        c52: Members,
        c53: Failover,
    ],
);
