//! Steps of the server's wall clock (libfaketime): Redis expires keys by it. A step back keeps
//! a lock nobody renews or releases (a crashed holder's) for the step plus its TTL; the step
//! forward again frees it. (A held lock under both: conformance case c51.)

mod support;

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, LockName, OwnerToken, TryAcquire};
use distlock_testkit::{RedisOptions, RedisServer, StoreClock};

const TTL: Duration = Duration::from_secs(2);
const STEP_SECS: i64 = 30;

async fn tries(lock: &dyn DistributedLock, name: &LockName) -> TryAcquire {
    lock.try_acquire(name, OwnerToken::new(), TTL)
        .await
        .expect("the server answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_back_keeps_a_crashed_holders_lock_for_the_step() {
    let (server, clock) = tokio::task::spawn_blocking(|| {
        let clock = StoreClock::new().expect("libfaketime is installed (run scripts/install-test-deps)");
        let server = RedisServer::start_with(RedisOptions {
            clock: Some(clock.clone()),
            ..RedisOptions::default()
        })
        .expect("redis-server starts (run scripts/install-test-deps)");
        (server, clock)
    })
    .await
    .expect("joined");
    let (crashed, other) = (
        support::lock_at(&server.url()).await,
        support::lock_at(&server.url()).await,
    );
    let name = LockName::new("clock-step-back").expect("valid");
    // The holder takes the lock and then never renews nor releases it: it crashed.
    assert!(matches!(tries(&crashed, &name).await, TryAcquire::Acquired(_)));
    clock.jump(-STEP_SECS).expect("step back");
    tokio::time::sleep(TTL * 2).await;
    assert!(
        matches!(tries(&other, &name).await, TryAcquire::Held(_)),
        "twice its TTL after a crash, the lock should still be taken: the step back lengthened it"
    );
    clock.jump(0).expect("step forward to the true time");
    assert!(
        matches!(tries(&other, &name).await, TryAcquire::Acquired(_)),
        "back at the true time, the crashed holder's lock is past its TTL and free"
    );
}
