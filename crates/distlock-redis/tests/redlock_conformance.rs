//! The conformance suite against Redlock over 3 and over 5 real `redis-server`s.

mod support;

/// The suite on one Redlock set-up. Redlock's masters each keep their own counter, so it
/// issues no fencing tokens (its leaders have no term, and the election cases run without
/// one); it has no operation that releases a lock and takes it for the next owner, and
/// offers neither semaphores nor read-write locks: the same skips whatever the number of
/// masters.
macro_rules! redlock_conformance {
    ($factory:path, $backend:literal) => {
        distlock_conformance::conformance_tests!(
            $factory,
            backend = $backend,
            skips = [
                c08: Fencing,
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
                c44: Semaphores,
                c49: NoQueue,
                c52: Members,
                c53: Failover,
                c54: WeightedPermits,
                c55: UpgradeableReads,
            ],
            partial = [c50: Semaphores],
        );
    };
}

mod three {
    redlock_conformance!(crate::support::redlock3, "Redlock (3 masters)");
}

mod five {
    redlock_conformance!(crate::support::redlock5, "Redlock (5 masters)");
}
