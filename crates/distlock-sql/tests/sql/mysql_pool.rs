//! The MySQL connection pool's life, as the server sees it: never more than `max_connections`
//! connections however many operations run at once, a connection the server killed is
//! replaced without the caller noticing, and `close` says goodbye to the server and makes
//! later operations `Unavailable`. Owns its server (it counts and kills the lock user's
//! connections).
#![cfg(feature = "mysql")]

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Error, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::{MariaDbServer, MARIADB_USER};

/// The lock user's connections open on the server now.
fn connections(server: &MariaDbServer) -> Vec<u64> {
    server
        .sql(&format!(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{MARIADB_USER}'"
        ))
        .expect("reads the process list")
        .lines()
        .map(|id| id.trim().parse().expect("a connection id"))
        .collect()
}

/// Waits up to a second for the server to count `n` connections of the lock user (a closed
/// connection leaves the process list a moment after its client said goodbye).
async fn settles_at(server: &MariaDbServer, n: usize) -> usize {
    let mut open = connections(server).len();
    for _ in 0..20 {
        if open == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        open = connections(server).len();
    }
    open
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_life() {
    let server = tokio::task::spawn_blocking(MariaDbServer::start)
        .await
        .expect("the starter thread")
        .expect("mariadbd starts (install mariadb-server)");
    // The first client creates the table.
    SqlLock::connect(&server.url())
        .await
        .expect("the server answers")
        .close()
        .await;
    let lock = SqlConfig::from_url(&server.url())
        .expect("a valid URL")
        .with_max_connections(2)
        .with_create_table(false)
        .build()
        .await
        .expect("the server answers");
    let ttl = Duration::from_secs(30);

    // Many operations at once share two connections.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let lock = lock.clone();
        tasks.spawn(async move {
            let name = LockName::new(format!("pool-{i}")).expect("valid");
            match lock
                .try_acquire(&name, OwnerToken::new(), ttl)
                .await
                .expect("works")
            {
                TryAcquire::Acquired(lease) => lease,
                TryAcquire::Held(h) => panic!("a fresh name is held: {h:?}"),
            }
        });
    }
    let leases = tasks.join_all().await;
    assert_eq!(
        settles_at(&server, 2).await,
        2,
        "at most max_connections, and both used"
    );

    // The server kills them; the next operations run on new ones, and answer as if nothing
    // happened (a release whose first attempt met a dead connection ran again on a new one).
    for id in connections(&server) {
        server.sql(&format!("KILL CONNECTION {id}")).expect("kills it");
    }
    assert_eq!(settles_at(&server, 0).await, 0, "killed");
    for lease in &leases[..4] {
        assert!(lock.release(lease).await.expect("works on a new connection"));
    }
    assert!(lock.extend(&leases[4], ttl).await.expect("works").is_some());

    // Closing says goodbye to the server; later operations are Unavailable.
    lock.close().await;
    assert_eq!(settles_at(&server, 0).await, 0, "closed");
    let after = lock.release(&leases[5]).await;
    assert!(matches!(after, Err(Error::Unavailable { .. })), "{after:?}");
}
