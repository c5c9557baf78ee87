//! The lock recipe's corner cases on the shared server: sequence numbers a failed
//! `try_acquire` burns, the held node's watch after a data change, an orphan node carrying our
//! protected prefix, and the owner-checked release of a lease without a handle.

use crate::support;

use std::time::{Duration, Instant};

use distlock_core::{
    Attempt, DistributedLock, DistributedLockExt, Lease, LockClient, LockName, LossReason, OwnerToken,
    TryAcquire,
};
use distlock_zookeeper::ZooKeeperLock;
use support::ZkFixture;
use zookeeper_client as zk;

const TTL: Duration = Duration::from_secs(10);

fn unique(what: &str) -> LockName {
    LockName::new(format!("recipe-{what}-{}", uuid::Uuid::new_v4().simple())).expect("a valid name")
}

/// The sequence number at the end of a child's name.
fn sequence(child: &str) -> i64 {
    child[child.len() - 10..].parse().expect("a 10-digit sequence")
}

/// Creates `<lock path>/<prefix>` as an ephemeral-sequential node of `raw`'s session (and
/// the parent if missing); returns the child's name.
async fn plant(raw: &zk::Client, lock: &ZooKeeperLock, name: &LockName, prefix: &str) -> String {
    let parent = lock.lock_path(name);
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match raw.mkdir(&parent, &persistent).await {
        Ok(()) | Err(zk::Error::NodeExists) => {}
        Err(e) => panic!("creating {parent}: {e}"),
    }
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (_, seq) = raw
        .create(&format!("{parent}/{prefix}"), b"planted", &options)
        .await
        .expect("the planted node is created");
    format!("{prefix}{seq}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_try_acquire_burns_no_sequence_number() {
    let fixture = ZkFixture::shared().await;
    let holder = support::connect(fixture.url()).await;
    let other = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = unique("burn");
    let held = holder
        .try_acquire(&name, OwnerToken::new(), TTL)
        .await
        .expect("the holder's attempt");
    assert!(matches!(held, TryAcquire::Acquired(_)));
    let first = sequence(&fixture.contenders(&name).await.expect("listed")[0]);
    const TRIES: i64 = 5;
    for _ in 0..TRIES {
        let tried = other
            .try_acquire(&name, OwnerToken::new(), TTL)
            .await
            .expect("a failed attempt is no error");
        assert!(matches!(tried, TryAcquire::Held(_)));
    }
    let probe = plant(&raw, &holder, &name, "probe-lock-").await;
    let burned = sequence(&probe) - first - 1;
    println!("sequence numbers burned by {TRIES} failed try_acquire calls: {burned}");
    assert_eq!(burned, 0, "each failed try_acquire created and deleted a node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_after_a_data_change_fires_the_lost_signal() {
    let fixture = ZkFixture::shared().await;
    let client = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let name = unique("revoke");
    let guard = client.acquire(name.clone()).await.expect("acquired");
    let lock = support::connect(fixture.url()).await;
    let node = format!(
        "{}/{}",
        lock.lock_path(&name),
        fixture.contenders(&name).await.expect("listed")[0]
    );
    // Curator's revoker writes this into the holder's node.
    raw.set_data(&node, b"__REVOKE__", None).await.expect("set_data");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!guard.is_lost(), "a data change is no loss");
    raw.delete(&node, None)
        .await
        .expect("deleted behind the holder's back");
    let deleted_at = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("the lost signal fires within a second of the deletion");
    println!("lost after {:?}: {reason:?}", deleted_at.elapsed());
    assert_eq!(reason, LossReason::NotOwned);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_with_our_prefix_does_not_block_us() {
    let fixture = ZkFixture::shared().await;
    let lock = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = unique("orphan");
    let owner = OwnerToken::new();
    // What a lost `create` reply leaves: a node with our protected prefix, ahead of us.
    let orphan = plant(&raw, &lock, &name, &format!("_c_{owner}-lock-")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let lease = lock
        .wait_queued(&Attempt::mutex(name.clone(), owner, TTL), Some(deadline))
        .await
        .expect("no error");
    assert!(
        lease.is_some(),
        "we waited behind our own orphan {orphan} until the deadline"
    );
    let ours: Vec<String> = fixture
        .contenders(&name)
        .await
        .expect("listed")
        .into_iter()
        .filter(|c| c.contains(&owner.to_string()))
        .collect();
    assert_eq!(ours.len(), 1, "exactly one node of ours remains: {ours:?}");
    // The same for a single attempt.
    let name = unique("orphan-try");
    let owner = OwnerToken::new();
    plant(&raw, &lock, &name, &format!("_c_{owner}-lock-")).await;
    let tried = lock.try_acquire(&name, owner, TTL).await.expect("no error");
    assert!(
        matches!(tried, TryAcquire::Acquired(_)),
        "try_acquire behind our own orphan"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_without_handle_finds_our_node_by_owner() {
    let fixture = ZkFixture::shared().await;
    let lock = support::connect(fixture.url()).await;
    let name = unique("nohandle");
    let owner = OwnerToken::new();
    let acquired = lock.try_acquire(&name, owner, TTL).await.expect("attempt");
    assert!(matches!(acquired, TryAcquire::Acquired(_)));
    // Another owner's handle-less release frees nothing.
    let stranger = Lease::new(name.clone(), OwnerToken::new(), TTL, tokio::time::Instant::now());
    assert!(!lock.release(&stranger).await.expect("release"));
    assert_eq!(fixture.contenders(&name).await.expect("listed").len(), 1);
    // The core's cleanup after an ambiguous attempt: owner and name, no handle.
    let cleanup = Lease::new(name.clone(), owner, TTL, tokio::time::Instant::now());
    let released = lock.release(&cleanup).await.expect("release");
    let left = fixture.contenders(&name).await.expect("listed");
    assert!(released && left.is_empty(), "released={released}, left={left:?}");
    // And from another client (session) too: the owner token alone identifies the node.
    let owner = OwnerToken::new();
    assert!(matches!(
        lock.try_acquire(&name, owner, TTL).await.expect("attempt"),
        TryAcquire::Acquired(_)
    ));
    let other = support::connect(fixture.url()).await;
    let cleanup = Lease::new(name.clone(), owner, TTL, tokio::time::Instant::now());
    assert!(other.release(&cleanup).await.expect("release"));
    assert!(fixture.contenders(&name).await.expect("listed").is_empty());
}

/// A foreign contender whose name ends in a hyphen and the server's 10-digit sequence
/// (`x-0000000005`) is ordered by that sequence: the hyphen is part of its prefix, not a
/// minus sign (a negative sequence is `%010d`, `-000000005`, never a hyphen and ten digits
/// starting with 0). Created after our holder's node, it is queued behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_name_ending_in_a_hyphen_is_queued_by_its_sequence() {
    let fixture = ZkFixture::shared().await;
    let holder = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = unique("foreign-hyphen");
    let owner = OwnerToken::new();
    let held = holder
        .try_acquire(&name, owner, TTL)
        .await
        .expect("the holder's attempt");
    assert!(matches!(held, TryAcquire::Acquired(_)));
    let planted = plant(&raw, &holder, &name, "x-").await;
    assert!(sequence(&planted) > 0, "{planted}");

    let state = holder.inspect_lock(&name).await.expect("inspected");
    assert_eq!(
        state.owner.as_deref(),
        Some(owner.to_string().as_str()),
        "the first contender is the holder, not {planted:?} (created after it)"
    );
}

/// At the edge of the server's sequence counter (nodes created by name, as the server would
/// name them around its wrap from 2147483647 to -2147483648): the queue stays in arrival
/// order. Curator and kazoo compare the sequences as text, which puts every negative
/// sequence before every positive one and, among negatives, the later before the earlier
/// (`-2147483647` before `-2147483648`): a newcomer would sort ahead of the holder, a second
/// holder. Arrival order keeps one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_keeps_arrival_order_across_the_counters_wrap() {
    let fixture = ZkFixture::shared().await;
    let lock = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = unique("wrap");
    let parent = lock.lock_path(&name);
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    raw.mkdir(&parent, &persistent)
        .await
        .expect("the parent is created");
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    // In arrival order, as the counter draws them.
    let arrivals = ["2147483646", "2147483647", "-2147483648", "-2147483647"];
    for (i, sequence) in arrivals.iter().enumerate() {
        let child = format!("_c_{}-lock-{sequence}", uuid::Uuid::new_v4());
        raw.create(
            &format!("{parent}/{child}"),
            format!("arrival-{i}").as_bytes(),
            &ephemeral,
        )
        .await
        .expect("created by name");
    }
    for (i, sequence) in arrivals.iter().enumerate() {
        let state = lock.inspect_lock(&name).await.expect("inspected");
        assert_eq!(
            state.owner.as_deref(),
            Some(format!("arrival-{i}").as_str()),
            "the holder after {i} releases is arrival {i} (sequence {sequence})"
        );
        let first = fixture.contenders(&name).await.expect("listed");
        let holder = first
            .iter()
            .find(|c| c.ends_with(&format!("-lock-{sequence}")))
            .expect("the holder's node is listed");
        raw.delete(&format!("{parent}/{holder}"), None)
            .await
            .expect("released");
    }
}
