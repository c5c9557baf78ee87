//! A MariaDB failover under held and awaited locks: the primary is killed (its host gone: the
//! address clients know falls silent), the replica promoted and the address moved to it
//! (distlock-testkit's `MariaDbReplicated`).
//!
//! How the tokens are made decides what a failover can do to them: a fencing token is the
//! row's `version`, set by each acquisition to `max(version + 1, the server's clock in µs)`,
//! replicated with the row (no sequence, no `AUTO_INCREMENT`).
//!
//! Semi-synchronous replica (`AFTER_SYNC`): every acknowledged acquisition and renewal is on
//! the new primary, so holders keep their locks, waiters get them only after the release, and
//! tokens keep growing. An acquisition sent while the replica was cut off waits unacknowledged
//! and fails on the client; a failover then drops it, and nobody said held.
//! Asynchronous replica cut off before the kill: an acquisition the replica never received is
//! gone, and a second client acquires while the first still says held, until the first's next
//! renewal finds no row: the documented loss (docs/src/stores/mysql.md, "Failover"). Tokens
//! still grow: the new row starts at the new primary's clock, here the same machine's.
#![cfg(feature = "mysql")]

use crate::mysql_support as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Error, LockClient, LossReason};
use distlock_sql::SqlConfig;
use distlock_testkit::{MariaDbReplicated, MariaDbReplicatedOptions, MariaDbReplication};

/// Names held across the failover.
const NAMES: usize = 3;
/// Long enough to outlast the failover (a few seconds on a loaded machine) without a renewal.
const TTL: Duration = Duration::from_secs(15);
/// The clients' operation timeout.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on an operation while the primary's host is gone: the operation timeout and generous
/// slack for a loaded machine.
const BOUNDED: Duration = Duration::from_secs(5);

async fn start(replication: MariaDbReplication) -> MariaDbReplicated {
    tokio::task::spawn_blocking(move || {
        MariaDbReplicated::start_with(MariaDbReplicatedOptions {
            replication,
            ..Default::default()
        })
    })
    .await
    .expect("the starter thread")
    .expect("the pair starts (run scripts/install-test-deps to install mariadb-server)")
}

/// Runs `f` on the pair off the runtime's threads (the testkit blocks).
async fn with_pair(
    pair: MariaDbReplicated,
    f: impl FnOnce(&mut MariaDbReplicated) + Send + 'static,
) -> MariaDbReplicated {
    tokio::task::spawn_blocking(move || {
        let mut pair = pair;
        f(&mut pair);
        pair
    })
    .await
    .expect("the testkit's thread")
}

async fn failover(pair: MariaDbReplicated) -> MariaDbReplicated {
    with_pair(pair, |pair| {
        pair.failover().expect("kill -9, promote, move the front")
    })
    .await
}

async fn caught_up(pair: MariaDbReplicated) -> MariaDbReplicated {
    with_pair(pair, |pair| {
        assert!(
            pair.wait_caught_up(Duration::from_secs(20)).expect("asks"),
            "the replica never caught up"
        );
    })
    .await
}

async fn client(url: &str) -> LockClient {
    LockClient::new(
        SqlConfig::from_url(url)
            .expect("a valid URL")
            .with_operation_timeout(OPERATION_TIMEOUT)
            .build()
            .await
            .expect("connects"),
    )
}

