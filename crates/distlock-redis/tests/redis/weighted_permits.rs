//! Weighted permits on a real `redis-server` (and one case on a Redis Cluster): a hold of
//! several permits counts its weight, holders of mixed weights never take more than the
//! count, a heavy waiter gets in once enough are free, and a release or a cleanup by owner
//! frees the whole hold.

use crate::support;
use crate::support::{connect, name};

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Lease, LockClient, LockKind, LockName, OwnerToken,
    Primitive, TryAcquire,
};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::shared;
use rand::Rng;

const LONG: Duration = Duration::from_secs(30);

async fn shared_url() -> String {
    tokio::task::spawn_blocking(shared::redis_url)
        .await
        .expect("joined")
        .expect("the shared redis-server starts (run scripts/install-test-deps)")
}

async fn attempt(lock: &RedisLock, name: &LockName, kind: LockKind) -> TryAcquire {
    lock.try_acquire_kind(name, kind, OwnerToken::new(), LONG, None)
        .await
        .expect("answered")
}

/// The live holds of the semaphore `name`: (owner, kind), sorted by owner.
async fn holds(lock: &RedisLock, name: &LockName) -> Vec<(String, LockKind)> {
    let mut holds: Vec<_> = lock
        .inspect_holders(name, Primitive::Semaphore)
        .await
        .expect("inspects")
        .into_iter()
        .map(|state| (state.owner.expect("a holder has an owner"), state.kind))
        .collect();
    holds.sort_by(|a, b| a.0.cmp(&b.0));
    holds
}

/// The permits the live holds of `name` take, by what inspect reports.
async fn taken(lock: &RedisLock, name: &LockName) -> u32 {
    holds(lock, name)
        .await
        .iter()
        .map(|(_, kind)| kind.weight())
        .sum()
}

/// A hold of 3 of 4 permits leaves one: 2 more are refused, 1 is granted; inspect reports
/// the hold with its weight; renewal and release by the same kind act on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_counts_its_weight() {
    let lock = connect(&shared_url().await).await;
    let sem = name("weight");
    let TryAcquire::Acquired(three) = attempt(&lock, &sem, LockKind::permits(4, 3)).await else {
        panic!("the semaphore is free");
    };
    assert!(
        matches!(
            attempt(&lock, &sem, LockKind::permits(4, 2)).await,
            TryAcquire::Held(_)
        ),
        "2 permits granted beside a hold of 3 of 4"
    );
    let TryAcquire::Acquired(one) = attempt(&lock, &sem, LockKind::permit(4)).await else {
        panic!("the fourth permit is free");
    };
    assert!(matches!(
        attempt(&lock, &sem, LockKind::permit(4)).await,
        TryAcquire::Held(_)
    ));
    let mut expected = vec![
        (three.owner().to_string(), LockKind::permits(4, 3)),
        (one.owner().to_string(), LockKind::permit(4)),
    ];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(holds(&lock, &sem).await, expected);
    assert!(lock.extend(&three, LONG).await.expect("answered").is_some());
    assert!(lock.release(&three).await.expect("answered"));
    assert_eq!(taken(&lock, &sem).await, 1);
    assert!(lock.release(&one).await.expect("answered"));
}

/// Eight tasks over four connections take 1, 2 or 3 of 5 permits, waiting, many times, and
/// hold a few milliseconds: the permits held at once never exceed 5 (counted by the tasks
/// and by inspect while they run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_weights_never_exceed_the_count_under_concurrency() {
    let url = shared_url().await;
    let mut users = Vec::new();
    for _ in 0..4 {
        users.push(LockClient::new(connect(&url).await));
    }
    let sem = name("mixed");
    let held = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(5), Duration::from_millis(200));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let semaphore = users[i % users.len()].semaphore(&sem, 5).expect("valid");
            let (held, most, opts) = (held.clone(), most.clone(), opts.clone());
            let weight = u32::try_from(i % 3).expect("small") + 1;
            tokio::spawn(async move {
                for _ in 0..6 {
                    let guard = semaphore
                        .acquire_many_with(weight, &opts)
                        .await
                        .expect("the permits in the end");
                    assert_eq!(guard.kind(), LockKind::permits(5, weight));
                    let now = held.fetch_add(weight, Ordering::SeqCst) + weight;
                    most.fetch_max(now, Ordering::SeqCst);
                    let hold = rand::rng().random_range(2..15);
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    held.fetch_sub(weight, Ordering::SeqCst);
                    assert!(guard.release().await.expect("releases"), "still ours");
                }
            })
        })
        .collect();
    let inspector = connect(&url).await;
    let mut seen = 0;
    while !tasks.iter().all(|t| t.is_finished()) {
        let now = taken(&inspector, &sem).await;
        assert!(now <= 5, "inspect shows {now} of 5 permits taken");
        seen = seen.max(now);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    for task in tasks {
        task.await.expect("joined");
    }
    let most = most.load(Ordering::SeqCst);
    println!("most permits held at once: {most} by the tasks, {seen} by inspect");
    assert!(most <= 5, "{most} of 5 permits were held at once");
    assert!(
        most >= 4,
        "the holds never came close to the count ({most}): no contention"
    );
    assert_eq!(taken(&inspector, &sem).await, 0);
}

