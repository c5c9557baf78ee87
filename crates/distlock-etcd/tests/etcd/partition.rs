//! A holder whose member is partitioned from the others (through the testkit's links between
//! members, clients untouched): its guard must say suspended, then lost, before the majority
//! can grant the lock to a client of its own, and the majority grants it only once the
//! holder's lease has run out. Timelines print with `--nocapture`.

use crate::faults;

use std::time::Duration;

use faults::{client, cluster, leader, timeline, wait_in_task, TTL};
use tokio::time::Instant;

/// How the holder's member is cut off from the others.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// A follower, both ways.
    Follower,
    /// The leader, both ways.
    Leader,
    /// A follower that still reaches the leader but hears nothing from it (one way only).
    FollowerDeafToLeader,
}

/// The holder on member `alone` only, a rival on the two others; `alone` is cut off.
async fn holder_cut_off_with_its_member(how: Cut) {
    let cluster = cluster(true).await;
    let lead = leader(&cluster).await;
    let alone = match how {
        Cut::Leader => lead,
        Cut::Follower | Cut::FollowerDeafToLeader => (lead + 1) % 3,
    };
    let majority: Vec<usize> = (0..3).filter(|m| *m != alone).collect();
    let holder = client(&cluster, &[alone]).await;
    let rival = client(&cluster, &majority).await;
    let guard = holder.try_acquire("job").await.expect("try").expect("free");
    let token = guard.fencing_token();
    // A keep-alive confirmed now: the lease is renewed at most a third of its TTL ago at the
    // cut.
    tokio::time::sleep(TTL / 3).await;

    let cut = Instant::now();
    match how {
        Cut::Follower | Cut::Leader => cluster.isolate(alone),
        Cut::FollowerDeafToLeader => cluster.cut_one_way(lead, alone),
    }
    .expect("cut the holder's member off");
    let mut waiting = wait_in_task(rival, "job");
    let (seen, granted) = timeline(cut, &guard, &mut waiting).await;
    let granted = granted.expect("the majority's client gets the lock once the lease is gone");
    let (suspended, lost, rival) = (
        seen.suspended.expect("suspended first"),
        seen.lost.expect("then lost"),
        seen.rival.expect("the rival's wait ended"),
    );
    assert!(suspended < lost, "suspended before lost: {seen:?}");
    assert!(
        lost < rival,
        "the holder knew it lost the lock before the rival got it: {seen:?}"
    );
    assert!(lost <= TTL, "the holder knew within the lease's TTL: {seen:?}");
    // The lease was renewed at most TTL/3 (and a keep-alive's round trip) before the cut, and
    // a new leader even extends it: the majority cannot expire it sooner.
    let earliest = TTL * 2 / 3 - Duration::from_millis(500);
    assert!(
        rival >= earliest,
        "granted only after the lease's TTL (not before {earliest:?}): {seen:?}"
    );
    assert!(granted.fencing_token() > token, "the fencing token grows");

    cluster.heal_links().expect("heal");
    granted.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_a_follower_cut_off_is_lost_before_the_majority_grants_the_lock() {
    holder_cut_off_with_its_member(Cut::Follower).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_the_leader_cut_off_is_lost_before_the_majority_grants_the_lock() {
    holder_cut_off_with_its_member(Cut::Leader).await;
}

/// The holder's member still sends to the leader (a keep-alive it forwards may renew the
/// lease there) but hears nothing back: the holder gets no keep-alive confirmed and says lost
/// first, and the lease, renewed at most by keep-alives it sent, ends on the cluster later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_a_follower_deaf_to_its_leader_is_lost_before_the_majority_grants_the_lock() {
    holder_cut_off_with_its_member(Cut::FollowerDeafToLeader).await;
}
