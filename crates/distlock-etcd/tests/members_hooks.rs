//! The conformance hooks of `support/members.rs` on real etcd clusters: clients pinned to
//! chosen members, a member isolated and healed, the leader failed over.

#[path = "support/members.rs"]
mod members;

use std::time::Duration;

use distlock_conformance::{Failover, Members};
use distlock_core::{AcquireOptions, LockClient};
use members::{EtcdFailover, EtcdMembers, MEMBERS_LEASE_TTL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_pins_clients_isolates_and_heals() {
    let members = EtcdMembers::start().await.expect("the cluster starts");
    assert_eq!(members.count(), 3);
    let leader = members.leader().await.expect("a leader");
    let cut = (leader + 1) % 3;
    let rest: Vec<usize> = (0..3).filter(|m| *m != cut).collect();
    let alone = LockClient::from_arc(members.client(&[cut]).await.expect("pinned"));
    let majority = LockClient::from_arc(members.client(&rest).await.expect("pinned"));
    assert!(members.client(&[3]).await.is_err(), "no member 3");

    members.isolate(cut).await.expect("isolated");
    // Past an election timeout the cut-off member has no leader: it commits nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let refused = alone.try_acquire("cut").await;
    assert!(
        !matches!(refused, Ok(Some(_))),
        "a member cut off from the others granted a lock"
    );
    let guard = majority
        .try_acquire("majority")
        .await
        .expect("the majority serves")
        .expect("free");
    guard.release().await.expect("released");

    members.heal().await.expect("healed");
    let opts = AcquireOptions::new().wait_for(MEMBERS_LEASE_TTL * 10);
    let guard = loop {
        // The healed member may need a moment to rejoin; its first answers may be errors.
        match alone.acquire_with("healed", &opts).await {
            Ok(guard) => break guard,
            Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("the healed member serves again: {e}"),
        }
    };
    guard.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_kills_the_leader_and_the_lock_is_kept() {
    let store = EtcdFailover::start().await.expect("the cluster starts");
    assert!(store.ttl() >= MEMBERS_LEASE_TTL);
    let holder = LockClient::from_arc(store.backend().await.expect("a client"));
    let guard = holder.try_acquire("kept").await.expect("try").expect("free");
    store
        .fail_over()
        .await
        .expect("the leader is killed and another elected");
    let other = LockClient::from_arc(store.backend().await.expect("a client of the survivors"));
    let opts = AcquireOptions::new().wait_for(store.ttl());
    // Not granted while the holder keeps its lease.
    let attempt = tokio::time::timeout(MEMBERS_LEASE_TTL * 2, other.acquire_with("kept", &opts)).await;
    assert!(
        attempt.is_err() || attempt.as_ref().is_ok_and(Result::is_err),
        "a second holder: {attempt:?}"
    );
    assert!(!guard.is_lost(), "the holder kept its lock across the failover");
    assert!(guard.release().await.expect("released"), "still ours");
}
