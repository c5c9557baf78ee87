//! A follower that hears its leader late (every word from the leader delayed 300 ms, the
//! other way flowing) still answers its clients' reads from what it has applied so far. A
//! lock released through the leader is free from that moment: a client on the lagging
//! follower must be able to take it (mutex, read-write lock, semaphore), and must not see its
//! former holder when it asks who holds it. Without a `sync` before the first listing, the
//! follower's stale listing still shows the released node and the client is told "held".
//! Each round holds long enough for the follower to have applied the hold, then releases and
//! asks on the follower at once.

use crate::support;

use std::time::Duration;

use distlock_core::{LockClient, LockName, Primitive};
use distlock_testkit::ZooKeeperOptions;
use distlock_zookeeper::ZooKeeperLock;

const LAG: Duration = Duration::from_millis(300);
/// Long, so that the session's heartbeat (a `sync` every twelfth of it, which orders the
/// session's next reads after it) is rarely in flight when a round starts.
const SESSION: Duration = Duration::from_secs(24);
/// Rounds per primitive (each showed the stale read without the `sync`).
const ROUNDS: usize = 2;

/// Lets the follower apply what the leader did so far (the hold), so that only the release
/// that follows is still on its way to it.
async fn settle() {
    tokio::time::sleep(LAG * 3).await;
}

async fn client(url: &str) -> LockClient {
    let config = support::config(url).with_session_timeout(SESSION).expect("valid");
    LockClient::new(ZooKeeperLock::connect(config).await.expect("connects"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_released_through_the_leader_is_free_on_a_lagging_follower() {
    let options = ZooKeeperOptions {
        peer_proxies: true,
        ..ZooKeeperOptions::default()
    };
    let (ensemble, leader) = support::proxied_ensemble(options).await;
    let follower = (leader + 1) % 3;
    let url = |member: usize| format!("zk://127.0.0.1:{}", ensemble.node(member).port());
    let on_leader = client(&url(leader)).await;
    let on_follower = client(&url(follower)).await;
    ensemble
        .delay_one_way(leader, follower, LAG)
        .expect("the leader's words reach the follower late");
    let id = uuid::Uuid::new_v4().simple().to_string();

    for round in 0..ROUNDS {
        // Mutex: taken and released through the leader, then asked for on the follower.
        let name = format!("lag-mutex-{id}-{round}");
        let guard = on_leader
            .try_acquire(name.as_str())
            .await
            .expect("works")
            .expect("free");
        settle().await;
        assert!(guard.release().await.expect("released"), "still ours at release");
        let state = on_follower
            .backend()
            .inspect(&LockName::new(&name).expect("valid"), Primitive::Mutex)
            .await
            .expect("inspects");
        assert!(
            state.holders.is_empty(),
            "the follower reports the released lock as held: {state:?}"
        );
        let taken = on_follower.try_acquire(name.as_str()).await.expect("works");
        assert!(
            taken.is_some(),
            "a lock released before the attempt began was reported held by the lagging follower"
        );
        drop(taken);

        // Read-write lock: a writer through the leader, then a reader on the follower.
        let rw_name = format!("lag-rw-{id}-{round}");
        let writer = on_leader.rw_lock(rw_name.as_str()).expect("valid");
        let guard = writer.try_write().await.expect("works").expect("free");
        settle().await;
        assert!(guard.release().await.expect("released"));
        let reader = on_follower.rw_lock(rw_name.as_str()).expect("valid");
        assert!(
            reader.holders().await.expect("lists").is_empty(),
            "the follower lists the released writer"
        );
        let read = reader.try_read().await.expect("works");
        assert!(read.is_some(), "the released write lock was reported held");
        drop(read);

        // Semaphore of one permit: taken and given back through the leader.
        let sem_name = format!("lag-sem-{id}-{round}");
        let permit = on_leader
            .semaphore(sem_name.as_str(), 1)
            .expect("valid")
            .try_acquire()
            .await
            .expect("works")
            .expect("free");
        settle().await;
        assert!(permit.release().await.expect("released"));
        let semaphore = on_follower.semaphore(sem_name.as_str(), 1).expect("valid");
        assert!(
            semaphore.holders().await.expect("lists").is_empty(),
            "the follower lists the released permit"
        );
        let taken = semaphore.try_acquire().await.expect("works");
        assert!(taken.is_some(), "the released permit was reported taken");
        drop(taken);
    }
    ensemble.heal_links().expect("healed");
}
