//! The backend's PostgreSQL sessions run READ COMMITTED whatever the database's default: under
//! a `default_transaction_isolation` of REPEATABLE READ, a release's read of the queue of
//! waiters would see the snapshot taken when its call began, and miss a waiter queued while the
//! release waited for the lock's row (a lost wake: the waiter sleeps until its safety net).
//!
//! A trigger on the queue, created by the test only, holds a waiter's attempt open for a
//! while after it queued, so that the release surely starts (and takes its snapshot) while the
//! attempt, which holds the lock's row, has not committed yet.
#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient};
use distlock_sql::SqlConfig;
use sqlx::Connection;

use crate::postgres_support as support;

/// The waiter's polls: only a notification can wake it within [`PROMPT`].
const LONG_POLL: Duration = Duration::from_secs(20);
/// How long the trigger holds a waiter's queuing attempt open.
const HELD_OPEN: Duration = Duration::from_millis(800);
/// Generous: the release waits out [`HELD_OPEN`], then notifies within milliseconds.
const PROMPT: Duration = Duration::from_secs(5);

async fn client(url: &str) -> LockClient {
    LockClient::new(
        SqlConfig::from_url(url)
            .expect("a valid URL")
            .with_operation_timeout(Duration::from_secs(10))
            .build()
            .await
            .expect("connects"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_under_a_repeatable_read_default_wakes_a_waiter_queued_meanwhile() {
    let server = support::own_server().await;
    let url = server.url();
    server
        .sql("ALTER DATABASE distlock_test SET default_transaction_isolation = 'repeatable read'")
        .expect("sets the database's default");
    let mut plain = sqlx::PgConnection::connect(&url).await.expect("connects");
    let default: String = sqlx::query_scalar("SHOW transaction_isolation")
        .fetch_one(&mut plain)
        .await
        .expect("reads it");
    assert_eq!(default, "repeatable read", "the database's default applies");

    let holder = client(&url).await;
    let waiter = client(&url).await;
    server
        .sql(&format!(
            "CREATE FUNCTION hold_open() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM pg_sleep({}); RETURN NEW; END $$; \
             CREATE TRIGGER hold_open AFTER INSERT ON distlock_locks_waiters \
             FOR EACH ROW EXECUTE FUNCTION hold_open();",
            HELD_OPEN.as_secs_f64()
        ))
        .expect("creates the trigger");

    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(60))
        .wait_for(Duration::from_secs(60))
        .poll_interval(LONG_POLL, LONG_POLL);
    let guard = holder
        .acquire_with("isolation-mutex", &opts)
        .await
        .expect("acquired");
    let started = Instant::now();
    let waiting = tokio::spawn({
        let opts = opts.clone();
        async move {
            let guard = waiter
                .acquire_with("isolation-mutex", &opts)
                .await
                .expect("the waiter acquires");
            let at = Instant::now();
            assert!(guard.release().await.expect("released"));
            at
        }
    });
    // The waiter's attempt is queuing now, held open by the trigger.
    tokio::time::sleep(HELD_OPEN / 2).await;
    assert!(guard.release().await.expect("released"));
    let acquired = tokio::time::timeout(PROMPT, waiting).await;
    let took = started.elapsed();
    assert!(
        acquired.is_ok(),
        "the waiter did not hold the lock {took:?} after it began waiting: the release missed \
         it (its next poll was {LONG_POLL:?} away)"
    );
}
