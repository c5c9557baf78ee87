//! The conformance suite against Redlock over 3 and over 5 real `redis-server`s.

mod support;

// Redlock's masters each keep their own counter, so it issues no fencing tokens; it has no
// operation that releases a lock and takes it for the next owner, and offers neither
// semaphores nor read-write locks.
mod three {
    distlock_conformance::conformance_tests!(
        crate::support::redlock3,
        backend = "Redlock (3 masters)",
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
        ],
        partial = [c50: Semaphores],
    );
}

mod five {
    distlock_conformance::conformance_tests!(
        crate::support::redlock5,
        backend = "Redlock (5 masters)",
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
        ],
        partial = [c50: Semaphores],
    );
}
