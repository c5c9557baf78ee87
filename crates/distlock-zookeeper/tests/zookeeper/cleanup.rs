//! The background cleanup of a node we no longer want stops on a permanent error: a waiter
//! that gives up under a parent whose ACL refuses `delete` (`NoAuth`) must not retry forever;
//! and a refused node does not keep the cleanup from the nodes after it.

use crate::support;

use std::time::Duration;

use distlock_core::{
    Attempt, DistributedLock, DistributedLockExt, LockKind, LockName, OwnerToken, TryAcquire,
};
use distlock_testkit::proxy::through_proxies;
use support::ZkFixture;
use zookeeper_client as zk;

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_stops_on_a_permanent_error() {
    let fixture = ZkFixture::shared().await;
    let (proxied_url, faults) = through_proxies(fixture.url()).expect("the fault proxy starts");
    let waiter = support::connect(&proxied_url).await;
    let holder = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = LockName::new(format!("cleanup-noauth-{}", uuid::Uuid::new_v4().simple())).expect("valid");

    // The lock's parent lets anyone create children but not delete them.
    let parent = waiter.lock_path(&name);
    let root = waiter.config().root().to_owned();
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match raw.mkdir(&root, &open).await {
        Ok(()) | Err(zk::Error::NodeExists) => {}
        Err(e) => panic!("creating {root}: {e}"),
    }
    let no_delete = [zk::Acl::new(
        zk::Permission::READ | zk::Permission::WRITE | zk::Permission::CREATE | zk::Permission::ADMIN,
        zk::AuthId::new("world", "anyone"),
    )];
    raw.create(
        &parent,
        &[],
        &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&no_delete)),
    )
    .await
    .expect("the parent is created");

    let held = holder
        .try_acquire(&name, OwnerToken::new(), TTL)
        .await
        .expect("attempt");
    assert!(matches!(held, TryAcquire::Acquired(_)));
    // The waiter queues, then gives up: its node is to be deleted in the background, and the
    // server refuses with NoAuth.
    let waited = tokio::time::timeout(
        Duration::from_millis(500),
        waiter.wait_queued(&Attempt::mutex(name.clone(), OwnerToken::new(), TTL), None),
    )
    .await;
    assert!(waited.is_err(), "the waiter was still waiting");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = faults.traffic().to_server;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sent = faults.traffic().to_server - before;
    println!("bytes sent to the server in the 3 s after a refused cleanup: {sent}");
    // Session pings alone are a few dozen bytes a second; a delete retried every 200 ms is
    // about 1.5 kB in 3 s.
    assert!(
        sent < 600,
        "the cleanup kept retrying a permanent error: {sent} bytes in 3 s"
    );

    drop(waiter);
    drop(holder);
    faults.heal();
    // Once both sessions are gone their nodes are, and the parent can go.
    for _ in 0..50 {
        match raw.delete(&parent, None).await {
            Ok(()) | Err(zk::Error::NoNode) => break,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// A dropped wait for a permit deletes its lease, then its node in the semaphore's `locks`
/// queue. When the server refuses to delete the lease (`NoAuth`: the `leases` node's ACL
/// forbids `delete`), the `locks` node must go all the same, or every later acquirer of the
/// semaphore waits behind it until the waiter's session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_lease_cleanup_still_deletes_the_locks_node() {
    let fixture = ZkFixture::shared().await;
    let holder = support::connect(fixture.url()).await;
    let waiter = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = LockName::new(format!("cleanup-chain-{}", uuid::Uuid::new_v4().simple())).expect("valid");
    let kind = LockKind::Permit {
        permits: 1,
        weight: 1,
    };

    // The semaphore's `leases` node lets anyone create children but not delete them.
    let semaphore = waiter.semaphore_path(&name);
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    raw.mkdir(&semaphore, &open)
        .await
        .expect("the semaphore's node is created");
    let no_delete = [zk::Acl::new(
        zk::Permission::READ | zk::Permission::WRITE | zk::Permission::CREATE | zk::Permission::ADMIN,
        zk::AuthId::new("world", "anyone"),
    )];
    let leases = format!("{semaphore}/leases");
    raw.create(
        &leases,
        &[],
        &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&no_delete)),
    )
    .await
    .expect("the leases node is created");

    let held = holder
        .try_acquire_kind(&name, kind, OwnerToken::new(), TTL, None)
        .await
        .expect("attempt");
    assert!(matches!(held, TryAcquire::Acquired(_)), "the only permit is free");
    // The waiter takes the `locks` mutex, adds its lease, finds the semaphore full and waits;
    // then it gives up.
    let owner = OwnerToken::new();
    let waited = tokio::time::timeout(
        Duration::from_millis(800),
        waiter.wait_queued(&Attempt::new(name.clone(), kind, owner, TTL), None),
    )
    .await;
    assert!(waited.is_err(), "the waiter was still waiting");

    let locks = format!("{semaphore}/locks");
    let ours = |children: &[String]| children.iter().any(|c| c.contains(&owner.to_string()));
    let mut left = true;
    for _ in 0..50 {
        raw.sync(&locks).await.expect("synced");
        left = ours(&raw.list_children(&locks).await.expect("listed"));
        if !left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !left,
        "the waiter's node in `locks` is still there 5 s after the lease's cleanup was refused: \
         the next acquirer waits behind it until the session ends"
    );

    drop(waiter);
    drop(holder);
    for _ in 0..50 {
        match raw.delete(&leases, None).await {
            Ok(()) | Err(zk::Error::NoNode) => break,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// A dropped queued acquisition whose `create` reply was lost is cleaned up by its owner's
/// prefix after a reconnection, and the member reconnected to may lag behind the leader.
/// Timeline: the waiter's `create` reaches the leader, its reply is lost, and the wait is
/// dropped; the create commits 5 s later (the followers' acknowledgements are slow); the
/// client reconnects to a follower whose link from the leader runs 5 s late, so that
/// follower has not applied the create when the cleanup lists the queue. The cleanup must
/// still find and delete the node (a `sync` first), not leave it for the whole session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_after_a_reconnection_to_a_lagging_follower_finds_the_node() {
    use distlock_testkit::{Direction, FaultProxy, ZooKeeperOptions};
    const LAG: Duration = Duration::from_secs(5);

    let options = ZooKeeperOptions {
        sync_limit: 20,
        peer_proxies: true,
        ..ZooKeeperOptions::default()
    };
    let (ensemble, leader) = support::proxied_ensemble(options).await;
    let (acking, lagging) = ((leader + 1) % 3, (leader + 2) % 3);
    let direct = |i: usize| format!("zk://127.0.0.1:{}", ensemble.node(i).port());
    let to_leader = FaultProxy::start(ensemble.node(leader).addr()).expect("a proxy");
    let to_lagging = FaultProxy::start(ensemble.node(lagging).addr()).expect("a proxy");
    to_lagging.refuse(true); // the waiter's session starts on the leader
    let config = support::config(&format!(
        "zk://{},{}",
        to_leader.host_port(),
        to_lagging.host_port()
    ))
    .with_session_timeout(Duration::from_secs(30))
    .and_then(|c| c.with_operation_timeout(Duration::from_secs(20)))
    .expect("valid");
    let waiter = distlock_zookeeper::ZooKeeperLock::connect(config)
        .await
        .expect("the waiter connects");
    let holder = support::connect(&direct(leader)).await;
    let raw = support::raw(&direct(leader)).await;
    let name = LockName::new(format!("cleanup-lag-{}", uuid::Uuid::new_v4().simple())).expect("valid");
    let held = holder
        .try_acquire(&name, OwnerToken::new(), TTL)
        .await
        .expect("attempt");
    assert!(matches!(held, TryAcquire::Acquired(_)));
    // Every member has applied all of that before the faults begin.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let link = |from: usize| ensemble.peer_link(from, leader).expect("proxied links");
    link(acking)
        .quorum()
        .set_latency(Direction::ToServer, LAG, Duration::ZERO);
    link(lagging)
        .quorum()
        .set_latency(Direction::ToClient, LAG, Duration::ZERO);
    to_leader.drop_replies();
    let owner = OwnerToken::new();
    let waited = tokio::time::timeout(
        Duration::from_millis(800),
        waiter.wait_queued(&Attempt::mutex(name.clone(), owner, TTL), None),
    )
    .await;
    assert!(waited.is_err(), "the waiter's create got no reply");
    // The connection to the leader breaks; the driver moves to the lagging follower.
    to_leader.refuse(true);
    to_leader.reset();
    to_lagging.refuse(false);
    tokio::time::sleep(LAG * 2 + Duration::from_secs(2)).await;
    link(acking).heal();
    link(lagging).heal();

    let parent = holder.lock_path(&name);
    let mut left = Vec::new();
    for _ in 0..100 {
        raw.sync(&parent).await.expect("synced");
        left = raw.list_children(&parent).await.expect("listed");
        left.retain(|c| c.contains(&owner.to_string()));
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        left.is_empty(),
        "the dropped waiter's node {left:?} is still there: the cleanup listed the queue on a \
         follower that had not applied its create yet"
    );
    assert!(waiter.session_id().is_some(), "the waiter's session lives on");
    drop((waiter, to_lagging, to_leader));
}
