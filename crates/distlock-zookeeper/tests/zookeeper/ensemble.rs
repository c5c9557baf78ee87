//! A 3-node ensemble on loopback: locks keep working with one node down (a follower, then the
//! leader); with two down, operations fail cleanly and held guards are declared lost once the
//! session timeout has passed; after the restart work resumes, and no lock was granted to a
//! second holder before the first had been told it lost it. Also: a holder on a follower cut
//! off from the other members (which still answers its reads) is lost before anyone else gets
//! the lock.

use crate::support;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient, LossReason};
use distlock_testkit::{ZooKeeperEnsemble, ZooKeeperOptions};
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

async fn client(url: &str, session_timeout: Duration) -> LockClient {
    let config = support::config(url)
        .with_session_timeout(session_timeout)
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
    let (a, b) = (
        client(&url, SESSION_TIMEOUT).await,
        client(&url, SESSION_TIMEOUT).await,
    );
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
    let c = client(&url, SESSION_TIMEOUT).await;
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

/// A holder connected to a follower that is cut off from the other two members (every link
/// between them black-holed; the holder's own connection to the follower intact). Timeline:
/// the follower keeps answering the holder's reads and pings for `syncLimit × tickTime` (10 s
/// here) after its last word from the leader, but no longer passes the session's activity on;
/// the leader expires the session about a session timeout (4 s) after the cut, and another
/// client, on the two members that still form a quorum, takes the lock. The holder's guard
/// must say lost before that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_on_a_follower_cut_off_from_its_leader_is_lost_before_another_client_acquires() {
    const SESSION: Duration = Duration::from_secs(4);
    let options = ZooKeeperOptions {
        sync_limit: 20, // 10 s with the harness's 500 ms tick, as the sample configuration's
        peer_proxies: true,
        ..ZooKeeperOptions::default()
    };
    let (ensemble, leader) = support::proxied_ensemble(options).await;
    let follower = (leader + 1) % 3;
    let majority: Vec<String> = (0..3)
        .filter(|i| *i != follower)
        .map(|i| format!("127.0.0.1:{}", ensemble.node(i).port()))
        .collect();
    let holder = client(
        &format!("zk://127.0.0.1:{}", ensemble.node(follower).port()),
        SESSION,
    )
    .await;
    let other = client(&format!("zk://{}", majority.join(",")), SESSION).await;
    let name = format!("follower-cut-{}", uuid::Uuid::new_v4().simple());

    let guard = holder.acquire(name.as_str()).await.expect("the holder acquires");
    // A while of ordinary traffic (heartbeats) before the cut.
    tokio::time::sleep(SESSION / 4).await;
    assert!(!guard.is_lost() && !guard.is_suspended());
    ensemble.cut_off(follower).expect("the follower is cut off");
    let cut = Instant::now();

    let race = support::race::race(
        &guard,
        &other,
        &name,
        tokio::time::Instant::from_std(cut),
        SESSION * 5,
    )
    .await;
    println!("session timeout {SESSION:?}, follower {follower} cut off (leader {leader}): {race}");
    race.assert_lost_first();
    let (suspended_at, suspension) = race.suspended;
    let reason = race.lost.1;
    let other_guard = race.acquired.1;
    assert_eq!(reason, Some(LossReason::SessionExpired));
    assert_eq!(
        suspension,
        Some(LossReason::SessionSuspended),
        "suspended before it was lost"
    );
    assert!(suspended_at < SESSION / 2, "suspended late: +{suspended_at:?}");
    assert!(other_guard.release().await.expect("released"));
    drop(guard);
    ensemble.heal_links().expect("healed");
}
