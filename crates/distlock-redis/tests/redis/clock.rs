//! Steps of the server's wall clock (libfaketime): Redis expires keys by it. A step back keeps
//! a lock nobody renews or releases (a crashed holder's) for the step plus its TTL; the step
//! forward again frees it. (A held lock under both: conformance case c51.)

use crate::support;

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

/// Redlock's holder of a bare majority (one master was still taken by a leftover key when it
/// acquired) loses the lock to one master's forward step: the step expires its key there, and
/// the master the leftover freed and the stepped one make another client's majority while the
/// holder's lease is still valid. One clock fault, not two (Kleppmann's scenario needs a crash
/// or a partition besides because his holder held every master).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_holder_of_a_bare_majority_loses_to_one_masters_forward_step() {
    let (servers, clock) = tokio::task::spawn_blocking(|| {
        let clock = StoreClock::new().expect("libfaketime is installed (run scripts/install-test-deps)");
        let servers: Vec<RedisServer> = (0..3)
            .map(|i| {
                RedisServer::start_with(RedisOptions {
                    clock: (i == 1).then(|| clock.clone()),
                    ..RedisOptions::default()
                })
                .expect("redis-server starts (run scripts/install-test-deps)")
            })
            .collect();
        (servers, clock)
    })
    .await
    .expect("joined");
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let (holder, other) = (support::redlock_at(&urls).await, support::redlock_at(&urls).await);
    let name = LockName::new("redlock-bare-majority").expect("valid");
    let ttl = Duration::from_secs(10);
    // A leftover on master 0 (a failed attempt's key, a crashed holder's) that runs out soon.
    let mut raw = support::raw(&urls[0]).await.expect("connects");
    let _: () = redis::cmd("SET")
        .arg(name.as_str())
        .arg("leftover")
        .arg("PX")
        .arg(1000)
        .query_async(&mut raw)
        .await
        .expect("SET");
    let lease = match holder
        .try_acquire(&name, OwnerToken::new(), ttl)
        .await
        .expect("answers")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("masters 1 and 2 are free: a majority, but {h:?}"),
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    clock.jump(60).expect("master 1 steps forward");
    let taken = other
        .try_acquire(&name, OwnerToken::new(), ttl)
        .await
        .expect("answers");
    let holder_valid = lease.remaining().is_some_and(|left| !left.is_zero());
    clock.jump(0).expect("back");
    assert!(
        matches!(taken, TryAcquire::Acquired(_)) && holder_valid,
        "expected the loss (another client's majority of masters 0 and 1 while the holder's lease is valid), got {taken:?}, holder valid: {holder_valid}"
    );
}
