//! One direction cut between a follower and its leader (the other direction flowing), with a
//! lock holder connected to that follower only and another client on the other two members.
//! Either way the follower stops passing the holder's session on to the leader, which expires
//! it a session timeout (4 s) after the cut, while the follower keeps answering the holder's
//! reads and pings for `syncLimit × tickTime` (10 s here). The holder's guard must say lost
//! before the other client gets the lock.

use crate::support;

use std::time::Duration;

use distlock_core::{LockClient, LossReason};
use distlock_testkit::ZooKeeperOptions;
use distlock_zookeeper::ZooKeeperLock;
use tokio::time::Instant;

const SESSION: Duration = Duration::from_secs(4);

/// Which way the words between the holder's follower and the leader stop.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// The follower sends to the leader but no longer hears from it.
    LeaderToFollower,
    /// The follower hears from the leader but its words no longer reach it.
    FollowerToLeader,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_on_a_follower_that_no_longer_hears_its_leader_is_lost_first() {
    holder_is_lost_before_another_client_acquires(Cut::LeaderToFollower).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_on_a_follower_whose_words_no_longer_reach_its_leader_is_lost_first() {
    holder_is_lost_before_another_client_acquires(Cut::FollowerToLeader).await;
}

async fn client(url: &str) -> LockClient {
    let config = support::config(url).with_session_timeout(SESSION).expect("valid");
    LockClient::new(ZooKeeperLock::connect(config).await.expect("connects"))
}

async fn holder_is_lost_before_another_client_acquires(cut: Cut) {
    let options = ZooKeeperOptions {
        sync_limit: 20, // 10 s with the harness's 500 ms tick, as the sample configuration's
        peer_proxies: true,
        ..ZooKeeperOptions::default()
    };
    let (ensemble, leader) = support::proxied_ensemble(options).await;
    let follower = (leader + 1) % 3;
    let url = |members: &[usize]| {
        let hosts: Vec<String> = members
            .iter()
            .map(|i| format!("127.0.0.1:{}", ensemble.node(*i).port()))
            .collect();
        format!("zk://{}", hosts.join(","))
    };
    let holder = client(&url(&[follower])).await;
    let others: Vec<usize> = (0..3).filter(|i| *i != follower).collect();
    let other = client(&url(&others)).await;
    let name = format!("one-way-{}", uuid::Uuid::new_v4().simple());

    let guard = holder.acquire(name.as_str()).await.expect("the holder acquires");
    tokio::time::sleep(SESSION / 4).await;
    assert!(!guard.is_lost() && !guard.is_suspended());
    match cut {
        Cut::LeaderToFollower => ensemble.cut_one_way(leader, follower),
        Cut::FollowerToLeader => ensemble.cut_one_way(follower, leader),
    }
    .expect("cut one way");
    let at = Instant::now();

    let race = support::race::race(&guard, &other, &name, at, SESSION * 5).await;
    println!("session timeout {SESSION:?}, {cut:?} (follower {follower}, leader {leader}): {race}");
    race.assert_lost_first();
    let (suspended_at, reason, other_guard) = (race.suspended.0, race.lost.1, race.acquired.1);
    assert_eq!(reason, Some(LossReason::SessionExpired));
    assert!(suspended_at < SESSION / 2, "suspended late: +{suspended_at:?}");
    assert!(other_guard.release().await.expect("released"));
    drop(guard);
    ensemble.heal_links().expect("healed");
}
