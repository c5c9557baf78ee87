//! Many locks held through one client on PostgreSQL: the watchdog renews them in one statement
//! per batch (counted by the server's `pg_stat_statements`), not one per lock, and loses none.
#![cfg(feature = "postgres")]

use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient, LockGuard};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::{PostgresOptions, PostgresServer};
use futures::stream::{self, StreamExt, TryStreamExt};

const HELD: usize = 2_000;
/// The watchdog renews at a third of the TTL: one renewal period is a second.
const TTL: Duration = Duration::from_secs(3);
const PERIODS: u32 = 3;
/// Renewal statements allowed per renewal period: a few batches (holds due within a tenth of
/// the TTL go together), one statement each, however many locks are held.
const RENEWALS_PER_PERIOD: i64 = 10;

/// The renewal statements run so far: the batched one and the single extend (the only ones
/// here that start with an `UPDATE`).
fn renewal_calls(server: &PostgresServer) -> i64 {
    server
        .sql(
            "SELECT COALESCE(SUM(calls), 0) FROM pg_stat_statements \
             WHERE query LIKE 'WITH m AS (UPDATE%' OR query LIKE 'UPDATE%'",
        )
        .expect("reads pg_stat_statements")
        .trim()
        .parse()
        .expect("a count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_held_locks_renew_in_a_few_statements_per_period() {
    let server = tokio::task::spawn_blocking(|| {
        PostgresServer::start_with(PostgresOptions {
            extra_args: vec!["-c".into(), "shared_preload_libraries=pg_stat_statements".into()],
            ..PostgresOptions::default()
        })
    })
    .await
    .expect("the starter thread")
    .expect("postgres starts (install postgresql and postgresql-contrib)");
    server
        .sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .expect("pg_stat_statements (postgresql-contrib)");
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

    let before = renewal_calls(&server);
    tokio::time::sleep(TTL / 3 * PERIODS).await;
    let renewals = renewal_calls(&server) - before;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    println!("{HELD} held locks: {renewals} renewal statements in {PERIODS} renewal periods, {lost} lost");
    assert_eq!(lost, 0, "no lock is lost");
    assert!(
        renewals <= RENEWALS_PER_PERIOD * i64::from(PERIODS),
        "{renewals} statements renewed {HELD} locks in {PERIODS} renewal periods (at most \
         {RENEWALS_PER_PERIOD} per period expected)"
    );
    assert!(renewals > 0, "the locks were renewed");
    stream::iter(guards)
        .for_each_concurrent(16, |guard| async move {
            guard.release().await.expect("released");
        })
        .await;
}
