//! The conformance suite against a real `memcached` started by the harness.

mod support;

// memcached publishes nothing (waiters poll, so a release wakes every one of them) and has no
// operation that releases a lock and takes it for the next owner.
distlock_conformance::conformance_tests!(
    support::fixture,
    backend = "memcached",
    skips = [
        c24: Notification,
        c27: WakeOne,
        c29: HandOver,
        c44: PermitWakeOne,
        c49: NoQueue,
        c52: Members,
        c53: Failover,
        c61: Notification,
    ],
);
