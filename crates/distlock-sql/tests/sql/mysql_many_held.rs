//! Many locks held through one client on MariaDB: the watchdog renews them in a few statements
//! per renewal period (counted by the server's `Com_update`), not one per lock, and loses none;
//! mutexes, and semaphore permits and read holds alike.
#![cfg(feature = "mysql")]

use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient, LockGuard};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::MariaDbServer;
use futures::stream::{self, StreamExt, TryStreamExt};

const HELD: usize = 2_000;
/// The watchdog renews at a third of the TTL: one renewal period is a second.
const TTL: Duration = Duration::from_secs(3);
const PERIODS: u32 = 3;
/// `UPDATE` statements allowed per renewal period: a few batches (holds due within a tenth of
/// the TTL go together), each a few statements, however many locks are held.
const UPDATES_PER_PERIOD: i64 = 25;

/// Global status counters of the server.
fn counter(server: &MariaDbServer, name: &str) -> i64 {
    server
        .sql(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .expect("reads the status")
        .lines()
        .find_map(|line| line.split_once('\t')?.1.trim().parse().ok())
        .expect("a counter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_held_locks_renew_in_a_few_statements_per_period() {
    let server = tokio::task::spawn_blocking(MariaDbServer::start)
        .await
        .expect("the starter thread")
        .expect("mariadbd starts (install mariadb-server)");
    let lock: SqlLock = SqlConfig::from_url(&server.url())
        .expect("a valid URL")
        .with_purge_after(None)
        .expect("no automatic purge")
        .build()
        .await
        .expect("the server answers");
    let client = LockClient::new(lock);
    let opts = AcquireOptions::new().ttl(TTL);
    let guards: Vec<LockGuard> = stream::iter(0..HELD)
        .map(|i| {
            let (client, opts) = (&client, &opts);
            async move {
                client
                    .try_acquire_with(format!("entity-{i}"), opts)
                    .await
                    .map(|g| g.expect("the lock is free"))
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
        .expect("acquired");

    let before = counter(&server, "Com_update");
    tokio::time::sleep(TTL / 3 * PERIODS).await;
    let updates = counter(&server, "Com_update") - before;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    println!("{HELD} held locks: {updates} UPDATE statements in {PERIODS} renewal periods, {lost} lost");
    assert_eq!(lost, 0, "no lock is lost");
    assert!(
        updates <= UPDATES_PER_PERIOD * i64::from(PERIODS),
        "{updates} UPDATE statements renewed {HELD} locks in {PERIODS} renewal periods (at most \
         {UPDATES_PER_PERIOD} per period expected)"
    );
    assert!(updates > 0, "the locks were renewed");
    stream::iter(guards)
        .for_each_concurrent(16, |guard| async move {
            guard.release().await.expect("released");
        })
        .await;
}

/// Semaphore permits and read holds: 400 permits (of 400 semaphores) and 100 read holds, renewed
/// in a few statements per period too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_held_permits_and_reads_renew_in_a_few_statements_per_period() {
    const PERMITS: usize = 400;
    const READS: usize = 100;
    let server = tokio::task::spawn_blocking(MariaDbServer::start)
        .await
        .expect("the starter thread")
        .expect("mariadbd starts (install mariadb-server)");
    let lock: SqlLock = SqlConfig::from_url(&server.url())
        .expect("a valid URL")
        .with_purge_after(None)
        .expect("no automatic purge")
        .build()
        .await
        .expect("the server answers");
    let client = LockClient::new(lock).with_defaults(AcquireOptions::new().ttl(TTL));
    let guards: Vec<LockGuard> = stream::iter(0..PERMITS + READS)
        .map(|i| {
            let client = &client;
            async move {
                if i < PERMITS {
                    let semaphore = client.semaphore(format!("pool-{i}"), 2)?;
                    semaphore
                        .try_acquire()
                        .await
                        .map(|g| g.expect("a permit is free"))
                } else {
                    let rw = client.rw_lock(format!("table-{i}"))?;
                    rw.try_read().await.map(|g| g.expect("no writer"))
                }
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
        .expect("acquired");

    let before = counter(&server, "Com_update");
    tokio::time::sleep(TTL / 3 * PERIODS).await;
    let updates = counter(&server, "Com_update") - before;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let held = guards.len();
    println!("{held} held permits and reads: {updates} UPDATE statements in {PERIODS} renewal periods, {lost} lost");
    assert_eq!(lost, 0, "no hold is lost");
    assert!(
        updates <= UPDATES_PER_PERIOD * i64::from(PERIODS),
        "{updates} UPDATE statements renewed {held} permits and read holds in {PERIODS} renewal \
         periods (at most {UPDATES_PER_PERIOD} per period expected)"
    );
    assert!(updates > 0, "the holds were renewed");
    stream::iter(guards)
        .for_each_concurrent(16, |guard| async move {
            guard.release().await.expect("released");
        })
        .await;
}
