//! The conformance suite against one real `redis-server`.

mod support;

// Redis has no operation that releases a lock and takes it for the next owner; it expires keys
// by its wall clock, so a forward step of it frees a held lock (docs/src/stores/redis.md).
distlock_conformance::conformance_tests!(
    support::single,
    backend = "Redis",
    skips = [
        c29: HandOver,
        c49: NoQueue,
        c51: StoreClockDeclared,
        c52: Members,
        c53: Failover,
    ],
);