/// A waiter for 3 of 4 permits, all held one by one: it stays out while one or two are
/// free, and gets in soon after the third is released (woken by the release; its
/// safety-net re-check is 20 s away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_three_waiter_gets_in_once_three_are_free() {
    let url = shared_url().await;
    let client = LockClient::new(connect(&url).await);
    let sem = name("heavy");
    let semaphore = client.semaphore(&sem, 4).expect("valid");
    let mut singles = Vec::new();
    for _ in 0..4 {
        singles.push(semaphore.try_acquire().await.expect("answered").expect("free"));
    }
    let opts = AcquireOptions::new()
        .ttl(LONG)
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(20));
    let waiter = LockClient::new(connect(&url).await);
    let heavy = tokio::spawn(async move {
        let guard = waiter
            .semaphore(&sem, 4)
            .expect("valid")
            .acquire_many_with(3, &opts)
            .await
            .expect("3 permits in the end");
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for free in 1..=2 {
        assert!(singles.pop().expect("held").release().await.expect("released"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!heavy.is_finished(), "the waiter for 3 got in with {free} free");
    }
    let released = Instant::now();
    assert!(singles.pop().expect("held").release().await.expect("released"));
    let (guard, at) = tokio::time::timeout(Duration::from_secs(10), heavy)
        .await
        .expect("the waiter for 3 got in")
        .expect("joined");
    let handoff = at.saturating_duration_since(released);
    assert!(
        handoff < Duration::from_secs(3),
        "the waiter for 3 was not woken by the release that freed the third: {handoff:?}"
    );
    assert_eq!(guard.kind(), LockKind::permits(4, 3));
    assert!(
        semaphore.try_acquire().await.expect("answered").is_none(),
        "3 + 1 of 4 are held"
    );
    assert!(guard.release().await.expect("released"));
    assert!(singles.pop().expect("held").release().await.expect("released"));
}

/// The release of a hold of 3 of 3 permits frees all three: three waiters for one permit
/// each all get in soon after it (their safety-net re-check is 20 s away), and nothing is
/// left held once they are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_weighted_hold_frees_all_its_permits() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let client = LockClient::new(lock.clone());
    let sem = name("release-all");
    let all = client
        .semaphore(&sem, 3)
        .expect("valid")
        .acquire_many(3)
        .await
        .expect("3 of 3");
    let opts = AcquireOptions::new()
        .ttl(LONG)
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(20));
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let user = LockClient::new(connect(&url).await);
        let (sem, opts) = (sem.clone(), opts.clone());
        waiters.push(tokio::spawn(async move {
            user.semaphore(&sem, 3)
                .expect("valid")
                .acquire_with(&opts)
                .await
                .expect("a permit in the end")
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "a waiter got in beside 3 of 3"
    );
    let released = Instant::now();
    assert!(all.release().await.expect("released"));
    let mut guards = Vec::new();
    for waiter in waiters {
        guards.push(
            tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .expect("every waiter got a permit")
                .expect("joined"),
        );
    }
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the three waiters were not all woken by the release of 3: {took:?}"
    );
    for guard in guards {
        assert!(guard.release().await.expect("released"));
    }
    assert_eq!(taken(&lock, &sem).await, 0);
}

/// A weighted attempt whose outcome is unknown (granted, its reply taken to be lost) is
/// cleaned up by owner with the attempt's kind: the whole hold goes, and the four permits
/// are free again. A renewal or release naming another weight leaves it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_weighted_attempt_cleaned_up_by_owner_frees_all_of_it() {
    let lock = connect(&shared_url().await).await;
    let sem = name("cleanup");
    let owner = OwnerToken::new();
    let kind = LockKind::permits(4, 3);
    let sent_at = tokio::time::Instant::now();
    let granted = lock
        .try_acquire_kind(&sem, kind, owner, LONG, None)
        .await
        .expect("answered");
    assert!(matches!(granted, TryAcquire::Acquired(_)));
    let lease_of = |kind| Lease::new(sem.clone(), owner, LONG, sent_at).with_kind(kind);
    assert!(lock
        .extend(&lease_of(LockKind::permit(4)), LONG)
        .await
        .expect("answered")
        .is_none());
    assert!(!lock
        .release(&lease_of(LockKind::permits(4, 2)))
        .await
        .expect("answered"));
    assert_eq!(taken(&lock, &sem).await, 3);

    assert!(
        lock.release(&lease_of(kind)).await.expect("answered"),
        "the cleanup freed it"
    );
    assert_eq!(taken(&lock, &sem).await, 0);
    let mut four = Vec::new();
    for _ in 0..4 {
        match attempt(&lock, &sem, LockKind::permit(4)).await {
            TryAcquire::Acquired(lease) => four.push(lease),
            TryAcquire::Held(holder) => panic!("a permit is still taken: {holder:?}"),
        }
    }
    for lease in &four {
        assert!(lock.release(lease).await.expect("answered"));
    }
}

