//! Round trips per operation on PostgreSQL, counted by time through a proxy that delays every
//! request by [`DELAY`]: an operation of one round trip takes one delay (plus local work), of
//! two at least two. With one pooled connection, a ping or any other exchange after an
//! operation would also delay the next one. Acquire (won or held), release, extend,
//! hand-over, `extend_many`, and an attempt at a permit or the write lock must each be one
//! round trip; so must a waiter's attempt (won or held, queueing it), a release that wakes the
//! first queued waiter, and a waiter leaving the queue when its watch is dropped, while a
//! watch costs none once the client listens.
#![cfg(feature = "postgres")]

use std::future::Future;
use std::time::{Duration, Instant};

use distlock_core::{
    Attempt, DistributedLock, DistributedLockExt, Lease, LockKind, LockName, OwnerToken, Primitive,
    TryAcquire, Woke,
};
use distlock_sql::SqlConfig;
use distlock_testkit::Direction;

use crate::postgres_support as support;

/// Added to every request on its way to the server.
const DELAY: Duration = Duration::from_millis(300);

fn won(outcome: TryAcquire) -> Lease {
    match outcome {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("held: {h:?}"),
    }
}

/// How many delayed round trips `op` took, and its result.
async fn round_trips<T>(op: impl Future<Output = T>) -> (T, u32) {
    let started = Instant::now();
    let out = op.await;
    let took = started.elapsed();
    let trips = u32::try_from(took.as_nanos() / DELAY.as_nanos()).unwrap_or(u32::MAX);
    (out, trips)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_round_trip_per_operation() {
    let url = support::shared_url().await;
    let (proxied, proxies) = distlock_testkit::proxy::through_proxies(&url).expect("a proxy");
    let lock = SqlConfig::from_url(&proxied)
        .expect("a valid URL")
        .with_max_connections(1)
        .with_operation_timeout(Duration::from_secs(10))
        .build()
        .await
        .expect("the server answers");
    let ttl = Duration::from_secs(30);
    let name = LockName::new("pg-round-trips").expect("valid");
    let sem = LockName::new("pg-round-trips-permits").expect("valid");
    let permit = LockKind::Permit {
        permits: 1,
        weight: 1,
    };

    // Warm up: every statement once (prepared and cached on the connection).
    let a = won(lock
        .try_acquire(&name, OwnerToken::new(), ttl)
        .await
        .expect("works"));
    assert!(matches!(
        lock.try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("works"),
        TryAcquire::Held(_)
    ));
    lock.extend(&a, ttl).await.expect("works");
    let a = lock
        .hand_over(&a, OwnerToken::new(), ttl)
        .await
        .expect("works")
        .expect("ours");
    lock.renew(std::slice::from_ref(&a)).await;
    assert!(lock.release(&a).await.expect("works"));
    let p = won(lock
        .try_acquire_kind(&sem, permit, OwnerToken::new(), ttl, None)
        .await
        .expect("works"));
    lock.extend(&p, ttl).await.expect("works");
    assert!(lock.release(&p).await.expect("works"));
    lock.withdraw(&sem, LockKind::Write, "warm").await.expect("works");
    lock.inspect_holders(&sem, Primitive::Semaphore)
        .await
        .expect("works");
    let queued = LockName::new("pg-round-trips-queued").expect("valid");
    let stay = Duration::from_secs(30);
    let q = won(lock
        .try_acquire(&queued, OwnerToken::new(), ttl)
        .await
        .expect("works"));
    let warm = lock.watch(&queued, Primitive::Mutex).await.expect("listens");
    let warm_id = warm.waiter().expect("one waiter").clone();
    let _ = lock
        .attempt(&Attempt::mutex(queued.clone(), OwnerToken::new(), ttl).waiting(&warm_id, stay))
        .await
        .expect("works");
    assert!(lock.release(&q).await.expect("works"));
    let q = won(lock
        .attempt(&Attempt::mutex(queued.clone(), OwnerToken::new(), ttl).waiting(&warm_id, stay))
        .await
        .expect("works"));
    drop(warm);
    let admin = sqlx::PgPool::connect(&url).await.expect("connects");
    let gone = lock.watch(&queued, Primitive::Mutex).await.expect("listens");
    let gone_id = gone.waiter().expect("one waiter").clone();
    let _ = lock
        .attempt(&Attempt::mutex(queued.clone(), OwnerToken::new(), ttl).waiting(&gone_id, stay))
        .await
        .expect("works");
    drop(gone);
    while entries(&admin, &gone_id).await > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    proxies.set_latency(Direction::ToServer, DELAY, Duration::ZERO);
    let mut counts = Vec::new();
    let (a, n) = round_trips(lock.try_acquire(&name, OwnerToken::new(), ttl)).await;
    let a = won(a.expect("works"));
    counts.push(("acquire", n));
    let (held, n) = round_trips(lock.try_acquire(&name, OwnerToken::new(), ttl)).await;
    assert!(matches!(held.expect("works"), TryAcquire::Held(_)));
    counts.push(("acquire (held)", n));
    let (extended, n) = round_trips(lock.extend(&a, ttl)).await;
    assert!(extended.expect("works").is_some());
    counts.push(("extend", n));
    let (handed, n) = round_trips(lock.hand_over(&a, OwnerToken::new(), ttl)).await;
    let a = handed.expect("works").expect("ours");
    counts.push(("hand_over", n));
    let (p, n) = round_trips(lock.try_acquire_kind(&sem, permit, OwnerToken::new(), ttl, None)).await;
    let p = won(p.expect("works"));
    counts.push(("permit acquire", n));
    let (full, n) = round_trips(lock.try_acquire_kind(&sem, permit, OwnerToken::new(), ttl, None)).await;
    assert!(matches!(full.expect("works"), TryAcquire::Held(_)));
    counts.push(("permit acquire (full)", n));
    let (renewed, n) = round_trips(lock.renew(&[a.clone(), p.clone()])).await;
    assert!(renewed.iter().all(|r| matches!(r, Ok(Some(_)))), "{renewed:?}");
    counts.push(("extend_many (a mutex and a permit)", n));
    let (released, n) = round_trips(lock.release(&p)).await;
    assert!(released.expect("works"));
    counts.push(("permit release", n));
    let (released, n) = round_trips(lock.release(&a)).await;
    assert!(released.expect("works"));
    counts.push(("release", n));

    // Waiting: `q` holds `queued`.
    let (watch, n) = round_trips(lock.watch(&queued, Primitive::Mutex)).await;
    let mut watch = watch.expect("listens");
    counts.push(("watch (listening)", n));
    let id = watch.waiter().expect("one waiter").clone();
    let (held, n) =
        round_trips(lock.attempt(&Attempt::mutex(queued.clone(), OwnerToken::new(), ttl).waiting(&id, stay)))
            .await;
    assert!(matches!(held.expect("works"), TryAcquire::Held(_)));
    counts.push(("waiter's attempt (held, queued)", n));
    let (released, n) = round_trips(lock.release(&q)).await;
    assert!(released.expect("works"));
    counts.push(("release (waking the first waiter)", n));
    assert_eq!(watch.wait(Duration::from_secs(5)).await, Woke::Released);
    let (q, n) =
        round_trips(lock.attempt(&Attempt::mutex(queued.clone(), OwnerToken::new(), ttl).waiting(&id, stay)))
            .await;
    let q = won(q.expect("works"));
    counts.push(("waiter's attempt (won, leaving the queue)", n));
    drop(watch);
    let other = lock.watch(&queued, Primitive::Mutex).await.expect("listens");
    let other_id = other.waiter().expect("one waiter").clone();
    let _ = lock
        .attempt(&Attempt::mutex(queued.clone(), OwnerToken::new(), ttl).waiting(&other_id, stay))
        .await
        .expect("works");
    let ((), n) = round_trips(async {
        drop(other);
        // The leave runs in the background; the admin's reads go around the proxy.
        while entries(&admin, &other_id).await > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    counts.push(("a queued waiter's dropped watch (its leave)", n));
    assert!(lock.release(&q).await.expect("works"));
    admin.close().await;
    println!("round trips per operation: {counts:?}");
    for (what, n) in counts {
        let expected = if what.starts_with("watch") { 0 } else { 1 };
        assert_eq!(n, expected, "{what}: {n} round trips");
    }
}

/// The queue entries of the waiter `id`.
async fn entries(admin: &sqlx::PgPool, id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM distlock_locks_waiters WHERE waiter = $1")
        .bind(id)
        .fetch_one(admin)
        .await
        .expect("counts")
}
