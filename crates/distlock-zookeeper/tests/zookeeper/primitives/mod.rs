//! Semaphores and read-write locks against the shared ZooKeeper server: permits exact under
//! contention, the permit count agreement, owner-checked release, a dead session's permit
//! freed, readers together and writers alone, a waiting writer keeping later readers out,
//! dropped waits leaving no node, fencing, and the node layout Curator's recipes expect.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockKind,
    LockName, LossReason, OwnerToken, Primitive, TryAcquire,
};
use distlock_testkit::proxy::through_proxies;
use distlock_zookeeper::ZooKeeperLock;
use support::ZkFixture;
use zookeeper_client as zk;

const TTL: Duration = Duration::from_secs(10);

fn unique(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("zk-{label}-{}", &run[..12])).expect("valid")
}

fn waiting(for_at_most: Duration) -> AcquireOptions {
    AcquireOptions::new().wait_for(for_at_most)
}

/// The children of `path` (none if it does not exist).
async fn children(raw: &zk::Client, path: &str) -> Vec<String> {
    match raw.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {path}: {e}"),
    }
}

/// Polls until `check` holds for the children of `path`, for at most `within`.
async fn until_children(
    raw: &zk::Client,
    path: &str,
    within: Duration,
    check: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let now = children(raw, path).await;
        if check(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{path}: still {now:?} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn acquired(attempt: distlock_core::Result<TryAcquire>) -> Lease {
    match attempt.expect("the attempt works") {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("expected a hold, found it held: {holder:?}"),
    }
}

fn held(attempt: distlock_core::Result<TryAcquire>) {
    match attempt.expect("the attempt works") {
        TryAcquire::Held(_) => {}
        TryAcquire::Acquired(lease) => panic!("expected it held, got {lease:?}"),
    }
}

mod all_kinds;
mod rw_locks;
mod semaphores;
