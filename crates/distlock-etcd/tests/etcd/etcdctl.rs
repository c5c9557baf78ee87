//! etcd's own lock (`etcdctl lock`, its Go client's `concurrency.Mutex`) and a distlock
//! client on one name, given [`EtcdLock::lock_prefix`]: they exclude each other in both
//! directions and queue in one order, on a real etcd.

use crate::etcdctl_child::{client, fresh, url, EtcdctlChild, SOON};
use crate::support;

use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient, LockGuard, LockName};
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

/// How long a contender that must keep waiting is watched for not getting in.
const A_WHILE: Duration = Duration::from_millis(1500);

/// A running `etcdctl lock <prefix>`: it prints the lock's key once it holds the lock and
/// holds it until interrupted (SIGINT), when it unlocks and exits.
struct EtcdctlLock(EtcdctlChild);

impl EtcdctlLock {
    /// Starts `etcdctl lock` on `prefix` (without its trailing `/`, which etcdctl adds).
    fn start(url: &str, prefix: &str) -> Self {
        Self(EtcdctlChild::start(
            url,
            &["lock", "--ttl=5", prefix.trim_end_matches('/')],
        ))
    }

    /// Waits until it says it holds the lock (prints the key, which must be under `prefix`).
    async fn held(&mut self, prefix: &str) {
        let key = self.0.line("the lock's key once it holds the lock").await;
        assert!(
            key.starts_with(prefix),
            "etcdctl's key {key:?} is under {prefix:?}"
        );
    }

    /// Asserts that it does not get the lock for a while.
    async fn keeps_waiting(&mut self, what: &str) {
        if let Some(line) = self.0.line_within(A_WHILE).await {
            panic!("{what}: etcdctl got the lock ({line:?})");
        }
        assert!(self.0.runs(), "{what}: etcdctl exited while waiting");
    }

    /// Interrupts it (it unlocks) and waits for it to exit.
    async fn release(self) {
        self.0.interrupt().await;
    }
}

/// Waits until `count` contenders are in line under `prefix`.
async fn in_line(url: &str, prefix: &str, count: usize) {
    let until = Instant::now() + SOON;
    loop {
        let listing = support::etcdctl(url, &["get", prefix, "--prefix", "--keys-only"])
            .await
            .expect("etcdctl lists the keys");
        let seen = listing.lines().filter(|l| !l.trim().is_empty()).count();
        if seen == count {
            return;
        }
        assert!(Instant::now() < until, "{count} contenders in line (saw {seen})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A distlock acquisition of `name` waiting in the background.
fn waiting(client: &LockClient, name: &LockName) -> JoinHandle<LockGuard> {
    let (client, name) = (client.clone(), name.clone());
    tokio::spawn(async move {
        client
            .acquire_with(&name, &AcquireOptions::new().wait_for(Duration::from_secs(60)))
            .await
            .expect("distlock gets the lock in the end")
    })
}

/// Asserts that a distlock wait is still waiting after a while.
async fn still_waiting(wait: &JoinHandle<LockGuard>, what: &str) {
    tokio::time::sleep(A_WHILE).await;
    assert!(!wait.is_finished(), "{what}: distlock got the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_holding_excludes_distlock_until_it_exits() {
    let url = url().await;
    let (client, backend) = client(&url).await;
    let name = fresh("etcdctl-holds");
    let prefix = backend.lock_prefix(&name);
    let mut etcdctl = EtcdctlLock::start(&url, &prefix);
    etcdctl.held(&prefix).await;
    assert!(
        client.try_acquire(&name).await.expect("try").is_none(),
        "distlock's try finds the lock etcdctl holds held"
    );
    let wait = waiting(&client, &name);
    still_waiting(&wait, "while etcdctl holds").await;
    etcdctl.release().await;
    let guard = timeout(SOON, wait)
        .await
        .expect("distlock's waiter gets it once etcdctl exits")
        .expect("joined");
    assert!(guard.release().await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distlock_holding_makes_etcdctl_wait_until_it_releases() {
    let url = url().await;
    let (client, backend) = client(&url).await;
    let name = fresh("distlock-holds");
    let prefix = backend.lock_prefix(&name);
    let guard = client.try_acquire(&name).await.expect("try").expect("free");
    let mut etcdctl = EtcdctlLock::start(&url, &prefix);
    in_line(&url, &prefix, 2).await;
    etcdctl.keeps_waiting("while distlock holds").await;
    assert!(guard.release().await.expect("released"));
    etcdctl.held(&prefix).await;
    etcdctl.release().await;
    in_line(&url, &prefix, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_and_distlock_are_granted_in_arrival_order() {
    let url = url().await;
    let (client, backend) = client(&url).await;
    let name = fresh("one-queue");
    let prefix = backend.lock_prefix(&name);
    // A distlock holder, then alternately: etcdctl, distlock, etcdctl, each in line before
    // the next arrives.
    let first = client.try_acquire(&name).await.expect("try").expect("free");
    let mut second = EtcdctlLock::start(&url, &prefix);
    in_line(&url, &prefix, 2).await;
    let third = waiting(&client, &name);
    in_line(&url, &prefix, 3).await;
    let mut fourth = EtcdctlLock::start(&url, &prefix);
    in_line(&url, &prefix, 4).await;

    let token = first.fencing_token();
    assert!(first.release().await.expect("released"));
    second.held(&prefix).await;
    still_waiting(&third, "after the first release (etcdctl arrived first)").await;
    fourth.keeps_waiting("after the first release").await;

    second.release().await;
    let third = timeout(SOON, third)
        .await
        .expect("distlock's waiter is next after etcdctl")
        .expect("joined");
    assert!(
        third.fencing_token() > token,
        "fencing tokens grow along the queue"
    );
    fourth.keeps_waiting("while the distlock waiter holds").await;

    assert!(third.release().await.expect("released"));
    fourth.held(&prefix).await;
    fourth.release().await;
    in_line(&url, &prefix, 0).await;
}