/// On a Redis Cluster: a hold of 2 of 3 leaves one permit, and its release frees both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_permits_on_a_cluster() {
    let url = tokio::task::spawn_blocking(shared::redis_cluster_url)
        .await
        .expect("joined")
        .expect("the shared Redis Cluster starts (run scripts/install-test-deps)");
    let lock = connect(&url).await;
    let client = LockClient::new(lock.clone());
    let sem = name("cluster");
    let semaphore = client.semaphore(&sem, 3).expect("valid");
    let two = semaphore.acquire_many(2).await.expect("2 of 3");
    assert!(semaphore.try_acquire_many(2).await.expect("answered").is_none());
    let one = semaphore
        .try_acquire()
        .await
        .expect("answered")
        .expect("the third");
    assert_eq!(taken(&lock, &sem).await, 3);
    assert!(two.release().await.expect("released"));
    let again = semaphore
        .try_acquire_many(2)
        .await
        .expect("answered")
        .expect("2 free again");
    assert!(again.release().await.expect("released"));
    assert!(one.release().await.expect("released"));
    assert_eq!(taken(&lock, &sem).await, 0);
}

/// A weight of zero or above the permits is a typed error, and nothing is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_of_zero_or_above_the_permits_is_invalid() {
    let lock = connect(&shared_url().await).await;
    let sem = name("bad-weight");
    for kind in [LockKind::permits(3, 0), LockKind::permits(3, 4)] {
        let outcome = lock
            .try_acquire_kind(&sem, kind, OwnerToken::new(), LONG, None)
            .await;
        assert!(
            matches!(outcome, Err(distlock_core::Error::InvalidOptions { .. })),
            "{kind:?}: {outcome:?}"
        );
    }
    assert_eq!(taken(&lock, &sem).await, 0);
}

/// Through a proxy that drops every reply: an attempt at 3 of 4 permits runs on the server but
/// its grant never comes back, so its outcome is unknown and the client cleans it up by owner
/// with the attempt's kind. The whole hold goes: once the replies flow again, the four
/// permits are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_attempt_whose_reply_is_lost_is_cleaned_up_whole() {
    let server = support::start_server().await;
    let proxy = distlock_testkit::FaultProxy::start(server.addr()).expect("the proxy starts");
    let through = RedisConfig::from_url(&format!("redis://{}", proxy.host_port()))
        .expect("valid")
        .with_operation_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connects");
    let direct = connect(&server.url()).await;
    let sem = name("lost-grant");
    let semaphore = LockClient::new(through).semaphore(&sem, 4).expect("valid");
    // The server learns the scripts first (a fresh one would answer NOSCRIPT, not run it).
    let first = semaphore.acquire().await.expect("a permit");
    assert!(first.release().await.expect("released"));
    proxy.drop_replies();
    let outcome = semaphore
        .acquire_many_with(3, &AcquireOptions::new().ttl(LONG).no_wait())
        .await;
    assert!(outcome.is_err(), "a grant whose reply was dropped: {outcome:?}");
    proxy.heal();
    // The grant ran on the server: it drew a fencing token from the semaphore's state hash
    // (`{<name>}` `0xFF` `semaphore-state:` `<name>`).
    let state = [
        b"{".as_slice(),
        sem.as_str().as_bytes(),
        b"}\xFFsemaphore-state:",
        sem.as_str().as_bytes(),
    ]
    .concat();
    let mut raw = support::raw(&server.url()).await.expect("raw");
    let fence: Option<u64> = redis::cmd("HGET")
        .arg(&state)
        .arg("fence")
        .query_async(&mut raw)
        .await
        .expect("HGET");
    assert_eq!(fence, Some(2), "the attempt never ran on the server");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = taken(&direct, &sem).await;
        if now == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{now} permits are still taken 10 s after the attempt whose outcome was unknown"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let again = semaphore
        .acquire_many_with(
            4,
            &AcquireOptions::new().ttl(LONG).wait_for(Duration::from_secs(5)),
        )
        .await
        .expect("all four permits are free");
    assert!(again.release().await.expect("released"));
}
