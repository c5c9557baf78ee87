//! What semaphore permits and read-write holds share with the mutex: the lost-lock signal
//! when a hold is destroyed behind its holder's back, and waits that leave nothing behind
//! when dropped.

use std::time::Duration;

use distlock_core::{AcquireOptions, Expiry, Lease, LockGuard, LockKind, Primitive};

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// Case 39: For a permit, a read hold and the write hold: destroying the hold behind the
/// guard's back (an owner-checked release by someone who learned its owner token) fires the
/// guard's lost signal within a bounded time, and its own release then reports not owned.
pub async fn c39_lost_signal_for_each_primitive(ctx: Ctx) -> Outcome {
    let caps = ctx.caps().clone();
    if !caps.offers(Primitive::Semaphore) && !caps.offers(Primitive::RwLock) {
        return ctx.skip(
            Reason::Primitives,
            "the backend has neither semaphores nor read-write locks",
        );
    }
    let ttl = ctx.short_ttl();
    let raw = ctx.backend().await;
    let client = ctx.client().await;
    let opts = AcquireOptions::new().ttl(ttl);
    let mut guards: Vec<(&str, LockGuard)> = Vec::new();
    if caps.offers(Primitive::Semaphore) {
        let semaphore = client.semaphore(ctx.name("lost-permit"), 2).expect("semaphores");
        guards.push(("a permit", semaphore.acquire_with(&opts).await.expect("a permit")));
    }
    if caps.offers(Primitive::RwLock) {
        let rw = client.rw_lock(ctx.name("lost-read")).expect("rw locks");
        guards.push(("a read hold", rw.read_with(&opts).await.expect("a read lock")));
        let rw = client.rw_lock(ctx.name("lost-write")).expect("rw locks");
        guards.push((
            "the write hold",
            rw.write_with(&opts).await.expect("the write lock"),
        ));
    }
    let limit = match caps.expiry {
        Expiry::Ttl => ttl * 3 + Duration::from_secs(5),
        _ => Duration::from_secs(30),
    };
    for (what, guard) in guards {
        let signal = guard.lost_signal();
        let lease = guard.lease();
        let behind = Lease::new(
            lease.name().clone(),
            lease.owner(),
            lease.ttl(),
            tokio::time::Instant::now(),
        )
        .with_kind(lease.kind());
        assert!(
            raw.release(&behind).await.expect("works"),
            "{what}: the hold was there to destroy"
        );
        within(limit, &format!("{what}: the lost signal fires"), signal.lost()).await;
        assert!(guard.is_lost());
        assert!(
            !guard.release().await.expect("works"),
            "{what}: a release after the loss reports not owned"
        );
    }
    Outcome::Passed
}

/// Case 40: Waits dropped mid-way leave nothing behind: a dropped wait for a permit of a full
/// semaphore takes no permit; a dropped writer's wait no longer keeps readers out; a dropped
/// reader's wait takes no read hold, so a writer gets in.
pub async fn c40_cancelled_waits_leave_nothing(ctx: Ctx) -> Outcome {
    let caps = ctx.caps().clone();
    if !caps.offers(Primitive::Semaphore) && !caps.offers(Primitive::RwLock) {
        return ctx.skip(
            Reason::Primitives,
            "the backend has neither semaphores nor read-write locks",
        );
    }
    let (holder, waiter) = (ctx.client().await, ctx.client().await);
    let wait = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50));
    if caps.offers(Primitive::Semaphore) {
        let name = ctx.name("cancel-permit");
        let held = holder
            .semaphore(&name, 1)
            .expect("semaphores")
            .acquire()
            .await
            .expect("the permit");
        let semaphore = waiter.semaphore(&name, 1).expect("semaphores");
        let dropped = {
            let (semaphore, wait) = (semaphore.clone(), wait.clone());
            tokio::spawn(async move { semaphore.acquire_with(&wait).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        dropped.abort();
        let _ = dropped.await;
        assert!(held.release().await.expect("works"));
        let again = within(
            Duration::from_secs(10),
            "the permit is free after a dropped wait",
            async {
                loop {
                    if let Some(guard) = holder
                        .semaphore(&name, 1)
                        .expect("semaphores")
                        .try_acquire()
                        .await
                        .expect("works")
                    {
                        return guard;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        )
        .await;
        assert_eq!(
            again.kind(),
            LockKind::Permit {
                permits: 1,
                weight: 1
            }
        );
        assert!(again.release().await.expect("works"));
    }
    if caps.offers(Primitive::RwLock) {
        let name = ctx.name("cancel-rw");
        let reader = holder
            .rw_lock(&name)
            .expect("rw locks")
            .read()
            .await
            .expect("a reader");
        let rw = waiter.rw_lock(&name).expect("rw locks");
        let dropped = {
            // Pauses of up to 5 s: its record would outlive 5 s; only its withdrawal frees
            // readers sooner.
            let slow = wait
                .clone()
                .poll_interval(Duration::from_millis(5), Duration::from_secs(5));
            let rw = rw.clone();
            tokio::spawn(async move { rw.write_with(&slow).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        dropped.abort();
        let _ = dropped.await;
        let second = within(
            Duration::from_secs(3),
            "a reader gets in after a dropped writer's wait",
            async {
                loop {
                    if let Some(guard) = holder
                        .rw_lock(&name)
                        .expect("rw locks")
                        .try_read()
                        .await
                        .expect("works")
                    {
                        return guard;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        )
        .await;
        assert!(second.release().await.expect("works"));
        assert!(reader.release().await.expect("works"));

        let writer = holder
            .rw_lock(&name)
            .expect("rw locks")
            .write()
            .await
            .expect("the writer");
        let dropped = {
            let (rw, wait) = (rw.clone(), wait.clone());
            tokio::spawn(async move { rw.read_with(&wait).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        dropped.abort();
        let _ = dropped.await;
        assert!(writer.release().await.expect("works"));
        let again = within(
            Duration::from_secs(10),
            "the writer gets in after a dropped reader's wait",
            async {
                loop {
                    if let Some(guard) = holder
                        .rw_lock(&name)
                        .expect("rw locks")
                        .try_write()
                        .await
                        .expect("works")
                    {
                        return guard;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        )
        .await;
        assert!(again.release().await.expect("works"));
    }
    Outcome::Passed
}
