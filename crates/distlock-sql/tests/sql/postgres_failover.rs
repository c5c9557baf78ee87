//! A PostgreSQL failover under held and awaited locks: the primary is killed (its host gone:
//! the address clients know answers nothing), the streaming standby promoted and the address
//! moved to it (distlock-testkit's `PostgresReplicated`).
//!
//! Synchronous standby: every acknowledged acquisition and renewal is on the new primary, so
//! holders keep their locks, waiters get them only after the release, and fencing tokens keep
//! growing (a token is the row's `version`, replicated with the row; no sequence is involved).
//! Asynchronous standby cut off before the kill: an acquisition the standby never received is
//! gone, and a second client acquires the lock while the first still says held, until the
//! first's next renewal finds no row: the documented loss (docs/src/stores/postgres.md,
//! "Failover").
#![cfg(feature = "postgres")]

use crate::postgres_support as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient, LossReason};
use distlock_sql::SqlConfig;
use distlock_testkit::{PostgresReplicated, PostgresReplicatedOptions, Replication};

/// Names held across the failover.
const NAMES: usize = 3;
/// Long enough to outlast the failover (a few seconds on a loaded machine) without a renewal.
const TTL: Duration = Duration::from_secs(15);
/// Waiters poll this rarely: only a release notification wakes them within [`PROMPT`].
const LONG_POLL: Duration = Duration::from_secs(30);
/// Generous: a waiter is woken by the release's notification within milliseconds.
const PROMPT: Duration = Duration::from_secs(8);

async fn start(replication: Replication) -> PostgresReplicated {
    tokio::task::spawn_blocking(move || {
        PostgresReplicated::start_with(PostgresReplicatedOptions {
            replication,
            ..Default::default()
        })
    })
    .await
    .expect("the starter thread")
    .expect("the pair starts (run scripts/install-test-deps to install postgresql)")
}

/// Kills the primary, promotes the standby and moves the front, off the runtime's threads.
async fn failover(pair: PostgresReplicated) -> PostgresReplicated {
    tokio::task::spawn_blocking(move || {
        let mut pair = pair;
        pair.failover().expect("kill -9, promote, move the front");
        pair
    })
    .await
    .expect("the failover thread")
}

async fn client(url: &str) -> LockClient {
    LockClient::new(
        SqlConfig::from_url(url)
            .expect("a valid URL")
            .with_operation_timeout(Duration::from_secs(2))
            .build()
            .await
            .expect("connects"),
    )
}

