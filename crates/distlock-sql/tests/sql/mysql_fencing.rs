//! Fencing tokens on MariaDB keep growing across release, expiry, and a row deleted by hand.
#![cfg(feature = "mysql")]

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, LockName, OwnerToken, TryAcquire};
use distlock_sql::SqlLock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_survives_release_expiry_and_deleted_rows() {
    let url = match std::env::var(distlock_testkit::shared::MYSQL_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
            .await
            .expect("the starter thread")
            .expect("the shared mariadbd starts"),
    };
    let lock = SqlLock::connect(&url).await.expect("connects");
    let admin = sqlx::MySqlPool::connect(&url).await.expect("connects");
    let name = LockName::new(format!("fence-{}", uuid::Uuid::new_v4())).expect("valid");
    let mut last = None;
    for round in 0..6 {
        let lease = match lock
            .try_acquire(&name, OwnerToken::new(), Duration::from_millis(30))
            .await
            .expect("works")
        {
            TryAcquire::Acquired(lease) => lease,
            TryAcquire::Held(h) => panic!("round {round}: held {h:?}"),
        };
        assert!(
            lease.fencing_token() > last,
            "round {round}: {:?} after {last:?}",
            lease.fencing_token()
        );
        last = lease.fencing_token();
        match round % 3 {
            0 => assert!(lock.release(&lease).await.expect("works")),
            1 => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => {
                sqlx::query("DELETE FROM distlock_locks WHERE lock_name = ?")
                    .bind(name.as_str())
                    .execute(&admin)
                    .await
                    .expect("deletes");
            }
        }
    }
}
