//! A hold whose key is deleted behind its holder's back (an operator's `etcdctl del`, a buggy
//! client) is reported lost at once, through a watch on the key, not at the lease's end.

use crate::support;

use std::time::Duration;

use distlock_core::{LockClient, LockName, LossReason};
use distlock_testkit::shared;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_fires_the_lost_signal_as_not_owned() {
    let url = tokio::task::spawn_blocking(shared::etcd_url)
        .await
        .expect("joined")
        .expect("the shared etcd starts (run scripts/install-test-deps)");
    let backend = support::connect(&url).await;
    let client = LockClient::new(backend.clone());
    let name = LockName::new("stolen-behind-its-back").expect("a name");
    let guard = client.try_acquire(&name).await.expect("try").expect("free");
    let prefix = backend.lock_prefix(&name);
    support::etcdctl(&url, &["del", "--prefix", &prefix])
        .await
        .expect("etcdctl deletes the holder's key");
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lost signal fires within 5 s of the deletion (the lease lives on)");
    assert_eq!(reason, LossReason::NotOwned);
    assert!(
        backend.lease_id().is_some(),
        "the client's lease lives on: only the one hold is lost"
    );
}
