//! Two clients whose session clocks differ by 16 hours still never hold a lock together, and
//! expiry happens after the TTL, not hours early or late.
//!
//! The backend never reads a client clock: every expiry is computed and compared inside one
//! statement with the server's `UTC_TIMESTAMP(6)`. What a client *can* skew is its session's
//! `NOW()` (through `time_zone`); a design comparing `NOW()`-based `DATETIME`s would see the
//! other client's lock as expired (or eternal). This test gives the two clients different
//! session time zones (proved by their `NOW()`s) and checks exclusion and expiry timing.
#![cfg(feature = "mysql")]

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockName, OwnerToken, TryAcquire,
};
use distlock_sql::SqlConfig;
use sqlx::{Connection, MySqlConnection};
use tokio::time::Instant;

async fn session_offset_hours(url: &str) -> i64 {
    let mut conn = MySqlConnection::connect(url).await.expect("connects");
    let hours = sqlx::query_scalar("SELECT TIMESTAMPDIFF(HOUR, UTC_TIMESTAMP(), NOW())")
        .fetch_one(&mut conn)
        .await
        .expect("works");
    let _ = conn.close().await;
    hours
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_session_clocks_never_share_a_lock() {
    let base = match std::env::var(distlock_testkit::shared::MYSQL_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
            .await
            .expect("the starter thread")
            .expect("the shared mariadbd starts"),
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    let east = format!("{base}{sep}timezone=%2B09:00");
    let west = format!("{base}{sep}timezone=-07:00");
    assert_eq!(session_offset_hours(&east).await, 9);
    assert_eq!(session_offset_hours(&west).await, -7);

    let a = SqlConfig::from_url(&east)
        .expect("valid")
        .build()
        .await
        .expect("connects");
    let b = SqlConfig::from_url(&west)
        .expect("valid")
        .build()
        .await
        .expect("connects");
    let name = LockName::new(format!("skew-{}", uuid::Uuid::new_v4())).expect("valid");
    let ttl = Duration::from_millis(1500);

    for (holder, waiter) in [(&a, &b), (&b, &a)] {
        let started = Instant::now();
        let TryAcquire::Acquired(lease) = holder
            .try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("works")
        else {
            panic!("the lock is free");
        };
        // The other client sees it held, with about the TTL left (not hours more or less).
        match waiter
            .try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("works")
        {
            TryAcquire::Held(h) => {
                let left = h.remaining.expect("the remaining time is known");
                assert!(
                    left <= ttl && left > ttl / 2,
                    "remaining {left:?} for a {ttl:?} TTL"
                );
            }
            TryAcquire::Acquired(_) => panic!("two clients hold the lock at once"),
        }
        // Waiting gets it only once the TTL has passed by the server's clock.
        let client = LockClient::new(waiter.clone());
        let guard = client
            .acquire_with(
                &name,
                &AcquireOptions::new().ttl(ttl).wait_for(Duration::from_secs(10)),
            )
            .await
            .expect("acquired after expiry");
        let waited = started.elapsed();
        assert!(
            waited >= ttl - Duration::from_millis(50) && waited < ttl + Duration::from_secs(2),
            "acquired after {waited:?} with a {ttl:?} TTL"
        );
        // The expired holder can neither extend nor release the new holder's lock.
        assert!(holder.extend(&lease, ttl).await.expect("works").is_none());
        assert!(!holder.release(&lease).await.expect("works"));
        assert!(guard.release().await.expect("works"));
    }
}
