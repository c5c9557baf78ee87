//! A holder through the loss of a member: the leader killed, the leader paused, the holder's
//! own member paused. The lease lives on the cluster, not on a member, so a holder that
//! reaches a surviving member in time keeps its lock across an election; a holder that can
//! reach no member is told it lost the lock before anyone else can be granted it. No second
//! holder ever. Timelines print with `--nocapture`.

use crate::faults;

use std::time::Duration;

use distlock_core::{LockClient, LockGuard};
use faults::{client, cluster, leader, timeline, wait_in_task, LIMIT, TTL};
use tokio::time::Instant;

/// Watches `guard` and a rival's `try_acquire` every 100 ms for `period`: the rival must
/// never be granted the lock and the guard never lost. Returns when the guard was last seen
/// suspended.
async fn kept_through(
    guard: &LockGuard,
    rival: &LockClient,
    since: Instant,
    period: Duration,
) -> Option<Duration> {
    let mut last_suspended = None;
    while since.elapsed() < period {
        assert!(
            !guard.is_lost(),
            "+{:?}: the holder lost its lock",
            since.elapsed()
        );
        if guard.is_suspended() {
            if last_suspended.is_none() {
                eprintln!("+{:?}: the holder's guard is suspended", since.elapsed());
            }
            last_suspended = Some(since.elapsed());
        }
        // An error (no leader yet, a member gone) is no grant.
        if let Ok(Some(second)) = rival.try_acquire("job").await {
            panic!(
                "+{:?}: a second holder while the first holds (token {:?})",
                since.elapsed(),
                second.fencing_token()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last_suspended
}

/// The holder keeps its lock across the fault `fault` made to the leader, then releases it,
/// and the rival gets it at once.
async fn kept_across_a_leader_fault(pause: bool) {
    let mut cluster = cluster(false).await;
    let old = leader(&cluster).await;
    let holder = client(&cluster, &[0, 1, 2]).await;
    let rival = client(&cluster, &[0, 1, 2]).await;
    let guard = holder.try_acquire("job").await.expect("try").expect("free");
    let token = guard.fencing_token();

    let fault = Instant::now();
    tokio::task::block_in_place(|| {
        if pause {
            cluster.node_mut(old).pause()
        } else {
            cluster.node_mut(old).kill()
        }
    })
    .expect("the leader is paused or killed");
    let new = tokio::task::block_in_place(|| cluster.wait_for_leader(LIMIT)).expect("a new leader");
    assert_ne!(new, old);
    eprintln!("+{:?}: member {new} leads", fault.elapsed());
    // Twice the lease's TTL: had the lease not survived the election, the holder would have
    // said lost and the rival been granted the lock by now.
    let suspended = kept_through(&guard, &rival, fault, TTL * 2).await;
    eprintln!("last suspended at {suspended:?}");
    assert!(!guard.is_suspended(), "the holder is connected again");
    assert_eq!(guard.fencing_token(), token);

    let released = Instant::now();
    assert!(
        guard.release().await.expect("released"),
        "the lock was still ours"
    );
    let second = rival
        .try_acquire("job")
        .await
        .expect("try")
        .expect("free once released");
    assert!(second.fencing_token() > token, "the fencing token grows");
    assert!(released.elapsed() < LIMIT);
    second.release().await.expect("released");
    if pause {
        tokio::task::block_in_place(|| cluster.node_mut(old).resume()).expect("resumed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_keeps_its_lock_when_the_leader_is_killed() {
    kept_across_a_leader_fault(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_keeps_its_lock_when_the_leader_is_paused() {
    kept_across_a_leader_fault(true).await;
}

/// The holder's only member is paused (a follower): nothing it sends is answered, so its
/// guard goes suspended, then lost before the lease can run out on the cluster; the rival, on
/// the two others, gets the lock only then. Resumed, the member serves the holder again, with
/// a new lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_member_is_paused_is_lost_before_the_rival_is_granted_the_lock() {
    let mut cluster = cluster(false).await;
    let lead = leader(&cluster).await;
    let paused = (lead + 1) % 3;
    let others: Vec<usize> = (0..3).filter(|m| *m != paused).collect();
    let holder = client(&cluster, &[paused]).await;
    let rival = client(&cluster, &others).await;
    let guard = holder.try_acquire("job").await.expect("try").expect("free");
    let token = guard.fencing_token();
    tokio::time::sleep(TTL / 3).await;

    let pause = Instant::now();
    tokio::task::block_in_place(|| cluster.node_mut(paused).pause()).expect("paused");
    let mut waiting = wait_in_task(rival, "job");
    let (seen, granted) = timeline(pause, &guard, &mut waiting).await;
    let granted = granted.expect("the rival gets the lock once the lease is gone");
    let (suspended, lost, rival) = (
        seen.suspended.expect("suspended first"),
        seen.lost.expect("then lost"),
        seen.rival.expect("the rival's wait ended"),
    );
    assert!(
        suspended < lost && lost < rival,
        "suspended, lost, then granted: {seen:?}"
    );
    assert!(
        rival >= TTL * 2 / 3 - Duration::from_millis(500),
        "not before the TTL: {seen:?}"
    );
    assert!(granted.fencing_token() > token, "the fencing token grows");

    tokio::task::block_in_place(|| cluster.node_mut(paused).resume()).expect("resumed");
    let after = holder
        .try_acquire("job")
        .await
        .expect("the resumed member answers");
    assert!(after.is_none(), "the rival holds it");
    granted.release().await.expect("released");
    let again = holder
        .acquire_with("job", &distlock_core::AcquireOptions::new().wait_for(LIMIT))
        .await
        .expect("the holder's client, on a new lease, gets it again");
    assert!(again.fencing_token() > token);
    again.release().await.expect("released");
}

/// A member down (killed: its port refuses connections) costs nothing but its share of the
/// load: a new client given every member connects, and every operation of an old or a new
/// client is answered by the survivors, never refused for the dead member's connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_is_answered_with_a_member_down() {
    let mut cluster = cluster(false).await;
    leader(&cluster).await;
    let old = client(&cluster, &[0, 1, 2]).await;
    let victim = 2;
    tokio::task::block_in_place(|| cluster.node_mut(victim).kill()).expect("killed");
    // Whichever member leads now, the two survivors are a quorum.
    tokio::task::block_in_place(|| cluster.wait_for_leader(LIMIT)).expect("a leader");
    for round in 0..10 {
        let fresh =
            distlock_etcd::EtcdLock::connect_url(&format!("{}?lease_ttl={}s", cluster.url(), TTL.as_secs()))
                .await
                .unwrap_or_else(|e| {
                    panic!("round {round}: a new client connects with member {victim} down: {e}")
                });
        let fresh = LockClient::new(fresh);
        for (who, client) in [("the new client", &fresh), ("the old client", &old)] {
            let guard = client
                .try_acquire("job")
                .await
                .unwrap_or_else(|e| panic!("round {round}: {who}'s try is answered: {e}"))
                .expect("free");
            guard
                .release()
                .await
                .unwrap_or_else(|e| panic!("round {round}: {who}'s release is answered: {e}"));
        }
    }
}