fn name(i: usize) -> String {
    format!("failover-{i}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_standby_keeps_every_lock_and_token_across_a_failover() {
    let pair = start(Replication::Synchronous).await;
    let url = pair.url();
    let holder = client(&url).await;
    let waiter = Arc::new(client(&url).await);
    let hold = AcquireOptions::new().ttl(TTL);
    let mut guards = Vec::new();
    for i in 0..NAMES {
        guards.push(holder.acquire_with(name(i), &hold).await.expect("acquires"));
    }
    let released = Arc::new(AtomicBool::new(false));
    let waiting: Vec<_> = guards
        .iter()
        .enumerate()
        .map(|(i, guard)| {
            let (waiter, released, lost) = (waiter.clone(), released.clone(), guard.lost_signal());
            tokio::spawn(async move {
                let opts = AcquireOptions::new()
                    .ttl(TTL)
                    .wait_for(Duration::from_secs(120))
                    .poll_interval(LONG_POLL, LONG_POLL);
                let got = waiter
                    .acquire_with(name(i), &opts)
                    .await
                    .expect("the waiter acquires");
                // Checked the moment the waiter won: the holder must have let go, or known
                // it lost the lock.
                let holder_says_held = !released.load(Ordering::SeqCst) && !lost.is_lost();
                (got, holder_says_held, Instant::now())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await; // the waiters queue

    let pair = failover(pair).await;
    // Past two renewals (every TTL/3) on the new primary.
    tokio::time::sleep(TTL * 2 / 3 + Duration::from_secs(2)).await;
    for (i, guard) in guards.iter().enumerate() {
        assert!(
            !guard.is_lost(),
            "{}: lost across a synchronous failover",
            name(i)
        );
        assert!(
            guard.extend(TTL).await.expect("renews on the new primary"),
            "{}: the new primary has the holder's row",
            name(i)
        );
    }
    assert!(
        waiting.iter().all(|w| !w.is_finished()),
        "a waiter acquired a lock its holder still held"
    );

    let tokens: Vec<u64> = guards
        .iter()
        .map(|g| g.fencing_token().expect("a token").get())
        .collect();
    released.store(true, Ordering::SeqCst);
    let released_at = Instant::now();
    for guard in guards {
        assert!(guard.release().await.expect("releases"), "released by its owner");
    }
    for (i, waiting) in waiting.into_iter().enumerate() {
        let (got, holder_says_held, at) = waiting.await.expect("the waiter's task");
        assert!(
            !holder_says_held,
            "{}: acquired while the holder said held",
            name(i)
        );
        assert!(
            at - released_at < PROMPT,
            "{}: the waiter took {:?} after the release (its notifications did not follow the failover)",
            name(i),
            at - released_at
        );
        let token = got.fencing_token().expect("a token").get();
        assert!(
            token > tokens[i],
            "{}: token {token} after {}",
            name(i),
            tokens[i]
        );
        got.release().await.expect("releases");
    }
    let fresh = holder
        .acquire_with("failover-fresh", &hold)
        .await
        .expect("acquires");
    let token = fresh.fencing_token().expect("a token").get();
    assert!(
        tokens.iter().all(|t| token > *t),
        "a fresh name's token {token} after {tokens:?}"
    );
    drop(pair);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_standby_cut_off_loses_a_lock_acquired_meanwhile() {
    let pair = start(Replication::Asynchronous).await;
    let url = pair.url();
    let first = client(&url).await; // creates the tables
    let second = client(&url).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while pair.standby_lag().expect("reads the lag") != Some(0) {
        assert!(Instant::now() < deadline, "the standby never caught up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = first
        .acquire_with("replicated", &AcquireOptions::new().ttl(TTL))
        .await
        .expect("acquires");
    let before_token = before.fencing_token().expect("a token").get();
    before.release().await.expect("releases");
    while pair.standby_lag().expect("reads the lag") != Some(0) {
        assert!(Instant::now() < deadline, "the standby never caught up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    pair.link().blackhole();
    let held = first
        .acquire_with("replicated", &AcquireOptions::new().ttl(TTL))
        .await
        .expect("an asynchronous commit does not wait for the standby");
    let held_token = held.fencing_token().expect("a token").get();
    let pair = failover(pair).await;

    let stolen = second
        .try_acquire_with("replicated", &AcquireOptions::new().ttl(TTL))
        .await
        .expect("the new primary answers")
        .expect("the new primary never received the first client's acquisition");
    assert!(
        !held.is_lost(),
        "the first client still says held: the documented loss"
    );
    let stolen_token = stolen.fencing_token().expect("a token").get();
    // The row is gone, but the token starts at the new primary's clock, past both old ones:
    // a resource that checks tokens refuses the first client's late writes.
    assert!(
        stolen_token > held_token && held_token > before_token,
        "tokens {before_token}, {held_token}, then {stolen_token}"
    );
    // The first client learns at its next renewal.
    let reason = tokio::time::timeout(TTL, held.lost())
        .await
        .expect("the loss is reported");
    assert_eq!(reason, LossReason::NotOwned);
    stolen.release().await.expect("releases");
    drop(pair);
}

/// Bound on an operation while the primary's host is gone: the operation timeout (2 s) and
/// generous slack for a loaded machine.
const BOUNDED: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_end_within_their_timeout_while_the_primary_is_gone_and_work_after_the_promotion() {
    let pair = start(Replication::Synchronous).await;
    let url = pair.url();
    let lock = client(&url).await;
    let hold = AcquireOptions::new().ttl(TTL).auto_renew(false);
    // Pooled connections open to the primary.
    let guard = lock.acquire_with("dead-window", &hold).await.expect("acquires");
    let mut pair = tokio::task::spawn_blocking(move || {
        let mut pair = pair;
        pair.kill_primary().expect("kill -9");
        pair
    })
    .await
    .expect("the killer thread");
    for attempt in 0..3 {
        let started = Instant::now();
        let outcome = lock
            .try_acquire_with(format!("dead-window-{attempt}"), &hold)
            .await;
        assert!(
            started.elapsed() < BOUNDED,
            "attempt {attempt} took {:?} with the primary gone: {outcome:?}",
            started.elapsed()
        );
        assert!(
            matches!(outcome, Err(distlock_core::Error::Unavailable { .. })),
            "attempt {attempt}: {outcome:?}"
        );
    }
    let pair = tokio::task::spawn_blocking(move || {
        pair.promote_standby().expect("promoted, front moved");
        pair
    })
    .await
    .expect("the promoter thread");
    let started = Instant::now();
    assert!(guard.extend(TTL).await.expect("renews on the new primary"));
    let fresh = lock
        .try_acquire_with("dead-window-after", &hold)
        .await
        .expect("acquires")
        .expect("free");
    assert!(
        started.elapsed() < BOUNDED,
        "the first operations after the promotion took {:?}",
        started.elapsed()
    );
    fresh.release().await.expect("releases");
    guard.release().await.expect("releases");
    drop(pair);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_refuses_writes_as_unavailable() {
    let pair = start(Replication::Asynchronous).await;
    // The primary's client creates the tables; the standby receives them.
    let primary = client(&pair.url()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while pair.standby_lag().expect("reads the lag") != Some(0) {
        assert!(Instant::now() < deadline, "the standby never caught up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let standby_url = pair.standby().expect("a standby").url();
    let built = SqlConfig::from_url(&standby_url)
        .expect("a valid URL")
        .with_operation_timeout(Duration::from_secs(2))
        .build()
        .await;
    let lock = match built {
        Ok(lock) => LockClient::new(lock),
        Err(e) => {
            assert!(
                matches!(e, distlock_core::Error::Unavailable { .. }),
                "building a client on a standby: {e:?}"
            );
            return;
        }
    };
    let outcome = lock
        .try_acquire_with("on-standby", &AcquireOptions::new().ttl(TTL))
        .await;
    assert!(
        matches!(outcome, Err(distlock_core::Error::Unavailable { .. })),
        "acquiring on a standby: {outcome:?}"
    );
    drop(primary);
}

/// The conformance suite's failover case (c53) on a synchronous standby: the holder keeps its lock or hears
/// of its loss before another client gets it, and tokens grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c53_failover_keeps_every_acknowledged_lock() {
    let fixture = support::PostgresFixture::start(distlock_conformance::Needs::Store)
        .await
        .with_failover();
    let case = distlock_conformance::Case::named("c53").expect("the failover case");
    let outcome = distlock_conformance::run_case(case.name, Arc::new(fixture), None).await;
    assert_eq!(outcome, distlock_conformance::Outcome::Passed);
}
