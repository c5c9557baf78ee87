//! A 3-node ensemble on loopback: locks keep working with one node down (a follower, then the
//! leader); with two down, operations fail cleanly and held guards are declared lost once the
//! session timeout has passed; after the restart work resumes, and no lock was granted to a
//! second holder before the first had been told it lost it.

mod support;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient, LossReason};
use distlock_testkit::ZooKeeperEnsemble;
use distlock_zookeeper::ZooKeeperLock;

const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

type Shared = Arc<Mutex<ZooKeeperEnsemble>>;

async fn with_ensemble<T: Send + 'static>(
    ensemble: &Shared,
    f: impl FnOnce(&mut ZooKeeperEnsemble) -> T + Send + 'static,
) -> T {
    let ensemble = ensemble.clone();
    tokio::task::spawn_blocking(move || f(&mut ensemble.lock().unwrap_or_else(PoisonError::into_inner)))
        .await
        .expect("joined")
}

async fn client(url: &str) -> LockClient {
    let config = support::config(url)
        .with_session_timeout(SESSION_TIMEOUT)
        .expect("valid");
    LockClient::new(ZooKeeperLock::connect(config).await.expect("connects"))
}

/// Retries `attempt` until it succeeds (the ensemble may be electing a leader).
async fn eventually<T, E: std::fmt::Display, Fut: Future<Output = Result<T, E>>>(
    what: &str,
    limit: Duration,
    mut attempt: impl FnMut() -> Fut,
) -> T {
    let started = Instant::now();
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(error) if started.elapsed() < limit => {
                println!("{what}: retrying after {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("{what}: still failing after {limit:?}: {error}"),
        }
    }
}

/// One round of work on a name nobody else uses: acquire, check exclusion, release.
async fn work(a: &LockClient, b: &LockClient, name: &str) {
    let guard = eventually(name, Duration::from_secs(30), || async {
        a.try_acquire(name)
            .await?
            .ok_or(distlock_core::Error::invalid_name("held"))
    })
    .await;
    let probe = eventually("probe", Duration::from_secs(30), || b.try_acquire(name)).await;
    assert!(probe.is_none(), "{name}: granted twice");
    assert!(guard.release().await.expect("released"), "{name}: still ours");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_survives_one_node_and_fails_cleanly_without_quorum() {
    let ensemble = tokio::task::spawn_blocking(ZooKeeperEnsemble::start)
        .await
        .expect("joined")
        .expect("the ensemble starts");
    let url = ensemble.url();
    let ensemble: Shared = Arc::new(Mutex::new(ensemble));
    let (a, b) = (client(&url).await, client(&url).await);
    let held = a.acquire("ensemble-held").await.expect("acquired");
    let first_token = held.fencing_token().expect("fencing token");

    // One follower down, then back.
    let follower = with_ensemble(&ensemble, |e| {
        let leader = e.wait_for_leader(Duration::from_secs(30)).expect("a leader");
        let follower = (leader + 1) % 3;
        e.node_mut(follower).kill().expect("killed");
        follower
    })
    .await;
    work(&a, &b, "ensemble-follower-down").await;
    with_ensemble(&ensemble, move |e| {
        e.node_mut(follower).restart().expect("restarted")
    })
    .await;

    // The leader down: an election, then work goes on in the same sessions.
    let leader = with_ensemble(&ensemble, |e| {
        let leader = e.wait_for_leader(Duration::from_secs(30)).expect("a leader");
        e.node_mut(leader).kill().expect("killed");
        leader
    })
    .await;
    let killed_at = Instant::now();
    work(&a, &b, "ensemble-leader-down").await;
    println!(
        "work resumed {:?} after the leader was killed",
        killed_at.elapsed()
    );
    tokio::time::timeout(SESSION_TIMEOUT, async {
        while held.is_suspended() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the holder's session reconnects");
    assert!(!held.is_lost(), "one node down must not lose a lock");
    assert!(b.try_acquire("ensemble-held").await.expect("works").is_none());

    // A contender queued behind the holder, retrying through the outage.
    let c = client(&url).await;
    let contender = tokio::spawn(async move {
        let opts = AcquireOptions::new().wait_for(Duration::from_secs(30));
        let guard = eventually("take over", Duration::from_secs(120), || {
            c.acquire_with("ensemble-held", &opts)
        })
        .await;
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A second node down: no quorum.
    let second = with_ensemble(&ensemble, move |e| {
        let second = (0..3)
            .find(|i| *i != leader && e.node(*i).process().is_running())
            .expect("a live node");
        e.node_mut(second).kill().expect("killed");
        second
    })
    .await;
    let quorum_lost_at = Instant::now();
    let started = Instant::now();
    let attempt = b.try_acquire("ensemble-no-quorum").await;
    println!(
        "without quorum: {:?} after {:?}",
        attempt.as_ref().map(Option::is_some),
        started.elapsed()
    );
    let error = attempt.expect_err("no quorum, no lock");
    assert!(error.is_transient(), "a clean Unavailable error, got {error}");
    assert!(started.elapsed() < support::OPERATION_TIMEOUT + Duration::from_secs(2));

    let reason = tokio::time::timeout(SESSION_TIMEOUT * 4, held.lost())
        .await
        .expect("the guard reports the loss");
    let lost_at = Instant::now();
    let after = lost_at - quorum_lost_at;
    println!("holder lost {after:?} after quorum loss: {reason}");
    assert_eq!(reason, LossReason::SessionExpired);
    // A safety margin (a tenth) before the server can expire the session, counted from the
    // last contact (at most one heartbeat, a twelfth, before the quorum was lost).
    assert!(
        after >= SESSION_TIMEOUT - SESSION_TIMEOUT / 10 - SESSION_TIMEOUT / 12 - Duration::from_millis(300),
        "declared lost too early: {after:?}"
    );

    // Both back: work resumes, and the old holder's lock goes to a new holder only after the
    // old holder was told, with a higher fencing token.
    with_ensemble(&ensemble, move |e| {
        e.node_mut(leader).restart().expect("restarted");
        e.node_mut(second).restart().expect("restarted");
        e.wait_for_leader(Duration::from_secs(30)).expect("a leader");
    })
    .await;
    let (taken_at, taken) = tokio::time::timeout(Duration::from_secs(120), contender)
        .await
        .expect("the contender takes over")
        .expect("joined");
    println!(
        "taken over {:?} after the holder was told it lost the lock",
        taken_at - lost_at
    );
    assert!(
        taken_at > lost_at,
        "granted to the contender before the holder knew it lost it"
    );
    assert!(taken.fencing_token() > Some(first_token), "fencing went back");
    assert!(taken.release().await.expect("released"));
    work(&a, &b, "ensemble-after").await;
    drop(held);
}
