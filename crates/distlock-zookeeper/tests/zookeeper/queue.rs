//! The queue against the shared standalone server: FIFO order with one wake-up per release,
//! the node layout, and interoperation with other recipes' nodes on the same parent.

use crate::support;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockName, OwnerToken, TryAcquire,
};
use support::ZkFixture;
use zookeeper_client as zk;

const WAITERS: usize = 50;

fn unique(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("zk-{label}-{}", &run[..12])).expect("valid")
}

/// 50 waiters queue behind a holder; each release wakes exactly one of them (its successor's
/// predecessor watch), and they acquire in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_fifo_one_wakeup_per_release() {
    let fixture = ZkFixture::shared().await;
    let name = unique("fifo");
    let holder = LockClient::new(support::connect(fixture.url()).await);
    let guard = holder.acquire(&name).await.expect("acquired");

    let backend = support::connect(fixture.url()).await;
    let waiters = LockClient::new(backend.clone());
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let (client, lock, order, stats) = (waiters.clone(), name.clone(), order.clone(), backend.clone());
        tasks.push(tokio::spawn(async move {
            let opts = AcquireOptions::new().wait_for(Duration::from_secs(120));
            let guard = client
                .acquire_with(&lock, &opts)
                .await
                .expect("the waiter acquires");
            let wakes = stats.stats().watch_events;
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((i, wakes));
            tokio::time::sleep(Duration::from_millis(2)).await;
            assert!(guard.release().await.expect("released"));
        }));
        // Arrival order: the next waiter starts once this one's node is in the queue.
        tokio::time::timeout(Duration::from_secs(10), async {
            while fixture.contenders(&name).await.expect("listed").len() < i + 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the waiter joins the queue");
    }
    // The last waiter's node exists before its listing returns: wait for that listing.
    tokio::time::timeout(Duration::from_secs(10), async {
        while backend.stats().children_listings < WAITERS as u64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("every waiter lists the queue once");
    let before = backend.stats();
    assert_eq!(before.watch_events, 0, "no waiter woke while the holder held");
    assert_eq!(
        before.children_listings, WAITERS as u64,
        "one listing per waiter to get in line"
    );

    assert!(guard.release().await.expect("released"));
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("all waiters finish")
            .expect("no waiter panicked");
    }
    let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let arrival: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        arrival,
        (0..WAITERS).collect::<Vec<_>>(),
        "served in arrival order"
    );
    for (position, (i, wakes)) in order.iter().enumerate() {
        assert_eq!(
            *wakes,
            position as u64 + 1,
            "waiter {i}: each release must wake exactly one waiter"
        );
    }
    let after = backend.stats();
    println!(
        "{WAITERS} waiters: {} watch events, {} children listings",
        after.watch_events, after.children_listings
    );
    assert_eq!(
        after.watch_events, WAITERS as u64,
        "one wake-up per release, no herd"
    );
    assert_eq!(
        after.children_listings,
        2 * WAITERS as u64,
        "one listing to get in line and one per wake-up"
    );
    assert!(fixture.contenders(&name).await.expect("listed").is_empty());
}

/// The documented layout: `<root>/<encoded name>/_c_<uuid>-lock-<10 digits>`, a container
/// parent, the owner token as data, the czxid as fencing token; `inspect` reads it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_layout_and_inspect() {
    let fixture = ZkFixture::shared().await;
    let backend = support::connect(fixture.url()).await;
    let name = LockName::new(format!("{} with/slash ✓", unique("layout"))).expect("valid");
    let owner = OwnerToken::new();
    let TryAcquire::Acquired(lease) = backend
        .try_acquire(&name, owner, Duration::from_secs(1))
        .await
        .expect("works")
    else {
        panic!("a fresh name is free");
    };
    let parent = backend.lock_path(&name);
    assert!(parent.starts_with("/distlock/zk-layout-"), "{parent}");
    assert!(parent.ends_with("%20with%2Fslash%20%E2%9C%93"), "{parent}");
    let path = lease.handle().expect("the node path").to_owned();
    let child = path
        .strip_prefix(&format!("{parent}/"))
        .expect("under the parent");
    let (guid, sequence) = child
        .strip_prefix("_c_")
        .and_then(|rest| rest.split_once("-lock-"))
        .expect("Curator's protected name");
    assert!(uuid::Uuid::parse_str(guid).is_ok(), "{guid}");
    assert_eq!(sequence.len(), 10);

    let raw = support::raw(fixture.url()).await;
    let (data, stat) = raw.get_data(&path).await.expect("the node exists");
    assert_eq!(String::from_utf8(data).expect("utf-8"), owner.to_string());
    assert_eq!(Some(stat.czxid as u64), lease.fencing_token().map(|t| t.get()));
    assert_ne!(stat.ephemeral_owner, 0, "ephemeral");

    let state = backend.inspect_lock(&name).await.expect("inspects");
    assert_eq!(state.owner, Some(owner.to_string()));
    assert_eq!(state.fencing, lease.fencing_token());
    assert!(backend.release(&lease).await.expect("released"));
    assert!(!backend.inspect_lock(&name).await.expect("inspects").is_held());
    backend.ping().await.expect("pings");
}

/// Nodes of other recipes on the same parent take part in the queue: a kazoo `Lock` node
/// (`<hex>__lock__<seq>`) and a Curator `InterProcessMutex` node both exclude us, and once
/// they are gone we get the lock. Fencing tokens keep growing when the parent is re-created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_recipes_exclude_us_and_fencing_survives_parent_recreation() {
    let fixture = ZkFixture::shared().await;
    let backend = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = unique("interop");
    let parent = backend.lock_path(&name);
    raw.mkdir(
        &parent,
        &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .expect("parent");
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let mut tokens = Vec::new();
    for foreign in [
        format!("{parent}/{}__lock__", uuid::Uuid::new_v4().simple()),
        format!("{parent}/_c_{}-lock-", uuid::Uuid::new_v4().hyphenated()),
    ] {
        let (stat, sequence) = raw
            .create(&foreign, b"other-service", &ephemeral)
            .await
            .expect("created");
        let attempt = backend
            .try_acquire(&name, OwnerToken::new(), Duration::from_secs(1))
            .await
            .expect("works");
        assert!(
            matches!(attempt, TryAcquire::Held(_)),
            "{foreign} must exclude us"
        );
        assert_eq!(
            backend
                .inspect_lock(&name)
                .await
                .expect("inspects")
                .owner
                .as_deref(),
            Some("other-service")
        );
        raw.delete(&format!("{foreign}{sequence}"), None)
            .await
            .expect("deleted");
        let TryAcquire::Acquired(lease) = backend
            .try_acquire(&name, OwnerToken::new(), Duration::from_secs(1))
            .await
            .expect("works")
        else {
            panic!("free once the foreign node is gone");
        };
        assert!(lease.fencing_token().map(|t| t.get()) > Some(stat.czxid as u64));
        tokens.push(lease.fencing_token());
        assert!(backend.release(&lease).await.expect("released"));
        // Delete the parent: a re-created parent restarts its sequence, not the czxid.
        raw.delete(&parent, None).await.expect("parent deleted");
        raw.mkdir(
            &parent,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("parent");
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");
    raw.delete(&parent, None).await.expect("parent deleted");
}
