//! Mutual exclusion under contention, and many independent locks at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::AcquireOptions;
use futures::future::join_all;

use super::{within, Outcome, LONG_TTL};
use crate::Ctx;

const CLIENTS: usize = 8;
const ROUNDS: usize = 25;
const MANY: usize = 500;
/// The shortest TTL case c10 holds its locks with.
const MANY_TTL: Duration = Duration::from_secs(3);

/// Case 9: Mutual exclusion under contention: 8 clients x 25 rounds of a non-atomic
/// read-sleep-write on a shared counter; the final count is exact and no overlap is seen.
pub async fn c09_mutual_exclusion_under_contention(ctx: Ctx) -> Outcome {
    let name = ctx.name("counter");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(2), Duration::from_millis(50));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..CLIENTS {
        let client = ctx.client().await;
        let (name, counter, inside, overlaps, opts) = (
            name.clone(),
            counter.clone(),
            inside.clone(),
            overlaps.clone(),
            opts.clone(),
        );
        workers.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = client
                    .acquire_with(&name, &opts)
                    .await
                    .expect("acquired within the wait");
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let read = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                counter.store(read + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                assert!(
                    guard.release().await.expect("release works"),
                    "released a lock we did not own"
                );
            }
        }));
    }
    within(Duration::from_secs(240), "all rounds finish", async {
        for worker in workers {
            worker.await.expect("a worker panicked");
        }
    })
    .await;
    let total = (CLIENTS * ROUNDS) as u64;
    ctx.note(format!("{total} contended rounds in {:?}", started.elapsed()));
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders were inside at once"
    );
    assert_eq!(
        counter.load(Ordering::SeqCst),
        total,
        "lost updates: exclusion broken"
    );
    Outcome::Passed
}

/// Case 10: Different names never block each other: one client holds 500 locks at once with the
/// watchdog, all renewed past their TTL, all released, nothing left behind in the store.
///
/// The TTL is [`MANY_TTL`] at least: the case is about many names, and with 1 s its renewals
/// (a round per third of the TTL, each answer bounded by half of it on Redlock's five
/// masters: 7,500 scripts a second) made it a test of the machine's scheduling, where a client
/// starved beside other tests rightly lost its locks.
pub async fn c10_many_locks_at_once(ctx: Ctx) -> Outcome {
    let client = ctx.client().await;
    let ttl = ctx.short_ttl().max(MANY_TTL);
    let opts = AcquireOptions::new().ttl(ttl).no_wait();
    let names: Vec<_> = (0..MANY).map(|i| ctx.name(&format!("many-{i}"))).collect();
    let guards = within(
        Duration::from_secs(60),
        "500 acquisitions",
        join_all(names.iter().map(|name| client.acquire_with(name, &opts))),
    )
    .await;
    let guards: Vec<_> = guards
        .into_iter()
        .map(|g| g.expect("different names never block each other"))
        .collect();
    assert_eq!(
        ctx.fixture().held_count(ctx.prefix()).await.expect("counts"),
        MANY
    );
    // Hold past twice the TTL: only renewals keep them.
    tokio::time::sleep(ttl * 5 / 2).await;
    assert!(guards.iter().all(|g| !g.is_lost()), "a renewal failed");
    assert_eq!(
        ctx.fixture().held_count(ctx.prefix()).await.expect("counts"),
        MANY,
        "some locks lapsed despite the watchdog"
    );
    let released = within(
        Duration::from_secs(60),
        "500 releases",
        join_all(guards.into_iter().map(|g| g.release())),
    )
    .await;
    assert!(
        released.into_iter().all(|r| r.expect("release works")),
        "a lock was not ours at release"
    );
    assert_eq!(
        ctx.fixture().held_count(ctx.prefix()).await.expect("counts"),
        0,
        "locks left behind"
    );
    Outcome::Passed
}
