//! The conformance suite against a real single etcd member started by the harness.

mod support;

// Locks live as long as the client's lease: there is no per-lock TTL to extend, renew or run
// out. Waits go through etcd's own queues of keys in create-revision order (a semaphore's
// waiters queue for its `locks` key, not through `watch`). No operation releases a lock and
// takes it for the next owner. etcd reads Go's clock through the vDSO, which libfaketime
// cannot move.
distlock_conformance::conformance_tests!(
    support::fixture,
    backend = "etcd",
    skips = [
        c03: Ttl,
        c05: Ttl,
        c19: Ttl,
        c29: HandOver,
        c43: StoreQueue,
        c44: PermitWakeOne,
        c51: StoreClock,
        c52: Members,
        c53: Failover,
    ],
);
