//! The mutex end to end on a real etcd: exclusion, fencing, FIFO handoff, release.

use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient};
use distlock_etcd::EtcdLock;
use distlock_testkit::EtcdServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_exclude_each_other_and_hand_over_in_order() {
    let server = tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .expect("joined")
        .expect("etcd starts (run scripts/install-test-deps)");
    let url = format!("{}?lease_ttl=3s", server.url());
    let a = LockClient::new(EtcdLock::connect_url(&url).await.expect("connects"));
    let b = LockClient::new(EtcdLock::connect_url(&url).await.expect("connects"));
    let first = a.try_acquire("job").await.expect("try").expect("free");
    assert!(b.try_acquire("job").await.expect("try").is_none(), "held by a");
    let waiting = tokio::spawn(async move {
        b.acquire_with("job", &AcquireOptions::new().wait_for(Duration::from_secs(10)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let token = first.fencing_token();
    first.release().await.expect("released");
    let second = waiting.await.expect("joined").expect("b gets it");
    assert!(second.fencing_token() > token, "fencing grows");
    second.release().await.expect("released");
}