fn name(i: usize) -> String {
    format!("failover-{i}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semi_synchronous_replica_keeps_every_lock_and_token_across_a_failover() {
    let pair = start(MariaDbReplication::SemiSynchronous).await;
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
                let opts = AcquireOptions::new().ttl(TTL).wait_for(Duration::from_secs(120));
                let got = waiter
                    .acquire_with(name(i), &opts)
                    .await
                    .expect("the waiter acquires");
                // Checked the moment the waiter won: the holder must have let go, or known
                // it lost the lock.
                let holder_says_held = !released.load(Ordering::SeqCst) && !lost.is_lost();
                (got, holder_says_held)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await; // the waiters poll

    let pair = failover(pair).await;
    // Past two renewals (every TTL/3) on the new primary.
    tokio::time::sleep(TTL * 2 / 3 + Duration::from_secs(2)).await;
    for (i, guard) in guards.iter().enumerate() {
        assert!(
            !guard.is_lost(),
            "{}: lost across a semi-synchronous failover",
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
    for guard in guards {
        assert!(guard.release().await.expect("releases"), "released by its owner");
    }
    for (i, waiting) in waiting.into_iter().enumerate() {
        let (got, holder_says_held) = waiting.await.expect("the waiter's task");
        assert!(
            !holder_says_held,
            "{}: acquired while the holder said held",
            name(i)
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
async fn a_semi_synchronous_replica_cut_off_loses_only_unacknowledged_acquisitions() {
    let pair = start(MariaDbReplication::SemiSynchronous).await;
    let url = pair.url();
    let first = client(&url).await;
    let second = client(&url).await;
    let hold = AcquireOptions::new().ttl(TTL);
    let kept = first.acquire_with("kept", &hold).await.expect("acquires");
    let kept_token = kept.fencing_token().expect("a token").get();

    let pair = with_pair(pair, |pair| pair.link().expect("a link").blackhole()).await;
    let started = Instant::now();
    let outcome = first.try_acquire_with("unacknowledged", &hold).await;
    assert!(
        started.elapsed() < BOUNDED,
        "an acquisition waited {:?} for the cut-off replica",
        started.elapsed()
    );
    assert!(
        matches!(outcome, Err(Error::Timeout { .. } | Error::Unavailable { .. })),
        "an acquisition the replica cannot acknowledge: {outcome:?}"
    );
    let pair = failover(pair).await;

    // The unacknowledged acquisition is gone with the old primary; nobody was told held.
    let fresh = second
        .try_acquire_with("unacknowledged", &hold)
        .await
        .expect("the new primary answers")
        .expect("free on the new primary");
    // The acknowledged one is kept.
    assert!(
        second
            .try_acquire_with("kept", &hold)
            .await
            .expect("the new primary answers")
            .is_none(),
        "an acknowledged lock was lost"
    );
    assert!(!kept.is_lost());
    assert!(kept.extend(TTL).await.expect("renews on the new primary"));
    let token = fresh.fencing_token().expect("a token").get();
    assert!(token > kept_token, "token {token} after {kept_token}");
    fresh.release().await.expect("releases");
    kept.release().await.expect("releases");
    drop(pair);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_replica_cut_off_loses_a_lock_acquired_meanwhile() {
    let pair = start(MariaDbReplication::Asynchronous).await;
    let url = pair.url();
    let first = client(&url).await; // creates the table
    let second = client(&url).await;
    let hold = AcquireOptions::new().ttl(TTL);
    let before = first.acquire_with("replicated", &hold).await.expect("acquires");
    let before_token = before.fencing_token().expect("a token").get();
    before.release().await.expect("releases");
    let pair = caught_up(pair).await;

    let pair = with_pair(pair, |pair| pair.link().expect("a link").blackhole()).await;
    let held = first
        .acquire_with("replicated", &hold)
        .await
        .expect("an asynchronous commit does not wait for the replica");
    let held_token = held.fencing_token().expect("a token").get();
    let pair = failover(pair).await;

    let stolen = second
        .try_acquire_with("replicated", &hold)
        .await
        .expect("the new primary answers")
        .expect("the new primary never received the first client's acquisition");
    assert!(
        !held.is_lost(),
        "the first client still says held: the documented loss"
    );
    let stolen_token = stolen.fencing_token().expect("a token").get();
    // The row the replica has is the released one, but the token starts at the new primary's
    // clock, past both old ones (the clocks agree: one machine): a resource that checks
    // tokens refuses the first client's late writes.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_end_within_their_timeout_while_the_primary_is_gone_and_work_after_the_promotion() {
    let pair = start(MariaDbReplication::SemiSynchronous).await;
    let url = pair.url();
    let lock = client(&url).await;
    let hold = AcquireOptions::new().ttl(TTL).auto_renew(false);
    // Pooled connections open to the primary.
    let guard = lock.acquire_with("dead-window", &hold).await.expect("acquires");
    let pair = with_pair(pair, |pair| pair.kill_primary().expect("kill -9")).await;
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
            matches!(outcome, Err(Error::Unavailable { .. } | Error::Timeout { .. })),
            "attempt {attempt}: {outcome:?}"
        );
    }
    let pair = with_pair(pair, |pair| {
        pair.promote_replica().expect("promoted, front moved")
    })
    .await;
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
async fn an_acquisition_that_commits_after_its_timeout_on_a_stalled_semi_synchronous_primary_is_released() {
    let pair = start(MariaDbReplication::SemiSynchronous).await;
    let url = pair.url();
    let first = client(&url).await;
    let second = client(&url).await;
    let hold = AcquireOptions::new().ttl(TTL);
    let pair = with_pair(pair, |pair| pair.link().expect("a link").blackhole()).await;
    let outcome = first.try_acquire_with("late", &hold).await;
    assert!(
        matches!(outcome, Err(Error::Timeout { .. } | Error::Unavailable { .. })),
        "an acquisition the replica cannot acknowledge: {outcome:?}"
    );
    // The statement waits on the primary for the replica's acknowledgement (max_statement_time
    // does not end that wait: only rpl_semi_sync_master_timeout does) and commits once the
    // link heals, after the client gave up.
    tokio::time::sleep(OPERATION_TIMEOUT).await;
    let healed = Instant::now();
    let pair = with_pair(pair, |pair| pair.link().expect("a link").heal()).await;
    // The owner-checked cleanup of the unknown outcome frees it long before its TTL.
    let got = second
        .acquire_with("late", &hold.clone().wait_for(TTL * 2))
        .await
        .expect("acquires");
    assert!(
        healed.elapsed() < TTL / 2,
        "the late acquisition held the lock {:?} after the heal (TTL {TTL:?})",
        healed.elapsed()
    );
    got.release().await.expect("releases");
    drop(pair);
}

/// The conformance suite's failover case (c53) on a semi-synchronous replica: the holder keeps its lock or hears
/// of its loss before another client gets it, and tokens grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c53_failover_keeps_every_acknowledged_lock() {
    let fixture = support::MySqlFixture::start(distlock_conformance::Needs::Store)
        .await
        .with_failover();
    let case = distlock_conformance::Case::named("c53").expect("the failover case");
    let outcome = distlock_conformance::run_case(case.name, Arc::new(fixture), None).await;
    assert_eq!(outcome, distlock_conformance::Outcome::Passed);
}
